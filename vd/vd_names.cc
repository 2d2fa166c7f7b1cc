// VdService: lookups (docs/namespace.md, "Directory table", "Names in a
// busy directory", "Large directories"): Get through the directory table,
// the manager's kNsVdGetName and its answer to a lookup's kNsVdGet, Peek,
// and the unrecorded lookups of a directory that keeps changing
// (vd/vd_service_impl.h).
#include "vd/vd_service_impl.h"

namespace fedfs::ns {

using namespace vd_detail;

auto VdService::Impl::Core::Get(const std::string& path, const std::string* name,
                                std::move_only_function<void(Result<VdPtr>)> done) -> void {
  if (auto s = ValidateGlobalPath(path); !s) return done(Err(s.error()));
  if (name != nullptr) {
    if (!name->empty()) {
      if (auto s = ValidateName(*name); !s) return done(Err(s.error()));
    }
    // The caller gets a copy of that name's entry, never the shared VD: a
    // manager changes a VD in place only while no one else holds it, and a
    // reader holding it across its operation (a stat on another node) made
    // every concurrent change copy the whole VD.
    done = [name = *name, done = std::move(done)](Result<VdPtr> r) mutable {
      if (r) r = PartialOf(*r, name);
      done(std::move(r));
    };
  }
  {
    std::lock_guard lock(mu_);
    ++stats_.lookups;
  }
  auto view = cluster_->Current();
  const std::string& manager = view->Manager(path);
  // Managed here, or lent here: served at once, as Route would (no Routed
  // to build).
  if (!manager.empty() && (manager == view->self || HeldHere(path, *view))) {
    return ServeGet(path, view->self, std::nullopt, false, std::move(done));
  }
  std::optional<DirTable::Ticket> ticket;
  std::optional<SharerSlotData> sharer;
  // A copy fetched without `notify` must not feed a kernel that caches
  // names (its manager would not tell this node's kernel of changes): DT
  // entries are bound to the epoch and to the notify mode they came with.
  // A directory whose changes were notified here within kBusyFor is busy
  // (other nodes change it): asked for without `notify`, its changes
  // cost its manager one-sided bumps only, and its names are not cached by
  // the kernel (VirtualDirectory::kernel_may_cache).
  const bool coherent = KernelCoherent();
  bool notify = coherent && !Busy(path);
  // One name asked for, in a copy that went stale: that name only
  // (dir_table.h, "Names in a stale copy"), and the holders only if they
  // are not the ones of that copy.
  std::optional<std::string> one;
  std::optional<std::vector<std::string>> have_holders;
  // Names only (a busy directory): recorded so that only changes of what
  // it keeps bump its slot -- the entries of names that exist, the holders
  // and subdirectories -- not the creation of new names; an answer that a
  // name is absent is not kept (docs/namespace.md, "Names in a busy
  // directory").
  bool names_only = false;
  // A whole fetch for a lookup of this name, which the manager may answer
  // for the name only.
  std::optional<std::string> partial_ok;
  uint64_t key = 0;
  if (dt_ && !manager.empty()) {  // managed elsewhere
    key = DtEpoch(view->epoch, notify);
    if (name != nullptr) {
      bool stale = false;
      bool skeleton = false;
      if (VdPtr vd = dt_->FindName(path, *name, key, &stale, &skeleton)) {
        return done(std::move(vd));
      }
      if (skeleton) {
        // Recorded for names only (a large directory): that name, so again.
        // A skeleton of another key: asked for whole, as at first touch.
        ticket = dt_->ReserveName(path, key);
        names_only = ticket.has_value();
      } else if (Churning(path, stale)) {
        // Changed again and again: asked for without a whole-VD record.
        // With a stale copy here, names-only; else unrecorded (no bump for
        // this node at the next changes), and not kept.
        ticket = dt_->ReserveName(path, key);
        if (!ticket) {
          return GetUnrecorded(path, *name, coherent, dt_->CopyHolders(path), std::move(done));
        }
        names_only = true;
      } else {
        ticket = dt_->ReserveName(path, key);
      }
      if (ticket) {
        one = *name;
        have_holders = dt_->CopyHolders(path);
      }
    } else if (VdPtr vd = dt_->Find(path, key)) {
      return done(std::move(vd));
    }
    if (!ticket) {
      ticket = dt_->Reserve(path);
      // A lookup without a copy: a large VD is answered for this name only
      // (VdServiceOptions::whole_max_entries).
      if (name != nullptr) partial_ok = *name;
    }
    sharer = SharerSlotData{ticket->slot, dt_->region()};
  }
  if (names_only) notify = false;  // its kernel does not cache what it reads
  auto self = shared_from_this();
  auto r = std::make_shared<Routed<VdPtr>>();
  r->path = path;
  r->method = MethodId(one ? RpcMethod::kNsVdGetName : RpcMethod::kNsVdGet);
  r->timeout = ManagerTimeout();
  const uint64_t holders_hash = have_holders ? HoldersHash(*have_holders) : 0;
  r->encode = [path, sharer = std::move(sharer), notify, one, holders_hash, names_only,
               partial_ok](const ClusterView& v) {
    if (partial_ok) {  // kNsVdGet: `names` says a partial answer will do
      return EncodePathRequest(path, v, sharer ? &*sharer : nullptr, notify, *partial_ok, 0,
                               true);
    }
    return EncodePathRequest(path, v, sharer ? &*sharer : nullptr, notify, one.value_or(""),
                             holders_hash, names_only);
  };
  r->local = [self, path](const ClusterView& v, m2m::Callback<VdPtr> cb) {
    self->ServeGet(path, v.self, std::nullopt, false, std::move(cb));
  };
  r->decode = [quiet = coherent && !notify, have = std::move(have_holders),
               partial_ok = partial_ok.has_value()](const m2m::Bytes& b) {
    // A whole fetch answered for one name: recorded for names only, with
    // no notify (not for the kernel to cache).
    auto vd = DecodeVdFor(b, quiet, have);
    if (vd && partial_ok && (*vd)->partial) {
      std::const_pointer_cast<VirtualDirectory>(*vd)->kernel_may_cache = false;
    }
    return vd;
  };
  if (ticket) {
    r->inspect = [self, ticket = std::move(*ticket), notify, one, names_only, key, partial_ok](
                     const Result<VdPtr>& vd, bool remote, uint64_t epoch) {
      // Only a VD served by a manager that recorded the slot may be kept,
      // and only one built in the epoch it is kept under: a manager whose
      // view is behind this node's listed only the nodes it knows, and its
      // next epoch would not invalidate the copy here.
      if (!vd || !remote || !(*vd)->cacheable || (*vd)->epoch != epoch) return;
      if (names_only) {
        // What exists (or the directory's own summary), under the key
        // lookups use: the answer itself says its kernel may not cache it.
        if ((*vd)->partial && (one->empty() || !(*vd)->entries.empty()) &&
            DtEpoch(epoch, true) == DtEpoch(key, true)) {
          self->dt_->InstallName(ticket, *one, *vd, key);
        }
        return;
      }
      if (partial_ok && (*vd)->partial) {
        if (DtEpoch(epoch, true) == DtEpoch(key, true)) {
          self->dt_->InstallNamesOnly(ticket, *partial_ok, *vd, key);
        }
        return;
      }
      if (one && (*vd)->partial) {
        self->dt_->InstallName(ticket, *one, *vd, DtEpoch(epoch, notify));
      } else if (!(*vd)->partial) {
        self->dt_->Install(ticket, *vd, DtEpoch(epoch, notify));
      }
    };
  }
  r->resend = true;  // a read: the manager answers a resend alike
  r->done = std::move(done);
  Route(std::move(r));
}

auto VdService::Impl::Core::OnGetName(m2m::IncomingCall call, m2m::Responder responder) -> void {
  auto req = DecodePathRequest(call.payload);
  if (!req) return Refuse("kNsVdGetName", call, std::move(responder), req.error());
  Status valid = ValidateGlobalPath(req->path);
  if (valid && !req->name.empty()) valid = ValidateName(req->name);  // empty: no entry
  if (!valid) return Refuse("kNsVdGetName", call, std::move(responder), valid.error());
  auto view = cluster_->Current();
  if (auto s = CheckManager(*view, req->path); !s) return responder.Fail(s.error());
  const bool uncached = UnrecordUnknown(*req, *view);
  // A names-only record may be refused (max_sharers_per_vd): then the
  // answer is not to be kept.
  const bool names = req->names && req->sharer.has_value();
  auto recorded = std::make_shared<bool>(!req->names);
  // A whole sharer whose copy went stale, looking names up in a directory
  // that has stopped changing: the whole VD, so that its next lookups there
  // need no message (and its kernel may cache them) until the next change.
  bool whole = false;
  if (req->sharer && !req->names && !uncached) {
    std::lock_guard lock(mu_);
    whole = QuietLocked(req->path, view->epoch);
  }
  ServeGet(
      req->path, req->from, std::move(req->sharer), req->notify,
      [responder = std::move(responder), uncached, name = std::move(req->name),
       holders_hash = req->holders_hash, recorded, whole](Result<VdPtr> vd) mutable {
        if (!vd) return responder.Fail(vd.error());
        if (whole && *recorded && !(*vd)->partial && (*vd)->cacheable) {
          return responder.Reply(EncodeVd(**vd, false));
        }
        // The entry of `name` only, and what a lookup needs besides.
        const VdPtr part = PartialOf(*vd, name);
        const bool same = holders_hash != 0 && HoldersHash(part->holders) == holders_hash;
        responder.Reply(EncodeVd(*part, uncached || !*recorded || !part->cacheable, same));
      },
      names, recorded);
}

auto VdService::Impl::Core::QuietLocked(const std::string& path, uint64_t epoch) const -> bool {
  auto it = resident_.find(path);
  if (closed_ || it == resident_.end() || lent_.contains(path) || rounds_.contains(path)) {
    return false;
  }
  const VirtualDirectory& vd = *it->second.snap.vd;
  return vd.epoch == epoch && vd.entries.size() <= options_.whole_max_entries &&
         (it->second.changed == std::chrono::steady_clock::time_point{} ||
          it->second.changed + options_.quiet_after <= SteadyNow());
}

auto VdService::Impl::Core::ServeLookupGet(PathRequestData req, m2m::Responder responder,
                                           bool uncached, bool ready) -> void {
  std::optional<size_t> entries;
  {
    std::lock_guard lock(mu_);
    const auto view = cluster_->Current();
    if (auto it = resident_.find(req.path); !closed_ && it != resident_.end() &&
                                            it->second.snap.vd->epoch == view->epoch &&
                                            !rounds_.contains(req.path) && !lent_.contains(req.path)) {
      entries = it->second.snap.vd->entries.size();
    }
  }
  if (!entries && !ready) {
    // Made resident first (a dirmerge, a recall, a round waited for),
    // recording nothing: the first touch of a large directory by many nodes
    // at once must not copy it whole to each.
    const std::string path = req.path;
    return ServeGet(path, req.from, std::nullopt, false,
                    [self = shared_from_this(), req = std::move(req),
                     responder = std::move(responder), uncached](Result<VdPtr> vd) mutable {
                      if (!vd) return responder.Fail(vd.error());
                      self->ServeLookupGet(std::move(req), std::move(responder), uncached, true);
                    });
  }
  if (!entries || *entries <= options_.whole_max_entries) {
    return ServeGet(req.path, req.from, std::move(req.sharer), req.notify,
                    [responder = std::move(responder), uncached](Result<VdPtr> vd) mutable {
                      if (!vd) return responder.Fail(vd.error());
                      responder.Reply(EncodeVd(**vd, uncached || !(*vd)->cacheable));
                    });
  }
  // Large: the name only, recorded for names only (no notify: its kernel
  // does not cache these names). Refused past max_sharers_per_vd: then the
  // answer is not to be kept.
  auto recorded = std::make_shared<bool>(false);
  const bool names = req.sharer.has_value();
  ServeGet(
      req.path, req.from, std::move(req.sharer), false,
      [responder = std::move(responder), uncached, name = std::move(req.name),
       recorded](Result<VdPtr> vd) mutable {
        if (!vd) return responder.Fail(vd.error());
        const VdPtr part = PartialOf(*vd, name);
        responder.Reply(EncodeVd(*part, uncached || !*recorded || !part->cacheable));
      },
      names, recorded);
}

auto VdService::Impl::Core::Peek(const std::string& path, const std::string& name,
                                 std::move_only_function<void(Result<VdPtr>)> done) -> void {
  if (dt_ && ValidateGlobalPath(path) && ValidateName(name)) {
    auto view = cluster_->Current();
    const std::string& manager = view->Manager(path);
    // Managed or lent here, or a valid copy: as GetName. Only a stale copy
    // answers as it is, and not for the kernel (whether this node is told of
    // P's changes now is what a fresh answer would say).
    if (!manager.empty() && manager != view->self && !HeldHere(path, *view)) {
      const uint64_t key = DtEpoch(view->epoch, KernelCoherent() && !Busy(path));
      if (VdPtr vd = dt_->FindName(path, name, key)) return done(PartialOf(vd, name));
      if (VdPtr stale = dt_->AnyCopy(path, key)) {
        auto part = std::const_pointer_cast<VirtualDirectory>(PartialOf(stale, name));
        part->kernel_may_cache = false;
        return done(VdPtr(std::move(part)));
      }
    }
  }
  Get(path, &name, std::move(done));
}

auto VdService::Impl::Core::Churning(const std::string& path, bool stale) -> bool {
  if (options_.churn_gap.count() == 0) return false;
  const auto now = SteadyNow();
  std::lock_guard lock(mu_);
  auto it = churn_.find(path);
  if (it != churn_.end() && now < it->second.busy_until) return true;
  if (!stale) return false;
  if (churn_.size() > 4096) {
    std::erase_if(churn_, [&](const auto& kv) {
      return kv.second.busy_until <= now && kv.second.last_stale + options_.churn_gap <= now;
    });
  }
  Churn& c = churn_[path];
  const bool again = c.last_stale != std::chrono::steady_clock::time_point{} &&
                     now < c.last_stale + options_.churn_gap;
  c.last_stale = now;
  if (again) c.busy_until = now + kBusyFor;
  return again;
}

auto VdService::Impl::Core::GetUnrecorded(const std::string& path, const std::string& name,
                                          bool coherent,
                                          std::optional<std::vector<std::string>> have,
                                          std::move_only_function<void(Result<VdPtr>)> done)
    -> void {
  auto self = shared_from_this();
  auto r = std::make_shared<Routed<VdPtr>>();
  r->path = path;
  r->method = MethodId(RpcMethod::kNsVdGetName);
  r->timeout = ManagerTimeout();
  const uint64_t holders_hash = have ? HoldersHash(*have) : 0;
  r->encode = [path, name, holders_hash](const ClusterView& v) {
    return EncodePathRequest(path, v, nullptr, false, name, holders_hash);
  };
  r->local = [self, path](const ClusterView& v, m2m::Callback<VdPtr> cb) {
    self->ServeGet(path, v.self, std::nullopt, false, std::move(cb));
  };
  r->decode = [coherent, have = std::move(have)](const m2m::Bytes& b) {
    return DecodeVdFor(b, coherent, have);
  };

  r->resend = true;  // a read: the manager answers a resend alike
  r->done = std::move(done);
  Route(std::move(r));
}

}  // namespace fedfs::ns
