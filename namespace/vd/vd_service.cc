// The VD service (namespace/vd/vd_service.h): managers, dirmerge fan-out,
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
#include "namespace/vd/vd_service.h"

#include <algorithm>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "common/logging.h"
#include "common/rpc_methods.h"
#include "common/wait.h"
#include "namespace/path.h"
#include "namespace/vd/vd_internal.h"
#include "namespace/vd/vd_wire.h"

namespace fedfs::ns {

using vd_internal::MergeState;
using namespace vdcodec;  // the messages (namespace/vd/vd_wire.h)

namespace {

// A client that hears ESTALE refreshes its view and retries this many times.
constexpr int kMaxStaleRetries = 3;

std::shared_ptr<spdlog::logger> Log() {
  static auto logger = Logger("vd");
  return logger;
}

// The key a DT entry is bound to: the membership epoch, and whether it was
// fetched with `notify` (top bit; epochs never reach it).
uint64_t DtEpoch(uint64_t epoch, bool notify) {
  return notify ? epoch | (uint64_t{1} << 63) : epoch;
}

Status ValidateChange(const VdChange& c) {
  if (auto s = ValidateName(c.name); !s) return s;
  if (c.node.empty()) return Err(EINVAL, "VD change without a node");
  return Ok();
}

// Every change valid; claims and releases alone; at most kMaxChangesPerUpdate.
// A lock of one name and a claim of another, taken together (a rename within
// one directory: VdService::UpdateMany).
bool IsLockAndClaim(const std::vector<VdChange>& changes) {
  return changes.size() == 2 && changes[0].kind == VdChange::Kind::kLock &&
         changes[1].kind == VdChange::Kind::kClaim && changes[0].name != changes[1].name;
}

Status ValidateChanges(const std::vector<VdChange>& changes) {
  if (changes.empty()) return Err(EINVAL, "VD update without a change");
  if (changes.size() > kMaxChangesPerUpdate) return Err(EINVAL, "VD update with too many changes");
  for (const VdChange& c : changes) {
    if (auto s = ValidateChange(c); !s) return s;
    const bool claim = c.kind == VdChange::Kind::kClaim || c.kind == VdChange::Kind::kRelease ||
                       c.kind == VdChange::Kind::kLock;
    if (claim && changes.size() > 1 && !IsLockAndClaim(changes)) {
      return Err(EINVAL, "a VD claim, lock or release goes alone (or a lock with one claim)");
    }
  }
  return Ok();
}

}  // namespace

// ---- The service ------------------------------------------------------------

class VdService::Impl {
 public:
  class Core;
  std::shared_ptr<Core> core;
};

class VdService::Impl::Core : public std::enable_shared_from_this<Core> {
 public:
  Core(VdServiceOptions options, m2m::Transport* transport, const ClusterViewSource* cluster,
       NodeFs* local, Executor* blocking)
      : options_(options),
        transport_(transport),
        cluster_(cluster),
        local_(local),
        blocking_(blocking) {
    if (options_.max_resident_vds == 0) options_.max_resident_vds = 1;
    if (options_.max_sharers_per_vd == 0) options_.max_sharers_per_vd = 1;
    if (options_.dt_entries > 0 && transport_ != nullptr) {
      auto dt = DirTable::Create(
          DirTableOptions{.max_entries = options_.dt_entries, .max_bytes = options_.dt_bytes},
          transport_);
      if (dt) {
        dt_ = std::move(*dt);
      } else {
        Log()->error("no directory table ({}): every lookup asks the manager",
                     dt.error().ToString());
      }
    }
  }

  m2m::Transport* transport() const { return transport_; }

  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    resident_.clear();
    lru_.clear();
  }

  // --- Handlers (progress context) ---

  void OnListLocal(m2m::IncomingCall call, m2m::Responder responder) {
    auto req = DecodePathRequest(call.payload);
    if (!req) return Refuse("kNsListLocal", call, std::move(responder), req.error());
    if (auto s = ValidateGlobalPath(req->path); !s) {
      return Refuse("kNsListLocal", call, std::move(responder), s.error());
    }
    blocking_->Post([self = shared_from_this(), path = std::move(req->path),
                     responder = std::move(responder)]() mutable {
      if (self->IsClosed()) return responder.Fail(Error{ESHUTDOWN, "VD service closed"});
      // Watched before it is listed: a change in between is both listed and
      // reported (harmless), never neither.
      if (self->options_.on_local_listing) self->options_.on_local_listing(path);
      auto listing = self->local_->ListDir(Cred{}, path);
      if (!listing) return responder.Fail(listing.error());
      responder.Reply(EncodeListing(*listing));
    });
  }

  void OnGet(m2m::IncomingCall call, m2m::Responder responder) {
    auto req = DecodePathRequest(call.payload);
    if (!req) return Refuse("kNsVdGet", call, std::move(responder), req.error());
    if (auto s = ValidateGlobalPath(req->path); !s) {
      return Refuse("kNsVdGet", call, std::move(responder), s.error());
    }
    auto view = cluster_->Current();
    if (auto s = CheckManager(*view, req->path); !s) return responder.Fail(s.error());
    // A requester this manager does not see as a live member (membership
    // still converging) is served but not recorded: its copy is marked
    // uncacheable, since no change would invalidate it.
    const bool uncached = (req->sharer || req->notify) && !view->IsAlive(req->from);
    if (uncached) {
      req->sharer.reset();
      req->notify = false;
    }
    ServeGet(req->path, req->from, std::move(req->sharer), req->notify,
             [responder = std::move(responder), uncached](Result<VdPtr> vd) mutable {
               if (!vd) return responder.Fail(vd.error());
               responder.Reply(EncodeVd(**vd, uncached || !(*vd)->cacheable));
             });
  }

  void OnUpdate(m2m::IncomingCall call, m2m::Responder responder) {
    auto req = DecodeUpdateRequest(call.payload);
    if (!req) return Refuse("kNsVdUpdate", call, std::move(responder), req.error());
    Status valid = ValidateGlobalPath(req->path);
    if (valid) valid = ValidateChanges(req->changes);
    if (!valid) return Refuse("kNsVdUpdate", call, std::move(responder), valid.error());
    auto view = cluster_->Current();
    if (auto s = CheckManager(*view, req->path); !s) return responder.Fail(s.error());
    ServeUpdate(req->path, std::move(req->changes), req->from, *view,
                [responder = std::move(responder)](Result<UpdateOutcome> o) mutable {
                  if (!o) return responder.Fail(o.error());
                  responder.Reply(EncodeUpdateReply(*o));
                });
  }

  void OnDtInval(m2m::IncomingCall call, m2m::Responder responder) {
    auto req = DecodePathRequest(call.payload);
    if (!req) return Refuse("kNsDtInval", call, std::move(responder), req.error());
    if (auto s = ValidateGlobalPath(req->path); !s) {
      return Refuse("kNsDtInval", call, std::move(responder), s.error());
    }
    if (dt_) dt_->Invalidate(req->path);
    DropKernelNames();
    {
      std::lock_guard lock(mu_);
      ++stats_.dt_invals_received;
    }
    responder.Reply({});
  }

  void OnConflicts(m2m::IncomingCall call, m2m::Responder responder) {
    auto req = DecodePathRequest(call.payload);
    if (!req) return Refuse("kNsConflicts", call, std::move(responder), req.error());
    if (auto s = ValidateGlobalPath(req->path); !s) {
      return Refuse("kNsConflicts", call, std::move(responder), s.error());
    }
    auto view = cluster_->Current();
    if (auto s = CheckManager(*view, req->path); !s) return responder.Fail(s.error());
    ServeConflicts(req->path, [responder = std::move(responder)](
                                  Result<std::vector<Conflict>> c) mutable {
      if (c.has_value()) {
        const std::vector<Conflict>& list = c.value();
        responder.Reply(EncodeConflicts(list));
      } else {
        responder.Fail(c.error());
      }
    });
  }

  void OnDrop(m2m::IncomingCall call, m2m::Responder responder) {
    auto req = DecodePathRequest(call.payload);
    if (!req) return Refuse("kNsVdDrop", call, std::move(responder), req.error());
    if (auto s = ValidateGlobalPath(req->path); !s) {
      return Refuse("kNsVdDrop", call, std::move(responder), s.error());
    }
    DropLocal(req->path);
    responder.Reply({});
  }

  // Forgets every resident VD at or beneath `path`, and keeps the dirmerges
  // in flight there from becoming resident.
  void DropLocal(const std::string& path) {
    if (dt_) dt_->InvalidateSubtree(path);
    std::lock_guard lock(mu_);
    for (auto it = resident_.begin(); it != resident_.end();) {
      auto next = std::next(it);
      if (PathWithin(it->first, path)) EvictLocked(it);
      it = next;
    }
    for (auto& [p, b] : builds_) {
      if (PathWithin(p, path)) b->dropped = true;
    }
  }

  // --- Client side (any thread) ---

  void DropSubtree(const std::string& path, std::move_only_function<void(Status)> done) {
    if (auto s = ValidateGlobalPath(path); !s) return done(Err(s.error()));
    auto view = cluster_->Current();
    struct Round {
      std::mutex mu;
      size_t outstanding = 0;
      std::move_only_function<void(Status)> done;
    };
    auto round = std::make_shared<Round>();
    round->outstanding = 1;  // this node, below
    for (const auto& [node, addr] : view->live) {
      if (node != view->self) ++round->outstanding;
    }
    round->done = std::move(done);
    auto finish = [round] {
      std::move_only_function<void(Status)> d;
      {
        std::lock_guard lock(round->mu);
        if (--round->outstanding > 0) return;
        d = std::move(round->done);
      }
      d(Ok());
    };
    // One parallel round to every other live node; a node that does not answer
    // in time is logged (its residency ends with the next epoch anyway).
    for (const auto& [node, addr] : view->live) {
      if (node == view->self) continue;
      transport_->GetEndpoint(addr)->Call(
          MethodId(RpcMethod::kNsVdDrop), EncodePathRequest(path, *view),
          std::chrono::duration_cast<m2m::Timeout>(options_.rpc_timeout),
          [finish, node, path](Result<m2m::Bytes> r) mutable {
            if (!r) Log()->warn("drop of VDs under {} at {}: {}", path, node, r.error().ToString());
            finish();
          });
    }
    DropLocal(path);
    finish();
  }


  void Get(const std::string& path, std::move_only_function<void(Result<VdPtr>)> done) {
    if (auto s = ValidateGlobalPath(path); !s) return done(Err(s.error()));
    {
      std::lock_guard lock(mu_);
      ++stats_.lookups;
    }
    auto view = cluster_->Current();
    const std::string& manager = view->Manager(path);
    // Managed here: served at once, as Route would (no Routed to build).
    if (!manager.empty() && manager == view->self) {
      return ServeGet(path, view->self, std::nullopt, false, std::move(done));
    }
    std::optional<DirTable::Ticket> ticket;
    std::optional<SharerSlotData> sharer;
    // A copy fetched without `notify` must not feed a kernel that caches
    // names (its manager would not tell this node's kernel of changes): DT
    // entries are bound to the epoch and to the notify mode they came with.
    const bool notify = KernelCoherent();
    if (dt_ && !manager.empty()) {  // managed elsewhere
      if (VdPtr vd = dt_->Find(path, DtEpoch(view->epoch, notify))) return done(std::move(vd));
      ticket = dt_->Reserve(path);
      sharer = SharerSlotData{ticket->slot, dt_->region()};
    }
    auto self = shared_from_this();
    auto r = std::make_shared<Routed<VdPtr>>();
    r->path = path;
    r->method = MethodId(RpcMethod::kNsVdGet);
    r->timeout = ManagerTimeout();
    r->encode = [path, sharer = std::move(sharer), notify](const ClusterView& v) {
      return EncodePathRequest(path, v, sharer ? &*sharer : nullptr, notify);
    };
    r->local = [self, path](const ClusterView& v, m2m::Callback<VdPtr> cb) {
      self->ServeGet(path, v.self, std::nullopt, false, std::move(cb));
    };
    r->decode = [](const m2m::Bytes& b) { return DecodeVd(b); };
    if (ticket) {
      r->inspect = [self, ticket = std::move(*ticket), notify](const Result<VdPtr>& vd,
                                                                bool remote, uint64_t epoch) {
        // Only a VD served by a manager that recorded the slot may be kept,
        // and only one built in the epoch it is kept under: a manager whose
        // view is behind this node's listed only the nodes it knows, and its
        // next epoch would not invalidate the copy here.
        if (vd && remote && (*vd)->cacheable && (*vd)->epoch == epoch) {
          self->dt_->Install(ticket, *vd, DtEpoch(epoch, notify));
        }
      };
    }
    r->done = std::move(done);
    Route(std::move(r));
  }

  void UpdateMany(const std::string& path, std::vector<VdChange> changes,
                  std::move_only_function<void(Status)> done) {
    Status valid = ValidateGlobalPath(path);
    if (valid) valid = ValidateChanges(changes);
    if (!valid) return done(Err(valid.error()));
    auto self = shared_from_this();
    // Claims, locks and releases change no entry, and their replies carry no
    // version (patching with one would drop the cached copy: a refetch of
    // the whole VD per unlink or rename).
    auto view = cluster_->Current();
    const std::string& manager = view->Manager(path);
    // Managed here: this node keeps no DT copy of its own VDs to patch or to
    // guard.
    const bool here = !manager.empty() && manager == view->self;
    const bool own = !here && dt_ && std::ranges::any_of(changes, [](const VdChange& c) {
      return c.kind == VdChange::Kind::kAdd || c.kind == VdChange::Kind::kRemove;
    });
    auto finish = [self, path, own, done = std::move(done)](Result<UpdateOutcome> v) mutable {
      if (own) self->dt_->EndOwnChange(path);  // after the patch (inspect runs first)
      if (!v) return done(Err(v.error()));
      done(Ok());
    };
    // Served at once, as Route would (no Routed to build).
    if (here) return ServeUpdate(path, std::move(changes), view->self, *view, std::move(finish));
    if (own) dt_->BeginOwnChange(path);
    auto r = std::make_shared<Routed<UpdateOutcome>>();
    r->path = path;
    r->method = MethodId(RpcMethod::kNsVdUpdate);
    // The manager waits for its sharers' invalidations (up to rpc_timeout).
    r->timeout = 2 * std::chrono::duration_cast<m2m::Timeout>(options_.rpc_timeout);
    r->encode = [path, changes](const ClusterView& v) {
      return EncodeUpdateRequest(path, changes, v);
    };
    r->local = [self, path, changes](const ClusterView& v, m2m::Callback<UpdateOutcome> cb) {
      self->ServeUpdate(path, changes, v.self, v, std::move(cb));
    };
    r->decode = [](const m2m::Bytes& b) { return DecodeUpdateReply(b); };
    if (own) {
      r->inspect = [self, path](const Result<UpdateOutcome>& o, bool remote, uint64_t) {
        if (!remote) return;  // served here: this node keeps no DT copy of its own VDs
        if (!o) return self->dt_->Invalidate(path);
        self->dt_->Patch(path, o->prev_version, o->version, o->keys, o->fresh, o->holders);
      };
    }
    r->done = std::move(finish);
    Route(std::move(r), std::move(view));
  }

  void Conflicts(const std::string& path,
                 std::move_only_function<void(Result<std::vector<Conflict>>)> done) {
    if (auto s = ValidateGlobalPath(path); !s) return done(Err(s.error()));
    auto self = shared_from_this();
    auto r = std::make_shared<Routed<std::vector<Conflict>>>();
    r->path = path;
    r->method = MethodId(RpcMethod::kNsConflicts);
    r->timeout = ManagerTimeout();
    r->encode = [path](const ClusterView& v) { return EncodePathRequest(path, v); };
    r->local = [self, path](const ClusterView&, m2m::Callback<std::vector<Conflict>> cb) {
      self->ServeConflicts(path, std::move(cb));
    };
    r->decode = [](const m2m::Bytes& b) { return DecodeConflicts(b); };
    r->done = std::move(done);
    Route(std::move(r));
  }

  void ForgetCached(const std::string& path) {
    if (dt_) dt_->Invalidate(path);
  }

  uint64_t ViewEpoch() const { return cluster_->Current()->epoch; }
  const VdServiceOptions& options() const { return options_; }

  Stats stats() const {
    std::lock_guard lock(mu_);
    Stats s = stats_;
    s.resident = resident_.size();
    s.sharer_records = sharer_records_;
    if (dt_) {
      s.has_dt = true;
      s.dt = dt_->stats();
    }
    return s;
  }

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
  };

  // One dirmerge in flight.
  struct Build {
    std::string path;
    uint64_t epoch = 0;
    std::vector<NodeListing> listings;  // one per live node, in node-id order
    size_t outstanding = 0;             // leaves not yet answered (+1 while issuing)
    std::vector<Waiter> waiters;
    std::vector<VdChange> pending;      // updates that arrived during the build
    bool dropped = false;               // DropSubtree covered it: answer, do not keep
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

  static Status CheckManager(const ClusterView& view, const std::string& path) {
    const std::string& m = view.Manager(path);
    if (m == view.self) return Ok();
    SPDLOG_LOGGER_DEBUG(Log(), "not the manager of {} in epoch {} (it is '{}'): ESTALE", path,
                        view.epoch, m);
    return Err(ESTALE, "not the manager of " + path + " in epoch " + std::to_string(view.epoch));
  }

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
    if (r->method == MethodId(RpcMethod::kNsVdGet)) {
      std::lock_guard lock(mu_);
      ++stats_.gets_sent;
    }
    const uint64_t epoch = view->epoch;
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

  void ServeGet(const std::string& path, const std::string& from,
                std::optional<SharerSlotData> sharer, bool notify, m2m::Callback<VdPtr> done) {
    const auto view = cluster_->Current();
    VdPtr ready;
    {
      std::lock_guard lock(mu_);
      ++stats_.gets_served;
      // Recorded before the VD is read: a change applied after this point
      // bumps the requester's slot; one applied before is in what it gets.
      if ((sharer || notify) && from != view->self) {
        RecordSharerLocked(path, from, sharer ? &*sharer : nullptr, notify);
      }
      // Resident, of this epoch, no round in flight (the common case): read
      // in this same critical section. A worker makes several gets per
      // request; the trip through EnsureResident and its callback took mu_
      // twice more and hashed the path twice more.
      if (auto it = resident_.find(path); !closed_ && it != resident_.end() &&
                                          it->second.snap.vd->epoch == view->epoch &&
                                          !rounds_.contains(path)) {
        Touch(it->second);
        ready = it->second.snap.vd;
      }
    }
    if (ready) return done(std::move(ready));
    EnsureResident(path, [self = shared_from_this(), path, from, sharer, notify,
                          done = std::move(done)](Result<Snapshot> s) mutable {
      if (!s) return done(Err(s.error()));
      {
        // The snapshot may hold a change whose round is still in flight: it
        // is served once no round is (see rounds_), read again then.
        std::lock_guard lock(self->mu_);
        if (self->rounds_.contains(path)) {
          self->QueueBehindRoundLocked(path, [self, path, from, sharer, notify,
                                         done = std::move(done)]() mutable {
              self->ServeGet(path, from, std::move(sharer), notify, std::move(done));
            });
          return;
        }
      }
      done(std::move(s->vd));
    });
  }

  // Runs `retry` when the round of `path` in flight (rounds_) ends.
  void QueueBehindRoundLocked(const std::string& path, std::move_only_function<void()> retry) {
    rounds_.at(path).push_back(std::move(retry));
  }

  void ServeConflicts(const std::string& path, m2m::Callback<std::vector<Conflict>> done) {
    EnsureResident(path, [done = std::move(done)](Result<Snapshot> s) mutable {
      if (!s) return done(Err(s.error()));
      done(vd_internal::ConflictsOf(*s->state));
    });
  }

  // Applies `changes` (made on their nodes, reported by `from`) to the
  // resident VD(P) at once, invalidates the other sharers of P, then answers
  // what they did (version 0 when P is not resident: the next get rebuilds
  // it). Claims and releases: see ServeClaim.
  void ServeUpdate(const std::string& path, std::vector<VdChange> changes, const std::string& from,
                   const ClusterView& view, m2m::Callback<UpdateOutcome> done) {
    if (changes.size() == 1 && (changes[0].kind == VdChange::Kind::kClaim ||
                                changes[0].kind == VdChange::Kind::kRelease ||
                                changes[0].kind == VdChange::Kind::kLock)) {
      return ServeClaim(path, std::move(changes[0]), from, std::move(done));
    }
    if (IsLockAndClaim(changes)) {
      return ServeClaimOf(path, std::move(changes[1].name), std::move(changes[0].name), from,
                          std::move(done));
    }
    UpdateOutcome o;
    std::vector<SharerRec> targets;
    bool broadcast = false;
    bool changed = true;  // unknown when not resident: invalidate
    {
      std::lock_guard lock(mu_);
      if (closed_) return done(Err(ESHUTDOWN, "VD service closed"));
      // One round per directory at a time: a change acknowledged while an
      // earlier one's round is in flight would be missing from copies that
      // are not invalidated yet.
      if (rounds_.contains(path)) {
        QueueBehindRoundLocked(path, [self = shared_from_this(), path, changes, from, view,
                                 done = std::move(done)]() mutable {
            self->ServeUpdate(path, std::move(changes), from, view, std::move(done));
          });
        return;
      }
      for (const VdChange& c : changes) EndClaimLocked(path, c.name, from);
      auto b = builds_.find(path);
      if (b != builds_.end()) {  // replayed after the merge
        for (const VdChange& c : changes) b->second->pending.push_back(c);
      }
      auto it = resident_.find(path);
      if (it != resident_.end() && it->second.snap.vd->epoch != view.epoch) {
        EvictLocked(it);
        it = resident_.end();
      }
      if (it != resident_.end()) {
        // Snapshots are immutable once handed out. Copying one costs O(entries)
        // per change (quadratic over a directory being filled), so the state
        // and the VD are each changed in place when no one else holds them:
        // under mu_, a use count of 1 is resident_'s own reference, and no
        // other thread can take one without mu_.
        std::shared_ptr<MergeState> state =
            it->second.snap.state.use_count() == 1
                ? std::const_pointer_cast<MergeState>(it->second.snap.state)
                      : std::make_shared<MergeState>(*it->second.snap.state);
        changed = false;
        for (const VdChange& c : changes) {
          changed |= c.kind == VdChange::Kind::kAdd
                         ? vd_internal::ApplyAdd(*state, c.node, c.name, c.type)
                         : vd_internal::ApplyRemove(*state, c.node, c.name);
        }
        Touch(it->second);
        o.prev_version = it->second.snap.vd->version;
        if (changed) {
          auto vd = it->second.snap.vd.use_count() == 1
                        ? std::const_pointer_cast<VirtualDirectory>(it->second.snap.vd)
                              : std::make_shared<VirtualDirectory>(*it->second.snap.vd);
          vd->version += 1;
          vd->holders = state->holders;
          for (const VdChange& c : changes) vd_internal::RefreshEntries(*state, c.name, &vd->entries, &vd->subdirs);
          version_floor_ = std::max(version_floor_, vd->version);
          it->second.snap = Snapshot{std::move(vd), std::move(state)};
          ++stats_.updates_applied;
        }
        o.version = it->second.snap.vd->version;
      }
      // What a remote reporter patches its DT copy with; this node keeps no
      // DT copy of the VDs it manages.
      if (it != resident_.end() && from != view.self) {
        const MergeState& st = *it->second.snap.state;
        std::set<std::string> names;
        for (const VdChange& c : changes) {
          for (std::string& k : vd_internal::RefreshKeys(c.name)) names.insert(std::move(k));
        }
        o.keys.assign(names.begin(), names.end());
        std::set<std::string> seen;  // visible names already in o.fresh
        for (const std::string& k : o.keys) {
          for (VdEntry& e : vd_internal::FreshEntries(st, k)) {
            if (seen.insert(e.name).second) o.fresh.push_back(std::move(e));
          }
        }
        o.holders = st.holders;
      }
      if (changed) {
        targets = TakeSharersLocked(path, from);
        broadcast = broadcast_all_ || broadcast_paths_.erase(path) > 0;
        if (!targets.empty() || broadcast) {
          ++stats_.changes_invalidated;
          rounds_.try_emplace(path);  // see rounds_
        }
      }
    }
    // This node's kernel may hold names of P; the reporter's own kernel saw
    // its change happen.
    if (changed && from != view.self) DropKernelNames();
    if (targets.empty() && !broadcast) return done(std::move(o));
    InvalidateSharers(path, std::move(targets), broadcast, view, from,
                      [self = shared_from_this(), path, o = std::move(o),
                       done = std::move(done)]() mutable {
                        std::vector<std::move_only_function<void()>> waiting;
                        {
                          std::lock_guard lock(self->mu_);
                          if (auto w = self->rounds_.find(path); w != self->rounds_.end()) {
                            waiting = std::move(w->second);
                            self->rounds_.erase(w);
                          }
                        }
                        done(std::move(o));
                        for (auto& f : waiting) f();
                      });
  }

  // --- Claims (see VdChange) ---

  struct Claim {
    std::string node;
    std::chrono::steady_clock::time_point expires;
  };

  std::chrono::steady_clock::duration ClaimLifetime() const { return 4 * options_.rpc_timeout; }

  // The unexpired claim or lock of `name` in `path` held by a node other than
  // `node`, or nullptr (expired ones are dropped on the way).
  const Claim* OtherHoldLocked(const std::string& path, const std::string& name,
                               const std::string& node) {
    auto& claims = claims_[path];
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(claims, [&](const auto& kv) { return kv.second.expires <= now; });
    auto c = claims.find(name);
    return c != claims.end() && c->second.node != node ? &c->second : nullptr;
  }

  // EAGAIN while another node holds `name` in `path` (OtherHoldLocked).
  Status BusyLocked(const std::string& path, const std::string& name, const std::string& node) {
    if (const Claim* c = OtherHoldLocked(path, name, node)) {
      return Err(EAGAIN, JoinPath(path, name) + " is busy on " + c->node);
    }
    return Ok();
  }

  // A new claim or lock by `node`, from now for ClaimLifetime().
  Claim HoldBy(const std::string& node) const {
    return Claim{node, std::chrono::steady_clock::now() + ClaimLifetime()};
  }

  // Ends the claim or lock of `name` in `path` by `node`, if any.
  void EndClaimLocked(const std::string& path, const std::string& name, const std::string& node) {
    auto p = claims_.find(path);
    if (p == claims_.end()) return;
    auto c = p->second.find(name);
    if (c != p->second.end() && c->second.node == node) {
      p->second.erase(c);
    }
    if (p->second.empty()) claims_.erase(p);
  }

  // kClaim: EEXIST if `name` is in VD(P) (built if needed), EAGAIN if another
  // node holds it (unexpired); else claimed. kRelease: the hold ends. Holds
  // belong to the requesting node `from`, not to the node the name is (to
  // be) on: two nodes creating one name on a third must not share a claim.
  void ServeClaim(const std::string& path, VdChange change, const std::string& from,
                  m2m::Callback<UpdateOutcome> done) {
    if (change.kind == VdChange::Kind::kRelease) {
      std::lock_guard lock(mu_);
      EndClaimLocked(path, change.name, from);
      return done(UpdateOutcome{});
    }
    if (change.kind == VdChange::Kind::kLock) {
      std::lock_guard lock(mu_);
      // The holder reads VD(P) next and acts on what it reads: not before
      // every old copy is invalidated (rounds_). A lock granted during the
      // round of the change that ended the previous holder's lock let the
      // next holder read its DT's old copy and replace a name that was no
      // longer there (two copies of one name).
      if (rounds_.contains(path)) {
        return QueueBehindRoundLocked(path, [self = shared_from_this(), path,
                                             change = std::move(change), from,
                                             done = std::move(done)]() mutable {
          self->ServeClaim(path, std::move(change), from, std::move(done));
        });
      }
      if (Status busy = BusyLocked(path, change.name, from); !busy) {
        return done(Err(busy.error()));
      }
      claims_[path][change.name] = HoldBy(from);
      return done(UpdateOutcome{});
    }
    ServeClaimOf(path, std::move(change.name), std::nullopt, from, std::move(done));
  }

  // The kClaim of `name`, with a kLock of `lock` in the same step when given
  // (a rename within one directory: both or neither; the first one refused
  // decides the answer and nothing is held then).
  void ServeClaimOf(const std::string& path, std::string name, std::optional<std::string> lock,
                    const std::string& from, m2m::Callback<UpdateOutcome> done) {
    EnsureResident(path, [self = shared_from_this(), path, name = std::move(name),
                          lock = std::move(lock), from,
                          done = std::move(done)](Result<Snapshot> s) mutable {
      if (!s) return done(Err(s.error()));
      UpdateOutcome o;
      {
        std::lock_guard mu_lock(self->mu_);
        // EEXIST reads the state, and a lock must not be granted (see
        // ServeClaim): not while a round is in flight (rounds_).
        if (self->rounds_.contains(path)) {
          self->QueueBehindRoundLocked(path, [self, path, name = std::move(name),
                                              lock = std::move(lock), from,
                                              done = std::move(done)]() mutable {
            self->ServeClaimOf(path, std::move(name), std::move(lock), from, std::move(done));
          });
          return;
        }
        if (lock) {
          if (Status busy = self->BusyLocked(path, *lock, from); !busy) {
            return done(Err(busy.error()));
          }
        }
        // The resident VD may be newer than the snapshot this waited for.
        Snapshot cur = *s;
        if (auto it = self->resident_.find(path); it != self->resident_.end()) {
          cur = it->second.snap;
        }
        const std::string full = JoinPath(path, name);
        if (cur.state->copies.count(name) != 0 || cur.vd->Find(name) != nullptr) {
          return done(Err(EEXIST, full + " exists"));
        }
        // A node that did not answer may hold the name: wait (the client
        // retries) until it answers or is declared dead.
        if (!cur.vd->cacheable) return done(Err(EAGAIN, full + ": a live node's listing is missing"));
        // A claim is waited out too: its create may still fail, so EEXIST
        // now would report a name that never exists.
        if (Status busy = self->BusyLocked(path, name, from); !busy) {
          return done(Err(busy.error()));
        }
        const Claim held = self->HoldBy(from);
        auto& claims = self->claims_[path];
        claims[name] = held;
        if (lock) claims[*lock] = held;
        o.prev_version = o.version = cur.vd->version;
        o.holders = cur.state->holders;
      }
      done(std::move(o));
    });
  }

  // --- Sharers (manager side; see the header) ---

  struct SharerRec {
    std::string node;
    uint32_t slot = 0;
    bool has_slot = false;  // bump the word of `slot` (one-sided)
    bool notify = false;    // send kNsDtInval and wait (its kernel caches names)
  };
  // A sharer node's DT words, imported on its endpoint when first needed.
  struct NodeRegion {
    m2m::RegionDesc desc;
    std::string addr;  // the endpoint `remote` was imported on
    std::shared_ptr<m2m::Endpoint> ep;
    std::shared_ptr<m2m::RemoteRegion> remote;
  };

  void RecordSharerLocked(const std::string& path, const std::string& node,
                          const SharerSlotData* sharer, bool notify) {
    if (broadcast_all_ || broadcast_paths_.count(path) != 0) return;
    if (sharer != nullptr) {
      NodeRegion& nr = node_regions_[node];
      if (nr.desc.addr != sharer->region.addr || nr.desc.length != sharer->region.length ||
          nr.desc.rkey != sharer->region.rkey) {
        nr = NodeRegion{.desc = sharer->region};  // a restarted node: import again
      }
    }
    std::vector<SharerRec>& recs = sharers_[path];
    for (SharerRec& r : recs) {
      if (r.node == node) {  // one slot per path at a node
        if (sharer != nullptr) {
          r.slot = sharer->slot;
          r.has_slot = true;
        }
        r.notify = r.notify || notify;
        return;
      }
    }
    if (recs.size() >= options_.max_sharers_per_vd) {
      sharer_records_ -= recs.size();
      sharers_.erase(path);
      broadcast_paths_.insert(path);
      ++sharer_records_;  // the broadcast mark counts as one record
      return;
    }
    recs.push_back(SharerRec{node, sharer != nullptr ? sharer->slot : 0, sharer != nullptr, notify});
    if (++sharer_records_ > options_.max_sharer_records) {
      Log()->warn("{} sharer records: every VD change is broadcast from now on",
                  sharer_records_);
      broadcast_all_ = true;
      sharers_.clear();
      broadcast_paths_.clear();
      sharer_records_ = 0;
    }
  }

  // The sharers of `path` to invalidate for a change reported by `from`;
  // they are forgotten (they re-register when they refetch). `from` keeps
  // its record: it patches its copy from the reply.
  std::vector<SharerRec> TakeSharersLocked(const std::string& path, const std::string& from) {
    auto it = sharers_.find(path);
    if (it == sharers_.end()) return {};
    std::vector<SharerRec> out;
    std::vector<SharerRec> keep;
    for (SharerRec& r : it->second) (r.node == from ? keep : out).push_back(std::move(r));
    sharer_records_ -= out.size();
    if (keep.empty()) {
      sharers_.erase(it);
    } else {
      it->second = std::move(keep);
    }
    return out;
  }

  // The endpoint and imported DT words of `node`, or an error.
  Result<std::pair<std::shared_ptr<m2m::Endpoint>, std::shared_ptr<m2m::RemoteRegion>>> RegionOf(
      const std::string& node, const std::string& addr) {
    m2m::RegionDesc desc;
    {
      std::lock_guard lock(mu_);
      auto it = node_regions_.find(node);
      if (it == node_regions_.end()) return Err(ENOENT, "no DT region known for " + node);
      if (it->second.remote && it->second.addr == addr) {
        return std::make_pair(it->second.ep, it->second.remote);
      }
      desc = it->second.desc;
    }
    auto ep = transport_->GetEndpoint(addr);
    auto remote = ep->Import(desc);
    if (!remote) return Err(remote.error());
    std::lock_guard lock(mu_);
    auto it = node_regions_.find(node);
    if (it != node_regions_.end() && it->second.desc.addr == desc.addr &&
        it->second.desc.rkey == desc.rkey) {
      it->second.addr = addr;
      it->second.ep = ep;
      it->second.remote = *remote;
    }
    return std::make_pair(std::move(ep), std::move(*remote));
  }

  // One parallel round: a one-sided FetchAdd(+1) on each target's slot word
  // (and, for `broadcast`, a kNsDtInval to every other live node); `done`
  // when every one completed or failed (failures are logged and dropped).
  void InvalidateSharers(const std::string& path, std::vector<SharerRec> targets, bool broadcast,
                         const ClusterView& view, const std::string& from,
                         std::move_only_function<void()> done) {
    struct Round {
      std::mutex mu;
      size_t outstanding = 1;  // + 1 while issuing
      std::move_only_function<void()> done;
    };
    auto round = std::make_shared<Round>();
    round->done = std::move(done);
    auto finish = [round] {
      std::move_only_function<void()> d;
      {
        std::lock_guard lock(round->mu);
        if (--round->outstanding > 0) return;
        d = std::move(round->done);
      }
      d();
    };
    const auto timeout = std::chrono::duration_cast<m2m::Timeout>(options_.rpc_timeout);
    auto self = shared_from_this();
    auto failed = [self, path](const std::string& node, const Error& e) {
      Log()->warn("invalidation of {} at sharer {} failed ({}); sharer dropped", path, node,
                  e.ToString());
      std::lock_guard lock(self->mu_);
      ++self->stats_.invalidations_failed;
    };
    for (const SharerRec& t : targets) {
      auto live = view.live.find(t.node);
      if (live == view.live.end()) continue;  // dead: its DT dies with its epoch
      if (t.notify && !broadcast) {
        // Its kernel's names: only its CPU can drop them (in parallel with
        // the one-sided bump below; the round waits for both).
        {
          std::lock_guard lock(mu_);
          ++stats_.notifies_sent;
          ++round->outstanding;
        }
        transport_->GetEndpoint(live->second)
            ->Call(MethodId(RpcMethod::kNsDtInval), EncodePathRequest(path, view), timeout,
                   [finish, failed, node = t.node](Result<m2m::Bytes> r) {
                     if (!r) failed(node, r.error());
                     finish();
                   });
      }
      if (!t.has_slot) continue;
      auto region = RegionOf(t.node, live->second);
      if (!region) {
        failed(t.node, region.error());
        continue;
      }
      {
        std::lock_guard lock(mu_);
        ++stats_.invalidations_sent;
        ++round->outstanding;
      }
      auto [ep, remote] = std::move(*region);
      ep->FetchAdd(*remote, uint64_t{t.slot} * 8, 1, timeout,
                   [finish, failed, node = t.node, remote](Result<uint64_t> r) {
                     if (!r) failed(node, r.error());
                     finish();
                   });
    }
    if (broadcast) {
      if (dt_) dt_->Invalidate(path);
      for (const auto& [node, addr] : view.live) {
        if (node == view.self || node == from) continue;
        {
          std::lock_guard lock(mu_);
          ++stats_.broadcasts_sent;
          ++round->outstanding;
        }
        transport_->GetEndpoint(addr)->Call(
            MethodId(RpcMethod::kNsDtInval), EncodePathRequest(path, view), timeout,
            [finish, failed, node](Result<m2m::Bytes> r) {
              if (!r) failed(node, r.error());
              finish();
            });
      }
    }
    finish();
  }

  void Touch(Resident& r) { lru_.splice(lru_.begin(), lru_, r.lru); }

  // The sharers of an evicted VD stay recorded (sharers_ is kept apart from
  // residency), so a change after a rebuild still invalidates them.
  void EvictLocked(std::unordered_map<std::string, Resident>::iterator it) {
    lru_.erase(it->second.lru);
    resident_.erase(it);
  }

  // Calls `waiter` with VD(P) of the current epoch: resident, or joined to
  // the dirmerge in flight, or after a new dirmerge.
  void EnsureResident(const std::string& path, Waiter waiter) {
    auto view = cluster_->Current();
    std::shared_ptr<Build> build;
    {
      std::unique_lock lock(mu_);
      if (closed_) {
        lock.unlock();
        return waiter(Err(ESHUTDOWN, "VD service closed"));
      }
      auto it = resident_.find(path);
      if (it != resident_.end()) {
        if (it->second.snap.vd->epoch == view->epoch) {
          Touch(it->second);
          Snapshot snap = it->second.snap;
          lock.unlock();
          return waiter(std::move(snap));
        }
        EvictLocked(it);  // built in another epoch: rebuild
      }
      auto b = builds_.find(path);
      if (b != builds_.end() && b->second->epoch == view->epoch) {
        b->second->waiters.push_back(std::move(waiter));
        return;
      }
      build = std::make_shared<Build>();
      build->path = path;
      build->epoch = view->epoch;
      build->waiters.push_back(std::move(waiter));
      build->outstanding = view->live.size() + 1;
      for (const auto& [node, addr] : view->live) {
        build->listings.push_back(NodeListing{node, Err(EIO, "no answer")});
      }
      builds_[path] = build;  // a build of an older epoch finishes on its own
      ++stats_.dirmerges;
    }
    // One parallel fan-out: a kNsListLocal to every other live node, this
    // node's own listing through the blocking executor (no message).
    size_t i = 0;
    for (const auto& [node, addr] : view->live) {
      if (node == view->self) {
        // The guard answers the leaf even if the executor drops the task
        // (shutdown), so that the build always completes.
        auto guard = std::make_unique<LocalLeaf>(shared_from_this(), build, i);
        blocking_->Post([guard = std::move(guard)]() mutable { guard->Run(); });
      } else {
        auto ep = transport_->GetEndpoint(addr);
        ep->Call(MethodId(RpcMethod::kNsListLocal), EncodePathRequest(path, *view),
                 std::chrono::duration_cast<m2m::Timeout>(options_.rpc_timeout),
                 [self = shared_from_this(), build, i, node](Result<m2m::Bytes> reply) {
                   Result<std::vector<DirEntry>> r =
                       reply ? DecodeListing(*reply) : Result<std::vector<DirEntry>>(
                                                           Err(reply.error()));
                   if (!r && r.error().code == EPROTO) {
                     Log()->warn("bad listing of {} from {}: {}", build->path, node,
                                 r.error().ToString());
                   }
                   self->LeafDone(build, i, std::move(r));
                 });
      }
      ++i;
    }
    LeafDone(build, kIssued, Result<std::vector<DirEntry>>(std::vector<DirEntry>{}));
  }

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
  void LeafDone(const std::shared_ptr<Build>& build, size_t i, Result<std::vector<DirEntry>> r) {
    std::vector<Waiter> waiters;
    Result<Snapshot> result = Err(EIO, "unset");
    {
      std::lock_guard lock(mu_);
      if (i != kIssued) {
        if (!r && r.error().code != ENOENT) {
          SPDLOG_LOGGER_DEBUG(Log(), "dirmerge {}: node {} left out: {}", build->path,
                              build->listings[i].node, r.error().ToString());
        }
        build->listings[i].listing = std::move(r);
      }
      if (--build->outstanding > 0) return;
      waiters = std::move(build->waiters);
      auto b = builds_.find(build->path);
      if (b != builds_.end() && b->second == build) builds_.erase(b);
      result = FinishLocked(*build);
    }
    for (auto& w : waiters) {
      w(result);  // copies of an immutable snapshot (or the error)
    }
  }

  Result<Snapshot> FinishLocked(Build& build) {
    if (closed_) return Err(ESHUTDOWN, "VD service closed");
    auto collected = vd_internal::Collect(build.listings);
    if (!collected) {
      if (collected.error().code == ENOENT) {
        SPDLOG_LOGGER_DEBUG(Log(), "dirmerge {}: {}", build.path, collected.error().ToString());
      }
      return Err(collected.error().code, build.path + ": " + collected.error().context);
    }
    auto state = std::make_shared<MergeState>(std::move(*collected));
    for (const VdChange& c : build.pending) {  // changes that raced with the fan-out
      if (c.kind == VdChange::Kind::kAdd) {
        vd_internal::ApplyAdd(*state, c.node, c.name, c.type);
      } else {
        vd_internal::ApplyRemove(*state, c.node, c.name);
      }
    }
    auto vd = std::make_shared<VirtualDirectory>();
    vd->path = build.path;
    vd->epoch = build.epoch;
    // Versions of one path never repeat at this manager, even across
    // eviction and rebuild (a DT may still hold an older copy).
    vd->version = ++version_floor_;
    vd->holders = state->holders;
    vd->entries = vd_internal::AllEntries(*state);
    vd->CountSubdirs();
    std::string missing;  // a live node that did not answer
    for (const NodeListing& l : build.listings) {
      if (!l.listing && l.listing.error().code != ENOENT && l.listing.error().code != ENOTDIR) {
        missing = l.node;
      }
    }
    if (!missing.empty()) {
      Log()->info("dirmerge {}: live node {} did not answer; the VD is served but not kept",
                  build.path, missing);
      // Served to readers, never kept resident or cached, and no claim is
      // decided on it (the missing node may hold the name).
      vd->cacheable = false;
      return Snapshot{std::move(vd), std::move(state)};
    }
    Snapshot snap{std::move(vd), std::move(state)};
    if (build.dropped) return snap;  // the directory moved while it was merged

    auto it = resident_.find(build.path);
    if (it != resident_.end()) {
      if (it->second.snap.vd->epoch > build.epoch) return snap;  // a newer one is there
      it->second.snap = snap;
      Touch(it->second);
    } else {
      lru_.push_front(build.path);
      resident_.emplace(build.path, Resident{snap, lru_.begin()});
      while (resident_.size() > options_.max_resident_vds) {
        EvictLocked(resident_.find(lru_.back()));
      }
    }
    return snap;
  }

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
  // Claimed names per directory (see VdChange), guarded by mu_.
  std::unordered_map<std::string, std::map<std::string, Claim>> claims_;
  std::unique_ptr<DirTable> dt_;  // this node's directory table (client side); set once
  std::atomic<KernelCache*> kernel_{nullptr};

 public:
  void SetKernelCache(KernelCache* k) { kernel_.store(k, std::memory_order_release); }
  bool KernelCoherent() const {
    KernelCache* k = kernel_.load(std::memory_order_acquire);
    return k != nullptr && k->Coherent();
  }
  void DropKernelNames() {
    KernelCache* k = kernel_.load(std::memory_order_acquire);
    if (k == nullptr || !k->Coherent()) return;
    k->InvalidateNames();
    std::lock_guard lock(mu_);
    ++stats_.kernel_invalidations;
  }

 private:
};

VdService::VdService(VdServiceOptions options, m2m::Transport* transport,
                     const ClusterViewSource* cluster, NodeFs* local, Executor* blocking)
    : impl_(std::make_unique<Impl>()) {
  impl_->core = std::make_shared<Impl::Core>(options, transport, cluster, local, blocking);
}

VdService::~VdService() { impl_->core->Close(); }

void VdService::RegisterHandlers() {
  using Core = Impl::Core;
  std::weak_ptr<Core> weak = impl_->core;
  auto install = [&](RpcMethod m, void (Core::*fn)(m2m::IncomingCall, m2m::Responder)) {
    impl_->core->transport()->Handle(
        MethodId(m), [weak, fn](m2m::IncomingCall call, m2m::Responder responder) {
          auto core = weak.lock();
          if (!core) return responder.Fail(Error{ESHUTDOWN, "VD service gone"});
          ((*core).*fn)(std::move(call), std::move(responder));
        });
  };
  install(RpcMethod::kNsListLocal, &Core::OnListLocal);
  install(RpcMethod::kNsVdGet, &Core::OnGet);
  install(RpcMethod::kNsVdUpdate, &Core::OnUpdate);
  install(RpcMethod::kNsConflicts, &Core::OnConflicts);
  install(RpcMethod::kNsVdDrop, &Core::OnDrop);
  install(RpcMethod::kNsDtInval, &Core::OnDtInval);
}

void VdService::SetKernelCache(KernelCache* k) { impl_->core->SetKernelCache(k); }

void VdService::Get(const std::string& path, std::move_only_function<void(Result<VdPtr>)> done) {
  impl_->core->Get(path, std::move(done));
}

void VdService::Update(const std::string& path, VdChange change,
                       std::move_only_function<void(Status)> done) {
  std::vector<VdChange> changes;
  changes.push_back(std::move(change));
  impl_->core->UpdateMany(path, std::move(changes), std::move(done));
}

void VdService::ForgetCached(const std::string& path) { impl_->core->ForgetCached(path); }

void VdService::UpdateMany(const std::string& path, std::vector<VdChange> changes,
                           std::move_only_function<void(Status)> done) {
  impl_->core->UpdateMany(path, std::move(changes), std::move(done));
}

void VdService::Conflicts(const std::string& path,
                          std::move_only_function<void(Result<std::vector<Conflict>>)> done) {
  impl_->core->Conflicts(path, std::move(done));
}

void VdService::DropSubtree(const std::string& path, std::move_only_function<void(Status)> done) {
  impl_->core->DropSubtree(path, std::move(done));
}

VdService::Stats VdService::stats() const { return impl_->core->stats(); }

uint64_t VdService::ViewEpoch() const { return impl_->core->ViewEpoch(); }

const VdServiceOptions& VdService::options() const { return impl_->core->options(); }

// ---- Blocking helpers (worker threads only; never used inside the service) --

// How often the blocking helpers ask again while membership views converge.
constexpr auto kCatchupPoll = std::chrono::milliseconds(5);

// The deadline of a wait for views to converge, read from the clock only
// once a wait starts (not on the common path, which never waits).
class CatchupDeadline {
 public:
  explicit CatchupDeadline(const VdService& s) : s_(s) {}
  // Whether to ask again (after a pause), or give up.
  bool Retry() {
    const auto now = std::chrono::steady_clock::now();
    if (!started_) {
      until_ = now + s_.options().view_catchup;
      started_ = true;
    }
    if (now >= until_) return false;
    std::this_thread::sleep_for(kCatchupPoll);
    return true;
  }

 private:
  const VdService& s_;
  bool started_ = false;
  std::chrono::steady_clock::time_point until_{};
};

Result<VdPtr> GetVdSync(VdService& s, const std::string& path) {
  CatchupDeadline deadline(s);
  for (;;) {
    auto vd = WaitFor<Result<VdPtr>>([&](auto done) { s.Get(path, std::move(done)); });
    const bool behind = vd ? (*vd)->epoch < s.ViewEpoch() : vd.error().code == ESTALE;
    if (!behind || !deadline.Retry()) return vd;
  }
}

Status DropSubtreeSync(VdService& s, const std::string& path) {
  return WaitFor<Status>([&](auto done) { s.DropSubtree(path, std::move(done)); });
}

Status UpdateManyVdSync(VdService& s, const std::string& path, std::vector<VdChange> changes) {
  CatchupDeadline deadline(s);
  for (;;) {
    // ESTALE applied nothing: the same changes are sent again.
    Status st = WaitFor<Status>([&](auto done) { s.UpdateMany(path, changes, std::move(done)); });
    if (st || st.error().code != ESTALE || !deadline.Retry()) return st;
  }
}

Status UpdateVdSync(VdService& s, const std::string& path, VdChange change) {
  return UpdateManyVdSync(s, path, {std::move(change)});
}

}  // namespace fedfs::ns
