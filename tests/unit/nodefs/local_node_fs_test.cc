// LocalNodeFs: the NodeFs contract suite on a temporary export root, plus
// LocalNodeFs- and ScopedCred-specific tests.
#include "nodefs/local_node_fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <barrier>
#include <cstdio>
#include <cstring>
#include <span>
#include <thread>

#include <gtest/gtest.h>

#include "nodefs/cred.h"
#include "node_fs_contract.h"

namespace fedfs::ns::testing {
namespace {

class LocalEnv : public NodeFsEnv {
 public:
  LocalEnv() {
    root_ = MakeTempDir("fedfs-local-");
    auto fs = LocalNodeFs::Open("n0", root_);
    if (fs) fs_ = std::move(*fs);
  }
  ~LocalEnv() override {
    fs_.reset();
    RemoveTree(root_);
  }
  NodeFs& fs() override { return *fs_; }
  std::string root() override { return root_; }

 private:
  std::string root_;
  std::unique_ptr<LocalNodeFs> fs_;
};

INSTANTIATE_TEST_SUITE_P(Local, NodeFsContract,
                         ::testing::Values(NodeFsEnvFactory{
                             "local", [] { return std::unique_ptr<NodeFsEnv>(new LocalEnv()); }}),
                         NodeFsEnvName);

std::vector<gid_t> ThreadGroups() {
  int n = static_cast<int>(syscall(SYS_getgroups, 0, nullptr));
  std::vector<gid_t> g(static_cast<size_t>(std::max(n, 0)));
  if (n > 0) syscall(SYS_getgroups, n, g.data());
  return g;
}

TEST(ScopedCred, SwitchesAndRestoresThisThreadOnly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  const auto groups_before = ThreadGroups();
  std::barrier sync(2);
  uid_t seen_uid = 0, seen_gid = 0;
  std::vector<gid_t> seen_groups;
  std::thread t([&] {
    ScopedCred sc;
    ASSERT_TRUE(sc.Enter(Cred{65534, 65533, {4242, 4243}, 022}));
    seen_uid = ScopedCred::CurrentFsuid();
    seen_gid = ScopedCred::CurrentFsgid();
    seen_groups = ThreadGroups();
    sync.arrive_and_wait();  // main thread checks itself while we hold the cred
    sync.arrive_and_wait();
  });
  sync.arrive_and_wait();
  EXPECT_EQ(ScopedCred::CurrentFsuid(), 0u);
  EXPECT_EQ(ScopedCred::CurrentFsgid(), 0u);
  EXPECT_EQ(ThreadGroups(), groups_before);
  sync.arrive_and_wait();
  t.join();
  EXPECT_EQ(seen_uid, 65534u);
  EXPECT_EQ(seen_gid, 65533u);
  EXPECT_EQ(seen_groups, (std::vector<gid_t>{4242, 4243}));
}

TEST(ScopedCred, RestoresOnScopeExitAndChecksAccess) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  std::string dir = MakeTempDir("fedfs-cred-");
  std::string f = dir + "/secret";
  int fd = open(f.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  const auto groups_before = ThreadGroups();
  {
    ScopedCred sc;
    ASSERT_TRUE(sc.Enter(Cred{65534, 65534, {}, 0}));
    EXPECT_EQ(open(f.c_str(), O_RDONLY), -1);
    EXPECT_EQ(errno, EACCES);
    EXPECT_TRUE(ThreadGroups().empty());
  }
  EXPECT_EQ(ScopedCred::CurrentFsuid(), 0u);
  EXPECT_EQ(ThreadGroups(), groups_before);
  fd = open(f.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  close(fd);
  const mode_t umask_before = umask(022);
  {
    ScopedCred sc;
    ASSERT_TRUE(sc.Enter(Cred{0, 0, {}, 077}));
    ASSERT_EQ(mkdir((dir + "/m").c_str(), sc.NewMode(0777)), 0);
    ScopedCred twice;
    EXPECT_TRUE(twice.Enter(Cred{1, 1, {}, 0}));  // nesting restores in order
    EXPECT_EQ(ScopedCred::CurrentFsuid(), 1u);
    twice.Leave();
    EXPECT_EQ(ScopedCred::CurrentFsuid(), 0u);
  }
  EXPECT_EQ(umask(umask_before), 022u);  // the caller's umask lasted as long as the scope
  struct stat st {};
  ASSERT_EQ(stat((dir + "/m").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  RemoveTree(dir);
}

// Back at fsuid 0 a thread keeps its last caller's supplementary groups
// (the next caller with the same groups then makes no setgroups call): they
// decide nothing there, since the file-system capabilities are in effect
// again. Under another caller's scope they matter, and are restored.
TEST(ScopedCred, GroupsKeptAtRootDecideNothingAndNestedScopesRestoreThem) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  std::thread t([] {
    std::string dir = MakeTempDir("fedfs-cred-");
    // Group 4242 may not read, others may: a member of 4242 is refused.
    const std::string f = dir + "/group-denied";
    int fd = open(f.c_str(), O_CREAT | O_WRONLY, 0604);
    ASSERT_GE(fd, 0);
    close(fd);
    ASSERT_EQ(chown(f.c_str(), 65534, 4242), 0);
    ASSERT_EQ(chmod(f.c_str(), 0604), 0);
    {
      ScopedCred sc;
      ASSERT_TRUE(sc.Enter(Cred{65533, 65533, {4242}, 0}));
      EXPECT_EQ(open(f.c_str(), O_RDONLY), -1);
      EXPECT_EQ(errno, EACCES);
    }
    EXPECT_EQ(ScopedCred::CurrentFsuid(), 0u);
    EXPECT_EQ(ScopedCred::CurrentFsgid(), 0u);
    EXPECT_EQ(ThreadGroups(), (std::vector<gid_t>{4242}));
    fd = open(f.c_str(), O_RDONLY);  // root: the group decides nothing
    EXPECT_GE(fd, 0) << std::strerror(errno);
    if (fd >= 0) close(fd);
    {
      ScopedCred a;
      ASSERT_TRUE(a.Enter(Cred{65533, 65533, {1, 2}, 0}));
      {
        ScopedCred b;
        ASSERT_TRUE(b.Enter(Cred{65532, 65532, {3}, 0}));
        EXPECT_EQ(ThreadGroups(), (std::vector<gid_t>{3}));
      }
      EXPECT_EQ(ScopedCred::CurrentFsuid(), 65533u);
      EXPECT_EQ(ThreadGroups(), (std::vector<gid_t>{1, 2}));
      fd = open(f.c_str(), O_RDONLY);  // others may read: 4242 is not a group now
      EXPECT_GE(fd, 0) << std::strerror(errno);
      if (fd >= 0) close(fd);
    }
    RemoveTree(dir);
  });
  t.join();
}

TEST(ScopedCred, EnterTwiceRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  ScopedCred sc;
  ASSERT_TRUE(sc.Enter(Cred{5, 5, {}, 0}));
  EXPECT_FALSE(sc.Enter(Cred{6, 6, {}, 0}));
  EXPECT_EQ(ScopedCred::CurrentFsuid(), 5u);
}

TEST(ScopedCred, FailsWhenNotPermitted) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  // A thread whose real/effective ids are not root cannot switch fsuid.
  std::thread t([] {
    ASSERT_EQ(syscall(SYS_setresuid, 1000, 1000, 1000), 0);  // this thread only
    ScopedCred sc;
    auto st = sc.Enter(Cred{2000, 2000, {}, 0});
    EXPECT_FALSE(st);
    if (!st) {
      EXPECT_EQ(st.error().code, EPERM);
    }
  });
  t.join();
  EXPECT_EQ(getuid(), 0u);
}

TEST(LocalNodeFs, OpenRootErrors) {
  EXPECT_EQ(LocalNodeFs::Open("n", "/nonexistent/fedfs").error().code, ENOENT);
  EXPECT_EQ(LocalNodeFs::Open("n", "/etc/passwd").error().code, ENOTDIR);
}

TEST(LocalNodeFs, HandlesAreTableIndicesNotFds) {
  std::string dir = MakeTempDir("fedfs-local-");
  auto fs = LocalNodeFs::Open("n0", dir);
  ASSERT_TRUE(fs);
  Cred root;
  auto a = (*fs)->Create(root, "/a", O_RDWR, 0644);
  auto b = (*fs)->Create(root, "/b", O_RDWR, 0644);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->handle, 1u);
  EXPECT_EQ(b->handle, 2u);
  EXPECT_EQ((*fs)->OpenHandleCount(), 2u);
  std::vector<std::byte> buf(4);
  // fd numbers (0, 1, 2, ...) are not handles.
  EXPECT_EQ((*fs)->Read(0, 0, buf).error().code, EBADF);
  EXPECT_EQ((*fs)->Read(3, 0, buf).error().code, EBADF);
  EXPECT_TRUE((*fs)->Release(a->handle));
  EXPECT_TRUE((*fs)->Release(b->handle));
  EXPECT_EQ((*fs)->OpenHandleCount(), 0u);
  auto c = (*fs)->Open(root, "/a", O_RDONLY);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->handle, 3u);  // never reused
  EXPECT_TRUE((*fs)->Release(c->handle));
  fs->reset();
  RemoveTree(dir);
}

// Deferred opens (vfs/vfs_deferred.cc): an open that expects a file, and an
// open by the file handle taken before its path went.
TEST(LocalNodeFs, OpenExpectingAndByFileHandleFindTheFileOpened) {
  std::string dir = MakeTempDir("fedfs-local-");
  auto fs = LocalNodeFs::Open("n0", dir);
  ASSERT_TRUE(fs);
  Cred root;
  ASSERT_EQ(::mkdir((dir + "/d").c_str(), 0755), 0);
  auto a = (*fs)->Create(root, "/d/a", O_RDWR, 0644);
  ASSERT_TRUE(a);
  const std::string bytes = "abc";
  ASSERT_TRUE((*fs)->Write(a->handle, 0, std::as_bytes(std::span(bytes))));
  ASSERT_TRUE((*fs)->Release(a->handle));
  const uint64_t ino = a->st.st_ino;
  // The same file: opened; another one or none: ESTALE, nothing left open.
  auto same = (*fs)->OpenExpecting(root, "/d/a", O_RDONLY, ino, 0);
  ASSERT_TRUE(same) << same.error().ToString();
  ASSERT_TRUE((*fs)->Release(same->handle));
  EXPECT_EQ((*fs)->OpenExpecting(root, "/d/a", O_RDONLY, ino + 1, 0).error().code, ESTALE);
  EXPECT_EQ((*fs)->OpenExpecting(root, "/d/none", O_RDONLY, ino, 0).error().code, ESTALE);
  EXPECT_EQ((*fs)->OpenHandleCount(), 0u);
  // Its directory renamed: the path names nothing, the file handle the file.
  auto fh = (*fs)->FileHandleOf("/d/a");
  ASSERT_TRUE(fh) << fh.error().ToString();
  ASSERT_EQ(::rename((dir + "/d").c_str(), (dir + "/e").c_str()), 0);
  auto by = (*fs)->OpenByFileHandle(*fh, O_RDONLY);
  ASSERT_TRUE(by) << by.error().ToString();
  EXPECT_EQ(by->st.st_ino, ino);
  std::vector<std::byte> buf(8);
  auto n = (*fs)->Read(by->handle, 0, buf);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 3u);
  ASSERT_TRUE((*fs)->Release(by->handle));
  // Malformed bytes and truncating opens are refused.
  EXPECT_EQ((*fs)->OpenByFileHandle(std::string(3, 'x'), O_RDONLY).error().code, EINVAL);
  std::string bad = *fh;
  bad[0] = static_cast<char>(bad[0] + 1);  // handle_bytes no longer matches
  EXPECT_EQ((*fs)->OpenByFileHandle(bad, O_RDONLY).error().code, EINVAL);
  EXPECT_EQ((*fs)->OpenByFileHandle(*fh, O_RDWR | O_TRUNC).error().code, EINVAL);
  EXPECT_EQ((*fs)->OpenHandleCount(), 0u);
  fs->reset();
  RemoveTree(dir);
}

TEST(LocalNodeFs, GetXattrThroughAHandleAnswersAsByPath) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (trusted.* xattrs)";
  std::string dir = MakeTempDir("fedfs-local-");
  auto fs = LocalNodeFs::Open("n0", dir);
  ASSERT_TRUE(fs);
  Cred root;
  auto f = (*fs)->Create(root, "/f", O_WRONLY, 0600);
  ASSERT_TRUE(f);
  const std::string v = "value";
  ASSERT_TRUE((*fs)->SetXattr(root, "/f", "user.k", std::as_bytes(std::span(v)), 0));
  ASSERT_TRUE((*fs)->SetXattr(root, "/f", "trusted.k", std::as_bytes(std::span(v)), 0));
  // A write-only handle serves it; the size-only form too.
  auto got = (*fs)->GetXattrOf(root, f->handle, "user.k", 64, nullptr);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, v);
  size_t needed = 0;
  ASSERT_TRUE((*fs)->GetXattrOf(root, f->handle, "user.k", 0, &needed));
  EXPECT_EQ(needed, v.size());
  EXPECT_EQ((*fs)->GetXattrOf(root, f->handle, "security.capability", 64, nullptr).error().code,
            ENODATA);
  // As another user: the file's mode refuses reading user.*, and trusted.*
  // is hidden.
  Cred other{.uid = 65534, .gid = 65534};
  auto denied = (*fs)->GetXattrOf(other, f->handle, "user.k", 64, nullptr);
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().code, EACCES);
  EXPECT_EQ((*fs)->GetXattrOf(other, f->handle, "trusted.k", 64, nullptr).error().code, ENODATA);
  // The handle's file even after its name moved.
  ASSERT_TRUE((*fs)->Rename(root, "/f", "/g", 0));
  got = (*fs)->GetXattrOf(root, f->handle, "user.k", 64, nullptr);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, v);
  EXPECT_TRUE((*fs)->Release(f->handle));
  EXPECT_EQ((*fs)->GetXattrOf(root, f->handle, "user.k", 64, nullptr).error().code, EBADF);
  fs->reset();
  RemoveTree(dir);
}

// File capabilities go before a first write whoever writes (the kernel asks
// for it as the writer), so a caller who may write the file may remove them;
// one who may not, may not; no non-root caller may set them.
TEST(LocalNodeFs, FileCapabilitiesRemovableByWhoMayWriteTheFile) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (security.capability)";
  std::string dir = MakeTempDir("fedfs-local-");
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  auto fs = LocalNodeFs::Open("n0", dir);
  ASSERT_TRUE(fs);
  Cred root;
  const Cred nobody{.uid = 65534, .gid = 65534};
  // struct vfs_cap_data, revision 2: CAP_NET_RAW permitted.
  const uint32_t caps[5] = {0x02000000, 1u << 13, 0, 0, 0};
  const auto blob = std::as_bytes(std::span(caps));
  for (const char* f : {"/writable", "/readonly"}) {
    auto h = (*fs)->Create(root, f, O_WRONLY, 0644);
    ASSERT_TRUE(h);
    ASSERT_TRUE((*fs)->Release(h->handle));
    ASSERT_TRUE((*fs)->SetXattr(root, f, "security.capability", blob, 0)) << f;
  }
  ASSERT_EQ(::chmod((dir + "/writable").c_str(), 0666), 0);
  EXPECT_EQ((*fs)->SetXattr(nobody, "/writable", "security.capability", blob, 0).error().code, EPERM);
  EXPECT_EQ((*fs)->RemoveXattr(nobody, "/readonly", "security.capability").error().code, EPERM);
  EXPECT_EQ((*fs)->RemoveXattr(nobody, "/readonly", "security.selinux").error().code, EPERM);
  EXPECT_TRUE((*fs)->RemoveXattr(nobody, "/writable", "security.capability"));
  EXPECT_EQ(::getxattr((dir + "/writable").c_str(), "security.capability", nullptr, 0), -1);
  EXPECT_GT(::getxattr((dir + "/readonly").c_str(), "security.capability", nullptr, 0), 0);
  EXPECT_TRUE((*fs)->RemoveXattr(root, "/readonly", "security.capability"));
  fs->reset();
  RemoveTree(dir);
}

// A Write by a writer without CAP_FSETID leaves a file's set-ID bits as a
// native write by that writer leaves them (the kernel decides the reference:
// pwrite on this thread under the writer's fs credentials, which drop
// CAP_FSETID); a writer with it (Writer{}) keeps them, as root natively.
TEST(LocalNodeFs, WriteClearsSetIdBitsAsANativeWriteByTheWriter) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  std::string dir = MakeTempDir("fedfs-local-");
  ASSERT_EQ(::mkdir((dir + "/native").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir + "/root").c_str(), 0755), 0);
  auto fs = LocalNodeFs::Open("n0", dir + "/root");
  ASSERT_TRUE(fs);
  const std::vector<Cred> writers = {{.uid = 1001, .gid = 1001},
                                     {.uid = 1001, .gid = 7, .groups = {1001}},
                                     {.uid = 1001, .gid = 7}};
  const mode_t modes[] = {04777, 02777, 02767, 06777, 06767, 0777};
  int n = 0;
  for (const Cred& w : writers) {
    for (const mode_t m : modes) {
      const std::string name = "/f" + std::to_string(n++);
      for (const std::string& p : {dir + "/native" + name, dir + "/root" + name}) {
        const int fd = ::open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        ASSERT_GE(fd, 0);
        ::close(fd);
        ASSERT_EQ(::chown(p.c_str(), 0, 1001), 0);
        ASSERT_EQ(::chmod(p.c_str(), m), 0);
      }
      struct stat native {}, mine {};
      {
        const int fd = ::open((dir + "/native" + name).c_str(), O_WRONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        ScopedCred as;
        ASSERT_TRUE(as.Enter(w));
        EXPECT_EQ(::pwrite(fd, "x", 1, 0), 1);
        as.Leave();
        ::close(fd);
      }
      auto h = (*fs)->Open(Cred{}, name, O_WRONLY);
      ASSERT_TRUE(h);
      ASSERT_TRUE((*fs)->Write(h->handle, 0, std::as_bytes(std::span("x", 1)), Writer{true, w}));
      ASSERT_TRUE((*fs)->Release(h->handle));
      ASSERT_EQ(::stat((dir + "/native" + name).c_str(), &native), 0);
      ASSERT_EQ(::stat((dir + "/root" + name).c_str(), &mine), 0);
      EXPECT_EQ(mine.st_mode, native.st_mode)
          << std::oct << "mode 0" << m << " gid 1001, writer " << std::dec << w.uid << ":" << w.gid
          << (w.groups.empty() ? "" : " groups 1001");
      // A writer with CAP_FSETID keeps them.
      ASSERT_EQ(::chmod((dir + "/root" + name).c_str(), m), 0);
      h = (*fs)->Open(Cred{}, name, O_WRONLY);
      ASSERT_TRUE(h);
      ASSERT_TRUE((*fs)->Write(h->handle, 0, std::as_bytes(std::span("x", 1))));
      ASSERT_TRUE((*fs)->Release(h->handle));
      ASSERT_EQ(::stat((dir + "/root" + name).c_str(), &mine), 0);
      EXPECT_EQ(mine.st_mode & 07777, m);
    }
  }
  fs->reset();
  RemoveTree(dir);
}

}  // namespace
}  // namespace fedfs::ns::testing
