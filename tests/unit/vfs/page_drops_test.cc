// PageDrops (vfs/page_drops.h): a drop of pages that this node's own write
// of them keeps locked waits for that write, merged, bounded.
#include "vfs/page_drops.h"

#include <gtest/gtest.h>

#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace fedfs::ns {
namespace {

struct Dropped {
  uint64_t ino;
  uint64_t offset, length;
  bool operator==(const Dropped&) const = default;
};

struct Recorder {
  std::mutex mu;
  std::vector<Dropped> drops;
  auto Fn() {
    return [this](uint64_t ino, DataRange r) {
      std::lock_guard lock(mu);
      drops.push_back({ino, r.offset, r.length});
    };
  }
  std::vector<Dropped> Get() {
    std::lock_guard lock(mu);
    return drops;
  }
};

TEST(PageDrops, NoWriteInFlightDropsNow) {
  Recorder rec;
  PageDrops d(rec.Fn());
  EXPECT_TRUE(d.DropNowOrLater(7, {0, 4096}));
  EXPECT_TRUE(d.DropNowOrLater(7, DataRange{}));
  EXPECT_EQ(d.put_off(), 0u);
  EXPECT_TRUE(rec.Get().empty());  // the caller drops
}

TEST(PageDrops, WritesOfOtherInodesOrRangesDoNotPutOff) {
  Recorder rec;
  PageDrops d(rec.Fn());
  PageDrops::Writing w(d, 7, 8192, 4096);  // [8192, 12288)
  EXPECT_TRUE(d.DropNowOrLater(8, {8192, 4096}));
  EXPECT_TRUE(d.DropNowOrLater(7, {0, 8192}));
  EXPECT_TRUE(d.DropNowOrLater(7, {12288, 100}));
  EXPECT_TRUE(d.DropNowOrLater(7, DataRange::None()));
  EXPECT_EQ(d.put_off(), 0u);
}

TEST(PageDrops, OverlappingDropWaitsForTheWriteThenIsMadeOnce) {
  Recorder rec;
  PageDrops d(rec.Fn(), std::chrono::seconds(60));
  std::optional<PageDrops::Writing> w;
  w.emplace(d, 7, 8192, 4096);
  EXPECT_FALSE(d.DropNowOrLater(7, {10000, 10}));
  EXPECT_FALSE(d.DropNowOrLater(7, DataRange::From(12000)));  // merged with the first
  EXPECT_EQ(d.put_off(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(rec.Get().empty()) << "dropped while the write was in flight";
  w.reset();
  d.Drain();
  EXPECT_EQ(rec.Get(), (std::vector<Dropped>{{7, 10000, DataRange::kToEnd}}));
}

TEST(PageDrops, EveryOverlappingWriteIsWaitedFor) {
  Recorder rec;
  PageDrops d(rec.Fn(), std::chrono::seconds(60));
  std::optional<PageDrops::Writing> a, b;
  a.emplace(d, 7, 0, 4096);
  b.emplace(d, 7, 4096, 4096);
  EXPECT_FALSE(d.DropNowOrLater(7, DataRange{}));
  a.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(rec.Get().empty());
  b.reset();
  d.Drain();
  EXPECT_EQ(rec.Get(), (std::vector<Dropped>{{7, 0, DataRange::kToEnd}}));
}

TEST(PageDrops, AWriteThatNeverEndsDelaysTheDropAtMostMaxWait) {
  Recorder rec;
  PageDrops d(rec.Fn(), std::chrono::milliseconds(100));
  PageDrops::Writing w(d, 7, 0, 4096);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(d.DropNowOrLater(7, {0, 1}));
  d.Drain();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  EXPECT_EQ(rec.Get(), (std::vector<Dropped>{{7, 0, 1}}));
}

}  // namespace
}  // namespace fedfs::ns
