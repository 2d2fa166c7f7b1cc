// Names in a stale directory-table copy (vd/dir_table.h, "Names in a stale
// copy"): a lookup of one name there asks the manager for that name only,
// over the fake network in simulated mode (vd_federation.h).
#include <gtest/gtest.h>

#include <algorithm>
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

constexpr uint16_t kVdGetName = MethodId(RpcMethod::kNsVdGetName);

VdServiceOptions NoLeases() {
  VdServiceOptions o;
  o.lend_after = 0;  // every change goes to the manager
  o.churn_gap = std::chrono::milliseconds(0);  // lookups in stale copies recorded
  return o;
}

// Every test step is "within" churn_gap: two changes in a row are churn.
VdServiceOptions ChurnAlways() {
  VdServiceOptions o;
  o.lend_after = 0;
  o.churn_gap = std::chrono::milliseconds(60000);
  return o;
}

Result<VdPtr> GetName(Federation& f, int from, const std::string& path, const std::string& name) {
  std::optional<Result<VdPtr>> out;
  f.svc(from).GetName(path, name, [&](Result<VdPtr> r) { out = std::move(r); });
  f.net().RunUntilIdle();
  EXPECT_TRUE(out.has_value()) << "GetName never completed";
  if (!out) return Err(EIO, "never completed");
  return std::move(*out);
}

TEST(DirTableNames, ALookupInAStaleCopyFetchesThatNameOnly) {
  Federation f(3, NoLeases());
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (int i = 0; i < 200; ++i) f.fs(2).AddFile(p + "/big" + std::to_string(i));
  ASSERT_TRUE(f.Get(1, p));  // n1's copy, whole
  f.fs(2).AddFile(p + "/x");
  ASSERT_TRUE(f.Update(2, p, Add("n2", "x")));  // n1's copy goes stale
  f.net().ResetStats();
  auto vd = GetName(f, 1, p, "x");
  ASSERT_TRUE(vd) << vd.error().ToString();
  EXPECT_TRUE((*vd)->partial);
  ASSERT_NE((*vd)->Find("x"), nullptr);
  EXPECT_EQ((*vd)->Find("x")->holders, (std::vector<std::string>{"n2"}));
  EXPECT_EQ((*vd)->holders, (std::vector<std::string>{"n0", "n1", "n2"}));
  EXPECT_EQ((*vd)->subdirs, 1u);  // "sub"
  EXPECT_EQ(f.Requests(kVdGetName), 1u);
  EXPECT_EQ(f.Requests(kVdGet), 0u);
  EXPECT_LT(f.net().TotalStats().bytes_sent, 1000u);  // not 200 entries
  // Again, and a name that is not there: the first from the table, the
  // second one more small request, then from the table too.
  f.net().ResetStats();
  ASSERT_TRUE(GetName(f, 1, p, "x"));
  auto none = GetName(f, 1, p, "nope");
  ASSERT_TRUE(none);
  EXPECT_EQ((*none)->Find("nope"), nullptr);
  ASSERT_TRUE(GetName(f, 1, p, "nope"));
  EXPECT_EQ(f.Requests(kVdGetName), 1u);
  EXPECT_EQ(f.svc(1).stats().dt.name_hits, 2u);
  // The next change elsewhere makes them stale too: asked again, and seen.
  f.fs(0).Remove(p + "/f0");
  ASSERT_TRUE(f.Update(0, p, Remove("n0", "f0")));
  f.fs(0).AddFile(p + "/nope");
  ASSERT_TRUE(f.Update(0, p, Add("n0", "nope")));
  f.net().ResetStats();
  auto now = GetName(f, 1, p, "nope");
  ASSERT_TRUE(now);
  EXPECT_NE((*now)->Find("nope"), nullptr);
  EXPECT_EQ(f.Requests(kVdGetName), 1u);
  // A listing still fetches the whole VD.
  auto whole = f.Get(1, p);
  ASSERT_TRUE(whole);
  EXPECT_FALSE((*whole)->partial);
  EXPECT_EQ(NameSet(**whole).count("f0"), 0u);
  EXPECT_EQ(NameSet(**whole).count("big7"), 1u);
}

// A stale copy in a directory that stopped changing (docs/namespace.md,
// "Quiet again"): the next name lookup there brings the whole VD back, and
// the lookups after it need no message until the next change.
TEST(DirTableNames, AQuietDirectoryIsFetchedWholeAgain) {
  VdServiceOptions o = NoLeases();
  o.quiet_after = std::chrono::milliseconds(100);  // SteadyNow is the real clock here
  Federation f(3, o);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (int i = 0; i < 50; ++i) f.fs(2).AddFile(p + "/big" + std::to_string(i));
  ASSERT_TRUE(f.Get(1, p));
  f.fs(2).AddFile(p + "/x");
  ASSERT_TRUE(f.Update(2, p, Add("n2", "x")));  // n1's copy goes stale
  // Just changed: one name.
  auto vd = GetName(f, 1, p, "big1");
  ASSERT_TRUE(vd);
  EXPECT_TRUE((*vd)->partial);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // quiet for longer
  f.net().ResetStats();
  vd = GetName(f, 1, p, "big2");
  ASSERT_TRUE(vd);
  ASSERT_NE((*vd)->Find("big2"), nullptr);
  EXPECT_EQ(f.Requests(kVdGetName), 1u);
  f.net().ResetStats();
  for (const char* n : {"big3", "x", "absent", ""}) {
    auto again = GetName(f, 1, p, n);
    ASSERT_TRUE(again) << n;
    EXPECT_EQ((*again)->Find("x") != nullptr, std::string(n) == "x") << n;
  }
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);  // from the whole copy
  // The next change makes it stale, and is seen.
  f.fs(2).Remove(p + "/x");
  ASSERT_TRUE(f.Update(2, p, Remove("n2", "x")));
  auto gone = GetName(f, 1, p, "x");
  ASSERT_TRUE(gone);
  EXPECT_EQ((*gone)->Find("x"), nullptr);
}

// A copy that stays stale is one change, not one per lookup: looking many
// names up in it after a single change does not make the directory busy
// (names only), so once it is quiet a lookup brings the whole VD back.
TEST(DirTableNames, LookupsInACopyThatStaysStaleAreNotChurn) {
  VdServiceOptions o = ChurnAlways();
  o.quiet_after = std::chrono::milliseconds(100);
  Federation f(3, o);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  f.fs(2).AddFile(p + "/c0");
  ASSERT_TRUE(f.Update(2, p, Add("n2", "c0")));  // stale once
  for (const char* n : {"a", "b", "c"}) ASSERT_TRUE(GetName(f, 1, p, n));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // quiet, within kBusyFor
  ASSERT_TRUE(GetName(f, 1, p, "d"));  // whole: not a names-only lookup
  f.net().ResetStats();
  for (const char* n : {"e", "c0"}) ASSERT_TRUE(GetName(f, 1, p, n));
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);
}

// The holders come back only when they are not those of the stale copy.
TEST(DirTableNames, HoldersAreSentOnlyWhenTheyChanged) {
  Federation f(3, NoLeases());
  const std::string p = PathManagedBy(f, "n0");
  f.fs(0).AddDir(p);
  f.fs(1).AddDir(p);
  ASSERT_TRUE(f.Get(1, p));
  f.fs(1).AddFile(p + "/a");
  ASSERT_TRUE(f.Update(1, p, Add("n1", "a")));  // n1's own: its copy patched
  f.fs(0).AddFile(p + "/b");
  ASSERT_TRUE(f.Update(0, p, Add("n0", "b")));  // stale at n1, same holders
  auto vd = GetName(f, 1, p, "b");
  ASSERT_TRUE(vd);
  EXPECT_EQ((*vd)->holders, (std::vector<std::string>{"n0", "n1"}));
  f.fs(2).AddDir(p);
  f.fs(2).AddFile(p + "/c");
  ASSERT_TRUE(f.Update(2, p, Add("n2", "c")));  // n2 becomes a holder
  vd = GetName(f, 1, p, "c");
  ASSERT_TRUE(vd);
  ASSERT_NE((*vd)->Find("c"), nullptr);
  EXPECT_EQ((*vd)->holders, (std::vector<std::string>{"n0", "n1", "n2"}));
  vd = GetName(f, 1, p, "");  // the summary, from the table now
  ASSERT_TRUE(vd);
  EXPECT_EQ((*vd)->holders, (std::vector<std::string>{"n0", "n1", "n2"}));
}

// n1 fetches p whole; n2's creation of `other` (of `type`) makes that copy
// stale; n1 asks for "y" (recorded again, one name), then creates y itself.
void OwnCreateInAStaleCopy(Federation& f, const std::string& p, const std::string& other,
                           uint8_t type) {
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  if (type == DT_DIR) {
    f.fs(2).AddDir(p + "/" + other);
  } else {
    f.fs(2).AddFile(p + "/" + other);
  }
  ASSERT_TRUE(f.Update(2, p, Add("n2", other, type)));  // n1's copy goes stale
  ASSERT_TRUE(GetName(f, 1, p, "y"));                   // n1 registers again (one name)
  f.fs(1).AddFile(p + "/y");
  ASSERT_TRUE(f.Update(1, p, Add("n1", "y")));  // n1's own change (n1 becomes a holder)
}

TEST(DirTableNames, ANodesOwnChangeKeepsItsNamesInAStaleCopy) {
  Federation f(3, NoLeases());
  const std::string p = PathManagedBy(f, "n0");
  ASSERT_NO_FATAL_FAILURE(OwnCreateInAStaleCopy(f, p, "other", DT_REG));  // y kept from the reply
  f.net().ResetStats();
  auto vd = GetName(f, 1, p, "y");
  ASSERT_TRUE(vd);
  ASSERT_NE((*vd)->Find("y"), nullptr);
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);
  // Another node's change of y is seen.
  f.fs(1).Remove(p + "/y");
  ASSERT_TRUE(f.Update(2, p, Remove("n1", "y")));
  vd = GetName(f, 1, p, "y");
  ASSERT_TRUE(vd);
  EXPECT_EQ((*vd)->Find("y"), nullptr);
}

// The same for the directory's summary (its holders and count of
// subdirectories, what the GETATTR after every change in P needs): the
// reply to a node's own change carries the count, so a stale copy keeps the
// summary as the change left it, until another change reaches the slot.
TEST(DirTableNames, ANodesOwnChangeKeepsTheDirectorysSummaryInAStaleCopy) {
  Federation f(3, NoLeases());
  const std::string p = PathManagedBy(f, "n0");
  ASSERT_NO_FATAL_FAILURE(OwnCreateInAStaleCopy(f, p, "sub", DT_DIR));
  f.net().ResetStats();
  auto vd = GetName(f, 1, p, "");
  ASSERT_TRUE(vd);
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);
  const auto want = f.Get(0, p);  // the manager's own
  ASSERT_TRUE(want);
  EXPECT_EQ((*vd)->subdirs, (*want)->subdirs);
  EXPECT_EQ((*vd)->holders, (*want)->holders);
  EXPECT_NE(std::find((*vd)->holders.begin(), (*vd)->holders.end(), "n1"), (*vd)->holders.end());
  // Another node's new subdirectory is seen.
  f.fs(2).AddDir(p + "/sub2");
  ASSERT_TRUE(f.Update(2, p, Add("n2", "sub2", DT_DIR)));
  vd = GetName(f, 1, p, "");
  ASSERT_TRUE(vd);
  EXPECT_EQ((*vd)->subdirs, (*want)->subdirs + 1);
}

// A copy that goes stale twice in a row (within churn_gap): the next lookups
// there are recorded for names only (vd_service.h, VdServiceOptions::
// churn_gap; docs/namespace.md, "Names in a busy directory"): a name that
// exists is kept, and the creation of new names bumps nothing here; an
// absent name is asked for every time; a change of a kept name bumps.
TEST(DirTableNames, ADirectoryThatKeepsChangingIsLookedUpForNamesOnly) {
  Federation f(3, ChurnAlways());
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  int k = 0;
  auto change = [&] {
    const std::string n = "c" + std::to_string(k++);
    f.fs(2).AddFile(p + "/" + n);
    return f.Update(2, p, Add("n2", n));
  };
  ASSERT_TRUE(change());
  ASSERT_TRUE(GetName(f, 1, p, "x"));  // stale once: recorded again
  ASSERT_TRUE(change());
  const auto before = f.svc(0).stats().invalidations_sent;
  ASSERT_TRUE(GetName(f, 1, p, "y"));  // stale twice: names only from now on
  ASSERT_TRUE(change());
  EXPECT_EQ(f.svc(0).stats().invalidations_sent, before);  // n1 was not bumped
  f.net().ResetStats();
  auto vd = GetName(f, 1, p, "c2");
  ASSERT_TRUE(vd);
  EXPECT_NE((*vd)->Find("c2"), nullptr);  // a fresh answer
  EXPECT_EQ(f.Requests(kVdGetName), 1u);
  EXPECT_EQ(f.svc(0).stats().sharer_records, 1u);  // names only
  // New names come and go unbumped; c2 is answered here, with no request.
  ASSERT_TRUE(change());
  ASSERT_TRUE(change());
  EXPECT_EQ(f.svc(0).stats().invalidations_sent, before);
  f.net().ResetStats();
  auto again = GetName(f, 1, p, "c2");
  ASSERT_TRUE(again);
  EXPECT_NE((*again)->Find("c2"), nullptr);
  EXPECT_EQ(f.Requests(kVdGetName), 0u);
  // The directory's own summary (holders, subdirectories) is kept too.
  ASSERT_TRUE(GetName(f, 1, p, ""));
  f.net().ResetStats();
  ASSERT_TRUE(GetName(f, 1, p, ""));
  EXPECT_EQ(f.Requests(kVdGetName), 0u);
  // An absent name is asked for every time: a create elsewhere bumps
  // nothing here.
  for (int i = 0; i < 2; ++i) {
    auto none = GetName(f, 1, p, "c9");
    ASSERT_TRUE(none);
    EXPECT_EQ((*none)->Find("c9"), nullptr);
  }
  EXPECT_EQ(f.Requests(kVdGetName), 2u);
  ASSERT_TRUE(change());  // c5
  ASSERT_TRUE(change());  // c6
  ASSERT_TRUE(change());  // c7
  ASSERT_TRUE(change());  // c8
  ASSERT_TRUE(change());  // c9
  auto made = GetName(f, 1, p, "c9");
  ASSERT_TRUE(made);
  EXPECT_NE((*made)->Find("c9"), nullptr);
  // A removal of a name: n1 is bumped, and sees it gone.
  f.fs(2).Remove(p + "/c2");
  ASSERT_TRUE(f.Update(2, p, Remove("n2", "c2")));
  EXPECT_EQ(f.svc(0).stats().invalidations_sent, before + 1);
  auto gone = GetName(f, 1, p, "c2");
  ASSERT_TRUE(gone);
  EXPECT_EQ((*gone)->Find("c2"), nullptr);
  // So does a directory made in it (the summary's subdirectories).
  ASSERT_TRUE(GetName(f, 1, p, ""));
  f.fs(2).AddDir(p + "/newdir");
  ASSERT_TRUE(f.Update(2, p, Add("n2", "newdir", DT_DIR)));
  auto sum = GetName(f, 1, p, "");
  ASSERT_TRUE(sum);
  EXPECT_EQ((*sum)->subdirs, 2u);  // sub and newdir
}

// Past max_sharers_per_vd, names-only readers are not recorded (asked for
// every time), and the directory does not turn to broadcasts.
TEST(DirTableNames, NamesOnlyReadersPastTheBoundAreNotRecorded) {
  VdServiceOptions o = ChurnAlways();
  o.max_sharers_per_vd = 1;
  Federation f(4, o);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  int k = 0;
  auto change = [&] {
    const std::string n = "c" + std::to_string(k++);
    f.fs(3).AddFile(p + "/" + n);
    return f.Update(3, p, Add("n3", n));
  };
  for (int node : {1, 2}) ASSERT_TRUE(f.Get(node, p));
  // (Two whole-VD sharers past a bound of 1: this change is broadcast,
  // which ends the broadcast mark.)
  ASSERT_TRUE(change());
  for (int node : {1, 2}) ASSERT_TRUE(f.Get(node, p));
  ASSERT_TRUE(change());
  for (int round = 0; round < 2; ++round) {
    for (int node : {1, 2}) ASSERT_TRUE(GetName(f, node, p, "f0"));
    ASSERT_TRUE(change());
  }
  // Both churn now: one is recorded names-only, the other is not.
  for (int node : {1, 2}) ASSERT_TRUE(GetName(f, node, p, "f0"));
  const auto broadcasts = f.svc(0).stats().broadcasts_sent;
  ASSERT_TRUE(change());
  EXPECT_EQ(f.svc(0).stats().broadcasts_sent, broadcasts);
  // The recorded one answers from its table, the other asks again.
  std::vector<uint64_t> asked;
  for (int node : {1, 2}) {
    f.net().ResetStats();
    auto vd = GetName(f, node, p, "f0");
    ASSERT_TRUE(vd);
    EXPECT_NE((*vd)->Find("f0"), nullptr);
    asked.push_back(f.Requests(kVdGetName));
  }
  std::sort(asked.begin(), asked.end());
  EXPECT_EQ(asked, (std::vector<uint64_t>{0, 1}));
}

// Random creates (files and directories) and removes by random nodes; after
// each, random nodes look up random names and the directory's summary: the
// answer is always the model's. `churn_gap` 0: lookups in stale copies are
// recorded whole; 60 s: a copy that went stale twice is looked up for names
// only (kept across new names) from then on.
// `whole_max` (VdServiceOptions::whole_max_entries) 1: no copy is fetched
// first, and a lookup without one in a directory of 2 or more entries is
// answered for its name only (a large directory).
// `deltas`: changes reach whole copies as deltas (VdServiceOptions::deltas);
// *deltas_applied counts those the sharers applied.
void RandomLookups(std::chrono::milliseconds churn_gap, uint64_t* name_hits,
                   size_t whole_max = 16384, bool deltas = false,
                   uint64_t* deltas_applied = nullptr) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    VdServiceOptions o = NoLeases();
    o.churn_gap = churn_gap;
    o.whole_max_entries = whole_max;
    o.deltas = deltas;
    Federation f(4, o, seed);
    std::mt19937_64 rng(seed);
    const std::string p = PathManagedBy(f, "n0");
    for (int i = 0; i < 4; ++i) f.fs(i).AddDir(p);
    if (whole_max > 1) {
      for (int i = 0; i < 4; ++i) ASSERT_TRUE(f.Get(i, p));
    }
    std::map<std::string, std::pair<int, bool>> expect;  // name -> (holder, directory)
    for (int step = 0; step < 150; ++step) {
      const int actor = static_cast<int>(rng() % 4);
      const std::string name = "e" + std::to_string(rng() % 8);
      if (rng() % 3 != 0) {
        if (!expect.count(name)) {
          const bool dir = rng() % 5 == 0;
          if (dir) {
            f.fs(actor).AddDir(p + "/" + name);
          } else {
            f.fs(actor).AddFile(p + "/" + name);
          }
          ASSERT_TRUE(f.Update(actor, p, Add(Name(actor), name, dir ? DT_DIR : DT_REG)));
          expect[name] = {actor, dir};
        } else {
          const auto [h, dir] = expect[name];
          f.fs(h).Remove(p + "/" + name);
          ASSERT_TRUE(f.Update(actor, p, Remove(Name(h), name)));
          expect.erase(name);
        }
      }
      for (int k = 0; k < 3; ++k) {
        const int reader = static_cast<int>(rng() % 4);
        const std::string look = k == 2 ? "" : "e" + std::to_string(rng() % 8);
        auto vd = GetName(f, reader, p, look);
        ASSERT_TRUE(vd) << vd.error().ToString();
        if (look.empty()) {
          size_t dirs = 0;
          for (const auto& [n, e] : expect) dirs += e.second ? 1 : 0;
          EXPECT_EQ((*vd)->subdirs, dirs) << "step " << step << " n" << reader;
          continue;
        }
        const VdEntry* e = (*vd)->Find(look);
        if (expect.count(look)) {
          ASSERT_NE(e, nullptr) << "step " << step << " n" << reader << " " << look;
          EXPECT_EQ(e->holders, (std::vector<std::string>{Name(expect[look].first)}));
        } else {
          ASSERT_EQ(e, nullptr) << "step " << step << " n" << reader << " " << look;
        }
      }
    }
    for (int i = 0; i < 4; ++i) {
      *name_hits += f.svc(i).stats().dt.name_hits;
      if (deltas_applied != nullptr) *deltas_applied += f.svc(i).stats().dt.deltas_applied;
    }
  }
}

TEST(DirTableNames, EveryLookupSeesEveryChangeBeforeIt) {
  uint64_t name_hits = 0;
  RandomLookups(std::chrono::milliseconds(0), &name_hits);
  EXPECT_GT(name_hits, 50u);  // names in stale copies were used
}

TEST(DirTableNames, EveryNamesOnlyLookupSeesEveryChangeBeforeIt) {
  uint64_t name_hits = 0;
  RandomLookups(std::chrono::milliseconds(60000), &name_hits);
  EXPECT_GT(name_hits, 50u);  // names kept for names-only lookups were used
}

TEST(DirTableNames, EveryLookupInALargeDirectorySeesEveryChangeBeforeIt) {
  uint64_t name_hits = 0;
  RandomLookups(std::chrono::milliseconds(0), &name_hits, 1);
  EXPECT_GT(name_hits, 50u);  // names kept beside skeletons were used
}

// The same with changes told as deltas: whole copies are patched and stay
// valid, and every answer is still the model's.
TEST(DirTableNames, EveryLookupSeesEveryChangeBeforeItWithDeltas) {
  for (auto churn : {std::chrono::milliseconds(0), std::chrono::milliseconds(60000)}) {
    SCOPED_TRACE(churn.count());
    uint64_t name_hits = 0, applied = 0;
    RandomLookups(churn, &name_hits, 16384, true, &applied);
    EXPECT_GT(applied, 200u);  // copies were patched, not dropped
  }
  uint64_t name_hits = 0, applied = 0;
  RandomLookups(std::chrono::milliseconds(0), &name_hits, 1, true, &applied);
  EXPECT_GT(name_hits, 50u);  // skeletons take no delta: names beside them
}

// A lookup without a copy in a directory larger than whole_max_entries: the
// manager answers that name only and records the node for names only, so
// the node keeps a skeleton (dir_table.h, "Names only"); new names cost it
// nothing, changes of what it keeps reach it, and a listing is still whole.
TEST(DirTableNames, ALookupInALargeDirectoryFetchesThatNameOnly) {
  VdServiceOptions o = NoLeases();
  o.whole_max_entries = 50;
  Federation f(3, o);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  for (int i = 0; i < 200; ++i) f.fs(2).AddFile(p + "/big" + std::to_string(i));
  f.net().ResetStats();
  auto vd = GetName(f, 1, p, "big7");
  ASSERT_TRUE(vd) << vd.error().ToString();
  EXPECT_TRUE((*vd)->partial);
  EXPECT_FALSE((*vd)->kernel_may_cache);  // recorded without notify
  ASSERT_NE((*vd)->Find("big7"), nullptr);
  EXPECT_EQ((*vd)->Find("big7")->holders, (std::vector<std::string>{"n2"}));
  EXPECT_EQ((*vd)->subdirs, 1u);
  EXPECT_EQ(f.Requests(kVdGet), 1u);  // a whole fetch, answered for one name
  // Request and reply, past the dirmerge (whose listings carry 200 names).
  const auto dirmerge = f.net().TotalStats().bytes_sent;
  EXPECT_EQ(f.svc(0).stats().sharer_records, 1u);
  // Again: from the table. Another name: one small request.
  f.net().ResetStats();
  ASSERT_TRUE(GetName(f, 1, p, "big7"));
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);
  auto other = GetName(f, 1, p, "big8");
  ASSERT_TRUE(other);
  ASSERT_NE((*other)->Find("big8"), nullptr);
  EXPECT_EQ(f.Requests(kVdGetName), 1u);
  EXPECT_EQ(f.Requests(kVdGet), 0u);
  EXPECT_LT(f.net().TotalStats().bytes_sent, 1000u);
  EXPECT_LT(f.net().TotalStats().bytes_sent, dirmerge);
  // A new name elsewhere bumps nothing here; the removal of a kept one does.
  const auto before = f.svc(0).stats().invalidations_sent;
  f.fs(2).AddFile(p + "/new");
  ASSERT_TRUE(f.Update(2, p, Add("n2", "new")));
  EXPECT_EQ(f.svc(0).stats().invalidations_sent, before);
  f.net().ResetStats();
  auto fresh = GetName(f, 1, p, "new");  // never kept absent: asked, seen
  ASSERT_TRUE(fresh);
  EXPECT_NE((*fresh)->Find("new"), nullptr);
  EXPECT_EQ(f.Requests(kVdGetName), 1u);
  f.fs(2).Remove(p + "/big7");
  ASSERT_TRUE(f.Update(2, p, Remove("n2", "big7")));
  EXPECT_GT(f.svc(0).stats().invalidations_sent, before);
  auto gone = GetName(f, 1, p, "big7");
  ASSERT_TRUE(gone);
  EXPECT_EQ((*gone)->Find("big7"), nullptr);
  // A listing fetches the whole VD, and then answers lookups itself.
  auto whole = f.Get(1, p);
  ASSERT_TRUE(whole);
  EXPECT_FALSE((*whole)->partial);
  EXPECT_EQ((*whole)->entries.size(), 200u + 4u);  // Populate's 4, new, not big7
  f.net().ResetStats();
  auto hit = GetName(f, 1, p, "big9");
  ASSERT_TRUE(hit);
  EXPECT_NE((*hit)->Find("big9"), nullptr);
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);
  // Below the bound, a lookup without a copy still fetches it whole.
  const std::string q = PathManagedBy(f, "n0", true, "/q");
  Populate(f, q);
  auto small = GetName(f, 2, q, "f0");
  ASSERT_TRUE(small);
  f.net().ResetStats();
  ASSERT_TRUE(GetName(f, 2, q, "absent"));  // the whole copy answers absences
  EXPECT_EQ(f.net().TotalStats().messages_sent, 0u);
}

}  // namespace
}  // namespace fedfs::ns
