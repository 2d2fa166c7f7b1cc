// InodeTable (vfs/inode_table.h): names, paths, moves and when inodes go.
#include "vfs/inode_table.h"

#include <gtest/gtest.h>

namespace fedfs::ns {
namespace {

using Inode = InodeTable::Inode;
constexpr uint64_t kRoot = 1;

InodeTable Table() {
  Inode root;
  root.type = S_IFDIR;
  root.nlookup = 1;
  return InodeTable(kRoot, root);
}

Inode Entry(uint64_t parent, const std::string& name, mode_t type, std::string real = "") {
  Inode n;
  n.parent = parent;
  n.name = name;
  n.real_name = real.empty() ? name : real;
  n.type = type;
  n.nlookup = 1;
  return n;
}

TEST(InodeTable, PathsUseVisibleNamesOfDirectoriesAndRealNamesOfFiles) {
  InodeTable t = Table();
  const uint64_t d = t.Add(Entry(kRoot, "d", S_IFDIR));
  const uint64_t f = t.Add(Entry(d, "f~n2", S_IFREG, "f"));
  EXPECT_EQ(t.Path(kRoot), "/");
  EXPECT_EQ(t.Path(d), "/d");
  EXPECT_EQ(t.Path(f), "/d/f");
  EXPECT_EQ(t.Named(d, "f~n2"), f);
  EXPECT_EQ(t.Named(d, "f"), std::nullopt);
  EXPECT_EQ(t.Find(kRoot)->children, 1u);
  EXPECT_EQ(t.Find(d)->children, 1u);
  EXPECT_NE(d, f);
  EXPECT_GT(d, kRoot);
}

TEST(InodeTable, UnlinkedInodesLiveOnByNumberWithoutAPath) {
  InodeTable t = Table();
  const uint64_t d = t.Add(Entry(kRoot, "d", S_IFDIR));
  const uint64_t f = t.Add(Entry(d, "f", S_IFREG));
  t.Unlink(d, "f");
  EXPECT_EQ(t.Named(d, "f"), std::nullopt);
  ASSERT_NE(t.Find(f), nullptr);
  EXPECT_FALSE(t.Find(f)->linked);
  EXPECT_EQ(t.Path(f), "");
  // Its name may be taken by a new inode.
  const uint64_t g = t.Add(Entry(d, "f", S_IFREG));
  EXPECT_EQ(t.Named(d, "f"), g);
  // Replaced: unlinked and marked; the new name's owner is not touched.
  const uint64_t h = t.Add(Entry(d, "h", S_IFREG));
  Inode& r = t.MarkReplaced(h);
  EXPECT_TRUE(r.replaced);
  EXPECT_FALSE(r.linked);
  EXPECT_EQ(t.Named(d, "h"), std::nullopt);
  EXPECT_EQ(t.Named(d, "f"), g);
}

TEST(InodeTable, MoveRenamesAndKeepsChildCounts) {
  InodeTable t = Table();
  const uint64_t a = t.Add(Entry(kRoot, "a", S_IFDIR));
  const uint64_t b = t.Add(Entry(kRoot, "b", S_IFDIR));
  const uint64_t f = t.Add(Entry(a, "f", S_IFREG));
  auto taken = t.TakeName(a, "f");
  ASSERT_EQ(taken, f);
  EXPECT_EQ(t.Named(a, "f"), std::nullopt);
  t.Move(f, b, "g");
  EXPECT_EQ(t.Named(b, "g"), f);
  EXPECT_EQ(t.Path(f), "/b/g");
  EXPECT_EQ(t.Find(f)->real_name, "g");
  EXPECT_EQ(t.Find(a)->children, 0u);
  EXPECT_EQ(t.Find(b)->children, 1u);
  EXPECT_EQ(t.TakeName(a, "f"), std::nullopt);
}

TEST(InodeTable, EraseUnusedGoesUpWhileNothingHoldsAnInode) {
  InodeTable t = Table();
  const uint64_t a = t.Add(Entry(kRoot, "a", S_IFDIR));
  const uint64_t b = t.Add(Entry(a, "b", S_IFDIR));
  const uint64_t f = t.Add(Entry(b, "f", S_IFREG));
  t.Find(a)->nlookup = 0;  // the kernel forgot a and b; f still looked up
  t.Find(b)->nlookup = 0;
  EXPECT_TRUE(t.EraseUnused(b).empty());  // b has a child
  t.Find(f)->nlookup = 0;
  EXPECT_EQ(t.EraseUnused(f), (std::vector<uint64_t>{f, b, a}));
  EXPECT_FALSE(t.Contains(a));
  EXPECT_EQ(t.Named(kRoot, "a"), std::nullopt);
  EXPECT_EQ(t.Find(kRoot)->children, 0u);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_TRUE(t.EraseUnused(kRoot).empty());  // the root stays
}

}  // namespace
}  // namespace fedfs::ns
