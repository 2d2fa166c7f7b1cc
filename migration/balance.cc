// Migration (migration.h): rebalance, run at the node asked (J), and the
// answer of each node to kMigLargest (its largest files).
#include <dirent.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <queue>

#include "common/logging.h"
#include "common/path.h"
#include "common/rpc_methods.h"
#include "migration/migration.h"
#include "migration/migration_internal.h"

namespace fedfs::ns {

namespace {

std::shared_ptr<spdlog::logger> Log() { return Logger("migration"); }

using Sized = std::pair<std::string, uint64_t>;

}  // namespace

std::vector<Sized> Migration::Largest(size_t count, uint64_t min_size) {
  count = std::min(count, kMaxLargest);
  // A min-heap of the `count` largest seen so far.
  auto smaller = [](const Sized& a, const Sized& b) { return a.second > b.second; };
  std::priority_queue<Sized, std::vector<Sized>, decltype(smaller)> best(smaller);
  std::vector<std::string> dirs{"/"};
  while (!dirs.empty() && count > 0) {
    const std::string dir = std::move(dirs.back());
    dirs.pop_back();
    auto entries = local_->ListDir(Cred{}, dir);
    if (!entries) continue;  // gone meanwhile, or unreadable: skipped
    for (const DirEntry& e : *entries) {
      const std::string path = JoinPath(dir, e.name);
      if (e.type == DT_DIR) {
        dirs.push_back(path);
        continue;
      }
      if (e.type != DT_REG) continue;
      auto st = local_->Stat(Cred{}, path);
      if (!st || !S_ISREG(st->st_mode) || st->st_nlink != 1) continue;
      const auto size = static_cast<uint64_t>(st->st_size);
      if (size < min_size) continue;
      if (best.size() == count && best.top().second >= size) continue;
      {
        std::lock_guard lock(mu_);
        if (busy_.contains(path)) continue;
      }
      best.emplace(path, size);
      if (best.size() > count) best.pop();
    }
  }
  std::vector<Sized> out;
  while (!best.empty()) {
    out.push_back(best.top());
    best.pop();
  }
  std::reverse(out.begin(), out.end());
  return out;
}

void Migration::OnLargest(m2m::IncomingCall call, m2m::Responder r) {
  auto m = DecodeMsg(call.payload);
  if (!m) {
    Log()->warn("refused kMigLargest from {}: {}", call.peer.remote_addr, m.error().ToString());
    return r.Fail(Error{EPROTO, m.error().context});
  }
  auto shared = std::make_shared<m2m::Responder>(std::move(r));
  // A walk of the export root: off the transport's thread.
  Spawn([this, count = m->bytes, min_size = m->size, shared] {
    MoveMsg a;
    a.from = node_id_;
    a.files = Largest(static_cast<size_t>(std::min<uint64_t>(count, kMaxLargest)), min_size);
    shared->Reply(EncodeMsg(a));
  });
}

Result<Migration::RebalanceReport> Migration::Rebalance(const RebalanceOptions& o) {
  if (!(o.threshold >= 0 && o.threshold < 1)) return Err(EINVAL, "threshold must be in [0, 1)");
  auto view = view_();
  std::vector<std::string> nodes{node_id_};
  for (const auto& [id, addr] : view->live) {
    if (id != node_id_) nodes.push_back(id);
  }
  RebalanceReport report;
  for (const std::string& n : nodes) {
    NodeFs* fs = n == node_id_ ? local_ : (fs_for_ ? fs_for_(n) : nullptr);
    if (fs == nullptr) return Err(EHOSTDOWN, "no way to reach " + n);
    auto st = fs->StatFs();
    if (!st) return Err(st.error().code, "usage of " + n + ": " + st.error().ToString());
    const uint64_t unit = st->f_frsize != 0 ? st->f_frsize : st->f_bsize;
    const uint64_t total = static_cast<uint64_t>(st->f_blocks) * unit;
    const uint64_t free = static_cast<uint64_t>(st->f_bfree) * unit;
    report.before.push_back(NodeUsage{n, total > free ? total - free : 0, total});
  }
  const RebalancePlan none = PlanRebalance(report.before, {}, o.threshold);
  std::vector<RebalanceCandidate> candidates;
  for (const NodeUsage& u : report.before) {
    if (u.share() <= none.mean + o.threshold) continue;
    std::vector<Sized> files;
    if (u.node == node_id_) {
      files = Largest(o.per_node, o.min_size);
    } else {
      MoveMsg ask;
      ask.from = node_id_;
      ask.bytes = o.per_node;
      ask.size = o.min_size;
      auto a = Call(u.node, MethodId(RpcMethod::kMigLargest), EncodeMsg(ask), options_.copy_timeout);
      if (!a) return Err(a.error().code, "largest files of " + u.node + ": " + a.error().ToString());
      auto m = DecodeMsg(*a);
      if (!m) return Err(m.error());
      files = std::move(m->files);
    }
    for (auto& [path, size] : files) candidates.push_back({u.node, std::move(path), size});
  }
  report.plan = PlanRebalance(report.before, std::move(candidates), o.threshold);
  if (o.dry_run) return report;
  for (const PlannedMove& mv : report.plan.moves) {
    auto r = MoveAt(mv.from, mv.path, mv.to, MoveTrigger::kRebalance, false, o.max_rate);
    report.errors.push_back(r ? std::string() : r.error().ToString());
    if (!r) Log()->info("rebalance: {} from {} to {}: {}", mv.path, mv.from, mv.to, r.error().ToString());
  }
  return report;
}

}  // namespace fedfs::ns
