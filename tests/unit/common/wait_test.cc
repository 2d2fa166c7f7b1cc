// common/wait.h and common/cooperative.h without a cooperative scheduler
// (the daemon's case): WaitFor/WaitForAll block until their completions,
// inline or from another thread; SleepFor sleeps; SteadyNow is steady_clock;
// SuspendingMutex is a mutex. With a scheduler installed but no fiber
// running (its main context) they behave the same. The fiber side is in
// tests/unit/bench/fibers_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/cooperative.h"
#include "common/wait.h"

namespace fedfs {
namespace {

using namespace std::chrono_literals;

TEST(Wait, InlineCompletion) {
  EXPECT_EQ(SuspendableContext(), nullptr);
  EXPECT_EQ(WaitFor<int>([](auto done) { done(7); }), 7);
  auto all = WaitForAll<int>(3, [](size_t i, auto done) { done(static_cast<int>(i) * 2); });
  EXPECT_EQ(all, (std::vector<int>{0, 2, 4}));
}

TEST(Wait, CompletionFromAnotherThread) {
  std::thread t;
  const int v = WaitFor<int>([&](auto done) {
    t = std::thread([done = std::move(done)]() mutable {
      std::this_thread::sleep_for(5ms);
      done(42);
    });
  });
  t.join();
  EXPECT_EQ(v, 42);
  std::vector<std::thread> ts;
  auto all = WaitForAll<int>(4, [&](size_t i, auto done) {
    ts.emplace_back([i, done = std::move(done)]() mutable { done(static_cast<int>(i) + 1); });
  });
  for (auto& x : ts) x.join();
  EXPECT_EQ(all, (std::vector<int>{1, 2, 3, 4}));
}

TEST(Wait, SleepAndClockWithoutScheduler) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto s0 = SteadyNow();
  SleepFor(2ms);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 2ms);
  EXPECT_GE(SteadyNow() - s0, 2ms);
  EXPECT_GE(SteadyClock::now(), s0);
}

TEST(Wait, SuspendingMutexIsAMutex) {
  SuspendingMutex mu;
  int n = 0;
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) {
    ts.emplace_back([&] {
      for (int k = 0; k < 10000; ++k) {
        std::lock_guard lock(mu);
        ++n;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(n, 40000);
  EXPECT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
}

// A scheduler whose main context is running (no fiber): waits block as
// without one; the clock is the scheduler's.
class MainContextOnly final : public Cooperative {
 public:
  FiberId Current() const override { return nullptr; }
  void Suspend() override { ADD_FAILURE() << "suspended on the main context"; }
  void Wake(FiberId) override { ADD_FAILURE() << "woke a fiber"; }
  void Sleep(std::chrono::nanoseconds) override { ADD_FAILURE() << "slept as a fiber"; }
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::time_point(std::chrono::hours(5));
  }
};

TEST(Wait, MainContextOfAScheduler) {
  MainContextOnly co;
  ScopedCooperative installed(&co);
  EXPECT_EQ(CurrentCooperative(), &co);
  EXPECT_EQ(SuspendableContext(), nullptr);
  std::thread t;
  const int v = WaitFor<int>([&](auto done) {
    t = std::thread([done = std::move(done)]() mutable { done(3); });
  });
  t.join();
  EXPECT_EQ(v, 3);
  SleepFor(1ms);
  EXPECT_EQ(SteadyNow(), std::chrono::steady_clock::time_point(std::chrono::hours(5)));
}

TEST(Wait, ScopedCooperativeRestores) {
  MainContextOnly a, b;
  {
    ScopedCooperative ia(&a);
    {
      ScopedCooperative ib(&b);
      EXPECT_EQ(CurrentCooperative(), &b);
    }
    EXPECT_EQ(CurrentCooperative(), &a);
  }
  EXPECT_EQ(CurrentCooperative(), nullptr);
}

}  // namespace
}  // namespace fedfs
