// fedfs-bench sim's read-remote workload (bench/sim/reads.h): the
// production file-data caches (coopcache/, the facade's cached reads, the
// file service's copies) in the simulation. Every read's bytes are checked
// against the file's pattern: with four reads in flight per node, blocks
// read from other nodes' caches came back as the frame's old block before
// PeerFetch read the tag before the bytes (bad_reads 35 of 3,000); the
// figures move as the cache's design says (cooperation halves the disk
// reads of a working set that fits the federation's memory but no node's);
// N-chance forwarding runs on the simulation's fibers and cuts them further;
// with writers too, every read sees the writes acknowledged before it;
// and one seed gives the same figures (forwarding's choice of node seeded).
#include <gtest/gtest.h>

#include "bench/sim/sim.h"

namespace fedfs::bench {
namespace {

SimOptions Reads(bool coop, uint64_t cache = uint64_t{4} << 20, uint32_t forward = 0) {
  SimOptions o;
  o.nodes = 4;  // node 0 holds the files; three readers
  o.workload = "read-remote";
  o.zipf_s = 0;  // uniform over 128 blocks of 64 KiB: 8 MiB
  o.read_files = 32;
  o.file_bytes = uint64_t{256} << 10;
  o.read_bytes = uint64_t{64} << 10;
  o.cache_bytes = cache;  // 4 MiB each: half the working set, 12 MiB in all
  o.cache_block = uint64_t{64} << 10;
  o.cache_coop = coop;
  o.cache_forward = forward;
  o.concurrency = 4;
  o.ops = 3000;
  o.warmup_ops = 3000;
  return o;
}

TEST(SimCache, EveryReadGetsTheFilesBytesWithCooperation) {
  auto r = RunSim(Reads(true));
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->bad_reads, 0u);
  EXPECT_EQ(r->errors, 0u);
  EXPECT_EQ(r->ops_done, 3000u);
  ASSERT_TRUE(r->cache_measured);
  EXPECT_GT(r->peer_hits, 0u) << "no block was read from another node's cache";
  EXPECT_GT(r->cache_hits, 0u);
  // Every read is a hit here, a block from a peer, or a read at node 0.
  EXPECT_EQ(r->cache_hits + r->peer_hits + r->disk_reads, 3000u);
}

TEST(SimCache, CooperationHalvesTheDiskReads) {
  auto on = RunSim(Reads(true));
  auto off = RunSim(Reads(false));
  ASSERT_TRUE(on && off);
  EXPECT_EQ(off->bad_reads, 0u);
  EXPECT_EQ(off->peer_hits, 0u);
  EXPECT_EQ(off->cache_hits + off->disk_reads, 3000u);
  // Each node alone keeps about half the working set: about half the reads
  // go to node 0's disk. Together the three keep all of it.
  EXPECT_GT(off->disk_reads, 1200u);
  EXPECT_LT(on->disk_reads * 10, off->disk_reads * 6)
      << on->disk_reads << " disk reads with cooperation, " << off->disk_reads << " without";
  EXPECT_LT(on->per_op.at("read").mean_us, off->per_op.at("read").mean_us);
}

TEST(SimCache, WithoutACacheEveryReadGoesToTheFilesNode) {
  auto r = RunSim(Reads(true, 0));
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_FALSE(r->cache_measured);
  EXPECT_EQ(r->bad_reads, 0u);
  EXPECT_EQ(r->disk_reads, 3000u);
  EXPECT_EQ(r->disk_read_bytes, uint64_t{3000} << 16);
}

// N-chance forwarding (on its fibers): the last copy of an evicted block
// goes to another node's cache, so fewer reads reach node 0's disk.
TEST(SimCache, ForwardingKeepsLastCopiesInTheFederation) {
  auto plain = RunSim(Reads(true, uint64_t{2} << 20, 0));
  auto fwd = RunSim(Reads(true, uint64_t{2} << 20, 2));
  ASSERT_TRUE(plain && fwd);
  EXPECT_EQ(fwd->bad_reads, 0u);
  EXPECT_EQ(fwd->errors, 0u);
  EXPECT_EQ(plain->forwarded, 0u);
  EXPECT_GT(fwd->forwarded, 0u);
  EXPECT_LT(fwd->disk_reads, plain->disk_reads);
}

TEST(SimCache, SameSeedSameFigures) {
  auto a = RunSim(Reads(true, uint64_t{4} << 20, 2));
  auto b = RunSim(Reads(true, uint64_t{4} << 20, 2));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->messages, b->messages);
  EXPECT_EQ(a->peer_hits, b->peer_hits);
  EXPECT_EQ(a->tag_misses, b->tag_misses);
  EXPECT_EQ(a->disk_reads, b->disk_reads);
  EXPECT_EQ(a->forwarded, b->forwarded);
  EXPECT_EQ(a->per_op.at("read").p99_us, b->per_op.at("read").p99_us);
}

// 44 reads in flight at node 0, more than its file service has slots:
// they queue for them in simulated time (a wait on a condition variable
// blocked the simulation's one thread until the reads timed out).
TEST(SimCache, ReadersQueueForTheServersSlots) {
  SimOptions o = Reads(false, 0);
  o.nodes = 12;
  o.ops = 2000;
  o.warmup_ops = 0;
  auto r = RunSim(o);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->errors, 0u);
  EXPECT_EQ(r->bad_reads, 0u);
  EXPECT_LT(r->per_op.at("read").p99_us, 100'000.0);
}

// A tenth of the operations write a block: every read must find at least
// the block's last acknowledged version, through each node's own cache,
// peers' memory and forwarded copies. Without the holder's callbacks
// reaching a node that has no mount (the facade wired for its cache), 146
// of 4,486 reads returned a block another node had overwritten; without
// the export root telling the file service of writes, as many.
TEST(SimCache, EveryReadSeesTheWritesAcknowledgedBeforeIt) {
  for (auto [coop, forward] : {std::pair{false, 0u}, std::pair{true, 0u}, std::pair{true, 2u}}) {
    SimOptions o = Reads(coop, uint64_t{2} << 20, forward);
    o.write_percent = 10;
    auto r = RunSim(o);
    ASSERT_TRUE(r) << r.error().ToString();
    SCOPED_TRACE(std::string(coop ? "coop" : "alone") + " forward " + std::to_string(forward));
    EXPECT_EQ(r->bad_reads, 0u);
    EXPECT_EQ(r->errors, 0u);
    ASSERT_TRUE(r->per_op.count("write"));
    EXPECT_GT(r->per_op.at("write").count, 150u);
    EXPECT_GT(r->cache_hits, 0u);
  }
}

TEST(SimCache, BadOptionsRefused) {
  SimOptions o = Reads(true);
  o.nodes = 1;
  EXPECT_EQ(RunSim(o).error().code, EINVAL);
  o = Reads(true);
  o.file_bytes = 100000;  // not a multiple of the read
  EXPECT_EQ(RunSim(o).error().code, EINVAL);
  o = Reads(true);
  o.read_bytes = 12;
  EXPECT_EQ(RunSim(o).error().code, EINVAL);
  o = Reads(true);
  o.cache_bytes = 4096;  // less than a block
  EXPECT_EQ(RunSim(o).error().code, EINVAL);
  o = Reads(true);
  o.zipf_s = -1;
  EXPECT_EQ(RunSim(o).error().code, EINVAL);
  o = Reads(true);
  o.write_percent = 101;
  EXPECT_EQ(RunSim(o).error().code, EINVAL);
}

}  // namespace
}  // namespace fedfs::bench
