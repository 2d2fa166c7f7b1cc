// Changes of a directory told to the nodes that hold a whole copy of it as
// deltas (docs/namespace.md, "Changes as deltas"; vd/vd_delta.cc,
// DirTable::ApplyDelta).
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/rpc_methods.h"
#include "vd/dir_table.h"
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
  Federation f(5, Deltas());
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
  Federation f(3, Deltas());
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
  Federation f(3, Deltas());
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
  VdServiceOptions o = Deltas();
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

// The table alone (no manager): a copy `version` of `names`, membership
// epoch 1, and the delta that adds `name`.
DirTable::VdPtr CopyOf(uint64_t version, const std::vector<std::string>& names) {
  auto vd = std::make_shared<VirtualDirectory>();
  vd->path = "/d";
  vd->version = version;
  vd->epoch = 1;
  vd->holders = {"n0"};
  for (const auto& n : names) vd->entries.Put(VdEntry{.name = n, .type = 8, .holders = {"n0"}});
  return vd;
}
bool AddDelta(DirTable& dt, uint64_t prev, uint64_t version, const std::string& name) {
  return dt.ApplyDelta("/d", 1, prev, version, {name},
                       {VdEntry{.name = name, .type = 8, .holders = {"n0"}}}, {"n0"});
}

// A fetch while the slot holds a valid copy (a lookup under the other
// kernel key, or during this node's own change) whose answer left the
// manager before a change that then reached the copy as a delta: the older
// answer must not replace the patched copy as valid (the history test saw
// a listing miss a rename for good).
TEST(DirTable, AnAnswerOlderThanADeltaAppliedMeanwhileIsNotKeptValid) {
  auto dt = DirTable::Create({}, nullptr);
  ASSERT_TRUE(dt);
  (*dt)->Install((*dt)->Reserve("/d"), CopyOf(1, {"a"}), 1);
  const DirTable::Ticket t = (*dt)->Reserve("/d");  // refetched under key 2
  ASSERT_TRUE(AddDelta(**dt, 1, 2, "b"));
  (*dt)->Install(t, CopyOf(1, {"a"}), 2);
  for (uint64_t key : {1, 2}) {
    if (auto vd = (*dt)->Find("/d", key)) {
      EXPECT_EQ(NameSet(*vd).count("b"), 1u) << key;
    }
  }
  // A delta that the answer already holds keeps the copy.
  const DirTable::Ticket t2 = (*dt)->Reserve("/d");
  (*dt)->Install(t2, CopyOf(3, {"a", "b", "c"}), 1);
  EXPECT_TRUE(AddDelta(**dt, 2, 3, "c"));
  auto vd = (*dt)->Find("/d", 1);
  ASSERT_TRUE(vd);
  EXPECT_EQ(vd->version, 3u);
}

// A delta for a change after this node's own change arrives while a
// lookup's fetch is on its way (lookups ask the manager during an own
// change): kept for the own change's reply, not lost to the fetch.
TEST(DirTable, ADeltaKeptForAnOwnChangeSurvivesAFetchInstalledMeanwhile) {
  auto dt = DirTable::Create({}, nullptr);
  ASSERT_TRUE(dt);
  (*dt)->Install((*dt)->Reserve("/d"), CopyOf(1, {"a"}), 1);
  (*dt)->BeginOwnChange("/d");                       // adds "b": 1 -> 2
  const DirTable::Ticket t = (*dt)->Reserve("/d");   // a lookup meanwhile
  ASSERT_TRUE(AddDelta(**dt, 2, 3, "c"));            // another node's, after it
  (*dt)->Install(t, CopyOf(2, {"a", "b"}), 1);       // served after the own change
  (*dt)->Patch("/d", 1, 2, {"b"}, {VdEntry{.name = "b", .type = 8, .holders = {"n0"}}},
               std::nullopt, true);
  (*dt)->EndOwnChange("/d");
  auto vd = (*dt)->Find("/d", 1);
  if (vd) {
    EXPECT_EQ(NameSet(*vd), (std::set<std::string>{"a", "b", "c"}));
  }
  // Served before the own change instead: the delta still follows it.
  auto dt2 = DirTable::Create({}, nullptr);
  ASSERT_TRUE(dt2);
  (*dt2)->Install((*dt2)->Reserve("/d"), CopyOf(1, {"a"}), 1);
  (*dt2)->BeginOwnChange("/d");
  const DirTable::Ticket t2 = (*dt2)->Reserve("/d");
  ASSERT_TRUE(AddDelta(**dt2, 2, 3, "c"));
  (*dt2)->Install(t2, CopyOf(1, {"a"}), 1);
  (*dt2)->Patch("/d", 1, 2, {"b"}, {VdEntry{.name = "b", .type = 8, .holders = {"n0"}}},
                std::nullopt, true);
  (*dt2)->EndOwnChange("/d");
  vd = (*dt2)->Find("/d", 1);
  ASSERT_TRUE(vd);  // patched, then the queued delta applied
  EXPECT_EQ(NameSet(*vd), (std::set<std::string>{"a", "b", "c"}));
}

}  // namespace
}  // namespace fedfs::ns
