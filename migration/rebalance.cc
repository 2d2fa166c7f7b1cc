// The rebalance planner (rebalance.h).
#include "migration/rebalance.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace fedfs::ns {

namespace {

double Share(uint64_t used, uint64_t total) {
  return total == 0 ? 0 : static_cast<double>(used) / static_cast<double>(total);
}

}  // namespace

RebalancePlan PlanRebalance(std::vector<NodeUsage> usage,
                            std::vector<RebalanceCandidate> candidates, double threshold) {
  RebalancePlan plan;
  std::erase_if(usage, [](const NodeUsage& u) { return u.total == 0; });
  uint64_t used = 0, total = 0;
  for (const NodeUsage& u : usage) {
    used += u.used;
    total += u.total;
  }
  plan.mean = Share(used, total);
  std::map<std::string, NodeUsage*> by_node;
  for (NodeUsage& u : usage) by_node[u.node] = &u;
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const RebalanceCandidate& a, const RebalanceCandidate& b) {
                     return a.size > b.size;
                   });
  const double high = plan.mean + threshold;
  auto within = [&] {
    return std::all_of(usage.begin(), usage.end(), [&](const NodeUsage& u) {
      return std::abs(u.share() - plan.mean) <= threshold;
    });
  };
  for (const RebalanceCandidate& c : candidates) {
    if (within()) break;
    auto from_it = by_node.find(c.node);
    if (from_it == by_node.end() || c.size == 0) continue;
    NodeUsage& from = *from_it->second;
    if (from.share() <= high || c.size > from.used) continue;
    NodeUsage* to = nullptr;
    for (NodeUsage& u : usage) {
      if (u.node != from.node && (to == nullptr || u.share() < to->share())) to = &u;
    }
    if (to == nullptr) break;
    const double from_after = Share(from.used - c.size, from.total);
    const double to_after = Share(to->used + c.size, to->total);
    if (to_after > high) continue;
    const double before = std::max(std::abs(from.share() - plan.mean), std::abs(to->share() - plan.mean));
    const double after = std::max(std::abs(from_after - plan.mean), std::abs(to_after - plan.mean));
    if (after >= before) continue;
    from.used -= c.size;
    to->used += c.size;
    plan.moves.push_back(PlannedMove{c.path, from.node, to->node, c.size});
  }
  plan.after = std::move(usage);
  return plan;
}

}  // namespace fedfs::ns
