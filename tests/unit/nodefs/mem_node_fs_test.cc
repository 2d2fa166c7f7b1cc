// MemNodeFs (nodefs/mem_node_fs.h): the NodeFs contract suite
// (node_fs_contract.h) instantiated for it, and the cases of the suite that
// act on an export root directory (which MemNodeFs does not have) redone
// through the NodeFs itself: hostile symlinks, appends by another handle,
// statfs figures. Plus the footprint the simulator relies on.
#include "nodefs/mem_node_fs.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/unit/nodefs/node_fs_contract.h"

namespace fedfs::ns::testing {
namespace {

class MemEnv final : public NodeFsEnv {
 public:
  MemEnv() : fs_("mem"), root_(MakeTempDir("fedfs-mem-contract-")) {}
  ~MemEnv() override { RemoveTree(root_); }
  NodeFs& fs() override { return fs_; }
  std::string root() override { return root_; }
  bool backed_by_root() const override { return false; }

 private:
  MemNodeFs fs_;
  std::string root_;  // empty scratch directory the suite chmods; never used
};

INSTANTIATE_TEST_SUITE_P(
    Mem, NodeFsContract,
    ::testing::Values(NodeFsEnvFactory{"mem", [] { return std::unique_ptr<NodeFsEnv>(new MemEnv); }}),
    NodeFsEnvName);

std::span<const std::byte> B(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

template <class T>
int ErrOf(const Result<T>& r) {
  return r ? 0 : r.error().code;
}

TEST(MemNodeFs, HostileSymlinksRefused) {
  MemNodeFs fs("n");
  Cred root;
  ASSERT_TRUE(fs.Symlink(root, "/etc", "/esc"));
  ASSERT_TRUE(fs.Symlink(root, "../..", "/up"));
  ASSERT_TRUE(fs.Mkdir(root, "/sub", 0755));
  ASSERT_TRUE(fs.Symlink(root, "../../..", "/sub/up3"));
  EXPECT_EQ(ErrOf(fs.Stat(root, "/../etc/passwd")), EINVAL);
  EXPECT_EQ(ErrOf(fs.Stat(root, "/esc/passwd")), EXDEV);
  EXPECT_EQ(ErrOf(fs.Open(root, "/esc", O_RDONLY | O_DIRECTORY)), EXDEV);
  EXPECT_EQ(ErrOf(fs.ListDir(root, "/esc")), ENOTDIR);  // through no symlink
  EXPECT_EQ(ErrOf(fs.Stat(root, "/up/x")), EXDEV);
  EXPECT_EQ(ErrOf(fs.Create(root, "/up/x", O_WRONLY, 0644)), EXDEV);
  EXPECT_EQ(ErrOf(fs.Mkdir(root, "/sub/up3/x", 0755)), EXDEV);
  EXPECT_EQ(ErrOf(Status(fs.MkdirParents("/esc/a/b", {}))), ENOTDIR);
  EXPECT_EQ(ErrOf(Status(fs.Rename(root, "/sub", "/up/stolen", 0))), EXDEV);
  auto rl = fs.Readlink(root, "/esc");
  ASSERT_TRUE(rl);
  EXPECT_EQ(*rl, "/etc");
  // Symlinks that stay beneath the root are followed; loops end in ELOOP.
  ASSERT_TRUE(fs.Symlink(root, "sub", "/in"));
  auto c = fs.Create(root, "/sub/f", O_WRONLY, 0644);
  ASSERT_TRUE(c);
  ASSERT_TRUE(fs.Release(c->handle));
  EXPECT_TRUE(fs.Stat(root, "/in/f"));
  ASSERT_TRUE(fs.Symlink(root, "loop", "/loop"));
  EXPECT_EQ(ErrOf(fs.Stat(root, "/loop/x")), ELOOP);
}

TEST(MemNodeFs, AppendWritesAtCurrentEnd) {
  MemNodeFs fs("n");
  Cred root;
  auto a = fs.Create(root, "/f", O_WRONLY, 0644);
  ASSERT_TRUE(a);
  ASSERT_TRUE(fs.Write(a->handle, 0, B("abc")));
  auto app = fs.Open(root, "/f", O_WRONLY | O_APPEND);
  ASSERT_TRUE(app);
  ASSERT_TRUE(fs.Write(a->handle, 3, B("de")));  // someone else extends it
  ASSERT_TRUE(fs.Write(app->handle, 0, B("XYZ")));
  std::vector<std::byte> buf(16);
  auto r = fs.Open(root, "/f", O_RDONLY);
  ASSERT_TRUE(r);
  auto n = fs.Read(r->handle, 0, buf);
  ASSERT_TRUE(n);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buf.data()), *n), "abcdeXYZ");
  for (Handle h : {a->handle, app->handle, r->handle}) EXPECT_TRUE(fs.Release(h));
  EXPECT_EQ(fs.OpenHandleCount(), 0u);
}

TEST(MemNodeFs, StatFsAndInodeCount) {
  MemNodeFs fs("n");
  Cred root;
  auto s = fs.StatFs();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->f_bsize, 4096u);
  EXPECT_EQ(s->f_namemax, 255u);
  EXPECT_GT(s->f_blocks, 0u);
  EXPECT_EQ(fs.InodeCount(), 1u);
  ASSERT_TRUE(fs.Mkdir(root, "/d", 0755));
  auto c = fs.Create(root, "/d/f", O_WRONLY, 0644);
  ASSERT_TRUE(c);
  EXPECT_EQ(fs.InodeCount(), 3u);
  ASSERT_TRUE(fs.Unlink(root, "/d/f"));
  EXPECT_EQ(fs.InodeCount(), 3u);  // still open
  ASSERT_TRUE(fs.Release(c->handle));
  EXPECT_EQ(fs.InodeCount(), 2u);
  ASSERT_TRUE(fs.Rmdir(root, "/d"));
  EXPECT_EQ(fs.InodeCount(), 1u);
}

// Access, and the set-ID bits a write clears (the same rule LocalNodeFs
// applies; its test compares the rule with the kernel's).
TEST(MemNodeFs, AccessAndWritesClearingSetIdBits) {
  MemNodeFs fs("n");
  Cred root;
  const Cred nobody{.uid = 65534, .gid = 65534};
  ASSERT_TRUE(fs.Mkdir(root, "/priv", 0700));
  EXPECT_TRUE(fs.Access(root, "/priv", R_OK));
  EXPECT_EQ(ErrOf(fs.Access(nobody, "/priv", R_OK)), EACCES);
  EXPECT_TRUE(fs.Access(nobody, "/priv", F_OK));
  EXPECT_EQ(ErrOf(fs.Access(nobody, "/none", F_OK)), ENOENT);
  auto c = fs.Create(root, "/f", O_WRONLY, 0666);
  ASSERT_TRUE(c);
  ASSERT_TRUE(fs.SetAttr(root, "/f", std::nullopt, {.mode = 06777}));
  ASSERT_TRUE(fs.Write(c->handle, 0, B("a")));  // a writer with CAP_FSETID
  EXPECT_EQ(fs.Stat(root, "/f")->st_mode & 07777, 06777u);
  ASSERT_TRUE(fs.Write(c->handle, 0, B("b"), Writer{true, nobody}));
  EXPECT_EQ(fs.Stat(root, "/f")->st_mode & 07777, 0777u);
  EXPECT_TRUE(fs.Release(c->handle));
}

}  // namespace
}  // namespace fedfs::ns::testing
