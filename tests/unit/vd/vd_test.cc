// dirmerge and the conflict rule (vd/vd.h): table-driven, no fakes.
// Also checks that the incremental update path of the VD service
// (vd_internal::RefreshEntries) always equals a full rebuild.
#include "vd/vd.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "nodefs/dir_id.h"
#include "vd/kernel_cache.h"
#include "vd/vd_internal.h"

namespace fedfs::ns {
namespace {

NodeListing Node(const std::string& node, std::vector<std::pair<std::string, uint8_t>> entries) {
  std::vector<DirEntry> v;
  uint64_t ino = 100;
  for (auto& [name, type] : entries) v.push_back(DirEntry{name, type, ino++});
  return NodeListing{node, std::move(v)};
}
NodeListing Fails(const std::string& node, int code) {
  return NodeListing{node, Err(code, "test")};
}

// A compact rendering of an entry: "name:type:holder,holder[:alias]".
std::string Show(const VdEntry& e) {
  std::string s = e.name + ":" + std::to_string(e.type) + ":";
  for (size_t i = 0; i < e.holders.size(); ++i) s += (i ? "," : "") + e.holders[i];
  if (e.alias) s += ":alias(" + e.real_name + ")";
  return s;
}
std::vector<std::string> ShowAll(const VirtualDirectory& vd) {
  std::vector<std::string> out;
  for (const auto& e : vd.entries) out.push_back(Show(e));
  return out;
}
std::string ShowConflict(const Conflict& c) {
  std::string s = c.name + "=";
  for (auto& [node, type] : c.copies) s += node + "/" + std::to_string(type) + " ";
  return s;
}

constexpr uint8_t R = DT_REG, D = DT_DIR, L = DT_LNK;
const std::string r = std::to_string(DT_REG), d = std::to_string(DT_DIR),
                  l = std::to_string(DT_LNK);

struct MergeCase {
  const char* what;
  std::vector<NodeListing> in;
  std::vector<std::string> entries;      // expected visible entries, in order
  std::vector<std::string> holders;      // expected VD holders
  std::vector<std::string> conflicts;    // expected ShowConflict lines
  int error = 0;                         // expected errno instead
};

TEST(DirMerge, Table) {
  std::vector<MergeCase> cases = {
      {"directory on three nodes is one entry with three holders",
       {Node("n1", {{"src", D}}), Node("n2", {{"src", D}}), Node("n3", {{"src", D}})},
       {"src:" + d + ":n1,n2,n3"},
       {"n1", "n2", "n3"},
       {}},
      {"same file name on two nodes: plain name to the first node id, alias for the other",
       {Node("n2", {{"a.txt", R}}), Node("n1", {{"a.txt", R}})},
       {"a.txt:" + r + ":n1", "a.txt@n2:" + r + ":n2:alias(a.txt)"},
       {"n1", "n2"},
       {"a.txt=n1/" + r + " n2/" + r + " "}},
      {"file on one node, directory on another: the directory owns the name",
       {Node("n1", {{"x", R}}), Node("n2", {{"x", D}})},
       {"x:" + d + ":n2", "x@n1:" + r + ":n1:alias(x)"},
       {"n1", "n2"},
       {"x=n1/" + r + " n2/" + d + " "}},
      {"directories merge, every non-directory copy is an alias",
       {Node("a", {{"x", R}}), Node("b", {{"x", D}}), Node("c", {{"x", L}}),
        Node("d", {{"x", D}})},
       {"x:" + d + ":b,d", "x@a:" + r + ":a:alias(x)", "x@c:" + l + ":c:alias(x)"},
       {"a", "b", "c", "d"},
       {"x=a/" + r + " b/" + d + " c/" + l + " d/" + d + " "}},
      {"an alias colliding with a real name is hidden but still a conflict",
       {Node("n1", {{"f", R}}), Node("n2", {{"f", R}, {"f@n2", R}})},
       {"f:" + r + ":n1", "f@n2:" + r + ":n2"},
       {"n1", "n2"},
       {"f=n1/" + r + " n2/" + r + " "}},
      {"an alias longer than NAME_MAX is hidden but still a conflict",
       {Node("n1", {{std::string(250, 'q'), R}}), Node("node2", {{std::string(250, 'q'), R}})},
       {std::string(250, 'q') + ":" + r + ":n1"},
       {"n1", "node2"},
       {std::string(250, 'q') + "=n1/" + r + " node2/" + r + " "}},
      {"distinct names union, sorted",
       {Node("n2", {{"b", R}, {"z", L}}), Node("n1", {{"a", R}, {"c", D}})},
       {"a:" + r + ":n1", "b:" + r + ":n2", "c:" + d + ":n1", "z:" + l + ":n2"},
       {"n1", "n2"},
       {}},
      {"node errors are ignored; ENOENT nodes are not holders",
       {Node("n1", {{"a", R}}), Fails("n2", ETIMEDOUT), Fails("n3", ENOENT),
        Fails("n4", EHOSTDOWN), Node("n5", {})},
       {"a:" + r + ":n1"},
       {"n1", "n5"},
       {}},
      {"an empty directory on one node",
       {Node("n1", {}), Fails("n2", ENOENT)},
       {},
       {"n1"},
       {}},
      {"ENOTDIR on one node, a directory on another: the directory wins",
       {Fails("n1", ENOTDIR), Node("n2", {{"a", R}})},
       {"a:" + r + ":n2"},
       {"n2"},
       {}},
      {"invalid names from a node are skipped", 
       {Node("n1", {{"ok", R}, {"..", D}, {".", D}, {"a/b", R}, {"", R}})},
       {"ok:" + r + ":n1"},
       {"n1"},
       {}},
      {"a node listed twice counts once (first wins)",
       {Node("n1", {{"a", R}}), Node("n1", {{"b", R}})},
       {"a:" + r + ":n1"},
       {"n1"},
       {}},
      {"ENOENT when no node has the directory",
       {Fails("n1", ENOENT), Fails("n2", ETIMEDOUT)}, {}, {}, {}, ENOENT},
      {"ENOENT with no listings at all", {}, {}, {}, {}, ENOENT},
      {"ENOTDIR when some node has a non-directory and none a directory",
       {Fails("n1", ENOENT), Fails("n2", ENOTDIR)}, {}, {}, {}, ENOTDIR},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto vd = DirMerge("/p", 7, 3, c.in);
    std::vector<std::string> conflicts;
    for (const auto& x : FindConflicts(c.in)) conflicts.push_back(ShowConflict(x));
    if (c.error != 0) {
      ASSERT_FALSE(vd);
      EXPECT_EQ(vd.error().code, c.error);
      EXPECT_TRUE(conflicts.empty());
      continue;
    }
    ASSERT_TRUE(vd) << vd.error().ToString();
    EXPECT_EQ(vd->path, "/p");
    EXPECT_EQ(vd->epoch, 7u);
    EXPECT_EQ(vd->version, 3u);
    EXPECT_EQ(ShowAll(*vd), c.entries);
    EXPECT_EQ(vd->holders, c.holders);
    EXPECT_EQ(conflicts, c.conflicts);
    // Every visible name resolves through Find, and nothing else does.
    for (const auto& e : vd->entries) {
      ASSERT_NE(vd->Find(e.name), nullptr);
      EXPECT_EQ(vd->Find(e.name)->name, e.name);
    }
    EXPECT_EQ(vd->Find("no-such-name"), nullptr);
  }
}

TEST(DirMerge, NothingIsLostSilently) {
  // Every copy of every name is either visible or listed as a conflict.
  std::vector<NodeListing> in = {Node("n1", {{"f", R}, {"g", D}}),
                                 Node("n2", {{"f", R}, {"f@n3", D}, {"g", R}}),
                                 Node("n3", {{"f", L}, {"g", D}})};
  auto vd = DirMerge("/", 1, 1, in);
  ASSERT_TRUE(vd);
  auto conflicts = FindConflicts(in);
  for (const auto& l : in) {
    for (const auto& e : *l.listing) {
      bool visible = false;
      for (const auto& v : vd->entries) {
        if (v.real_name == e.name &&
            std::find(v.holders.begin(), v.holders.end(), l.node) != v.holders.end()) {
          visible = true;
        }
      }
      bool reported = false;
      for (const auto& c : conflicts) {
        if (c.name != e.name) continue;
        for (const auto& copy : c.copies) reported |= copy.first == l.node;
      }
      EXPECT_TRUE(visible || reported) << l.node << " " << e.name;
    }
  }
  // f@n3 (alias of n3's symlink f) collides with n2's real directory f@n3.
  ASSERT_NE(vd->Find("f@n3"), nullptr);
  EXPECT_FALSE(vd->Find("f@n3")->alias);
  EXPECT_EQ(vd->Find("f@n3")->type, D);
}

// RefreshEntries after any change must equal a rebuild from scratch, and the
// count of directories it keeps must match.
TEST(DirMerge, IncrementalRefreshEqualsRebuild) {
  std::mt19937 rng(42);
  const std::vector<std::string> nodes = {"n1", "n2", "n3"};
  const std::vector<std::string> names = {"a", "b", "a@n1", "a@n2", "a@n3", "b@n2", "c"};
  const std::vector<uint8_t> types = {R, D, L};
  auto st = vd_internal::Collect({Node("n1", {}), Node("n2", {}), Node("n3", {})});
  ASSERT_TRUE(st);
  VdEntries entries = vd_internal::AllEntries(*st);
  size_t subdirs = 0;
  for (int step = 0; step < 3000; ++step) {
    const auto& node = nodes[rng() % nodes.size()];
    const auto& name = names[rng() % names.size()];
    if (rng() % 2) {
      vd_internal::ApplyAdd(*st, node, name, types[rng() % types.size()]);
    } else {
      vd_internal::ApplyRemove(*st, node, name);
    }
    vd_internal::RefreshEntries(*st, name, &entries, &subdirs);
    VirtualDirectory full_vd;
    full_vd.entries = vd_internal::AllEntries(*st);
    full_vd.CountSubdirs();
    const auto& full = full_vd.entries;
    ASSERT_EQ(subdirs, full_vd.subdirs) << "step " << step;
    ASSERT_EQ(entries.size(), full.size()) << "step " << step;
    auto e = entries.begin();
    for (auto f = full.begin(); f != full.end(); ++e, ++f) {
      ASSERT_EQ(Show(*e), Show(*f)) << "step " << step;
    }
    // The hash index agrees with the tree, for present and absent names.
    for (const auto& n : names) {
      for (const std::string& k : {n, n + "@n1", n + "@n2", n + "@n3"}) {
        const VdEntry* want = full.Find(k);
        const VdEntry* got = entries.Find(k);
        ASSERT_EQ(got == nullptr, want == nullptr) << k << " step " << step;
        if (got) {
          ASSERT_EQ(Show(*got), Show(*want)) << "step " << step;
        }
      }
    }
  }
}

TEST(VdEntries, FindFollowsPutEraseCopyAndMove) {
  auto entry = [](const std::string& name) {
    VdEntry e;
    e.name = e.real_name = name;
    e.type = DT_REG;
    e.holders = {"n1"};
    return e;
  };
  VdEntries a(std::vector<VdEntry>{entry("a"), entry("b@n2"), entry("c")});
  EXPECT_EQ(a.NamesWithAt(), 1u);
  ASSERT_NE(a.Find("b@n2"), nullptr);
  EXPECT_EQ(a.Find("b"), nullptr);
  a.Put(entry("b"));
  a.Put(entry("b"));  // replaces: still one entry
  EXPECT_EQ(a.size(), 4u);
  ASSERT_NE(a.Find("b"), nullptr);
  a.Erase(a.FindIter("b@n2"));
  EXPECT_EQ(a.NamesWithAt(), 0u);
  EXPECT_EQ(a.Find("b@n2"), nullptr);
  EXPECT_EQ(a.FindIter("b@n2"), a.end());

  VdEntries copy(a);
  a.Erase(a.FindIter("a"));
  EXPECT_EQ(a.Find("a"), nullptr);
  ASSERT_NE(copy.Find("a"), nullptr);  // the copy has its own index
  EXPECT_EQ(copy.Find("a")->name, "a");
  VdEntries assigned;
  assigned = copy;
  copy.Erase(copy.FindIter("c"));
  ASSERT_NE(assigned.Find("c"), nullptr);
  EXPECT_EQ(copy.Find("c"), nullptr);

  VdEntries moved(std::move(assigned));  // the tree's nodes move with it
  ASSERT_NE(moved.Find("c"), nullptr);
  EXPECT_EQ(moved.Find("c")->name, "c");
  // The source is left empty and usable.
  EXPECT_EQ(assigned.size(), 0u);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(assigned.Find("c"), nullptr);
  assigned.Put(entry("z"));
  ASSERT_NE(assigned.Find("z"), nullptr);
  VdEntries target(std::vector<VdEntry>{entry("q@n1")});
  target = std::move(assigned);
  EXPECT_EQ(target.NamesWithAt(), 0u);
  EXPECT_EQ(target.Find("q@n1"), nullptr);
  ASSERT_NE(target.Find("z"), nullptr);
  moved.Put(entry("d@n3"));
  EXPECT_EQ(moved.NamesWithAt(), 1u);
  std::vector<std::string> order;
  for (const auto& e : moved) order.push_back(e.name);
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c", "d@n3"}));
}

TEST(DirMerge, ApplyChanges) {
  auto st = vd_internal::Collect({Node("n1", {{"a", R}})});
  ASSERT_TRUE(st);
  EXPECT_FALSE(vd_internal::ApplyAdd(*st, "n1", "a", R));  // already so
  EXPECT_TRUE(vd_internal::ApplyAdd(*st, "n2", "a", R));   // n2 becomes a holder of P too
  EXPECT_EQ(st->holders, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_TRUE(vd_internal::ApplyAdd(*st, "n2", "a", D));   // type change
  EXPECT_TRUE(vd_internal::ApplyRemove(*st, "n1", "a"));
  EXPECT_FALSE(vd_internal::ApplyRemove(*st, "n1", "a"));
  EXPECT_TRUE(vd_internal::ApplyRemove(*st, "n2", "a"));
  EXPECT_TRUE(st->copies.empty());  // no holder left: the entry is gone
}

}  // namespace
}  // namespace fedfs::ns

namespace fedfs::ns {
namespace {

// A file in a move (migration/, docs/migration.md "Visibility"): the
// target's incoming copy shows only next to the source's tombstone of the
// same move; a tombstone never shows; so a merge at any instant shows one
// copy.
TEST(DirMerge, AFileInAMoveShowsOnce) {
  auto entry = [](const std::string& name, uint64_t id, uint8_t role) {
    DirEntry e{name, DT_REG, 7};
    e.move_id = id;
    e.move_role = role;
    return e;
  };
  auto holders_of = [](const std::vector<NodeListing>& ls) {
    auto vd = DirMerge("/d", 1, 1, ls);
    EXPECT_TRUE(vd.has_value());
    std::vector<std::string> out;
    if (!vd) return out;
    for (const auto& e : vd->entries) out.push_back(e.name + "@" + e.holders.front());
    return out;
  };
  const DirEntry plain{"f", DT_REG, 5};
  // Before the commit: L's copy; T's linked copy hidden.
  EXPECT_EQ(holders_of({NodeListing{"L", std::vector<DirEntry>{plain}},
                        NodeListing{"T", std::vector<DirEntry>{entry("f", 9, DirEntry::kIncoming)}}}),
            std::vector<std::string>{"f@L"});
  // After it: T's copy, L's tombstone hidden.
  EXPECT_EQ(holders_of({NodeListing{"L", std::vector<DirEntry>{entry("f", 9, DirEntry::kOutgoing)}},
                        NodeListing{"T", std::vector<DirEntry>{entry("f", 9, DirEntry::kIncoming)}}}),
            std::vector<std::string>{"f@T"});
  // T told of the commit (plain), L not yet deleted (tombstone).
  EXPECT_EQ(holders_of({NodeListing{"L", std::vector<DirEntry>{entry("f", 9, DirEntry::kOutgoing)}},
                        NodeListing{"T", std::vector<DirEntry>{plain}}}),
            std::vector<std::string>{"f@T"});
  // A tombstone of another move does not reveal an incoming copy.
  EXPECT_EQ(holders_of({NodeListing{"L", std::vector<DirEntry>{plain, entry("g", 8, DirEntry::kOutgoing)}},
                        NodeListing{"T", std::vector<DirEntry>{entry("f", 9, DirEntry::kIncoming)}}}),
            std::vector<std::string>{"f@L"});
  // L down after the commit: T's copy is hidden until L's listing returns.
  EXPECT_EQ(holders_of({NodeListing{"L", Err(EHOSTDOWN, "down")},
                        NodeListing{"T", std::vector<DirEntry>{entry("f", 9, DirEntry::kIncoming)}}}),
            std::vector<std::string>{});
}

}  // namespace
}  // namespace fedfs::ns

namespace fedfs::ns {
namespace {

DirEntry Dir(const std::string& name, uint64_t ino, uint64_t stored = 0) {
  DirEntry e{name, DT_DIR, ino};
  e.id = stored;
  return e;
}

// A directory's identity (nodefs/dir_id.h): the least of its copies' ids;
// a copy with an id stored counts with it, one without with DirIdOf.
TEST(DirMergeIds, ADirectoryHasTheLeastIdOfItsCopies) {
  const uint64_t own1 = DirIdOf("n1", 10), own2 = DirIdOf("n2", 20);
  auto vd = DirMerge("/p", 1, 1,
                     {NodeListing{"n1", std::vector<DirEntry>{Dir("d", 10)}},
                      NodeListing{"n2", std::vector<DirEntry>{Dir("d", 20)}}});
  ASSERT_TRUE(vd);
  ASSERT_NE(vd->Find("d"), nullptr);
  EXPECT_EQ(vd->Find("d")->id, std::min(own1, own2)) << "made apart: the least";

  // n2's copy was made by FedFS from n1's: it stores n1's id, whatever the
  // order of the two.
  auto copied = DirMerge("/p", 1, 1,
                         {NodeListing{"n2", std::vector<DirEntry>{Dir("d", 20, own1)}},
                          NodeListing{"n1", std::vector<DirEntry>{Dir("d", 10)}}});
  ASSERT_TRUE(copied);
  EXPECT_EQ(copied->Find("d")->id, own1);
  // Alone, the copy still has the directory's id.
  auto alone =
      DirMerge("/p", 1, 1, {NodeListing{"n2", std::vector<DirEntry>{Dir("d", 20, own1)}}});
  ASSERT_TRUE(alone);
  EXPECT_EQ(alone->Find("d")->id, own1);
  // Files have none.
  auto file = DirMerge("/p", 1, 1, {Node("n1", {{"f", DT_REG}})});
  ASSERT_TRUE(file);
  EXPECT_EQ(file->Find("f")->id, 0u);
}

TEST(DirMergeIds, ChangesKeepTheIdKnownAndDropItWithTheLastDirectoryCopy) {
  auto st = vd_internal::Collect({NodeListing{"n1", std::vector<DirEntry>{Dir("d", 10)}}});
  ASSERT_TRUE(st);
  const uint64_t id = DirIdOf("n1", 10);
  VdEntries entries(vd_internal::AllEntries(*st));
  // A later report with another id (a watcher's, before the copy's id was
  // stored) does not replace it.
  EXPECT_TRUE(vd_internal::ApplyAdd(*st, "n2", "d", DT_DIR, id + 1));
  vd_internal::RefreshEntries(*st, "d", &entries);
  EXPECT_EQ(entries.Find("d")->id, id);
  EXPECT_TRUE(vd_internal::ApplyRemove(*st, "n1", "d"));
  vd_internal::RefreshEntries(*st, "d", &entries);
  EXPECT_EQ(entries.Find("d")->id, id) << "kept while a copy is listed";
  EXPECT_TRUE(vd_internal::ApplyRemove(*st, "n2", "d"));
  EXPECT_FALSE(st->dir_ids.contains("d"));
  // A new directory of that name is another one.
  EXPECT_TRUE(vd_internal::ApplyAdd(*st, "n1", "d", DT_DIR, 77));
  vd_internal::RefreshEntries(*st, "d", &entries);
  EXPECT_EQ(entries.Find("d")->id, 77u);
}

// The record of directories whose names went to the kernel since the last
// drop: marked ones only, until the drop clears them; past its bound,
// every directory counts as marked until then.
TEST(KernelNameMarks, MarkedUntilTheNextDropAndAllPastTheBound) {
  KernelNameMarks m(3);
  EXPECT_FALSE(m.Marked("/a"));
  m.Mark("/a", "");
  m.Mark("/b", "");
  EXPECT_TRUE(m.Marked("/a"));
  EXPECT_TRUE(m.Marked("/b"));
  EXPECT_FALSE(m.Marked("/c"));
  m.Clear();
  EXPECT_FALSE(m.Marked("/a"));
  for (const char* d : {"/a", "/b", "/c", "/d"}) m.Mark(d, "");
  EXPECT_TRUE(m.Marked("/never"));  // past the bound: unknown, so all
  m.Clear();
  EXPECT_FALSE(m.Marked("/never"));
  EXPECT_FALSE(m.Marked("/a"));
}

// By name: a change of names the kernel was never handed finds no mark; a
// conflict's alias and its real name are one; past the bound of names in
// one directory, the directory counts as wholly handed out.
TEST(KernelNameMarks, NamesAreMarkedOneByOne) {
  KernelNameMarks m(100, 2);
  m.Mark("/d", "x");
  m.Mark("/d", "a@n2");
  const std::vector<std::string> other{"y", "z"}, x{"y", "x"}, a{"a"}, alias{"x@n3"};
  EXPECT_TRUE(m.Marked("/d"));
  EXPECT_FALSE(m.Marked("/d", &other));
  EXPECT_TRUE(m.Marked("/d", &x));
  EXPECT_TRUE(m.Marked("/d", &a));
  EXPECT_TRUE(m.Marked("/d", &alias));
  EXPECT_FALSE(m.Marked("/e", &x));
  m.Mark("/d", "w");  // a third name: past the bound of 2
  EXPECT_TRUE(m.Marked("/d", &other));
  m.Clear();
  EXPECT_FALSE(m.Marked("/d", &x));
  m.Mark("/d", "");  // any name
  EXPECT_TRUE(m.Marked("/d", &other));
}

}  // namespace
}  // namespace fedfs::ns
