// The NodeFs contract for directory identities (nodefs/dir_id.h), part of
// the suite of node_fs_contract.h: a copy made from a template with an id
// lists that id, a directory made by mkdir lists none, the id stays across
// rename, and an id copied onto another directory is not believed.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "node_fs_contract.h"
#include "nodefs/dir_id.h"

namespace fedfs::ns::testing {
namespace {

const DirEntry* Named(const std::vector<DirEntry>& l, const std::string& name) {
  for (const auto& e : l) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace

TEST_P(NodeFsContract, DirectoryIdsAreStoredWithCopiesAndKeptAcrossRename) {
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/made", 0755));
  // /a and /a/b made as copies of directories whose ids are 7 and 9.
  ASSERT_TRUE(fs().MkdirParents("/a/b/x", {{0755, 0, 0, 7}, {0750, 0, 0, 9}}));
  auto top = fs().ListDir(root_cred_, "/");
  ASSERT_TRUE(top);
  const DirEntry* made = Named(*top, "made");
  const DirEntry* a = Named(*top, "a");
  ASSERT_NE(made, nullptr);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(made->id, 0u) << "mkdir stores nothing: its id is made from its node and inode";
  EXPECT_EQ(a->id, 7u);
  auto in_a = fs().ListDir(root_cred_, "/a");
  ASSERT_TRUE(in_a);
  ASSERT_NE(Named(*in_a, "b"), nullptr);
  EXPECT_EQ(Named(*in_a, "b")->id, 9u);

  // rename(2) keeps the inode and its xattrs: the id moves with the name.
  ASSERT_TRUE(fs().Rename(root_cred_, "/a/b", "/made/c", 0));
  auto in_made = fs().ListDir(root_cred_, "/made");
  ASSERT_TRUE(in_made);
  ASSERT_NE(Named(*in_made, "c"), nullptr);
  EXPECT_EQ(Named(*in_made, "c")->id, 9u);

  // Read as CopyDirIdOn does: the stored id, or DirIdOf(node, inode).
  auto st_c = fs().Stat(root_cred_, "/made/c");
  ASSERT_TRUE(st_c);
  auto id_c = CopyDirIdOn(fs(), "n1", "/made/c", *st_c);
  ASSERT_TRUE(id_c);
  EXPECT_EQ(*id_c, 9u);
  auto st_made = fs().Stat(root_cred_, "/made");
  ASSERT_TRUE(st_made);
  auto id_made = CopyDirIdOn(fs(), "n1", "/made", *st_made);
  ASSERT_TRUE(id_made);
  EXPECT_EQ(*id_made, DirIdOf("n1", st_made->st_ino));

  // An id copied with a directory (cp -a) names another inode: not believed.
  const std::string copied = EncodeDirId(9, st_c->st_ino);
  ASSERT_TRUE(fs().SetXattr(root_cred_, "/made", kDirIdXattr,
                            std::as_bytes(std::span(copied.data(), copied.size())), 0));
  auto again = fs().ListDir(root_cred_, "/");
  ASSERT_TRUE(again);
  ASSERT_NE(Named(*again, "made"), nullptr);
  EXPECT_EQ(Named(*again, "made")->id, 0u);
  auto id_made2 = CopyDirIdOn(fs(), "n1", "/made", *st_made);
  ASSERT_TRUE(id_made2);
  EXPECT_EQ(*id_made2, DirIdOf("n1", st_made->st_ino));
}

TEST(DirId, EncodingRoundTripsAndChecksTheInode) {
  const std::string v = EncodeDirId(0x0123456789abcdefULL, 42);
  EXPECT_EQ(v.size(), kDirIdXattrSize);
  EXPECT_EQ(DecodeDirId(v, 42), 0x0123456789abcdefULL);
  EXPECT_EQ(DecodeDirId(v, 43), 0u);
  EXPECT_EQ(DecodeDirId(v.substr(1), 42), 0u);
  EXPECT_EQ(DecodeDirId(std::string(), 42), 0u);
  EXPECT_NE(DirIdOf("n1", 5), DirIdOf("n2", 5));
  EXPECT_NE(DirIdOf("n1", 5), DirIdOf("n1", 6));
  EXPECT_NE(DirIdOf("n1", 5), 0u);
  EXPECT_EQ(MergeDirId(0, 4), 4u);
  EXPECT_EQ(MergeDirId(4, 0), 4u);
  EXPECT_EQ(MergeDirId(5, 4), 4u);
}

}  // namespace fedfs::ns::testing
