// Ring: balance, minimal movement on removal, determinism. Pure logic.
#include "cluster/ring.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace fedfs::daemon {
namespace {

std::vector<std::string> Nodes(int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back("node-" + std::to_string(i));
  return v;
}

std::string PathN(int i) { return "/dir" + std::to_string(i % 97) + "/file" + std::to_string(i); }

TEST(Ring, EmptyRingHasNoOwner) {
  Ring r({}, 256);
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.Owner("/a"), "");
  EXPECT_EQ(r.Share("x"), 0.0);
}

TEST(Ring, SingleMemberOwnsEverything) {
  Ring r({"a"}, 256);
  EXPECT_EQ(r.Owner("/x/y"), "a");
  EXPECT_DOUBLE_EQ(r.Share("a"), 1.0);
  Ring one({"a"}, 1);
  EXPECT_DOUBLE_EQ(one.Share("a"), 1.0);
}

TEST(Ring, SixteenNodesShareWithin25Percent) {
  Ring r(Nodes(16), 256);
  double sum = 0;
  for (const auto& n : Nodes(16)) {
    const double s = r.Share(n);
    sum += s;
    EXPECT_GT(s, 0.75 / 16) << n;
    EXPECT_LT(s, 1.25 / 16) << n;
  }
  EXPECT_NEAR(sum, 1.0, 1e-9);
}

TEST(Ring, PathDistributionMatchesShares) {
  Ring r(Nodes(16), 256);
  std::map<std::string, int> count;
  constexpr int kPaths = 100000;
  for (int i = 0; i < kPaths; ++i) ++count[r.Owner(PathN(i))];
  for (const auto& n : Nodes(16)) {
    EXPECT_NEAR(count[n] / double(kPaths), r.Share(n), 0.01) << n;
  }
}

TEST(Ring, RemovingANodeMovesOnlyItsPaths) {
  const auto all = Nodes(16);
  Ring before(all, 256);
  for (const std::string& removed : {all[0], all[7], all[15]}) {
    std::vector<std::string> rest;
    for (const auto& n : all) {
      if (n != removed) rest.push_back(n);
    }
    Ring after(rest, 256);
    int owned = 0, moved = 0;
    for (int i = 0; i < 100000; ++i) {
      const std::string p = PathN(i);
      const std::string& b = before.Owner(p);
      const std::string& a = after.Owner(p);
      if (b == removed) ++owned;
      if (a != b) {
        ++moved;
        ASSERT_EQ(b, removed) << p << " moved from " << b << " to " << a;
      }
      ASSERT_NE(a, removed);
    }
    EXPECT_EQ(moved, owned) << removed;
    EXPECT_GT(owned, 0);
  }
}

TEST(Ring, AddingANodeMovesPathsOnlyToIt) {
  Ring before(Nodes(15), 256);
  Ring after(Nodes(16), 256);
  constexpr int kPaths = 20000;
  int moved = 0, owned = 0;
  for (int i = 0; i < kPaths; ++i) {
    const std::string p = PathN(i);
    if (after.Owner(p) == "node-15") ++owned;
    if (before.Owner(p) != after.Owner(p)) {
      ++moved;
      ASSERT_EQ(after.Owner(p), "node-15") << p;
    }
  }
  // Exactly the new node's paths moved (all of them were someone else's),
  // and they are its share of the paths.
  EXPECT_GT(moved, 0);
  EXPECT_EQ(moved, owned);
  EXPECT_NEAR(moved / double(kPaths), after.Share("node-15"), 0.01);
}

TEST(Ring, DeterministicAndOrderIndependent) {
  auto nodes = Nodes(8);
  Ring a(nodes, 64);
  std::reverse(nodes.begin(), nodes.end());
  nodes.push_back(nodes[0]);  // duplicates are ignored
  Ring b(nodes, 64);
  EXPECT_EQ(a.members(), b.members());
  for (int i = 0; i < 5000; ++i) ASSERT_EQ(a.Owner(PathN(i)), b.Owner(PathN(i)));
  for (const auto& n : a.members()) EXPECT_DOUBLE_EQ(a.Share(n), b.Share(n));
  // Pinned values: the ring must give the same answers on every build and
  // machine (the hash is fixed and seeded). Update only with a migration plan.
  Ring pinned({"a", "b", "c"}, 256);
  EXPECT_EQ(pinned.Owner("/"), "a");
  EXPECT_EQ(pinned.Owner("/home/user"), "b");
  EXPECT_EQ(pinned.Owner("/a/b/c"), "a");
  EXPECT_NEAR(pinned.Share("a"), 0.337431, 1e-6);
}

}  // namespace
}  // namespace fedfs::daemon
