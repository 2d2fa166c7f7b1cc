// node/: one node's namespace, wired. Every FedFS node runs the same parts:
// the file-data service other nodes call (files/), the VD service with its
// managers and directory table (vd/), the per-node facade (vfs/) and the
// journaled multi-node directory operations (dirops/). A Node builds them and
// connects them with the policy that belongs between them: the facade's
// blocking client of the VD service (claims and locks another node holds are
// waited out), the autonomy reports (what the watcher saw in the export root
// becomes VD updates, a burst per directory becomes one rebuild), the kernel
// caches dropped when the membership epoch changes or a change arrived behind
// the kernel's back, and the placement of new entries.
//
// What differs between the daemon and the simulator comes in a NodeEnv: the
// transport (UCX or the fake network), the cluster view (membership or one
// built directly), the export root (LocalNodeFs or MemNodeFs), the KV of the
// journal (RocksDB or memory), the executor of blocking service work. fedfsd/
// and bench/sim/ both build their nodes here, so the simulator runs exactly
// the daemon's operations (docs/design.md, "Parts and their arrows").
//
// Threads: Create, Recover, StopClients and the destructor on one thread (the
// owner's). The facade is called from any number of threads (FUSE workers);
// ReportLocalChanges, DropLostDirs and LocalAttrsChanged from the watcher's
// thread; SetKernelCache from the owner's. Callbacks from the services run on
// the transport's progress context and the executor.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "coopcache/block_cache.h"
#include "coopcache/forwarder.h"
#include "coopcache/memory_guard.h"
#include "coopcache/peer_fetch.h"
#include "dirops/dir_ops.h"
#include "dirops/pending_service.h"
#include "migration/access.h"
#include "migration/migration.h"
#include "files/file_service.h"
#include "vd/placement.h"
#include "vd/vd_service.h"
#include "vfs/vfs_impl.h"
#include "watch/local_watch.h"

namespace fedfs {
class Executor;
namespace m2m {
class Transport;
}
namespace ns {
class FsCallbacks;
class Kv;
}  // namespace ns
}  // namespace fedfs

namespace fedfs::node {

struct NodeOptions {
  std::string node_id;
  // Where peers reach this node (its transport's listen address): told to
  // the nodes whose files it opens, which call back there.
  std::string address;
  std::chrono::milliseconds rpc_timeout{2000};
  size_t dt_entries = 4096;        // VdServiceOptions
  size_t dt_bytes = size_t{64} << 20;
  uint32_t lend_after = 3;  // VdServiceOptions (leases)
  std::chrono::milliseconds lease_term{1000};
  size_t whole_max_entries = 16384;  // VdServiceOptions (large directories)
  bool add_new = true;               // VdServiceOptions (creates in one round trip)
  bool deltas = true;                // VdServiceOptions (changes as deltas to sharers)
  // The cache of other nodes' file data (docs/coopcache.md); size_bytes 0:
  // none.
  coop::BlockCacheOptions cache;
  // Whether the cache cooperates: its blocks readable by other nodes, and
  // theirs read here (docs/coopcache.md). Needs `address`.
  bool share_cache = true;
  // N-chance forwarding (docs/coopcache.md): how often an evicted block that
  // is the last copy in the federation's memory is forwarded to a peer's
  // cache (0: never). Needs share_cache.
  uint32_t cache_forward = 2;
  // Whether forwarding runs on NodeEnv::pool instead of a thread of its own
  // (the simulator, whose nodes share one thread).
  bool cache_forward_on_pool = false;
  // The cache shrinks while the machine has less memory available than
  // this (coopcache/memory_guard.h); 0: 5% of its memory.
  uint64_t cache_min_free = 0;
  // Whether that check runs (a thread of its own reading the machine's
  // memory); false in the simulator, whose nodes share one process.
  bool cache_guard = true;
  // Root squash and the file service's limits (its on_change is the Node's).
  ns::FileServiceOptions files;
  ns::VfsOptions vfs;
  ns::PlacementOptions placement;
  // The holders of remote files this node has open tell it when their
  // attributes change (true when the kernel caches them).
  bool remote_callbacks = false;
  // Closes of remote files without locks are sent this late at most, most
  // with the next request to that node (RemoteNodeFs "Releases"); 0
  // (default): each at once. A thread of the Node's sends them.
  std::chrono::milliseconds release_delay{0};
  ns::DirOpsOptions dir_ops;
  // Test hooks of directory operations and of file moves (both
  // FEDFS_TEST_PAUSE_AT in the daemon).
  ns::DirOpsHooks dir_ops_hooks;
  ns::MigrationOptions migration;
  // The access trigger of file moves (migration/access.h): off unless
  // `enabled` (and file moves are on: NodeEnv::move).
  ns::AccessOptions access;
  // A record of what member `node` must apply arrived (dirops/
  // pending_service.h, "The fence"): hold it dead now (the daemon wires
  // Membership::Fence). Optional.
  std::function<void(const std::string& node)> fence_member;
  // Directory rename and rmdir go ahead while a member is dead, which
  // applies them when it returns (DirOps::SetPending); false: EHOSTDOWN.
  bool record_dead_members = false;
  // Member `node` was removed for good (fedfsctl forget; also at start for
  // those of a past life): the daemon wires Membership::Forget. Optional.
  std::function<void(const std::string& node)> forget_member;
  // The VD service listed local directory `path` (for a dirmerge): the
  // autonomy watcher watches it from then on. Optional.
  std::function<void(const std::string& path)> on_local_listing;
};

struct NodeEnv {
  m2m::Transport* transport = nullptr;           // required; outlives the Node
  const ns::ClusterViewSource* cluster = nullptr;  // required; outlives the Node
  ns::NodeFs* local = nullptr;                   // required: this node's export root
  ns::Kv* kv = nullptr;                          // required: the journal's store
  // `local`'s side of file moves (migration/); null: this node neither
  // sends nor receives files.
  ns::MoveSupport* move = nullptr;
  Executor* pool = nullptr;                      // required: the services' blocking work
  // Where the holders' change callbacks run: they drop the kernel's pages,
  // which may wait for its page locks. Optional (null: on the transport's
  // progress context, for a node without a FUSE mount).
  Executor* callbacks = nullptr;
  // Where this node, as a directory's manager, has files unlinked for the
  // nodes that ask it to (kUnlink, docs/namespace.md "Unlinks and renames in one call"):
  // each task waits for the file's node. Not `pool`: a file's node serves
  // the unlink on its own pool, and two managers' pools could wait on each
  // other. Optional (null: this node unlinks for no one, and the nodes that
  // ask it unlink by themselves).
  Executor* unlinks = nullptr;
  // The tag (st_ino high bits) of another node; optional (VfsDeps::tag_of).
  std::function<uint16_t(const std::string& node)> tag_of;
};

class Node {
 public:
  // Builds the parts and registers their handlers on the transport (call
  // before it listens). Nothing is sent until the facade or Recover is used.
  static Result<std::unique_ptr<Node>> Create(NodeOptions options, NodeEnv env);
  // After StopClients and after the transport shut down (no handler runs).
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Finishes or rolls back the directory operations a previous life of this
  // node left in its journal; starts the pending records' thread.
  Status Recover();
  // The file moves a previous life left in its journal: their files held
  // (source) or frozen (target) at once, resolved from then on by the
  // moves' retry thread. Before the transport listens: no peer's write may
  // land on a copy that the move has already given up.
  Status RecoverMoves();
  // Starts the access trigger of file moves (NodeOptions::access), once the
  // node serves; a no-op when it is off.
  void StartAccessTrigger();

  // Before the transport shuts down: the facade and the directory operations
  // go (remote sessions say goodbye); the services stay until destruction.
  // Idempotent.
  void StopClients();

  // The parts (valid until StopClients for vfs and dir_ops).
  ns::VfsImpl& vfs();
  ns::VdService& vd_service();
  ns::FileService& file_service();
  ns::FsCallbacks& fs_callbacks();
  ns::DirOps& dir_ops();
  // What dead members must apply (dirops/pending_service.h); lives until
  // destruction (its handlers may run until the transport shut down).
  ns::PendingService& pending();
  // File moves; null without NodeEnv::move (valid until StopClients).
  ns::Migration* migration();
  coop::BlockCache* cache();  // null: coopcache.size 0
  coop::PeerFetch* peers();   // null: the cache is off or not shared
  coop::Forwarder* forwarder();  // null: blocks are not forwarded
  coop::Hints* hints();          // null: likewise
  coop::MemoryGuard* memory_guard();  // null: the cache is off
  // The cluster view as the parts see it (a new epoch drops the kernel's
  // names before it is used).
  const ns::ClusterViewSource& cluster() const;

  // Autonomy (docs/namespace.md, "Autonomy"), from the watcher's thread:
  // local programs changed the export root behind FedFS' back.
  void ReportLocalChanges(std::vector<ns::LocalChange> changes);
  // Changes under these directories may have been missed: their VDs are
  // rebuilt everywhere.
  void DropLostDirs(std::vector<std::string> dirs);
  // A file's attributes changed behind FedFS' back: this node's kernel (when
  // `kernel_attrs`) and the nodes that have it open drop what they cache.
  void LocalAttrsChanged(const std::string& path, bool kernel_attrs);

  // Wires this node's kernel caches (nullptr: none, from now on).
  void SetKernelCache(ns::KernelCache* kernel);

 private:
  struct Impl;
  explicit Node(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedfs::node
