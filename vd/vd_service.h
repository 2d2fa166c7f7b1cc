// The VD service: managers hold virtual directories, and every node asks them.
//
// Server side (VdService::RegisterHandlers, on every node):
//  * kNsListLocal(P): this node's local listing of P (from its LocalNodeFs,
//    run on the blocking executor) — the leaf of dirmerge;
//  * kNsVdGet(P): at M(P): VD(P) if resident and built in the current epoch,
//    else dirmerge — one parallel fan-out of kNsListLocal to every live node,
//    merged by DirMerge — then kept (bounded: `max_resident_vds`, LRU) and
//    returned. Concurrent gets of a VD being built wait for the same build.
//  * kNsVdUpdate(P, change): at M(P): applies a change made by a node (an
//    entry added or removed on that node) to the resident VD, version + 1;
//    a non-resident VD needs nothing (the next get rebuilds it).
//  * kNsConflicts(P): at M(P): the conflicts of P (vd/vd.h).
//  * kNsVdDrop(P): on every node: forget the resident VDs at or beneath P.
//    Sent after a directory is renamed or removed, whose subtree's VDs (kept
//    at many managers) would otherwise keep listing the old names.
// A request that reaches a node which is not M(P) in its own view answers
// ESTALE; the client refreshes its view and retries (bounded).
//
// Client side (VdService::Get/Update/Conflicts, any node): sends to M(P) from
// the current ClusterView, or serves locally when M(P) is this node.
//
// Directory table and coherence (docs/namespace.md, "Directory table"). A Get
// of a VD managed elsewhere is first looked up in this node's DirTable: a hit
// sends nothing. A miss sends kNsVdGet naming the DT slot; M(P) records the
// requester as a sharer of P (before it reads the VD, so no change can fall
// between the two). When VD(P) changes (kNsVdUpdate, from any node), M(P)
// adds 1 to every other sharer's slot word with a one-sided FetchAdd, in one
// parallel round, and acknowledges the change only when every bump completed
// or timed out (a sharer that is dead or times out is dropped and logged).
// The node that made the change patches its own copy from the reply instead.
// Past max_sharers_per_vd sharers, or max_sharer_records in all, a change is
// announced by a two-sided kNsDtInval to every live node instead (the
// fallback; the receiver invalidates its entry). DT entries are valid only in
// the membership epoch they were fetched in.
//
// Lost messages (docs/faults.md; m2m/reply_cache.h). A request whose
// connection broke (its message or reply may have been lost) is resent, to
// the manager of a refreshed view, up to kMaxResends times; so is a
// dirmerge's listing (to its node). A
// change carries a request id: the manager serves each id once and answers
// a resend the first answer (kept for a minute), so a change whose reply was
// lost is never applied twice. A sharer's invalidation whose connection
// broke is resent while the sharer is alive; the change is acknowledged only
// after that (or once the sharer is declared dead). A timeout is not resent.
//
// Leases (docs/namespace.md, "Leases"; vd_lease.cc). A manager lends VD(P),
// with the reply to a change, to the node that made `lend_after` changes of P
// in a row while no other node holds a copy; that node then serves P itself
// (Get, Update and claims of P answered without a message) until the
// manager recalls it (kNsVdRecall), which it does before it serves P to
// anyone else, or its term ends (renewed with kNsVdRenew while it is used),
// or the epoch changes.
//
// All methods are asynchronous (callbacks run on the transport's progress
// context or inline) so that the same code runs in the daemon and in the
// single-threaded simulator. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/executor.h"
#include "common/result.h"
#include "m2m/transport.h"
#include "metrics/metrics.h"
#include "cluster/cluster.h"
#include "vd/dir_table.h"
#include "vd/kernel_cache.h"
#include "nodefs/node_fs.h"
#include "vd/vd.h"

namespace fedfs::ns {

struct VdServiceOptions {
  // VDs a manager keeps in memory before evicting the least recently used.
  size_t max_resident_vds = 4096;
  // Deadline of each remote call (gets, updates, dirmerge leaves, sharer
  // invalidations).
  std::chrono::milliseconds rpc_timeout{2000};
  // This node's directory table (vd/dir_table.h): entries (0: none)
  // and bytes.
  size_t dt_entries = 4096;
  size_t dt_bytes = size_t{64} << 20;
  // Sharers a manager records per VD; past this, changes of that VD are
  // announced by a broadcast kNsDtInval to every live node instead.
  size_t max_sharers_per_vd = 64;
  // Sharer records a manager keeps in all; past this, it stops recording and
  // announces every change by broadcast (until it restarts).
  size_t max_sharer_records = size_t{1} << 20;
  // Called (on the blocking executor) just before this node lists its local
  // directory `path` for a dirmerge: from then on a VD covers it, so the
  // daemon watches it for changes made behind FedFS' back. Optional.
  std::function<void(const std::string& path)> on_local_listing;
  // Called (on the blocking executor) with every local listing of `path`
  // before it is merged or sent to a manager: marks the entries of files in a
  // move (DirEntry::move_id/move_role; migration/). Optional.
  std::function<void(const std::string& path, std::vector<DirEntry>* entries)> annotate_listing;
  // How long GetVdSync waits for a manager whose membership view is behind
  // this node's (see GetVdSync).
  std::chrono::milliseconds view_catchup{2000};
  // Leases (docs/namespace.md, "Leases"): a manager lends VD(P) to a node
  // that reported `lend_after` changes of P in a row while no other node
  // shares a copy of it (0: never lend). That node then serves P itself, with
  // no message, for `lease_term` at a time (renewed while it holds it) until
  // the manager recalls it, which it does before it serves P to anyone else.
  uint32_t lend_after = 3;
  std::chrono::milliseconds lease_term{1000};
  // After a recall, P is not lent again for this long.
  std::chrono::milliseconds lend_cooldown{1000};
  // A directory whose copy here went stale twice within `churn_gap` is
  // looked up for names only for a while: recorded so that the creation of
  // new names bumps nothing here, keeping only names that exist and the
  // directory's summary (docs/namespace.md, "Names in a busy directory");
  // without a copy here, or past max_sharers_per_vd, unrecorded. 0: never.
  std::chrono::milliseconds churn_gap{50};
  // A manager answers a name lookup of a whole sharer (a node whose copy
  // went stale) with the whole VD once the VD has not changed for this long
  // and has at most whole_max_entries entries: its next lookups there need
  // no message (docs/namespace.md, "Quiet again"). 0: at once.
  std::chrono::milliseconds quiet_after{250};
  // A lookup that finds no copy here asks for the whole VD, but a manager
  // answers it for the name only (and records the node for names only) when
  // the VD has more entries than this: a directory of a million names is
  // not copied to every node that stats one of them (docs/namespace.md,
  // "Large directories"). 0: always whole.
  size_t whole_max_entries = 16384;
  // A create of a file asks for kAddNew (its claim and its entry in one
  // call; VdChange) rather than a kClaim and then a kAdd. Only the asking
  // side reads it: a manager serves both.
  bool add_new = true;
  // A change of a directory reaches the sharers that hold a whole copy as a
  // delta they apply (kNsDtInval with its `patch`), keeping their copies
  // valid, rather than as a bump that drops them (docs/namespace.md,
  // "Changes as deltas"). Only the manager reads it.
  bool deltas = false;
  // Deltas go only to directories with at most this many whole sharers: a
  // change of a directory that more nodes hold whole goes as bumps, which
  // turn busy readers to names-only lookups (a delta per sharer per change
  // would cost O(sharers) messages and bytes per operation).
  size_t max_delta_sharers = 4;
  // A manager's unlink of a file on its node (kUnlink, docs/namespace.md
  // "Unlinks and renames in one call"): `holder` unlinks `path` (global, real name) as
  // `cred`, on behalf of node `origin` (whose sessions that node does not
  // tell of the change: its kernel saw it), and `done` gets the directory's
  // attributes at that node right after (none: unknown) or the errno. Called
  // on the transport's progress context or a blocking thread; it must not
  // block (the daemon runs it on its blocking executor). Unset: this node
  // answers a kUnlink ENOSYS and the asker unlinks by itself.
  using UnlinkAt = std::function<void(
      const Cred& cred, const std::string& holder, const std::string& path,
      const std::string& origin,
      std::move_only_function<void(Result<std::optional<struct stat>>)> done)>;
  UnlinkAt unlink_at;
  // The same for a rename within one directory (kRename): `holder` renames
  // `from` to `to` (global, real names) with rename(2)'s `flags` as `cred`
  // for node `origin`. Unset: a kRename answers ENOSYS.
  using RenameAt = std::function<void(
      const Cred& cred, const std::string& holder, const std::string& from,
      const std::string& to, unsigned flags, const std::string& origin,
      std::move_only_function<void(Status)> done)>;
  RenameAt rename_at;
  // How long a kUnlink waits for its answer: the manager's call to the
  // file's node may wait for that node's callbacks and cache lease
  // (files/file_service.h). Default 2 x rpc_timeout + 7 s.
  std::chrono::milliseconds unlink_timeout{11000};
};

// A change to one entry of VD(P), made on `node`.
//
// Claims and locks are held by the node that sends them (the operation's
// node, whatever node the entry is on); `node` is not used for them.
//
// kLock holds the existing `name` of VD(P) for an operation of the sender that
// changes it on its holder (unlink, rmdir, either name of a rename) from
// before it touches the holder until its change is applied: EAGAIN while
// another node holds or claims the name (retry). It ends with a kAdd or
// kRemove of that name sent by the same node, with kRelease, or after 4 x
// rpc_timeout. Changes of one name are thus applied in the order they were
// made on the holders (without it, two renames touching one name could be
// applied in the other order and leave a name no holder has).
//
// kClaim reserves `name` in VD(P) for the sender before it creates the entry
// (create, mkdir, mknod, symlink, link, the new name of a rename):
// EEXIST if the name is in VD(P), EAGAIN while another node claims or locks
// it (retry: that create may yet fail), so two nodes creating one name
// concurrently never both succeed, and neither is told EEXIST of a name that
// may never exist. The claim is invisible to readers, ends like a lock (the
// kAdd, or kRelease when the create failed). Claims change no version.
//
// kLockRead is a kLock that reads too (VdService::LockRead): `name` is a
// visible name; the manager answers its entry as it is once the lock is
// decided (none: absent), and takes the lock only when the entry exists and
// its real name is `name` (EAGAIN as kLock while another node holds it). An
// operation that changes a name thus reads it under its lock in the same
// round trip, instead of a lookup, a lock and a second lookup.
//
// kAddNew is a kClaim and the kAdd of the entry it claims in one round trip
// (a create in a directory managed elsewhere; docs/namespace.md, "Creates in
// one round trip"): where the claim is granted and VD(P) is resident (or
// being built), the manager adds the entry at once (version + 1, sharers
// invalidated before the answer, as a kAdd) and keeps the claim, with the
// entry to add again should VD(P) be rebuilt meanwhile, until the sender's
// kRelease (it made the entry on its node) or kRemove (it could not). Its
// answer says whether the entry was added (UpdateOutcome::added); if not,
// the name is only claimed, and the sender reports the kAdd after making
// the entry, as after a kClaim. A kAddNew's `id` is a token of the sender's
// choosing (not 0) that its kRelease names again (`id`): the release, which
// the sender does not wait for, ends that claim only, never a later hold of
// the same name by the same node that reached the manager first. A kRemove
// with an `id` (not 0) is the undo of the kAddNew of that token whose answer
// did not arrive: applied only while that claim holds, else a no-op.
//
// kUnlink is an unlink in one call (docs/namespace.md, "Unlinks in one
// call"): `name` is a visible name, `cred` the caller. The manager takes
// the name as a kLockRead for the sender would; when it names a file (not
// a directory) under its own real name, it has the file's node unlink it
// (VdServiceOptions::unlink_at, as `cred`), then applies the kRemove as if
// the sender had reported it, and answers once: `unlinked`, the name's
// entry before (`read_vd`), the directory's attributes at that node, and
// what the removal did, as a kRemove's answer. The node's errno fails the
// call (the name released, nothing applied). Otherwise (no such name, an
// alias, a directory) it answers the lock-read, nothing held, and the
// sender unlinks by itself.
//
// kRename is a rename within one directory in one call, of a file (not a
// directory) to a new name (`to`, absent; `flags` 0 or RENAME_NOREPLACE):
// the manager takes the old name's lock and the new name's claim for the
// sender as a kLock with a kClaim would (EEXIST: the new name exists,
// nothing held), reads the old name's entry, has its one node rename it
// (VdServiceOptions::rename_at, as `cred`, never replacing), then applies
// both names' changes at once as if the sender had reported them, and
// answers `renamed` with the old entry. The node's errno fails the call
// (both names released). An old name that is absent, an alias, a
// directory or on several nodes is answered not renamed (both released):
// the sender renames by itself.
struct VdChange {
  enum class Kind : uint8_t {
    kAdd = 0, kRemove = 1, kClaim = 2, kRelease = 3, kLock = 4, kLockRead = 5, kAddNew = 6,
    kUnlink = 7, kRename = 8
  };
  Kind kind = Kind::kAdd;
  std::string name;  // real name in the node's export root
  uint8_t type = 0;  // DT_* (kAdd)
  std::string node;
  uint64_t id = 0;   // kAdd of a directory: its id (nodefs/dir_id.h), 0 unknown
  Cred cred;         // kUnlink, kRename: the caller
  std::string to;    // kRename: the new name
  uint32_t flags = 0;  // kRename: 0 or RENAME_NOREPLACE
};

using VdPtr = std::shared_ptr<const VirtualDirectory>;

class VdService {
 public:
  // `local` lists this node's export root (ListDir with root credentials) and
  // runs on `blocking`. None of the pointers is owned; all outlive this.
  VdService(VdServiceOptions options, m2m::Transport* transport, const ClusterViewSource* cluster,
            NodeFs* local, Executor* blocking);
  ~VdService();

  void RegisterHandlers();  // before the transport's Listen
  // Wires this node's kernel caches (vd/kernel_cache.h; nullptr:
  // none). While it is Coherent(), this node asks managers to notify it of
  // every change of the VDs it gets, and it drops the kernel's names when
  // notified, when it applies as manager a change reported by another node,
  // and when the membership epoch changes.
  void SetKernelCache(KernelCache* k);

  void Get(const std::string& path, std::move_only_function<void(Result<VdPtr>)> done);
  // VD(P) for a lookup of `name` only: the whole VD, or, where this node's
  // directory-table copy went stale, a partial one (`partial`: the entry of
  // `name` or none, the holders, the version) fetched from the manager in a
  // small request (kNsVdGetName) and kept in the table for that name. An
  // empty `name`: no entry, only what the directory's own attributes need
  // (holders, subdirs).
  void GetName(const std::string& path, const std::string& name,
               std::move_only_function<void(Result<VdPtr>)> done);
  // As GetName, but a stale copy of this node's directory table answers as
  // it is (no message): for a decision the manager makes again (a create's
  // check before its claim, which answers EEXIST itself).
  void Peek(const std::string& path, const std::string& name,
            std::move_only_function<void(Result<VdPtr>)> done);
  // Drops this node's directory-table copy of VD(path): the next Get asks
  // the manager.
  void ForgetCached(const std::string& path);
  void Update(const std::string& path, VdChange change, std::move_only_function<void(Status)> done);
  // Several changes of VD(P) applied at once (one version, one invalidation
  // round): a rename within one directory is seen whole or not at all.
  // Claims, locks and releases go alone, except a kLock of one name followed
  // by a kClaim of another: both are taken or neither (EAGAIN if either is
  // held by another node, EEXIST if the claimed name exists), in one call to
  // the manager (a rename within one directory).
  void UpdateMany(const std::string& path, std::vector<VdChange> changes,
                  std::move_only_function<void(Status)> done);
  // kLockRead of visible `name` in VD(P) (see VdChange): the partial VD of
  // that name as GetName answers it (its entry or none) and whether this node now holds the name (then ended, like a
  // kLock, by its kAdd/kRemove or a kRelease). EPROTO from a manager that
  // does not know kLockRead (an older version): nothing was held.
  struct NameRead {
    VdPtr part;  // partial (as GetName answers): the entry of `name` or none
    bool held = false;
  };
  void LockRead(const std::string& path, const std::string& name,
                std::move_only_function<void(Result<NameRead>)> done);
  // kAddNew of `add` (a kAdd) in VD(P) (see VdChange): Ok(true) when the
  // entry was added (then ended by a kRelease or a kRemove of its name from
  // this node), Ok(false) when the name is only claimed (then ended as a
  // kClaim). EEXIST and EAGAIN as a kClaim; EPROTO from a manager that does
  // not know kAddNew (an older version): nothing was held.
  void AddNew(const std::string& path, VdChange add, std::move_only_function<void(Result<bool>)> done);
  // kUnlink of visible `name` in VD(P) as `cred` (see VdChange): `unlinked`
  // with the name's entry before and the directory's attributes at the
  // file's node, or, not unlinked, the name read as LockRead answers it
  // with nothing held (the caller unlinks by itself). ENOSYS from a manager
  // without VdServiceOptions::unlink_at, EPROTO from one that does not know
  // kUnlink: nothing was held. The file node's errno as is.
  struct Unlinked {
    VdPtr part;  // partial: the name's entry before (or none)
    bool unlinked = false;
    std::optional<struct stat> parent;
  };
  void Unlink(const std::string& path, const std::string& name, const Cred& cred,
              std::move_only_function<void(Result<Unlinked>)> done);
  // kRename of file `name` to absent `to` in VD(P) as `cred` (see
  // VdChange): `renamed` with the old name's entry before; not renamed:
  // the sender renames by itself (nothing held). EEXIST: `to` exists
  // (nothing held). ENOSYS, EPROTO as Unlink; the file node's errno as is.
  struct Renamed {
    VdPtr part;  // partial: the old name's entry before (or none)
    bool renamed = false;
  };
  void Rename(const std::string& path, const std::string& name, const std::string& to,
              unsigned flags, const Cred& cred, std::move_only_function<void(Result<Renamed>)> done);
  // P is served by this node: it is P's manager, or P is lent here. Its
  // changes then cost no message to the manager.
  bool ServesHere(const std::string& path);
  void Conflicts(const std::string& path,
                 std::move_only_function<void(Result<std::vector<Conflict>>)> done);
  // One parallel round of kNsVdDrop(path) to every live node (this one
  // locally); completes Ok when all answered or timed out (logged).
  void DropSubtree(const std::string& path, std::move_only_function<void(Status)> done);

  // This node's membership epoch now.
  uint64_t ViewEpoch() const;
  const VdServiceOptions& options() const;

  // Counters for observability and tests.
  struct Stats {
    uint64_t gets_served = 0;      // kNsVdGet answered as manager
    uint64_t dirmerges = 0;        // VDs built
    uint64_t updates_applied = 0;
    uint64_t resident = 0;         // VDs in memory now
    // Client side.
    uint64_t lookups = 0;          // Get calls
    uint64_t gets_sent = 0;        // kNsVdGet requests sent to a manager
    // Manager side: coherence of the directory tables.
    uint64_t sharer_records = 0;         // now
    uint64_t invalidations_sent = 0;     // one-sided bumps issued
    uint64_t invalidations_failed = 0;   // bumps that failed or timed out (sharer dropped)
    uint64_t broadcasts_sent = 0;        // kNsDtInval messages sent (overflow fallback)
    uint64_t changes_invalidated = 0;    // changes that ran an invalidation round
    uint64_t dt_invals_received = 0;     // kNsDtInval handled
    uint64_t notifies_sent = 0;          // kNsDtInval sent to sharers whose kernels cache names
    uint64_t deltas_sent = 0;            // changes sent to sharers as deltas (kNsDtInval patch)
    uint64_t deltas_kept = 0;            // ... that the sharer applied, keeping its copy
    uint64_t kernel_invalidations = 0;   // KernelCache::InvalidateNames calls made here
    // Lost messages: requests resent (client side), invalidations resent and
    // resent requests answered from the first answer (manager side).
    uint64_t resends = 0;
    uint64_t invalidations_resent = 0;
    uint64_t duplicates_answered = 0;
    // Leases (manager side): lent, recalled (before serving another node).
    uint64_t leases_granted = 0;
    uint64_t leases_recalled = 0;
    // Leases (holder side): taken, given back (recalled, expired, epoch), held now.
    uint64_t leases_taken = 0;
    uint64_t leases_ended = 0;
    uint64_t leases_held = 0;
    // Unlinks and renames in one call (kUnlink, kRename): asked of managers
    // elsewhere (client side), and made for the nodes that asked (manager
    // side).
    uint64_t unlinks_asked = 0;
    uint64_t unlinks_made = 0;
    uint64_t renames_asked = 0;  // kRename, likewise
    uint64_t renames_made = 0;
    bool has_dt = false;
    DirTable::Stats dt;            // this node's directory table (if has_dt)
  };
  Stats stats() const;
  // How long dirmerges took, from the fan-out to the merged answer.
  metrics::Histogram::Snapshot DirmergeLatency() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Blocking helpers for worker threads (FUSE), not for the progress context.
//
// While membership views converge (a node joined or died and not every node
// has heard yet), the helpers ask again every few milliseconds, for at most
// options().view_catchup, then return the last answer as it is:
//  * GetVdSync, when the VD was built in an older membership epoch than this
//    node's (its manager has not heard of a change this node knows of, such
//    as a node that just joined, and listed only the nodes it knows);
//  * every helper, on ESTALE: the node this one takes for the manager is not
//    the manager in its own, newer view (VdService retried at once with this
//    node's view, which had not changed yet). ESTALE applied nothing.
Result<VdPtr> GetVdSync(VdService& s, const std::string& path);
Result<VdPtr> GetNameVdSync(VdService& s, const std::string& path, const std::string& name);
Result<VdPtr> PeekVdSync(VdService& s, const std::string& path, const std::string& name);
Status UpdateVdSync(VdService& s, const std::string& path, VdChange change);
Status UpdateManyVdSync(VdService& s, const std::string& path, std::vector<VdChange> changes);
Result<VdService::NameRead> LockReadVdSync(VdService& s, const std::string& path,
                                           const std::string& name);
Result<bool> AddNewVdSync(VdService& s, const std::string& path, VdChange add);
Result<VdService::Renamed> RenameVdSync(VdService& s, const std::string& path,
                                        const std::string& name, const std::string& to,
                                        unsigned flags, const Cred& cred);
Result<VdService::Unlinked> UnlinkVdSync(VdService& s, const std::string& path,
                                         const std::string& name, const Cred& cred);
Status DropSubtreeSync(VdService& s, const std::string& path);

}  // namespace fedfs::ns
