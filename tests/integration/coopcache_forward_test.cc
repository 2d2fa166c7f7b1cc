// N-chance forwarding on real daemons (label "integration"; needs root and
// /dev/fuse): three fedfsd processes whose caches hold 1 MiB each in 64 KiB
// blocks (docs/coopcache.md, "N-chance forwarding"). n1 holds the files; n2
// has a session with n1 (it read a small file there), so n1 may name it.
//
//  * n3 reads a file four times its cache: the blocks it evicts as the last
//    copy in the federation go, through n1, to n2's cache or n1's own; n3's
//    next read of the file reads some of them from there one-sidedly (some
//    without asking n1: where n3 forwarded them is a hint), all bytes right.
//  * A write on n1 leaves no copy named, the forwarded ones included, and
//    every mount reads the new bytes.
//  * With `coopcache.forward: 0` nothing is forwarded.
//
// Each test owns a Cluster, which stops the daemons by pid, unmounts and
// removes its temporary directory whatever happens.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/integration/coopcache_util.h"
#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

constexpr size_t kBlock = 64 << 10;

class CoopForwardBase : public CoopClusterTest {
 protected:
  // The forwards n3 started have all ended (each told, then forwarded,
  // declined, failed; none left in flight), stable for 300 ms.
  void SettleForwards() {
    uint64_t last = UINT64_MAX;
    ASSERT_TRUE(WaitFor(
        [&] {
          const uint64_t told = Stat("n3", "forward_evictions");
          const uint64_t ended = Stat("n3", "forwards") + Stat("n3", "forward_declined") +
                                 Stat("n3", "forward_errors");
          const bool stable = told == last && ended == told;
          last = told;
          if (!stable) std::this_thread::sleep_for(std::chrono::milliseconds(100));
          return stable;
        },
        std::chrono::seconds(20)));
  }
  // n2 reads a small file of n1: its session there announces its cache.
  void Introduce() {
    const std::string g = Random(kBlock, 1);
    ASSERT_TRUE(WriteAt(M("n1", "/g"), 0, g));
    ASSERT_EQ(ReadFile(M("n2", "/g")), g);
  }
};

class CoopForward : public CoopForwardBase {
 protected:
  void SetUp() override { Start(3, kDaemonReads + "coopcache: {size: 1MiB, block: 64KiB}\n"); }
};

TEST_F(CoopForward, AnEvictedLastCopyLivesOnInAnotherNodesCache) {
  Introduce();
  std::string data = Random(4 << 20, 2);  // 64 blocks, four times a cache
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 0, data));
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
  SettleForwards();
  SCOPED_TRACE("n3: " + c_.Ctl("n3", {"cache"}).dump() + "\nn2: " +
               c_.Ctl("n2", {"cache"}).dump());
  EXPECT_GT(Stat("n3", "forward_evictions"), 0u);
  EXPECT_GT(Stat("n3", "forwards"), 0u);
  EXPECT_GT(Stat("n1", "forward_asked"), 0u);
  // Taken in by n2 or by n1's own cache (the file's node is a target too).
  EXPECT_GT(Stat("n2", "forwarded_in") + Stat("n1", "forwarded_in"), 0u);
  EXPECT_GT(Stat("n1", "directory_copies"), 0u);

  // The next read through n3 finds blocks in the other nodes' memory.
  const uint64_t remote = Stat("n3", "remote_hits");
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
  EXPECT_GT(Stat("n3", "remote_hits"), remote);
  EXPECT_EQ(Stat("n3", "remote_errors"), 0u);
  // Some of them without asking n1: n3 knew where it had forwarded them.
  EXPECT_GT(Stat("n3", "hint_hits"), 0u);

  // A write on n1: no copy is named any more, forwarded ones included.
  SettleForwards();
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 100, "ZZZ"));
  data.replace(100, 3, "ZZZ");
  ASSERT_TRUE(WriteAt(M("n1", "/f"), (3 << 20) + 7, "QQ"));
  data.replace((3 << 20) + 7, 2, "QQ");
  EXPECT_LE(Stat("n1", "directory_files"), 1u);  // /g's block may be left, none of /f
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
  ASSERT_EQ(ReadFile(M("n2", "/f")), data);
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
}

class CoopForwardOff : public CoopForwardBase {
 protected:
  void SetUp() override {
    Start(3, kDaemonReads + "coopcache: {size: 1MiB, block: 64KiB, forward: 0}\n");
  }
};

TEST_F(CoopForwardOff, NothingIsForwarded) {
  Introduce();
  const std::string data = Random(4 << 20, 3);
  ASSERT_TRUE(WriteAt(M("n1", "/f"), 0, data));
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
  EXPECT_GT(Stat("n3", "evictions"), 0u);
  EXPECT_EQ(Stat("n3", "forward_evictions"), 0u);
  EXPECT_EQ(Stat("n2", "forwarded_in"), 0u);
  EXPECT_EQ(Stat("n1", "forward_asked"), 0u);
  ASSERT_EQ(ReadFile(M("n3", "/f")), data);
}

}  // namespace
}  // namespace fedfs::testing
