#include "vd/vd_control.h"

#include <dirent.h>

#include <future>
#include <memory>

#include "vd/vd_service.h"

namespace fedfs::ns {
namespace {

// The blocking form of VdService::Conflicts (control thread only).
Result<std::vector<Conflict>> ConflictsSync(VdService& s, const std::string& path) {
  auto promise = std::make_shared<std::promise<Result<std::vector<Conflict>>>>();
  auto future = promise->get_future();
  s.Conflicts(path, [promise](Result<std::vector<Conflict>> r) { promise->set_value(std::move(r)); });
  return future.get();
}

}  // namespace

control::DtReply DtStatus(const VdService& vds, const std::string& self) {
  const VdService::Stats s = vds.stats();
  control::DtReply r;
  r.node = self;
  r.lookups = s.lookups;
  r.gets_sent = s.gets_sent;
  r.messages_per_lookup =
      s.lookups == 0 ? 0.0 : static_cast<double>(s.gets_sent) / static_cast<double>(s.lookups);
  r.dt_invals_received = s.dt_invals_received;
  r.notifies_sent = s.notifies_sent;
  r.kernel_invalidations = s.kernel_invalidations;
  r.sharer_records = s.sharer_records;
  r.invalidations_sent = s.invalidations_sent;
  r.invalidations_failed = s.invalidations_failed;
  r.invalidations_resent = s.invalidations_resent;
  r.resends = s.resends;
  r.duplicates_answered = s.duplicates_answered;
  r.broadcasts_sent = s.broadcasts_sent;
  r.changes_invalidated = s.changes_invalidated;
  r.deltas_sent = s.deltas_sent;
  r.deltas_kept = s.deltas_kept;
  r.gets_served = s.gets_served;
  r.dirmerges = s.dirmerges;
  r.updates_applied = s.updates_applied;
  r.resident = s.resident;
  r.leases_granted = s.leases_granted;
  r.leases_recalled = s.leases_recalled;
  r.leases_taken = s.leases_taken;
  r.leases_ended = s.leases_ended;
  r.leases_held = s.leases_held;
  r.unlinks_asked = s.unlinks_asked;
  r.unlinks_made = s.unlinks_made;
  r.renames_asked = s.renames_asked;
  r.renames_made = s.renames_made;
  if (s.has_dt) {
    control::DtTableRow t;
    t.capacity = s.dt.capacity;
    t.max_bytes = s.dt.max_bytes;
    t.occupancy = s.dt.occupancy;
    t.bytes = s.dt.bytes;
    t.hits = s.dt.hits;
    t.misses = s.dt.misses;
    t.stale = s.dt.stale;
    t.evictions = s.dt.evictions;
    t.bumps_received = s.dt.bumps_received;
    t.local_bumps = s.dt.local_bumps;
    t.patches = s.dt.patches;
    t.name_hits = s.dt.name_hits;
    t.name_installs = s.dt.name_installs;
    t.skeletons = s.dt.skeletons;
    t.deltas_applied = s.dt.deltas_applied;
    t.deltas_refused = s.dt.deltas_refused;
    t.deltas_queued = s.dt.deltas_queued;
    r.table = t;
  }
  return r;
}

void RegisterVdControl(control::Dispatcher& dispatcher, VdService* vds, const std::string& self) {
  if (vds == nullptr) return;
  dispatcher.Register([vds, self](const control::Request&) -> Result<control::DtReply> {
    return DtStatus(*vds, self);
  });
  dispatcher.Register([vds](const control::Request& q) -> Result<control::ConflictsReply> {
    auto conflicts = ConflictsSync(*vds, q.path);
    if (!conflicts) return Err(conflicts.error().code, q.path + ": " + conflicts.error().ToString());
    control::ConflictsReply r;
    r.path = q.path;
    for (const Conflict& c : *conflicts) {
      control::ConflictRow row;
      row.name = c.name;
      for (const auto& [node, type] : c.copies) row.copies.push_back({node, DirentTypeName(type)});
      r.conflicts.push_back(std::move(row));
    }
    return r;
  });
}

}  // namespace fedfs::ns
