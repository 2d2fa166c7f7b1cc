// HolderDirectory (coopcache/holder_directory.h): who keeps which blocks,
// the run of copies a reader is sent to, and never a copy older than the
// file's last change.
#include <gtest/gtest.h>

#include <vector>

#include "coopcache/holder_directory.h"

namespace fedfs::coop {
namespace {

constexpr uint64_t kBlock = 4096;
const FileId kF{1, 10};

std::vector<Frame> Frames(uint32_t first_frame, size_t n, uint64_t tag0) {
  std::vector<Frame> v;
  for (size_t i = 0; i < n; ++i) v.push_back(Frame{first_frame + uint32_t(i), tag0 + i});
  return v;
}

TEST(HolderDirectory, AReaderIsSentToTheRunOfBlocksOthersKeep) {
  HolderDirectory d;
  auto fr = Frames(5, 3, 100);
  std::vector<uint32_t> len{kBlock, kBlock, kBlock};
  ASSERT_TRUE(d.Record(kF, d.Version(kF), /*session=*/7, kBlock, 2, fr, len, false));
  // Blocks 2..4 kept by session 7; a read of 2..5 is sent to 2..4.
  auto got = d.Find(kF, kBlock, 2, 4, /*reader=*/8);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].first, 2u);
  EXPECT_EQ(got[0].second.session, 7u);
  EXPECT_EQ(got[0].second.frame, 5u);
  EXPECT_EQ(got[2].second.tag, 102u);
  // Not to its own copies, not for a block nobody keeps, not with another
  // block size.
  EXPECT_TRUE(d.Find(kF, kBlock, 2, 3, 7).empty());
  EXPECT_TRUE(d.Find(kF, kBlock, 1, 3, 8).empty());
  EXPECT_TRUE(d.Find(kF, 2 * kBlock, 1, 3, 8).empty());
  EXPECT_EQ(d.stats().copies, 3u);
}

// A change of some bytes forgets the copies of the blocks holding them:
// the others are still named; every fetch in flight is refused.
TEST(HolderDirectory, ARangeChangeForgetsItsBlocksCopiesOnly) {
  HolderDirectory d;
  auto fr = Frames(5, 4, 100);
  std::vector<uint32_t> len{kBlock, kBlock, kBlock, kBlock};
  ASSERT_TRUE(d.Record(kF, d.Version(kF), 7, kBlock, 0, fr, len, false));
  const uint64_t before = d.Version(kF);
  d.DropRange(kF, kBlock + 10, kBlock);  // bytes in blocks 1 and 2
  EXPECT_EQ(d.Find(kF, kBlock, 0, 4, 8).size(), 1u);  // block 0 only: the run ends at 1
  EXPECT_TRUE(d.Find(kF, kBlock, 1, 2, 8).empty());
  auto three = d.Find(kF, kBlock, 3, 1, 8);
  ASSERT_EQ(three.size(), 1u);
  EXPECT_EQ(three[0].second.frame, 8u);
  EXPECT_EQ(d.stats().copies, 2u);
  std::vector<uint32_t> one{kBlock};
  EXPECT_FALSE(d.Record(kF, before, 9, kBlock, 0, Frames(1, 1, 500), one, false));
  // A short last block goes with any change: it may have grown the file.
  const FileId g{1, 11};
  std::vector<uint32_t> tail{kBlock, 100};
  ASSERT_TRUE(d.Record(g, d.Version(g), 7, kBlock, 0, Frames(20, 2, 300), tail, false));
  d.DropRange(g, 9 * kBlock, 10);
  EXPECT_EQ(d.Find(g, kBlock, 0, 2, 8).size(), 1u);
  EXPECT_TRUE(d.Find(g, kBlock, 1, 1, 8).empty());
  // A change to the end forgets the file.
  d.DropRange(kF, 2 * kBlock, UINT64_MAX);
  EXPECT_TRUE(d.Find(kF, kBlock, 0, 4, 8).empty());
  EXPECT_EQ(d.stats().copies, 1u);  // g's block 0
}

TEST(HolderDirectory, AFetchOvertakenByAChangeIsNotRecorded) {
  HolderDirectory d;
  const uint64_t v = d.Version(kF);
  d.DropFile(kF);  // the file changed while the bytes were read
  std::vector<uint32_t> len{kBlock};
  EXPECT_FALSE(d.Record(kF, v, 7, kBlock, 0, Frames(0, 1, 1), len, false));
  EXPECT_TRUE(d.Empty());
  ASSERT_TRUE(d.Record(kF, d.Version(kF), 7, kBlock, 0, Frames(0, 1, 1), len, false));
  const uint64_t v2 = d.Version(kF);
  d.DropFile(kF);
  EXPECT_TRUE(d.Find(kF, kBlock, 0, 1, 8).empty());  // forgotten
  EXPECT_NE(d.Version(kF), v2);                     // and its version moved
  EXPECT_FALSE(d.Record(kF, v2, 9, kBlock, 0, Frames(0, 1, 1), len, false));
}

TEST(HolderDirectory, TheRunEndsWhereTheFileEnds) {
  HolderDirectory d;
  std::vector<uint32_t> len{kBlock, 100, 0};
  ASSERT_TRUE(d.Record(kF, d.Version(kF), 7, kBlock, 0, Frames(0, 3, 1), len, false));
  EXPECT_EQ(d.stats().blocks, 2u);  // the block past the end is not kept
  auto got = d.Find(kF, kBlock, 0, 3, 8);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].second.length, 100u);
}

TEST(HolderDirectory, CopiesAreBoundedReplacedAndForgottenWithTheirSession) {
  HolderDirectory d;
  std::vector<uint32_t> len{kBlock};
  for (uint64_t s = 1; s <= HolderDirectory::kCopiesPerBlock + 2; ++s) {
    ASSERT_TRUE(d.Record(kF, d.Version(kF), s, kBlock, 0, Frames(uint32_t(s), 1, s), len, false));
  }
  EXPECT_EQ(d.stats().copies, HolderDirectory::kCopiesPerBlock);
  // The newest copy other than the reader's.
  EXPECT_EQ(d.Find(kF, kBlock, 0, 1, 99)[0].second.session, HolderDirectory::kCopiesPerBlock + 2);
  EXPECT_EQ(d.Find(kF, kBlock, 0, 1, HolderDirectory::kCopiesPerBlock + 2)[0].second.session,
            HolderDirectory::kCopiesPerBlock + 1);
  // A session keeps one copy per block: its new frame replaces its old one.
  ASSERT_TRUE(d.Record(kF, d.Version(kF), 6, kBlock, 0, Frames(40, 1, 40), len, false));
  EXPECT_EQ(d.stats().copies, HolderDirectory::kCopiesPerBlock);
  EXPECT_EQ(d.Find(kF, kBlock, 0, 1, 99)[0].second.frame, 40u);
  // replace: a reader found a copy wrong; only its own stays.
  ASSERT_TRUE(d.Record(kF, d.Version(kF), 3, kBlock, 0, Frames(9, 1, 9), len, true));
  EXPECT_EQ(d.stats().copies, 1u);
  d.DropSession(3);
  EXPECT_TRUE(d.Empty());
  EXPECT_EQ(d.stats().blocks, 0u);
}

TEST(HolderDirectory, NothingIsRecordedPastItsBound) {
  HolderDirectory d(/*max_blocks=*/2);
  std::vector<uint32_t> len{kBlock, kBlock, kBlock};
  ASSERT_TRUE(d.Record(kF, d.Version(kF), 7, kBlock, 0, Frames(0, 3, 1), len, false));
  EXPECT_EQ(d.stats().blocks, 2u);
  EXPECT_EQ(d.Find(kF, kBlock, 0, 3, 8).size(), 2u);
}

// N-chance forwarding: an eviction forgets the copy; only the last current
// copy is worth forwarding, and the version it hands out records the
// forwarded copy only while the file did not change.
TEST(HolderDirectory, AnEvictionOfTheLastCopySaysSoAndItsVersionRecordsTheForward) {
  HolderDirectory d;
  std::vector<uint32_t> len{kBlock};
  ASSERT_TRUE(d.Record(kF, d.Version(kF), 7, kBlock, 3, Frames(5, 1, 100), len, false));
  ASSERT_TRUE(d.Record(kF, d.Version(kF), 8, kBlock, 3, Frames(9, 1, 200), len, false));
  // A copy with a tag the directory never had is not forgotten, not last.
  EXPECT_FALSE(d.Evict(kF, 7, kBlock, 3, 5, 999).last);
  EXPECT_EQ(d.stats().copies, 2u);
  // Session 7's goes; 8's is left: not the last.
  EXPECT_FALSE(d.Evict(kF, 7, kBlock, 3, 5, 100).last);
  EXPECT_EQ(d.stats().copies, 1u);
  auto ev = d.Evict(kF, 8, kBlock, 3, 9, 200);
  EXPECT_TRUE(ev.last);
  EXPECT_EQ(d.stats().copies, 0u);
  // The forward lands at session 9 under that version, and is named.
  ASSERT_TRUE(d.Record(kF, ev.version, 9, kBlock, 3, Frames(1, 1, 300), len, false));
  auto got = d.Find(kF, kBlock, 3, 1, 7);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].second.session, 9u);
  EXPECT_EQ(got[0].second.tag, 300u);
}

TEST(HolderDirectory, AForwardOvertakenByAChangeIsNotRecorded) {
  HolderDirectory d;
  std::vector<uint32_t> len{kBlock};
  ASSERT_TRUE(d.Record(kF, d.Version(kF), 7, kBlock, 0, Frames(5, 1, 100), len, false));
  auto ev = d.Evict(kF, 7, kBlock, 0, 5, 100);
  ASSERT_TRUE(ev.last);
  d.DropFile(kF);  // the file changed while the block was on its way
  EXPECT_FALSE(d.Record(kF, ev.version, 9, kBlock, 0, Frames(1, 1, 300), len, false));
  EXPECT_TRUE(d.Find(kF, kBlock, 0, 1, 7).empty());
  // A copy evicted after a change (the holder forgot it) is not last: its
  // bytes may be older than the change.
  ASSERT_TRUE(d.Record(kF, d.Version(kF), 7, kBlock, 0, Frames(5, 1, 101), len, false));
  d.DropFile(kF);
  EXPECT_FALSE(d.Evict(kF, 7, kBlock, 0, 5, 101).last);
}

}  // namespace
}  // namespace fedfs::coop
