// BlockCache (coopcache/block_cache.h): hits, generations, the race of a
// fetch with an invalidation, scan resistance, the memory bound, Clear.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "coopcache/block_cache.h"

namespace fedfs::coop {
namespace {

constexpr size_t kBlock = 4096;

std::unique_ptr<BlockCache> Make(size_t blocks, unsigned probation = 25) {
  auto c = BlockCache::Create({blocks * kBlock, kBlock, probation});
  EXPECT_TRUE(c) << c.error().ToString();
  return c ? std::move(*c) : nullptr;
}

std::vector<std::byte> Bytes(size_t n, uint8_t fill) { return std::vector<std::byte>(n, std::byte{fill}); }

// Put a block of `fill` for (file, index) under the file's generation now.
bool PutNow(BlockCache& c, uint64_t file, uint64_t index, uint8_t fill, size_t n = kBlock) {
  return c.Put(file, index, c.Generation(file), Bytes(n, fill));
}

// The fill of block (file, index), or -1 on a miss.
int Fill(BlockCache& c, uint64_t file, uint64_t index) {
  std::vector<std::byte> out(kBlock);
  auto n = c.Get(file, index, out);
  if (!n) return -1;
  return static_cast<int>(out[0]);
}

TEST(BlockCache, OptionsAreChecked) {
  EXPECT_EQ(BlockCache::Create({1 << 20, 3000, 25}).error().code, EINVAL);   // not a power of two
  EXPECT_EQ(BlockCache::Create({1 << 20, 2048, 25}).error().code, EINVAL);   // below 4 KiB
  EXPECT_EQ(BlockCache::Create({4096, 8192, 25}).error().code, EINVAL);      // below one block
  EXPECT_EQ(BlockCache::Create({1 << 20, 4096, 0}).error().code, EINVAL);    // probation share
  EXPECT_EQ(BlockCache::Create({1 << 20, 4096, 100}).error().code, EINVAL);
  auto c = BlockCache::Create({(1 << 20) + 100, 4096, 25});
  ASSERT_TRUE(c);
  EXPECT_EQ((*c)->capacity_blocks(), 256u);  // the remainder is not used
}

// A change of some bytes drops the blocks holding them, not the file's
// others; a fetch in flight of a dropped block is refused, of another not.
TEST(BlockCache, ARangeInvalidationDropsItsBlocksOnly) {
  auto c = Make(8);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(PutNow(*c, 1, i, static_cast<uint8_t>(0x10 + i)));
  ASSERT_TRUE(PutNow(*c, 2, 1, 0x21));
  const uint64_t before = c->Generation(1);
  c->InvalidateRange(1, 1, 2);
  EXPECT_EQ(Fill(*c, 1, 0), 0x10);
  EXPECT_EQ(Fill(*c, 1, 1), -1);
  EXPECT_EQ(Fill(*c, 1, 2), -1);
  EXPECT_EQ(Fill(*c, 1, 3), 0x13);
  EXPECT_EQ(Fill(*c, 2, 1), 0x21);  // another file
  EXPECT_NE(c->Generation(1), before);
  EXPECT_FALSE(c->Put(1, 1, before, Bytes(kBlock, 0x99)));  // fetched before the change
  EXPECT_TRUE(c->Put(1, 5, before, Bytes(kBlock, 0x15)));   // a block it did not touch
  EXPECT_TRUE(c->Put(1, 1, c->Generation(1), Bytes(kBlock, 0x31)));
  EXPECT_EQ(Fill(*c, 1, 1), 0x31);
  // The same through a reservation.
  const uint64_t g = c->Generation(1);
  auto in = c->Reserve(1, 3, g);
  auto out = c->Reserve(1, 6, g);
  ASSERT_TRUE(in && out);
  c->InvalidateRange(1, 3, 3);
  EXPECT_FALSE(c->Publish(*in, 1, 3, g, Bytes(kBlock, 0x43), 0));
  EXPECT_TRUE(c->Publish(*out, 1, 6, g, Bytes(kBlock, 0x46), 0));
  EXPECT_EQ(Fill(*c, 1, 3), -1);
  EXPECT_EQ(Fill(*c, 1, 6), 0x46);
  // A whole-file invalidation still drops them all.
  c->InvalidateFile(1);
  EXPECT_EQ(Fill(*c, 1, 0), -1);
  EXPECT_EQ(Fill(*c, 1, 6), -1);
}

// A write past the end of the file grows it: its short last block, stored
// or being fetched, no longer ends it, wherever the write was.
TEST(BlockCache, AShortBlockGoesWithAnyRangeInvalidation) {
  auto c = Make(8);
  ASSERT_TRUE(PutNow(*c, 1, 0, 0x10));
  ASSERT_TRUE(PutNow(*c, 1, 1, 0x11, 100));  // the file ends 100 bytes into block 1
  const uint64_t g = c->Generation(1);
  c->InvalidateRange(1, 5, 5);
  EXPECT_EQ(Fill(*c, 1, 0), 0x10);
  EXPECT_EQ(Fill(*c, 1, 1), -1);
  EXPECT_FALSE(c->Put(1, 1, g, Bytes(100, 0x11)));   // short, fetched before the change
  EXPECT_TRUE(c->Put(1, 2, g, Bytes(kBlock, 0x12)));  // whole, outside it
  auto s = c->Reserve(1, 3, g);
  ASSERT_TRUE(s);
  EXPECT_FALSE(c->Publish(*s, 1, 3, g, Bytes(10, 0x13), 0));
}

// A file remembers its last kMaxRanges ranges: a fetch older than the ones
// it forgot is refused whatever its block; a long range is the whole file.
TEST(BlockCache, AFetchOlderThanTheRangesRememberedIsRefused) {
  auto c = Make(8);
  ASSERT_TRUE(PutNow(*c, 1, 0, 0x10));
  const uint64_t old = c->Generation(1);
  for (size_t k = 0; k <= BlockCache::kMaxRanges; ++k) c->InvalidateRange(1, 7, 7);
  EXPECT_FALSE(c->Put(1, 1, old, Bytes(kBlock, 0x11)));
  EXPECT_EQ(Fill(*c, 1, 0), 0x10);  // stored blocks outside them stay
  const uint64_t g = c->Generation(1);
  c->InvalidateRange(1, 100, 100 + BlockCache::kMaxRangeBlocks);
  EXPECT_EQ(Fill(*c, 1, 0), -1);
  EXPECT_FALSE(c->Put(1, 1, g, Bytes(kBlock, 0x11)));
  // A file without blocks here: every fetch of a file without a record goes.
  const uint64_t none = c->Generation(9);
  c->InvalidateRange(9, 0, 0);
  EXPECT_FALSE(c->Put(9, 3, none, Bytes(kBlock, 0x93)));
}

TEST(BlockCache, AStoredBlockIsReturnedWithItsLength) {
  auto c = Make(8);
  EXPECT_EQ(Fill(*c, 1, 0), -1);
  ASSERT_TRUE(PutNow(*c, 1, 0, 0xaa));
  ASSERT_TRUE(PutNow(*c, 1, 1, 0xbb, 100));  // the file ends 100 bytes into block 1
  EXPECT_TRUE(c->Has(1, 0));
  EXPECT_FALSE(c->Has(1, 2));
  EXPECT_EQ(Fill(*c, 1, 0), 0xaa);
  std::vector<std::byte> out(kBlock, std::byte{0});
  auto n = c->Get(1, 1, out);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 100u);
  EXPECT_EQ(out[99], std::byte{0xbb});
  EXPECT_EQ(out[100], std::byte{0});  // nothing past the block's bytes
  EXPECT_EQ(Fill(*c, 2, 0), -1);       // another file
  const auto s = c->stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.blocks_used, 2u);
  EXPECT_EQ(s.bytes_used, kBlock + 100);
  EXPECT_EQ(s.files, 1u);
}

TEST(BlockCache, AnInvalidatedFileReturnsNothingAndOthersKeepTheirs) {
  auto c = Make(8);
  ASSERT_TRUE(PutNow(*c, 1, 0, 1));
  ASSERT_TRUE(PutNow(*c, 2, 0, 2));
  c->InvalidateFile(1);
  EXPECT_FALSE(c->Has(1, 0));
  EXPECT_EQ(Fill(*c, 1, 0), -1);
  EXPECT_EQ(Fill(*c, 2, 0), 2);
  EXPECT_EQ(c->stats().stale, 1u);
  EXPECT_EQ(c->stats().blocks_used, 1u);  // freed when found
  ASSERT_TRUE(PutNow(*c, 1, 0, 3));       // fetched again
  EXPECT_EQ(Fill(*c, 1, 0), 3);
}

// A fetch that raced with an invalidation (the file's node told of a write
// after it read the bytes, before they arrived) is refused, for a file with
// blocks here and for one without.
TEST(BlockCache, AFetchThatRacedWithAnInvalidationIsRefused) {
  auto c = Make(8);
  ASSERT_TRUE(PutNow(*c, 1, 0, 1));
  const uint64_t g1 = c->Generation(1);
  const uint64_t g2 = c->Generation(2);  // no record
  const uint64_t g3 = c->Generation(3);
  c->InvalidateFile(1);
  c->InvalidateFile(2);
  EXPECT_FALSE(c->Put(1, 1, g1, Bytes(kBlock, 9)));
  EXPECT_FALSE(c->Put(2, 0, g2, Bytes(kBlock, 9)));
  EXPECT_EQ(Fill(*c, 1, 1), -1);
  EXPECT_EQ(Fill(*c, 2, 0), -1);
  EXPECT_EQ(c->stats().puts_refused, 2u);
  // A file without a record shares the floor: its fetch is refused too
  // (harmless: fetched again), never one of a later generation accepted.
  EXPECT_FALSE(c->Put(3, 0, g3, Bytes(kBlock, 9)));
  EXPECT_TRUE(PutNow(*c, 3, 0, 4));
  EXPECT_EQ(Fill(*c, 3, 0), 4);
}

TEST(BlockCache, GenerationsNeverComeBackAfterRecordsAreDropped) {
  auto c = Make(4);
  const uint64_t old = c->Generation(7);
  // Many files stored and evicted: records of files without blocks are
  // dropped along the way.
  for (uint64_t f = 100; f < 5000; ++f) ASSERT_TRUE(PutNow(*c, f, 0, 1));
  EXPECT_LT(c->stats().files, 2000u);
  c->InvalidateFile(7);
  EXPECT_FALSE(c->Put(7, 0, old, Bytes(kBlock, 1)));
  EXPECT_NE(c->Generation(7), old);
}

// One scan of twice the cache's size, block by block, after a hot set was
// read twice: the hot set is still there.
TEST(BlockCache, AScanDoesNotFlushTheHotSet) {
  auto c = Make(64);
  for (uint64_t i = 0; i < 32; ++i) ASSERT_TRUE(PutNow(*c, 1, i, 1));
  for (uint64_t i = 0; i < 32; ++i) ASSERT_EQ(Fill(*c, 1, i), 1);  // promoted
  for (uint64_t i = 0; i < 128; ++i) {
    if (Fill(*c, 2, i) < 0) {
      ASSERT_TRUE(PutNow(*c, 2, i, 2));
    }
  }
  for (uint64_t i = 0; i < 32; ++i) EXPECT_EQ(Fill(*c, 1, i), 1) << i;
  const auto s = c->stats();
  EXPECT_EQ(s.promotions, 32u);
  EXPECT_EQ(s.blocks_used, 64u);
  EXPECT_GE(s.evictions, 128u - 32u);
}

// Against a plain LRU the same pattern would leave nothing of the hot set:
// the test above fails with every block put straight into protected.
TEST(BlockCache, ProtectedIsLruAndProbationFifo) {
  auto c = Make(4, 50);  // 2 probation, 2 protected
  ASSERT_TRUE(PutNow(*c, 1, 0, 1));
  ASSERT_TRUE(PutNow(*c, 1, 1, 1));
  ASSERT_EQ(Fill(*c, 1, 0), 1);  // protected: 0
  ASSERT_EQ(Fill(*c, 1, 1), 1);  // protected: 1, 0
  ASSERT_TRUE(PutNow(*c, 1, 2, 1));
  ASSERT_TRUE(PutNow(*c, 1, 3, 1));  // full
  ASSERT_EQ(Fill(*c, 1, 0), 1);      // protected: 0, 1
  ASSERT_TRUE(PutNow(*c, 1, 4, 1));  // probation holds 2 = its share: protected's LRU (1) goes
  EXPECT_EQ(Fill(*c, 1, 1), -1);
  ASSERT_TRUE(PutNow(*c, 1, 5, 1));  // probation 3 > 2: its oldest (2) goes
  EXPECT_EQ(Fill(*c, 1, 2), -1);
  EXPECT_EQ(Fill(*c, 1, 0), 1);
}

TEST(BlockCache, ClearDropsEverythingAndRefusesFetchesInFlight) {
  auto c = Make(16);
  for (uint64_t i = 0; i < 16; ++i) ASSERT_TRUE(PutNow(*c, 1, i, 5));
  const uint64_t g = c->Generation(1);
  c->Clear();
  EXPECT_EQ(c->stats().blocks_used, 0u);
  EXPECT_EQ(c->stats().bytes_used, 0u);
  EXPECT_EQ(Fill(*c, 1, 0), -1);
  EXPECT_FALSE(c->Put(1, 0, g, Bytes(kBlock, 1)));
  ASSERT_TRUE(PutNow(*c, 1, 0, 6));
  EXPECT_EQ(Fill(*c, 1, 0), 6);
}

// Random puts, gets and invalidations of a few files against a model: a
// get returns the last bytes put under the current generation, or misses.
TEST(BlockCache, RandomOperationsAgreeWithAModel) {
  std::mt19937_64 rng(42);
  auto c = Make(16);
  std::map<std::pair<uint64_t, uint64_t>, int> model;  // what a hit may return
  for (int step = 0; step < 20000; ++step) {
    const uint64_t file = rng() % 4, index = rng() % 12;
    switch (rng() % 4) {
      case 0: {
        const uint64_t g = c->Generation(file);
        if (rng() % 8 == 0) {
          c->InvalidateFile(file);
          std::erase_if(model, [&](const auto& kv) { return kv.first.first == file; });
        }
        const int fill = static_cast<int>(rng() % 250) + 1;
        if (c->Put(file, index, g, Bytes(kBlock, static_cast<uint8_t>(fill)))) {
          model[{file, index}] = fill;
        }
        break;
      }
      case 1:
        c->InvalidateFile(file);
        std::erase_if(model, [&](const auto& kv) { return kv.first.first == file; });
        break;
      default: {
        const int got = Fill(*c, file, index);
        if (got >= 0) {
          auto it = model.find({file, index});
          ASSERT_NE(it, model.end()) << "step " << step;
          ASSERT_EQ(got, it->second) << "step " << step;
        }
      }
    }
  }
  EXPECT_GT(c->stats().hits, 300u);
}

// The tag of frame f as a peer would read it.
uint64_t TagOf(BlockCache& c, uint32_t f) {
  uint64_t t;
  std::memcpy(&t, c.tags().data() + size_t{f} * BlockCache::kTrailerBytes, 8);
  return t;
}

TEST(BlockCache, AReservedFrameCarriesItsTagOnlyOncePublished) {
  auto c = Make(2);
  auto s = c->Reserve(1, 0, c->Generation(1));
  ASSERT_TRUE(s);
  EXPECT_NE(s->tag, 0u);
  EXPECT_EQ(TagOf(*c, s->frame), 0u);  // a peer sent here early finds 0
  EXPECT_EQ(s->data, c->arena().data() + size_t{s->frame} * kBlock);
  EXPECT_EQ(c->stats().reserved, 1u);
  ASSERT_TRUE(c->Publish(*s, 1, 0, c->Generation(1), Bytes(kBlock, 0x11), 0));
  EXPECT_EQ(TagOf(*c, s->frame), s->tag);
  EXPECT_EQ(Fill(*c, 1, 0), 0x11);
  EXPECT_EQ(c->stats().reserved, 0u);
  // Filled in place (by a peer's bytes): Publish with a length only.
  auto t = c->Reserve(1, 1, c->Generation(1));
  ASSERT_TRUE(t);
  std::memset(t->data, 0x22, 100);
  ASSERT_TRUE(c->Publish(*t, 1, 1, c->Generation(1), {}, 100));
  std::vector<std::byte> out(kBlock);
  EXPECT_EQ(c->Get(1, 1, out), std::optional<size_t>(100));
  EXPECT_EQ(out[99], std::byte{0x22});
  // Evicted: the frame's tag goes to 0 before it is reused, and the reuse
  // carries a tag never seen before.
  const uint32_t f = s->frame;
  const uint64_t old = s->tag;
  ASSERT_TRUE(PutNow(*c, 2, 0, 0x33));
  ASSERT_TRUE(PutNow(*c, 2, 1, 0x44));
  EXPECT_EQ(Fill(*c, 1, 0), -1);
  EXPECT_NE(TagOf(*c, f), old);
  EXPECT_NE(TagOf(*c, f), 0u);
}

TEST(BlockCache, APublishAfterAnInvalidationIsRefusedAndFreesTheFrame) {
  auto c = Make(1);
  const uint64_t g = c->Generation(1);
  auto s = c->Reserve(1, 0, g);
  ASSERT_TRUE(s);
  EXPECT_FALSE(c->Reserve(1, 1, g));  // the only frame is reserved
  c->InvalidateFile(1);
  EXPECT_FALSE(c->Publish(*s, 1, 0, g, Bytes(kBlock, 1), 0));
  EXPECT_EQ(TagOf(*c, s->frame), 0u);
  EXPECT_EQ(Fill(*c, 1, 0), -1);
  EXPECT_EQ(c->stats().reserved, 0u);
  ASSERT_TRUE(PutNow(*c, 1, 0, 5));  // the frame is free again
  // Abandoned: free again too, tag 0.
  c->Clear();
  auto t = c->Reserve(3, 0, c->Generation(3));
  ASSERT_TRUE(t);
  c->Abandon(*t);
  EXPECT_EQ(TagOf(*c, t->frame), 0u);
  EXPECT_TRUE(PutNow(*c, 3, 0, 6));
}

TEST(BlockCache, AReservationSurvivesAClearButItsPublishIsRefused) {
  auto c = Make(4);
  auto s = c->Reserve(1, 0, c->Generation(1));
  ASSERT_TRUE(s);
  const uint64_t g = c->Generation(1);
  c->Clear();
  EXPECT_EQ(c->stats().reserved, 1u);
  EXPECT_FALSE(c->Publish(*s, 1, 0, g, Bytes(kBlock, 1), 0));
  EXPECT_EQ(c->stats().reserved, 0u);
}

// N-chance forwarding: replacement hands a block published with an origin
// to the evict sink (bytes, frame, tag); a block without one, an
// invalidated one and a Clear hand nothing.
TEST(BlockCache, ReplacementHandsBlocksWithAnOriginToTheEvictSink) {
  auto c = Make(2);
  std::vector<std::pair<uint64_t, int>> seen;  // (index, first byte)
  std::vector<uint64_t> tags;
  c->SetEvictSink([&](const Evicted& e) {
    EXPECT_EQ(e.origin.holder, "h");
    EXPECT_EQ(e.origin.ino, 42u);
    EXPECT_EQ(e.bytes.size(), kBlock);
    seen.emplace_back(e.index, static_cast<int>(e.bytes[0]));
    tags.push_back(e.tag);
  });
  const Origin o{"h", 1, 42, 0};
  auto fill = [&](uint64_t file, uint64_t index, uint8_t v, const Origin* origin) {
    auto s = c->Reserve(file, index, c->Generation(file));
    ASSERT_TRUE(s);
    ASSERT_TRUE(c->Publish(*s, file, index, c->Generation(file), Bytes(kBlock, v), kBlock, origin));
  };
  auto first = c->Reserve(1, 0, c->Generation(1));
  ASSERT_TRUE(first);
  const uint64_t t0 = first->tag;
  ASSERT_TRUE(c->Publish(*first, 1, 0, c->Generation(1), Bytes(kBlock, 0x10), kBlock, &o));
  fill(2, 0, 0x20, nullptr);  // no origin: never handed over
  fill(1, 1, 0x11, &o);       // evicts block (1, 0)
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], std::make_pair(uint64_t{0}, 0x10));
  EXPECT_EQ(tags[0], t0);  // the tag peers were told
  fill(1, 2, 0x12, &o);    // evicts (2, 0): no origin
  EXPECT_EQ(seen.size(), 1u);
  // An invalidated block is stale: evicted without being handed over.
  c->InvalidateFile(1);
  fill(3, 0, 0x30, &o);
  fill(3, 1, 0x31, &o);
  EXPECT_EQ(seen.size(), 1u);
  // Clear hands nothing over either.
  c->Clear();
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_EQ(c->stats().evicted_to_sink, 1u);
}

// Memory pressure: a lower limit evicts down to it and keeps the cache
// there; raising it lets the cache fill again.
TEST(BlockCache, ALimitEvictsDownToItAndHoldsTheCacheThere) {
  auto c = Make(8);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(PutNow(*c, 1, i, uint8_t(i)));
  EXPECT_EQ(c->stats().blocks_used, 8u);
  c->SetLimit(3);
  EXPECT_EQ(c->limit_blocks(), 3u);
  EXPECT_EQ(c->stats().blocks_used, 3u);
  for (uint64_t i = 8; i < 16; ++i) ASSERT_TRUE(PutNow(*c, 1, i, uint8_t(i)));
  EXPECT_EQ(c->stats().blocks_used, 3u);
  EXPECT_EQ(Fill(*c, 1, 15), 15);  // the newest are kept, whole
  c->SetLimit(0);                  // nothing is kept
  EXPECT_EQ(c->stats().blocks_used, 0u);
  EXPECT_FALSE(PutNow(*c, 1, 20, 1));
  EXPECT_FALSE(c->Reserve(1, 21, c->Generation(1)));
  c->SetLimit(100);  // at most the capacity
  EXPECT_EQ(c->limit_blocks(), 8u);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(PutNow(*c, 2, i, uint8_t(i)));
  EXPECT_EQ(c->stats().blocks_used, 8u);
}

}  // namespace
}  // namespace fedfs::coop
