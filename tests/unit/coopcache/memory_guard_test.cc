// MemoryGuard (coopcache/memory_guard.h): the cache shrinks while less
// memory is available than the guard keeps, at least an eighth at a time,
// and grows back an eighth at a time once twice as much is available.
#include <gtest/gtest.h>

#include <vector>

#include "coopcache/block_cache.h"
#include "coopcache/memory_guard.h"

namespace fedfs::coop {
namespace {

constexpr size_t kBlock = 4096;

TEST(MemoryGuard, TheCacheShrinksUnderPressureAndGrowsBackAfter) {
  auto c = BlockCache::Create({64 * kBlock, kBlock, 25});
  ASSERT_TRUE(c);
  BlockCache& cache = **c;
  std::vector<std::byte> b(kBlock, std::byte{1});
  for (uint64_t i = 0; i < 64; ++i) ASSERT_TRUE(cache.Put(1, i, cache.Generation(1), b));
  uint64_t avail = 100 * kBlock;
  MemoryGuard g(&cache, {.min_free_bytes = 50 * kBlock,
                         .available = [&]() -> Result<uint64_t> { return avail; },
                         .start_thread = false});
  g.Check();  // plenty: nothing moves
  EXPECT_EQ(cache.limit_blocks(), 64u);
  avail = 48 * kBlock;  // 2 blocks short: cut by an eighth (8 blocks)
  g.Check();
  EXPECT_EQ(cache.limit_blocks(), 56u);
  EXPECT_EQ(cache.stats().blocks_used, 56u);
  avail = 10 * kBlock;  // 40 short: cut by 40
  g.Check();
  EXPECT_EQ(cache.limit_blocks(), 16u);
  avail = 0;
  g.Check();
  g.Check();
  EXPECT_EQ(cache.limit_blocks(), 0u);
  EXPECT_EQ(cache.stats().blocks_used, 0u);
  avail = 60 * kBlock;  // above the floor, below twice it: stays
  g.Check();
  EXPECT_EQ(cache.limit_blocks(), 0u);
  avail = 200 * kBlock;  // back an eighth at a time
  g.Check();
  EXPECT_EQ(cache.limit_blocks(), 8u);
  for (int i = 0; i < 10; ++i) g.Check();
  EXPECT_EQ(cache.limit_blocks(), 64u);
  EXPECT_EQ(g.stats().shrinks, 3u);  // the second at 0 had nothing to cut
  EXPECT_EQ(g.stats().grows, 8u);
}

TEST(MemoryGuard, AnUnreadableSourceLeavesTheCacheAlone) {
  auto c = BlockCache::Create({8 * kBlock, kBlock, 25});
  ASSERT_TRUE(c);
  MemoryGuard g(c->get(), {.min_free_bytes = 1,
                           .available = []() -> Result<uint64_t> { return Err(EIO, "x"); },
                           .start_thread = false});
  g.Check();
  EXPECT_EQ((*c)->limit_blocks(), 8u);
  EXPECT_EQ(g.stats().errors, 1u);
}

TEST(MemoryGuard, ReadsTheMachinesMemory) {
  auto a = MemAvailable();
  auto t = MemTotal();
  ASSERT_TRUE(a) << a.error().ToString();
  ASSERT_TRUE(t) << t.error().ToString();
  EXPECT_GT(*t, 0u);
  EXPECT_LE(*a, *t);
}

}  // namespace
}  // namespace fedfs::coop
