// The control protocol: how fedfsctl (and scripts) ask a running fedfsd
// about its state (docs/membership.md, "Control socket"). This header is its
// one definition, shared by the daemon (dispatcher.h, server.h) and fedfsctl
// (client.h): the commands, their argument, and the fields of every reply.
//
// Wire. A unix stream socket (mode 0600). Each request is one JSON object on
// one line, {"cmd":NAME} or, for a command that takes a path,
// {"cmd":NAME,"path":P} (P absolute; the daemon normalises it with
// NormalizeControlPath and answers with the normalised form). Each request
// is answered by one JSON object on one line: the reply of NAME below, with
// the fields its Fields() names (keys in sorted order), or {"error":"..."}
// for anything malformed, unknown or failed. Other fields of a request are
// ignored.
//
// Plain data and pure functions; any thread. nlohmann/json stays inside
// control/*.cc: replies are C++ structs here, encoded and decoded there.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace fedfs::control {

// Where daemons put their control sockets by default, and the default
// socket of node `node_id` (/run/fedfs/<node_id>.sock).
inline constexpr std::string_view kDefaultSocketDir = "/run/fedfs";
std::string DefaultSocketPath(std::string_view node_id);

// ---------------------------------------------------------------------------
// The commands.

enum class Arg : uint8_t {
  kNone,  // {"cmd":NAME}
  kPath,  // {"cmd":NAME,"path":P}: P required, a string starting with '/'
  // {"cmd":NAME,"path":P,"node":N}: as kPath, and N a node id (1-255 bytes
  // of [A-Za-z0-9._-])
  kPathNode,
  kNode,  // {"cmd":NAME,"node":N}: N as above
};

struct Command {
  std::string_view name;
  Arg arg;
  std::string_view help;      // one line (fedfsctl's help for it)
  std::string_view arg_help;  // its argument's, when it takes one
};

inline constexpr Command kStatus{"status", Arg::kNone,
                                 "members, states, epoch, ring shares, RTTs", ""};
inline constexpr Command kRing{"ring", Arg::kPath, "which node manages PATH",
                               "a global path, e.g. /a/b"};
inline constexpr Command kWhere{"where", Arg::kPath,
                                "which node(s) hold PATH (a file's node, a directory's nodes)",
                                "a global path, e.g. /a/b"};
// "list" (vfs/vfs_control.h): the entries of a directory as this node's
// directory table has them (fedfsctl migrate walks subtrees with it).
inline constexpr Command kList{"list", Arg::kPath,
                               "the entries of directory PATH: name, type, holders",
                               "a global directory path, e.g. /a"};
inline constexpr Command kConflicts{"conflicts", Arg::kPath, "name conflicts in directory PATH",
                                    "a global directory path, e.g. /a"};
inline constexpr Command kDt{
    "dt", Arg::kNone,
    "directory table: capacity, occupancy, hits, misses, invalidations, messages per lookup", ""};
inline constexpr Command kFiles{
    "files", Arg::kNone,
    "file service: other nodes' sessions and open handles, requests, change callbacks", ""};

inline constexpr Command kCache{
    "cache", Arg::kNone,
    "file-data cache: size, occupancy, hits, misses, reads from files' nodes, invalidations", ""};
// fedfsctl cache drop: drops every cached block, then answers as "cache".
inline constexpr Command kCacheDrop{"cache_drop", Arg::kNone,
                                    "drop every block of the file-data cache", ""};

// "migrate" (migration/migration_control.h): moves file PATH to node NODE
// and answers when the move is done (or failed: the error says why).
inline constexpr Command kMigrate{"migrate", Arg::kPathNode,
                                  "move files (of directories: every file below) to node NODE, "
                                  "paths unchanged",
                                  "a global path of a regular file, e.g. /a/b"};
// fedfsctl migrate --dry-run sends "migrate_plan": the checks of the move
// at the file's node (Migration::DryRun); nothing moves.
inline constexpr Command kMigratePlan{"migrate_plan", Arg::kPathNode,
                                      "check a move of PATH to NODE; nothing moves",
                                      "a global path of a regular file, e.g. /a/b"};
// "cancel": cancels the move of file PATH in progress (fedfsctl migrate's
// ^C sends it too); the move answers ECANCELED unless it was committed.
inline constexpr Command kCancel{"cancel", Arg::kPath,
                                 "cancel the move of file PATH in progress (migrate)",
                                 "a global path of a regular file, e.g. /a/b"};
// "migrate_progress": how far the copy of the move of file PATH in progress
// is (fedfsctl migrate draws it; docs/migration.md, "By hand").
inline constexpr Command kMigrateProgress{"migrate_progress", Arg::kPath,
                                          "how far the copy of the move of file PATH in progress is",
                                          "a global path of a regular file, e.g. /a/b"};
inline constexpr Command kMigrations{"migrations", Arg::kNone,
                                     "file moves: started, done, undone, failed, pending", ""};

// "rebalance" (migration/migration_control.h): moves files until every
// node's share of its space in use is within migration.rebalance.threshold
// of the federation's, biggest files first; answers when done.
// fedfsctl rebalance --dry-run sends "rebalance_plan": the plan, nothing moved.
inline constexpr Command kRebalance{
    "rebalance", Arg::kNone,
    "move files until every node's used share of its space is near the mean (--dry-run: plan only)",
    ""};
inline constexpr Command kRebalancePlan{"rebalance_plan", Arg::kNone,
                                        "the plan of rebalance; nothing moves", ""};

// "metrics": this node's metrics in the Prometheus text format, what its
// /metrics endpoint serves (docs/metrics.md).
inline constexpr Command kMetrics{"metrics", Arg::kNone,
                                  "this node's metrics in the Prometheus text format", ""};

// "pending" (dirops/pending_control.h): the records of directory operations
// that dead members must apply, held by this node, and the members they
// hold dead (docs/faults.md, "Directory operations with dead members").
inline constexpr Command kPending{
    "pending", Arg::kNone,
    "directory operations dead members must apply when they return; members held dead", ""};
// "forget": member NODE leaves the federation for good: its records are
// dropped on every live node and it is refused from then on.
inline constexpr Command kForget{"forget", Arg::kNode,
                                 "remove member NODE for good (drops what it must apply)",
                                 "a node id"};

inline constexpr std::array<Command, 19> kCommands = {
    kStatus,   kRing,         kWhere,      kList,      kConflicts,    kDt,      kFiles,
    kCache,    kCacheDrop,    kMigrate,    kMigratePlan, kCancel,     kMigrateProgress,
    kMigrations, kRebalance,  kRebalancePlan, kMetrics, kPending,      kForget};

// The command named `name`, or nullptr.
const Command* FindCommand(std::string_view name);

// ---------------------------------------------------------------------------
// Requests.

struct Request {
  std::string cmd;
  std::string path;  // commands with Arg::kPath or kPathNode; "" otherwise
  std::string node;  // commands with Arg::kPathNode or kNode; "" otherwise
  // "migrate", "rebalance": the moves' copies read at most this many bytes
  // per second ("max_rate"; 0, or left out: no limit).
  uint64_t max_rate = 0;
};

// The path of a request as every command uses it: each run of '/' made one,
// a trailing '/' dropped ("/a//b/" -> "/a/b"; "/" stays "/"). The caller
// checked that it starts with '/'.
std::string NormalizeControlPath(const std::string& p);

// The request line (without its newline) fedfsctl sends; the path as given.
// EINVAL if the path is not valid UTF-8 (JSON cannot carry it).
Result<std::string> EncodeRequest(const Request& request);

// Parses one request line (untrusted bytes), once, for every command: a JSON
// object with a known "cmd" and, when the command takes one, an absolute
// "path", returned normalised. EINVAL otherwise, with the message its
// {"error":...} reply carries as context. Never throws.
Result<Request> ParseRequest(std::string_view line);

// ---------------------------------------------------------------------------
// Replies. Each names its command (kCommand) and lists its fields once, in
// Fields(s, v): v(name, member) for each, which both the encoder and the
// decoder walk. A reply's numbers keep their C++ types on the wire (a double
// is written with a fraction, 0.0).

// "status" (cluster/membership_control.h): this node's membership view.
struct MemberRow {
  std::string id;
  std::string addr;
  std::string state;  // "alive" | "dead"
  uint64_t incarnation = 0;
  double ring_share = 0;       // share of the ring it manages, 0..1
  int64_t rtt_us = -1;         // heartbeat RTT (EWMA); -1 unknown
  int64_t last_heard_ms_ago = 0;
  bool self = false;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("id", s.id); v("addr", s.addr); v("state", s.state); v("incarnation", s.incarnation);
    v("ring_share", s.ring_share); v("rtt_us", s.rtt_us);
    v("last_heard_ms_ago", s.last_heard_ms_ago); v("self", s.self);
  }
};
struct StatusReply {
  static constexpr const Command& kCommand = kStatus;
  std::string node_id;
  uint64_t epoch = 0;
  std::vector<MemberRow> members;  // by id, this node included
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("node_id", s.node_id); v("epoch", s.epoch); v("members", s.members);
  }
};

// "ring" (cluster/membership_control.h): the manager of a path.
struct RingReply {
  static constexpr const Command& kCommand = kRing;
  std::string path;     // normalised
  std::string manager;  // "" when no member is alive
  uint64_t epoch = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("path", s.path); v("manager", s.manager); v("epoch", s.epoch);
  }
};

// "migrate": the move that was made.
struct MigrateReply {
  static constexpr const Command& kCommand = kMigrate;
  std::string path;
  std::string from;
  std::string to;
  uint64_t bytes = 0;  // data copied
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("path", s.path); v("from", s.from); v("to", s.to); v("bytes", s.bytes);
  }
};

// "migrate_plan": the move that would be made (bytes: the file's size).
struct MigratePlanReply : MigrateReply {
  static constexpr const Command& kCommand = kMigratePlan;
};

// "cancel": the move cancelled, at its file's node.
struct CancelReply {
  static constexpr const Command& kCommand = kCancel;
  std::string path;
  std::string node;  // the file's node, where the move runs
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("path", s.path); v("node", s.node);
  }
};

// "migrate_progress": the move of `path` from `from` to `to` in progress,
// its file's `bytes` when the move began and the bytes its target has
// copied so far (`copied`; `bytes` once the copy is done).
struct MigrateProgressReply {
  static constexpr const Command& kCommand = kMigrateProgress;
  std::string path, from, to;
  uint64_t bytes = 0, copied = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("path", s.path); v("from", s.from); v("to", s.to); v("bytes", s.bytes);
    v("copied", s.copied);
  }
};

// "migrations": this node's moves, as source (started ... bytes) and as
// target (received), and the records not yet resolved (pending). Moves for
// room (docs/migration.md, "On a full disk"): asked of this node as the
// file's node (full_asked), committed (full_done), refused or undone
// (full_failed); this node's writes that found no room and were written
// where the file moved (full_writes), its creates made on another node than
// the chosen one for lack of room there (full_creates).
struct MigrationsReply {
  static constexpr const Command& kCommand = kMigrations;
  std::string node;
  bool enabled = false;
  uint64_t started = 0, done = 0, undone = 0, failed = 0, bytes = 0, received = 0, pending = 0;
  uint64_t full_asked = 0, full_done = 0, full_failed = 0, full_writes = 0, full_creates = 0;
  // Moves of files read or written mostly through another node (the access
  // trigger, docs/migration.md "By access"): tried, done, failed.
  uint64_t access_asked = 0, access_done = 0, access_failed = 0;
  uint64_t deltas = 0, delta_bytes = 0;  // files written during their copy, bytes copied again
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("node", s.node); v("enabled", s.enabled); v("started", s.started); v("done", s.done);
    v("undone", s.undone); v("failed", s.failed); v("bytes", s.bytes);
    v("received", s.received); v("pending", s.pending); v("full_asked", s.full_asked);
    v("full_done", s.full_done); v("full_failed", s.full_failed);
    v("full_writes", s.full_writes); v("full_creates", s.full_creates);
    v("access_asked", s.access_asked); v("access_done", s.access_done);
    v("access_failed", s.access_failed);
    v("deltas", s.deltas); v("delta_bytes", s.delta_bytes);
  }
};

// "rebalance" and "rebalance_plan": each node's usage before and as planned
// after (shares of the space of its export file system), the moves in
// order; for "rebalance", whether each was made (error "" when it was).
struct UsageRow {
  std::string node;
  uint64_t used = 0, total = 0;
  double share = 0, after = 0;  // used / total now, and once the plan is made
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("node", s.node); v("used", s.used); v("total", s.total); v("share", s.share);
    v("after", s.after);
  }
};
struct RebalanceMove {
  std::string path, from, to;
  uint64_t bytes = 0;
  bool done = false;
  std::string error;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("path", s.path); v("from", s.from); v("to", s.to); v("bytes", s.bytes);
    v("done", s.done); v("error", s.error);
  }
};
struct RebalanceReply {
  static constexpr const Command& kCommand = kRebalance;
  bool dry_run = false;
  double threshold = 0, mean = 0;
  std::vector<UsageRow> nodes;
  std::vector<RebalanceMove> moves;
  uint64_t moved = 0, failed = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("dry_run", s.dry_run); v("threshold", s.threshold); v("mean", s.mean);
    v("nodes", s.nodes); v("moves", s.moves); v("moved", s.moved); v("failed", s.failed);
  }
};
struct RebalancePlanReply : RebalanceReply {
  static constexpr const Command& kCommand = kRebalancePlan;
};

// "where" (vfs/vfs_control.h): the holder(s) of a path.
struct WhereReply {
  static constexpr const Command& kCommand = kWhere;
  std::string path;
  std::vector<std::string> holders;  // node ids
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("path", s.path); v("holders", s.holders);
  }
};

struct ListEntry {
  std::string name;
  std::string type;                  // as CopyRow's
  std::vector<std::string> holders;  // node ids; one unless a directory
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("name", s.name); v("type", s.type); v("holders", s.holders);
  }
};
struct ListReply {
  static constexpr const Command& kCommand = kList;
  std::string path;
  std::vector<ListEntry> entries;  // by name
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("path", s.path); v("entries", s.entries);
  }
};

// "conflicts" (vd/vd_control.h): the names of a directory held by several
// nodes as non-directories, or as different types.
struct CopyRow {
  std::string node;
  std::string type;  // dir, file, symlink, fifo, socket, char, block, unknown
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("node", s.node); v("type", s.type);
  }
};
struct ConflictRow {
  std::string name;
  std::vector<CopyRow> copies;  // sorted by node
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("name", s.name); v("copies", s.copies);
  }
};
struct ConflictsReply {
  static constexpr const Command& kCommand = kConflicts;
  std::string path;
  std::vector<ConflictRow> conflicts;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("path", s.path); v("conflicts", s.conflicts);
  }
};

// "dt" (vd/vd_control.h): this node's directory table and its manager-side
// coherence counters (vd/vd_service.h, VdService::Stats).
struct DtTableRow {
  uint64_t capacity = 0, max_bytes = 0, occupancy = 0, bytes = 0;
  uint64_t hits = 0, misses = 0, stale = 0, evictions = 0;
  uint64_t bumps_received = 0, local_bumps = 0, patches = 0;
  // Names in stale copies (vd/dir_table.h): hits on them, and names kept.
  uint64_t name_hits = 0, name_installs = 0;
  // Lookups without a copy answered for one name (a large directory).
  uint64_t skeletons = 0;
  // Other nodes' changes told as deltas: applied to a copy, refused (no
  // valid copy at the version before: dropped), or queued for a fetch.
  uint64_t deltas_applied = 0, deltas_refused = 0, deltas_queued = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("capacity", s.capacity); v("max_bytes", s.max_bytes); v("occupancy", s.occupancy);
    v("bytes", s.bytes); v("hits", s.hits); v("misses", s.misses); v("stale", s.stale);
    v("evictions", s.evictions); v("bumps_received", s.bumps_received);
    v("local_bumps", s.local_bumps); v("patches", s.patches); v("name_hits", s.name_hits);
    v("name_installs", s.name_installs); v("skeletons", s.skeletons);
    v("deltas_applied", s.deltas_applied); v("deltas_refused", s.deltas_refused);
    v("deltas_queued", s.deltas_queued);
  }
};
struct DtReply {
  static constexpr const Command& kCommand = kDt;
  std::string node;
  uint64_t lookups = 0, gets_sent = 0;
  double messages_per_lookup = 0;  // gets_sent / lookups (0 without lookups)
  uint64_t dt_invals_received = 0, notifies_sent = 0, kernel_invalidations = 0;
  uint64_t sharer_records = 0, invalidations_sent = 0, invalidations_failed = 0;
  uint64_t broadcasts_sent = 0, changes_invalidated = 0;
  // Changes sent to sharers as deltas, and those the sharers kept.
  uint64_t deltas_sent = 0, deltas_kept = 0;
  // Lost messages (vd/vd_service.h): invalidations resent (manager), requests
  // resent (client), resends answered from the first answer (manager).
  uint64_t invalidations_resent = 0, resends = 0, duplicates_answered = 0;
  uint64_t gets_served = 0, dirmerges = 0, updates_applied = 0, resident = 0;
  // Leases (docs/namespace.md, "Leases"): as a manager, lent and recalled;
  // as a holder, taken, ended and held now.
  uint64_t leases_granted = 0, leases_recalled = 0;
  uint64_t leases_taken = 0, leases_ended = 0, leases_held = 0;
  // Unlinks and renames in one call (docs/namespace.md): asked of other managers, and
  // made as a manager for other nodes.
  uint64_t unlinks_asked = 0, unlinks_made = 0, renames_asked = 0, renames_made = 0;
  std::optional<DtTableRow> table;  // null: no table (directory_table.entries: 0)
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("node", s.node); v("lookups", s.lookups); v("gets_sent", s.gets_sent);
    v("messages_per_lookup", s.messages_per_lookup);
    v("dt_invals_received", s.dt_invals_received); v("notifies_sent", s.notifies_sent);
    v("kernel_invalidations", s.kernel_invalidations); v("sharer_records", s.sharer_records);
    v("invalidations_sent", s.invalidations_sent);
    v("invalidations_failed", s.invalidations_failed); v("broadcasts_sent", s.broadcasts_sent);
    v("changes_invalidated", s.changes_invalidated);
    v("deltas_sent", s.deltas_sent); v("deltas_kept", s.deltas_kept);
    v("invalidations_resent", s.invalidations_resent); v("resends", s.resends);
    v("duplicates_answered", s.duplicates_answered); v("gets_served", s.gets_served);
    v("dirmerges", s.dirmerges); v("updates_applied", s.updates_applied);
    v("resident", s.resident); v("leases_granted", s.leases_granted);
    v("leases_recalled", s.leases_recalled); v("leases_taken", s.leases_taken);
    v("leases_ended", s.leases_ended); v("leases_held", s.leases_held);
    v("unlinks_asked", s.unlinks_asked); v("unlinks_made", s.unlinks_made);
    v("renames_asked", s.renames_asked); v("renames_made", s.renames_made); v("table", s.table);
  }
};

// "files" (files/files_control.h): this node's file service (other nodes'
// sessions, their open handles, requests, change callbacks sent) and the
// callbacks it took for files it has open elsewhere.
struct FilesReply {
  static constexpr const Command& kCommand = kFiles;
  std::string node;
  uint64_t sessions = 0, handles = 0, watches = 0, served = 0, refused = 0;
  uint64_t callbacks_sent = 0, callbacks_failed = 0;
  uint64_t callbacks_received = 0, callbacks_refused = 0;
  uint64_t data_bytes = 0;  // read and written for other nodes (inline and one-sided)
  uint64_t sessions_expired = 0;  // ended for want of renewal (timeouts.session_lease_ms)
  uint64_t duplicates_answered = 0;  // resent requests answered the first answer
  // Changes acknowledged only once a node not told of them dropped its cache
  // (timeouts.cache_lease_ms).
  uint64_t lease_waits = 0;
  // Files opened for other nodes before their names went, for those nodes'
  // deferred opens (files/file_service.h, "Deferred opens").
  uint64_t pinned = 0;
  // This node's opens of files held elsewhere answered without asking
  // (vfs/vfs_deferred.cc): made, opened at their node later, handed over
  // by it (the name went), and found another file or none (ESTALE).
  uint64_t deferred_opens = 0, deferred_used = 0, deferred_adopted = 0, deferred_stale = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("node", s.node); v("sessions", s.sessions); v("sessions_expired", s.sessions_expired);
    v("duplicates_answered", s.duplicates_answered);
    v("handles", s.handles);
    v("watches", s.watches); v("served", s.served); v("refused", s.refused);
    v("callbacks_sent", s.callbacks_sent); v("callbacks_failed", s.callbacks_failed);
    v("pinned", s.pinned);
    v("lease_waits", s.lease_waits);
    v("callbacks_received", s.callbacks_received); v("callbacks_refused", s.callbacks_refused);
    v("deferred_opens", s.deferred_opens); v("deferred_used", s.deferred_used);
    v("deferred_adopted", s.deferred_adopted); v("deferred_stale", s.deferred_stale);
    v("data_bytes", s.data_bytes);
  }
};

// "cache" and "cache_drop" (coopcache/cache_control.h): this node's cache of
// other nodes' file data (docs/coopcache.md). `enabled` false: coopcache.size
// is 0, and every other field is 0.
struct CacheReply {
  static constexpr const Command& kCommand = kCache;
  std::string node;
  bool enabled = false;
  uint64_t size_bytes = 0, block_bytes = 0, blocks_used = 0, bytes_used = 0, files = 0;
  uint64_t probation = 0, protected_blocks = 0;
  uint64_t hits = 0, misses = 0, stale = 0, puts = 0, puts_refused = 0;
  uint64_t evictions = 0, invalidations = 0, promotions = 0;
  uint64_t fetches = 0, fetched_bytes = 0, clears = 0;
  // Reads of long sequential streams that went past the cache, their bytes.
  uint64_t streamed = 0, streamed_bytes = 0;
  // Cooperation: blocks read from other nodes' caches (one-sided), copies
  // found moved on (tag misses) or unreachable; as a file's node, reads
  // answered with copies at other nodes, and the copies it knows of.
  bool shared = false;
  uint64_t remote_hits = 0, remote_bytes = 0, tag_misses = 0, remote_errors = 0;
  uint64_t redirects = 0, directory_files = 0, directory_copies = 0;
  // N-chance forwarding: evicted blocks told to their files' nodes, stored
  // at a peer, declined (not the last copy), dropped (staging full or
  // recirculated enough), failed; as a file's node, evictions answered with
  // a peer; as a peer, blocks other nodes forwarded here.
  uint64_t forward_evictions = 0, forwards = 0, forward_declined = 0, forward_dropped = 0;
  uint64_t forward_errors = 0, forward_asked = 0, forwarded_in = 0;
  // Hints: where forwarded blocks went (kept now), and the misses read from
  // there without asking the file's node (hits) or found moved on (misses).
  uint64_t hints = 0, hint_hits = 0, hint_misses = 0;
  // Memory pressure: the bytes the cache may hold now (below size_bytes
  // after shrinking), the available memory it keeps, its shrinks and grows.
  uint64_t limit_bytes = 0, min_free_bytes = 0, pressure_shrinks = 0, pressure_grows = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("limit_bytes", s.limit_bytes); v("min_free_bytes", s.min_free_bytes);
    v("pressure_shrinks", s.pressure_shrinks); v("pressure_grows", s.pressure_grows);
    v("hints", s.hints); v("hint_hits", s.hint_hits); v("hint_misses", s.hint_misses);
    v("forward_evictions", s.forward_evictions); v("forwards", s.forwards);
    v("forward_declined", s.forward_declined); v("forward_dropped", s.forward_dropped);
    v("forward_errors", s.forward_errors); v("forward_asked", s.forward_asked);
    v("forwarded_in", s.forwarded_in);
    v("shared", s.shared); v("remote_hits", s.remote_hits); v("remote_bytes", s.remote_bytes);
    v("tag_misses", s.tag_misses); v("remote_errors", s.remote_errors);
    v("redirects", s.redirects); v("directory_files", s.directory_files);
    v("directory_copies", s.directory_copies);
    v("node", s.node); v("enabled", s.enabled); v("size_bytes", s.size_bytes);
    v("block_bytes", s.block_bytes); v("blocks_used", s.blocks_used);
    v("bytes_used", s.bytes_used); v("files", s.files); v("probation", s.probation);
    v("protected", s.protected_blocks); v("hits", s.hits); v("misses", s.misses);
    v("stale", s.stale); v("puts", s.puts); v("puts_refused", s.puts_refused);
    v("evictions", s.evictions); v("invalidations", s.invalidations);
    v("promotions", s.promotions); v("fetches", s.fetches);
    v("fetched_bytes", s.fetched_bytes); v("clears", s.clears);
    v("streamed", s.streamed); v("streamed_bytes", s.streamed_bytes);
  }
};

// "cache_drop": the "cache" reply after the drop.
struct CacheDropReply : CacheReply {
  static constexpr const Command& kCommand = kCacheDrop;
};

// "pending": one record per (member, operation), by member then seq.
struct PendingRow {
  std::string node;         // the member that must apply it
  uint64_t seq = 0, op = 0;
  std::string kind;         // rename, rmdir
  std::string from, to;     // to: "" for rmdir
  std::string coordinator;
  uint64_t age_ms = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("node", s.node); v("seq", s.seq); v("op", s.op); v("kind", s.kind); v("from", s.from);
    v("to", s.to); v("coordinator", s.coordinator); v("age_ms", s.age_ms);
  }
};
struct PendingReply {
  static constexpr const Command& kCommand = kPending;
  std::string node;                 // this node
  std::vector<std::string> held;    // members held dead for their records
  std::vector<std::string> forgotten;
  std::vector<PendingRow> records;
  uint64_t put_received = 0, replicated = 0, notified = 0, applied = 0, apply_failures = 0;
  uint64_t unreplicated = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("node", s.node); v("held", s.held); v("forgotten", s.forgotten); v("records", s.records);
    v("put_received", s.put_received); v("replicated", s.replicated); v("notified", s.notified);
    v("applied", s.applied); v("apply_failures", s.apply_failures);
    v("unreplicated", s.unreplicated);
  }
};
struct ForgetReply {
  static constexpr const Command& kCommand = kForget;
  std::string node;       // the member forgotten
  uint64_t dropped = 0;   // records this node dropped
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("node", s.node); v("dropped", s.dropped);
  }
};

// "metrics": the scrape (text), and where the endpoint listens ("" when
// metrics.listen is off).
struct MetricsReply {
  static constexpr const Command& kCommand = kMetrics;
  std::string address;
  std::string text;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("address", s.address); v("text", s.text);
  }
};

// One reply line (without its newline). Never throws: text that is not
// valid UTF-8 (a file name on disk) is carried with U+FFFD in its place.
// Instantiated for every reply above.
template <class R>
std::string EncodeReply(const R& reply);

// {"error":message}, one line.
std::string ErrorReply(std::string_view message);

// Decodes a reply line (fedfsctl). A missing field keeps its default; a
// field of the wrong type, or a line that is not a JSON object, is EPROTO
// with what was wrong as context. Never throws.
template <class R>
Result<R> DecodeReply(std::string_view line);

}  // namespace fedfs::control
