// VdService: changes told to sharers as deltas (docs/namespace.md,
// "Changes as deltas"): the delta a manager sends, and kNsDtInval, with or
// without one, at the sharer.
#include "vd/vd_service_impl.h"

namespace fedfs::ns {

using namespace vd_detail;

auto VdService::Impl::Core::DeltaOf(const Snapshot& snap, uint64_t prev_version,
                                    const std::vector<VdChange>& changes) -> DtPatchData {
  const MergeState& st = *snap.state;
  DtPatchData d;
  d.version = snap.vd->version;
  d.prev_version = prev_version;
  std::set<std::string> names;
  for (const VdChange& c : changes) {
    for (std::string& k : vd_internal::RefreshKeys(c.name)) names.insert(std::move(k));
  }
  d.keys.assign(names.begin(), names.end());
  std::set<std::string> seen;  // visible names already in d.fresh
  for (const std::string& k : d.keys) {
    for (VdEntry& e : vd_internal::FreshEntries(st, k)) {
      if (seen.insert(e.name).second) d.fresh.push_back(std::move(e));
    }
  }
  d.holders = st.holders;
  return d;
}

auto VdService::Impl::Core::OnDtInval(m2m::IncomingCall call, m2m::Responder responder) -> void {
  auto req = DecodePathRequest(call.payload);
  if (!req) return Refuse("kNsDtInval", call, std::move(responder), req.error());
  if (auto s = ValidateGlobalPath(req->path); !s) {
    return Refuse("kNsDtInval", call, std::move(responder), s.error());
  }
  // A delta (docs/namespace.md, "Changes as deltas") is applied to the
  // table's copy, which stays valid if it was at the version before.
  bool kept = false;
  std::vector<std::string> names;  // a delta's changed names, for the kernel
  if (req->patch) {
    names = req->patch->keys;
    for (const VdEntry& e : req->patch->fresh) names.push_back(e.name);
  }
  if (dt_ && req->patch) {
    DtPatchData& d = *req->patch;
    kept = dt_->ApplyDelta(req->path, req->epoch, d.prev_version, d.version, d.keys,
                           std::move(d.fresh), std::move(d.holders));
  } else if (dt_) {
    dt_->Invalidate(req->path);
  }
  // After the table's copy: a lookup now reads anew. A delta says whether
  // this node's kernel was handed cacheable names of P (`notify`), and
  // which names changed: the kernel's other names stay.
  if (!req->patch) {
    DropKernelNamesOf(req->path);
  } else if (req->notify) {
    DropKernelNamesOf(req->path, &names);
  }
  {
    std::lock_guard lock(mu_);
    ++stats_.dt_invals_received;
    if (!kept) {  // its next fetch: busy (Busy)
      const auto now = SteadyNow();
      if (notified_.size() > 4096) {
        std::erase_if(notified_, [&](const auto& kv) { return kv.second + kBusyFor <= now; });
      }
      notified_[req->path] = now;
    }
  }
  responder.Reply(kept ? m2m::Bytes{std::byte{1}} : m2m::Bytes{});
}

}  // namespace fedfs::ns
