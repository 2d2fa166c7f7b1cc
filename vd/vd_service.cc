// VdService (vd/vd_service.h): the Core's lifecycle, its RPC handlers, routing to
// managers, serving Get/Update/Conflicts; the Core is declared in vd_service_impl.h.
#include <random>

#include "vd/vd_service_impl.h"

namespace fedfs::ns {

using namespace vd_detail;

VdService::Impl::Core::Core(VdServiceOptions options, m2m::Transport* transport,
                            const ClusterViewSource* cluster, NodeFs* local, Executor* blocking)
    : options_(options),
      transport_(transport),
      cluster_(cluster),
      local_(local),
      blocking_(blocking) {
  // Unique across this node's restarts (the ReplyCache keys by node and id).
  std::random_device rd;
  request_ids_.store((uint64_t{rd()} << 32 | rd()) | 1, std::memory_order_relaxed);
  if (options_.max_resident_vds == 0) options_.max_resident_vds = 1;
  if (options_.max_sharers_per_vd == 0) options_.max_sharers_per_vd = 1;
  if (options_.dt_entries > 0 && transport_ != nullptr) {
    auto dt = DirTable::Create(
        DirTableOptions{.max_entries = options_.dt_entries, .max_bytes = options_.dt_bytes},
        transport_);
    if (dt) {
      dt_ = std::move(*dt);
    } else {
      Log()->error("no directory table ({}): every lookup asks the manager", dt.error().ToString());
    }
  }
}

auto VdService::Impl::Core::Close() -> void {
  std::lock_guard lock(mu_);
  closed_ = true;
  resident_.clear();
  lru_.clear();
  held_.clear();
  lent_.clear();
  lease_count_.store(0, std::memory_order_release);
}

auto VdService::Impl::Core::OnListLocal(m2m::IncomingCall call, m2m::Responder responder) -> void {
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
    if (self->options_.annotate_listing) self->options_.annotate_listing(path, &*listing);
    responder.Reply(EncodeListing(*listing));
  });
}

auto VdService::Impl::Core::OnGet(m2m::IncomingCall call, m2m::Responder responder) -> void {
  auto req = DecodePathRequest(call.payload);
  if (!req) return Refuse("kNsVdGet", call, std::move(responder), req.error());
  if (auto s = ValidateGlobalPath(req->path); !s) {
    return Refuse("kNsVdGet", call, std::move(responder), s.error());
  }
  auto view = cluster_->Current();
  if (auto s = CheckManager(*view, req->path); !s) return responder.Fail(s.error());
  const bool uncached = UnrecordUnknown(*req, *view);
  if (req->names && options_.whole_max_entries > 0) {
    return ServeLookupGet(std::move(*req), std::move(responder), uncached, false);
  }
  ServeGet(req->path, req->from, std::move(req->sharer), req->notify,
           [responder = std::move(responder), uncached](Result<VdPtr> vd) mutable {
             if (!vd) return responder.Fail(vd.error());
             responder.Reply(EncodeVd(**vd, uncached || !(*vd)->cacheable));
           });
}

auto VdService::Impl::Core::OnUpdate(m2m::IncomingCall call, m2m::Responder responder) -> void {
  auto req = DecodeUpdateRequest(call.payload);
  if (!req) return Refuse("kNsVdUpdate", call, std::move(responder), req.error());
  Status valid = ValidateGlobalPath(req->path);
  if (valid) valid = ValidateChanges(req->changes);
  if (!valid) return Refuse("kNsVdUpdate", call, std::move(responder), valid.error());
  auto view = cluster_->Current();
  if (auto s = CheckManager(*view, req->path); !s) return responder.Fail(s.error());
  // Read before the request moves into `serve`.
  const std::string from = req->from;
  const uint64_t id = req->request_id;
  auto serve = [self = shared_from_this(), req = std::move(*req),
                view](m2m::Callback<m2m::Bytes> answer) mutable {
    self->ServeUpdate(
        req.path, std::move(req.changes), req.from, *view,
        [answer = std::move(answer)](Result<UpdateOutcome> o) mutable {
          if (!o) return answer(Err(o.error()));
          answer(EncodeUpdateReply(*o));
        },
        req.lease_ok, req.holders_hash);
  };
  if (id != 0) return answered_.ServeOnce(from, id, std::move(responder), std::move(serve));
  serve([responder = std::move(responder)](Result<m2m::Bytes> r) mutable {
    if (!r) return responder.Fail(r.error());
    responder.Reply(std::move(*r));
  });
}

auto VdService::Impl::Core::OnConflicts(m2m::IncomingCall call, m2m::Responder responder) -> void {
  auto req = DecodePathRequest(call.payload);
  if (!req) return Refuse("kNsConflicts", call, std::move(responder), req.error());
  if (auto s = ValidateGlobalPath(req->path); !s) {
    return Refuse("kNsConflicts", call, std::move(responder), s.error());
  }
  auto view = cluster_->Current();
  if (auto s = CheckManager(*view, req->path); !s) return responder.Fail(s.error());
  ServeConflicts(req->path,
                 [responder = std::move(responder)](Result<std::vector<Conflict>> c) mutable {
                   if (c.has_value()) {
                     const std::vector<Conflict>& list = c.value();
                     responder.Reply(EncodeConflicts(list));
                   } else {
                     responder.Fail(c.error());
                   }
                 });
}

auto VdService::Impl::Core::OnDrop(m2m::IncomingCall call, m2m::Responder responder) -> void {
  auto req = DecodePathRequest(call.payload);
  if (!req) return Refuse("kNsVdDrop", call, std::move(responder), req.error());
  if (auto s = ValidateGlobalPath(req->path); !s) {
    return Refuse("kNsVdDrop", call, std::move(responder), s.error());
  }
  DropLocal(req->path);
  responder.Reply({});
}

auto VdService::Impl::Core::DropLocal(const std::string& path) -> void {
  if (dt_) dt_->InvalidateSubtree(path);
  std::vector<m2m::Responder> answer;
  uint64_t version = 0;
  bool ended = false;
  {
    std::lock_guard lock(mu_);
    for (auto it = resident_.begin(); it != resident_.end();) {
      auto next = std::next(it);
      if (PathWithin(it->first, path)) EvictLocked(it);
      it = next;
    }
    for (auto& [p, b] : builds_) {
      if (PathWithin(p, path)) b->dropped = true;
    }
    // Leases held here end (their managers keep theirs lent until they
    // recall them, and rebuild then).
    for (auto it = held_.begin(); it != held_.end();) {
      auto next = std::next(it);
      if (PathWithin(it->first, path)) {
        EndHeldLocked(it, &answer);
        ended = true;
      }
      it = next;
    }
    version = version_floor_;
  }
  if (ended) DropKernelNames();  // names served from those leases
  for (auto& r : answer) r.Reply(EncodeRecalled(RecalledData{true, version}));
}

auto VdService::Impl::Core::DropSubtree(const std::string& path,
                                        std::move_only_function<void(Status)> done) -> void {
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

auto VdService::Impl::Core::UpdateMany(const std::string& path, std::vector<VdChange> changes,
                                       std::move_only_function<void(Status)> done) -> void {
  UpdateOutcomeOf(path, std::move(changes),
                  [done = std::move(done)](Result<UpdateOutcome> o) mutable {
                    if (!o) return done(Err(o.error()));
                    done(Ok());
                  });
}

auto VdService::Impl::Core::UpdateOutcomeOf(
    const std::string& path, std::vector<VdChange> changes,
    std::move_only_function<void(Result<UpdateOutcome>)> done) -> void {
  Status valid = ValidateGlobalPath(path);
  if (valid) valid = ValidateChanges(changes);
  if (!valid) return done(Err(valid.error()));
  auto self = shared_from_this();
  // Claims, locks and releases change no entry, and their replies carry no
  // version (patching with one would drop the cached copy: a refetch of
  // the whole VD per unlink or rename).
  auto view = cluster_->Current();
  // Managed here (or lent here): this node keeps no DT copy of its own VDs
  // to patch or to guard.
  const bool here = ServesHere(path, *view);
  const bool lease_ok = !here && options_.lend_after > 0;
  const auto asked = SteadyNow();
  const bool own = !here && dt_ && std::ranges::any_of(changes, [](const VdChange& c) {
    return c.kind == VdChange::Kind::kAdd || c.kind == VdChange::Kind::kRemove ||
           c.kind == VdChange::Kind::kAddNew || c.kind == VdChange::Kind::kUnlink ||
           c.kind == VdChange::Kind::kRename;
  });
  const bool adding = changes.front().kind == VdChange::Kind::kAddNew;
  const bool renaming = changes.front().kind == VdChange::Kind::kRename;
  // Done at the file's node by the manager (kUnlink, kRename).
  const bool unlinking = changes.front().kind == VdChange::Kind::kUnlink || renaming;
  // The holders this node's copy has: not sent back if unchanged.
  uint64_t holders_hash = 0;
  if (own) {
    if (auto h = dt_->CopyHolders(path)) holders_hash = HoldersHash(*h);
  }
  auto finish = [self, path, own, done = std::move(done)](Result<UpdateOutcome> v) mutable {
    if (own) self->dt_->EndOwnChange(path);  // after the patch (inspect runs first)
    done(std::move(v));
  };
  // Served at once, as Route would (no Routed to build); at M(P) when the
  // lease of P here ended meanwhile.
  if (here) {
    std::vector<VdChange> again = changes;
    return ServeUpdate(
        path, std::move(changes), view->self, *view,
        [self, path, again = std::move(again), finish = std::move(finish)](
            Result<UpdateOutcome> o) mutable {
          if (!o && o.error().code == EAGAIN && o.error().context.starts_with(kLeaseEnded)) {
            return self->UpdateOutcomeOf(path, std::move(again), std::move(finish));
          }
          finish(std::move(o));
        });
  }
  if (own) dt_->BeginOwnChange(path);
  auto r = std::make_shared<Routed<UpdateOutcome>>();
  r->path = path;
  r->method = MethodId(RpcMethod::kNsVdUpdate);
  // The manager waits for its sharers' invalidations (up to rpc_timeout).
  r->timeout = 2 * std::chrono::duration_cast<m2m::Timeout>(options_.rpc_timeout);
  if (unlinking) {
    {
      std::lock_guard lock(mu_);
      ++(renaming ? stats_.renames_asked : stats_.unlinks_asked);
    }
    // The manager waits for the file's node too, and a resend elsewhere
    // could not know the unlink was done.
    r->timeout = std::chrono::duration_cast<m2m::Timeout>(options_.unlink_timeout);
    r->resend_same_epoch = true;
  }
  r->encode = [path, changes, lease_ok, holders_hash, id = NextRequestId()](const ClusterView& v) {
    return EncodeUpdateRequest(path, changes, v, lease_ok, holders_hash, id);
  };
  r->resend = true;
  r->local = [self, path, changes](const ClusterView& v, m2m::Callback<UpdateOutcome> cb) {
    self->ServeUpdate(path, changes, v.self, v, std::move(cb));
  };
  r->decode = [](const m2m::Bytes& b) { return DecodeUpdateReply(b); };
  if (own || lease_ok) {
    r->inspect = [self, path, own, adding, unlinking, asked](const Result<UpdateOutcome>& o,
                                                             bool remote, uint64_t) {
      if (!remote) return;  // served here: this node keeps no DT copy of its own VDs
      if (own) {
        if (!o) {
          // A kAddNew refused (the name exists or is held; an older
          // manager) changed nothing.
          const int e = o.error().code;
          if (adding && (e == EEXIST || e == EAGAIN || e == EPROTO)) return;
          // A kUnlink that no node tried changed nothing either.
          if (unlinking && (e == ENOSYS || e == EPROTO || e == EAGAIN || e == EEXIST)) return;
          return self->dt_->Invalidate(path);
        }
        if (adding && !o->added) return;  // only claimed: nothing changed
        // Read only: the sender unlinks or renames by itself.
        if (unlinking && !o->unlinked && !o->renamed) return;
        std::optional<std::vector<std::string>> holders;
        if (!o->same_holders) holders = o->holders;
        self->dt_->Patch(path, o->prev_version, o->version, o->keys, o->fresh, std::move(holders),
                         o->sharer, o->names_sharer, o->subdirs);
      }
      if (o && o->lease) self->InstallLease(path, *o, asked);
    };
  }
  r->done = std::move(finish);
  Route(std::move(r), std::move(view));
}

auto VdService::Impl::Core::Conflicts(
    const std::string& path, std::move_only_function<void(Result<std::vector<Conflict>>)> done)
    -> void {
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

auto VdService::Impl::Core::stats() const -> Stats {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.resident = resident_.size();
  s.sharer_records = sharer_records_;
  s.leases_held = held_.size();
  s.duplicates_answered = answered_.stats().duplicates;
  if (dt_) {
    s.has_dt = true;
    s.dt = dt_->stats();
  }
  return s;
}

auto VdService::Impl::Core::CheckManager(const ClusterView& view, const std::string& path)
    -> Status {
  const std::string& m = view.Manager(path);
  if (m == view.self) return Ok();
  SPDLOG_LOGGER_DEBUG(Log(), "not the manager of {} in epoch {} (it is '{}'): ESTALE", path,
                      view.epoch, m);
  return Err(ESTALE, "not the manager of " + path + " in epoch " + std::to_string(view.epoch));
}

auto VdService::Impl::Core::ServeGet(const std::string& path, const std::string& from,
                                     std::optional<SharerSlotData> sharer, bool notify,
                                     m2m::Callback<VdPtr> done, bool names,
                                     std::shared_ptr<bool> recorded) -> void {
  // Lent to another node: served once it is back (vd_lease.cc).
  if (RecallFirst(path, [&] {
        return std::move_only_function<void()>([self = shared_from_this(), path, from, sharer,
                                                notify, done = std::move(done), names,
                                                recorded]() mutable {
          self->ServeGet(path, from, std::move(sharer), notify, std::move(done), names, recorded);
        });
      })) {
    return;
  }
  const auto view = cluster_->Current();
  VdPtr ready;
  {
    std::lock_guard lock(mu_);
    ++stats_.gets_served;
    // Recorded before the VD is read: a change applied after this point
    // bumps the requester's slot; one applied before is in what it gets.
    if ((sharer || notify) && from != view->self) {
      const bool r = RecordSharerLocked(path, from, sharer ? &*sharer : nullptr, notify, names);
      if (recorded) *recorded = r;
    }
    // Resident, of this epoch, no round in flight (the common case): read
    // in this same critical section. A worker makes several gets per
    // request; the trip through EnsureResident and its callback took mu_
    // twice more and hashed the path twice more.
    if (auto it = resident_.find(path); !closed_ && it != resident_.end() &&
                                        it->second.snap.vd->epoch == view->epoch &&
                                        !rounds_.contains(path)) {
      Touch(it->second);
      if (from != it->second.streak_node) it->second.streak = 0;  // another node reads P
      ready = it->second.snap.vd;
    }
  }
  if (ready) return done(std::move(ready));
  EnsureResident(path, [self = shared_from_this(), path, from, sharer, notify,
                        done = std::move(done), names, recorded](Result<Snapshot> s) mutable {
    if (!s) return done(Err(s.error()));
    {
      // The snapshot may hold a change whose round is still in flight: it
      // is served once no round is (see rounds_), read again then.
      std::lock_guard lock(self->mu_);
      if (self->rounds_.contains(path)) {
        self->QueueBehindRoundLocked(path, [self, path, from, sharer, notify,
                                            done = std::move(done), names, recorded]() mutable {
          self->ServeGet(path, from, std::move(sharer), notify, std::move(done), names, recorded);
        });
        return;
      }
    }
    done(std::move(s->vd));
  });
}

auto VdService::Impl::Core::ServeConflicts(const std::string& path,
                                           m2m::Callback<std::vector<Conflict>> done) -> void {
  if (RecallFirst(path, [&] {
        return std::move_only_function<void()>(
            [self = shared_from_this(), path, done = std::move(done)]() mutable {
              self->ServeConflicts(path, std::move(done));
            });
      })) {
    return;
  }
  EnsureResident(path, [done = std::move(done)](Result<Snapshot> s) mutable {
    if (!s) return done(Err(s.error()));
    done(vd_internal::ConflictsOf(*s->state));
  });
}

auto VdService::Impl::Core::ServeUpdate(const std::string& path, std::vector<VdChange> changes,
                                        const std::string& from, const ClusterView& view,
                                        m2m::Callback<UpdateOutcome> done, bool lease_ok,
                                        uint64_t holders_hash, bool adding) -> void {
  if (RecallFirst(path, [&] {
        return std::move_only_function<void()>(
            [self = shared_from_this(), path, changes = std::move(changes), from, view,
             done = std::move(done), lease_ok, holders_hash, adding]() mutable {
              self->ServeUpdate(path, std::move(changes), from, view, std::move(done), lease_ok,
                                holders_hash, adding);
            });
      })) {
    return;
  }
  if (changes.size() == 1 && changes[0].kind == VdChange::Kind::kLockRead) {
    return ServeLockRead(path, std::move(changes[0].name), from, std::move(done));
  }
  if (changes.size() == 1 && changes[0].kind == VdChange::Kind::kRename) {
    return ServeRename(path, std::move(changes[0]), from, view, std::move(done), lease_ok,
                       holders_hash);
  }
  if (changes.size() == 1 && changes[0].kind == VdChange::Kind::kUnlink) {
    return ServeUnlink(path, std::move(changes[0]), from, view, std::move(done), lease_ok,
                       holders_hash);
  }
  if (changes.size() == 1 && changes[0].kind == VdChange::Kind::kAddNew) {
    return ServeAddNew(path, std::move(changes[0]), from, view, std::move(done), lease_ok,
                       holders_hash);
  }
  if (changes.size() == 1 &&
      (changes[0].kind == VdChange::Kind::kClaim || changes[0].kind == VdChange::Kind::kRelease ||
       changes[0].kind == VdChange::Kind::kLock)) {
    return ServeClaim(path, std::move(changes[0]), from, std::move(done));
  }
  if (IsLockAndClaim(changes)) {
    return ServeClaimOf(path, std::move(changes[1].name), std::move(changes[0].name), from,
                        std::move(done));
  }
  if (changes.size() == 1 && changes[0].kind == VdChange::Kind::kRemove && changes[0].id != 0) {
    // The undo of a kAddNew whose answer did not arrive: only while that
    // claim (its token) is held, so never another creator's entry.
    bool held = false;
    {
      std::lock_guard lock(mu_);
      if (auto cl = claims_.find(path); cl != claims_.end()) {
        auto h = cl->second.find(changes[0].name);
        held = h != cl->second.end() && h->second.node == from &&
               h->second.token == changes[0].id;
      }
    }
    if (!held) return done(UpdateOutcome{});
    changes[0].id = 0;
  }
  UpdateOutcome o;
  std::vector<SharerRec> targets;
  std::optional<DtPatchData> delta;
  bool broadcast = false;
  bool changed = true;  // unknown when not resident: invalidate
  bool additive = false;  // only new names (IsAdditive): names-only sharers keep theirs
  {
    std::lock_guard lock(mu_);
    if (closed_) return done(Err(ESHUTDOWN, "VD service closed"));
    // This node's own change of a P that was lent here: not applied to a
    // copy here once the lease ended (ServedHereLocked).
    if (from == view.self) {
      if (Status s = ServedHereLocked(path); !s) return done(Err(s.error()));
    }
    // One round per directory at a time: a change acknowledged while an
    // earlier one's round is in flight would be missing from copies that
    // are not invalidated yet.
    if (rounds_.contains(path)) {
      QueueBehindRoundLocked(path, [self = shared_from_this(), path, changes, from, view,
                                    done = std::move(done), lease_ok, holders_hash,
                                    adding]() mutable {
        self->ServeUpdate(path, std::move(changes), from, view, std::move(done), lease_ok,
                          holders_hash, adding);
      });
      return;
    }
    if (!adding) {
      for (const VdChange& c : changes) EndClaimLocked(path, c.name, from);
    }
    auto b = builds_.find(path);
    if (b != builds_.end()) {  // replayed after the merge
      for (const VdChange& c : changes) b->second->pending.push_back(c);
    }
    auto it = resident_.find(path);
    if (it != resident_.end() && it->second.snap.vd->epoch != view.epoch) {
      EvictLocked(it);
      it = resident_.end();
    }
    if (adding) {
      // Added where P is resident or being built; the claim keeps the entry
      // for a rebuild until it ends (FinishLocked). Otherwise only claimed.
      o.added = it != resident_.end() || b != builds_.end();
      if (o.added) {
        if (auto cl = claims_.find(path); cl != claims_.end()) {
          if (auto h = cl->second.find(changes[0].name);
              h != cl->second.end() && h->second.node == from) {
            h->second.add = changes[0];
          }
        }
      }
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
      additive = IsAdditive(*state, changes);
      changed = false;
      for (const VdChange& c : changes) {
        changed |= c.kind == VdChange::Kind::kAdd
                       ? vd_internal::ApplyAdd(*state, c.node, c.name, c.type, c.id)
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
        for (const VdChange& c : changes)
          vd_internal::RefreshEntries(*state, c.name, &vd->entries, &vd->subdirs);
        version_floor_ = std::max(version_floor_, vd->version);
        it->second.snap = Snapshot{std::move(vd), std::move(state)};
        ++stats_.updates_applied;
      }
      o.version = it->second.snap.vd->version;
    }
    // What a remote reporter patches its DT copy with; this node keeps no
    // DT copy of the VDs it manages.
    if (it != resident_.end() && from != view.self) {
      DtPatchData d = DeltaOf(it->second.snap, o.prev_version, changes);
      o.keys = std::move(d.keys);
      o.fresh = std::move(d.fresh);
      o.holders = std::move(d.holders);
      o.same_holders = holders_hash != 0 && HoldersHash(o.holders) == holders_hash;
      o.subdirs = it->second.snap.vd->subdirs;
      // Told of the next change: recorded (TakeSharersLocked keeps the
      // reporter's record), or every change of P is broadcast. A names-only
      // record is not told of new names: the reporter keeps no absence.
      bool recorded = broadcast_all_;
      bool names_only = false;
      if (auto sh = sharers_.find(path); sh != sharers_.end()) {
        for (const SharerRec& rec : sh->second) {
          if (rec.node != from) continue;
          recorded = true;
          names_only = rec.names_only && !broadcast_all_;
        }
      }
      o.sharer = recorded;
      o.names_sharer = names_only;
    }
    if (changed) {
      if (it != resident_.end()) it->second.changed = SteadyNow();
      targets = TakeSharersLocked(path, from, additive);
      broadcast = broadcast_all_ || broadcast_paths_.erase(path) > 0;
      if (!targets.empty() || broadcast) {
        ++stats_.changes_invalidated;
        rounds_.try_emplace(path);  // see rounds_
      }
      // The change as a delta for whole-copy sharers (InvalidateSharers),
      // when they are few.
      const auto whole = static_cast<size_t>(std::ranges::count_if(
          targets, [](const SharerRec& t) { return t.has_slot && !t.names_only; }));
      if (it != resident_.end() && !broadcast && options_.deltas && whole > 0 &&
          whole <= options_.max_delta_sharers) {
        delta = DeltaOf(it->second.snap, o.prev_version, changes);
      }
    }
    // Lent to the reporter with the reply, when nobody else has a copy.
    if (lease_ok && it != resident_.end() && targets.empty() && !broadcast) {
      o.lease = MaybeLendLocked(path, it->second, from, view);
    }
  }
  // A change of a VD lent here: its return may have waited for it.
  MaybeReturn(path);
  // This node's kernel may hold names of P; the reporter's own kernel saw
  // its change happen. A lent P changes where this node does not see it.
  // Only the changed names, unless P was lent (its changes are not seen here).
  if (o.lease && from != view.self) {
    DropKernelNamesOf(path);
  } else if (changed && from != view.self) {
    std::vector<std::string> names;
    for (const VdChange& c : changes) names.push_back(c.name);
    DropKernelNamesOf(path, &names);
  }
  if (targets.empty() && !broadcast) return done(std::move(o));
  InvalidateSharers(
      path, std::move(targets), broadcast, view, from, delta ? &*delta : nullptr,
      [self = shared_from_this(), path, o = std::move(o),
       done = std::move(done)](std::vector<SharerRec> kept) mutable {
        std::vector<std::move_only_function<void()>> waiting;
        {
          std::lock_guard lock(self->mu_);
          // Sharers that applied the change keep their copy: recorded again
          // before anything that waited for the round runs.
          self->stats_.deltas_kept += kept.size();
          if (!kept.empty() && !self->broadcast_all_ && !self->broadcast_paths_.contains(path)) {
            std::vector<SharerRec>& recs = self->sharers_[path];
            for (SharerRec& k : kept) {
              if (std::ranges::any_of(recs, [&](const SharerRec& r) { return r.node == k.node; })) {
                continue;
              }
              recs.push_back(std::move(k));
              ++self->sharer_records_;
            }
          }
          if (auto w = self->rounds_.find(path); w != self->rounds_.end()) {
            waiting = std::move(w->second);
            self->rounds_.erase(w);
          }
        }
        done(std::move(o));
        for (auto& f : waiting) f();
      });
}

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
    impl_->core->transport()->Handle(MethodId(m),
                                     [weak, fn](m2m::IncomingCall call, m2m::Responder responder) {
                                       auto core = weak.lock();
                                       if (!core)
                                         return responder.Fail(Error{ESHUTDOWN, "VD service gone"});
                                       ((*core).*fn)(std::move(call), std::move(responder));
                                     });
  };
  install(RpcMethod::kNsListLocal, &Core::OnListLocal);
  install(RpcMethod::kNsVdGet, &Core::OnGet);
  install(RpcMethod::kNsVdGetName, &Core::OnGetName);
  install(RpcMethod::kNsVdUpdate, &Core::OnUpdate);
  install(RpcMethod::kNsConflicts, &Core::OnConflicts);
  install(RpcMethod::kNsVdDrop, &Core::OnDrop);
  install(RpcMethod::kNsDtInval, &Core::OnDtInval);
  install(RpcMethod::kNsVdRecall, &Core::OnRecall);
  install(RpcMethod::kNsVdRenew, &Core::OnRenew);
}

void VdService::SetKernelCache(KernelCache* k) { impl_->core->SetKernelCache(k); }

void VdService::Get(const std::string& path, std::move_only_function<void(Result<VdPtr>)> done) {
  impl_->core->Get(path, nullptr, std::move(done));
}

void VdService::GetName(const std::string& path, const std::string& name,
                        std::move_only_function<void(Result<VdPtr>)> done) {
  impl_->core->Get(path, &name, std::move(done));
}

void VdService::Peek(const std::string& path, const std::string& name,
                     std::move_only_function<void(Result<VdPtr>)> done) {
  impl_->core->Peek(path, name, std::move(done));
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

void VdService::LockRead(const std::string& path, const std::string& name,
                         std::move_only_function<void(Result<NameRead>)> done) {
  impl_->core->UpdateOutcomeOf(
      path, {VdChange{VdChange::Kind::kLockRead, name, 0, impl_->core->SelfId()}},
      [done = std::move(done)](Result<UpdateOutcome> o) mutable {
        if (!o) return done(Err(o.error()));
        // A manager that answers a lock without a read does not know
        // kLockRead: treated as not held (its lock, if any, expires).
        if (!o->read) return done(Err(EPROTO, "the manager does not know kLockRead"));
        if (!o->read_vd) return done(Err(EPROTO, "VD lock-read without its VD"));
        done(NameRead{std::move(o->read_vd), o->held});
      });
}

void VdService::AddNew(const std::string& path, VdChange add,
                       std::move_only_function<void(Result<bool>)> done) {
  add.kind = VdChange::Kind::kAddNew;
  impl_->core->UpdateOutcomeOf(path, {std::move(add)},
                               [done = std::move(done)](Result<UpdateOutcome> o) mutable {
                                 if (!o) return done(Err(o.error()));
                                 done(o->added);
                               });
}

void VdService::Unlink(const std::string& path, const std::string& name, const Cred& cred,
                       std::move_only_function<void(Result<Unlinked>)> done) {
  VdChange change{VdChange::Kind::kUnlink, name, 0, impl_->core->SelfId()};
  change.cred = cred;
  impl_->core->UpdateOutcomeOf(path, {std::move(change)},
                               [done = std::move(done)](Result<UpdateOutcome> o) mutable {
                                 if (!o) return done(Err(o.error()));
                                 if (!o->read || !o->read_vd) {
                                   return done(Err(EPROTO, "VD unlink answered without its entry"));
                                 }
                                 done(Unlinked{std::move(o->read_vd), o->unlinked,
                                               std::move(o->parent)});
                               });
}

void VdService::Rename(const std::string& path, const std::string& name, const std::string& to,
                       unsigned flags, const Cred& cred,
                       std::move_only_function<void(Result<Renamed>)> done) {
  VdChange change{VdChange::Kind::kRename, name, 0, impl_->core->SelfId()};
  change.cred = cred;
  change.to = to;
  change.flags = flags;
  impl_->core->UpdateOutcomeOf(path, {std::move(change)},
                               [done = std::move(done)](Result<UpdateOutcome> o) mutable {
                                 if (!o) return done(Err(o.error()));
                                 if (!o->read || !o->read_vd) {
                                   return done(Err(EPROTO, "VD rename answered without its entry"));
                                 }
                                 done(Renamed{std::move(o->read_vd), o->renamed});
                               });
}

bool VdService::ServesHere(const std::string& path) {
  return impl_->core->ServesHere(path, *impl_->core->View());
}

void VdService::Conflicts(const std::string& path,
                          std::move_only_function<void(Result<std::vector<Conflict>>)> done) {
  impl_->core->Conflicts(path, std::move(done));
}

void VdService::DropSubtree(const std::string& path, std::move_only_function<void(Status)> done) {
  impl_->core->DropSubtree(path, std::move(done));
}

VdService::Stats VdService::stats() const { return impl_->core->stats(); }
metrics::Histogram::Snapshot VdService::DirmergeLatency() const {
  return impl_->core->DirmergeLatency();
}

uint64_t VdService::ViewEpoch() const { return impl_->core->ViewEpoch(); }

const VdServiceOptions& VdService::options() const { return impl_->core->options(); }

}  // namespace fedfs::ns
