#include "common/hash.h"

#include <gtest/gtest.h>

namespace fedfs {
namespace {

TEST(StableHash, IsFixedAcrossBuildsAndSeeds) {
  // xxHash64 of "" with seed 0 is a published constant.
  EXPECT_EQ(StableHash("", 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(StableHash("/a/b"), StableHash("/a/b"));
  EXPECT_NE(StableHash("/a/b"), StableHash("/a/c"));
  EXPECT_NE(StableHash("/a/b", 1), StableHash("/a/b", 2));
}

}  // namespace
}  // namespace fedfs
