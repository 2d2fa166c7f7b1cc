// VdService: leases of VDs to the node that changes them (docs/namespace.md,
// "Leases"; vd/vd_service_impl.h).
//
// A manager M lends VD(P) to a node D with the reply to a change D reported
// when D made `lend_after` changes of P in a row and no other node holds a
// copy of P (no sharer, no claim or lock, no round or dirmerge in flight).
// The reply carries every copy of every name of P; D serves P itself from
// then on (gets, claims, locks, changes: no message) until:
//  * M recalls it (kNsVdRecall), which it does before it serves P to any
//    other node, its own mount included. D stops taking new claims and locks
//    (EAGAIN: its own operations then ask M, after the lease), waits until its
//    operations in P that hold a name have reported their change, forgets P
//    and answers. M forgets its own copy too and rebuilds VD(P) from the
//    export roots (which hold every change D applied) at its next use;
//  * its term ends: D serves P for `lease_term` from when it asked for the
//    lease, renewed (kNsVdRenew) while it uses it; M counts the term from
//    when it granted or renewed it, so M's count ends after D's. A recall
//    that D does not answer is given up when M's count of the term ends;
//  * the membership epoch changes: D forgets P and drops the VDs at P
//    everywhere (the new manager may have listed D while D still served P).
#include "vd/vd_service_impl.h"

namespace fedfs::ns {

using namespace vd_detail;

namespace {

// How long after the end of a lease's term (by its manager's count) the
// manager takes it as over without an answer: clocks of two machines run at
// nearly, not exactly, the same rate.
std::chrono::steady_clock::duration LeaseMargin(std::chrono::milliseconds term) {
  return term / 4 + std::chrono::milliseconds(10);
}

}  // namespace

// ---- Manager side ------------------------------------------------------------

auto VdService::Impl::Core::MaybeLendLocked(const std::string& path, Resident& r,
                                            const std::string& from, const ClusterView& view)
    -> std::optional<LeaseData> {
  if (!InRunLocked(r, from, view)) return std::nullopt;
  if (++r.streak < options_.lend_after) return std::nullopt;
  if (!LendableLocked(path, r, from, view)) return std::nullopt;
  const auto now = SteadyNow();
  // Every copy of every name, by holder.
  const MergeState& st = *r.snap.state;
  std::map<std::string, std::vector<DirEntry>> by_node;
  for (const std::string& h : st.holders) by_node[h];
  for (const auto& [name, copies] : st.copies) {
    const auto id = st.dir_ids.find(name);
    for (const auto& [node, type] : copies) {
      DirEntry e{name, type, 0};
      if (type == DT_DIR && id != st.dir_ids.end()) e.id = id->second;
      by_node[node].push_back(std::move(e));
    }
  }
  LeaseData l;
  l.id = ++lease_ids_;
  l.epoch = view.epoch;
  for (auto& [node, entries] : by_node) l.copies.emplace_back(node, std::move(entries));
  lent_[path] = Lent{.node = from, .id = l.id, .renewed = now};
  lease_count_.fetch_add(1, std::memory_order_acq_rel);
  ++stats_.leases_granted;
  // The holder reads its own copy from now on, not its directory table.
  if (auto s = sharers_.find(path); s != sharers_.end()) {
    sharer_records_ -= s->second.size();
    sharers_.erase(s);
  }
  r.streak = 0;
  return l;
}

auto VdService::Impl::Core::InRunLocked(Resident& r, const std::string& from,
                                        const ClusterView& view) -> bool {
  if (options_.lend_after == 0 || from == view.self || !view.IsAlive(from)) return false;
  if (r.streak_node != from) {
    r.streak_node = from;
    r.streak = 0;
  }
  return true;
}

auto VdService::Impl::Core::LendableLocked(const std::string& path, const Resident& r,
                                           const std::string& from, const ClusterView& view)
    -> bool {
  const VirtualDirectory& vd = *r.snap.vd;
  if (!vd.cacheable || vd.epoch != view.epoch) return false;
  if (builds_.contains(path) || rounds_.contains(path) || lent_.contains(path)) return false;
  const auto now = SteadyNow();
  if (auto c = claims_.find(path); c != claims_.end()) {
    std::erase_if(c->second, [&](const auto& kv) { return kv.second.expires <= now; });
    if (!c->second.empty()) return false;
    claims_.erase(c);
  }
  if (broadcast_all_ || broadcast_paths_.contains(path)) return false;
  if (auto s = sharers_.find(path); s != sharers_.end()) {
    for (const SharerRec& rec : s->second) {
      if (rec.node != from) return false;  // another node holds a copy
    }
  }
  if (auto t = recalled_at_.find(path); t != recalled_at_.end()) {
    if (now < t->second + options_.lend_cooldown) return false;
    recalled_at_.erase(t);
  }
  return true;
}

auto VdService::Impl::Core::LendsNextLocked(const std::string& path, Resident& r,
                                            const std::string& from, const ClusterView& view)
    -> bool {
  if (!InRunLocked(r, from, view)) return false;
  if (r.streak + 1 >= options_.lend_after && LendableLocked(path, r, from, view)) return true;
  ++r.streak;
  return false;
}

auto VdService::Impl::Core::SendRecall(const std::string& path) -> void {
  auto view = cluster_->Current();
  std::string node;
  uint64_t id = 0;
  std::chrono::steady_clock::time_point renewed;
  {
    std::lock_guard lock(mu_);
    auto it = lent_.find(path);
    if (it == lent_.end()) return;
    node = it->second.node;
    id = it->second.id;
    renewed = it->second.renewed;
    ++stats_.leases_recalled;
  }
  auto addr = view->live.find(node);
  if (addr == view->live.end()) return EndLent(path, id, 0);  // its lease died with it
  const auto timeout = 2 * std::chrono::duration_cast<m2m::Timeout>(options_.rpc_timeout);
  transport_->GetEndpoint(addr->second)
      ->Call(MethodId(RpcMethod::kNsVdRecall), EncodeRecallRequest(path, *view, id), timeout,
             [self = shared_from_this(), path, node, id, renewed](Result<m2m::Bytes> r) {
               if (r) {
                 auto d = DecodeRecalled(*r);
                 if (d) return self->EndLent(path, id, d->version);
                 Log()->warn("bad recall answer for {} from {}: {}", path, node,
                             d.error().ToString());
               } else {
                 Log()->warn("recall of the lease of {} from {}: {}", path, node,
                             r.error().ToString());
               }
               // Unanswered: the holder stops serving P by its own clock when
               // its term ends, before this node's count of it does.
               const auto until = renewed + self->options_.lease_term +
                                  LeaseMargin(self->options_.lease_term);
               self->blocking_->Post([self, path, id, until] {
                 if (const auto now = SteadyNow(); now < until) SleepFor(until - now);
                 self->EndLent(path, id, 0);
               });
             });
}

auto VdService::Impl::Core::EndLent(const std::string& path, uint64_t id, uint64_t version)
    -> void {
  std::vector<std::move_only_function<void()>> waiting;
  {
    std::lock_guard lock(mu_);
    auto it = lent_.find(path);
    if (it == lent_.end() || it->second.id != id) return;
    waiting = std::move(it->second.waiting);
    lent_.erase(it);
    lease_count_.fetch_sub(1, std::memory_order_acq_rel);
    version_floor_ = std::max(version_floor_, version);
    // Rebuilt from the export roots at its next use: they hold every change
    // the holder applied.
    if (auto r = resident_.find(path); r != resident_.end()) EvictLocked(r);
    const auto now = SteadyNow();
    if (recalled_at_.size() > 4096) {
      std::erase_if(recalled_at_,
                    [&](const auto& kv) { return kv.second + options_.lend_cooldown <= now; });
    }
    recalled_at_[path] = now;
  }
  for (auto& f : waiting) f();
}

auto VdService::Impl::Core::OnRenew(m2m::IncomingCall call, m2m::Responder responder) -> void {
  auto req = DecodePathRequest(call.payload);
  if (!req) return Refuse("kNsVdRenew", call, std::move(responder), req.error());
  if (auto s = ValidateGlobalPath(req->path); !s) {
    return Refuse("kNsVdRenew", call, std::move(responder), s.error());
  }
  bool renewed = false;
  {
    std::lock_guard lock(mu_);
    auto it = lent_.find(req->path);
    if (it != lent_.end() && it->second.id == req->lease && it->second.node == req->from &&
        !it->second.recalling) {
      it->second.renewed = SteadyNow();
      renewed = true;
    }
  }
  responder.Reply(EncodeRecalled(RecalledData{renewed, 0}));
}

// ---- Holder side -------------------------------------------------------------

auto VdService::Impl::Core::InstallLease(const std::string& path, const UpdateOutcome& o,
                                         std::chrono::steady_clock::time_point asked) -> void {
  const LeaseData& l = *o.lease;
  std::vector<NodeListing> listings;
  listings.reserve(l.copies.size());
  for (const auto& [node, entries] : l.copies) listings.push_back(NodeListing{node, entries});
  auto collected = vd_internal::Collect(listings);
  if (!collected) {  // its manager's recall will find it not held
    Log()->warn("lease of {} not taken: {}", path, collected.error().ToString());
    return;
  }
  auto state = std::make_shared<MergeState>(std::move(*collected));
  auto vd = std::make_shared<VirtualDirectory>();
  vd->path = path;
  vd->version = o.version;
  vd->epoch = l.epoch;
  vd->holders = state->holders;
  vd->entries = vd_internal::AllEntries(*state);
  vd->CountSubdirs();
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    if (auto rv = revoked_.find(path); rv != revoked_.end() && rv->second == l.id) {
      revoked_.erase(rv);  // recalled before it arrived
      return;
    }
    if (cluster_->Current()->epoch != l.epoch) return;
    Snapshot snap{std::move(vd), std::move(state)};
    if (auto it = resident_.find(path); it != resident_.end()) {
      it->second.snap = std::move(snap);
      Touch(it->second);
    } else {
      lru_.push_front(path);
      resident_.emplace(path, Resident{std::move(snap), lru_.begin()});
      // An evicted lent VD is rebuilt here by dirmerge at its next use: only
      // this node changes P meanwhile, and every change is in an export root.
      while (resident_.size() > options_.max_resident_vds) {
        EvictLocked(resident_.find(lru_.back()));
      }
    }
    auto [h, added] = held_.insert_or_assign(
        path, Held{.id = l.id, .epoch = l.epoch, .expires = asked + options_.lease_term});
    if (added) lease_count_.fetch_add(1, std::memory_order_acq_rel);
    version_floor_ = std::max(version_floor_, o.version);
    ++stats_.leases_taken;
  }
  if (dt_) dt_->Invalidate(path);
}

auto VdService::Impl::Core::HeldHere(const std::string& path, const ClusterView& view) -> bool {
  if (!AnyLeases()) return false;
  std::vector<m2m::Responder> answer;
  bool ended = false, epoch_changed = false, renew = false;
  uint64_t id = 0, version = 0;
  const auto now = SteadyNow();
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(path);
    if (it == held_.end()) return false;
    Held& h = it->second;
    if (h.epoch != view.epoch || now >= h.expires) {
      epoch_changed = h.epoch != view.epoch;
      version = version_floor_;
      EndHeldLocked(it, &answer);
      ended = true;
    } else if (!h.renewing && !h.returning && now + options_.lease_term / 2 >= h.expires) {
      h.renewing = true;
      renew = true;
      id = h.id;
    }
  }
  // This node's kernel may hold names of P served from the lease, of which
  // no one will tell it now: dropped before the lease is given back (if it
  // got any since its names were last dropped; a new epoch drops them all).
  if (ended) epoch_changed ? DropKernelNames() : DropKernelNamesOf(path);
  for (auto& r : answer) r.Reply(EncodeRecalled(RecalledData{true, version}));
  if (ended) {
    if (epoch_changed) {
      // The new manager of P may have listed this node while it still served
      // P: it rebuilds from the export roots.
      DropSubtree(path, [path](Status s) {
        if (!s) Log()->warn("dropping {} after its lease: {}", path, s.error().ToString());
      });
    }
    return false;
  }
  if (renew) SendRenew(path, id, now);
  return true;
}

auto VdService::Impl::Core::SendRenew(const std::string& path, uint64_t id,
                                      std::chrono::steady_clock::time_point asked) -> void {
  auto view = cluster_->Current();
  auto addr = view->live.find(view->Manager(path));
  auto self = shared_from_this();
  auto done = [self, path, id, asked](bool renewed) {
    std::lock_guard lock(self->mu_);
    auto it = self->held_.find(path);
    if (it == self->held_.end() || it->second.id != id) return;
    it->second.renewing = false;
    if (renewed) it->second.expires = asked + self->options_.lease_term;
  };
  if (addr == view->live.end()) return done(false);
  transport_->GetEndpoint(addr->second)
      ->Call(MethodId(RpcMethod::kNsVdRenew), EncodeRecallRequest(path, *view, id),
             std::chrono::duration_cast<m2m::Timeout>(options_.rpc_timeout),
             [done](Result<m2m::Bytes> r) mutable {
               if (!r) return done(false);
               auto d = DecodeRecalled(*r);
               done(d && d->held);
             });
}

auto VdService::Impl::Core::OnRecall(m2m::IncomingCall call, m2m::Responder responder) -> void {
  auto req = DecodePathRequest(call.payload);
  if (!req) return Refuse("kNsVdRecall", call, std::move(responder), req.error());
  if (auto s = ValidateGlobalPath(req->path); !s) {
    return Refuse("kNsVdRecall", call, std::move(responder), s.error());
  }
  uint64_t version = 0;
  bool parked = false;
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(req->path);
    if (it != held_.end() && it->second.id == req->lease) {
      parked = true;
      it->second.returning = true;
      it->second.recalls.push_back(std::move(responder));
    } else {
      // Not (yet) here: a lease in a reply still on its way is not taken.
      if (it == held_.end()) {
        if (revoked_.size() > 4096) revoked_.clear();
        revoked_[req->path] = req->lease;
      }
      version = version_floor_;
    }
  }
  if (!parked) return responder.Reply(EncodeRecalled(RecalledData{false, version}));
  MaybeReturn(req->path);
}

auto VdService::Impl::Core::MaybeReturn(const std::string& path) -> void {
  if (!AnyLeases()) return;
  std::vector<m2m::Responder> answer;
  uint64_t version = 0;
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(path);
    if (it == held_.end() || !it->second.returning) return;
    // This node's operations that hold a name in P report their change first.
    if (auto c = claims_.find(path); c != claims_.end()) {
      const auto now = SteadyNow();
      std::erase_if(c->second, [&](const auto& kv) { return kv.second.expires <= now; });
      if (!c->second.empty()) return;
    }
    version = version_floor_;
    EndHeldLocked(it, &answer);
  }
  DropKernelNamesOf(path);  // names served from the lease: no one tells this kernel of P now
  for (auto& r : answer) r.Reply(EncodeRecalled(RecalledData{true, version}));
}

auto VdService::Impl::Core::EndHeldLocked(std::unordered_map<std::string, Held>::iterator it,
                                          std::vector<m2m::Responder>* answer) -> void {
  for (auto& r : it->second.recalls) answer->push_back(std::move(r));
  if (auto r = resident_.find(it->first); r != resident_.end()) EvictLocked(r);
  claims_.erase(it->first);
  held_.erase(it);
  lease_count_.fetch_sub(1, std::memory_order_acq_rel);
  ++stats_.leases_ended;
}

auto VdService::Impl::Core::ReturningLocked(const std::string& path) const -> Status {
  if (auto it = held_.find(path); it != held_.end() && it->second.returning) {
    return Err(EAGAIN, "the lease of " + path + " is being given back");
  }
  return ServedHereLocked(path);
}

auto VdService::Impl::Core::ServedHereLocked(const std::string& path) const -> Status {
  // An operation decides where P is served (HeldHere) before it takes mu_;
  // the lease may have gone back in between, and a claim taken or a change
  // applied here then would be unknown to M(P), which rebuilt P from the
  // export roots (the history test lost a file created so).
  if (held_.contains(path)) return Ok();
  const auto view = cluster_->Current();
  if (view->Manager(path) == view->self) return Ok();
  return Err(EAGAIN, std::string(kLeaseEnded) + path);
}

}  // namespace fedfs::ns
