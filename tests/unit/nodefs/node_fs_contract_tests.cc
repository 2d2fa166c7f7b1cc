// The NodeFs contract suite (see node_fs_contract.h).
#include "node_fs_contract.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "nodefs/cred.h"

namespace fedfs::ns::testing {
namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

void RemoveTreeAt(int parent, const char* name) {
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    DIR* d = fdopendir(fd);
    if (d != nullptr) {
      std::vector<std::string> names;
      while (struct dirent* de = readdir(d)) {
        std::string n = de->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      for (const auto& n : names) {
        if (unlinkat(dirfd(d), n.c_str(), 0) != 0) RemoveTreeAt(dirfd(d), n.c_str());
      }
      closedir(d);
    } else {
      close(fd);
    }
  }
  unlinkat(parent, name, AT_REMOVEDIR);
}

// Native syscall outcome: rc and errno.
struct Sys {
  long rc;
  int err;
};
template <class F>
Sys Native(F f) {
  errno = 0;
  long rc = f();
  return Sys{rc, rc < 0 ? errno : 0};
}
// As `c`, umask included (NewMode sets it, as before any call that makes an
// object in LocalNodeFs).
template <class F>
Sys NativeAs(const Cred& c, F f) {
  ScopedCred sc;
  if (!sc.Enter(c)) return Sys{-1, EPERM};
  (void)sc.NewMode(0);
  return Native(f);
}

// The NodeFs result matches the native outcome (success, or the same errno).
template <class T>
::testing::AssertionResult Same(const Result<T>& r, Sys n) {
  if (n.rc < 0) {
    if (r) return ::testing::AssertionFailure() << "NodeFs succeeded, native failed: " << std::strerror(n.err);
    if (r.error().code != n.err) {
      return ::testing::AssertionFailure() << "NodeFs: " << r.error().ToString()
                                           << "; native: " << std::strerror(n.err);
    }
    return ::testing::AssertionSuccess();
  }
  if (!r) return ::testing::AssertionFailure() << "NodeFs failed: " << r.error().ToString();
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult SameStat(const struct stat& a, const struct stat& b) {
  if (a.st_mode != b.st_mode || a.st_nlink != b.st_nlink || a.st_uid != b.st_uid ||
      a.st_gid != b.st_gid || (!S_ISDIR(a.st_mode) && a.st_size != b.st_size)) {
    return ::testing::AssertionFailure()
           << std::oct << "mode " << a.st_mode << " vs " << b.st_mode << std::dec << ", nlink "
           << a.st_nlink << " vs " << b.st_nlink << ", uid " << a.st_uid << " vs " << b.st_uid
           << ", gid " << a.st_gid << " vs " << b.st_gid << ", size " << a.st_size << " vs "
           << b.st_size;
  }
  return ::testing::AssertionSuccess();
}

template <class T>
int ErrOf(const Result<T>& r) {
  return r ? 0 : r.error().code;
}

}  // namespace

void RemoveTree(const std::string& path) { RemoveTreeAt(AT_FDCWD, path.c_str()); }

std::string MakeTempDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string t = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
  if (mkdtemp(t.data()) == nullptr) return "";
  chmod(t.c_str(), 0755);
  return t;
}

void NodeFsContract::SetUp() {
  env_ = GetParam().make();
  ASSERT_NE(env_, nullptr);
  ASSERT_EQ(chmod(root().c_str(), 0755), 0);
  native_ = MakeTempDir("fedfs-native-");
  ASSERT_FALSE(native_.empty());
}

void NodeFsContract::TearDown() {
  env_.reset();
  if (!native_.empty()) RemoveTree(native_);
}

// The same regular file with `data` in both trees, as root.
#define MAKE_FILE(P_, D_)                                                          \
  do {                                                                             \
    const std::string path_(P_);                                                   \
    const std::string body_(D_);                                                   \
    auto o_ = fs().Create(root_cred_, path_, O_WRONLY | O_EXCL, 0644);             \
    ASSERT_TRUE(o_) << o_.error().ToString();                                      \
    ASSERT_EQ(fs().Write(o_->handle, 0, Bytes(body_)).value_or(0), body_.size());  \
    ASSERT_TRUE(fs().Release(o_->handle));                                         \
    int fd_ = open(N(path_).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);           \
    ASSERT_GE(fd_, 0);                                                             \
    ASSERT_EQ(write(fd_, body_.data(), body_.size()), static_cast<ssize_t>(body_.size())); \
    close(fd_);                                                                    \
  } while (0)

#define EXPECT_SAME_STAT(p)                                                        \
  do {                                                                             \
    auto s_ = fs().Stat(root_cred_, p);                                            \
    struct stat n_ {};                                                             \
    Sys ns_ = Native([&] { return lstat(N(p).c_str(), &n_); });                    \
    EXPECT_TRUE(Same(s_, ns_)) << p;                                               \
    if (s_ && ns_.rc == 0) {                                                       \
      EXPECT_TRUE(SameStat(*s_, n_)) << p;                                         \
    }                                                                              \
  } while (0)

TEST_P(NodeFsContract, StatAndErrors) {
  umask(0);
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/d", 0755));
  ASSERT_EQ(mkdir(N("/d").c_str(), 0755), 0);
  MAKE_FILE("/d/f", "hello");
  EXPECT_SAME_STAT("/");
  EXPECT_SAME_STAT("/d");
  EXPECT_SAME_STAT("/d/f");
  EXPECT_SAME_STAT("/missing");
  EXPECT_SAME_STAT("/d/f/x");
  EXPECT_SAME_STAT("/missing/x");
  EXPECT_EQ(ErrOf(fs().Stat(root_cred_, "relative")), EINVAL);
  EXPECT_EQ(ErrOf(fs().Stat(root_cred_, "/d/")), EINVAL);
  EXPECT_EQ(ErrOf(fs().Stat(root_cred_, "/d//f")), EINVAL);
}

TEST_P(NodeFsContract, MkdirRmdir) {
  umask(0);
  MAKE_FILE("/file", "x");
  auto m = fs().Mkdir(root_cred_, "/a", 0750);
  ASSERT_TRUE(m);
  ASSERT_EQ(mkdir(N("/a").c_str(), 0750), 0);
  EXPECT_SAME_STAT("/a");
  EXPECT_TRUE(Same(fs().Mkdir(root_cred_, "/a", 0750), Native([&] { return mkdir(N("/a").c_str(), 0750); })));
  EXPECT_TRUE(Same(fs().Mkdir(root_cred_, "/x/y", 0755), Native([&] { return mkdir(N("/x/y").c_str(), 0755); })));
  EXPECT_TRUE(Same(fs().Mkdir(root_cred_, "/file/y", 0755), Native([&] { return mkdir(N("/file/y").c_str(), 0755); })));
  EXPECT_TRUE(Same(fs().Mkdir(root_cred_, "/a/b", 01777), Native([&] { return mkdir(N("/a/b").c_str(), 01777); })));
  EXPECT_SAME_STAT("/a/b");
  EXPECT_SAME_STAT("/a");
  EXPECT_TRUE(Same(fs().Rmdir(root_cred_, "/a"), Native([&] { return rmdir(N("/a").c_str()); })));
  EXPECT_TRUE(Same(fs().Rmdir(root_cred_, "/a/b"), Native([&] { return rmdir(N("/a/b").c_str()); })));
  EXPECT_TRUE(Same(fs().Rmdir(root_cred_, "/file"), Native([&] { return rmdir(N("/file").c_str()); })));
  EXPECT_TRUE(Same(fs().Rmdir(root_cred_, "/nope"), Native([&] { return rmdir(N("/nope").c_str()); })));
  EXPECT_TRUE(Same(fs().Rmdir(root_cred_, "/a"), Native([&] { return rmdir(N("/a").c_str()); })));
  EXPECT_SAME_STAT("/a");
}

TEST_P(NodeFsContract, MknodSymlinkReadlink) {
  umask(0);
  MAKE_FILE("/file", "x");
  EXPECT_TRUE(Same(fs().Mknod(root_cred_, "/fifo", S_IFIFO | 0640, 0),
                   Native([&] { return mknod(N("/fifo").c_str(), S_IFIFO | 0640, 0); })));
  EXPECT_SAME_STAT("/fifo");
  EXPECT_TRUE(Same(fs().Mknod(root_cred_, "/reg", 0600, 0),
                   Native([&] { return mknod(N("/reg").c_str(), 0600, 0); })));
  EXPECT_SAME_STAT("/reg");
  EXPECT_TRUE(Same(fs().Mknod(root_cred_, "/fifo", S_IFIFO | 0640, 0),
                   Native([&] { return mknod(N("/fifo").c_str(), S_IFIFO | 0640, 0); })));
  EXPECT_TRUE(Same(fs().Symlink(root_cred_, "target/x", "/l"),
                   Native([&] { return symlink("target/x", N("/l").c_str()); })));
  EXPECT_SAME_STAT("/l");
  EXPECT_TRUE(Same(fs().Symlink(root_cred_, "t", "/l"),
                   Native([&] { return symlink("t", N("/l").c_str()); })));
  auto rl = fs().Readlink(root_cred_, "/l");
  ASSERT_TRUE(rl);
  EXPECT_EQ(*rl, "target/x");
  char buf[64];
  EXPECT_TRUE(Same(fs().Readlink(root_cred_, "/file"),
                   Native([&] { return readlink(N("/file").c_str(), buf, sizeof(buf)); })));
  EXPECT_TRUE(Same(fs().Readlink(root_cred_, "/none"),
                   Native([&] { return readlink(N("/none").c_str(), buf, sizeof(buf)); })));
}

TEST_P(NodeFsContract, UnlinkRenameLink) {
  umask(0);
  MAKE_FILE("/f", "data");
  MAKE_FILE("/other", "o");
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/d", 0755));
  ASSERT_EQ(mkdir(N("/d").c_str(), 0755), 0);
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/full", 0755));
  ASSERT_EQ(mkdir(N("/full").c_str(), 0755), 0);
  MAKE_FILE("/full/x", "");

  EXPECT_TRUE(Same(fs().Link(root_cred_, "/f", "/g"), Native([&] { return link(N("/f").c_str(), N("/g").c_str()); })));
  EXPECT_SAME_STAT("/f");
  EXPECT_SAME_STAT("/g");
  EXPECT_TRUE(Same(fs().Link(root_cred_, "/f", "/other"), Native([&] { return link(N("/f").c_str(), N("/other").c_str()); })));
  EXPECT_TRUE(Same(fs().Link(root_cred_, "/d", "/d2"), Native([&] { return link(N("/d").c_str(), N("/d2").c_str()); })));
  EXPECT_TRUE(Same(fs().Unlink(root_cred_, "/g"), Native([&] { return unlink(N("/g").c_str()); })));
  EXPECT_SAME_STAT("/f");
  EXPECT_TRUE(Same(fs().Unlink(root_cred_, "/d"), Native([&] { return unlink(N("/d").c_str()); })));
  EXPECT_TRUE(Same(fs().Unlink(root_cred_, "/g"), Native([&] { return unlink(N("/g").c_str()); })));

  EXPECT_TRUE(Same(fs().Rename(root_cred_, "/f", "/h", 0), Native([&] { return rename(N("/f").c_str(), N("/h").c_str()); })));
  EXPECT_SAME_STAT("/f");
  EXPECT_SAME_STAT("/h");
  EXPECT_TRUE(Same(fs().Rename(root_cred_, "/h", "/other", RENAME_NOREPLACE),
                   Native([&] { return renameat2(AT_FDCWD, N("/h").c_str(), AT_FDCWD, N("/other").c_str(), RENAME_NOREPLACE); })));
  EXPECT_TRUE(Same(fs().Rename(root_cred_, "/h", "/d", RENAME_EXCHANGE),
                   Native([&] { return renameat2(AT_FDCWD, N("/h").c_str(), AT_FDCWD, N("/d").c_str(), RENAME_EXCHANGE); })));
  EXPECT_SAME_STAT("/h");
  EXPECT_SAME_STAT("/d");
  EXPECT_TRUE(Same(fs().Rename(root_cred_, "/h", "/full", 0), Native([&] { return rename(N("/h").c_str(), N("/full").c_str()); })));
  EXPECT_TRUE(Same(fs().Rename(root_cred_, "/nope", "/x", 0), Native([&] { return rename(N("/nope").c_str(), N("/x").c_str()); })));
  EXPECT_TRUE(Same(fs().Rename(root_cred_, "/other", "/h", 0), Native([&] { return rename(N("/other").c_str(), N("/h").c_str()); })));
  EXPECT_SAME_STAT("/h");
  EXPECT_SAME_STAT("/other");
}

TEST_P(NodeFsContract, SetAttr) {
  umask(0);
  MAKE_FILE("/f", "0123456789abcdef");
  SetAttrRequest req;
  req.mode = 0600;
  req.uid = 65534;
  req.gid = 65534;
  req.size = 10;
  req.mtime = timespec{1000, 5};
  auto r = fs().SetAttr(root_cred_, "/f", std::nullopt, req);
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(chmod(N("/f").c_str(), 0600), 0);
  ASSERT_EQ(chown(N("/f").c_str(), 65534, 65534), 0);
  ASSERT_EQ(truncate(N("/f").c_str(), 10), 0);
  EXPECT_SAME_STAT("/f");
  EXPECT_EQ(r->st_mtim.tv_sec, 1000);
  EXPECT_EQ(r->st_mtim.tv_nsec, 5);
  EXPECT_EQ(r->st_size, 10);

  // With a handle.
  auto o = fs().Open(root_cred_, "/f", O_RDWR);
  ASSERT_TRUE(o);
  SetAttrRequest t;
  t.size = 3;
  t.mode = 0640;
  auto r2 = fs().SetAttr(root_cred_, "/f", o->handle, t);
  ASSERT_TRUE(r2) << r2.error().ToString();
  EXPECT_EQ(r2->st_size, 3);
  EXPECT_EQ(r2->st_mode & 07777, 0640u);
  EXPECT_TRUE(fs().Release(o->handle));

  // chmod of a symlink itself: as fchmodat(AT_SYMLINK_NOFOLLOW).
  ASSERT_TRUE(fs().Symlink(root_cred_, "f", "/l"));
  ASSERT_EQ(symlink("f", N("/l").c_str()), 0);
  SetAttrRequest cm;
  cm.mode = 0700;
  EXPECT_TRUE(Same(fs().SetAttr(root_cred_, "/l", std::nullopt, cm),
                   Native([&] { return fchmodat(AT_FDCWD, N("/l").c_str(), 0700, AT_SYMLINK_NOFOLLOW); })));
  // truncate of a directory; chown of a missing file.
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/d", 0755));
  ASSERT_EQ(mkdir(N("/d").c_str(), 0755), 0);
  SetAttrRequest tr;
  tr.size = 0;
  EXPECT_TRUE(Same(fs().SetAttr(root_cred_, "/d", std::nullopt, tr), Native([&] { return truncate(N("/d").c_str(), 0); })));
  SetAttrRequest ch;
  ch.uid = 1;
  EXPECT_TRUE(Same(fs().SetAttr(root_cred_, "/nope", std::nullopt, ch), Native([&] { return lchown(N("/nope").c_str(), 1, -1); })));
  // A non-owner may not chmod.
  Cred nobody{65534, 65534, {}, 0};
  if (geteuid() == 0) {
    ASSERT_TRUE(fs().Mkdir(root_cred_, "/d/rootfile", 0755));
    ASSERT_EQ(mkdir(N("/d/rootfile").c_str(), 0755), 0);
    EXPECT_TRUE(Same(fs().SetAttr(nobody, "/d/rootfile", std::nullopt, cm),
                     NativeAs(nobody, [&] { return chmod(N("/d/rootfile").c_str(), 0700); })));
  }
}

TEST_P(NodeFsContract, StatFs) {
  if (!env_->backed_by_root()) GTEST_SKIP() << "acts on the export root directly";
  auto s = fs().StatFs();
  ASSERT_TRUE(s);
  struct statvfs n {};
  ASSERT_EQ(statvfs(root().c_str(), &n), 0);
  EXPECT_EQ(s->f_bsize, n.f_bsize);
  EXPECT_EQ(s->f_blocks, n.f_blocks);
  EXPECT_EQ(s->f_namemax, n.f_namemax);
}

TEST_P(NodeFsContract, Xattrs) {
  umask(0);
  MAKE_FILE("/f", "x");
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/d", 0755));
  ASSERT_EQ(mkdir(N("/d").c_str(), 0755), 0);
  ASSERT_TRUE(fs().Symlink(root_cred_, "f", "/l"));
  ASSERT_EQ(symlink("f", N("/l").c_str()), 0);

  for (std::string p : {"/f", "/d"}) {
    SCOPED_TRACE(p);
    EXPECT_TRUE(Same(fs().SetXattr(root_cred_, p, "user.k", Bytes("value"), 0),
                     Native([&] { return lsetxattr(N(p).c_str(), "user.k", "value", 5, 0); })));
    EXPECT_TRUE(Same(fs().SetXattr(root_cred_, p, "user.k", Bytes("v2"), XATTR_CREATE),
                     Native([&] { return lsetxattr(N(p).c_str(), "user.k", "v2", 2, XATTR_CREATE); })));
    size_t needed = 0;
    auto g0 = fs().GetXattr(root_cred_, p, "user.k", 0, &needed);
    ASSERT_TRUE(g0);
    EXPECT_EQ(needed, 5u);
    auto g = fs().GetXattr(root_cred_, p, "user.k", 100, &needed);
    ASSERT_TRUE(g);
    EXPECT_EQ(*g, "value");
    char buf[256];
    EXPECT_TRUE(Same(fs().GetXattr(root_cred_, p, "user.k", 2, &needed),
                     Native([&] { return lgetxattr(N(p).c_str(), "user.k", buf, 2); })));
    EXPECT_TRUE(Same(fs().GetXattr(root_cred_, p, "user.none", 100, &needed),
                     Native([&] { return lgetxattr(N(p).c_str(), "user.none", buf, 100); })));
    auto l = fs().ListXattr(root_cred_, p, 4096, &needed);
    ASSERT_TRUE(l);
    EXPECT_NE(l->find(std::string("user.k\0", 7)), std::string::npos);
    EXPECT_EQ(needed, l->size());
    EXPECT_TRUE(Same(fs().RemoveXattr(root_cred_, p, "user.k"),
                     Native([&] { return lremovexattr(N(p).c_str(), "user.k"); })));
    EXPECT_TRUE(Same(fs().RemoveXattr(root_cred_, p, "user.k"),
                     Native([&] { return lremovexattr(N(p).c_str(), "user.k"); })));
  }
  // Symlinks: what the l* calls give for user.* names.
  char buf[64];
  size_t needed = 0;
  EXPECT_TRUE(Same(fs().GetXattr(root_cred_, "/l", "user.k", 64, &needed),
                   Native([&] { return lgetxattr(N("/l").c_str(), "user.k", buf, 64); })));
  EXPECT_TRUE(Same(fs().SetXattr(root_cred_, "/l", "user.k", Bytes("v"), 0),
                   Native([&] { return lsetxattr(N("/l").c_str(), "user.k", "v", 1, 0); })));
  EXPECT_TRUE(Same(fs().RemoveXattr(root_cred_, "/l", "user.k"),
                   Native([&] { return lremovexattr(N("/l").c_str(), "user.k"); })));
  EXPECT_TRUE(Same(fs().GetXattr(root_cred_, "/none", "user.k", 64, &needed),
                   Native([&] { return lgetxattr(N("/none").c_str(), "user.k", buf, 64); })));
  // Permissions: a non-owner cannot set user.* on a 0644 file.
  if (geteuid() == 0) {
    Cred nobody{65534, 65534, {}, 0};
    EXPECT_TRUE(Same(fs().SetXattr(nobody, "/f", "user.k", Bytes("v"), 0),
                     NativeAs(nobody, [&] { return lsetxattr(N("/f").c_str(), "user.k", "v", 1, 0); })));
    EXPECT_EQ(ErrOf(fs().GetXattr(nobody, "/f", "trusted.x", 64, &needed)), ENODATA);
    EXPECT_EQ(ErrOf(Status(fs().SetXattr(nobody, "/f", "security.capability", Bytes("v"), 0))), EPERM);
  }
}

TEST_P(NodeFsContract, OpenCreateReadWrite) {
  umask(0);
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/d", 0755));
  ASSERT_EQ(mkdir(N("/d").c_str(), 0755), 0);
  auto c = fs().Create(root_cred_, "/f", O_RDWR | O_EXCL, 0640);
  ASSERT_TRUE(c) << c.error().ToString();
  int nfd = open(N("/f").c_str(), O_RDWR | O_CREAT | O_EXCL, 0640);
  ASSERT_GE(nfd, 0);
  struct stat nst {};
  ASSERT_EQ(fstat(nfd, &nst), 0);
  EXPECT_TRUE(SameStat(c->st, nst));
  EXPECT_TRUE(Same(fs().Create(root_cred_, "/f", O_RDWR | O_EXCL, 0640),
                   Native([&] { return open(N("/f").c_str(), O_RDWR | O_CREAT | O_EXCL, 0640); })));
  EXPECT_EQ(ErrOf(fs().Open(root_cred_, "/f", O_RDWR | O_CREAT)), EINVAL);
  EXPECT_TRUE(Same(fs().Open(root_cred_, "/none", O_RDONLY), Native([&] { return open(N("/none").c_str(), O_RDONLY); })));
  EXPECT_TRUE(Same(fs().Open(root_cred_, "/d", O_WRONLY), Native([&] { return open(N("/d").c_str(), O_WRONLY); })));

  auto w = fs().Write(c->handle, 0, Bytes("hello world"));
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, 11u);
  ASSERT_EQ(pwrite(nfd, "hello world", 11, 0), 11);
  std::vector<std::byte> buf(64);
  auto r = fs().Read(c->handle, 6, buf);
  ASSERT_TRUE(r);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buf.data()), *r), "world");
  auto eof = fs().Read(c->handle, 100, buf);
  ASSERT_TRUE(eof);
  EXPECT_EQ(*eof, 0u);
  EXPECT_TRUE(fs().Fsync(c->handle, false));
  EXPECT_TRUE(fs().Fsync(c->handle, true));
  EXPECT_TRUE(Same(fs().Fallocate(c->handle, 0, 0, 8192),
                   Native([&] { return fallocate(nfd, 0, 0, 8192); })));
  EXPECT_TRUE(Same(fs().Fallocate(c->handle, FALLOC_FL_KEEP_SIZE, 8192, 4096),
                   Native([&] { return fallocate(nfd, FALLOC_FL_KEEP_SIZE, 8192, 4096); })));
  close(nfd);
  EXPECT_SAME_STAT("/f");
  EXPECT_TRUE(fs().Flush(c->handle, 1));
  EXPECT_TRUE(fs().Release(c->handle));
  EXPECT_EQ(ErrOf(fs().Read(c->handle, 0, buf)), EBADF);
  EXPECT_EQ(ErrOf(Status(fs().Release(c->handle))), EBADF);

  // Read-only handle: write fails as pwrite on an O_RDONLY fd does.
  auto ro = fs().Open(root_cred_, "/f", O_RDONLY);
  ASSERT_TRUE(ro);
  EXPECT_EQ(ErrOf(fs().Write(ro->handle, 0, Bytes("x"))), EBADF);
  EXPECT_TRUE(fs().Release(ro->handle));
  // O_TRUNC.
  auto tr = fs().Open(root_cred_, "/f", O_WRONLY | O_TRUNC);
  ASSERT_TRUE(tr);
  EXPECT_EQ(tr->st.st_size, 0);
  EXPECT_TRUE(fs().Release(tr->handle));
}

TEST_P(NodeFsContract, AppendWritesAtEnd) {
  if (!env_->backed_by_root()) GTEST_SKIP() << "acts on the export root directly";
  umask(0);
  MAKE_FILE("/f", "abc");
  auto o = fs().Open(root_cred_, "/f", O_WRONLY | O_APPEND);
  ASSERT_TRUE(o);
  // Someone else extends the file meanwhile (a local program).
  int fd = open(R("/f").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "de", 2), 2);
  close(fd);
  auto w = fs().Write(o->handle, 0, Bytes("XYZ"));
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, 3u);
  EXPECT_TRUE(fs().Release(o->handle));
  auto r = fs().Open(root_cred_, "/f", O_RDONLY);
  ASSERT_TRUE(r);
  std::vector<std::byte> buf(64);
  auto n = fs().Read(r->handle, 0, buf);
  ASSERT_TRUE(n);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buf.data()), *n), "abcdeXYZ");
  EXPECT_TRUE(fs().Release(r->handle));
}

TEST_P(NodeFsContract, ListDir) {
  umask(0);
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/d", 0755));
  ASSERT_EQ(mkdir(N("/d").c_str(), 0755), 0);
  MAKE_FILE("/d/file", "x");
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/d/sub", 0755));
  ASSERT_EQ(mkdir(N("/d/sub").c_str(), 0755), 0);
  ASSERT_TRUE(fs().Symlink(root_cred_, "file", "/d/link"));
  ASSERT_EQ(symlink("file", N("/d/link").c_str()), 0);
  ASSERT_TRUE(fs().Mknod(root_cred_, "/d/fifo", S_IFIFO | 0644, 0));
  ASSERT_EQ(mknod(N("/d/fifo").c_str(), S_IFIFO | 0644, 0), 0);

  auto l = fs().ListDir(root_cred_, "/d");
  ASSERT_TRUE(l);
  std::vector<std::pair<std::string, int>> got, want;
  for (const auto& e : *l) got.emplace_back(e.name, e.type);
  DIR* d = opendir(N("/d").c_str());
  ASSERT_NE(d, nullptr);
  while (struct dirent* de = readdir(d)) {
    std::string n = de->d_name;
    if (n == "." || n == "..") continue;
    struct stat st {};
    ASSERT_EQ(fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW), 0);
    want.emplace_back(n, IFTODT(st.st_mode));
  }
  closedir(d);
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  auto empty = fs().ListDir(root_cred_, "/d/sub");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  EXPECT_TRUE(Same(fs().ListDir(root_cred_, "/d/file"), Native([&] { return open(N("/d/file").c_str(), O_RDONLY | O_DIRECTORY); })));
  EXPECT_TRUE(Same(fs().ListDir(root_cred_, "/none"), Native([&] { return open(N("/none").c_str(), O_RDONLY | O_DIRECTORY); })));
}

TEST_P(NodeFsContract, LongNames) {
  umask(0);
  std::string n255 = "/" + std::string(255, 'a');
  std::string n256 = "/" + std::string(256, 'b');
  auto c = fs().Create(root_cred_, n255, O_WRONLY, 0644);
  int fd = open(N(n255).c_str(), O_WRONLY | O_CREAT, 0644);
  EXPECT_TRUE(Same(c, Sys{fd, fd < 0 ? errno : 0}));
  if (c) {
    EXPECT_TRUE(fs().Release(c->handle));
  }
  if (fd >= 0) close(fd);
  EXPECT_SAME_STAT(n255);
  EXPECT_TRUE(Same(fs().Create(root_cred_, n256, O_WRONLY, 0644),
                   Native([&] { return open(N(n256).c_str(), O_WRONLY | O_CREAT, 0644); })));
  EXPECT_TRUE(Same(fs().Mkdir(root_cred_, n256, 0755), Native([&] { return mkdir(N(n256).c_str(), 0755); })));
  EXPECT_SAME_STAT(n256);
}

TEST_P(NodeFsContract, PathLongerThanPathMax) {
  umask(0);
  std::string p;
  for (int i = 0; i < 24; ++i) {  // 24 * 201 bytes > PATH_MAX
    p += "/" + std::string(200, static_cast<char>('a' + i));
    ASSERT_TRUE(fs().Mkdir(root_cred_, p, 0755)) << i;
  }
  ASSERT_GT(p.size(), static_cast<size_t>(PATH_MAX));
  std::string f = p + "/file";
  auto c = fs().Create(root_cred_, f, O_RDWR | O_EXCL, 0600);
  ASSERT_TRUE(c) << c.error().ToString();
  ASSERT_TRUE(fs().Write(c->handle, 0, Bytes("deep")));
  std::vector<std::byte> buf(16);
  auto r = fs().Read(c->handle, 0, buf);
  ASSERT_TRUE(r);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buf.data()), *r), "deep");
  EXPECT_TRUE(fs().Release(c->handle));
  auto st = fs().Stat(root_cred_, f);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->st_size, 4);
  EXPECT_EQ(st->st_mode, S_IFREG | 0600u);
  auto o = fs().Open(root_cred_, f, O_RDONLY);
  ASSERT_TRUE(o);
  r = fs().Read(o->handle, 1, buf);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 3u);
  EXPECT_TRUE(fs().Release(o->handle));
  auto l = fs().ListDir(root_cred_, p);
  ASSERT_TRUE(l);
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ((*l)[0].name, "file");
  ASSERT_TRUE(fs().MkdirParents(p + "/x/y/z", {}));
  EXPECT_TRUE(fs().Stat(root_cred_, p + "/x/y"));
  EXPECT_TRUE(fs().Unlink(root_cred_, f));
  EXPECT_EQ(ErrOf(fs().Stat(root_cred_, f)), ENOENT);
}

TEST_P(NodeFsContract, HostilePathsRefused) {
  if (!env_->backed_by_root()) GTEST_SKIP() << "acts on the export root directly";
  umask(0);
  ASSERT_EQ(symlink("/etc", R("/esc").c_str()), 0);
  ASSERT_EQ(symlink("../..", R("/up").c_str()), 0);
  ASSERT_EQ(mkdir(R("/sub").c_str(), 0755), 0);
  ASSERT_EQ(symlink("../../..", R("/sub/up3").c_str()), 0);
  auto refused = [](int e) { return e == EXDEV || e == EINVAL; };
  EXPECT_TRUE(refused(ErrOf(fs().Stat(root_cred_, "/../etc/passwd"))));
  EXPECT_TRUE(refused(ErrOf(fs().Stat(root_cred_, "/a/../../x"))));
  EXPECT_TRUE(refused(ErrOf(fs().Open(root_cred_, "/../etc/passwd", O_RDONLY))));
  EXPECT_EQ(ErrOf(fs().Stat(root_cred_, "/esc/passwd")), EXDEV);
  EXPECT_EQ(ErrOf(fs().Open(root_cred_, "/esc/passwd", O_RDONLY)), EXDEV);
  EXPECT_EQ(ErrOf(fs().Open(root_cred_, "/esc", O_RDONLY | O_DIRECTORY)), EXDEV);
  // Listings and copies of directories go through no symlink at all (a
  // symlink is a name conflict with other nodes' directories there).
  EXPECT_EQ(ErrOf(fs().ListDir(root_cred_, "/esc")), ENOTDIR);
  EXPECT_EQ(ErrOf(fs().Stat(root_cred_, "/up/x")), EXDEV);
  EXPECT_EQ(ErrOf(fs().Create(root_cred_, "/up/x", O_WRONLY, 0644)), EXDEV);
  EXPECT_EQ(ErrOf(fs().Mkdir(root_cred_, "/sub/up3/x", 0755)), EXDEV);
  EXPECT_EQ(ErrOf(Status(fs().MkdirParents("/esc/a/b", {}))), ENOTDIR);
  EXPECT_EQ(ErrOf(Status(fs().Rename(root_cred_, "/sub", "/up/stolen", 0))), EXDEV);
  // A destination in the source's own directory is checked as well.
  ASSERT_EQ(mkdir(R("/sub/d").c_str(), 0755), 0);
  EXPECT_TRUE(refused(ErrOf(Status(fs().Rename(root_cred_, "/sub/d", "/sub/..", 0)))));
  EXPECT_TRUE(refused(ErrOf(fs().Link(root_cred_, "/sub/up3", "/sub/.."))));
  size_t needed = 0;
  EXPECT_EQ(ErrOf(fs().GetXattr(root_cred_, "/esc/passwd", "user.x", 10, &needed)), EXDEV);
  // The symlinks themselves are ordinary objects beneath the root.
  auto rl = fs().Readlink(root_cred_, "/esc");
  ASSERT_TRUE(rl);
  EXPECT_EQ(*rl, "/etc");
  EXPECT_TRUE(fs().Stat(root_cred_, "/up"));
  // Nothing was created outside.
  struct stat st {};
  EXPECT_NE(lstat((root() + "/../x").c_str(), &st), 0);
  // Intermediate symlinks that stay beneath the root are followed.
  ASSERT_EQ(symlink("sub", R("/in").c_str()), 0);
  ASSERT_EQ(close(open(R("/sub/f").c_str(), O_CREAT | O_WRONLY, 0644)), 0);
  EXPECT_TRUE(fs().Stat(root_cred_, "/in/f"));
  EXPECT_EQ(ErrOf(fs().ListDir(root_cred_, "/in")), ENOTDIR);
  EXPECT_EQ(ErrOf(Status(fs().MkdirParents("/in/g", {}))), ENOTDIR);
}

TEST_P(NodeFsContract, PermissionsAsNonRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  umask(0);
  Cred nobody{65534, 65534, {}, 0};
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/priv", 0700));
  ASSERT_EQ(mkdir(N("/priv").c_str(), 0700), 0);
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/pub", 0777));
  ASSERT_EQ(mkdir(N("/pub").c_str(), 0777), 0);
  EXPECT_TRUE(Same(fs().Create(nobody, "/priv/f", O_WRONLY, 0644),
                   NativeAs(nobody, [&] { return open(N("/priv/f").c_str(), O_WRONLY | O_CREAT, 0644); })));
  EXPECT_TRUE(Same(fs().Stat(nobody, "/priv/f"), NativeAs(nobody, [&] { struct stat s; return lstat(N("/priv/f").c_str(), &s); })));
  EXPECT_TRUE(Same(fs().ListDir(nobody, "/priv"), NativeAs(nobody, [&] { return open(N("/priv").c_str(), O_RDONLY | O_DIRECTORY); })));
  EXPECT_TRUE(Same(fs().Mkdir(nobody, "/priv/d", 0755), NativeAs(nobody, [&] { return mkdir(N("/priv/d").c_str(), 0755); })));
  auto c = fs().Create(nobody, "/pub/f", O_WRONLY, 0644);
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->st.st_uid, 65534u);
  EXPECT_EQ(c->st.st_gid, 65534u);
  EXPECT_TRUE(fs().Release(c->handle));
  int fd = -1;
  NativeAs(nobody, [&] { return fd = open(N("/pub/f").c_str(), O_WRONLY | O_CREAT, 0644); });
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_SAME_STAT("/pub/f");
  auto m = fs().Mkdir(nobody, "/pub/dd", 0755);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->st_uid, 65534u);
  // A root-owned 0644 file: nobody may read but not write or unlink from /priv.
  MAKE_FILE("/pub/rootfile", "r");
  EXPECT_TRUE(Same(fs().Open(nobody, "/pub/rootfile", O_WRONLY),
                   NativeAs(nobody, [&] { return open(N("/pub/rootfile").c_str(), O_WRONLY); })));
  auto rd = fs().Open(nobody, "/pub/rootfile", O_RDONLY);
  ASSERT_TRUE(rd);
  EXPECT_TRUE(fs().Release(rd->handle));
  // Supplementary groups count.
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/grp", 0770));
  ASSERT_EQ(mkdir(N("/grp").c_str(), 0770), 0);
  SetAttrRequest g;
  g.gid = 4242;
  ASSERT_TRUE(fs().SetAttr(root_cred_, "/grp", std::nullopt, g));
  ASSERT_EQ(chown(N("/grp").c_str(), 0, 4242), 0);
  Cred member{65534, 65534, {4242}, 0};
  EXPECT_TRUE(Same(fs().Create(nobody, "/grp/f", O_WRONLY, 0644),
                   NativeAs(nobody, [&] { return open(N("/grp/f").c_str(), O_WRONLY | O_CREAT, 0644); })));
  auto mc = fs().Create(member, "/grp/f", O_WRONLY, 0644);
  ASSERT_TRUE(mc) << mc.error().ToString();
  EXPECT_TRUE(fs().Release(mc->handle));
  EXPECT_TRUE(fs().Unlink(member, "/grp/f"));
  // The thread is root again afterwards.
  EXPECT_EQ(ScopedCred::CurrentFsuid(), 0u);
}

TEST_P(NodeFsContract, UmaskApplied) {
  umask(0);
  Cred c{0, 0, {}, 027};
  auto m = fs().Mkdir(c, "/m", 0777);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->st_mode & 07777, 0750u);
  NativeAs(c, [&] { return mkdir(N("/m").c_str(), 0777); });
  EXPECT_SAME_STAT("/m");
  auto f = fs().Create(c, "/m/f", O_WRONLY, 0666);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->st.st_mode & 07777, 0640u);
  EXPECT_TRUE(fs().Release(f->handle));
  auto n = fs().Mknod(c, "/m/p", S_IFIFO | 0666, 0);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->st_mode, S_IFIFO | 0640u);
  // SetAttr (chmod) is not masked.
  SetAttrRequest req;
  req.mode = 0666;
  auto s = fs().SetAttr(c, "/m/f", std::nullopt, req);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->st_mode & 07777, 0666u);
}

TEST_P(NodeFsContract, OpenUnlinkedFileKeepsWorking) {
  umask(0);
  MAKE_FILE("/f", "before");
  auto o = fs().Open(root_cred_, "/f", O_RDWR);
  ASSERT_TRUE(o);
  ASSERT_TRUE(fs().Unlink(root_cred_, "/f"));
  EXPECT_EQ(ErrOf(fs().Stat(root_cred_, "/f")), ENOENT);
  ASSERT_TRUE(fs().Write(o->handle, 6, Bytes("+after")));
  std::vector<std::byte> buf(64);
  auto r = fs().Read(o->handle, 0, buf);
  ASSERT_TRUE(r);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buf.data()), *r), "before+after");
  SetAttrRequest t;
  t.size = 6;
  auto s = fs().SetAttr(root_cred_, "/f", o->handle, t);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->st_size, 6);
  EXPECT_EQ(s->st_nlink, 0u);
  EXPECT_TRUE(fs().SetLk(o->handle, 7, LockRange{F_WRLCK, 0, 0, 0}));
  EXPECT_TRUE(fs().Release(o->handle));
}

TEST_P(NodeFsContract, DirectIoUnalignedWorks) {
  umask(0);
  auto c = fs().Create(root_cred_, "/d", O_RDWR | O_DIRECT, 0644);
  ASSERT_TRUE(c) << c.error().ToString();
  // Unaligned buffer, offset and length.
  std::vector<std::byte> src(5000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7);
  auto w = fs().Write(c->handle, 3, std::span<const std::byte>(src).subspan(1, 4001));
  ASSERT_TRUE(w) << w.error().ToString();
  EXPECT_EQ(*w, 4001u);
  std::vector<std::byte> dst(5000);
  auto r = fs().Read(c->handle, 3, std::span<std::byte>(dst).subspan(1, 4001));
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(*r, 4001u);
  EXPECT_TRUE(std::equal(src.begin() + 1, src.begin() + 4002, dst.begin() + 1));
  // Aligned I/O through the same handle.
  void* mem = nullptr;
  ASSERT_EQ(posix_memalign(&mem, 4096, 8192), 0);
  std::span<std::byte> al(static_cast<std::byte*>(mem), 8192);
  std::fill(al.begin(), al.end(), std::byte{0x5a});
  auto wa = fs().Write(c->handle, 8192, al);
  EXPECT_TRUE(wa);
  auto ra = fs().Read(c->handle, 0, al);
  ASSERT_TRUE(ra);
  EXPECT_EQ(*ra, 8192u);
  EXPECT_EQ(al[3], src[1]);
  free(mem);
  EXPECT_TRUE(fs().Release(c->handle));
  auto st = fs().Stat(root_cred_, "/d");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->st_size, 16384);
}

TEST_P(NodeFsContract, PosixLocksBetweenOwners) {
  umask(0);
  MAKE_FILE("/f", std::string(300, 'x'));
  auto a = fs().Open(root_cred_, "/f", O_RDWR);
  auto b = fs().Open(root_cred_, "/f", O_RDWR);
  auto ro = fs().Open(root_cred_, "/f", O_RDONLY);
  ASSERT_TRUE(a && b && ro);
  const uint64_t A = 1, B = 2;
  ASSERT_TRUE(fs().SetLk(a->handle, A, LockRange{F_WRLCK, 0, 100, 0}));
  EXPECT_EQ(ErrOf(Status(fs().SetLk(b->handle, B, LockRange{F_RDLCK, 50, 10, 0}))), EAGAIN);
  auto g = fs().GetLk(b->handle, B, LockRange{F_WRLCK, 0, 0, 0});
  ASSERT_TRUE(g);
  EXPECT_EQ(g->type, F_WRLCK);
  EXPECT_EQ(g->start, 0u);
  EXPECT_EQ(g->len, 100u);
  // The owner itself sees no conflict, may convert and re-lock.
  auto own = fs().GetLk(a->handle, A, LockRange{F_WRLCK, 0, 0, 0});
  ASSERT_TRUE(own);
  EXPECT_EQ(own->type, F_UNLCK);
  EXPECT_TRUE(fs().SetLk(a->handle, A, LockRange{F_RDLCK, 0, 100, 0}));
  EXPECT_TRUE(fs().SetLk(a->handle, A, LockRange{F_WRLCK, 0, 100, 0}));
  // The same owner through another handle of the same file.
  EXPECT_TRUE(fs().SetLk(b->handle, A, LockRange{F_WRLCK, 10, 10, 0}));
  // Disjoint ranges do not conflict.
  EXPECT_TRUE(fs().SetLk(b->handle, B, LockRange{F_WRLCK, 200, 10, 0}));
  // Lock type needs the matching access mode.
  EXPECT_EQ(ErrOf(Status(fs().SetLk(ro->handle, B, LockRange{F_WRLCK, 250, 1, 0}))), EBADF);
  EXPECT_TRUE(fs().SetLk(ro->handle, B, LockRange{F_RDLCK, 250, 1, 0}));
  // Flush releases A's POSIX locks (close semantics).
  EXPECT_TRUE(fs().Flush(a->handle, A));
  EXPECT_TRUE(fs().SetLk(b->handle, B, LockRange{F_WRLCK, 0, 100, 0}));
  EXPECT_EQ(ErrOf(Status(fs().SetLk(a->handle, A, LockRange{F_RDLCK, 0, 1, 0}))), EAGAIN);
  // Releasing every handle drops B's locks.
  EXPECT_TRUE(fs().Release(b->handle));
  EXPECT_TRUE(fs().Release(ro->handle));
  EXPECT_EQ(ErrOf(Status(fs().SetLk(a->handle, A, LockRange{F_RDLCK, 0, 1, 0}))), EAGAIN);
  EXPECT_TRUE(fs().Release(a->handle));
  auto c = fs().Open(root_cred_, "/f", O_RDWR);
  ASSERT_TRUE(c);
  EXPECT_TRUE(fs().SetLk(c->handle, A, LockRange{F_WRLCK, 0, 0, 0}));
  EXPECT_TRUE(fs().Release(c->handle));
}

TEST_P(NodeFsContract, FlockBetweenOwners) {
  umask(0);
  MAKE_FILE("/f", "x");
  auto a = fs().Open(root_cred_, "/f", O_RDONLY);
  auto b = fs().Open(root_cred_, "/f", O_RDONLY);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(fs().Flock(a->handle, 1, LOCK_EX));
  EXPECT_EQ(ErrOf(Status(fs().Flock(b->handle, 2, LOCK_SH))), EWOULDBLOCK);
  EXPECT_TRUE(fs().Flock(a->handle, 1, LOCK_UN));
  EXPECT_TRUE(fs().Flock(b->handle, 2, LOCK_SH));
  EXPECT_TRUE(fs().Flock(a->handle, 1, LOCK_SH));
  EXPECT_EQ(ErrOf(Status(fs().Flock(a->handle, 1, LOCK_EX))), EWOULDBLOCK);
  // Flush keeps flock locks (only POSIX locks go at close of one fd).
  EXPECT_TRUE(fs().Flush(b->handle, 2));
  EXPECT_EQ(ErrOf(Status(fs().Flock(a->handle, 1, LOCK_EX))), EWOULDBLOCK);
  EXPECT_TRUE(fs().Flock(b->handle, 2, LOCK_UN));
  EXPECT_TRUE(fs().Flock(a->handle, 1, LOCK_EX));
  EXPECT_TRUE(fs().Release(a->handle));
  EXPECT_TRUE(fs().Release(b->handle));
}

TEST_P(NodeFsContract, LocalProgramLocksConflict) {
  if (!env_->backed_by_root()) GTEST_SKIP() << "acts on the export root directly";
  umask(0);
  MAKE_FILE("/f", "0123456789");
  int fd = open(R("/f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  ASSERT_EQ(fcntl(fd, F_OFD_SETLK, &fl), 0);
  auto a = fs().Open(root_cred_, "/f", O_RDWR);
  ASSERT_TRUE(a);
  EXPECT_EQ(ErrOf(Status(fs().SetLk(a->handle, 1, LockRange{F_RDLCK, 0, 1, 0}))), EAGAIN);
  auto g = fs().GetLk(a->handle, 1, LockRange{F_RDLCK, 5, 1, 0});
  ASSERT_TRUE(g);
  EXPECT_EQ(g->type, F_WRLCK);
  EXPECT_EQ(g->pid, -1);  // OFD locks have no pid
  fl.l_type = F_UNLCK;
  ASSERT_EQ(fcntl(fd, F_OFD_SETLK, &fl), 0);
  EXPECT_TRUE(fs().SetLk(a->handle, 1, LockRange{F_WRLCK, 0, 5, 0}));
  fl.l_type = F_RDLCK;
  fl.l_start = 2;
  fl.l_len = 1;
  EXPECT_EQ(fcntl(fd, F_OFD_SETLK, &fl), -1);
  EXPECT_EQ(errno, EAGAIN);
  fl.l_start = 6;
  EXPECT_EQ(fcntl(fd, F_OFD_SETLK, &fl), 0);
  // flock against a local program too.
  EXPECT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_EQ(ErrOf(Status(fs().Flock(a->handle, 1, LOCK_SH))), EWOULDBLOCK);
  close(fd);
  EXPECT_TRUE(fs().Flock(a->handle, 1, LOCK_SH));
  EXPECT_TRUE(fs().Release(a->handle));
}

TEST_P(NodeFsContract, MkdirParentsAppliesTemplates) {
  umask(0);
  ASSERT_TRUE(fs().Mkdir(root_cred_, "/keep", 0700));
  std::vector<NodeFs::DirTemplate> t = {{0700, 0, 0}, {0750, 65534, 65534}, {02771, 1, 4242}};
  ASSERT_TRUE(fs().MkdirParents("/keep/q/r/s/file", t));
  auto keep = fs().Stat(root_cred_, "/keep");
  auto q = fs().Stat(root_cred_, "/keep/q");
  auto r = fs().Stat(root_cred_, "/keep/q/r");
  auto s = fs().Stat(root_cred_, "/keep/q/r/s");
  ASSERT_TRUE(keep && q && r && s);
  EXPECT_EQ(keep->st_mode & 07777, 0700u);
  EXPECT_EQ(q->st_mode & 07777, 0750u);
  EXPECT_EQ(q->st_uid, 65534u);
  EXPECT_EQ(q->st_gid, 65534u);
  EXPECT_EQ(r->st_mode & 07777, 02771u);
  EXPECT_EQ(r->st_uid, 1u);
  EXPECT_EQ(r->st_gid, 4242u);
  EXPECT_EQ(s->st_mode & 07777, 0755u);
  EXPECT_EQ(s->st_uid, 0u);
  EXPECT_EQ(ErrOf(fs().Stat(root_cred_, "/keep/q/r/s/file")), ENOENT);
  EXPECT_TRUE(fs().MkdirParents("/keep/q/r/s/file", t));  // idempotent
  EXPECT_TRUE(fs().MkdirParents("/top", t));               // nothing to do
  MAKE_FILE("/plain", "x");
  EXPECT_EQ(ErrOf(Status(fs().MkdirParents("/plain/a/b", t))), ENOTDIR);
}

}  // namespace fedfs::ns::testing
