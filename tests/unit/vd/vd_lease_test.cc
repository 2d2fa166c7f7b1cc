// Leases of VDs (vd/vd_lease.cc; docs/namespace.md, "Leases") over the fake
// network in simulated mode (the federation: vd_federation.h).
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "vd_federation.h"

namespace fedfs::ns {
namespace {

using namespace vd_test;

constexpr uint16_t kVdRecall = MethodId(RpcMethod::kNsVdRecall);
constexpr uint16_t kVdRenew = MethodId(RpcMethod::kNsVdRenew);

VdServiceOptions LendAfter(uint32_t n) {
  VdServiceOptions o;
  o.lend_after = n;
  o.lend_cooldown = std::chrono::milliseconds(0);
  return o;
}

// A create as the facade makes it: the claim, the entry on the node, the add.
Status Create(Federation& f, int node, const std::string& dir, const std::string& name) {
  if (auto s = f.Update(node, dir, VdChange{VdChange::Kind::kClaim, name, 0, Name(node)}); !s) {
    return s;
  }
  f.fs(node).AddFile(dir + "/" + name);
  return f.Update(node, dir, Add(Name(node), name));
}

int Code(const Status& s) { return s ? 0 : s.error().code; }

// n1 creates in a directory n0 manages, which no one else reads: after
// `lend_after` changes it serves the directory itself, without a message.
TEST(Leases, ANodeChangingADirectoryAloneServesItWithoutMessages) {
  Federation f(3, LendAfter(3));
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create(f, 1, p, "a" + std::to_string(i)));
  EXPECT_EQ(f.svc(0).stats().leases_granted, 1u);
  EXPECT_EQ(f.svc(1).stats().leases_taken, 1u);
  EXPECT_EQ(f.svc(1).stats().leases_held, 1u);
  f.net().ResetStats();
  for (int i = 3; i < 20; ++i) ASSERT_TRUE(Create(f, 1, p, "a" + std::to_string(i)));
  f.fs(1).Remove(p + "/a0");
  ASSERT_TRUE(f.Update(1, p, VdChange{VdChange::Kind::kLock, "a0", 0, "n1"}));
  ASSERT_TRUE(f.Update(1, p, Remove("n1", "a0")));
  auto vd = f.Get(1, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ(NameSet(**vd).count("a19"), 1u);
  EXPECT_EQ(NameSet(**vd).count("a0"), 0u);
  EXPECT_EQ(NameSet(**vd).count("f2"), 1u);  // the other nodes' names are there
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);
  // A claim of a name that exists is refused here as at the manager.
  EXPECT_EQ(Code(f.Update(1, p, VdChange{VdChange::Kind::kClaim, "f2", 0, "n1"})), EEXIST);
}

Result<VdPtr> Peek(Federation& f, int from, const std::string& path, const std::string& name) {
  std::optional<Result<VdPtr>> out;
  f.svc(from).Peek(path, name, [&](Result<VdPtr> r) { out = std::move(r); });
  f.net().RunUntilIdle();
  if (!out) return Err(EIO, "never completed");
  return std::move(*out);
}

// A create's look before its claim (Peek) in a lent directory is the
// holder's own answer, which the kernel may keep; in a stale copy it is
// that copy's, without a message, and not for the kernel.
TEST(Leases, APeekInALentDirectoryIsTheHoldersAnswer) {
  Federation f(3, LendAfter(2));
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  ASSERT_TRUE(f.Get(2, p));
  f.fs(2).AddFile(p + "/z");
  ASSERT_TRUE(f.Update(2, p, Add("n2", "z")));  // n1's copy goes stale
  f.net().ResetStats();
  auto stale = Peek(f, 1, p, "z");
  ASSERT_TRUE(stale);
  EXPECT_EQ((*stale)->Find("z"), nullptr);  // the stale copy's answer
  EXPECT_FALSE((*stale)->kernel_may_cache);
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create(f, 1, p, "a" + std::to_string(i)));
  ASSERT_EQ(f.svc(1).stats().leases_held, 1u);
  f.net().ResetStats();
  auto lent = Peek(f, 1, p, "z");
  ASSERT_TRUE(lent);
  EXPECT_NE((*lent)->Find("z"), nullptr);
  EXPECT_TRUE((*lent)->kernel_may_cache);
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);
}

// Any other node's use of P, the manager's own included, recalls the lease
// first and sees every change made under it.
TEST(Leases, AnyOtherUseRecallsTheLeaseAndSeesEveryChange) {
  for (int reader : {0, 2}) {
    SCOPED_TRACE(reader);
    Federation f(3, LendAfter(2));
    const std::string p = PathManagedBy(f, "n0");
    Populate(f, p);
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(Create(f, 1, p, "a" + std::to_string(i)));
    ASSERT_EQ(f.svc(1).stats().leases_held, 1u);
    f.net().ResetStats();
    auto vd = f.Get(reader, p);
    ASSERT_TRUE(vd) << vd.error().ToString();
    for (int i = 0; i < 10; ++i) EXPECT_EQ(NameSet(**vd).count("a" + std::to_string(i)), 1u) << i;
    EXPECT_EQ(f.Requests(kVdRecall), 1u);
    EXPECT_EQ(f.svc(0).stats().leases_recalled, 1u);
    EXPECT_EQ(f.svc(1).stats().leases_held, 0u);
    // n1's next change goes to the manager again, and the reader sees it.
    f.net().ResetStats();
    ASSERT_TRUE(Create(f, 1, p, "b"));
    EXPECT_GT(f.Requests(kVdUpdate), 0u);
    vd = f.Get(reader, p);
    ASSERT_TRUE(vd);
    EXPECT_EQ(NameSet(**vd).count("b"), 1u);
    // A change by another node goes through the manager too.
    f.fs(2).AddFile(p + "/c");
    ASSERT_TRUE(f.Update(2, p, Add("n2", "c")));
    vd = f.Get(1, p);
    ASSERT_TRUE(vd);
    EXPECT_EQ(NameSet(**vd).count("c"), 1u);
  }
}

// Names the holder's kernel got from the lease are dropped before the lease
// goes back: no one would tell that kernel of P's later changes.
TEST(Leases, TheHoldersKernelDropsItsNamesBeforeGivingTheLeaseBack) {
  struct Kernel final : KernelCache {
    bool Coherent() const override { return true; }
    void InvalidateNames() override { ++names; }
    uint64_t NamesEpoch() const override { return static_cast<uint64_t>(names); }
    bool InvalidateAttrs(uint64_t) override { return true; }
    int names = 0;
  } k;
  Federation f(3, LendAfter(2));
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  f.svc(1).SetKernelCache(&k);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create(f, 1, p, "a" + std::to_string(i)));
  ASSERT_EQ(f.svc(1).stats().leases_held, 1u);
  const int before = k.names;
  std::optional<Result<VdPtr>> got;
  int names_when_served = -1;
  f.svc(2).Get(p, [&](Result<VdPtr> r) {
    names_when_served = k.names;
    got = std::move(r);
  });
  f.net().RunUntilIdle();
  ASSERT_TRUE(got && *got);
  EXPECT_GT(names_when_served, before);
  f.svc(1).SetKernelCache(nullptr);
}

// Two nodes changing one directory in turn: no lease is granted (each
// change drops the other's copy, and the one in a row resets).
TEST(Leases, NotLentWhileAnotherNodeUsesTheDirectory) {
  Federation f(3, Deltas(LendAfter(2)));
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Create(f, 1 + i % 2, p, "a" + std::to_string(i)));
    ASSERT_TRUE(f.Get(1 + (i + 1) % 2, p));
  }
  EXPECT_EQ(f.svc(0).stats().leases_granted, 0u);
  // A reader that keeps a copy (a sharer) also keeps P from being lent.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(f.Get(2, p));
    ASSERT_TRUE(Create(f, 1, p, "b" + std::to_string(i)));
  }
  EXPECT_EQ(f.svc(0).stats().leases_granted, 0u);
  // n2's copy takes n1's changes as deltas until it went unread for
  // DirTable::kMaxUnusedDeltas of them; then n1 changes it alone.
  for (uint32_t i = 0; i < DirTable::kMaxUnusedDeltas; ++i) {
    ASSERT_TRUE(Create(f, 1, p, "d" + std::to_string(i)));
  }
  EXPECT_EQ(f.svc(0).stats().leases_granted, 0u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create(f, 1, p, "c" + std::to_string(i)));
  EXPECT_EQ(f.svc(0).stats().leases_granted, 1u);  // now n1 changes it alone
}

// A recall waits for the holder's operation that holds a name; meanwhile a
// new claim of the holder is refused (EAGAIN: it asks the manager after).
TEST(Leases, ARecallWaitsForTheOperationInFlight) {
  Federation f(3, LendAfter(2));
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create(f, 1, p, "a" + std::to_string(i)));
  ASSERT_EQ(f.svc(1).stats().leases_held, 1u);
  ASSERT_TRUE(f.Update(1, p, VdChange{VdChange::Kind::kClaim, "x", 0, "n1"}));
  std::optional<Result<VdPtr>> got;
  f.svc(2).Get(p, [&](Result<VdPtr> r) { got = std::move(r); });
  f.net().RunFor(std::chrono::milliseconds(10));  // well within every deadline
  EXPECT_FALSE(got.has_value());  // the recall waits for n1's create of x
  std::optional<Status> y;
  f.svc(1).Update(p, VdChange{VdChange::Kind::kClaim, "y", 0, "n1"},
                  [&](Status s) { y = std::move(s); });
  ASSERT_TRUE(y.has_value());  // answered here, at once
  EXPECT_EQ(Code(*y), EAGAIN);
  f.fs(1).AddFile(p + "/x");
  std::optional<Status> x;
  f.svc(1).Update(p, Add("n1", "x"), [&](Status s) { x = std::move(s); });
  ASSERT_TRUE(x.has_value() && *x);
  f.net().RunUntilIdle();
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(*got);
  EXPECT_EQ(NameSet(***got).count("x"), 1u);
  EXPECT_EQ(f.svc(1).stats().leases_held, 0u);
  EXPECT_TRUE(f.Update(1, p, VdChange{VdChange::Kind::kClaim, "y", 0, "n1"}));  // at n0 now
}

// A new membership epoch ends every lease: the holder asks the manager again
// and the VDs at P are rebuilt.
TEST(Leases, ANewEpochEndsTheLease) {
  Federation f(3, LendAfter(2));
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create(f, 1, p, "a" + std::to_string(i)));
  ASSERT_EQ(f.svc(1).stats().leases_held, 1u);
  f.SetViews({"n0", "n1", "n2"}, 2);
  f.net().ResetStats();
  auto vd = f.Get(1, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ(f.svc(1).stats().leases_held, 0u);
  EXPECT_GT(f.Requests(kVdGet), 0u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(NameSet(**vd).count("a" + std::to_string(i)), 1u);
  vd = f.Get(2, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ(NameSet(**vd).count("a2"), 1u);
}

// The holder renews its lease while it uses it; a holder that died is not
// waited for (its lease died with it).
TEST(Leases, RenewedWhileUsedAndNotWaitedForWhenTheHolderDied) {
  VdServiceOptions o = LendAfter(2);
  o.lease_term = std::chrono::milliseconds(2000);
  Federation f(3, o);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create(f, 1, p, "a" + std::to_string(i)));
  ASSERT_EQ(f.svc(1).stats().leases_held, 1u);
  f.net().ResetStats();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past half the term
  ASSERT_TRUE(Create(f, 1, p, "b"));
  EXPECT_EQ(f.Requests(kVdRenew), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past the first term
  f.net().ResetStats();
  ASSERT_TRUE(Create(f, 1, p, "c"));
  EXPECT_EQ(f.svc(1).stats().leases_held, 1u);
  EXPECT_EQ(f.Requests(kVdUpdate), 0u);
  // n1 dies: the manager's view says so, and n2 is served at once.
  ASSERT_TRUE(f.net().Kill("n1"));
  f.SetViews({"n0", "n2"}, 2);
  auto vd = f.Get(2, p);
  ASSERT_TRUE(vd) << vd.error().ToString();
  EXPECT_EQ(NameSet(**vd).count("f0"), 1u);
}

// Random creates, unlinks and renames by random nodes, each followed by a
// read from a random node: every read sees exactly the changes made before
// it, with leases granted, recalled and granted again on the way.
TEST(Leases, EverySequenceOfChangesIsSeenByTheNextReadAnywhere) {
  uint64_t granted = 0, served_alone = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    Federation f(4, LendAfter(2), seed);
    std::mt19937_64 rng(seed);
    const std::string p = PathManagedBy(f, "n0");
    for (int i = 0; i < 4; ++i) f.fs(i).AddDir(p);
    std::map<std::string, int> expect;  // name -> holder
    int actor = 1;
    for (int step = 0; step < 200; ++step) {
      if (rng() % 8 == 0) actor = static_cast<int>(rng() % 4);  // runs of one node
      const std::string name = "e" + std::to_string(rng() % 12);
      const std::string node = Name(actor);
      if (!expect.count(name)) {
        ASSERT_TRUE(Create(f, actor, p, name));
        expect[name] = actor;
      } else {
        const int h = expect[name];
        ASSERT_TRUE(f.Update(actor, p, VdChange{VdChange::Kind::kLock, name, 0, node}));
        const std::string to = name + "r";
        if (rng() % 2 == 0 && !expect.count(to)) {  // rename on its holder, reported by the actor
          ASSERT_TRUE(f.Update(actor, p, VdChange{VdChange::Kind::kClaim, to, 0, node}));
          f.fs(h).Remove(p + "/" + name);
          f.fs(h).AddFile(p + "/" + to);
          std::optional<Status> done;
          f.svc(actor).UpdateMany(p, {Remove(Name(h), name), Add(Name(h), to)},
                                  [&](Status s) { done = std::move(s); });
          f.net().RunUntilIdle();
          ASSERT_TRUE(done && *done);
          expect.erase(name);
          expect[to] = h;
        } else {
          f.fs(h).Remove(p + "/" + name);
          ASSERT_TRUE(f.Update(actor, p, Remove(Name(h), name)));
          expect.erase(name);
        }
      }
      if (rng() % 3 == 0) {
        const int reader = static_cast<int>(rng() % 4);
        auto vd = f.Get(reader, p);
        ASSERT_TRUE(vd) << vd.error().ToString();
        std::set<std::string> want;
        for (const auto& [n, h] : expect) want.insert(n);
        ASSERT_EQ(NameSet(**vd), want) << "step " << step << " reader n" << reader;
      }
    }
    granted += f.svc(0).stats().leases_granted;
    f.net().ResetStats();
    for (int i = 1; i < 4; ++i) served_alone += f.svc(i).stats().leases_taken;
  }
  EXPECT_GT(granted, 20u);  // leases were granted and recalled, not avoided
  EXPECT_EQ(served_alone, granted);
}


// A create in a lent directory that decided to serve itself just before the
// lease went back (its copy of P had been evicted, so it waited for a
// dirmerge while the recall came and went) is served by the manager: a
// claim and entry taken on the former holder would be known to no one else,
// and the file it makes then missing from every listing (the history test
// lost a file so).
TEST(Leases, ACreateServedAfterItsLeaseWentBackGoesToTheManager) {
  VdServiceOptions o = LendAfter(2);
  o.max_resident_vds = 1;
  Federation f(3, o);
  const std::string p = PathManagedBy(f, "n0");
  const std::string q = PathManagedBy(f, "n1");
  Populate(f, p);
  Populate(f, q);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create(f, 1, p, "a" + std::to_string(i)));
  ASSERT_EQ(f.svc(1).stats().leases_held, 1u);
  ASSERT_TRUE(f.Get(1, q));  // n1 keeps one VD: its lent copy of p goes
  ASSERT_EQ(f.svc(1).stats().leases_held, 1u);
  // n1's dirmerge of p waits for n2's listing; the recall does not.
  m2m::LinkModel slow;
  slow.base_latency = std::chrono::milliseconds(5);
  f.net().SetLinkModel("n1", "n2", slow);
  std::optional<Result<bool>> added;
  f.svc(1).AddNew(p, VdChange{VdChange::Kind::kAdd, "x", DT_REG, "n1", 1},
                  [&](Result<bool> r) { added = std::move(r); });
  std::optional<Result<VdPtr>> read;
  f.svc(2).Get(p, [&](Result<VdPtr> r) { read = std::move(r); });
  f.net().RunUntilIdle();
  ASSERT_TRUE(read && *read);
  EXPECT_EQ(NameSet(***read).count("x"), 0u);  // read before the create
  EXPECT_EQ(f.svc(1).stats().leases_held, 0u);
  ASSERT_TRUE(added && *added) << (added ? added->error().ToString() : "never completed");
  EXPECT_TRUE(**added);
  f.fs(1).AddFile(p + "/x");
  VdChange release{VdChange::Kind::kRelease, "x", 0, "n1"};
  release.id = 1;
  ASSERT_TRUE(f.Update(1, p, release));
  for (int reader : {0, 2}) {
    auto vd = f.Get(reader, p);
    ASSERT_TRUE(vd) << vd.error().ToString();
    EXPECT_EQ(NameSet(**vd).count("x"), 1u) << "n" << reader;
  }
}

}  // namespace
}  // namespace fedfs::ns
