// PendingService (dirops/pending_service.h) over the fake network: n1
// coordinated operations while n3 was dead; its records are copied to n2,
// n3 is told on contact, fetches them from both, applies them in seq order
// to its export root (the world's n3), and each holder erases them. A
// holder that was away while n3 applied tells it again later: n3 does not
// apply them twice. Forget drops a member's records everywhere.
#include "dirops/pending_service.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/executor.h"
#include "dirops/kv_keys.h"
#include "m2m/fake_network.h"
#include "tests/unit/dirops/dir_ops_world.h"

namespace fedfs::ns::dirops_test {
namespace {

using namespace std::chrono_literals;

bool WaitFor(const std::function<bool()>& pred) {
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

PendingOp Op(uint64_t seq, PendingOp::Kind kind, std::string from, std::string to = "") {
  PendingOp op;
  op.seq = op.op_id = seq;
  op.node = "n3";
  op.kind = kind;
  op.from = std::move(from);
  op.to = std::move(to);
  op.coordinator = "n1";
  return op;
}

class PendingServiceTest : public ::testing::Test, public World {
 protected:
  struct Peer {
    std::unique_ptr<m2m::Transport> transport;
    MemKv kv;
    std::unique_ptr<PendingService> service;
    std::vector<std::string> fenced;
    std::vector<std::string> forgotten;
  };

  void SetUp() override {
    for (const char* id : {"n1", "n2", "n3"}) {
      auto& p = peers_[id];
      p = std::make_unique<Peer>();
      p->transport = net_.NewTransport({.cluster_key = m2m::Bytes(32, std::byte{7})});
      Peer* raw = p.get();
      p->service = std::make_unique<PendingService>(
          id, &p->kv, p->transport.get(), [this, id = std::string(id)] { return ViewOf(id); },
          &Node(id), &inline_, PendingServiceOptions{.rpc_timeout = 2s, .retry = 20ms},
          PendingHooks{.fence = [raw](const std::string& n) { raw->fenced.push_back(n); },
                       .applied = [this] { ++applied_hooks_; },
                       .forget = [raw](const std::string& n) { raw->forgotten.push_back(n); }});
      ASSERT_TRUE(p->service->Load());
      p->service->RegisterHandlers();
      ASSERT_TRUE(p->transport->Listen(std::string(id) + ":1"));
    }
  }
  void TearDown() override {
    for (auto& [id, p] : peers_) p->service->Stop();
    for (auto& [id, p] : peers_) p->transport->Shutdown();
  }

  // Every node sees every other alive, except those in dead_.
  std::shared_ptr<const ClusterView> ViewOf(const std::string& self) {
    auto v = std::make_shared<ClusterView>();
    v->self = self;
    std::lock_guard lock(mu_);
    for (const char* n : {"n1", "n2", "n3"}) {
      (dead_.contains(n) ? v->dead : v->live)[n] = std::string(n) + ":1";
    }
    return v;
  }
  void SetDead(std::set<std::string> dead) {
    std::lock_guard lock(mu_);
    dead_ = std::move(dead);
  }
  PendingService& S(const std::string& id) { return *peers_.at(id)->service; }

  m2m::FakeNetwork net_;
  InlineExecutor inline_;
  std::map<std::string, std::unique_ptr<Peer>> peers_;
  std::mutex mu_;
  std::set<std::string> dead_;  // GUARDED_BY(mu_)
  std::atomic<int> applied_hooks_{0};
};

TEST_F(PendingServiceTest, RecordsAreCopiedAppliedInOrderOnceAndErased) {
  MakeFile("n3", "/a/x");
  MakeDir("n3", "/gone");
  SetDead({"n3"});
  // n1's operations, in this order: rename /a -> /b, rename /b -> /c (the
  // order matters), rmdir /gone.
  const std::vector<PendingOp> first{Op(10, PendingOp::Kind::kRename, "/a", "/b")};
  const std::vector<PendingOp> later{Op(20, PendingOp::Kind::kRename, "/b", "/c"),
                                     Op(30, PendingOp::Kind::kRmdir, "/gone")};
  for (const auto& ops : {first, later}) {
    ASSERT_TRUE(S("n1").store().Put(ops));
    S("n1").Replicate(ops);
  }
  EXPECT_EQ(S("n2").store().For("n3").size(), 3u);
  EXPECT_EQ(peers_.at("n2")->fenced, (std::vector<std::string>{"n3", "n3"}));
  EXPECT_EQ(S("n2").stats().put_received, 3u);
  EXPECT_EQ(S("n1").stats().replicated, 3u);

  // n3 returns; a contact makes n1 tell it; it applies and says so.
  SetDead({});
  for (const char* id : {"n1", "n2", "n3"}) S(id).Start();
  S("n1").OnHeldContact("n3");
  ASSERT_TRUE(WaitFor([&] { return !S("n1").store().Holds("n3") && !S("n2").store().Holds("n3"); }));
  EXPECT_FALSE(Exists("n3", "/a"));
  EXPECT_FALSE(Exists("n3", "/b"));
  EXPECT_TRUE(Exists("n3", "/c/x"));
  EXPECT_FALSE(Exists("n3", "/gone"));
  EXPECT_EQ(S("n3").stats().applied, 3u);
  EXPECT_EQ(applied_hooks_.load(), 1);

  // n2 was away meanwhile and still holds an old record: n3 is told again,
  // applies nothing (a new /a there stays), and n2 erases it.
  MakeDir("n3", "/a");
  ASSERT_TRUE(S("n2").store().Put(first));
  EXPECT_TRUE(S("n3").ApplyOwn());
  EXPECT_FALSE(S("n2").store().Holds("n3"));
  EXPECT_TRUE(IsDir("n3", "/a"));
  EXPECT_EQ(S("n3").stats().applied, 3u);
  EXPECT_EQ(applied_hooks_.load(), 1);
}

// After a partition each side may hold the other dead: a member asks (and
// tells) the members it sees dead too, so the holds end.
TEST_F(PendingServiceTest, AMemberAsksThoseItSeesDeadToo) {
  MakeDir("n3", "/q");
  ASSERT_TRUE(S("n1").store().Put({Op(10, PendingOp::Kind::kRmdir, "/q")}));
  SetDead({"n1"});
  ASSERT_TRUE(S("n3").ApplyOwn());
  EXPECT_FALSE(Exists("n3", "/q"));
  EXPECT_FALSE(S("n1").store().Holds("n3"));
}

TEST_F(PendingServiceTest, ForgetDropsTheRecordsEverywhereAndIsRemembered) {
  SetDead({"n3"});
  const std::vector<PendingOp> ops{Op(10, PendingOp::Kind::kRmdir, "/x")};
  ASSERT_TRUE(S("n1").store().Put(ops));
  S("n1").Replicate(ops);
  ASSERT_TRUE(S("n2").store().Holds("n3"));
  EXPECT_EQ(S("n1").Forget("n1").error().code, EINVAL);
  auto dropped = S("n1").Forget("n3");
  ASSERT_TRUE(dropped) << dropped.error().ToString();
  EXPECT_EQ(*dropped, 1u);
  EXPECT_FALSE(S("n1").store().Holds("n3"));
  EXPECT_FALSE(S("n2").store().Holds("n3"));
  EXPECT_EQ(peers_.at("n1")->forgotten, std::vector<std::string>{"n3"});
  EXPECT_EQ(peers_.at("n2")->forgotten, std::vector<std::string>{"n3"});
  EXPECT_EQ(S("n2").Forgotten(), std::set<std::string>{"n3"});
  // Remembered across a restart: a new service over n2's Kv forgets it again.
  std::vector<std::string> again;
  PendingService restarted("n2", &peers_.at("n2")->kv, peers_.at("n2")->transport.get(),
                           [this] { return ViewOf("n2"); }, &Node("n2"), &inline_, {},
                           PendingHooks{.forget = [&](const std::string& n) { again.push_back(n); }});
  ASSERT_TRUE(restarted.Load());
  EXPECT_EQ(again, std::vector<std::string>{"n3"});
  // An alive member cannot be forgotten.
  SetDead({});
  EXPECT_EQ(S("n1").Forget("n2").error().code, EBUSY);
}

}  // namespace
}  // namespace fedfs::ns::dirops_test
