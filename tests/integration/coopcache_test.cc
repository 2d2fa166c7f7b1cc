// The file-data cache on real daemons (label "integration"; needs root and
// /dev/fuse): two fedfsd processes with `coopcache` on, a file held on n2
// read through n1's mount (docs/coopcache.md, "What runs today").
//
//  * A second read of a remote file, through a new open, reads nothing from
//    its node: every block is a hit in n1's cache.
//  * A write on the file's node (through its mount, or by a local program in
//    its export root) is seen by n1's next read: the node told n1 before the
//    write returned, and the blocks went.
//  * n1's own writes and truncates are read back; `fedfsctl cache drop`
//    empties the cache.
//  * A randomized run: writes on either node, each followed by reads on
//    both, every read compared with a model of the file.
//
// Each test owns a Cluster, which stops the daemons by pid, unmounts and
// removes its temporary directory whatever happens.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/coopcache_util.h"
#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

constexpr size_t kBlock = 64 << 10;

class CoopCache : public CoopClusterTest {
 protected:
  void SetUp() override { Start(2, kDaemonReads + "coopcache: {size: 64MiB, block: 64KiB}\n"); }
  // n2's export-root watcher reports a write through n2's mount too, a batch
  // window (20 ms) or more later; a report that reaches n1 while it reads
  // drops n1's blocks of the file (a change it is told of), and that refetch
  // is right but not what a test that counts fetches counts (3 failures in
  // full test runs: 8.5 and 8.3 of 8 MiB fetched; 1.25 of 1 MiB). Waited
  // out before such a read.
  static void WaitOutWatcher() { std::this_thread::sleep_for(std::chrono::milliseconds(500)); }
};

TEST_F(CoopCache, ASecondReadOfARemoteFileReadsNothingFromItsNode) {
  const std::string data = Random(1 << 20, 1);
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 0, data));
  WaitOutWatcher();
  ASSERT_EQ(ReadFile(M("n1", "/f")), data);
  const uint64_t fetches = Stat("n1", "fetches");
  const uint64_t hits = Stat("n1", "hits");
  EXPECT_GT(fetches, 0u);
  EXPECT_EQ(Stat("n1", "fetched_bytes"), data.size());
  EXPECT_EQ(Stat("n1", "blocks_used"), data.size() / kBlock);
  ASSERT_EQ(ReadFile(M("n1", "/f")), data);
  EXPECT_EQ(Stat("n1", "fetches"), fetches);  // no read reached n2
  EXPECT_GE(Stat("n1", "hits"), hits + data.size() / kBlock);
  // The holder reads its own file from its page cache, not from this one.
  ASSERT_EQ(ReadFile(M("n2", "/f")), data);
  EXPECT_EQ(Stat("n2", "puts"), 0u);
  // Dropped: read from n2 again.
  auto j = c_.Ctl("n1", {"cache", "drop"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.value("blocks_used", uint64_t{1}), 0u);
  EXPECT_EQ(j.value("clears", uint64_t{0}), 1u);
  ASSERT_EQ(ReadFile(M("n1", "/f")), data);
  EXPECT_GT(Stat("n1", "fetches"), fetches);
}

TEST_F(CoopCache, AWriteOnTheFilesNodeIsSeenByTheNextRead) {
  std::string data = Random(300000, 2);  // ends within a block
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 0, data));
  ASSERT_EQ(ReadFile(M("n1", "/f")), data);
  ASSERT_EQ(ReadFile(M("n1", "/f")), data);
  ASSERT_GT(Stat("n1", "hits"), 0u);
  // Through n2's mount: one byte in the middle of a cached block.
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 70000, "X"));
  data[70000] = 'X';
  EXPECT_EQ(ReadFile(M("n1", "/f")), data);
  // Grown by a local program on n2 (autonomy).
  const std::string more = Random(100000, 3);
  ASSERT_TRUE(WriteAt(c_.ExportRoot("n2") + "/f", static_cast<off_t>(data.size()), more));
  data += more;
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {  // the watcher reports within its interval
    seen = ReadFile(M("n1", "/f")) == data;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(seen) << "n1 kept reading the file as it was before the local write";
  EXPECT_GT(Stat("n1", "invalidations"), 0u);
}

TEST_F(CoopCache, ThisNodesOwnWritesAndTruncatesAreReadBack) {
  std::string data = Random(500000, 4);
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 0, data));
  ASSERT_EQ(ReadFile(M("n1", "/f")), data);
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 200000, "hello"));
  data.replace(200000, 5, "hello");
  EXPECT_EQ(ReadFile(M("n1", "/f")), data);
  ASSERT_EQ(::truncate(M("n1", "/f").c_str(), 150000), 0) << std::strerror(errno);
  data.resize(150000);
  EXPECT_EQ(ReadFile(M("n1", "/f")), data);
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 0, "new", true));
  EXPECT_EQ(ReadFile(M("n1", "/f")), "new");
  EXPECT_EQ(ReadFile(M("n2", "/f")), "new");
}

// Writes of random ranges (growing the file at times) through either node,
// each followed by whole-file reads through both, twice: every read is the
// model.
TEST_F(CoopCache, RandomWritesOnBothNodesAreAlwaysReadBack) {
  std::mt19937_64 rng(5);
  std::string model = Random(400000, 6);
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 0, model));
  for (int step = 0; step < 40; ++step) {
    const std::string& by = ids_[rng() % 2];
    const size_t off = rng() % (model.size() + 10000);
    const std::string piece = Random(1 + rng() % 150000, 100 + static_cast<uint64_t>(step));
    ASSERT_TRUE(WriteAt(M(by, "/f"), static_cast<off_t>(off), piece));
    if (off > model.size()) model.resize(off, '\0');
    if (off + piece.size() > model.size()) model.resize(off + piece.size());
    model.replace(off, piece.size(), piece);
    for (int twice = 0; twice < 2; ++twice) {  // the second from the cache
      for (const auto& id : ids_) {
        ASSERT_EQ(ReadFile(M(id, "/f")), model) << "step " << step << " read on " << id
                                                << " after a write on " << by;
      }
    }
  }
  EXPECT_GT(Stat("n1", "hits"), 0u);
}

// A sequential read of a remote file: the kernel's read-ahead sends large
// reads (about a megabyte each here), each fetched from the file's node in
// one request. Past its first 4 MiB (`coopcache.stream_after`) the stream
// goes past the cache (docs/coopcache.md, "Sequential reads"): its reads
// are counted as streamed, the cache keeps what the stream read before
// (a second read through a new open takes that from it), and a write on
// the file's node into the streamed part is read back. A read the cache
// takes fetches whole blocks, so where a streamed read follows a cached one
// that did not end at a block, a block's bytes may be read twice: at most a
// megabyte in all here (the read-ahead's reads end at blocks but for a few
// that the reader's own reads ask for).
TEST_F(CoopCache, ASequentialReadFetchesLargeRunsAndNoBlockTwice) {
  constexpr uint64_t kSlack = 1 << 20;
  std::string data = Random(8 << 20, 6);
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 0, data));
  WaitOutWatcher();
  EXPECT_TRUE(ReadFile(M("n1", "/f")) == data);
  const uint64_t fetched = Stat("n1", "fetched_bytes"), streamed = Stat("n1", "streamed_bytes");
  EXPECT_GE(fetched + streamed, data.size());
  EXPECT_LE(fetched + streamed, data.size() + kSlack);
  EXPECT_GE(fetched, 4u << 20);  // every read before the stream had 4 MiB
  EXPECT_GT(streamed, 0u);
  EXPECT_LE(Stat("n1", "fetches") + Stat("n1", "streamed"), 16u);  // 64 KiB blocks: 128 alone
  const uint64_t cached = Stat("n1", "bytes_used");
  EXPECT_LE(cached, fetched);
  // Read again (the kernel drops its pages at open here): what the cache
  // holds from it, the rest from the file's node.
  const uint64_t hits = Stat("n1", "hits");
  EXPECT_TRUE(ReadFile(M("n1", "/f")) == data);
  const uint64_t again = Stat("n1", "fetched_bytes") + Stat("n1", "streamed_bytes") - fetched - streamed;
  EXPECT_GT(Stat("n1", "hits"), hits);
  EXPECT_LE(again, data.size() - cached + kSlack);
  ASSERT_TRUE(WriteAt(M("n2", "/f"), (6 << 20) + 5, "streamed"));
  data.replace((6 << 20) + 5, 8, "streamed");
  EXPECT_TRUE(ReadFile(M("n1", "/f")) == data);
}

// With `stream_after: 0` every block of the same read goes to the cache.
class CoopCacheNoStreams : public CoopCache {
 protected:
  void SetUp() override {
    Start(2, kDaemonReads + "coopcache: {size: 64MiB, block: 64KiB, stream_after: 0}\n");
  }
};

TEST_F(CoopCacheNoStreams, ASequentialReadIsCachedWhole) {
  const std::string data = Random(8 << 20, 7);
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 0, data));
  WaitOutWatcher();
  EXPECT_TRUE(ReadFile(M("n1", "/f")) == data);
  EXPECT_EQ(Stat("n1", "fetched_bytes"), data.size());
  EXPECT_EQ(Stat("n1", "streamed"), 0u);
  EXPECT_EQ(Stat("n1", "bytes_used"), data.size());
}

// Memory pressure (coopcache/memory_guard.h): told to keep more memory
// available than the machine has, the cache gives all of its memory back
// within a few checks, and reads of remote files go on, right, uncached.
class CoopCachePressure : public CoopCache {
 protected:
  void SetUp() override {
    Start(2, kDaemonReads + "coopcache: {size: 64MiB, block: 64KiB, min_free: 1024TiB}\n");
  }
};

TEST_F(CoopCachePressure, TheCacheGivesItsMemoryBackAndReadsGoOn) {
  ASSERT_TRUE(WaitFor([&] { return Stat("n1", "limit_bytes") == 0; }, std::chrono::seconds(10)));
  EXPECT_GT(Stat("n1", "pressure_shrinks"), 0u);
  EXPECT_EQ(Stat("n1", "min_free_bytes"), uint64_t{1} << 50);
  const std::string data = Random(1 << 20, 5);
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 0, data));
  ASSERT_EQ(ReadFile(M("n1", "/f")), data);
  ASSERT_EQ(ReadFile(M("n1", "/f")), data);
  EXPECT_EQ(Stat("n1", "blocks_used"), 0u);
  EXPECT_EQ(Stat("n1", "hits"), 0u);
  EXPECT_GT(Stat("n1", "fetches"), 0u);
}

}  // namespace
}  // namespace fedfs::testing
