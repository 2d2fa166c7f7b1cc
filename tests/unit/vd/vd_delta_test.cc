// Changes of a directory told to the nodes that hold a whole copy of it as
// deltas (docs/namespace.md, "Changes as deltas"; vd/vd_delta.cc,
// DirTable::ApplyDelta).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "common/rpc_methods.h"
#include "vd/vd_service.h"
#include "vd_federation.h"

namespace fedfs::ns {
namespace {

using namespace vd_test;

// Changes as deltas (docs/namespace.md): the manager sends each whole-copy
// sharer the change before it answers; the sharers patch their copies,
// which stay valid (no refetch) and show the change, and stay recorded for
// the next one. A copy left unread for DirTable::kMaxUnusedDeltas deltas
// is dropped, and its node forgotten.
TEST(DirTable, SharersApplyChangesAsDeltasBeforeTheAcknowledgement) {
  Federation f(5);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (int i : {1, 2, 3}) ASSERT_TRUE(f.Get(i, p));
  std::optional<Status> done;
  std::vector<uint64_t> applied_at_ack;
  f.fs(4).AddFile(p + "/x");
  f.svc(4).Update(p, Add("n4", "x"), [&](Status s) {
    done = std::move(s);
    for (int i : {1, 2, 3}) applied_at_ack.push_back(f.svc(i).stats().dt.deltas_applied);
  });
  f.net().RunUntilIdle();
  ASSERT_TRUE(done && *done);
  EXPECT_EQ(applied_at_ack, (std::vector<uint64_t>{1, 1, 1}));
  EXPECT_EQ(f.svc(0).stats().invalidations_sent, 0u);  // no bump
  EXPECT_EQ(f.svc(0).stats().deltas_sent, 3u);
  EXPECT_EQ(f.svc(0).stats().deltas_kept, 3u);
  EXPECT_EQ(f.svc(0).stats().sharer_records, 3u);
  for (int i : {1, 2, 3}) {
    f.net().ResetStats();
    auto vd = f.Get(i, p);
    ASSERT_TRUE(vd);
    EXPECT_EQ(NameSet(**vd).count("x"), 1u) << i;
    EXPECT_EQ(f.net().TotalStats().messages_sent, 0u) << i;  // from the patched copy
  }
  // A removal too; then only n1 keeps reading.
  f.fs(4).Remove(p + "/x");
  ASSERT_TRUE(f.Update(4, p, Remove("n4", "x")));
  for (int i : {1, 2, 3}) {
    auto vd = f.Get(i, p);
    ASSERT_TRUE(vd);
    EXPECT_EQ(NameSet(**vd).count("x"), 0u) << i;
  }
  for (uint32_t k = 0; k <= DirTable::kMaxUnusedDeltas; ++k) {
    const std::string n = "y" + std::to_string(k);
    f.fs(4).AddFile(p + "/" + n);
    ASSERT_TRUE(f.Update(4, p, Add("n4", n)));
    ASSERT_TRUE(f.Get(1, p));
  }
  EXPECT_EQ(f.svc(0).stats().sharer_records, 1u);  // n2 and n3 dropped theirs
  EXPECT_EQ(f.svc(2).stats().dt.deltas_refused, 1u);
  f.net().ResetStats();
  auto vd = f.Get(2, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ(NameSet(**vd).count("y0"), 1u);
  EXPECT_EQ(f.Requests(kVdGet), 1u);  // fetched again
}

// A delta that finds no valid copy (gone stale, or a fetch on its way) is
// kept for the next fetch, up to DirTable::kMaxQueuedDeltas; past that the
// node is dropped. Either way its next fetch sees every change.
TEST(DirTable, ADeltaThatFindsNoValidCopyIsQueuedThenRefused) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  f.svc(1).ForgetCached(p);  // as if bumped meanwhile
  f.fs(2).AddFile(p + "/x");
  ASSERT_TRUE(f.Update(2, p, Add("n2", "x")));
  EXPECT_EQ(f.svc(1).stats().dt.deltas_queued, 1u);
  EXPECT_EQ(f.svc(0).stats().deltas_kept, 1u);
  f.net().ResetStats();
  auto vd = f.Get(1, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ(NameSet(**vd).count("x"), 1u);
  EXPECT_EQ(f.Requests(kVdGet), 1u);
  f.net().ResetStats();
  ASSERT_TRUE(f.Get(1, p));
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);  // valid again
  f.svc(1).ForgetCached(p);
  for (size_t k = 0; k <= DirTable::kMaxQueuedDeltas; ++k) {
    const std::string n = "q" + std::to_string(k);
    f.fs(2).AddFile(p + "/" + n);
    ASSERT_TRUE(f.Update(2, p, Add("n2", n)));
  }
  EXPECT_EQ(f.svc(1).stats().dt.deltas_refused, 1u);
  EXPECT_EQ(f.svc(0).stats().sharer_records, 0u);
  auto all = f.Get(1, p);
  ASSERT_TRUE(all);
  EXPECT_EQ(NameSet(**all).count("q0"), 1u);
  EXPECT_EQ(NameSet(**all).count("q" + std::to_string(DirTable::kMaxQueuedDeltas)), 1u);
}

// A change while a node's fetch is on its way (its delta queued, or in the
// VD fetched): the node sees it after.
TEST(DirTable, AChangeDuringAFetchIsSeenAfterIt) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  f.svc(1).ForgetCached(p);
  std::optional<Result<VdPtr>> got;
  f.svc(1).Get(p, [&](Result<VdPtr> r) { got = std::move(r); });
  f.fs(2).AddFile(p + "/x");
  std::optional<Status> added;
  f.svc(2).Update(p, Add("n2", "x"), [&](Status s) { added = std::move(s); });
  f.net().RunUntilIdle();
  ASSERT_TRUE(got && *got);
  ASSERT_TRUE(added && *added);
  auto vd = f.Get(1, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ(NameSet(**vd).count("x"), 1u);
}

// A directory that more nodes hold whole than max_delta_sharers: its changes
// go as bumps (each sharer then asks again, by name when it keeps changing),
// not as a delta to every sharer.
TEST(DirTable, ManyWholeSharersAreBumpedNotSentDeltas) {
  VdServiceOptions o;
  o.max_delta_sharers = 2;
  Federation f(5, o);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (int i : {1, 2, 3}) ASSERT_TRUE(f.Get(i, p));
  f.fs(4).AddFile(p + "/x");
  ASSERT_TRUE(f.Update(4, p, Add("n4", "x")));
  EXPECT_EQ(f.svc(0).stats().deltas_sent, 0u);
  EXPECT_EQ(f.svc(0).stats().invalidations_sent, 3u);
  for (int i : {1, 2, 3}) {
    auto vd = f.Get(i, p);
    ASSERT_TRUE(vd);
    EXPECT_EQ(NameSet(**vd).count("x"), 1u) << i;
  }
  // Two whole sharers now (n1, n2 fetched again; n3 too): still past the
  // bound of 2 with three, so bumps again.
  f.fs(4).AddFile(p + "/y");
  ASSERT_TRUE(f.Update(4, p, Add("n4", "y")));
  EXPECT_EQ(f.svc(0).stats().deltas_sent, 0u);
  // With two, deltas.
  ASSERT_TRUE(f.Get(1, p));
  ASSERT_TRUE(f.Get(2, p));
  f.fs(4).AddFile(p + "/z");
  ASSERT_TRUE(f.Update(4, p, Add("n4", "z")));
  EXPECT_EQ(f.svc(0).stats().deltas_sent, 2u);
}

}  // namespace
}  // namespace fedfs::ns
