// VdService: lookups of one name (docs/namespace.md, "Names in a stale copy",
// "Busy directories"): the manager's kNsVdGetName, Peek, and the unrecorded
// lookups of a directory that keeps changing (vd/vd_service_impl.h).
#include "vd/vd_service_impl.h"

namespace fedfs::ns {

using namespace vd_detail;

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
  ServeGet(
      req->path, req->from, std::move(req->sharer), req->notify,
      [responder = std::move(responder), uncached, name = std::move(req->name),
       holders_hash = req->holders_hash, recorded](Result<VdPtr> vd) mutable {
        if (!vd) return responder.Fail(vd.error());
        // The entry of `name` only, and what a lookup needs besides.
        const VdPtr part = PartialOf(*vd, name);
        const bool same = holders_hash != 0 && HoldersHash(part->holders) == holders_hash;
        responder.Reply(EncodeVd(*part, uncached || !*recorded || !part->cacheable, same));
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

  r->done = std::move(done);
  Route(std::move(r));
}

}  // namespace fedfs::ns
