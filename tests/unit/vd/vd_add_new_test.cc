// kAddNew (vd/vd_service.h, VdChange; VdService::AddNew): a name claimed and
// its entry added in one request to the directory's manager, over the fake
// network in simulated mode (the federation: vd_federation.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>

#include "vd_federation.h"

namespace fedfs::ns {
namespace {

using namespace vd_test;

int Code(const Status& s) { return s ? 0 : s.error().code; }

Result<bool> AddNew(Federation& f, int node, const std::string& dir, const std::string& name,
                    const std::string& on, uint64_t token = 0) {
  std::optional<Result<bool>> out;
  f.svc(node).AddNew(dir, VdChange{VdChange::Kind::kAdd, name, DT_REG, on, token},
                     [&](Result<bool> r) { out = std::move(r); });
  f.net().RunUntilIdle();
  if (!out) return Err(EIO, "never completed");
  return *out;
}

VdChange Held(VdChange::Kind kind, const std::string& name, int node) {
  return VdChange{kind, name, 0, Name(node)};
}

// A change naming a kAddNew's claim token (its release or undo).
VdChange WithToken(VdChange c, uint64_t token) {
  c.id = token;
  return c;
}

VdServiceOptions NoLeases() {
  VdServiceOptions o;
  o.lend_after = 0;
  return o;
}

// A directory managed by n0 on every node (Populate).
std::string PopulatedDir(Federation& f) {
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  return p;
}

// One request: the entry is listed everywhere once the call returns (the
// other node's copy was invalidated first), before the creator has made the
// file; the name stays held by the creator until its release.
TEST(AddNew, TheEntryIsAddedAndHeldInOneRequest) {
  Federation f(3, NoLeases());
  const std::string p = PopulatedDir(f);
  ASSERT_TRUE(f.Get(1, p));  // n1 shares a copy
  ASSERT_TRUE(f.Get(2, p));
  f.net().ResetStats();
  auto r = AddNew(f, 2, p, "new", "n2");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_TRUE(*r);
  EXPECT_EQ(f.Requests(kVdUpdate), 1u);
  EXPECT_EQ(f.Requests(kVdGet), 0u);
  auto seen = f.Get(1, p);
  ASSERT_TRUE(seen);
  ASSERT_NE((*seen)->Find("new"), nullptr);
  EXPECT_EQ((*seen)->Find("new")->holders, std::vector<std::string>{"n2"});
  // The creator's own copy was patched from the reply: no get.
  f.net().ResetStats();
  auto own = f.Get(2, p);
  ASSERT_TRUE(own);
  EXPECT_NE((*own)->Find("new"), nullptr);
  EXPECT_EQ(f.Requests(kVdGet), 0u);
  // Held: another node's lock or create of it waits; it exists for a claim.
  EXPECT_EQ(Code(f.Update(1, p, Held(VdChange::Kind::kLock, "new", 1))), EAGAIN);
  auto again = AddNew(f, 1, p, "new", "n1");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, EEXIST);
  // Made, then released: another node may lock it.
  f.fs(2).AddFile(p + "/new");
  ASSERT_TRUE(f.Update(2, p, Held(VdChange::Kind::kRelease, "new", 2)));
  EXPECT_TRUE(f.Update(1, p, Held(VdChange::Kind::kLock, "new", 1)));
}

// A create that could not make its entry removes it: the name is gone and
// free again.
TEST(AddNew, ARemoveUndoesItAndEndsTheClaim) {
  Federation f(3, NoLeases());
  const std::string p = PopulatedDir(f);
  ASSERT_TRUE(f.Get(1, p));
  auto r = AddNew(f, 2, p, "new", "n2");
  ASSERT_TRUE(r && *r);
  ASSERT_TRUE(f.Update(2, p, Remove("n2", "new")));
  auto seen = f.Get(1, p);
  ASSERT_TRUE(seen);
  EXPECT_EQ((*seen)->Find("new"), nullptr);
  EXPECT_TRUE(f.Update(1, p, Held(VdChange::Kind::kClaim, "new", 1)));
}

// Refused as a claim is: a listed name is EEXIST, a name another node
// claims is EAGAIN; neither adds anything.
TEST(AddNew, RefusedLikeAClaim) {
  Federation f(3, NoLeases());
  const std::string p = PathManagedBy(f, "n1");
  Populate(f, p);
  auto exists = AddNew(f, 0, p, "f2", "n0");
  ASSERT_FALSE(exists);
  EXPECT_EQ(exists.error().code, EEXIST);
  ASSERT_TRUE(f.Update(2, p, Held(VdChange::Kind::kClaim, "x", 2)));
  auto busy = AddNew(f, 0, p, "x", "n0");
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code, EAGAIN);
  auto vd = f.Get(0, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ((*vd)->Find("x"), nullptr);
  EXPECT_EQ((*vd)->Find("f2")->holders, std::vector<std::string>{"n2"});
}

// A node that does not hold the directory (at the manager) gets the claim
// only: the copy that chose it may be stale, and its create may fail; the
// kAdd after the file makes it a holder.
TEST(AddNew, OnANodeWithoutTheDirectoryOnlyClaimed) {
  Federation f(3, NoLeases());
  const std::string p = PathManagedBy(f, "n0");
  f.fs(0).AddDir(p);
  f.fs(1).AddDir(p);
  auto r = AddNew(f, 1, p, "new", "n2");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_FALSE(*r);
  auto vd = f.Get(0, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ((*vd)->Find("new"), nullptr);
  EXPECT_EQ(Code(f.Update(2, p, Held(VdChange::Kind::kLock, "new", 2))), EAGAIN);  // claimed
  f.fs(2).AddDir(p);
  f.fs(2).AddFile(p + "/new");
  ASSERT_TRUE(f.Update(1, p, Add("n2", "new")));
  auto after = f.Get(0, p);
  ASSERT_TRUE(after);
  ASSERT_NE((*after)->Find("new"), nullptr);
  EXPECT_NE(std::find((*after)->holders.begin(), (*after)->holders.end(), "n2"),
            (*after)->holders.end());
}

// The export roots may not have the entry yet while its claim lasts: a VD
// rebuilt meanwhile (evicted, then asked for) still lists it; once the
// claim ends, a rebuild lists what the roots hold.
TEST(AddNew, ARebuildBeforeTheReleaseKeepsTheEntry) {
  VdServiceOptions o = NoLeases();
  o.max_resident_vds = 1;
  Federation f(3, o);
  const std::string p = PathManagedBy(f, "n0");
  const std::string q = PathManagedBy(f, "n0", true, "/e");
  Populate(f, p);
  Populate(f, q);
  auto r = AddNew(f, 1, p, "new", "n1");
  ASSERT_TRUE(r && *r);
  const uint64_t built = f.svc(0).stats().dirmerges;
  ASSERT_TRUE(f.Get(0, q));  // evicts VD(p) at n0
  auto rebuilt = f.Get(0, p);
  ASSERT_TRUE(rebuilt);
  EXPECT_GE(f.svc(0).stats().dirmerges, built + 2);
  ASSERT_NE((*rebuilt)->Find("new"), nullptr) << "the pending entry was lost by the rebuild";
  // Not made after all: removed; a rebuild does not bring it back.
  ASSERT_TRUE(f.Update(1, p, Remove("n1", "new")));
  ASSERT_TRUE(f.Get(0, q));
  auto after = f.Get(0, p);
  ASSERT_TRUE(after);
  EXPECT_EQ((*after)->Find("new"), nullptr);
}

// The release a creator does not wait for names its claim's token: arriving
// after a later hold of the same name by the same node (its unlink's lock,
// its next create's claim), it leaves that hold alone.
TEST(AddNew, ALateReleaseEndsOnlyItsOwnClaim) {
  Federation f(3, NoLeases());
  const std::string p = PopulatedDir(f);
  auto r = AddNew(f, 2, p, "new", "n2", 7);
  ASSERT_TRUE(r && *r);
  f.fs(2).AddFile(p + "/new");
  // n2 unlinks it before its release of claim 7 reached the manager: the
  // lock is n2's own, so granted, and the removal ends it.
  ASSERT_TRUE(f.Update(2, p, Held(VdChange::Kind::kLock, "new", 2)));
  f.fs(2).Remove(p + "/new");
  ASSERT_TRUE(f.Update(2, p, Remove("n2", "new")));
  // n2 creates it again (claim 8), and the late release of 7 arrives.
  auto again = AddNew(f, 2, p, "new", "n2", 8);
  ASSERT_TRUE(again && *again);
  ASSERT_TRUE(f.Update(2, p, WithToken(Held(VdChange::Kind::kRelease, "new", 2), 7)));
  EXPECT_EQ(Code(f.Update(1, p, Held(VdChange::Kind::kLock, "new", 1))), EAGAIN)
      << "a late release ended a later claim";
  ASSERT_TRUE(f.Update(2, p, WithToken(Held(VdChange::Kind::kRelease, "new", 2), 8)));
  EXPECT_TRUE(f.Update(1, p, Held(VdChange::Kind::kLock, "new", 1)));
}

// The undo of an add whose answer was lost names its token: applied while
// that claim holds, a no-op once another creator holds the name.
TEST(AddNew, AnUndoRemovesOnlyWhileItsClaimHolds) {
  Federation f(3, NoLeases());
  const std::string p = PopulatedDir(f);
  auto r = AddNew(f, 2, p, "new", "n1", 9);
  ASSERT_TRUE(r && *r);
  const VdChange undo = WithToken(Remove("n1", "new"), 9);
  ASSERT_TRUE(f.Update(2, p, undo));
  auto gone = f.Get(0, p);
  ASSERT_TRUE(gone);
  EXPECT_EQ((*gone)->Find("new"), nullptr);
  // n1 creates the name on itself now; n2's undo arrives again (a resend).
  auto other = AddNew(f, 1, p, "new", "n1", 3);
  ASSERT_TRUE(other && *other);
  ASSERT_TRUE(f.Update(2, p, undo));
  auto kept = f.Get(0, p);
  ASSERT_TRUE(kept);
  EXPECT_NE((*kept)->Find("new"), nullptr) << "an undo removed another creator's entry";
}

// A directory one node fills alone is still lent to it: the change that
// would lend it is only claimed, and the kAdd that follows lends it.
TEST(AddNew, ADirectoryFilledByOneNodeIsStillLent) {
  VdServiceOptions o;
  o.lend_after = 3;
  Federation f(3, o);
  const std::string p = PopulatedDir(f);
  int claimed_only = 0;
  for (int i = 0; i < 6 && f.svc(1).stats().leases_taken == 0; ++i) {
    const std::string name = "c" + std::to_string(i);
    auto r = AddNew(f, 1, p, name, "n1");
    ASSERT_TRUE(r) << r.error().ToString();
    f.fs(1).AddFile(p + "/" + name);
    if (*r) {
      ASSERT_TRUE(f.Update(1, p, Held(VdChange::Kind::kRelease, name, 1)));
    } else {
      ++claimed_only;
      ASSERT_TRUE(f.Update(1, p, Add("n1", name)));
    }
  }
  EXPECT_EQ(claimed_only, 1);
  EXPECT_EQ(f.svc(1).stats().leases_taken, 1u);
  // Lent: the next create costs no message, and the manager's recall (for
  // another node's get) sees it.
  f.net().ResetStats();
  auto r = AddNew(f, 1, p, "lent", "n1");
  ASSERT_TRUE(r && *r);
  f.fs(1).AddFile(p + "/lent");
  ASSERT_TRUE(f.Update(1, p, Held(VdChange::Kind::kRelease, "lent", 1)));
  EXPECT_EQ(f.Requests(kVdUpdate), 0u);
  auto seen = f.Get(2, p);
  ASSERT_TRUE(seen);
  EXPECT_NE((*seen)->Find("lent"), nullptr);
}

}  // namespace
}  // namespace fedfs::ns
