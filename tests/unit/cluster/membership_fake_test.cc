// Membership over the in-process fake network (real-time mode): join,
// failure detection, partitions (hearsay never resurrects a member), rejoin
// with a new incarnation; node tags travel, and a duplicate tag is refused.
// Short protocol timeouts; waits are polls for a condition, bounded only
// against hangs (60 s). "Still so later" is checked after a number of the
// node's own heartbeat rounds, not after a sleep.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "cluster/membership.h"
#include "common/rpc_methods.h"
#include "m2m/fake_network.h"
#include "tests/tools/log_capture.h"

namespace fedfs::daemon {
namespace {

using namespace std::chrono_literals;

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 60s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

class FakeFederation : public ::testing::Test {
 protected:
  struct Node {
    std::unique_ptr<m2m::Transport> transport;
    std::unique_ptr<Membership> membership;
  };

  static std::string Addr(int i) { return "n" + std::to_string(i) + ":7000"; }

  void StartNode(int i, std::vector<std::string> seeds, uint16_t tag = 0,
                 const std::function<void(Membership&)>& before_start = {}) {
    Node n;
    n.transport = net_.NewTransport({.cluster_key = m2m::Bytes(32, std::byte{7})});
    MembershipOptions o;
    o.node_id = "n" + std::to_string(i);
    o.advertise_addr = Addr(i);
    o.seeds = std::move(seeds);
    o.heartbeat_interval = 20ms;
    o.failure_timeout = 200ms;
    o.rpc_timeout = 200ms;
    o.join_backoff_max = 200ms;
    o.ring.vnodes = 32;
    o.node_tag = tag;
    n.membership = std::make_unique<Membership>(o, n.transport.get());
    n.membership->RegisterHandlers();
    if (before_start) before_start(*n.membership);
    ASSERT_TRUE(n.transport->Listen(Addr(i)));
    n.membership->Start();
    nodes_[i] = std::move(n);
  }

  void StopNode(int i) {
    auto& n = nodes_.at(i);
    n.membership->Stop();
    n.transport->Shutdown();
    nodes_.erase(i);
  }

  void TearDown() override {
    for (auto& [i, n] : nodes_) n.membership->Stop();
    for (auto& [i, n] : nodes_) n.transport->Shutdown();
    nodes_.clear();
  }

  std::string State(int at, int of) {
    auto v = nodes_.at(at).membership->Snapshot();
    auto it = v->members.find("n" + std::to_string(of));
    return it == v->members.end() ? "absent" : MemberStateName(it->second.state);
  }
  size_t Alive(int at) {
    auto v = nodes_.at(at).membership->Snapshot();
    size_t n = 0;
    for (const auto& [id, m] : v->members) n += m.state == MemberState::kAlive;
    return n;
  }
  uint64_t Epoch(int at) { return nodes_.at(at).membership->Snapshot()->epoch; }
  uint64_t HeartbeatsSent(int i) {
    return net_.Stats(Addr(i)).per_method[MethodId(RpcMethod::kMemberHeartbeat)].requests;
  }
  // Waits until each node in `at` has run at least `rounds` more heartbeat
  // rounds (a round sends at most one heartbeat to each other member it
  // knows, so rounds x (members - 1) heartbeats mean that many rounds).
  bool WaitRounds(std::vector<int> at, uint64_t rounds) {
    std::map<int, uint64_t> need;
    for (int i : at) {
      const uint64_t others = nodes_.at(i).membership->Snapshot()->members.size() - 1;
      need[i] = HeartbeatsSent(i) + rounds * std::max<uint64_t>(others, 1);
    }
    return WaitFor([&] {
      for (const auto& [i, n] : need) {
        if (HeartbeatsSent(i) < n) return false;
      }
      return true;
    });
  }

  m2m::FakeNetwork net_;
  std::map<int, Node> nodes_;
};

TEST_F(FakeFederation, JoinFailPartitionRejoin) {
  StartNode(1, {});
  StartNode(2, {Addr(1)});
  StartNode(3, {Addr(2)});
  StartNode(4, {"nobody:1", Addr(3)});  // a dead seed first
  for (int i = 1; i <= 4; ++i) ASSERT_TRUE(WaitFor([&] { return Alive(i) == 4; })) << i;
  // Same ring everywhere.
  for (int i = 2; i <= 4; ++i) {
    auto a = nodes_.at(1).membership->Snapshot()->ring;
    auto b = nodes_.at(i).membership->Snapshot()->ring;
    for (const char* p : {"/a", "/b/c", "/d"}) EXPECT_EQ(a->Owner(p), b->Owner(p));
  }

  // Kill n4: everyone marks it dead; epochs converge upward.
  const uint64_t e0 = Epoch(1);
  ASSERT_TRUE(net_.Kill(Addr(4)));
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(WaitFor([&] { return State(i, 4) == "dead"; })) << i;
  EXPECT_GT(Epoch(1), e0);
  EXPECT_EQ(nodes_.at(1).membership->Snapshot()->ring->Share("n4"), 0.0);
  ASSERT_TRUE(net_.Revive(Addr(4)));
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(WaitFor([&] { return State(i, 4) == "alive"; })) << i;

  // Partition n1 <-> n2: each marks the other dead although n3 (which sees
  // both) keeps gossiping them as alive: hearsay never resurrects.
  net_.Partition(Addr(1), Addr(2));
  ASSERT_TRUE(WaitFor([&] { return State(1, 2) == "dead" && State(2, 1) == "dead"; }));
  ASSERT_TRUE(WaitRounds({1, 2, 3}, 10));
  EXPECT_EQ(State(1, 2), "dead");
  EXPECT_EQ(State(2, 1), "dead");
  EXPECT_EQ(State(3, 1), "alive");
  EXPECT_EQ(State(3, 2), "alive");
  net_.HealAll();
  ASSERT_TRUE(WaitFor([&] { return State(1, 2) == "alive" && State(2, 1) == "alive"; }));

  // Restart n3 (new transport on the same address, new incarnation).
  const uint64_t inc = nodes_.at(3).membership->incarnation();
  const uint64_t e1 = std::max(Epoch(1), Epoch(2));
  StopNode(3);
  for (int i : {1, 2, 4}) ASSERT_TRUE(WaitFor([&] { return State(i, 3) == "dead"; })) << i;
  std::this_thread::sleep_for(2ms);  // the incarnation's clock part moves on
  StartNode(3, {Addr(1)});
  EXPECT_GT(nodes_.at(3).membership->incarnation(), inc);
  for (int i = 1; i <= 4; ++i) ASSERT_TRUE(WaitFor([&] { return Alive(i) == 4; })) << i;
  for (int i = 1; i <= 4; ++i) EXPECT_GT(Epoch(i), e1) << i;
}

// SetDeadHold/Fence (dirops/pending_service.h, "The fence"): n1 holds n3
// dead while it holds records for it, whatever n3 and n2 say, and tells of
// each contact; released, n3 is alive again at n1. Forget: n3 leaves n1's
// view for good, although n2 still reports it alive.
TEST_F(FakeFederation, HeldMembersStayDeadAndForgottenOnesLeave) {
  std::atomic<bool> held{false};
  std::atomic<int> contacts{0};
  StartNode(1, {}, 0, [&](Membership& m) {
    m.SetDeadHold([&](const std::string& id) { return held && id == "n3"; },
                  [&](const std::string& id) {
                    if (id == "n3") ++contacts;
                  });
  });
  StartNode(2, {Addr(1)});
  StartNode(3, {Addr(1)});
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(WaitFor([&] { return Alive(i) == 3; })) << i;
  held = true;
  nodes_.at(1).membership->Fence("n3");
  ASSERT_TRUE(WaitFor([&] { return State(1, 3) == "dead"; }));
  ASSERT_TRUE(WaitRounds({1, 3}, 10));
  EXPECT_EQ(State(1, 3), "dead");
  EXPECT_EQ(State(2, 3), "alive");
  EXPECT_GT(contacts.load(), 0);
  held = false;
  ASSERT_TRUE(WaitFor([&] { return State(1, 3) == "alive"; }));

  nodes_.at(1).membership->Forget("n3");
  ASSERT_TRUE(WaitFor([&] { return State(1, 3) == "absent"; }));
  ASSERT_TRUE(WaitRounds({1, 2}, 10));
  EXPECT_EQ(State(1, 3), "absent");
  EXPECT_EQ(State(2, 3), "alive");
}

TEST_F(FakeFederation, EveryMemberLearnsEveryTag) {
  StartNode(1, {}, 11);
  StartNode(2, {Addr(1)}, 12);
  StartNode(3, {Addr(2)}, 13);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(WaitFor([&] { return Alive(i) == 3; })) << i;
  for (int at = 1; at <= 3; ++at) {
    const Membership& m = *nodes_.at(at).membership;
    for (int of = 1; of <= 3; ++of) {
      // n3 learned n1 by hearsay only at first: the tag comes with the view.
      EXPECT_TRUE(WaitFor([&] { return m.TagOf("n" + std::to_string(of)) == 10 + of; }))
          << "n" << at << " about n" << of;
      EXPECT_EQ(m.Snapshot()->members.at("n" + std::to_string(of)).tag, 10 + of);
    }
    EXPECT_EQ(m.TagOf("nobody"), 0);
  }
}

// The later of two nodes with one tag is refused by the seed it joins
// through (EEXIST, an error naming both), and stays out of every view.
TEST_F(FakeFederation, DuplicateTagJoinerIsRefused) {
  auto& log = fedfs::testing::LogCapture::For("member");
  const size_t mark = log.Mark();
  StartNode(1, {}, 5);
  StartNode(2, {Addr(1)}, 6);
  for (int i = 1; i <= 2; ++i) ASSERT_TRUE(WaitFor([&] { return Alive(i) == 2; })) << i;
  std::this_thread::sleep_for(2ms);  // n3 starts strictly later
  StartNode(3, {Addr(2)}, 5);
  ASSERT_TRUE(WaitFor([&] {
    return log.Contains("refused n3", mark) && log.Contains("join through " + Addr(2) + " refused", mark);
  })) << "no refusal logged";
  EXPECT_TRUE(log.Contains("node tag 5 is already used by n1", mark));
  // Ten heartbeat rounds of the members later (n3, alone, sends none), still apart.
  ASSERT_TRUE(WaitRounds({1, 2}, 10));
  EXPECT_EQ(State(1, 3), "absent");
  EXPECT_EQ(State(2, 3), "absent");
  EXPECT_EQ(Alive(1), 2u);
  EXPECT_EQ(Alive(2), 2u);
  EXPECT_EQ(Alive(3), 1u);
  EXPECT_EQ(nodes_.at(2).membership->TagOf("n1"), 5);
}

// A node that started later but was admitted first (the holder was cut off)
// is removed from the view when the earlier holder of its tag shows up.
TEST_F(FakeFederation, EarlierHolderOfATagWins) {
  auto& log = fedfs::testing::LogCapture::For("member");
  const size_t mark = log.Mark();
  StartNode(2, {}, 6);
  net_.Partition(Addr(1), Addr(2));
  StartNode(1, {Addr(2)}, 5);  // cannot reach its seed yet
  std::this_thread::sleep_for(2ms);
  StartNode(3, {Addr(2)}, 5);  // same tag, started later, admitted by n2
  ASSERT_TRUE(WaitFor([&] { return State(2, 3) == "alive"; }));
  net_.HealAll();
  ASSERT_TRUE(WaitFor([&] { return State(2, 1) == "alive" && State(2, 3) == "absent"; }))
      << "n2 sees n1 " << State(2, 1) << ", n3 " << State(2, 3);
  EXPECT_TRUE(log.Contains("node tag 5 is used by both n1", mark));
  ASSERT_TRUE(WaitRounds({1, 2}, 10));
  EXPECT_EQ(State(2, 3), "absent");
  EXPECT_NE(State(1, 3), "alive");
  EXPECT_EQ(Alive(1), 2u);
}

}  // namespace
}  // namespace fedfs::daemon
