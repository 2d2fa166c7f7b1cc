// Forwarder (coopcache/forwarder.h): an evicted block goes to its file's
// node, then to the peer it names, then is recorded there; the reader is
// never blocked (a full staging area drops, counted); a block forwarded
// max_recirc times is dropped; a declined or failed step ends the forward.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "coopcache/forwarder.h"

namespace fedfs::coop {
namespace {

constexpr size_t kBlock = 4096;

// Records the three steps; Evict may be held (to fill the staging area) and
// answer a target or none.
class FakePort : public ForwardPort {
 public:
  Result<std::optional<Target>> Evict(const Forward& f) override {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !hold; });
    evicted.push_back(f.index);
    if (fail_evict) return Err(EHOSTDOWN, "gone");
    if (!forward) return std::nullopt;
    return Target{"peer", 77};
  }
  Result<Stored> Store(const std::string& target, const Forward& f) override {
    std::lock_guard lock(mu);
    stored.push_back({target, f.index, f.origin.recirc, f.bytes.size(),
                      f.bytes.empty() ? 0 : static_cast<int>(f.bytes[0])});
    Stored s;
    s.addr = "peer-addr";
    s.frame = 5;
    s.tag = 500 + f.index;
    s.length = static_cast<uint32_t>(f.bytes.size());
    return s;
  }
  Status Moved(const Forward& f, const Target& t, const Stored& at) override {
    std::lock_guard lock(mu);
    moved.push_back({f.index, t.version, at.tag, f.origin.holder});
    return Ok();
  }
  void Release() {
    {
      std::lock_guard lock(mu);
      hold = false;
    }
    cv.notify_all();
  }

  struct StoreCall {
    std::string target;
    uint64_t index;
    uint32_t recirc;
    size_t bytes;
    int first;
  };
  struct MovedCall {
    uint64_t index, version, tag;
    std::string holder;
  };
  std::mutex mu;
  std::condition_variable cv;
  bool hold = false, forward = true, fail_evict = false;
  std::vector<uint64_t> evicted;
  std::vector<StoreCall> stored;
  std::vector<MovedCall> moved;
};

void Evict(Forwarder& fw, uint64_t index, uint32_t recirc, uint8_t fill, uint64_t gen = 9) {
  const Origin o{"holder", 1, 2, recirc};
  std::vector<std::byte> bytes(kBlock, std::byte{fill});
  fw.OnEvict(Evicted{o, /*file=*/44, gen, index, 3, 30, bytes});
}

TEST(Forwarder, AnEvictedLastCopyIsStoredAtThePeerTheHolderNamesAndRecorded) {
  FakePort port;
  Forwarder fw({.max_recirc = 2, .max_pending = 4}, kBlock, &port);
  Evict(fw, 7, 0, 0x5a);
  fw.Drain();
  ASSERT_EQ(port.stored.size(), 1u);
  EXPECT_EQ(port.stored[0].target, "peer");
  EXPECT_EQ(port.stored[0].index, 7u);
  EXPECT_EQ(port.stored[0].bytes, kBlock);
  EXPECT_EQ(port.stored[0].first, 0x5a);  // a copy taken at eviction
  ASSERT_EQ(port.moved.size(), 1u);
  EXPECT_EQ(port.moved[0].version, 77u);  // the holder's version travels back
  EXPECT_EQ(port.moved[0].tag, 507u);     // with where the peer keeps it
  EXPECT_EQ(port.moved[0].holder, "holder");
  EXPECT_EQ(fw.stats().forwarded, 1u);
}

// Where a forwarded block went is a hint for this node's next miss, under
// the generation it had here: used once, void under another generation.
TEST(Forwarder, AForwardLeavesAHintUnderTheBlocksGeneration) {
  FakePort port;
  Hints hints;
  Forwarder fw({.max_recirc = 2, .max_pending = 4, .hints = &hints}, kBlock, &port);
  Evict(fw, 7, 0, 1, /*gen=*/9);
  Evict(fw, 8, 0, 1, /*gen=*/9);
  fw.Drain();
  auto h = hints.Take(44, 7, 9);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->addr, "peer-addr");
  EXPECT_EQ(h->tag, 507u);
  EXPECT_FALSE(hints.Take(44, 7, 9));   // used once
  EXPECT_FALSE(hints.Take(44, 8, 10));  // the file changed here since: void
  EXPECT_FALSE(hints.Take(44, 8, 9));   // and gone
  const auto s = hints.stats();
  EXPECT_EQ(s.recorded, 2u);
  EXPECT_EQ(s.taken, 1u);
  EXPECT_EQ(s.stale, 1u);
}

TEST(Forwarder, ADuplicateOrAFailureEndsTheForward) {
  FakePort port;
  Forwarder fw({.max_recirc = 2, .max_pending = 4}, kBlock, &port);
  port.forward = false;  // not the last copy
  Evict(fw, 1, 0, 1);
  fw.Drain();
  port.forward = true;
  port.fail_evict = true;  // the holder unreachable
  Evict(fw, 2, 0, 1);
  fw.Drain();
  EXPECT_EQ(port.evicted.size(), 2u);
  EXPECT_TRUE(port.stored.empty());
  const auto s = fw.stats();
  EXPECT_EQ(s.declined, 1u);
  EXPECT_EQ(s.errors, 1u);
  EXPECT_EQ(s.forwarded, 0u);
}

TEST(Forwarder, ABlockForwardedEnoughIsDroppedAndTheHolderIsNotAsked) {
  FakePort port;
  Forwarder fw({.max_recirc = 2, .max_pending = 4}, kBlock, &port);
  Evict(fw, 1, 1, 1);  // forwarded once: once more
  Evict(fw, 2, 2, 1);  // forwarded twice: dropped
  fw.Drain();
  ASSERT_EQ(port.stored.size(), 1u);
  EXPECT_EQ(port.stored[0].index, 1u);
  EXPECT_EQ(fw.stats().dropped, 1u);
  EXPECT_EQ(port.evicted.size(), 1u);
}

TEST(Forwarder, EvictionsNeverWaitAFullStagingAreaDropsThem) {
  FakePort port;
  port.hold = true;  // the worker is stuck in its first Evict
  Forwarder fw({.max_recirc = 2, .max_pending = 2}, kBlock, &port);
  for (uint64_t i = 0; i < 10; ++i) Evict(fw, i, 0, 1);  // returns at once
  EXPECT_EQ(fw.stats().dropped, 8u);
  port.Release();
  fw.Drain();
  EXPECT_EQ(port.stored.size(), 2u);
  EXPECT_EQ(fw.stats().forwarded, 2u);
}

TEST(Forwarder, StopDropsWhatIsPending) {
  FakePort port;
  port.hold = true;
  Forwarder fw({.max_recirc = 2, .max_pending = 4}, kBlock, &port);
  Evict(fw, 1, 0, 1);
  Evict(fw, 2, 0, 1);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    port.Release();
  });
  fw.Stop();  // joins once the stuck step returns; the second never runs
  release.join();
  EXPECT_LE(port.evicted.size(), 1u);
  Evict(fw, 3, 0, 1);  // after Stop: dropped
  EXPECT_GE(fw.stats().dropped, 1u);
}

TEST(Hints, AreBoundedTheOldestGoFirst) {
  Hints hints(2);
  hints.Put(1, 0, 5, PeerCopy{.addr = "a"});
  hints.Put(1, 1, 5, PeerCopy{.addr = "b"});
  hints.Put(1, 2, 5, PeerCopy{.addr = "c"});  // (1, 0) goes
  EXPECT_FALSE(hints.Take(1, 0, 5));
  ASSERT_TRUE(hints.Take(1, 2, 5));
  hints.Put(1, 1, 6, PeerCopy{.addr = "d"});  // replaces (1, 1)
  auto h = hints.Take(1, 1, 6);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->addr, "d");
  EXPECT_EQ(hints.stats().entries, 0u);
}

}  // namespace
}  // namespace fedfs::coop
