// FiberScheduler (bench/sim/fibers.h): blocking production helpers --
// WaitFor, WaitForAll, CallSync, SleepFor, SuspendingMutex -- on fibers in
// the fake network's simulated time: a wait suspends the fiber until its
// completion, a sleep takes simulated time and no real time, many fibers
// interleave deterministically, an executor runs each task in a fiber.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench/sim/fibers.h"
#include "common/cooperative.h"
#include "common/wait.h"
#include "m2m/auth.h"
#include "m2m/fake_network.h"
#include "m2m/transport.h"

namespace fedfs::bench {
namespace {

using namespace std::chrono_literals;
using m2m::SimDuration;

m2m::Bytes B(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return m2m::Bytes(p, p + s.size());
}

m2m::FakeNetworkOptions Simulated(m2m::LinkModel link = m2m::LinkModel::Zero()) {
  m2m::FakeNetworkOptions o;
  o.mode = m2m::SchedulerMode::kSimulated;
  o.link = link;
  return o;
}

TEST(Fibers, WaitSuspendsUntilTheCompletion) {
  m2m::FakeNetwork net(Simulated());
  FiberScheduler fibers(net);
  EXPECT_EQ(CurrentCooperative(), &fibers);
  EXPECT_EQ(SuspendableContext(), nullptr);  // main context
  int got = 0;
  SimDuration at{0};
  fibers.Spawn([&] {
    EXPECT_NE(SuspendableContext(), nullptr);
    // Inline: no suspension, no time.
    EXPECT_EQ(WaitFor<int>([](auto done) { done(1); }), 1);
    EXPECT_EQ(net.Now(), SimDuration(0));
    got = WaitFor<int>([&](auto done) {
      net.Schedule(5us, [done = std::move(done)]() mutable { done(9); });
    });
    at = net.Now();
  });
  EXPECT_EQ(got, 0);  // suspended: Spawn returned
  EXPECT_EQ(fibers.live(), 1u);
  net.RunUntilIdle();
  EXPECT_EQ(got, 9);
  EXPECT_EQ(at, SimDuration(5us));
  EXPECT_EQ(fibers.live(), 0u);
}

TEST(Fibers, WaitForAllGathersInOrder) {
  m2m::FakeNetwork net(Simulated());
  FiberScheduler fibers(net);
  std::vector<int> got;
  fibers.Spawn([&] {
    got = WaitForAll<int>(4, [&](size_t i, auto done) {
      if (i == 2) return done(20);  // one inline
      net.Schedule(std::chrono::microseconds(10 - i),
                   [i, done = std::move(done)]() mutable { done(static_cast<int>(i) * 10); });
    });
  });
  net.RunUntilIdle();
  EXPECT_EQ(got, (std::vector<int>{0, 10, 20, 30}));
  EXPECT_EQ(net.Now(), SimDuration(10us));
}

TEST(Fibers, SleepTakesSimulatedTimeOnly) {
  m2m::FakeNetwork net(Simulated());
  FiberScheduler fibers(net);
  const auto wall0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point before{}, after{};
  fibers.Spawn([&] {
    before = SteadyNow();
    SleepFor(std::chrono::seconds(30));
    after = SteadyNow();
  });
  net.RunUntilIdle();
  EXPECT_EQ(after - before, std::chrono::seconds(30));
  EXPECT_EQ(net.Now(), SimDuration(30s));
  EXPECT_LT(std::chrono::steady_clock::now() - wall0, 5s);
  // The clock is the simulated one on the main context too.
  EXPECT_EQ(SteadyNow(), after);
  EXPECT_NE(SteadyNow(), std::chrono::steady_clock::time_point{});
}

// Thousands of fibers, each sleeping and waiting on its own schedule: all
// finish, interleaved in simulated-time order, the same way every run.
std::vector<int> RunMany(int n) {
  m2m::FakeNetwork net(Simulated());
  FiberScheduler fibers(net);
  std::vector<int> order;
  for (int i = 0; i < n; ++i) {
    fibers.Spawn([&, i] {
      SleepFor(std::chrono::microseconds((i * 7919) % 1000));
      const int v = WaitFor<int>([&](auto done) {
        net.Schedule(std::chrono::microseconds(i % 13), [i, done = std::move(done)]() mutable { done(i); });
      });
      order.push_back(v);
    });
  }
  EXPECT_EQ(fibers.live(), static_cast<size_t>(n));
  net.RunUntilIdle();
  EXPECT_EQ(fibers.live(), 0u);
  EXPECT_EQ(fibers.spawned(), static_cast<size_t>(n));
  return order;
}

TEST(Fibers, ManyFibersDeterministic) {
  auto a = RunMany(4096);
  ASSERT_EQ(a.size(), 4096u);
  EXPECT_EQ(a, RunMany(4096));
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 4096; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
}

TEST(Fibers, SpawnFromAFiberStartsLater) {
  m2m::FakeNetwork net(Simulated());
  FiberScheduler fibers(net);
  std::vector<std::string> log;
  fibers.Spawn([&] {
    log.push_back("a");
    fibers.Spawn([&] { log.push_back("child"); });
    log.push_back("b");
  });
  log.push_back("main");
  net.RunUntilIdle();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b", "main", "child"}));
}

// A fiber holding a SuspendingMutex across a suspension; another fiber that
// wants it suspends (a std::mutex would block the thread for ever).
TEST(Fibers, SuspendingMutexAcrossASuspension) {
  m2m::FakeNetwork net(Simulated());
  FiberScheduler fibers(net);
  SuspendingMutex mu;
  std::vector<std::string> log;
  for (int i = 0; i < 3; ++i) {
    fibers.Spawn([&, i] {
      std::lock_guard lock(mu);
      log.push_back("in" + std::to_string(i));
      SleepFor(10us);
      log.push_back("out" + std::to_string(i));
    });
  }
  net.RunUntilIdle();
  EXPECT_EQ(log, (std::vector<std::string>{"in0", "out0", "in1", "out1", "in2", "out2"}));
  EXPECT_EQ(net.Now(), SimDuration(30us));
}

// The executor the simulator gives the services: each task in a fiber, so
// a handler may block (as FileService's do with WaitForAll).
TEST(Fibers, ExecutorTasksMayBlock) {
  m2m::FakeNetwork net(Simulated());
  FiberScheduler fibers(net);
  FiberExecutor pool(&fibers);
  int done = 0;
  for (int i = 0; i < 3; ++i) {
    pool.Post([&] {
      SleepFor(1ms);
      ++done;
    });
  }
  EXPECT_EQ(done, 0);
  net.RunUntilIdle();
  EXPECT_EQ(done, 3);
  EXPECT_EQ(net.Now(), SimDuration(1ms));
}

// m2m::CallSync (a WaitFor) from a fiber, served by a handler that answers
// from a fiber of its own after blocking: one round trip of the link model.
TEST(Fibers, CallSyncOverTheFakeNetwork) {
  m2m::LinkModel link;
  link.base_latency = 3us;
  m2m::FakeNetwork net(Simulated(link));
  FiberScheduler fibers(net);
  FiberExecutor pool(&fibers);
  m2m::TransportOptions t;
  t.cluster_key = m2m::Bytes(m2m::kClusterKeyBytes, std::byte{7});
  auto a = net.NewTransport(t);
  auto b = net.NewTransport(t);
  ASSERT_TRUE(a->Listen("a"));
  ASSERT_TRUE(b->Listen("b"));
  b->Handle(77, [&](m2m::IncomingCall call, m2m::Responder r) {
    pool.Post([call = std::move(call), r = std::move(r)]() mutable {
      SleepFor(1us);  // the handler blocks
      r.Reply(std::move(call.payload));
    });
  });
  std::string answer;
  SimDuration first{0}, second{0};
  fibers.Spawn([&] {
    auto ep = a->GetEndpoint("b");
    const SimDuration t0 = net.Now();
    auto r = m2m::CallSync(*ep, 77, B("ping"), 1s);
    ASSERT_TRUE(r) << r.error().ToString();
    first = net.Now() - t0;
    answer.assign(reinterpret_cast<const char*>(r->data()), r->size());
    const SimDuration t1 = net.Now();
    ASSERT_TRUE(m2m::CallSync(*ep, 77, B("again"), 1s));
    second = net.Now() - t1;
  });
  net.RunUntilIdle();
  EXPECT_EQ(answer, "ping");
  EXPECT_GT(first, second);  // the first call also ran the handshake
  EXPECT_EQ(second, SimDuration(7us));  // 3 us each way + the handler's 1 us
  EXPECT_EQ(fibers.live(), 0u);
}

// A fiber still waiting when the scheduler goes is unwound (its
// destructors run).
TEST(Fibers, StuckFibersUnwound) {
  m2m::FakeNetwork net(Simulated());
  bool destroyed = false;
  struct Flag {
    bool* f;
    ~Flag() { *f = true; }
  };
  {
    FiberScheduler fibers(net);
    fibers.Spawn([&] {
      Flag flag{&destroyed};
      (void)WaitFor<int>([](auto) {});  // never completed
    });
    EXPECT_EQ(fibers.live(), 1u);
  }
  EXPECT_TRUE(destroyed);
  EXPECT_EQ(CurrentCooperative(), nullptr);
}

}  // namespace
}  // namespace fedfs::bench
