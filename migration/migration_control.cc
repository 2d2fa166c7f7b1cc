#include "migration/migration_control.h"

#include "control/schema.h"

namespace fedfs::ns {

void RegisterMigrationControl(
    control::Dispatcher& dispatcher, Migration* migration,
    std::function<Result<std::vector<std::string>>(const std::string& path)> where,
    std::function<RoomCounts()> room, Migration::RebalanceOptions rebalance,
    std::string node_id) {
  // The one node holding file `path`, or why not.
  auto holder_of = [migration, where = std::move(where)](
                       const std::string& path) -> Result<std::string> {
    if (migration == nullptr) return Err(ENOTSUP, "file moves are off on this node");
    auto holders = where(path);
    if (!holders) return Err(holders.error().code, path + ": " + holders.error().ToString());
    if (holders->size() != 1) {
      return Err(EISDIR, path + ": a directory (held by " + std::to_string(holders->size()) +
                             " nodes); only files are moved");
    }
    return holders->front();
  };
  auto move = [migration, holder_of](const control::Request& q,
                                     bool dry_run) -> Result<control::MigrateReply> {
    auto holder = holder_of(q.path);
    if (!holder) return Err(holder.error());
    auto o = migration->MoveAt(*holder, q.path, q.node, MoveTrigger::kManual, dry_run,
                               q.max_rate);
    if (!o) return Err(o.error().code, q.path + ": " + o.error().ToString());
    control::MigrateReply r;
    r.path = q.path;
    r.from = o->from;
    r.to = o->to;
    r.bytes = o->bytes;
    return r;
  };
  dispatcher.Register([move](const control::Request& q) { return move(q, false); });
  dispatcher.Register([move](const control::Request& q) -> Result<control::MigratePlanReply> {
    auto r = move(q, true);
    if (!r) return Err(r.error());
    control::MigratePlanReply p;
    static_cast<control::MigrateReply&>(p) = std::move(*r);
    return p;
  });
  dispatcher.Register([migration, holder_of](const control::Request& q) -> Result<control::CancelReply> {
    auto holder = holder_of(q.path);
    if (!holder) return Err(holder.error());
    if (auto s = migration->CancelAt(*holder, q.path); !s) {
      return Err(s.error().code, q.path + ": " + s.error().ToString());
    }
    return control::CancelReply{q.path, *holder};
  });
  dispatcher.Register(
      [migration, holder_of](const control::Request& q) -> Result<control::MigrateProgressReply> {
        auto holder = holder_of(q.path);
        if (!holder) return Err(holder.error());
        auto p = migration->ProgressAt(*holder, q.path);
        if (!p) return Err(p.error().code, q.path + ": " + p.error().ToString());
        return control::MigrateProgressReply{q.path, p->from, p->to, p->bytes, p->copied};
      });
  dispatcher.Register([migration, room = std::move(room), node_id = std::move(node_id)](
                          const control::Request&) -> Result<control::MigrationsReply> {
    control::MigrationsReply r;
    r.node = node_id;
    if (room) {
      const RoomCounts c = room();
      r.full_writes = c.writes;
      r.full_creates = c.creates;
    }
    if (migration == nullptr) return r;
    r.enabled = true;
    const Migration::Stats s = migration->stats();
    r.started = s.started;
    r.done = s.done;
    r.undone = s.undone;
    r.failed = s.failed;
    r.bytes = s.bytes;
    r.received = s.received;
    r.deltas = s.deltas;
    r.delta_bytes = s.delta_bytes;
    r.pending = migration->PendingCount();
    const auto& full = s.by_trigger[static_cast<size_t>(MoveTrigger::kFull)];
    r.full_asked = full.asked;
    r.full_done = full.done;
    r.full_failed = full.failed;
    const auto& access = s.by_trigger[static_cast<size_t>(MoveTrigger::kAccess)];
    r.access_asked = access.asked;
    r.access_done = access.done;
    r.access_failed = access.failed;
    return r;
  });
  auto run = [migration, rebalance](bool dry_run,
                                    uint64_t max_rate) -> Result<control::RebalanceReply> {
    if (migration == nullptr) return Err(ENOTSUP, "file moves are off on this node");
    Migration::RebalanceOptions o = rebalance;
    o.dry_run = dry_run;
    o.max_rate = max_rate;
    auto rep = migration->Rebalance(o);
    if (!rep) return Err(rep.error());
    control::RebalanceReply r;
    r.dry_run = dry_run;
    r.threshold = o.threshold;
    r.mean = rep->plan.mean;
    for (const NodeUsage& u : rep->before) {
      control::UsageRow row{u.node, u.used, u.total, u.share(), u.share()};
      for (const NodeUsage& a : rep->plan.after) {
        if (a.node == u.node) row.after = a.share();
      }
      r.nodes.push_back(std::move(row));
    }
    for (size_t i = 0; i < rep->plan.moves.size(); ++i) {
      const PlannedMove& m = rep->plan.moves[i];
      control::RebalanceMove mv{m.path, m.from, m.to, m.bytes, false, ""};
      if (i < rep->errors.size()) {
        mv.error = rep->errors[i];
        mv.done = mv.error.empty();
        (mv.done ? r.moved : r.failed)++;
      }
      r.moves.push_back(std::move(mv));
    }
    return r;
  };
  dispatcher.Register([run](const control::Request& q) { return run(false, q.max_rate); });
  dispatcher.Register([run](const control::Request&) -> Result<control::RebalancePlanReply> {
    auto r = run(true, 0);
    if (!r) return Err(r.error());
    control::RebalancePlanReply p;
    static_cast<control::RebalanceReply&>(p) = std::move(*r);
    return p;
  });
}

}  // namespace fedfs::ns
