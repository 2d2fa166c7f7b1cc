// common/timers.h: tasks run once, after their delay, in deadline order, on
// the Timers' thread; the destructor drops (destroys, does not run) the
// tasks not yet due.
#include "common/timers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace fedfs {
namespace {

using namespace std::chrono_literals;

TEST(Timers, RunsEachTaskOnceAfterItsDelayInDeadlineOrder) {
  Timers timers("test-timers");
  std::mutex mu;
  std::vector<int> order;
  std::promise<void> all;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration first_at{};
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> on_other_thread{true};
  auto add = [&](int v) {
    return [&, v] {
      if (std::this_thread::get_id() == caller) on_other_thread = false;
      std::lock_guard lock(mu);
      if (order.empty()) first_at = std::chrono::steady_clock::now() - start;
      order.push_back(v);
      if (order.size() == 3) all.set_value();
    };
  };
  timers.After(60ms, add(3));
  timers.After(20ms, add(1));
  timers.After(40ms, add(2));
  ASSERT_EQ(all.get_future().wait_for(5s), std::future_status::ready);
  std::lock_guard lock(mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_GE(first_at, 20ms);
  EXPECT_TRUE(on_other_thread);
}

TEST(Timers, DestructorDropsTasksNotYetDue) {
  auto ran = std::make_shared<std::atomic<int>>(0);
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  {
    Timers timers("test-timers");
    timers.After(1h, [ran, alive = std::move(alive)] { ran->fetch_add(1); });
    std::promise<void> done;
    timers.After(0ms, [&] { done.set_value(); });
    ASSERT_EQ(done.get_future().wait_for(5s), std::future_status::ready);
  }
  EXPECT_EQ(ran->load(), 0);
  EXPECT_TRUE(watch.expired()) << "the dropped task was not destroyed";
}

}  // namespace
}  // namespace fedfs
