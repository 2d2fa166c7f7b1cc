// Options of the daemon's modules, gathered into DaemonOptions.
//
// Plain structs with their defaults written next to each field (leveldb
// options.h style). fedfsd/config.h fills a DaemonOptions from the YAML file;
// tests build them directly. There is no global configuration object: each
// module receives its own struct by value at construction and never sees the
// others. docs/config.md documents every field.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cluster/options.h"  // Millis, RingOptions, MembershipOptions
#include "migration/access.h"   // AccessOptions

namespace fedfs::daemon {

// Transport settings handed to the UCX engine (m2m/ucx_transport.h).
struct TransportConfig {
  // UCX_TLS: transports UCX may use ("tcp", "tcp,sm", "rc,ud,sm", ...).
  std::string tls = "tcp";
  // UCX_NET_DEVICES: network devices ("" = all; "lo"; "eth0"; "mlx5_0:1").
  std::string net_devices;
  // Largest RPC payload accepted.
  size_t max_message_bytes = 64u << 20;
  // How long the progress thread busy-polls after its last event before it
  // sleeps in epoll (m2m::UcxOptions::spin_us).
  uint32_t spin_us = 50;
  // The same while an answer is due (m2m::UcxOptions::spin_pending_us).
  uint32_t spin_pending_us = 400;
};

// Timeouts, all in milliseconds in the YAML file.
struct TimeoutOptions {
  Millis rpc{2000};                 // default deadline of a remote call
  Millis heartbeat_interval{200};   // see MembershipOptions
  Millis failure_timeout{1500};     // see MembershipOptions
  Millis connect{1000};             // connect + authentication handshake
  // A file-service session not renewed for this long ends at its server
  // (files/file_service.h, session_lease); 0: never.
  Millis session_lease{30000};
  // What a node caches of another's files it uses for at most this long
  // without an answer from it; a change that node could not be told of is
  // acknowledged only after it (files/file_service.h, cache_lease); 0: no
  // such bound.
  Millis cache_lease{5000};
};

// The FUSE mount (fuse/fuse_frontend.h, docs/namespace.md "The FUSE mount").
struct FuseConfig {
  bool mount = true;                // false: serve other nodes only, mount nothing
  double entry_timeout_s = 0;       // kernel name cache; 0 is exact across nodes
  double attr_timeout_s = 0;        // kernel attribute cache; 0 is exact across nodes
  // Names and attributes cached by the kernel, kept coherent by invalidation
  // (needs FUSE 7.44, Linux 6.16; docs/namespace.md "Kernel caches").
  bool kernel_cache = true;
  // With kernel_cache: the kernel keeps the pages of files held on other
  // nodes across opens while their node tells this one of every change
  // (docs/coopcache.md, "Kernel page cache").
  bool keep_cache = true;
  // With kernel_cache and default_permissions: a read-only open of a file
  // held on another node that watches it for this one is answered without
  // asking it (docs/namespace.md, "Opens without a round trip").
  bool deferred_open = true;
  uint32_t max_threads = 16;        // FUSE worker threads at most
  uint32_t read_ahead_kb = 1024;    // the mount's read-ahead window (0: the kernel's)
  uint32_t spin_us = 50;            // a worker reads /dev/fuse this long before sleeping
  bool io_uring = true;             // requests over io_uring when the kernel offers it
  bool allow_other = true;          // -o allow_other
  bool default_permissions = true;  // -o default_permissions (kernel checks modes)
};

// Placement of new files (vd/placement.h; docs/config.md).
struct PlacementRuleConfig {
  std::string prefix;  // global path prefix
  std::string policy;  // local | hash | most-free, or "" with `node`
  std::string node;    // a fixed node id
};
struct PlacementConfig {
  std::string policy = "local";
  std::vector<PlacementRuleConfig> rules;
};

// What this node lets other nodes do (docs/config.md "security"): applied by
// the FileService (files/file_service.h) to every request from another
// node, never to this node's own mount.
struct SecurityConfig {
  bool root_squash = false;     // uid 0 -> squash_uid, gid 0 -> squash_gid, group 0 removed
  uint32_t squash_uid = 65534;  // 1..4294967294 (nobody)
  uint32_t squash_gid = 65534;  // 1..4294967294 (nogroup)
};

// This node's directory table (vd/dir_table.h; docs/config.md).
struct DirectoryTableConfig {
  size_t entries = 4096;                // 0: no table (every lookup asks the manager)
  size_t bytes = size_t{64} << 20;      // memory bound of the cached VDs
  // Leases (docs/namespace.md, "Leases"): changes in a row after which a
  // manager lends a VD to the node making them (0: never), and their term.
  uint32_t lend_after = 3;
  std::chrono::milliseconds lease{1000};
  // A manager answers a lookup without a copy for its name only (and
  // records the node for names only) in a VD with more entries than this
  // (docs/namespace.md, "Large directories"); 0: always whole.
  size_t whole_max_entries = 16384;
  // A create claims its name and adds its entry in one call to the
  // directory's manager (docs/namespace.md, "Creates in one round trip");
  // false: a claim, then the add.
  bool add_new = true;
  // Changes reach sharers' whole copies as deltas (docs/namespace.md,
  // "Changes as deltas"); false: as invalidations.
  bool deltas = false;
};

// Multi-node directory rename and rmdir (docs/faults.md, "Directory
// operations with dead members"): with record_dead_members, they go ahead
// while a member is dead (a majority alive) and the member applies them when
// it returns; off (the default), they answer EHOSTDOWN until it is back.
// Off by default: a member held dead until it applied serves its own mount
// meanwhile, which the file moves' notifications miss (docs/faults.md).
struct DirectoryOpsConfig {
  bool record_dead_members = false;
};

// The node's cache of other nodes' file data (docs/coopcache.md): `size`
// bytes in blocks of `block` (a power of two, 4 KiB .. 64 MiB); 0: off.
// `share`: its blocks are readable by other nodes, and this node reads other
// nodes' (cooperation); false keeps the cache to this node.
struct CoopCacheConfig {
  size_t size = 0;
  size_t block = size_t{256} << 10;
  bool share = true;
  // N-chance forwarding: times an evicted last copy is forwarded (0: never).
  uint32_t forward = 2;
  // The cache shrinks below this much available memory (0: 5% of it).
  uint64_t min_free = 0;
  // A sequential read goes past the cache after this many bytes (0: never).
  uint64_t stream_after = uint64_t{4} << 20;
};

// File moves (docs/migration.md). on_full: a write or a create that finds
// no room at its node (docs/migration.md, "On a full disk"; the meaning of
// each field is VfsOptions::Room's).
struct MigrationConfig {
  struct OnFull {
    bool enabled = true;
    uint64_t max_size = uint64_t{1} << 30;
    std::chrono::milliseconds max_wait{30000};
    uint64_t min_free = uint64_t{16} << 20;
  } on_full;
  // fedfsctl rebalance: how near the mean each node's share of its space
  // in use must come (0.05: 5 points), and the smallest file it moves.
  struct Rebalance {
    double threshold = 0.05;
    uint64_t min_size = uint64_t{1} << 20;
  } rebalance;
  // A file read or written mostly through one other node moves there
  // (docs/migration.md, "By access"). Off by default.
  ns::AccessOptions on_access;
};

// Watching the export root for changes made behind FedFS' back
// (watch/local_watch.h; docs/namespace.md "Autonomy").
struct AutonomyConfig {
  bool watch = true;           // false: only changes made through FedFS are seen
  size_t max_watches = 65536;  // inotify watches at most (LRU beyond)
};

// The Prometheus endpoint (docs/metrics.md): "host:port" it listens on,
// port 0 for a free one; "" serves none (fedfsctl metrics still answers).
struct MetricsConfig {
  std::string listen = "127.0.0.1:9480";
};

// Everything one fedfsd process is configured with.
struct DaemonOptions {
  std::string config_path;  // where these came from (for messages)
  std::string node_id;      // required
  // required, 1..65534, unique in the federation: the high 16 bits of the
  // inode numbers of files this node holds (vfs/vfs.h).
  uint32_t node_tag = 0;
  std::string listen;       // required, "host:port"
  std::string export_root;  // required, an existing directory
  std::string mountpoint;   // required (used by the FUSE frontend later)
  std::vector<std::string> peers;  // seeds; may be empty for the first node
  std::string cluster_key_file;    // required, 64 hex digits, mode 0600/0400
  std::string control_socket;      // default /run/fedfs/<node_id>.sock
  // Durable state (the journal of multi-node directory operations, RocksDB);
  // default /var/lib/fedfs/<node_id>.
  std::string state_dir;
  std::string log_level = "info";  // trace, debug, info, warn, error, off
  TransportConfig transport;
  TimeoutOptions timeouts;
  RingOptions ring;
  FuseConfig fuse;
  PlacementConfig placement;
  DirectoryTableConfig directory_table;
  DirectoryOpsConfig directory_ops;
  AutonomyConfig autonomy;
  SecurityConfig security;
  CoopCacheConfig coopcache;
  MigrationConfig migration;
  MetricsConfig metrics;
};

// The membership options implied by a daemon's options (advertise_addr is
// the transport's listen address, filled in once listening).
MembershipOptions MembershipOptionsFrom(const DaemonOptions& o, const std::string& advertise_addr);

}  // namespace fedfs::daemon
