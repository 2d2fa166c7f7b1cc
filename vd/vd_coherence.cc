// VdService: name claims, sharers and their one-sided invalidation, residency of
// VDs at their manager (dirmerge), kernel-cache drops (vd/vd_service_impl.h).
#include "vd/vd_service_impl.h"

namespace fedfs::ns {

using namespace vd_detail;

auto VdService::Impl::Core::OtherHoldLocked(const std::string& path, const std::string& name,
                                            const std::string& node) -> const Claim* {
  auto& claims = claims_[path];
  const auto now = SteadyNow();
  std::erase_if(claims, [&](const auto& kv) { return kv.second.expires <= now; });
  auto c = claims.find(name);
  return c != claims.end() && c->second.node != node ? &c->second : nullptr;
}

auto VdService::Impl::Core::BusyLocked(const std::string& path, const std::string& name,
                                       const std::string& node) -> Status {
  if (const Claim* c = OtherHoldLocked(path, name, node)) {
    return Err(EAGAIN, JoinPath(path, name) + " is busy on " + c->node);
  }
  return Ok();
}

auto VdService::Impl::Core::EndClaimLocked(const std::string& path, const std::string& name,
                                           const std::string& node, uint64_t token) -> void {
  auto p = claims_.find(path);
  if (p == claims_.end()) return;
  auto c = p->second.find(name);
  if (c != p->second.end() && c->second.node == node &&
      (token == 0 || c->second.token == token)) {
    p->second.erase(c);
  }
  if (p->second.empty()) claims_.erase(p);
}

auto VdService::Impl::Core::ServeClaim(const std::string& path, VdChange change,
                                       const std::string& from, m2m::Callback<UpdateOutcome> done)
    -> void {
  if (change.kind == VdChange::Kind::kRelease) {
    {
      std::lock_guard lock(mu_);
      EndClaimLocked(path, change.name, from, change.id);
    }
    MaybeReturn(path);  // a lent P's return may have waited for it
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
      return QueueBehindRoundLocked(
          path, [self = shared_from_this(), path, change = std::move(change), from,
                 done = std::move(done)]() mutable {
            self->ServeClaim(path, std::move(change), from, std::move(done));
          });
    }
    if (Status busy = BusyLocked(path, change.name, from); !busy) {
      return done(Err(busy.error()));
    }
    if (Status r = ReturningLocked(path); !r) return done(Err(r.error()));
    claims_[path][change.name] = HoldBy(from);
    return done(UpdateOutcome{});
  }
  ServeClaimOf(path, std::move(change.name), std::nullopt, from, std::move(done));
}

auto VdService::Impl::Core::DecideSettled(
    const std::string& path, m2m::Callback<UpdateOutcome> done,
    std::move_only_function<Result<UpdateOutcome>(const Snapshot&)> decide) -> void {
  EnsureResident(path, [self = shared_from_this(), path, done = std::move(done),
                        decide = std::move(decide)](Result<Snapshot> s) mutable {
    if (!s) return done(Err(s.error()));
    Result<UpdateOutcome> o = Err(EIO, "undecided");
    {
      std::lock_guard mu_lock(self->mu_);
      // What it reads is what every copy shows once the requester acts on
      // it (a lock's holder reads VD(P) next): not while a round is in
      // flight (rounds_).
      if (self->rounds_.contains(path)) {
        self->QueueBehindRoundLocked(
            path, [self, path, done = std::move(done), decide = std::move(decide)]() mutable {
              self->DecideSettled(path, std::move(done), std::move(decide));
            });
        return;
      }
      if (Status r = self->ReturningLocked(path); !r) {
        o = Err(r.error());
      } else {
        // The resident VD may be newer than the snapshot this waited for.
        Snapshot cur = *s;
        if (auto it = self->resident_.find(path); it != self->resident_.end()) {
          cur = it->second.snap;
        }
        o = decide(cur);
      }
    }
    // The snapshot is let go first: `done` may change VD(P) (a kAddNew's
    // add), which copies the whole VD and merge state while another
    // reference to them is held (O(entries) per create: measured 3.5x
    // fewer creates per second in a directory each).
    { [[maybe_unused]] Snapshot gone = std::move(*s); }
    done(std::move(o));
  });
}

auto VdService::Impl::Core::ServeClaimOf(const std::string& path, std::string name,
                                         std::optional<std::string> lock, const std::string& from,
                                         m2m::Callback<UpdateOutcome> done) -> void {
  DecideSettled(
      path, std::move(done),
      [self = shared_from_this(), path, name = std::move(name), lock = std::move(lock),
       from](const Snapshot& cur) -> Result<UpdateOutcome> {
        if (Status s = self->ClaimLocked(path, name, lock, from, cur); !s) return Err(s.error());
        // No holders: a claim patches nothing (they were thousands of node
        // ids per create at 1,024 nodes).
        UpdateOutcome o;
        o.prev_version = o.version = cur.vd->version;
        return o;
      });
}

auto VdService::Impl::Core::ClaimLocked(const std::string& path, const std::string& name,
                                        const std::optional<std::string>& lock,
                                        const std::string& from, const Snapshot& cur) -> Status {
  if (lock) {
    if (Status busy = BusyLocked(path, *lock, from); !busy) return busy;
  }
  const std::string full = JoinPath(path, name);
  if (cur.state->copies.count(name) != 0 || cur.vd->Find(name) != nullptr) {
    return Err(EEXIST, full + " exists");
  }
  // A node that did not answer may hold the name: wait (the client
  // retries) until it answers or is declared dead.
  if (!cur.vd->cacheable) return Err(EAGAIN, full + ": a live node's listing is missing");
  // A claim is waited out too: its create may still fail, so EEXIST
  // now would report a name that never exists.
  if (Status busy = BusyLocked(path, name, from); !busy) return busy;
  const Claim held = HoldBy(from);
  auto& claims = claims_[path];
  claims[name] = held;
  if (lock) claims[*lock] = held;
  return Ok();
}

auto VdService::Impl::Core::ServeAddNew(const std::string& path, VdChange add,
                                        const std::string& from, const ClusterView& view,
                                        m2m::Callback<UpdateOutcome> done, bool lease_ok,
                                        uint64_t holders_hash) -> void {
  add.kind = VdChange::Kind::kAdd;
  const uint64_t token = std::exchange(add.id, 0);  // a file's entry has no id
  auto claim_only = std::make_shared<bool>(false);
  DecideSettled(
      path,
      [self = shared_from_this(), path, add, from, view, holders_hash, claim_only,
       done = std::move(done)](Result<UpdateOutcome> o) mutable {
        if (!o || *claim_only) return done(std::move(o));
        self->ServeUpdate(path, {std::move(add)}, from, view, std::move(done), false,
                          holders_hash, /*adding=*/true);
      },
      [self = shared_from_this(), path, name = add.name, node = add.node, from, view, lease_ok,
       claim_only, token](const Snapshot& cur) -> Result<UpdateOutcome> {
        const auto& holders = cur.state->holders;
        if (std::find(holders.begin(), holders.end(), node) == holders.end()) {
          // Not a holder of P here: the creator's copy that chose it may be
          // stale (a directory renamed away there), and its create may fail
          // with ENOENT. Only claimed; the kAdd after the file makes the
          // node a holder.
          *claim_only = true;
        } else if (lease_ok) {
          // Lent with a kAdd's reply, not with this one: the borrower would
          // serve P before its entry is made, and a recall could not wait
          // for it (MaybeLendLocked).
          if (auto it = self->resident_.find(path); it != self->resident_.end()) {
            *claim_only = self->LendsNextLocked(path, it->second, from, view);
          }
        }
        if (Status s = self->ClaimLocked(path, name, std::nullopt, from, cur); !s) {
          return Err(s.error());
        }
        self->claims_[path][name].token = token;
        UpdateOutcome o;
        o.prev_version = o.version = cur.vd->version;
        return o;
      });
}

auto VdService::Impl::Core::ServeLockRead(const std::string& path, std::string name,
                                          const std::string& from,
                                          m2m::Callback<UpdateOutcome> done) -> void {
  DecideSettled(path, std::move(done),
                [self = shared_from_this(), path, name = std::move(name),
                 from](const Snapshot& cur) -> Result<UpdateOutcome> {
                  UpdateOutcome o;
                  o.read = true;
                  o.prev_version = o.version = cur.vd->version;
                  if (const VdEntry* e = cur.vd->Find(name); e != nullptr && e->RealName() == name) {
                    if (Status busy = self->BusyLocked(path, name, from); !busy) {
                      return Err(busy.error());
                    }
                    self->claims_[path][name] = self->HoldBy(from);
                    o.held = true;
                  }
                  o.read_vd = PartialOf(cur.vd, name);
                  return o;
                });
}

auto VdService::Impl::Core::RecordSharerLocked(const std::string& path, const std::string& node,
                                               const SharerSlotData* sharer, bool notify,
                                               bool names) -> bool {
  if (broadcast_all_ || broadcast_paths_.count(path) != 0) return true;
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
      r.names_only = r.names_only && names;  // whole if ever asked whole
      return true;
    }
  }
  // Whole and names-only records are bounded apart: names-only readers of
  // a busy directory neither turn it to broadcasts nor crowd out whole
  // sharers; past their bound they are not recorded (asked again each time).
  const size_t alike = static_cast<size_t>(std::ranges::count_if(
      recs, [&](const SharerRec& r) { return r.names_only == names; }));
  if (names && alike >= options_.max_sharers_per_vd) return false;
  if (!names && alike >= options_.max_sharers_per_vd) {
    sharer_records_ -= recs.size();
    sharers_.erase(path);
    broadcast_paths_.insert(path);
    ++sharer_records_;  // the broadcast mark counts as one record
    return true;
  }
  recs.push_back(
      SharerRec{node, sharer != nullptr ? sharer->slot : 0, sharer != nullptr, notify, names});
  if (++sharer_records_ > options_.max_sharer_records) {
    Log()->warn("{} sharer records: every VD change is broadcast from now on", sharer_records_);
    broadcast_all_ = true;
    sharers_.clear();
    broadcast_paths_.clear();
    sharer_records_ = 0;
  }
  return true;
}

auto VdService::Impl::Core::TakeSharersLocked(const std::string& path, const std::string& from,
                                              bool additive) -> std::vector<SharerRec> {
  auto it = sharers_.find(path);
  if (it == sharers_.end()) return {};
  std::vector<SharerRec> out;
  std::vector<SharerRec> keep;
  for (SharerRec& r : it->second) {
    (r.node == from || (additive && r.names_only) ? keep : out).push_back(std::move(r));
  }
  sharer_records_ -= out.size();
  if (keep.empty()) {
    sharers_.erase(it);
  } else {
    it->second = std::move(keep);
  }
  return out;
}

auto VdService::Impl::Core::RegionOf(const std::string& node, const std::string& addr)
    -> Result<std::pair<std::shared_ptr<m2m::Endpoint>, std::shared_ptr<m2m::RemoteRegion>>> {
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

auto VdService::Impl::Core::SendInvalidation(const std::string& path, const std::string& node,
                                             bool bump, uint32_t slot, int attempt,
                                             std::shared_ptr<const m2m::Bytes> patch,
                                             std::function<void(bool)> finish) -> void {
  auto view = cluster_->Current();
  auto live = view->live.find(node);
  if (live == view->live.end() || IsClosed()) {
    return finish(false);  // dead: its DT dies with its epoch
  }
  auto self = shared_from_this();
  auto after = [self, path, node, bump, slot, attempt, patch, finish](const Error* e, bool kept) {
    if (e == nullptr) return finish(kept);
    if (ConnectionBroken(e->code) && attempt < kMaxResends) {
      {
        std::lock_guard lock(self->mu_);
        ++self->stats_.invalidations_resent;
      }
      // A delta applied twice finds its copy past it and drops it: safe.
      return self->SendInvalidation(path, node, bump, slot, attempt + 1, patch, finish);
    }
    Log()->warn("invalidation of {} at sharer {} failed ({}); sharer dropped", path, node,
                e->ToString());
    {
      std::lock_guard lock(self->mu_);
      ++self->stats_.invalidations_failed;
    }
    finish(false);
  };
  const auto timeout = std::chrono::duration_cast<m2m::Timeout>(options_.rpc_timeout);
  if (!bump) {
    transport_->GetEndpoint(live->second)
        ->Call(MethodId(RpcMethod::kNsDtInval), patch ? *patch : EncodePathRequest(path, *view),
               timeout, [after](Result<m2m::Bytes> r) {
                 if (!r) return after(&r.error(), false);
                 after(nullptr, r->size() == 1 && r->front() == std::byte{1});
               });
    return;
  }
  auto region = RegionOf(node, live->second);
  if (!region) return after(&region.error(), false);
  {
    std::lock_guard lock(mu_);
    ++stats_.invalidations_sent;
  }
  auto [ep, remote] = std::move(*region);
  ep->FetchAdd(*remote, uint64_t{slot} * 8, 1, timeout,
               [after, remote](Result<uint64_t> r) { after(r ? nullptr : &r.error(), false); });
}

auto VdService::Impl::Core::InvalidateSharers(
    const std::string& path, std::vector<SharerRec> targets, bool broadcast,
    const ClusterView& view, const std::string& from, const DtPatchData* delta,
    std::move_only_function<void(std::vector<SharerRec>)> done) -> void {
  struct Round {
    std::mutex mu;
    size_t outstanding = 1;  // + 1 while issuing
    std::vector<SharerRec> kept;
    std::move_only_function<void(std::vector<SharerRec>)> done;
  };
  auto round = std::make_shared<Round>();
  round->done = std::move(done);
  auto finish = [round](const SharerRec* rec, bool kept) {
    std::move_only_function<void(std::vector<SharerRec>)> d;
    std::vector<SharerRec> all;
    {
      std::lock_guard lock(round->mu);
      if (kept && rec != nullptr) round->kept.push_back(*rec);
      if (--round->outstanding > 0) return;
      d = std::move(round->done);
      all = std::move(round->kept);
    }
    d(std::move(all));
  };
  auto send = [&](const std::string& node, bool bump, uint32_t slot,
                  std::shared_ptr<const m2m::Bytes> patch, std::optional<SharerRec> rec) {
    {
      std::lock_guard lock(round->mu);
      ++round->outstanding;
    }
    SendInvalidation(path, node, bump, slot, 0, std::move(patch),
                     [finish, rec = std::move(rec)](bool kept) {
                       finish(rec ? &*rec : nullptr, kept);
                     });
  };
  // The delta, encoded once per notify mode (its `notify` tells the sharer
  // to drop its kernel's names too).
  std::shared_ptr<const m2m::Bytes> patches[2];
  if (delta != nullptr && !broadcast) {
    for (int n = 0; n < 2; ++n) {
      patches[n] = std::make_shared<const m2m::Bytes>(EncodeDtPatch(path, view, *delta, n == 1));
    }
  }
  // A node sent a call (its kernel's names, or a broadcast) has its table's
  // copy invalidated (or patched) by that call (OnDtInval) before it
  // answers: the one-sided bump goes only to sharers that get no call, and
  // a change thus wakes each sharer once.
  auto called = [&](const std::string& node) {
    return broadcast && node != view.self && node != from;
  };
  for (const SharerRec& t : targets) {
    if (!view.live.contains(t.node)) continue;  // dead: its DT dies with its epoch
    if (patches[0] && t.has_slot && !t.names_only) {
      {
        std::lock_guard lock(mu_);
        ++stats_.deltas_sent;
        if (t.notify) ++stats_.notifies_sent;
      }
      send(t.node, false, 0, patches[t.notify ? 1 : 0], t);
    } else if (t.notify && !broadcast) {
      // Its kernel's names: only its CPU can drop them.
      {
        std::lock_guard lock(mu_);
        ++stats_.notifies_sent;
      }
      send(t.node, false, 0, nullptr, std::nullopt);
    } else if (t.has_slot && !called(t.node)) {
      send(t.node, true, t.slot, nullptr, std::nullopt);
    }
  }
  if (broadcast) {
    if (dt_) dt_->Invalidate(path);
    for (const auto& [node, addr] : view.live) {
      if (node == view.self || node == from) continue;
      {
        std::lock_guard lock(mu_);
        ++stats_.broadcasts_sent;
      }
      send(node, false, 0, nullptr, std::nullopt);
    }
  }
  finish(nullptr, false);
}

auto VdService::Impl::Core::EnsureResident(const std::string& path, Waiter waiter) -> void {
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
    build->started = SteadyNow();
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
      ListRemote(build, i, node, addr, view, 0);
    }
    ++i;
  }
  LeafDone(build, kIssued, Result<std::vector<DirEntry>>(std::vector<DirEntry>{}));
}

auto VdService::Impl::Core::ListRemote(const std::shared_ptr<Build>& build, size_t i,
                                       std::string node, std::string addr,
                                       std::shared_ptr<const ClusterView> view, int resends)
    -> void {
  auto ep = transport_->GetEndpoint(addr);
  ep->Call(MethodId(RpcMethod::kNsListLocal), EncodePathRequest(build->path, *view),
           std::chrono::duration_cast<m2m::Timeout>(options_.rpc_timeout),
           [self = shared_from_this(), build, i, node, addr, view,
            resends](Result<m2m::Bytes> reply) mutable {
             if (!reply && ConnectionBroken(reply.error().code) && resends < kMaxResends &&
                 !self->IsClosed()) {
               {
                 std::lock_guard lock(self->mu_);
                 ++self->stats_.resends;
               }
               return self->ListRemote(build, i, std::move(node), std::move(addr),
                                       std::move(view), resends + 1);
             }
             Result<std::vector<DirEntry>> r =
                 reply ? DecodeListing(*reply) : Result<std::vector<DirEntry>>(Err(reply.error()));
             if (!r && r.error().code == EPROTO) {
               Log()->warn("bad listing of {} from {}: {}", build->path, node,
                           r.error().ToString());
             }
             self->LeafDone(build, i, std::move(r));
           });
}

auto VdService::Impl::Core::LeafDone(const std::shared_ptr<Build>& build, size_t i,
                                     Result<std::vector<DirEntry>> r) -> void {
  std::vector<Waiter> waiters;
  Result<Snapshot> result = Err(EIO, "unset");
  {
    std::lock_guard lock(mu_);
    if (i != kIssued) {
      if (!r && r.error().code != ENOENT && r.error().code != ENOTDIR) {
        SPDLOG_LOGGER_DEBUG(Log(), "dirmerge {}: node {} left out: {}", build->path,
                            build->listings[i].node, r.error().ToString());
      }
      build->listings[i].listing = std::move(r);
    }
    if (--build->outstanding > 0) return;
    waiters = std::move(build->waiters);
    dirmerge_latency_.Observe(SteadyNow() - build->started);
    auto b = builds_.find(build->path);
    if (b != builds_.end() && b->second == build) builds_.erase(b);
    result = FinishLocked(*build);
  }
  for (auto& w : waiters) {
    w(result);  // copies of an immutable snapshot (or the error)
  }
}

auto VdService::Impl::Core::FinishLocked(Build& build) -> Result<Snapshot> {
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
      vd_internal::ApplyAdd(*state, c.node, c.name, c.type, c.id);
    } else {
      vd_internal::ApplyRemove(*state, c.node, c.name);
    }
  }
  // Entries added by a kAddNew whose node may not have made them yet (their
  // claim has not ended): of live claimants and holders only.
  if (auto cl = claims_.find(build.path); cl != claims_.end()) {
    const auto now = SteadyNow();
    const auto view = cluster_->Current();
    for (const auto& [name, claim] : cl->second) {
      if (!claim.add || claim.expires <= now || !view->IsAlive(claim.node) ||
          !view->IsAlive(claim.add->node)) {
        continue;
      }
      vd_internal::ApplyAdd(*state, claim.add->node, claim.add->name, claim.add->type,
                            claim.add->id);
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
  // Built for a read of a P whose lease here ended meanwhile: served, not
  // kept (no one would tell this node of P's changes).
  if (!ServedHereLocked(build.path)) return snap;

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

auto VdService::Impl::Core::DropKernelNames() -> void {
  KernelCache* k = kernel_.load(std::memory_order_acquire);
  if (k == nullptr || !k->Coherent()) return;
  k->InvalidateNames();
  std::lock_guard lock(mu_);
  ++stats_.kernel_invalidations;
}

auto VdService::Impl::Core::DropKernelNamesOf(const std::string& path,
                                             const std::vector<std::string>* names) -> void {
  KernelCache* k = kernel_.load(std::memory_order_acquire);
  if (k == nullptr || !k->Coherent()) return;
  const uint64_t before = k->NamesEpoch();
  k->InvalidateNamesOf(path, names);
  if (k->NamesEpoch() == before) return;  // none of P's names went to the kernel
  std::lock_guard lock(mu_);
  ++stats_.kernel_invalidations;
}

}  // namespace fedfs::ns
