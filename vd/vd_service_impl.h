// Internals of VdService (vd/vd_service.h), shared by vd_service.cc and vd_coherence.cc.
// Internal to fedfs_ns_vd.
#pragma once

// The VD service (vd/vd_service.h): managers, dirmerge fan-out,
// bounded residency, updates. See docs/namespace.md for the protocol.
//
// Structure. VdService::Impl owns a shared Core; every callback and handler
// holds the Core (handlers only weakly), so an answer arriving after the
// service was destroyed finds a closed Core instead of freed memory.
//
// Nothing here blocks, sleeps or starts a thread: remote work completes in
// transport callbacks and local listings run on the blocking executor (an
// InlineExecutor runs them at once in the simulator). One mutex, mu_, guards
// the Core's tables; it is never held while calling out (transport, executor,
// NodeFs, user callbacks), so callbacks may re-enter the service.
#include <dirent.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <atomic>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/cooperative.h"
#include "common/logging.h"
#include "common/rpc_methods.h"
#include "common/wait.h"
#include "common/path.h"
#include "m2m/reply_cache.h"
#include "vd/vd_detail.h"
#include "vd/vd_internal.h"
#include "vd/vd_service.h"
#include "vd/vd_wire.h"

namespace fedfs::ns {

using vd_internal::MergeState;
using namespace vdcodec;  // the messages (vd/vd_wire.h)


using namespace vd_detail;

// ---- The service ------------------------------------------------------------

class VdService::Impl {
 public:
  class Core;
  std::shared_ptr<Core> core;
};

class VdService::Impl::Core : public std::enable_shared_from_this<Core> {
 public:
  Core(VdServiceOptions options, m2m::Transport* transport, const ClusterViewSource* cluster,
       NodeFs* local, Executor* blocking);

  m2m::Transport* transport() const { return transport_; }

  void Close();

  // --- Handlers (progress context) ---

  void OnListLocal(m2m::IncomingCall call, m2m::Responder responder);

  void OnGet(m2m::IncomingCall call, m2m::Responder responder);

  // kNsVdGetName: as kNsVdGet, but the reply holds the entry of one name.
  void OnGetName(m2m::IncomingCall call, m2m::Responder responder);

  // A kNsVdGet for a lookup of req.name (`names` set): answered whole, or,
  // when VD(P) has more than whole_max_entries entries, for that name only
  // with the requester recorded for names only. Decided once VD(P) is
  // resident (`ready`: it was made so).
  void ServeLookupGet(PathRequestData req, m2m::Responder responder, bool uncached, bool ready);

  void OnUpdate(m2m::IncomingCall call, m2m::Responder responder);

  void OnDtInval(m2m::IncomingCall call, m2m::Responder responder);

  void OnConflicts(m2m::IncomingCall call, m2m::Responder responder);

  void OnDrop(m2m::IncomingCall call, m2m::Responder responder);

  // kNsVdRecall (at the node P is lent to): the lease is given back once no
  // claim or lock of this node in P is held; answered then.
  void OnRecall(m2m::IncomingCall call, m2m::Responder responder);

  // kNsVdRenew (at M(P)): the holder's lease runs `lease_term` from when it
  // asked, unless a recall is under way.
  void OnRenew(m2m::IncomingCall call, m2m::Responder responder);

  // Forgets every resident VD at or beneath `path`, and keeps the dirmerges
  // in flight there from becoming resident.
  void DropLocal(const std::string& path);

  // --- Client side (any thread) ---

  void DropSubtree(const std::string& path, std::move_only_function<void(Status)> done);

  // `name` (optional): only that name will be looked up in the answer, which
  // may then be a partial VD (VdService::GetName).
  void Get(const std::string& path, const std::string* name,
           std::move_only_function<void(Result<VdPtr>)> done);
  // Whether lookups in `path` go unrecorded now: a copy that went stale
  // (`stale`: this lookup found it so) twice within options_.churn_gap makes them so
  // for kBusyFor. Each change of a directory that many nodes look into
  // then costs its manager no bump for them; each lookup costs one small
  // request, as a stale copy would anyway.
  bool Churning(const std::string& path, bool stale);
  // Manager side: VD(path) is resident in this epoch, not lent, has at most
  // whole_max_entries entries and has not changed for quiet_after: a name
  // lookup of a whole sharer there is answered with the whole VD
  // (OnGetName; docs/namespace.md, "Quiet again").
  bool QuietLocked(const std::string& path, uint64_t epoch) const;
  // One kNsVdGetName of `name` that records no sharer; the answer is not kept.
  // `have`: the holders of this node's stale copy (not sent back if unchanged).
  void GetUnrecorded(const std::string& path, const std::string& name, bool coherent,
                     std::optional<std::vector<std::string>> have,
                     std::move_only_function<void(Result<VdPtr>)> done);

  void UpdateMany(const std::string& path, std::vector<VdChange> changes,
                  std::move_only_function<void(Status)> done);
  std::string SelfId() const { return cluster_->Current()->self; }
  // Managed here, or lent here (HeldHere).
  bool ServesHere(const std::string& path, const ClusterView& view) {
    const std::string& manager = view.Manager(path);
    return !manager.empty() && (manager == view.self || HeldHere(path, view));
  }
  std::shared_ptr<const ClusterView> View() const { return cluster_->Current(); }
  // As UpdateMany, with the manager's outcome (a kLockRead's answer).
  void UpdateOutcomeOf(const std::string& path, std::vector<VdChange> changes,
                       std::move_only_function<void(Result<UpdateOutcome>)> done);

  void Conflicts(const std::string& path,
                 std::move_only_function<void(Result<std::vector<Conflict>>)> done);

  // VdService::Peek.
  void Peek(const std::string& path, const std::string& name,
            std::move_only_function<void(Result<VdPtr>)> done);

  void ForgetCached(const std::string& path) {
    if (dt_) dt_->Invalidate(path);
  }

  uint64_t ViewEpoch() const { return cluster_->Current()->epoch; }
  const VdServiceOptions& options() const { return options_; }

  Stats stats() const;
  metrics::Histogram::Snapshot DirmergeLatency() const { return dirmerge_latency_.Read(); }

 private:
  // A built VD and the merge state it was derived from; both immutable
  // (an update replaces them), so they are read outside mu_.
  struct Snapshot {
    VdPtr vd;  // not cacheable: a live node's listing is missing (FinishLocked)
    std::shared_ptr<const MergeState> state;
  };
  using Waiter = std::move_only_function<void(Result<Snapshot>)>;

  struct Resident {
    Snapshot snap;
    std::list<std::string>::iterator lru;  // position in lru_
    // The node whose changes came last, and how many in a row (leases).
    std::string streak_node;
    uint32_t streak = 0;
    // When a change was last applied (SteadyNow; unset: none since it was
    // built). A VD unchanged for options_.quiet_after is quiet (QuietLocked).
    std::chrono::steady_clock::time_point changed{};
  };

  // One dirmerge in flight.
  struct Build {
    std::string path;
    uint64_t epoch = 0;
    std::vector<NodeListing> listings;  // one per live node, in node-id order
    size_t outstanding = 0;             // leaves not yet answered (+1 while issuing)
    std::vector<Waiter> waiters;
    std::vector<VdChange> pending;  // updates that arrived during the build
    bool dropped = false;           // DropSubtree covered it: answer, do not keep
    std::chrono::steady_clock::time_point started;  // SteadyNow() when issued
  };

  // A request for M(P): serve here or send, and retry on ESTALE.
  template <class T>
  struct Routed {
    std::string path;
    uint16_t method = 0;
    m2m::Timeout timeout{};
    std::function<m2m::Bytes(const ClusterView&)> encode;
    std::function<void(const ClusterView&, m2m::Callback<T>)> local;
    std::function<Result<T>(const m2m::Bytes&)> decode;
    m2m::Callback<T> done;
    // Optional: sees the result before `done`, with whether a remote manager
    // served it and the epoch of the view the request was sent in.
    std::function<void(const Result<T>&, bool remote, uint64_t epoch)> inspect;
    int attempt = 0;
    // Resent after a broken connection (ConnectionBroken) this many times at most:
    // requests the manager answers the same however often they arrive
    // (claims, locks, releases, reads; changes carry a request id).
    int resends = 0;
    bool resend = false;
    // Resent only to the manager it went to, in the membership epoch it
    // went in (a kUnlink: a new manager, or one that restarted, would not
    // know it was done, and would answer ENOENT).
    bool resend_same_epoch = false;
    uint64_t sent_epoch = 0;
  };

  // Gets and conflicts wait for the manager's own dirmerge leaves (each up to
  // rpc_timeout), so their own deadline is twice that.
  m2m::Timeout ManagerTimeout() const {
    return 2 * std::chrono::duration_cast<m2m::Timeout>(options_.rpc_timeout);
  }

  bool IsClosed() const {
    std::lock_guard lock(mu_);
    return closed_;
  }

  void Refuse(const char* method, const m2m::IncomingCall& call, m2m::Responder responder,
              const Error& e) {
    Log()->warn("refused {} from {}: {}", method, call.peer.remote_addr, e.ToString());
    responder.Fail(e);
  }

  static Status CheckManager(const ClusterView& view, const std::string& path);

  // `view`: the one the caller just read (null: read it now; retries read it
  // again).
  template <class T>
  void Route(std::shared_ptr<Routed<T>> r, std::shared_ptr<const ClusterView> view = nullptr) {
    if (!view) view = cluster_->Current();
    const std::string manager = view->Manager(r->path);
    if (manager.empty()) return r->done(Err(EHOSTDOWN, "no live member to manage " + r->path));
    if (manager == view->self) {
      if (r->inspect) {
        return r->local(*view, [r](Result<T> v) mutable {
          r->inspect(v, false, 0);
          r->done(std::move(v));
        });
      }
      return r->local(*view, std::move(r->done));
    }
    auto addr = view->live.find(manager);
    if (addr == view->live.end()) {
      return r->done(Err(EHOSTDOWN, "manager " + manager + " of " + r->path + " is not alive"));
    }
    if (r->method == MethodId(RpcMethod::kNsVdGet) ||
        r->method == MethodId(RpcMethod::kNsVdGetName)) {
      std::lock_guard lock(mu_);
      ++stats_.gets_sent;
    }
    const uint64_t epoch = view->epoch;
    if (r->resend_same_epoch && r->resends > 0 && epoch != r->sent_epoch) {
      return r->done(Err(ECONNRESET, "the membership changed while " + r->path +
                                         " was changed: its outcome is unknown"));
    }
    r->sent_epoch = epoch;
    auto ep = transport_->GetEndpoint(addr->second);
    auto payload = r->encode(*view);
    const uint16_t method = r->method;
    const m2m::Timeout timeout = r->timeout;
    ep->Call(method, std::move(payload), timeout,
             [self = shared_from_this(), r, epoch](Result<m2m::Bytes> reply) mutable {
               if (!reply && reply.error().code == ESTALE && r->attempt < kMaxStaleRetries) {
                 ++r->attempt;
                 return self->Route(std::move(r));  // with a refreshed view
               }
               if (!reply && r->resend && ConnectionBroken(reply.error().code) &&
                   r->resends < kMaxResends && !self->IsClosed() &&
                   (!r->resend_same_epoch ||
                    self->cluster_->Current()->epoch == r->sent_epoch)) {
                 ++r->resends;
                 {
                   std::lock_guard lock(self->mu_);
                   ++self->stats_.resends;
                 }
                 return self->Route(std::move(r));  // to the manager of a refreshed view
               }
               Result<T> v = reply ? r->decode(*reply) : Result<T>(Err(reply.error()));
               if (reply && !v) {
                 Log()->warn("bad reply to method {} for {}: {}", r->method, r->path,
                             v.error().ToString());
               }
               if (r->inspect) r->inspect(v, true, epoch);
               r->done(std::move(v));
             });
  }

  // --- Manager side ---

  // `names`: record `from` names-only (kNsVdGetName); `*recorded` (if
  // given) says whether it was.
  void ServeGet(const std::string& path, const std::string& from,
                std::optional<SharerSlotData> sharer, bool notify, m2m::Callback<VdPtr> done,
                bool names = false, std::shared_ptr<bool> recorded = nullptr);

  // Runs `retry` when the round of `path` in flight (rounds_) ends.
  void QueueBehindRoundLocked(const std::string& path, std::move_only_function<void()> retry) {
    rounds_.at(path).push_back(std::move(retry));
  }

  void ServeConflicts(const std::string& path, m2m::Callback<std::vector<Conflict>> done);

  // Applies `changes` (made on their nodes, reported by `from`) to the
  // resident VD(P) at once, invalidates the other sharers of P, then answers
  // what they did (version 0 when P is not resident: the next get rebuilds
  // it). Claims and releases: see ServeClaim.
  // `lease_ok`: the reporter may be lent P (MaybeLendLocked). `adding`: the
  // kAdd of a kAddNew (ServeAddNew): its claim is kept, with the entry.
  void ServeUpdate(const std::string& path, std::vector<VdChange> changes, const std::string& from,
                   const ClusterView& view, m2m::Callback<UpdateOutcome> done,
                   bool lease_ok = false, uint64_t holders_hash = 0, bool adding = false);

  // --- Leases (vd_lease.cc; docs/namespace.md, "Leases") ---

  // Manager side: P lent to `node`.
  struct Lent {
    std::string node;
    uint64_t id = 0;
    std::chrono::steady_clock::time_point renewed;  // granted or last renewed (here)
    bool recalling = false;
    std::vector<std::move_only_function<void()>> waiting;  // served once it is back
  };
  // Holder side: P lent to this node.
  struct Held {
    uint64_t id = 0;
    uint64_t epoch = 0;
    std::chrono::steady_clock::time_point expires;  // by this node's clock
    bool renewing = false;
    bool returning = false;                 // recalled: new claims and locks refused
    std::vector<m2m::Responder> recalls;    // answered once it is given back
  };

  // Manager side: if P is lent, `retry` runs once it is back (the recall is
  // sent if it is not under way) and true is returned; false: not lent.
  // `make()` builds `retry`; it is called only if P is lent.
  template <class MakeRetry>
  bool RecallFirst(const std::string& path, MakeRetry&& make) {
    if (!AnyLeases()) return false;
    bool send = false;
    {
      std::lock_guard lock(mu_);
      auto it = lent_.find(path);
      if (it == lent_.end()) return false;
      it->second.waiting.push_back(make());
      send = !std::exchange(it->second.recalling, true);
    }
    if (send) SendRecall(path);
    return true;
  }
  void SendRecall(const std::string& path);
  // The recall ended (`version`: the holder's last); the VD is rebuilt from
  // the export roots at its next use, and what waited runs.
  void EndLent(const std::string& path, uint64_t id, uint64_t version);
  // Holder side: asks M(P) to extend the lease (`asked`: now).
  void SendRenew(const std::string& path, uint64_t id, std::chrono::steady_clock::time_point asked);
  // Under mu_, after `changes` from `from` were applied to resident `r`: the
  // lease to hand out with the reply, if P may be lent to `from` now.
  std::optional<LeaseData> MaybeLendLocked(const std::string& path, Resident& r,
                                           const std::string& from, const ClusterView& view);
  // Under mu_: whether a change of P by `from` may count toward a lease
  // (leases on, `from` another live node); `r`'s run restarts at `from`
  // when the last change was another node's.
  bool InRunLocked(Resident& r, const std::string& from, const ClusterView& view);
  // Under mu_: whether P may be lent to `from` now, its run of changes
  // aside (no sharer but `from`, no claim, round, build or recent recall).
  bool LendableLocked(const std::string& path, const Resident& r, const std::string& from,
                      const ClusterView& view);
  // Under mu_, before a kAddNew of `from` is applied: whether the change
  // would lend P (then the name is only claimed, and P lent with the kAdd
  // that follows); otherwise the change is counted in the run as
  // MaybeLendLocked counts it.
  bool LendsNextLocked(const std::string& path, Resident& r, const std::string& from,
                       const ClusterView& view);

  // Holder side: whether this node serves P itself now (a lease held in this
  // epoch and not expired; an ended one is cleaned up, a renewal sent when due).
  bool HeldHere(const std::string& path, const ClusterView& view);

  // Installs the lease of an update's reply (its request left at `asked`).
  void InstallLease(const std::string& path, const UpdateOutcome& o,
                    std::chrono::steady_clock::time_point asked);
  // Gives P back if it is being returned and nothing of this node holds a
  // name there; answers the recalls.
  void MaybeReturn(const std::string& path);
  // Under mu_: forgets the lease of P here (its VD and holds too); the
  // recalls to answer are moved to `answer`.
  void EndHeldLocked(std::unordered_map<std::string, Held>::iterator it,
                     std::vector<m2m::Responder>* answer);
  // EAGAIN while P's lease is being returned (claims and locks then go to
  // M(P)), or once it ended (kLeaseEnded): this node neither manages P nor
  // holds its lease, and an operation that found P lent here must not decide
  // on a copy of P here.
  Status ReturningLocked(const std::string& path) const;
  // EAGAIN (kLeaseEnded) when this node neither manages P nor holds its
  // lease.
  Status ServedHereLocked(const std::string& path) const;
  bool AnyLeases() const { return lease_count_.load(std::memory_order_acquire) > 0; }

  // --- Claims (see VdChange) ---

  struct Claim {
    std::string node;
    std::chrono::steady_clock::time_point expires;
    // A kAddNew's entry, added already: added again to VD(P) if it is
    // rebuilt before the claim ends (the export roots may not have it yet).
    std::optional<VdChange> add;
    // A kAddNew's claim: the token its kRelease names (VdChange::id); a
    // release naming another token leaves this hold alone.
    uint64_t token = 0;
  };

  std::chrono::steady_clock::duration ClaimLifetime() const { return 4 * options_.rpc_timeout; }

  // The unexpired claim or lock of `name` in `path` held by a node other than
  // `node`, or nullptr (expired ones are dropped on the way).
  const Claim* OtherHoldLocked(const std::string& path, const std::string& name,
                               const std::string& node);

  // EAGAIN while another node holds `name` in `path` (OtherHoldLocked).
  Status BusyLocked(const std::string& path, const std::string& name, const std::string& node);

  // A new claim or lock by `node`, from now for ClaimLifetime().
  Claim HoldBy(const std::string& node) const {
    return Claim{node, SteadyNow() + ClaimLifetime()};
  }

  // Ends the claim or lock of `name` in `path` by `node`, if any (with a
  // `token`, not 0: only the kAddNew claim of that token).
  void EndClaimLocked(const std::string& path, const std::string& name, const std::string& node,
                      uint64_t token = 0);

  // kClaim: EEXIST if `name` is in VD(P) (built if needed), EAGAIN if another
  // node holds it (unexpired); else claimed. kRelease: the hold ends. Holds
  // belong to the requesting node `from`, not to the node the name is (to
  // be) on: two nodes creating one name on a third must not share a claim.
  void ServeClaim(const std::string& path, VdChange change, const std::string& from,
                  m2m::Callback<UpdateOutcome> done);

  // The kClaim of `name`, with a kLock of `lock` in the same step when given
  // (a rename within one directory: both or neither; the first one refused
  // decides the answer and nothing is held then).
  // The common start of claims and lock-reads: VD(P) resident, no
  // invalidation round of P in flight (else queued behind it), P not being
  // returned by its borrower; then `decide` runs under mu_ with the newest
  // resident snapshot, and its answer (or the error before it) goes to
  // `done` once mu_ is released.
  void DecideSettled(const std::string& path, m2m::Callback<UpdateOutcome> done,
                     std::move_only_function<Result<UpdateOutcome>(const Snapshot&)> decide);
  // kLockRead (see VdChange): the lock decided and the name read in one step.
  void ServeLockRead(const std::string& path, std::string name, const std::string& from,
                     m2m::Callback<UpdateOutcome> done);
  // kUnlink (see VdChange; vd_unlink.cc): a kLockRead for `from`, the
  // file's node's unlink (options_.unlink_at), then the kRemove as ServeUpdate.
  void ServeUnlink(const std::string& path, VdChange change, const std::string& from,
                   const ClusterView& view, m2m::Callback<UpdateOutcome> done, bool lease_ok,
                   uint64_t holders_hash);
  // kRename (see VdChange; vd_unlink.cc): the lock and the claim for `from`
  // (ServeClaimOf), the old name read, the file's node's rename
  // (options_.rename_at), then both names' changes as ServeUpdate.
  void ServeRename(const std::string& path, VdChange change, const std::string& from,
                   const ClusterView& view, m2m::Callback<UpdateOutcome> done, bool lease_ok,
                   uint64_t holders_hash);
  void ServeClaimOf(const std::string& path, std::string name, std::optional<std::string> lock,
                    const std::string& from, m2m::Callback<UpdateOutcome> done);
  // Under mu_: the checks of a claim of `name` (with a lock of `lock`) on
  // `cur` (EEXIST, EAGAIN), then the hold recorded.
  Status ClaimLocked(const std::string& path, const std::string& name,
                     const std::optional<std::string>& lock, const std::string& from,
                     const Snapshot& cur);
  // kAddNew (see VdChange): the claim decided as ServeClaimOf, then the kAdd
  // applied as ServeUpdate does with the claim kept (`adding`); only claimed
  // where VD(P) is not resident nor being built, or where the kAdd would
  // lend P (MaybeLendLocked: lent with the kAdd that follows instead).
  void ServeAddNew(const std::string& path, VdChange add, const std::string& from,
                   const ClusterView& view, m2m::Callback<UpdateOutcome> done, bool lease_ok,
                   uint64_t holders_hash);

  // --- Sharers (manager side; see the header) ---

  struct SharerRec {
    std::string node;
    uint32_t slot = 0;
    bool has_slot = false;  // bump the word of `slot` (one-sided)
    bool notify = false;    // send kNsDtInval and wait (its kernel caches names)
    // Keeps only names that exist and the directory's holders and
    // subdirectories (PathRequest.names): not bumped, and kept, at a change
    // that only adds new names (TakeSharersLocked).
    bool names_only = false;
  };
  // A sharer node's DT words, imported on its endpoint when first needed.
  struct NodeRegion {
    m2m::RegionDesc desc;
    std::string addr;  // the endpoint `remote` was imported on
    std::shared_ptr<m2m::Endpoint> ep;
    std::shared_ptr<m2m::RemoteRegion> remote;
  };

  // `names`: a names-only record (SharerRec::names_only), never past
  // max_sharers_per_vd of them (then not recorded: false; whole records are
  // bounded apart, past it the directory's changes are broadcast); a node's record is
  // whole if any of its requests asked for the whole VD. True when `node`
  // will be told of the next change that concerns it (recorded, or
  // broadcast).
  bool RecordSharerLocked(const std::string& path, const std::string& node,
                          const SharerSlotData* sharer, bool notify, bool names = false);

  // The sharers of `path` to invalidate for a change reported by `from`;
  // they are forgotten (they re-register when they refetch). `from` keeps
  // its record: it patches its copy from the reply.
  // `additive`: the change only added names that did not exist, no
  // directory, on nodes that already held P: names-only records stay.
  std::vector<SharerRec> TakeSharersLocked(const std::string& path, const std::string& from,
                                           bool additive = false);

  // The endpoint and imported DT words of `node`, or an error.
  Result<std::pair<std::shared_ptr<m2m::Endpoint>, std::shared_ptr<m2m::RemoteRegion>>> RegionOf(
      const std::string& node, const std::string& addr);

  // The change `changes` of resident VD `snap` (now at its version, before
  // at `prev_version`) as a delta for sharers (vd/vd_delta.cc).
  static DtPatchData DeltaOf(const Snapshot& snap, uint64_t prev_version,
                             const std::vector<VdChange>& changes);
  // One parallel round: a one-sided FetchAdd(+1) on each target's slot word
  // (and, for `broadcast`, a kNsDtInval to every other live node); `done`
  // when every one completed or failed. One whose connection broke is
  // resent while its node is alive (kMaxResends); a node that is declared
  // dead meanwhile needs none (its DT dies with its epoch); one that still
  // fails or times out is logged and its sharer dropped.
  // With `delta` (the change, VD(P) resident here), a whole-copy sharer
  // with a slot is sent the change instead (kNsDtInval with `patch`,
  // docs/namespace.md "Changes as deltas"); `done` gets those that kept
  // their copy, to be recorded again.
  void InvalidateSharers(const std::string& path, std::vector<SharerRec> targets, bool broadcast,
                         const ClusterView& view, const std::string& from,
                         const DtPatchData* delta,
                         std::move_only_function<void(std::vector<SharerRec>)> done);
  // One of a round's messages to `node`: a kNsDtInval (`bump` false; with
  // `patch`, the change to apply) or the bump of `slot`; `finish` once it is
  // done, failed or no longer needed, true when the node kept its copy.
  void SendInvalidation(const std::string& path, const std::string& node, bool bump,
                        uint32_t slot, int attempt, std::shared_ptr<const m2m::Bytes> patch,
                        std::function<void(bool)> finish);

  void Touch(Resident& r) { lru_.splice(lru_.begin(), lru_, r.lru); }

  // The sharers of an evicted VD stay recorded (sharers_ is kept apart from
  // residency), so a change after a rebuild still invalidates them.
  void EvictLocked(std::unordered_map<std::string, Resident>::iterator it) {
    lru_.erase(it->second.lru);
    resident_.erase(it);
  }

  // Calls `waiter` with VD(P) of the current epoch: resident, or joined to
  // the dirmerge in flight, or after a new dirmerge.
  void EnsureResident(const std::string& path, Waiter waiter);

  static constexpr size_t kIssued = static_cast<size_t>(-1);

  // This node's own dirmerge leaf, run on the blocking executor. Completes
  // the leaf exactly once: by Run(), or with ESHUTDOWN when destroyed unrun.
  class LocalLeaf {
   public:
    LocalLeaf(std::shared_ptr<Core> core, std::shared_ptr<Build> build, size_t i)
        : core_(std::move(core)), build_(std::move(build)), i_(i) {}
    LocalLeaf(const LocalLeaf&) = delete;
    LocalLeaf& operator=(const LocalLeaf&) = delete;
    ~LocalLeaf() {
      if (!done_) core_->LeafDone(build_, i_, Err(ESHUTDOWN, "local listing dropped"));
    }
    void Run() {
      done_ = true;
      if (!core_->IsClosed() && core_->options_.on_local_listing) {
        core_->options_.on_local_listing(build_->path);  // before listing, as in OnListLocal
      }
      Result<std::vector<DirEntry>> r = core_->IsClosed()
                                            ? Err(ESHUTDOWN, "VD service closed")
                                            : core_->local_->ListDir(Cred{}, build_->path);
      if (r && core_->options_.annotate_listing) {
        core_->options_.annotate_listing(build_->path, &*r);
      }
      core_->LeafDone(build_, i_, std::move(r));
    }

   private:
    std::shared_ptr<Core> core_;
    std::shared_ptr<Build> build_;
    size_t i_;
    bool done_ = false;
  };

  // One leaf answered (or `kIssued`: every leaf was sent). The last one merges,
  // makes the VD resident and answers the waiters.
  void LeafDone(const std::shared_ptr<Build>& build, size_t i, Result<std::vector<DirEntry>> r);
  // Asks `node` (at `addr`) for its listing of the build's path, leaf `i`;
  // sent again (up to kMaxResends) when the connection lost it: a listing
  // left out is a VD served without that node's names.
  void ListRemote(const std::shared_ptr<Build>& build, size_t i, std::string node,
                  std::string addr, std::shared_ptr<const ClusterView> view, int resends);

  Result<Snapshot> FinishLocked(Build& build);

  VdServiceOptions options_;
  m2m::Transport* const transport_;
  const ClusterViewSource* const cluster_;
  NodeFs* const local_;
  Executor* const blocking_;

  mutable std::mutex mu_;  // a leaf lock: nothing is called out while held
  bool closed_ = false;
  std::unordered_map<std::string, Resident> resident_;
  std::list<std::string> lru_;  // most recently used first
  std::unordered_map<std::string, std::shared_ptr<Build>> builds_;
  uint64_t version_floor_ = 0;  // the largest VD version handed out
  Stats stats_;
  metrics::Histogram dirmerge_latency_;  // issue to answer of every build
  // Coherence (manager side), guarded by mu_.
  std::unordered_map<std::string, std::vector<SharerRec>> sharers_;
  std::unordered_set<std::string> broadcast_paths_;  // sharer lists that overflowed
  bool broadcast_all_ = false;                       // all records overflowed
  size_t sharer_records_ = 0;
  std::map<std::string, NodeRegion> node_regions_;
  // Directories with an invalidation round in flight, and the requests for
  // them that came meanwhile (guarded by mu_). Until every old copy is
  // invalidated, the new state is shown to no one: a get served it now could
  // be followed by a hit on a sharer's old copy whose bump is still on its
  // way. Changes and claims wait too, checked in the same critical section
  // that applies or reads the state, so rounds of one directory never
  // overlap (a change acknowledged during another's round would be missing
  // from copies not yet invalidated).
  std::unordered_map<std::string, std::vector<std::move_only_function<void()>>> rounds_;
  // kNsVdUpdate requests with a request id (vd_service.h, "Lost messages").
  m2m::ReplyCache answered_;
  std::atomic<uint64_t> request_ids_;  // this node's next request id (seeded at random)

 public:
  uint64_t NextRequestId() { return request_ids_.fetch_add(1, std::memory_order_relaxed); }

 private:
  // Claimed names per directory (see VdChange), guarded by mu_.
  std::unordered_map<std::string, std::map<std::string, Claim>> claims_;
  std::unique_ptr<DirTable> dt_;  // this node's directory table (client side); set once
  // Leases (guarded by mu_); lease_count_ = lent_.size() + held_.size(), read
  // without mu_ so that the common case (none) costs no lock.
  std::unordered_map<std::string, Lent> lent_;
  std::unordered_map<std::string, Held> held_;
  std::unordered_map<std::string, uint64_t> revoked_;  // recalled before it arrived
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> recalled_at_;
  // When each directory's change was last notified here (kNsDtInval).
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> notified_;
  static constexpr std::chrono::milliseconds kBusyFor{250};
  // Directories whose copy here went stale twice within kChurnGap: looked up
  // unrecorded for kBusyFor (Churning). Short, so that names are cached by
  // the kernel again soon after the changes stop.
  struct Churn {
    std::chrono::steady_clock::time_point last_stale, busy_until;
  };
  std::unordered_map<std::string, Churn> churn_;

 public:
  // Whether `path` was notified here within kBusyFor.
  bool Busy(const std::string& path) const {
    std::lock_guard lock(mu_);
    auto it = notified_.find(path);
    return it != notified_.end() && SteadyNow() < it->second + kBusyFor;
  }

 private:
  uint64_t lease_ids_ = 0;
  std::atomic<size_t> lease_count_{0};
  std::atomic<KernelCache*> kernel_{nullptr};

 public:
  void SetKernelCache(KernelCache* k) { kernel_.store(k, std::memory_order_release); }
  bool KernelCoherent() const {
    KernelCache* k = kernel_.load(std::memory_order_acquire);
    return k != nullptr && k->Coherent();
  }
  void DropKernelNames();
  // The kernel's names `names` of directory `path` only (null: any of its
  // names; KernelCache::InvalidateNamesOf).
  void DropKernelNamesOf(const std::string& path,
                         const std::vector<std::string>* names = nullptr);

 private:
};

}  // namespace fedfs::ns
