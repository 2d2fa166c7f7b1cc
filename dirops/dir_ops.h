// DirOps: the journaled coordinator of multi-node directory operations.
//
// A directory exists on every node that holds something beneath it, so
// renaming or removing one changes several export roots. DirOps runs such an
// operation from the node that received it (the coordinator) and journals it
// in this node's durable Kv (dirops/kv.h) so that a crash of the
// coordinator at any point ends, after restart (Recover), with the operation
// either wholly done or wholly not done on every node: never a directory
// renamed on some nodes and not on others.
//
// Protocol of RenameDir (RemoveDir is the same with rmdir for rename):
//   1. journal {id, from, to, flags, caller, holders, state=Validating}, synced;
//   2. validate on every holder and every live node (Stat/ListDir as the
//      caller): `from` is a directory on every holder; `to` is absent, or an
//      empty directory (EEXIST with RENAME_NOREPLACE; ENOTDIR if it is not a
//      directory anywhere; ENOTEMPTY if it is a non-empty directory
//      anywhere); the missing ancestors of `to` get their mode/owner from a
//      node that has them. A failure deletes the record and returns its errno:
//      nothing changed anywhere;
//   3. journal state=Acting (with the replaced `to` directories), synced;
//   4. on each holder in node-id order: MkdirParents(to), Rename(from -> to),
//      then the node is added to the record's done set, synced;
//   5. tell the VD managers (notifier): per holder, remove `from`'s entry from
//      VD(parent(from)) and add `to`'s to VD(parent(to));
//   6. delete the record (synced).
// A definitive failure in step 4 (EACCES, ENOSPC, a race...) journals
// state=Undoing, renames back every holder already renamed (recreating a
// replaced empty `to` there), deletes the record and returns the ORIGINAL
// errno. If the undo cannot finish (a node stopped answering), the record
// stays pending and is retried in the background (below); the caller still
// gets the original errno.
//
// Dead nodes. A dead member may hold a part of the directory that no VD
// shows; renaming or removing around it would leave it half done when it
// returns (its part would reappear under the old name). With a PendingSink
// (SetPending; the daemon's PendingService) the operation goes ahead among
// the live members and leaves, for each member known dead when it was
// validated, a record of what that member must apply when it returns
// (dirops/pending.h): written in the same synced batch as state Acting,
// dropped if the operation is undone, copied to every live node before it
// answers. Until the member applied them, every node holding them keeps it
// dead (dirops/pending_service.h, "The fence"). This needs a strict
// majority of the members (live and dead) alive in the coordinator's view:
// in a partition only the larger side goes ahead (otherwise each side would
// record, and hold dead, the other). Without a sink, or without a majority,
// both operations refuse with EHOSTDOWN while any member is known dead.
// Either way a holder that is not alive is EHOSTDOWN.
//
// Recovery (Recover, at daemon start, before serving): for each record,
//   * Validating: nothing was changed yet: the record is deleted;
//   * Acting: every holder is probed (Stat of from/to as the daemon; a holder
//     where `from` is gone and `to` exists is renamed; for rmdir, where the
//     directory is gone). None changed: the record is deleted (the caller
//     never got an answer; nothing happened). Some changed: ROLL FORWARD,
//     completing the others as the recorded caller (idempotent per node);
//     a definitive failure there turns into a roll back;
//   * Undoing: ROLL BACK every changed holder.
// A step that needs a node that is not alive, or that fails with a transient
// errno (EHOSTDOWN, ETIMEDOUT, ECONNREFUSED, ECONNRESET, ENOTCONN, EAGAIN),
// keeps the record, logs at warn what is pending and on which nodes, and a
// background thread retries with exponential backoff (options) until it
// finishes. Paths of pending records are busy: new operations on them or
// beneath them answer EBUSY until the record is resolved. Undo and rmdir
// recreation run as the daemon (root): they restore a state that existed.
//
// Two coordinators. Operations of one coordinator on overlapping paths are
// serialized by its busy set (EBUSY). Across coordinators, each operation
// holds name locks at the managers (kLock, vd/vd_service.h) on every
// component of every path it changes (`/a/d -> /b/e`: a in /, d in /a, b in
// /, e in /b), taken in (directory, name) order before it is journaled and
// released when it ends: two operations whose paths overlap (one is a prefix
// of the other) share the shorter path's lock, so one waits for the other
// (up to `deadline`, then EBUSY) and each ends in one of the two orders,
// never a mix. Operations under a common ancestor wait for each other too
// (they share its lock); a crashed coordinator's locks lapse
// (docs/namespace.md, "Name locks").
//
// Limits (documented in docs/namespace.md): RENAME_EXCHANGE of
// directories is refused (EINVAL); ancestors of `to` created on a holder by
// MkdirParents are not removed by an undo (empty directories that exist
// elsewhere in the union: invisible).
//
// Threads: RenameDir/RemoveDir block (remote calls with their own deadlines,
// synced journal writes) and are called from FUSE worker threads, several at
// a time. No lock is held across a remote call or a synced write. One
// background thread (started by Recover) retries pending records.
#pragma once

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/result.h"
#include "cluster/cluster.h"
#include "dirops/kv.h"
#include "dirops/pending.h"
#include "nodefs/node_fs.h"
#include "vd/vd_service.h"

namespace fedfs::ns {

class PendingSink;  // dirops/pending_service.h

struct DirOpsOptions {
  // Validation (step 2) must finish within this time, else ETIMEDOUT and
  // nothing changes. Once acting, each node's call is bounded by its own
  // deadline (RemoteNodeFs) and the operation completes or undoes.
  std::chrono::milliseconds deadline{10000};
  // Background retry of pending records: first delay, doubled up to max.
  std::chrono::milliseconds retry_initial{200};
  std::chrono::milliseconds retry_max{10000};
};

// Test hook. at_step is called at each step with its name:
//   "journaled"            record written (state Validating; rmdir: Acting)
//   "validated"            state Acting written (rename)
//   "renamed:<node>"       rename done on <node>, not yet journaled
//   "removed:<node>"       rmdir done on <node>, not yet journaled
//   "done:<node>"          <node> added to the done set
//   "undoing"              state Undoing written
//   "undone:<node>"        <node> restored by a roll back
//   "notified"             VD managers told
//   "replicated"           dead members' records copied to the live nodes
//   "finished"             record deleted
//   "replace-journaled", "replace-renamed:<node>", "replace-unlinked:<node>",
//   "replace-finished"     the steps of ReplaceFile
// It may block forever (the daemon's FEDFS_TEST_PAUSE_AT, so a test can
// SIGKILL it there) or throw (unit tests simulating a crash: the operation
// then stops where it is, doing nothing more; the DirOps object must then be
// destroyed and rebuilt over the same Kv, as after a real crash).
struct DirOpsHooks {
  std::function<void(std::string_view step)> at_step;
};

// Hooks for the daemon: when the environment variable FEDFS_TEST_PAUSE_AT
// names a step, reaching that step logs "paused at <step>" (warn) and sleeps
// forever; "<step>+<ms>" sleeps that many milliseconds instead, then goes on
// ("resumed at <step>"). Several, separated by commas ("a+3000,b"), pause
// at each. Without the variable: no hooks.
DirOpsHooks PauseHooksFromEnv();

class DirOps {
 public:
  using FsForFn = std::function<NodeFs*(const std::string& node)>;
  using ViewFn = std::function<std::shared_ptr<const ClusterView>()>;
  // One change of one entry of VD(dir) (the daemon wires it to
  // UpdateVdSync). A failure is logged and does not fail the operation (VDs
  // are volatile; the manager rebuilds them).
  using NotifyFn = std::function<Status(const std::string& dir, const VdChange& change)>;

  // `kv` outlives this object. fs_for returns the NodeFs of any node id
  // (LocalNodeFs for self, RemoteNodeFs otherwise; nullptr = unknown node,
  // treated as unreachable). Nothing runs until Recover or an operation.
  DirOps(std::string node_id, Kv* kv, FsForFn fs_for, ViewFn view, NotifyFn notify,
         DirOpsOptions options = {}, DirOpsHooks hooks = {});
  // Stops the retry thread (pending records stay in the Kv for the next
  // start). Does not wait for operations in progress: callers stop first.
  ~DirOps();
  DirOps(const DirOps&) = delete;
  DirOps& operator=(const DirOps&) = delete;

  // rename(2) of directory `from` to `to` (global paths) held by `holders`
  // (the nodes where `from` exists as a directory, from VD(parent(from))).
  // flags: 0 or RENAME_NOREPLACE (RENAME_EXCHANGE: EINVAL). Errors: EINVAL
  // (bad path, `to` beneath `from`, bad flags), EBUSY (a path of a pending or
  // running operation, or "/"), EHOSTDOWN (see above), ENOENT/ENOTDIR/EEXIST/
  // ENOTEMPTY/EACCES... from validation (nothing changed), ETIMEDOUT (the
  // deadline passed while validating; nothing changed), the errno of a
  // failed step (undone). `from` == `to`: Ok, nothing done.
  [[nodiscard]] Status RenameDir(const Cred& cred, const std::string& from, const std::string& to,
                                 unsigned flags, std::vector<std::string> holders);

  // rmdir(2) of directory `path` held by `holders`. The union must be empty
  // (ENOTEMPTY otherwise, nothing removed). A failure on one holder recreates
  // the directory, with its mode and owner, on those already removed, and
  // returns that errno. Other errors as RenameDir.
  [[nodiscard]] Status RemoveDir(const Cred& cred, const std::string& path,
                                 std::vector<std::string> holders);

  // rename(2) of the non-directory `from` held by `from_node` over the
  // non-directory `replaced` (the destination's copy, real name) held by
  // another node, `to_node`: `from` becomes `to` on `from_node`, and the
  // old destination is unlinked, journaled so that after a crash of the
  // coordinator at any step exactly one of the two is at the name once it has
  // recovered (dirops/replace_file.cc):
  //   1. journal {from, from_node, to, replaced, to_node, the local inode
  //      numbers of both files}, synced ("replace-journaled");
  //   2. Rename(from -> to) on from_node, as the caller
  //      ("replace-renamed:<from_node>"); a failure erases the record and is
  //      returned: nothing changed;
  //   3. Unlink(replaced) on to_node, as the caller, if it is still the file
  //      recorded ("replace-unlinked:<to_node>"); a definitive failure renames
  //      `to` back to `from` and is returned; a transient one keeps the record
  //      (retried: the rename stands, the old copy goes later);
  //   4. delete the record ("replace-finished").
  // Recovery: `to` on from_node is the recorded source (by inode number): the
  // rename happened, so the old destination is unlinked (roll forward, VD
  // managers told); otherwise nothing happened and the record goes. The
  // caller (vfs/) holds the names' locks at their managers and reports the
  // VD changes of a call that returns Ok. The parent of `to` must exist on
  // from_node already. Errors: EINVAL (paths, same node), EBUSY (a path of
  // an operation in progress), EISDIR/ENOENT from the checks, the errno of
  // the rename or of the unlink (undone).
  [[nodiscard]] Status ReplaceFile(const Cred& cred, const std::string& from,
                                   const std::string& from_node, const std::string& to,
                                   const std::string& replaced, const std::string& to_node);

  // Records what dead members must apply instead of refusing (see "Dead
  // nodes"). Before Recover and any operation; `sink` outlives this object.
  void SetPending(PendingSink* sink) { dead_sink_ = sink; }
  bool RecordsDeadMembers() const { return dead_sink_ != nullptr; }

  // Resolves every journal record found in the Kv (see above) and starts the
  // background retry thread for those that cannot be resolved now. Call once,
  // before serving. Returns a Kv read error; unresolved records are not an
  // error (they are logged and retried).
  [[nodiscard]] Status Recover();

  // Number of journal records not yet resolved (pending retry).
  size_t PendingCount() const;
  // Number of journal records Recover found (operations of a past life).
  uint64_t RecoveredCount() const { return recovered_.load(std::memory_order_relaxed); }

  // Resolves pending records now (the retry thread's work, for tests).
  // Returns the number still pending.
  size_t RetryPendingNow();

  struct Record;  // the decoded journal record (dir_ops.cc)

  // The name locks of an operation on `paths` ("Two coordinators" above):
  // (directory, name) of every component, sorted.
  using NameLock = std::pair<std::string, std::string>;
  static std::vector<NameLock> NameLocksOf(const std::vector<std::string>& paths);

 private:
  enum class Outcome { kOk, kRetry, kFailed };

  void Step(std::string_view step);
  Status CheckCluster(const std::vector<std::string>& holders) const;
  // Marks `paths` busy; EBUSY if one overlaps a busy path.
  Status Acquire(const std::vector<std::string>& paths);
  void Release(const std::vector<std::string>& paths);
  uint64_t NextId();
  // Taken all or none (EBUSY once `deadline` passed), and released.
  Status TakeNameLocks(const std::vector<NameLock>& locks);
  void ReleaseNameLocks(const std::vector<NameLock>& locks);

  Status Save(const Record& r);
  // dir_ops_dead.cc: the records of `r` for the members dead in `view`; the
  // journal write of state Acting with them; dropping them (undone).
  std::vector<PendingOp> PendingOpsFor(const Record& r, const ClusterView& view) const;
  Status SaveActing(const Record& r, const std::vector<PendingOp>& ops);
  void DropPending(const Record& r);
  Status Erase(const Record& r);
  NodeFs* Fs(const std::string& node) const;

  Status ValidateRename(const Cred& cred, Record& r, const ClusterView& view);
  // Carries `r` (state Acting) forward on every holder not yet done.
  // *err receives the first definitive failure.
  Outcome Forward(Record& r, const Cred& cred, Error* err);
  // Rolls back every changed holder of `r` (state Undoing).
  Outcome Backward(Record& r, Error* err);
  void Notify(const Record& r, bool forward);
  // Resolves one record found in the journal (recovery and retries).
  Outcome Resolve(Record& r);
  // The same for a kReplace record (replace_file.cc); and the unlink of its
  // old destination, if it is still the file recorded.
  Outcome ResolveReplace(Record& r);
  Outcome UnlinkReplaced(const Record& r, const Cred& cred, Error* err);
  // Tells the VD managers what a rolled-forward kReplace changed.
  void NotifyReplace(const Record& r);
  // One VD change of `path`'s entry in its parent (logged when it fails).
  void Tell(const Record& r, const std::string& path, VdChange::Kind kind,
            const std::string& node, uint8_t type, uint64_t id = 0);
  // After Forward failed: undo, then delete or keep pending.
  void UndoAfterFailure(Record& r);
  // The end that rename and rmdir share, once their record is saved in state
  // kActing: apply it on every holder (undone on failure), tell the managers,
  // drop the record.
  Status ActAndFinish(Record& r, const Cred& cred, const std::vector<PendingOp>& ops);
  // Keeps record `id` (with its busy paths) for the retry thread.
  void KeepPending(uint64_t id, const std::vector<std::string>& paths);
  void RetryLoop();

  const std::string node_id_;
  Kv* const kv_;
  const FsForFn fs_for_;
  const ViewFn view_;
  const NotifyFn notify_;
  const DirOpsOptions options_;
  const DirOpsHooks hooks_;
  PendingSink* dead_sink_ = nullptr;  // set before use

  // Lock order: mu_ is a leaf; never held across a NodeFs call, a Kv write
  // or a hook.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Serializes resolutions of pending records (retry thread, Recover,
  // RetryPendingNow); held across remote calls, but FUSE workers never take it.
  std::mutex resolve_mu_;
  uint64_t last_id_ = 0;                    // GUARDED_BY(mu_)
  std::multiset<std::string> busy_;         // GUARDED_BY(mu_) paths in use
  std::set<uint64_t> pending_;              // GUARDED_BY(mu_) records to retry
  std::map<uint64_t, std::vector<std::string>> pending_paths_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                   // GUARDED_BY(mu_)
  std::thread retry_thread_;
  std::atomic<uint64_t> recovered_{0};
};

}  // namespace fedfs::ns
