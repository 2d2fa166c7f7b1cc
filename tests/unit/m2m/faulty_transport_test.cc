// m2m::FaultyTransport (m2m/faulty_transport.h): with no faults it passes the
// transport contract suite unchanged; lost requests and lost replies fail the
// call with ECONNRESET (a lost reply after the peer acted); delays let replies
// overtake each other; the spec parser takes what docs/faults.md shows and
// refuses the rest. Over the fake network in real-time mode.
#include "m2m/faulty_transport.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "m2m/auth.h"
#include "m2m/fake_network.h"
#include "tests/unit/m2m/transport_contract.h"

namespace fedfs::m2m::testing {
namespace {

FakeNetworkOptions RealTime() {
  FakeNetworkOptions o;
  o.mode = SchedulerMode::kRealTime;
  o.seed = 7;
  o.link = LinkModel::Zero();
  return o;
}

class FaultyContractEnv final : public ContractEnv {
 public:
  FaultyContractEnv() : net_(RealTime()) {}
  std::unique_ptr<Transport> NewTransport(const Bytes& cluster_key) override {
    TransportOptions o;
    o.cluster_key = cluster_key;
    return std::make_unique<FaultyTransport>(net_.NewTransport(o), FaultSpec{});
  }
  std::string ListenAddress() override { return "fake:0"; }
  void Kill(Transport&, const std::string& addr) override { ASSERT_TRUE(net_.Kill(addr)); }

 private:
  FakeNetwork net_;
};

INSTANTIATE_TEST_SUITE_P(
    Faulty, TransportContract,
    ::testing::Values(ContractEnvFactory{"FaultyWithoutFaults",
                                         [] { return std::make_unique<FaultyContractEnv>(); }}),
    ContractEnvName);

constexpr uint16_t kEcho = 1;

class FaultyTransportTest : public ::testing::Test {
 protected:
  void Start(FaultSpec spec) {
    TransportOptions o;
    o.cluster_key = Bytes(kClusterKeyBytes, std::byte{9});
    server_ = net_.NewTransport(o);
    server_->Handle(kEcho, [this](IncomingCall c, Responder r) {
      served_.fetch_add(1);
      r.Reply(std::move(c.payload));
    });
    auto a = server_->Listen("server:0");
    ASSERT_TRUE(a);
    addr_ = *a;
    auto faulty = std::make_unique<FaultyTransport>(net_.NewTransport(o), spec);
    faulty_ = faulty.get();
    client_ = std::move(faulty);
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    if (server_) server_->Shutdown();
  }

  FakeNetwork net_{RealTime()};
  std::unique_ptr<Transport> server_, client_;
  FaultyTransport* faulty_ = nullptr;
  std::string addr_;
  std::atomic<int> served_{0};
};

TEST_F(FaultyTransportTest, LostRequestsAndRepliesFailWithETimedOut) {
  FaultSpec s;
  s.drop = 1;
  Start(s);
  auto ep = client_->GetEndpoint(addr_);
  constexpr int kCalls = 40;
  for (int i = 0; i < kCalls; ++i) {
    auto r = CallSync(*ep, kEcho, Bytes{std::byte{1}}, std::chrono::seconds(5));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ECONNRESET);
  }
  const auto c = faulty_->counts();
  EXPECT_EQ(c.operations, uint64_t{kCalls});
  EXPECT_EQ(c.dropped_requests + c.dropped_replies, uint64_t{kCalls});
  EXPECT_GT(c.dropped_requests, 0u);
  EXPECT_GT(c.dropped_replies, 0u);
  // A lost reply's request was served: the peer acted, the caller saw an error.
  EXPECT_EQ(static_cast<uint64_t>(served_.load()), c.dropped_replies);
}

TEST_F(FaultyTransportTest, DelayedRepliesOvertakeEachOtherAndAllArrive) {
  FaultSpec s;
  s.delay = 1;
  s.delay_max = std::chrono::milliseconds(20);
  Start(s);
  auto ep = client_->GetEndpoint(addr_);
  constexpr int kCalls = 40;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  int failed = 0;
  for (int i = 0; i < kCalls; ++i) {
    ep->Call(kEcho, Bytes{std::byte(i)}, std::chrono::seconds(5), [&](Result<Bytes> r) {
      std::lock_guard lock(mu);
      if (r && r->size() == 1) {
        order.push_back(static_cast<int>((*r)[0]));
      } else {
        ++failed;
      }
      cv.notify_all();
    });
  }
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10),
                          [&] { return order.size() + failed == size_t{kCalls}; }));
  EXPECT_EQ(failed, 0);
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end())) << "no reply overtook another";
  EXPECT_EQ(faulty_->counts().delayed, uint64_t{kCalls});
}

TEST_F(FaultyTransportTest, DuplicatedCallsReachThePeerTwiceAndAreAnsweredOnce) {
  FaultSpec s;
  s.duplicate = 1;
  s.delay_max = std::chrono::milliseconds(5);  // the copies' delays
  Start(s);
  auto ep = client_->GetEndpoint(addr_);
  constexpr int kCalls = 20;
  for (int i = 0; i < kCalls; ++i) {
    auto r = CallSync(*ep, kEcho, Bytes{std::byte(i)}, std::chrono::seconds(5));
    ASSERT_TRUE(r) << r.error().ToString();
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0], std::byte(i));  // its own answer, not a copy's
  }
  EXPECT_EQ(faulty_->counts().duplicated, uint64_t{kCalls});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (served_.load() < 2 * kCalls && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(served_.load(), 2 * kCalls);
}

TEST(FaultSpec, ParsedOrRefused) {
  auto s = ParseFaultSpec("drop=0.01,delay=0.05:20ms,disconnect=0.001,duplicate=0.02,seed=7");
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->drop, 0.01);
  EXPECT_EQ(s->delay, 0.05);
  EXPECT_EQ(s->delay_max, std::chrono::milliseconds(20));
  EXPECT_EQ(s->disconnect, 0.001);
  EXPECT_EQ(s->duplicate, 0.02);
  EXPECT_EQ(s->seed, 7u);
  EXPECT_TRUE(s->Any());
  auto none = ParseFaultSpec("");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->Any());
  for (const char* bad : {"drop=2", "drop", "delay=0.5", "delay=0.5:3h", "loss=0.1", "seed=x",
                          "drop=-0.1", "delay=0.1:90s", "duplicate=1.5"}) {
    auto r = ParseFaultSpec(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, EINVAL) << bad;
    }
  }
}

}  // namespace
}  // namespace fedfs::m2m::testing
