// Blocks read from other nodes' caches on real daemons (label
// "integration"; needs root and /dev/fuse): three fedfsd processes with
// `coopcache` on, a file held on n1 (docs/coopcache.md, "Blocks fetched
// from peers' memory").
//
//  * n2 reads the file (from n1, which records that n2 keeps its blocks);
//    n3 then reads every block from n2's memory one-sidedly: no read of the
//    bytes from n1, and no request to n2's file service at all.
//  * A write on n1 is seen by n3's next read: n1 forgot n2's copies before
//    the write returned, and n3 is not sent to them.
//  * A copy that moved on (n2's cache dropped after n1 named it) is found
//    out by its tag: n3 asks n1 again, which reads the bytes itself.
//  * n2 dies, before n3's read or while n3 reads from its memory: n3 reads
//    the file from n1, without an error.
//  * n1 (the file's node) dies: a read of an uncached block fails clearly.
//  * n2 restarts: its cache is empty and no reader is sent to its earlier
//    copies.
//  * With `coopcache.share: false` every node's cache is its own.
//  * A randomized run: overlapping writes and truncates through any of the
//    three mounts, each followed by reads on all three (whole, and pieces
//    that straddle blocks), every read compared with a model of the file:
//    every read sees the last acknowledged change.
//
// Each test owns a Cluster, which stops the daemons by pid, unmounts and
// removes its temporary directory whatever happens.
#include <fcntl.h>
#include <signal.h>
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

class CoopPeers : public CoopClusterTest {
 protected:
  void SetUp() override { Start(3, kDaemonReads + "coopcache: {size: 64MiB, block: 64KiB}\n"); }
  uint64_t Served(const std::string& id) const {
    auto j = c_.Ctl(id, {"files"});
    EXPECT_TRUE(j.is_object()) << "fedfsctl files failed on " << id;
    return j.is_object() ? j.value("served", uint64_t{0}) : 0;
  }
  void Drop(const std::string& id) {
    auto j = c_.Ctl(id, {"cache", "drop"});
    ASSERT_TRUE(j.is_object());
    ASSERT_EQ(j.value("blocks_used", uint64_t{1}), 0u);
  }
};

TEST_F(CoopPeers, AThirdNodeReadsTheBlocksFromTheSecondNodesMemory) {
  const std::string data = Random(1 << 20, 7);
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 0, data));
  ASSERT_EQ(ReadFile(M("n2", "/f")), data);
  EXPECT_EQ(Stat("n2", "fetched_bytes"), data.size());
  EXPECT_EQ(Stat("n1", "directory_copies"), data.size() / kBlock);
  ASSERT_TRUE(c_.Ctl("n2", {"cache"}).value("shared", false));

  const uint64_t served_n2 = Served("n2");
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
  EXPECT_EQ(Stat("n3", "fetches"), 0u);  // no byte of it read from n1
  EXPECT_EQ(Stat("n3", "remote_hits"), data.size() / kBlock);
  EXPECT_EQ(Stat("n3", "remote_bytes"), data.size());
  EXPECT_EQ(Stat("n3", "tag_misses"), 0u);
  EXPECT_GT(Stat("n1", "redirects"), 0u);
  EXPECT_EQ(Served("n2"), served_n2);  // n2's CPU served no request for it
  // n3 keeps them too now, and a second read through it asks no one.
  const uint64_t hits = Stat("n3", "hits");
  const uint64_t redirects = Stat("n1", "redirects");
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
  EXPECT_GE(Stat("n3", "hits"), hits + data.size() / kBlock);
  EXPECT_EQ(Stat("n1", "redirects"), redirects);
  EXPECT_EQ(Stat("n3", "remote_hits"), data.size() / kBlock);
}

TEST_F(CoopPeers, AWriteOnTheFilesNodeIsSeenThroughTheOtherNodes) {
  std::string data = Random(300000, 8);  // ends within a block
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 0, data));
  ASSERT_EQ(ReadFile(M("n2", "/f")), data);
  ASSERT_GT(Stat("n1", "directory_copies"), 0u);
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 70000, "X"));
  data[70000] = 'X';
  EXPECT_EQ(Stat("n1", "directory_copies"), 0u);  // forgotten before the write returned
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
  ASSERT_EQ(ReadFile(M("n2", "/f")), data);
  // Through n2's mount (a write by a node that keeps copies itself).
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 200000, "YY"));
  data[200000] = data[200001] = 'Y';
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
  ASSERT_EQ(ReadFile(M("n1", "/f")), data);
  ASSERT_EQ(ReadFile(M("n2", "/f")), data);
}

TEST_F(CoopPeers, ACopyThatMovedOnIsFoundOutByItsTag) {
  const std::string data = Random(512 << 10, 9);
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 0, data));
  ASSERT_EQ(ReadFile(M("n2", "/f")), data);
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);  // from n2
  ASSERT_EQ(Stat("n3", "remote_hits"), data.size() / kBlock);
  // n1 still names n2's and n3's frames; both let them go.
  Drop("n2");
  Drop("n3");
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
  EXPECT_GT(Stat("n3", "tag_misses"), 0u);
  EXPECT_EQ(Stat("n3", "remote_hits"), data.size() / kBlock);  // none counted wrongly
  EXPECT_GT(Stat("n3", "fetches"), 0u);  // read by n1 instead
}

// n2, which keeps the blocks n1 would name, dies: n3's read still returns
// the file, from n1 (a copy at a dead node is read from the file's node).
TEST_F(CoopPeers, ACopyAtADeadNodeIsReadFromTheFilesNode) {
  const std::string data = Random(512 << 10, 11);
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 0, data));
  ASSERT_EQ(ReadFile(M("n2", "/f")), data);
  ASSERT_EQ(Stat("n1", "directory_copies"), data.size() / kBlock);
  ASSERT_EQ(c_.Stop("n2", SIGKILL), 128 + SIGKILL);
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
  EXPECT_EQ(Stat("n3", "remote_hits"), 0u);
  EXPECT_EQ(Stat("n3", "fetched_bytes"), data.size());
}

// The node keeping the copies dies while n3 reads from it: n2 is stopped
// first, so that n3's one-sided reads of its memory are in flight and
// unanswered when it is killed. n3's read falls back to the file's node and
// returns the file, no error.
TEST_F(CoopPeers, ACopyAtANodeThatDiesMidFetchIsReadFromTheFilesNode) {
  const std::string data = Random(512 << 10, 12);
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 0, data));
  ASSERT_EQ(ReadFile(M("n2", "/f")), data);
  ASSERT_EQ(Stat("n1", "directory_copies"), data.size() / kBlock);
  const uint64_t errors = Stat("n3", "remote_errors");
  ASSERT_EQ(::kill(c_.pid("n2"), SIGSTOP), 0) << std::strerror(errno);
  std::string got;
  std::thread reader([&] { got = ReadFile(M("n3", "/f")); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(c_.Stop("n2", SIGKILL), 128 + SIGKILL);
  reader.join();
  EXPECT_TRUE(got == data) << "read " << got.size() << " bytes: " << got.substr(0, 40);
  EXPECT_EQ(Stat("n3", "remote_hits"), 0u);
  EXPECT_GT(Stat("n3", "remote_errors"), errors) << "n3 never tried n2's memory";
}

// The file's node dies: a read of a block no node's cache keeps fails with
// a clear error (no hang, no wrong bytes), through a handle opened before.
TEST_F(CoopPeers, TheFilesNodeDiesAReadOfAnUncachedBlockFailsClearly) {
  const std::string data = Random(512 << 10, 13);
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 0, data));
  const int fd = ::open(M("n3", "/f").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::string head(kBlock, '\0');
  ASSERT_EQ(::pread(fd, head.data(), kBlock, 0), static_cast<ssize_t>(kBlock));
  ASSERT_EQ(head, data.substr(0, kBlock));
  ASSERT_EQ(c_.Stop("n1", SIGKILL), 128 + SIGKILL);
  std::string tail(kBlock, '\0');
  errno = 0;
  const ssize_t got = ::pread(fd, tail.data(), kBlock, 6 * kBlock);
  const int err = errno;
  ::close(fd);
  ASSERT_EQ(got, -1) << "read " << got << " bytes of a file whose node is dead";
  EXPECT_TRUE(err == EIO || err == EHOSTDOWN || err == ENOTCONN || err == ETIMEDOUT ||
              err == ECONNRESET || err == ECONNREFUSED || err == ESTALE)
      << std::strerror(err);
}

// A node that restarts comes back with an empty cache, and no reader is
// sent to what its earlier run kept: n3 reads the file right, none of it
// from n2's memory.
TEST_F(CoopPeers, ARestartedNodeStartsEmptyAndIsNeverReadForItsEarlierCopies) {
  const std::string data = Random(512 << 10, 14);
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 0, data));
  ASSERT_EQ(ReadFile(M("n2", "/f")), data);
  ASSERT_EQ(Stat("n1", "directory_copies"), data.size() / kBlock);
  ASSERT_EQ(c_.Stop("n2", SIGKILL), 128 + SIGKILL);
  c_.Start("n2", c_.dir() + "/n2.yaml");
  ASSERT_TRUE(WaitFor(
      [&] {
        return c_.SeesAlive("n2", ids_) && c_.SeesAlive("n1", ids_) && c_.SeesAlive("n3", ids_);
      },
      std::chrono::seconds(30)));
  EXPECT_EQ(Stat("n2", "blocks_used"), 0u);
  EXPECT_TRUE(ReadFile(M("n3", "/f")) == data);
  EXPECT_EQ(Stat("n3", "remote_hits"), 0u);
  EXPECT_EQ(Stat("n3", "fetched_bytes"), data.size());
  EXPECT_TRUE(ReadFile(M("n2", "/f")) == data);  // and n2 reads it anew
}

TEST_F(CoopPeers, RandomWritesAndTruncatesOnThreeNodesAreAlwaysReadBack) {
  std::mt19937_64 rng(20261202);
  std::string model = Random(400000, 10);
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 0, model));
  const std::vector<std::string> nodes{"n1", "n2", "n3"};
  for (const auto& n : nodes) ASSERT_EQ(ReadFile(M(n, "/f")), model) << n;
  for (int step = 0; step < 40; ++step) {
    const std::string& who = nodes[rng() % 3];
    if (rng() % 4 == 0) {
      const size_t size = rng() % 500000;
      ASSERT_EQ(::truncate(M(who, "/f").c_str(), static_cast<off_t>(size)), 0) << who;
      model.resize(size, '\0');
    } else {
      const size_t off = rng() % (model.size() + kBlock);
      const std::string data = Random(1 + rng() % (3 * kBlock), rng());
      ASSERT_TRUE(WriteAt(M(who, "/f"), static_cast<off_t>(off), data)) << who;
      if (model.size() < off + data.size()) model.resize(off + data.size(), '\0');
      model.replace(off, data.size(), data);
    }
    for (const auto& n : nodes) {
      ASSERT_EQ(ReadFile(M(n, "/f")), model) << "step " << step << " read on " << n;
      // A piece that straddles a block, through a new open.
      if (model.size() > kBlock) {
        const size_t off = rng() % (model.size() - kBlock);
        const int fd = ::open(M(n, "/f").c_str(), O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        std::string piece(kBlock, '\0');
        const ssize_t got = ::pread(fd, piece.data(), piece.size(), static_cast<off_t>(off));
        ::close(fd);
        ASSERT_EQ(got, static_cast<ssize_t>(kBlock));
        ASSERT_EQ(piece, model.substr(off, kBlock)) << "step " << step << " piece on " << n;
      }
    }
  }
  // The run went through other nodes' caches, not only through n1.
  EXPECT_GT(Stat("n2", "remote_hits") + Stat("n3", "remote_hits"), 0u);
}

// `coopcache.share: false`: each node's cache is its own; n3 reads
// everything from n1, and n1 keeps no record of copies.
TEST(CoopPeersOff, WithoutSharingEveryMissReadsTheFilesNode) {
  Cluster c;
  std::vector<std::string> ids;
  const std::string e =
      c.StartMounted(3, &ids,
                     kDaemonReads + "coopcache: {size: 64MiB, block: 64KiB, share: false}\n");
  ASSERT_TRUE(e.empty()) << e;
  const std::string data = Random(512 << 10, 12);
  ASSERT_TRUE(WriteAt(c.Mountpoint("n1") + "/f", 0, data));
  ASSERT_EQ(ReadFile(c.Mountpoint("n2") + "/f"), data);
  ASSERT_EQ(ReadFile(c.Mountpoint("n3") + "/f"), data);
  auto n3 = c.Ctl("n3", {"cache"});
  ASSERT_TRUE(n3.is_object());
  EXPECT_FALSE(n3.value("shared", true));
  EXPECT_EQ(n3.value("remote_hits", uint64_t{1}), 0u);
  EXPECT_EQ(n3.value("fetched_bytes", uint64_t{0}), data.size());
  EXPECT_EQ(c.Ctl("n1", {"cache"}).value("directory_copies", uint64_t{1}), 0u);
}

}  // namespace
}  // namespace fedfs::testing
