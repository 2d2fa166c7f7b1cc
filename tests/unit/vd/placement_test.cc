// Placement of new files (vd/placement.h): table-driven, no fakes.
#include "vd/placement.h"

#include <gtest/gtest.h>

#include <memory>

namespace fedfs::ns {
namespace {

ClusterView View(const std::string& self, std::vector<std::string> live,
                 std::vector<std::string> dead = {}) {
  ClusterView v;
  v.self = self;
  v.epoch = 1;
  for (auto& n : live) v.live[n] = n + ":1";
  for (auto& n : dead) v.dead[n] = n + ":1";
  v.ring = std::make_shared<const Ring>(live, 64);
  return v;
}

TEST(Placement, Table) {
  const ClusterView view = View("n1", {"n1", "n2", "n3"}, {"n4"});
  const std::map<std::string, uint64_t> free = {{"n1", 10}, {"n2", 30}, {"n3", 30}, {"n4", 99}};
  PlacementOptions opts;
  opts.policy = "local";
  opts.rules = {
      {"/hashed", "hash", ""},
      {"/big", "most-free", ""},
      {"/pinned", "", "n3"},
      {"/pinned/dead", "node", "n4"},
      {"/pinned/dead/local", "local", ""},
      {"/ab", "", "n2"},
  };
  struct Case {
    std::string path;
    std::string want;  // node, or "" with an errno
    int error = 0;
  };
  const std::vector<Case> cases = {
      {"/x", "n1"},                            // default policy: local
      {"/hashed/f", view.ring->Owner("/hashed/f")},
      {"/hashed", view.ring->Owner("/hashed")},
      {"/big/file", "n2"},                     // most free; tie n2/n3 -> smallest id
      {"/pinned/f", "n3"},
      {"/pinned/dead/f", "", EHOSTDOWN},       // fixed node not alive
      {"/pinned/dead/local/f", "n1"},          // longest prefix wins
      {"/pinnedx/f", "n1"},                    // prefixes match whole components
      {"/ab/c", "n2"},
      {"/abc", "n1"},
      {"bad", "", EINVAL},
      {"/a//b", "", EINVAL},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    auto got = ChoosePlacement(opts, view, c.path, free);
    if (c.error != 0) {
      ASSERT_FALSE(got);
      EXPECT_EQ(got.error().code, c.error);
    } else {
      ASSERT_TRUE(got) << got.error().ToString();
      EXPECT_EQ(*got, c.want);
    }
  }
}

TEST(Placement, DefaultPolicies) {
  const ClusterView view = View("n2", {"n1", "n2", "n3"});
  struct Case {
    std::string policy;
    std::map<std::string, uint64_t> free;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"local", {}, "n2"},
      {"hash", {}, view.ring->Owner("/d/f")},
      {"most-free", {{"n1", 5}, {"n2", 1}, {"n3", 7}}, "n3"},
      {"most-free", {{"n1", 5}, {"n3", 5}}, "n1"},      // tie: smallest id
      {"most-free", {}, "n1"},                          // no figures: all 0, smallest id
      {"most-free", {{"n9", 1000}, {"n2", 1}}, "n2"},   // a non-member's figure is ignored
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.policy);
    PlacementOptions o;
    o.policy = c.policy;
    auto got = ChoosePlacement(o, view, "/d/f", c.free);
    ASSERT_TRUE(got) << got.error().ToString();
    EXPECT_EQ(*got, c.want);
  }
}

TEST(Placement, RootRuleCoversEverything) {
  const ClusterView view = View("n1", {"n1", "n2"});
  PlacementOptions o;
  o.rules = {{"/", "", "n2"}};
  auto got = ChoosePlacement(o, view, "/any/where", {});
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, "n2");
}

TEST(Placement, Validation) {
  struct Case {
    PlacementOptions o;
    bool ok;
  };
  auto rules = [](std::vector<PlacementRule> r) {
    PlacementOptions o;
    o.rules = std::move(r);
    return o;
  };
  PlacementOptions bad_default;
  bad_default.policy = "random";
  const std::vector<Case> cases = {
      {PlacementOptions{}, true},
      {bad_default, false},
      {rules({{"/a", "hash", ""}, {"/a/b", "", "n1"}, {"/c", "node", "n2"}}), true},
      {rules({{"/a", "fastest", ""}}), false},     // unknown policy
      {rules({{"a", "hash", ""}}), false},         // prefix not a global path
      {rules({{"/a/", "hash", ""}}), false},
      {rules({{"/a", "hash", "n1"}}), false},      // policy and node both
      {rules({{"/a", "node", ""}}), false},        // node policy without node
      {rules({{"/a", "hash", ""}, {"/a", "local", ""}}), false},  // duplicate prefix
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(ValidatePlacementOptions(cases[i].o).has_value(), cases[i].ok);
  }
  const ClusterView view = View("n1", {"n1"});
  auto got = ChoosePlacement(bad_default, view, "/x", {});
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, EINVAL);
}

TEST(Placement, NoLiveNode) {
  ClusterView view = View("n1", {});
  PlacementOptions o;
  auto got = ChoosePlacement(o, view, "/x", {});
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, EHOSTDOWN);
}

}  // namespace
}  // namespace fedfs::ns
