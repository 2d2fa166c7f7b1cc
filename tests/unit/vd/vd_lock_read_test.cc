// kLockRead (vd/vd_service.h, VdChange; VdService::LockRead): a name read and
// held in one request to its manager, over the fake network in simulated
// mode (the federation: vd_federation.h).
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "vd_federation.h"

namespace fedfs::ns {
namespace {

using namespace vd_test;

int Code(const Status& s) { return s ? 0 : s.error().code; }

Result<VdService::NameRead> LockRead(Federation& f, int node, const std::string& dir,
                                     const std::string& name) {
  std::optional<Result<VdService::NameRead>> out;
  f.svc(node).LockRead(dir, name, [&](Result<VdService::NameRead> r) { out = std::move(r); });
  f.net().RunUntilIdle();
  if (!out) return Err(EIO, "never completed");
  return std::move(*out);
}

Status Lock(Federation& f, int node, const std::string& dir, const std::string& name) {
  return f.Update(node, dir, VdChange{VdChange::Kind::kLock, name, 0, Name(node)});
}

// An existing name: its entry, as GetName answers it, and the lock, in one
// request; another node then waits (EAGAIN) until the reported change ends
// the lock, and reads what that change did.
TEST(LockRead, AnExistingNameIsReadAndHeldInOneRequest) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);  // f0, f1, f2 (on nodes 0, 1, 2) and sub
  ASSERT_TRUE(f.Get(1, p));
  f.net().ResetStats();
  auto r = LockRead(f, 1, p, "f2");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(f.Requests(kVdUpdate), 1u);
  EXPECT_EQ(f.Requests(kVdGet), 0u);
  EXPECT_TRUE(r->held);
  ASSERT_TRUE(r->part);
  EXPECT_TRUE(r->part->partial);
  ASSERT_NE(r->part->Find("f2"), nullptr);
  EXPECT_EQ(r->part->Find("f2")->holders, std::vector<std::string>{"n2"});
  EXPECT_EQ(r->part->entries.size(), 1u);  // that name only
  EXPECT_FALSE(r->part->holders.empty());  // and what the directory's attributes need
  // Held: another node's lock, lock-read or claim of it waits.
  EXPECT_EQ(Code(Lock(f, 2, p, "f2")), EAGAIN);
  auto other = LockRead(f, 2, p, "f2");
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, EAGAIN);
  // Another name is free.
  auto free = LockRead(f, 2, p, "f0");
  ASSERT_TRUE(free);
  EXPECT_TRUE(free->held);
  ASSERT_TRUE(f.Update(2, p, VdChange{VdChange::Kind::kRelease, "f0", 0, "n2"}));
  // n1 reports its unlink of f2 (on n2): the lock ends, and the next reader
  // sees the name gone.
  f.fs(2).Remove(p + "/f2");
  ASSERT_TRUE(f.Update(1, p, Remove("n2", "f2")));
  auto after = LockRead(f, 2, p, "f2");
  ASSERT_TRUE(after);
  EXPECT_FALSE(after->held);
  EXPECT_EQ(after->part->Find("f2"), nullptr);
  // Absent: nothing held, so another node's claim of the name goes through.
  EXPECT_TRUE(f.Update(0, p, VdChange{VdChange::Kind::kClaim, "f2", 0, "n0"}));
}

// The holder of the lock may ask again (its kernel serializes its own
// operations on a name); a name held by a lock or a claim of another node is
// waited out, and a release ends it.
TEST(LockRead, WaitsOutAnotherNodesHoldAndTheHolderMayAskAgain) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n1");
  Populate(f, p);
  ASSERT_TRUE(Lock(f, 2, p, "f0"));
  auto r = LockRead(f, 0, p, "f0");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EAGAIN);
  auto again = LockRead(f, 2, p, "f0");
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->held);
  ASSERT_TRUE(f.Update(2, p, VdChange{VdChange::Kind::kRelease, "f0", 0, "n2"}));
  auto now = LockRead(f, 0, p, "f0");
  ASSERT_TRUE(now);
  EXPECT_TRUE(now->held);
}

// A name that is not listed (or claimed by a create in flight) is answered
// absent and not held: a claim of it by the creator is not disturbed.
TEST(LockRead, AnAbsentNameIsAnsweredAndNotHeld) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Update(2, p, VdChange{VdChange::Kind::kClaim, "new", 0, "n2"}));
  auto r = LockRead(f, 1, p, "new");
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->held);
  EXPECT_EQ(r->part->Find("new"), nullptr);
  f.fs(2).AddFile(p + "/new");
  ASSERT_TRUE(f.Update(2, p, Add("n2", "new")));  // the create's report ends its claim
  auto listed = LockRead(f, 1, p, "new");
  ASSERT_TRUE(listed);
  EXPECT_TRUE(listed->held);
  ASSERT_NE(listed->part->Find("new"), nullptr);
}

// A conflict copy is listed under an alias whose real name differs: read,
// not held (the caller locks the real name).
TEST(LockRead, AnAliasIsReadButNotHeld) {
  Federation f(3);
  const std::string p = PathManagedBy(f, "n0");
  for (int i = 0; i < 3; ++i) f.fs(i).AddDir(p);
  f.fs(1).AddFile(p + "/x");
  f.fs(2).AddDir(p + "/x");  // a file on n1 and a directory on n2: a conflict
  auto vd = f.Get(0, p);
  ASSERT_TRUE(vd);
  std::string alias;
  for (const auto& e : (*vd)->entries) {
    if (e.RealName() == "x" && e.name != "x") alias = e.name;
  }
  ASSERT_FALSE(alias.empty()) << "no alias listed";
  auto r = LockRead(f, 1, p, alias);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->held);
  ASSERT_NE(r->part->Find(alias), nullptr);
  EXPECT_EQ(r->part->Find(alias)->RealName(), "x");
  // The real name is not held by that read.
  EXPECT_TRUE(Lock(f, 2, p, "x"));
}

// A lock-read is decided once the round of the change before it has
// invalidated every copy, like a lock: what it reads is what every copy
// shows once it acts.
TEST(LockRead, ItWaitsForTheRoundOfTheChangeBeforeIt) {
  Federation f(4);
  const std::string p = PathManagedBy(f, "n0");
  ASSERT_NO_FATAL_FAILURE(ShareWithSlowN1(f, p, 3));  // n1's bump takes 10 ms
  const auto start = f.net().Now();
  std::optional<m2m::SimDuration> removed, read_at;
  f.fs(2).Remove(p + "/f2");
  f.svc(2).Update(p, Remove("n2", "f2"), [&](Status s) {
    EXPECT_TRUE(s);
    removed = f.net().Now() - start;
  });
  f.net().RunFor(std::chrono::milliseconds(1));  // applied; its round to n1 in flight
  ASSERT_FALSE(removed);
  std::optional<Result<VdService::NameRead>> read;
  f.svc(3).LockRead(p, "f2", [&](Result<VdService::NameRead> r) {
    read_at = f.net().Now() - start;
    read = std::move(r);
  });
  f.net().RunUntilIdle();
  ASSERT_TRUE(removed && read_at && read && *read);
  EXPECT_GE(*read_at, std::chrono::milliseconds(10));  // after that round, not during it
  EXPECT_EQ((*read)->part->Find("f2"), nullptr);
  EXPECT_FALSE((*read)->held);
}

}  // namespace
}  // namespace fedfs::ns
