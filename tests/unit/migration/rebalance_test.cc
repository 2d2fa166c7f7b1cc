// The rebalance planner (migration/rebalance.h), table-driven: no I/O.
#include "migration/rebalance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace fedfs::ns {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string Moves(const RebalancePlan& p) {
  std::string s;
  for (const PlannedMove& m : p.moves) {
    s += (s.empty() ? "" : " ") + m.path + ":" + m.from + ">" + m.to;
  }
  return s;
}

double MaxDeviation(const RebalancePlan& p) {
  double d = 0;
  for (const NodeUsage& u : p.after) d = std::max(d, std::abs(u.share() - p.mean));
  return d;
}

struct Case {
  const char* name;
  std::vector<NodeUsage> usage;
  std::vector<RebalanceCandidate> files;
  double threshold;
  std::string moves;  // expected, in order
};

TEST(Rebalance, PlansBiggestFirstToTheEmptiestNodeUntilWithinTheThreshold) {
  const std::vector<Case> cases = {
      {"balanced already: nothing",
       {{"a", 10 * kMiB, 100 * kMiB}, {"b", 12 * kMiB, 100 * kMiB}},
       {{"a", "/x", 5 * kMiB}},
       0.05,
       ""},
      {"skewed: biggest first, each to the emptiest",
       {{"a", 24 * kMiB, 64 * kMiB}, {"b", 0, 64 * kMiB}, {"c", 0, 64 * kMiB}},
       {{"a", "/f1", 1 * kMiB}, {"a", "/f8", 8 * kMiB}, {"a", "/f6", 6 * kMiB},
        {"a", "/f4", 4 * kMiB}},
       0.05,
       "/f8:a>b /f6:a>c"},
      {"a file that would overshoot the target is skipped for a smaller one",
       {{"a", 60 * kMiB, 100 * kMiB}, {"b", 20 * kMiB, 100 * kMiB}},
       {{"a", "/huge", 40 * kMiB}, {"a", "/mid", 18 * kMiB}, {"a", "/small", 3 * kMiB}},
       0.05,
       "/mid:a>b"},
      {"no candidate helps: nothing",
       {{"a", 90 * kMiB, 100 * kMiB}, {"b", 0, 100 * kMiB}},
       {{"a", "/tiny", 0}},
       0.05,
       ""},
      {"shares, not bytes: a small node is full sooner",
       {{"big", 100 * kMiB, 1000 * kMiB}, {"small", 50 * kMiB, 100 * kMiB}},
       {{"small", "/s20", 20 * kMiB}, {"small", "/s10", 10 * kMiB}, {"big", "/b", 30 * kMiB}},
       0.05,
       "/s20:small>big /s10:small>big"},
      {"nodes of size 0 are left out",
       {{"a", 30 * kMiB, 100 * kMiB}, {"gone", 0, 0}, {"b", 0, 100 * kMiB}},
       {{"a", "/f", 15 * kMiB}},
       0.05,
       "/f:a>b"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const RebalancePlan p = PlanRebalance(k.usage, k.files, k.threshold);
    EXPECT_EQ(Moves(p), k.moves);
    if (!k.moves.empty()) {
      // Every plan lowers the largest deviation from the mean.
      const RebalancePlan none = PlanRebalance(k.usage, {}, k.threshold);
      EXPECT_LT(MaxDeviation(p), MaxDeviation(none));
    }
  }
}

TEST(Rebalance, ProjectedUsageIsTheUsageMinusAndPlusEachMove) {
  const RebalancePlan p = PlanRebalance(
      {{"a", 24 * kMiB, 64 * kMiB}, {"b", 0, 64 * kMiB}, {"c", 0, 64 * kMiB}},
      {{"a", "/f8", 8 * kMiB}, {"a", "/f6", 6 * kMiB}}, 0.05);
  ASSERT_EQ(p.after.size(), 3u);
  EXPECT_EQ(p.after[0].used, 10 * kMiB);
  EXPECT_EQ(p.after[1].used, 8 * kMiB);
  EXPECT_EQ(p.after[2].used, 6 * kMiB);
  EXPECT_DOUBLE_EQ(p.mean, 24.0 / 192.0);
  for (const NodeUsage& u : p.after) EXPECT_LE(std::abs(u.share() - p.mean), 0.05) << u.node;
}

}  // namespace
}  // namespace fedfs::ns
