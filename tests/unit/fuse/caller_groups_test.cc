#include "fuse/caller_groups.h"

#include <gtest/gtest.h>

namespace fedfs::fuse {
namespace {

using std::chrono::milliseconds;
using Groups = CallerGroups::Groups;

struct Counting {
  int calls = 0;
  std::optional<Groups> answer = Groups{10, 20};
  auto fn() {
    return [this] {
      ++calls;
      return answer;
    };
  }
};

TEST(CallerGroups, KeptPerThreadUidAndGidUntilTheTtl) {
  CallerGroups c(milliseconds(1000), 16);
  Counting f;
  const auto t0 = CallerGroups::Clock::time_point{} + std::chrono::hours(1);
  EXPECT_EQ(c.Get(7, 1000, 1000, t0, f.fn()), (Groups{10, 20}));
  EXPECT_EQ(f.calls, 1);
  f.answer = Groups{30};  // what /proc would say now
  EXPECT_EQ(c.Get(7, 1000, 1000, t0 + milliseconds(999), f.fn()), (Groups{10, 20}));
  EXPECT_EQ(f.calls, 1);
  // Another thread, uid or gid is asked at once.
  EXPECT_EQ(c.Get(8, 1000, 1000, t0, f.fn()), (Groups{30}));
  EXPECT_EQ(c.Get(7, 1001, 1000, t0, f.fn()), (Groups{30}));
  EXPECT_EQ(c.Get(7, 1000, 1001, t0, f.fn()), (Groups{30}));
  EXPECT_EQ(f.calls, 4);
  // Past the ttl, asked again.
  EXPECT_EQ(c.Get(7, 1000, 1000, t0 + milliseconds(1000), f.fn()), (Groups{30}));
  EXPECT_EQ(f.calls, 5);
}

TEST(CallerGroups, AnUnknownAnswerIsNotKept) {
  CallerGroups c(milliseconds(1000), 16);
  Counting f;
  f.answer.reset();
  const auto t0 = CallerGroups::Clock::now();
  EXPECT_TRUE(c.Get(7, 1000, 1000, t0, f.fn()).empty());
  f.answer = Groups{5};
  EXPECT_EQ(c.Get(7, 1000, 1000, t0, f.fn()), (Groups{5}));
  EXPECT_EQ(f.calls, 2);
}

TEST(CallerGroups, BoundedByCapacity) {
  CallerGroups c(milliseconds(1000), 8);
  Counting f;
  const auto t0 = CallerGroups::Clock::now();
  for (pid_t tid = 1; tid <= 100; ++tid) {
    c.Get(tid, 1000, 1000, t0, f.fn());
    EXPECT_LE(c.size(), 8u);
  }
  EXPECT_EQ(f.calls, 100);
  // Full: expired entries are dropped first, fresh ones stay.
  CallerGroups d(milliseconds(1000), 4);
  for (pid_t tid = 1; tid <= 3; ++tid) d.Get(tid, 1000, 1000, t0, f.fn());
  d.Get(4, 1000, 1000, t0 + milliseconds(1500), f.fn());
  EXPECT_EQ(d.size(), 4u);
  d.Get(5, 1000, 1000, t0 + milliseconds(1600), f.fn());  // 1-3 expired, 4 fresh
  EXPECT_EQ(d.size(), 2u);
  const int calls = f.calls;
  d.Get(4, 1000, 1000, t0 + milliseconds(1700), f.fn());
  EXPECT_EQ(f.calls, calls);
}

}  // namespace
}  // namespace fedfs::fuse
