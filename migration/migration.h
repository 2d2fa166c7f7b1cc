// Migration: online, crash-safe moves of a file between nodes, with its
// global path unchanged (docs/migration.md).
//
// One move of regular file `path` from its node L (the source, which
// coordinates) to node T (the target):
//   0. checks at L: a regular file with one link, T alive and not L;
//   1. L journals {id, path, T, inode} Copying (synced)      "mig:journaled"
//   2. kMigPrepare -> T: T journals Receiving, makes the missing parents
//      with L's modes and owners, creates an unnamed file (O_TMPFILE) there,
//      reads the file from L through the file service (holes stay holes),
//      sets owner, mode, xattrs and times, fsyncs, keeping the hash of each
//      64 KiB block it wrote                                    "mig:copied"
//   2b. while the file changed since the copy (size, mtime, ctime), up to 3
//      deltas with writers going on (kMigDelta, delta.cc): L sends the
//      hashes of its blocks, T copies again those that differ
//   3. L locks the name at the directory's manager (kLock), freezes the file
//      (nodefs/move_support.h: changes through FedFS wait), checks that
//      nobody holds a lock on it; if it changed since the last copy, one
//      more delta, frozen ("mig:delta"); else undo (EBUSY, EAGAIN) "mig:frozen"
//   4. kMigPlace -> T: T journals Placed (synced), links the copy at the
//      name (hidden in T's listings: incoming) and freezes it there (writes
//      wait, reads pass); L checks that no local program changed the file
//      since the freeze (else undo)                            "mig:t-placed"
//   5. L journals Committed (synced): THE COMMIT POINT        "mig:committed"
//   6. L holds the file: changes wait, reads pass (L's bytes are T's)
//                                                                 "mig:held"
//   7. the switch at the manager: {add name at T, remove name at L}, which
//      also ends the lock; the gate turns Moved (ESTALE: each node's Vfs
//      opens its handles again at T, the kernel looks the name up again)
//                                                               "mig:marked"
//      then whoever caches the file drops it (the file service's watchers,
//      this node's kernel: attributes, pages, names). Nothing a read needs
//      waits for the move meanwhile (reads and opens pass at L and T; writes
//      and O_TRUNC opens wait at T), so these drops never wait for a read
//      that waits for them                                  "mig:switched"
//   8. kMigCommit -> T: T drops its record and thaws: the name is T's, and
//      writes land there only now, after every cache dropped the old
//      bytes                                                "mig:target-told"
//   9. L unlinks its copy (if still that inode), deletes its record, thaws
//                                                                "mig:deleted"
// A failure before 5 undoes: kMigAbort -> T (unlinks what it linked, drops
// its record), thaw, release the name, delete the record; the caller gets
// the reason. After 5 the move rolls forward.
//
// Visibility (why the manager keeps no journal): while L's record is
// Committed, L's listings mark the name as a tombstone of the move; while
// T's record is Placed, T's listings mark it incoming. DirMerge (vd/vd.h)
// shows an incoming copy only next to the tombstone of the same move and
// never a tombstone, so a VD built at any instant shows exactly one copy:
// L's before the commit, T's after it.
//
// Recovery (Recover, before serving), decided by L's record:
//   * at L: Copying -> kMigAbort to T, then drop; Committed -> hold the file
//     and roll forward from 6;
//   * at T: Receiving -> drop (the unnamed file died with the process);
//     Placed -> the copy frozen before anything is served, kMigOutcome to
//     L: committed -> wait, frozen, for L's kMigCommit (L sends it once every
//     cache dropped the old bytes; it drops the record and thaws);
//     otherwise unlink the copy (if still that inode) and drop.
// A step that needs an unreachable node keeps the record; a background
// thread retries with backoff. While a record is pending its path is busy:
// another move of it answers EBUSY.
//
// Open files move: their handles at L answer ESTALE once the gate is Moved,
// and each node's Vfs opens them again at T (vfs/vfs_moved.cc). Triggers:
// by hand (fedfsctl migrate), a full disk (the writer's Vfs calls MoveAt,
// vfs/vfs_room.cc), rebalance (Rebalance, balance.cc), access (access.h).
//
// Not built yet (docs/migration.md, "What runs today"): moving locks (a
// locked file is refused with EBUSY), identity of st_ino across the move
// (T's inode number is shown afterwards), hard links (refused), symlinks,
// one-sided pulls of the data.
//
// Threads: Move blocks (remote calls, synced journal writes) and may run on
// any thread but the transport's; handlers post their work to `pool`.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cluster/cluster.h"
#include "common/executor.h"
#include "common/result.h"
#include "dirops/dir_ops.h"
#include "dirops/kv.h"
#include "m2m/transport.h"
#include "nodefs/move_support.h"
#include "migration/rebalance.h"
#include "nodefs/node_fs.h"
#include "vd/vd_service.h"

namespace fedfs::ns {

struct MigrationOptions {
  std::chrono::milliseconds rpc_timeout{10000};     // every call but the copy
  std::chrono::milliseconds copy_timeout{3600000};  // kMigPrepare (the copy)
  size_t chunk = size_t{1} << 20;                   // bytes per read from L
  // Reads of the copy in flight at once, each a chunk ahead of T's writes
  // (copy_ahead.h).
  int copy_streams = 2;
  // A file written during its copy (delta.cc): the blocks (of `delta_block`
  // bytes, or larger for files over kMaxDeltaChunks of them) whose hashes
  // differ are copied again, in up to `delta_passes` passes while writers
  // go on, until a pass copies less than `freeze_bytes`; then once more
  // with the file frozen (its writers wait for the hashing and that last
  // delta only).
  uint64_t delta_block = uint64_t{64} << 10;
  int delta_passes = 3;
  uint64_t freeze_bytes = uint64_t{4} << 20;
  // At T, once a move of `path` from node `from` committed here (the access
  // trigger's cooldown and hysteresis, access.h). On a handler's thread.
  std::function<void(const std::string& path, const std::string& from)> arrived;
  std::chrono::milliseconds retry_initial{200};
  std::chrono::milliseconds retry_max{10000};
};

// Why a file moves: by hand (fedfsctl migrate), or because a write or a
// create at its node found no room (docs/migration.md, "On a full disk").
// Rebalance: fedfsctl rebalance (docs/migration.md, "Rebalance").
// kAccess: read or written mostly through another node (access.h).
enum class MoveTrigger : uint8_t { kManual = 0, kFull = 1, kRebalance = 2, kAccess = 3 };
inline constexpr uint8_t kMoveTriggers = 4;

struct MoveMsg;  // a message between the ends (migration_internal.h)

struct MoveOutcome {
  std::string from;
  std::string to;
  uint64_t bytes = 0;  // bytes of data copied
};

class Migration {
 public:
  using FsForFn = std::function<NodeFs*(const std::string& node)>;
  using ViewFn = std::function<std::shared_ptr<const ClusterView>()>;
  // Changes of VD(dir) at its manager, at once (UpdateManyVdSync).
  using UpdateFn = std::function<Status(const std::string& dir, std::vector<VdChange> changes)>;
  // The file (dev, ino) at `path` here is moving away. Called twice: at the
  // commit (`switched` false: whoever caches the file drops it: the file
  // service's watchers, this node's kernel's attributes and pages), and once
  // the directory's manager switched the name (`switched`: this node's
  // kernel drops the names it caches, which it would not be told of: the
  // change came from this node).
  using MovedFn =
      std::function<void(dev_t dev, ino_t ino, const std::string& path, bool switched)>;

  // None of the pointers is owned; all outlive this object. `local` and
  // `move` are this node's export root (LocalNodeFs).
  Migration(std::string node_id, Kv* kv, m2m::Transport* transport, NodeFs* local,
            MoveSupport* move, FsForFn fs_for, ViewFn view, UpdateFn update, MovedFn moved,
            Executor* pool, MigrationOptions options = {}, DirOpsHooks hooks = {});
  // Stop() (records stay for the next start).
  ~Migration();
  // Refuses further requests, waits for the moves in progress, stops the
  // retry thread. Annotate keeps working. Idempotent.
  void Stop();
  Migration(const Migration&) = delete;
  Migration& operator=(const Migration&) = delete;

  void RegisterHandlers();  // before the transport's Listen

  // Resolves the records found in the Kv (see above), starts the retry
  // thread. Call once, before serving.
  [[nodiscard]] Status Recover();

  // Moves `path` (held here) to node `to`. Errors: EINVAL (bad path, `to` is
  // this node), ENOENT, EISDIR/EINVAL (not a regular file), EMLINK (hard
  // links), EHOSTDOWN (`to` not alive), EBUSY (open, or a move of it is in
  // progress or pending), EAGAIN (changed during the copy: try again), the
  // target's errno (ENOSPC, EEXIST: a file of that name at T...). On any
  // error nothing changed (or, if an undo could not reach T, the undo is
  // pending and T's copy stays hidden).
  // `why` is counted (Stats::by_trigger). `max_rate` (bytes per second, 0:
  // none) bounds T's reads of the copy (one read in flight then); the
  // deltas after it are not bounded (writers may wait for the last one).
  [[nodiscard]] Result<MoveOutcome> Move(const std::string& path, const std::string& to,
                                         MoveTrigger why = MoveTrigger::kManual,
                                         uint64_t max_rate = 0);

  // Cancels the move of `path` running here as its file's node, if it has
  // not reached its commit: the move fails with ECANCELED (undone at both
  // ends, as any failure) at its next step, T's copy within a chunk.
  // ENOENT when no move of `path` runs here. The move may still commit if
  // it was past its last check (its outcome says which).
  Status Cancel(const std::string& path);
  // Cancel at node `holder` (here, or through kMigCancel).
  Status CancelAt(const std::string& holder, const std::string& path);

  // How far the copy of the move of `path` running here as its file's node
  // is (T counts the bytes it has written): ENOENT when none runs here.
  struct Progress {
    std::string from, to;
    uint64_t bytes = 0;   // the file's size when the move began
    uint64_t copied = 0;  // bytes copied so far (`bytes` once the copy is done)
  };
  [[nodiscard]] Result<Progress> ProgressOf(const std::string& path);
  // ProgressOf at node `holder` (here, or through kMigProgress).
  [[nodiscard]] Result<Progress> ProgressAt(const std::string& holder, const std::string& path);

  // The checks of a move (step 0), and whether T has a file of that name
  // (EEXIST) or a move of it runs (EBUSY); nothing changes. The outcome's
  // bytes are the file's size. (Locks are found only when the move freezes
  // the file.)
  [[nodiscard]] Result<MoveOutcome> DryRun(const std::string& path, const std::string& to);

  // Moves `path`, held by node `holder`, to `to` (or only checks it:
  // `dry_run`, DryRun): here when `holder` is this node, else through
  // kMigStart to it.
  [[nodiscard]] Result<MoveOutcome> MoveAt(const std::string& holder, const std::string& path,
                                           const std::string& to,
                                           MoveTrigger why = MoveTrigger::kManual,
                                           bool dry_run = false, uint64_t max_rate = 0);

  // VdServiceOptions::annotate_listing: marks the names of `dir` that are in
  // a move (tombstones here as L after the commit, incoming as T).
  void Annotate(const std::string& dir, std::vector<DirEntry>* entries) const;

  // Rebalance (balance.cc; docs/migration.md, "Rebalance"), run here as J:
  // every live node's usage (its NodeFs's StatFs), the `per_node` largest
  // files of at least `min_size` bytes with one link of each node above the
  // mean plus `threshold` (kMigLargest), the plan (PlanRebalance); unless
  // `dry_run`, its moves one at a time (MoveAt, trigger kRebalance), each
  // move's error in `errors` (same index; "" done). Plans from the usage
  // now, so a rebalance cut short by a crash resumes by running it again.
  struct RebalanceOptions {
    double threshold = 0.05;
    uint64_t min_size = uint64_t{1} << 20;
    size_t per_node = 256;
    bool dry_run = false;
    uint64_t max_rate = 0;  // each move's (Move)
  };
  struct RebalanceReport {
    std::vector<NodeUsage> before;
    RebalancePlan plan;
    std::vector<std::string> errors;
  };
  [[nodiscard]] Result<RebalanceReport> Rebalance(const RebalanceOptions& o);
  // This node's largest regular files with one link, of at least
  // `min_size` bytes, biggest first, at most `count` (a walk of the export
  // root; files in a move are left out).
  std::vector<std::pair<std::string, uint64_t>> Largest(size_t count, uint64_t min_size);

  // Records not yet resolved (as L or T).
  size_t PendingCount() const;
  // Tries every pending record now; returns how many stay pending.
  size_t RetryPendingNow();

  struct Stats {
    uint64_t started = 0, done = 0, undone = 0, failed = 0, bytes = 0;
    uint64_t received = 0;  // moves here as T, committed
    // Moves of files written during their copy: deltas sent, bytes copied again.
    uint64_t deltas = 0, delta_bytes = 0;
    // Moves asked of this node as L, by trigger (MoveTrigger): asked, done
    // (committed), failed (refused or undone).
    struct Counts {
      uint64_t asked = 0, done = 0, failed = 0;
    };
    Counts by_trigger[kMoveTriggers];
  };
  Stats stats() const;

  struct Rec;    // a journal record (migration.cc)
  struct Staged; // T's unnamed copy in progress

 private:
  void Step(std::string_view step) const;
  // Step 0 at L: a regular file with one link at `path`, `to` alive and not
  // this node; its attributes.
  Result<struct stat> Check(const std::string& path, const std::string& to);
  // Move, uncounted.
  Result<MoveOutcome> Attempt(const std::string& path, const std::string& to, uint64_t max_rate);
  Status Save(const Rec& r);
  Status Erase(const Rec& r);
  Status Undo(Rec& r);
  // From step 6 on (also in recovery): Ok, or a transient error (pending).
  Status Finish(Rec& r);
  Status ResolveOut(Rec& r);
  Status ResolveIn(Rec& r);
  Result<m2m::Bytes> Call(const std::string& node, uint16_t method, m2m::Bytes payload,
                          std::chrono::milliseconds timeout);
  void KeepPending(const Rec& r);
  // Runs `fn` on a thread of its own (joined by the destructor).
  void Spawn(std::function<void()> fn);
  void RetryLoop();

  // Handlers (target side, and kMigStart/kMigOutcome at the source).
  void OnStart(m2m::IncomingCall call, m2m::Responder r);
  void OnPrepare(m2m::IncomingCall call, m2m::Responder r);
  void OnPlace(m2m::IncomingCall call, m2m::Responder r);
  void OnCommit(m2m::IncomingCall call, m2m::Responder r);
  void OnAbort(m2m::IncomingCall call, m2m::Responder r);
  void OnOutcome(m2m::IncomingCall call, m2m::Responder r);
  void OnLargest(m2m::IncomingCall call, m2m::Responder r);
  void OnDelta(m2m::IncomingCall call, m2m::Responder r);
  void OnCancel(m2m::IncomingCall call, m2m::Responder r);  // cancel.cc
  void OnProgress(m2m::IncomingCall call, m2m::Responder r);  // cancel.cc
  std::optional<MoveMsg> DecodeAsked(const m2m::IncomingCall& call, m2m::Responder& r,
                                     const char* what);  // cancel.cc
  std::shared_ptr<Staged> StagedOf(const MoveMsg& m);   // T: the copy of that move, if any
  // L: whether move `id` was cancelled (Cancel).
  bool Cancelled(uint64_t id) const;
  // T: the record and the copy of the move that `m` names, while its copy
  // is being received (else nulls).
  std::pair<std::shared_ptr<Rec>, std::shared_ptr<Staged>> Receiving(const MoveMsg& m);
  // T: owner, xattrs (read from `src`), mode, times of m on `fd`, fsync.
  Status ApplyMeta(int fd, NodeFs* src, const MoveMsg& m);
  // L: sends T the hashes of the file's blocks and its attributes as of
  // `st` (a stat taken before the hashing); T copies again the blocks that
  // differ (delta.cc). The bytes copied again.
  Result<uint64_t> SendDelta(const Rec& r, const struct stat& st);
  struct Prep;  // a decoded kMigPrepare
  Result<uint64_t> Receive(const std::string& key, const Prep& p);

  const std::string node_id_;
  Kv* const kv_;
  m2m::Transport* const transport_;
  NodeFs* const local_;
  MoveSupport* const move_;
  const FsForFn fs_for_;
  const ViewFn view_;
  const UpdateFn update_;
  const MovedFn moved_;
  Executor* const pool_;
  const MigrationOptions options_;
  const DirOpsHooks hooks_;

  // Lock order: mu_ is a leaf; never held across a call, a Kv write or a hook.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::mutex resolve_mu_;  // one resolution at a time (retry thread, Recover)
  uint64_t last_id_ = 0;
  std::set<std::string> busy_;                    // paths in a move
  struct Moving {
    uint64_t id = 0;
    std::string to;
    uint64_t size = 0;       // the file's when the move began
    bool copied = false;     // T's copy is done (ProgressOf)
  };
  std::map<std::string, Moving> moving_;          // L: path -> its move running here
  std::set<uint64_t> cancelled_;                  // L: ids of moves cancelled (Cancel)
  std::map<std::string, std::shared_ptr<Rec>> records_;  // Kv key -> record
  std::map<std::string, std::shared_ptr<Staged>> staged_;  // Kv key -> T's file
  size_t workers_ = 0;                            // Spawned threads running
  struct Alive;                                   // what handlers reach
  std::shared_ptr<Alive> alive_;
  std::set<std::string> pending_;                 // Kv keys to retry
  Stats stats_;
  bool stopping_ = false;
  std::thread retry_thread_;
};

}  // namespace fedfs::ns
