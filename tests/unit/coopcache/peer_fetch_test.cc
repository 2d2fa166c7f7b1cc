// PeerFetch (coopcache/peer_fetch.h) over the fake network: a block read
// from a peer's registered cache, and every way the copy can be wrong found
// out: the peer reused the frame (before the read, or between the two gets,
// in either order: the races forced with the test hook), a frame published
// only after its bytes were read (its old bytes under the new tag: the race
// the simulator's read-remote workload found), a tag never published, a copy
// outside the peer's regions, a peer that is gone.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "coopcache/block_cache.h"
#include "coopcache/peer_fetch.h"
#include "m2m/fake_network.h"

namespace fedfs::coop {
namespace {

constexpr size_t kBlock = 4096;
using std::chrono::seconds;

struct Node {
  std::unique_ptr<m2m::Transport> t;
  std::string addr;
  std::unique_ptr<BlockCache> cache;
  std::unique_ptr<PeerFetch> peers;
};

Node MakeNode(m2m::FakeNetwork& net, const std::string& name, size_t blocks) {
  Node n;
  m2m::TransportOptions o;
  o.cluster_key.assign(32, std::byte{'k'});
  n.t = net.NewTransport(o);
  auto a = n.t->Listen(name);
  EXPECT_TRUE(a);
  n.addr = *a;
  auto c = BlockCache::Create({blocks * kBlock, kBlock, 25});
  EXPECT_TRUE(c);
  n.cache = std::move(*c);
  auto p = PeerFetch::Create(n.cache.get(), n.t.get(), seconds(5));
  EXPECT_TRUE(p) << p.error().ToString();
  n.peers = std::move(*p);
  return n;
}

// Publishes block (file, index) of `fill` at `n`; the copy a holder would name.
PeerCopy Keep(Node& n, uint64_t file, uint64_t index, uint8_t fill, uint32_t length = kBlock) {
  auto s = n.cache->Reserve(file, index, n.cache->Generation(file));
  EXPECT_TRUE(s);
  std::vector<std::byte> b(length, std::byte{fill});
  EXPECT_TRUE(n.cache->Publish(*s, file, index, n.cache->Generation(file), b, 0));
  return PeerCopy{n.addr, n.peers->data_region(), n.peers->tags_region(), kBlock, s->frame,
                  s->tag, length};
}

class PeerFetchTest : public ::testing::Test {
 protected:
  m2m::FakeNetwork net;
  Node a = MakeNode(net, "a", 4);
  Node c = MakeNode(net, "c", 1);  // one frame: any new block reuses it
  std::vector<std::byte> dst = std::vector<std::byte>(kBlock);
};

TEST_F(PeerFetchTest, ABlockIsReadFromThePeersMemory) {
  PeerCopy copy = Keep(c, 1, 0, 0x5a, 1000);
  ASSERT_TRUE(a.peers->Fetch(copy, dst.data()));
  EXPECT_EQ(dst[0], std::byte{0x5a});
  EXPECT_EQ(dst[999], std::byte{0x5a});
  EXPECT_EQ(dst[1000], std::byte{0});  // only the copy's length
  auto s = a.peers->stats();
  EXPECT_EQ(s.remote_hits, 1u);
  EXPECT_EQ(s.remote_bytes, 1000u);
  EXPECT_EQ(s.tag_misses, 0u);
}

TEST_F(PeerFetchTest, AFrameReusedBeforeTheReadIsFoundOut) {
  PeerCopy copy = Keep(c, 1, 0, 0x11);
  Keep(c, 2, 0, 0x22);  // evicts block (1, 0): the frame now holds another block
  auto st = a.peers->Fetch(copy, dst.data());
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ESTALE);
  EXPECT_EQ(a.peers->stats().tag_misses, 1u);
  EXPECT_EQ(a.peers->stats().remote_hits, 0u);
}

TEST_F(PeerFetchTest, AFrameReusedBetweenTheBytesAndTheTrailerIsFoundOut) {
  PeerCopy copy = Keep(c, 1, 0, 0x11);
  a.peers->SetBetweenGetsHookForTest(false, [&] { Keep(c, 2, 0, 0x22); });
  auto st = a.peers->Fetch(copy, dst.data());
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ESTALE);
  // Without the hook a copy of what the frame holds now reads fine, and one
  // naming another tag does not.
  a.peers->SetBetweenGetsHookForTest(false, nullptr);
  PeerCopy now = Keep(c, 3, 0, 0x33);
  ASSERT_TRUE(a.peers->Fetch(now, dst.data()));
  EXPECT_EQ(dst[0], std::byte{0x33});
  now.tag = copy.tag;
  EXPECT_EQ(a.peers->Fetch(now, dst.data()).error().code, ESTALE);
}

// The trailer read first still names the old block; the bytes read after
// the reuse are the new one's. Only the check can tell.
TEST_F(PeerFetchTest, AFrameReusedBetweenTheTrailerAndTheBytesIsFoundOut) {
  PeerCopy copy = Keep(c, 1, 0, 0x11);
  a.peers->SetBetweenGetsHookForTest(true, [&] { Keep(c, 2, 0, 0x22); });
  auto st = a.peers->Fetch(copy, dst.data());
  a.peers->SetBetweenGetsHookForTest(true, nullptr);
  ASSERT_FALSE(st) << "read another block's bytes (0x" << std::hex << static_cast<int>(dst[0])
                   << ") under the old tag";
  EXPECT_EQ(st.error().code, ESTALE);
  EXPECT_EQ(a.peers->stats().tag_misses, 1u);
}

// A rewrite caught half done: the trailer of the old block, bytes partly
// the old block's and partly another's.
TEST_F(PeerFetchTest, BytesTornByARewriteAreFoundOut) {
  PeerCopy copy = Keep(c, 1, 0, 0x11);
  a.peers->SetBetweenGetsHookForTest(true, [&] {
    std::memset(c.cache->arena().data() + size_t{copy.frame} * kBlock + kBlock / 2, 0x22, 64);
  });
  auto st = a.peers->Fetch(copy, dst.data());
  a.peers->SetBetweenGetsHookForTest(true, nullptr);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ESTALE);
}

// A holder names a reader's frame as soon as the reader asks for the block,
// before the bytes are there. Another reader that reads the frame's bytes
// then (the frame's old block) and its tag after the publish must not take
// the old bytes for the new block.
TEST_F(PeerFetchTest, AFramePublishedAfterItsBytesWereReadIsFoundOut) {
  Keep(c, 1, 0, 0x11);
  c.cache->Clear();  // the frame's bytes stay 0x11: its next block lands over them
  auto s = c.cache->Reserve(2, 0, c.cache->Generation(2));
  ASSERT_TRUE(s);
  PeerCopy early{c.addr, c.peers->data_region(), c.peers->tags_region(), kBlock, s->frame, s->tag,
                 kBlock};
  bool published = false;
  auto publish = [&] {
    std::vector<std::byte> b(kBlock, std::byte{0x22});
    EXPECT_TRUE(c.cache->Publish(*s, 2, 0, c.cache->Generation(2), b, 0));
    published = true;
  };
  a.peers->SetBetweenGetsHookForTest(false, publish);  // the bytes, the publish, the trailer
  auto st = a.peers->Fetch(early, dst.data());
  a.peers->SetBetweenGetsHookForTest(false, nullptr);
  ASSERT_FALSE(st) << "read the frame's old bytes (0x" << std::hex
                   << static_cast<int>(dst[0]) << ") as the new block";
  EXPECT_EQ(st.error().code, ESTALE);
  // Once published, the same copy reads the new bytes.
  if (!published) publish();  // the fetch gave up before the bytes
  ASSERT_TRUE(a.peers->Fetch(early, dst.data()));
  EXPECT_EQ(dst[0], std::byte{0x22});
}

TEST_F(PeerFetchTest, AnInvalidatedOrClearedCopyIsFoundOut) {
  PeerCopy copy = Keep(c, 1, 0, 0x11);
  c.cache->Clear();  // the frame is freed: tag 0
  EXPECT_EQ(a.peers->Fetch(copy, dst.data()).error().code, ESTALE);
  // A reserved frame not yet published: its tag is 0 until then.
  auto s = c.cache->Reserve(3, 0, c.cache->Generation(3));
  ASSERT_TRUE(s);
  PeerCopy early{c.addr, c.peers->data_region(), c.peers->tags_region(), kBlock, s->frame, s->tag,
                 kBlock};
  EXPECT_EQ(a.peers->Fetch(early, dst.data()).error().code, ESTALE);
  c.cache->Abandon(*s);
}

TEST_F(PeerFetchTest, ACopyOutsideThePeersRegionsIsRefused) {
  PeerCopy copy = Keep(c, 1, 0, 0x11);
  PeerCopy bad = copy;
  bad.frame = 7;  // c has one frame
  EXPECT_EQ(a.peers->Fetch(bad, dst.data()).error().code, EPROTO);
  bad = copy;
  bad.length = kBlock + 1;
  EXPECT_EQ(a.peers->Fetch(bad, dst.data()).error().code, EPROTO);
  bad = copy;
  bad.block_size = 0;
  EXPECT_EQ(a.peers->Fetch(bad, dst.data()).error().code, EPROTO);
  EXPECT_EQ(a.peers->stats().remote_errors, 3u);
}

TEST_F(PeerFetchTest, APeerThatIsGoneIsAnErrorNotAHang) {
  PeerCopy copy = Keep(c, 1, 0, 0x11);
  ASSERT_TRUE(a.peers->Fetch(copy, dst.data()));
  c.peers.reset();
  c.t->Shutdown();
  auto st = a.peers->Fetch(copy, dst.data());
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().code, ESTALE);
  EXPECT_GE(a.peers->stats().remote_errors, 1u);
}

}  // namespace
}  // namespace fedfs::coop
