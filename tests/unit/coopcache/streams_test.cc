#include "coopcache/streams.h"

#include <gtest/gtest.h>

namespace fedfs::coop {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(Streams, ASequentialReaderGoesPastOnceItReadTheThreshold) {
  Streams s({.after = 4 * kMiB, .window = 8 * kMiB});
  for (uint64_t i = 0; i < 4; ++i) EXPECT_FALSE(s.Read(1, i * kMiB, kMiB)) << i;
  EXPECT_TRUE(s.Read(1, 4 * kMiB, kMiB));
  EXPECT_TRUE(s.Read(1, 5 * kMiB, kMiB));
}

TEST(Streams, ReadAheadOutOfOrderStaysInTheStream) {
  Streams s({.after = 2 * kMiB, .window = 8 * kMiB});
  EXPECT_FALSE(s.Read(1, 0, kMiB));
  EXPECT_FALSE(s.Read(1, 2 * kMiB, kMiB));  // ahead of the one before it
  EXPECT_TRUE(s.Read(1, kMiB, kMiB));       // behind the end, within the window
  EXPECT_TRUE(s.Read(1, 3 * kMiB, kMiB));
}

TEST(Streams, AJumpStartsAgainAndRandomReadsNeverGoPast) {
  Streams s({.after = 2 * kMiB, .window = 1 * kMiB});
  for (uint64_t i = 0; i < 3; ++i) s.Read(1, i * kMiB, kMiB);
  EXPECT_TRUE(s.Read(1, 3 * kMiB, kMiB));
  EXPECT_FALSE(s.Read(1, 100 * kMiB, kMiB));  // a jump: a new stream
  EXPECT_FALSE(s.Read(1, 101 * kMiB, kMiB));
  uint64_t x = 12345;
  int past = 0;
  for (int i = 0; i < 10000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    past += s.Read(2, (x >> 20) % (1024 * kMiB), 4096);
  }
  EXPECT_EQ(past, 0);
}

TEST(Streams, HandlesAreApartAndForgotten) {
  Streams s({.after = kMiB, .window = kMiB, .max_streams = 2});
  s.Read(1, 0, kMiB);
  s.Read(2, 50 * kMiB, kMiB);
  EXPECT_TRUE(s.Read(1, kMiB, kMiB));
  EXPECT_TRUE(s.Read(2, 51 * kMiB, kMiB));
  s.Forget(1);
  EXPECT_EQ(s.size(), 1u);
  EXPECT_FALSE(s.Read(1, 2 * kMiB, kMiB));  // starts over
  EXPECT_FALSE(s.Read(3, 0, kMiB));         // past max_streams: all start over
  EXPECT_EQ(s.size(), 1u);
  EXPECT_FALSE(s.Read(2, 52 * kMiB, kMiB));
}

TEST(Streams, OffStreamsNothing) {
  Streams s({.after = 0});
  for (uint64_t i = 0; i < 100; ++i) EXPECT_FALSE(s.Read(1, i * kMiB, kMiB));
}

}  // namespace
}  // namespace fedfs::coop
