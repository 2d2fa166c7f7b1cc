// POSIX parity suite: each test runs a sequence of system calls in a native
// directory and in a target (another native directory, libfuse's
// passthrough_ll, FedFS with files on the local node, FedFS with files forced
// onto another node) and requires identical recordings: return values, errno
// and the resulting lstat fields (syscall_trace.h). A mismatch prints the
// diff, "-" lines from the native directory, "+" lines from the mount.
//
// Targets come from the shared registry (targets.h); each test works in its
// own case directory.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "tests/posix/mount_target.h"
#include "tests/posix/syscall_trace.h"
#include "tests/posix/targets.h"

namespace fedfs::testing {
namespace {

constexpr int kNobody = 65534;

// ---- helpers used inside sequences ------------------------------------------

std::string Pattern(size_t len, char seed) {
  std::string s(len, '\0');
  for (size_t i = 0; i < len; ++i) s[i] = static_cast<char>(seed + (i * 131 + i / 7) % 251);
  return s;
}

long WriteStr(int fd, const std::string& s) { return ::write(fd, s.data(), s.size()); }
long PwriteStr(int fd, const std::string& s, off_t off) { return ::pwrite(fd, s.data(), s.size(), off); }

// Creates `name` with `content` (not recorded: setup).
void Put(Trace& t, const std::string& name, const std::string& content, mode_t mode = 0644) {
  const int fd = ::openat(t.dir(), name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd >= 0) {
    if (::write(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
      t.Note("setup write " + name, "short");
    }
    ::close(fd);
  } else {
    t.Note("setup create " + name, ErrnoName(errno));
  }
}

// A setup step's result (not recorded unless it fails: then the note is part
// of the trace the targets are compared on).
void SetupStep(Trace& t, const std::string& what, int rc) {
  if (rc != 0) t.Note("setup " + what, ErrnoName(errno));
}

int OpenAt(Trace& t, const std::string& name, int flags, mode_t mode = 0644) {
  return ::openat(t.dir(), name.c_str(), flags | O_CLOEXEC, mode);
}

// ---- the suite ---------------------------------------------------------------

class PosixParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    ref_ = GetTarget("native-ref", &why);
    ASSERT_NE(ref_, nullptr) << why;
    target_ = GetTarget(GetParam(), &why);
    // A target that cannot start (passthrough_ll not built included) is a
    // failure, never a skip.
    if (target_ == nullptr) FAIL() << "target " << GetParam() << " failed: " << why;
    for (Quirk q : {Quirk::kCreatesAsServerUser, Quirk::kODirectPassthrough, Quirk::kFallocateModeZeroOnly,
                    Quirk::kNoRenameFlags, Quirk::kWritesAsServerUser}) {
      if (target_->Has(q)) quirks_.insert(q);
    }
  }

  // Runs seq on the reference and the target and fails with the diff.
  void Check(const std::function<void(Trace&)>& seq, size_t view = 0) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->name());
    std::replace(name.begin(), name.end(), '/', '_');
    std::vector<std::string> native;
    const std::string diff =
        CompareSequence(name, seq, ref_->view(0), target_->view(view), quirks_, &native);
    if (!diff.empty()) ADD_FAILURE() << "target " << target_->describe() << " (view " << view % target_->view_count()
                        << ") differs from a native directory:\n"
                        << diff;
    // The recording must show the sequence really ran.
    EXPECT_GT(native.size(), 2u);
    for (const auto& l : native) EXPECT_EQ(l.rfind("setup", 0), std::string::npos) << l;
  }

  MountTarget* ref_ = nullptr;
  MountTarget* target_ = nullptr;
  std::set<Quirk> quirks_;
};

TEST_P(PosixParity, LookupGetattr) {
  Check([](Trace& t) {
    Put(t, "f", "hello");
    t.Call("mkdir d", [&] { return ::mkdirat(t.dir(), "d", 0755); }, {"d"});
    t.Stat(".");
    t.Stat("f");
    t.Stat("missing");
    t.Stat("f/x");            // ENOTDIR
    t.Stat("d/../f");
    t.Stat("d/missing/x");    // ENOENT
    t.Call("faccessat f R_OK", [&] { return ::faccessat(t.dir(), "f", R_OK, 0); });
    t.Call("faccessat f X_OK", [&] { return ::faccessat(t.dir(), "f", X_OK, 0); });
    t.Call("open missing", [&] { return OpenAt(t, "missing", O_RDONLY); });
    t.Call("open f/ (trailing slash)", [&] { return OpenAt(t, "f/", O_RDONLY); });
  });
}

TEST_P(PosixParity, ChmodChownTruncateUtimens) {
  Check([](Trace& t) {
    Put(t, "f", Pattern(5000, 'a'));
    t.Call("fchmodat f 0600", [&] { return ::fchmodat(t.dir(), "f", 0600, 0); }, {"f"});
    t.Call("fchmodat f 04755", [&] { return ::fchmodat(t.dir(), "f", 04755, 0); }, {"f"});
    t.Call("fchmodat f 01777", [&] { return ::fchmodat(t.dir(), "f", 01777, 0); }, {"f"});
    t.Call("fchmodat f 04755", [&] { return ::fchmodat(t.dir(), "f", 04755, 0); }, {"f"});
    // chown by root clears set-user-ID on an executable file.
    t.Call("fchownat f 65534:65534", [&] { return ::fchownat(t.dir(), "f", kNobody, kNobody, 0); }, {"f"});
    t.Call("fchownat f 1234:-1", [&] { return ::fchownat(t.dir(), "f", 1234, -1, 0); }, {"f"});
    t.Call("fchownat f -1:5678", [&] { return ::fchownat(t.dir(), "f", -1, 5678, 0); }, {"f"});
    t.Call("symlinkat l", [&] { return ::symlinkat("f", t.dir(), "l"); }, {"l"});
    t.Call("lchown l 42:43",
           [&] { return ::fchownat(t.dir(), "l", 42, 43, AT_SYMLINK_NOFOLLOW); }, {"l", "f"});
    t.Call("truncate f 100", [&] { return ::truncate(("/proc/self/fd/" + std::to_string(t.dir()) + "/f").c_str(), 100); }, {"f"});
    const int fd = OpenAt(t, "f", O_RDWR);
    t.Call("ftruncate 1MiB", [&] { return ::ftruncate(fd, 1 << 20); }, {"f"});
    t.PreadData("pread tail", fd, 4096, (1 << 20) - 4096);
    t.PreadData("pread head", fd, 200, 0);
    t.Call("ftruncate 0", [&] { return ::ftruncate(fd, 0); }, {"f"});
    t.Call("ftruncate -1", [&] { return ::ftruncate(fd, -1); });
    ::close(fd);
    const timespec ts[2] = {{1000000000, 5}, {1200000000, 7}};
    t.Call("utimensat f", [&] { return ::utimensat(t.dir(), "f", ts, 0); });
    struct stat st;
    ::fstatat(t.dir(), "f", &st, 0);
    t.Note("mtime as set", st.st_mtim.tv_sec == 1200000000 ? "yes" : "no");
    t.Call("utimensat f NOW", [&] { return ::utimensat(t.dir(), "f", nullptr, 0); });
    const timespec omit[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
    t.Call("utimensat f OMIT/NOW", [&] { return ::utimensat(t.dir(), "f", omit, 0); });
    t.Call("utimensat l NOFOLLOW", [&] { return ::utimensat(t.dir(), "l", ts, AT_SYMLINK_NOFOLLOW); });
    t.Call("fchmodat missing", [&] { return ::fchmodat(t.dir(), "missing", 0644, 0); });
  });
}

TEST_P(PosixParity, Readdir) {
  Check([](Trace& t) {
    t.Readdir(".");
    Put(t, "a", "1");
    ::mkdirat(t.dir(), "sub", 0755);
    SetupStep(t, "symlinkat a link", ::symlinkat("a", t.dir(), "link"));
    ::mkfifoat(t.dir(), "fifo", 0644);
    t.Readdir(".");
    t.Stat(".");
    for (int i = 0; i < 300; ++i) Put(t, "sub/file-" + std::to_string(i) + std::string(i % 40, 'x'), "");
    t.Readdir("sub");
    t.Stat("sub");
    for (int i = 0; i < 300; i += 3) ::unlinkat(t.dir(), ("sub/file-" + std::to_string(i) + std::string(i % 40, 'x')).c_str(), 0);
    t.Readdir("sub");
    t.Readdir("a");        // ENOTDIR
    t.Readdir("missing");  // ENOENT
  });
}

TEST_P(PosixParity, MkdirRmdir) {
  Check([](Trace& t) {
    t.Call("mkdir d", [&] { return ::mkdirat(t.dir(), "d", 0755); }, {"d", "."});
    t.Call("mkdir d again", [&] { return ::mkdirat(t.dir(), "d", 0755); });
    t.Call("mkdir d/e 0700", [&] { return ::mkdirat(t.dir(), "d/e", 0700); }, {"d/e", "d"});
    t.Call("mkdir 0777 (umask 022)", [&] { return ::mkdirat(t.dir(), "u", 0777); }, {"u"});
    t.Call("mkdir x/y (no parent)", [&] { return ::mkdirat(t.dir(), "x/y", 0755); });
    t.Call("rmdir d (not empty)", [&] { return ::unlinkat(t.dir(), "d", AT_REMOVEDIR); });
    t.Call("rmdir missing", [&] { return ::unlinkat(t.dir(), "missing", AT_REMOVEDIR); });
    Put(t, "f", "x");
    t.Call("rmdir f (file)", [&] { return ::unlinkat(t.dir(), "f", AT_REMOVEDIR); });
    t.Call("mkdir f (exists as file)", [&] { return ::mkdirat(t.dir(), "f", 0755); });
    t.Call("mkdir f/x (ENOTDIR)", [&] { return ::mkdirat(t.dir(), "f/x", 0755); });
    t.Call("unlink d (dir)", [&] { return ::unlinkat(t.dir(), "d", 0); });
    t.Call("rmdir d/e", [&] { return ::unlinkat(t.dir(), "d/e", AT_REMOVEDIR); }, {"d/e", "d"});
    t.Call("rmdir d", [&] { return ::unlinkat(t.dir(), "d", AT_REMOVEDIR); }, {"d", "."});
    t.Call("mkdir setgid dir", [&] { return ::mkdirat(t.dir(), "g", 0755); });
    t.Call("chmod g 02775", [&] { return ::fchmodat(t.dir(), "g", 02775, 0); });
    t.Call("chown g :4242", [&] { return ::fchownat(t.dir(), "g", -1, 4242, 0); }, {"g"});
    t.Call("mkdir g/sub (inherits gid, setgid)", [&] { return ::mkdirat(t.dir(), "g/sub", 0755); }, {"g/sub"});
    t.Call("create g/file (inherits gid)", [&] { int fd = OpenAt(t, "g/file", O_CREAT | O_WRONLY); if (fd >= 0) ::close(fd); return fd < 0 ? -1L : 0L; }, {"g/file"});
    t.Readdir(".");
  });
}

TEST_P(PosixParity, Mkfifo) {
  Check([](Trace& t) {
    t.Call("mkfifo p", [&] { return ::mkfifoat(t.dir(), "p", 0640); }, {"p"});
    t.Call("mkfifo p again", [&] { return ::mkfifoat(t.dir(), "p", 0640); });
    const int fd = t.Open("open p O_RDONLY|O_NONBLOCK", [&] { return OpenAt(t, "p", O_RDONLY | O_NONBLOCK); });
    const int w = t.Open("open p O_WRONLY|O_NONBLOCK", [&] { return OpenAt(t, "p", O_WRONLY | O_NONBLOCK); });
    t.Call("write pipe", [&] { return WriteStr(w, "through the fifo"); });
    char buf[64];
    t.Call("read pipe", [&] { return ::read(fd, buf, sizeof buf); });
    if (w >= 0) ::close(w);
    if (fd >= 0) ::close(fd);
    t.Call("mknod S_IFIFO q", [&] { return ::mknodat(t.dir(), "q", S_IFIFO | 0600, 0); }, {"q"});
    t.Call("unlink p", [&] { return ::unlinkat(t.dir(), "p", 0); }, {"p"});
  });
}

TEST_P(PosixParity, CreateOpenFlags) {
  Check([](Trace& t) {
    int fd = t.Open("create f O_EXCL", [&] { return OpenAt(t, "f", O_CREAT | O_EXCL | O_WRONLY, 0640); }, {"f"});
    t.Call("write", [&] { return WriteStr(fd, "0123456789"); }, {"f"});
    ::close(fd);
    t.Open("create f O_EXCL again", [&] { return OpenAt(t, "f", O_CREAT | O_EXCL | O_WRONLY); });
    fd = t.Open("open f O_APPEND", [&] { return OpenAt(t, "f", O_WRONLY | O_APPEND); });
    t.Call("append", [&] { return WriteStr(fd, "abc"); }, {"f"});
    t.Call("lseek 0 + append", [&] { ::lseek(fd, 0, SEEK_SET); return WriteStr(fd, "def"); }, {"f"});
    ::close(fd);
    fd = OpenAt(t, "f", O_RDONLY);
    t.PreadData("content", fd, 100, 0);
    ::close(fd);
    fd = t.Open("open f O_TRUNC", [&] { return OpenAt(t, "f", O_RDWR | O_TRUNC); }, {"f"});
    t.Call("write", [&] { return WriteStr(fd, "xy"); }, {"f"});
    ::close(fd);
    t.Open("open f O_RDONLY|O_TRUNC", [&] { int r = OpenAt(t, "f", O_RDONLY | O_TRUNC); if (r >= 0) ::close(r); return r; }, {"f"});
    t.Open("create 0777 (umask 022)", [&] { int r = OpenAt(t, "g", O_CREAT | O_WRONLY, 0777); if (r >= 0) ::close(r); return r; }, {"g"});
    t.Open("create 0 mode", [&] { int r = OpenAt(t, "z", O_CREAT | O_RDWR, 0); if (r >= 0) ::close(r); return r; }, {"z"});
    t.Open("open missing O_RDONLY", [&] { return OpenAt(t, "missing", O_RDONLY); });
    ::mkdirat(t.dir(), "d", 0755);
    t.Open("open d O_WRONLY", [&] { return OpenAt(t, "d", O_WRONLY); });
    t.Open("open f O_DIRECTORY", [&] { return OpenAt(t, "f", O_RDONLY | O_DIRECTORY); });
    t.Open("create d/ O_CREAT", [&] { return OpenAt(t, "d/", O_CREAT | O_WRONLY); });
    SetupStep(t, "symlinkat f l", ::symlinkat("f", t.dir(), "l"));
    t.Open("open l O_NOFOLLOW", [&] { return OpenAt(t, "l", O_RDONLY | O_NOFOLLOW); });
    t.Open("create through l O_EXCL", [&] { return OpenAt(t, "l", O_CREAT | O_EXCL | O_WRONLY); });
    SetupStep(t, "symlinkat newtarget dangling", ::symlinkat("newtarget", t.dir(), "dangling"));
    t.Open("create through dangling", [&] { int r = OpenAt(t, "dangling", O_CREAT | O_WRONLY, 0600); if (r >= 0) ::close(r); return r; }, {"newtarget", "dangling"});
    t.Open("O_PATH f", [&] { int r = OpenAt(t, "f", O_PATH); if (r >= 0) ::close(r); return r; });
    t.Readdir(".");
  });
}

TEST_P(PosixParity, ODirectAligned) {
  if (quirks_.count(Quirk::kODirectPassthrough)) GTEST_SKIP() << "reference quirk: O_DIRECT passed through";
  Check([](Trace& t) {
    void* p = nullptr;
    if (::posix_memalign(&p, 4096, 1 << 16) != 0) return;
    std::memset(p, 'q', 1 << 16);
    const int fd = t.Open("create O_DIRECT", [&] { return OpenAt(t, "d", O_CREAT | O_RDWR | O_DIRECT, 0644); });
    t.Call("pwrite 64KiB aligned", [&] { return ::pwrite(fd, p, 1 << 16, 0); }, {"d"});
    t.Call("pwrite 4KiB at 8KiB", [&] { return ::pwrite(fd, p, 4096, 8192); }, {"d"});
    std::memset(p, 0, 1 << 16);
    t.Call("pread 64KiB", [&] { return ::pread(fd, p, 1 << 16, 0); });
    t.Note("data", Fnv1a(p, 1 << 16));
    t.Call("fsync", [&] { return ::fsync(fd); });
    ::close(fd);
    std::free(p);
  });
}

TEST_P(PosixParity, ReadWrite) {
  Check([](Trace& t) {
    const int fd = t.Open("create", [&] { return OpenAt(t, "f", O_CREAT | O_RDWR); });
    const std::string big = Pattern(300000, 'k');
    t.Call("write 300000", [&] { return WriteStr(fd, big); }, {"f"});
    t.Call("pwrite 10 at 5", [&] { return PwriteStr(fd, "ABCDEFGHIJ", 5); }, {"f"});
    t.Call("pwrite 3 at 1MiB (hole)", [&] { return PwriteStr(fd, "end", 1 << 20); }, {"f"});
    t.PreadData("pread 64 at 0", fd, 64, 0);
    t.PreadData("pread all", fd, (1 << 20) + 100, 0);
    t.PreadData("pread in hole", fd, 4096, 500000);
    t.PreadData("pread past EOF", fd, 100, 2 << 20);
    t.PreadData("pread straddling EOF", fd, 100, (1 << 20) - 50);
    t.Call("lseek END", [&] { return ::lseek(fd, 0, SEEK_END); });
    t.Call("write at END", [&] { return WriteStr(fd, "tail"); }, {"f"});
    t.Call("lseek SET 0", [&] { return ::lseek(fd, 0, SEEK_SET); });
    char buf[100];
    t.Call("read 100", [&] { return ::read(fd, buf, sizeof buf); });
    t.Note("read data", Fnv1a(buf, sizeof buf));
    t.Call("read continues at 100", [&] { return ::read(fd, buf, 10); });
    t.Note("read data", Fnv1a(buf, 10));
    t.Call("fsync", [&] { return ::fsync(fd); });
    t.Call("fdatasync", [&] { return ::fdatasync(fd); });
    t.Call("pwrite negative offset", [&] { return PwriteStr(fd, "x", -1); });
    ::close(fd);
    const int ro = OpenAt(t, "f", O_RDONLY);
    t.Call("write on O_RDONLY", [&] { return WriteStr(ro, "x"); });
    ::close(ro);
    const int wo = OpenAt(t, "f", O_WRONLY);
    t.Call("read on O_WRONLY", [&] { return ::read(wo, buf, 1); });
    ::close(wo);
    // A second descriptor sees the first one's writes.
    const int a = OpenAt(t, "g", O_CREAT | O_RDWR);
    const int b = OpenAt(t, "g", O_RDWR);
    t.Call("write via a", [&] { return WriteStr(a, Pattern(10000, 'z')); });
    t.PreadData("read via b", b, 20000, 0);
    t.Call("ftruncate via b", [&] { return ::ftruncate(b, 10); });
    t.PreadData("read via a", a, 20000, 0);
    ::close(a);
    ::close(b);
  });
}

TEST_P(PosixParity, UnlinkSymlinkLink) {
  Check([](Trace& t) {
    Put(t, "f", "data");
    t.Call("symlink s -> f", [&] { return ::symlinkat("f", t.dir(), "s"); }, {"s"});
    t.Call("symlink long target", [&] { return ::symlinkat(std::string(1000, 'p').c_str(), t.dir(), "s2"); }, {"s2"});
    t.Call("symlink exists", [&] { return ::symlinkat("f", t.dir(), "f"); });
    char buf[2048];
    long n = t.Call("readlink s", [&] { return ::readlinkat(t.dir(), "s", buf, sizeof buf); });
    t.Note("readlink s", std::string(buf, n > 0 ? n : 0));
    n = t.Call("readlink s2", [&] { return ::readlinkat(t.dir(), "s2", buf, sizeof buf); });
    t.Call("readlink f (not a link)", [&] { return ::readlinkat(t.dir(), "f", buf, sizeof buf); });
    t.Call("readlink short buffer", [&] { return ::readlinkat(t.dir(), "s2", buf, 10); });
    t.StatFollow("s");
    t.Call("symlink dangling", [&] { return ::symlinkat("nowhere", t.dir(), "dl"); });
    t.StatFollow("dl");
    t.Call("link f h", [&] { return ::linkat(t.dir(), "f", t.dir(), "h", 0); }, {"f", "h"});
    struct stat a, b;
    ::fstatat(t.dir(), "f", &a, 0);
    ::fstatat(t.dir(), "h", &b, 0);
    t.Note("f and h share an inode", a.st_ino == b.st_ino ? "yes" : "no");
    t.Call("link f h2", [&] { return ::linkat(t.dir(), "f", t.dir(), "h2", 0); }, {"f"});
    t.Call("link exists", [&] { return ::linkat(t.dir(), "f", t.dir(), "h", 0); });
    t.Call("link missing", [&] { return ::linkat(t.dir(), "missing", t.dir(), "h3", 0); });
    ::mkdirat(t.dir(), "d", 0755);
    t.Call("link dir", [&] { return ::linkat(t.dir(), "d", t.dir(), "d2", 0); });
    t.Call("link into d", [&] { return ::linkat(t.dir(), "f", t.dir(), "d/h4", 0); }, {"d/h4", "f"});
    t.Call("link symlink (no follow)", [&] { return ::linkat(t.dir(), "s", t.dir(), "s-hard", 0); }, {"s-hard", "s"});
    t.Call("unlink f", [&] { return ::unlinkat(t.dir(), "f", 0); }, {"f", "h"});
    const int fd = OpenAt(t, "h", O_RDONLY);
    t.PreadData("read h", fd, 100, 0);
    ::close(fd);
    t.Call("unlink missing", [&] { return ::unlinkat(t.dir(), "missing", 0); });
    t.Call("unlink s", [&] { return ::unlinkat(t.dir(), "s", 0); }, {"s", "h"});
    t.Call("unlink d/h4", [&] { return ::unlinkat(t.dir(), "d/h4", 0); }, {"h"});
    t.Readdir(".");
  });
}

TEST_P(PosixParity, Rename) {
  Check([](Trace& t) {
    Put(t, "a", "AAAA");
    Put(t, "b", "BB");
    ::mkdirat(t.dir(), "d", 0755);
    ::mkdirat(t.dir(), "e", 0755);
    Put(t, "e/inside", "x");
    t.Call("rename a c", [&] { return ::renameat(t.dir(), "a", t.dir(), "c"); }, {"a", "c"});
    t.Call("rename c b (overwrite)", [&] { return ::renameat(t.dir(), "c", t.dir(), "b"); }, {"c", "b"});
    int fd = OpenAt(t, "b", O_RDONLY);
    t.PreadData("b content", fd, 10, 0);
    ::close(fd);
    Put(t, "c", "CCC");
    if (!t.Has(Quirk::kNoRenameFlags)) {
      t.Call("renameat2 c b NOREPLACE", [&] { return ::renameat2(t.dir(), "c", t.dir(), "b", RENAME_NOREPLACE); }, {"c", "b"});
      t.Call("renameat2 c n NOREPLACE", [&] { return ::renameat2(t.dir(), "c", t.dir(), "n", RENAME_NOREPLACE); }, {"c", "n"});
    } else {
      ::renameat(t.dir(), "c", t.dir(), "n");
    }
    t.Call("rename b d/b (into dir)", [&] { return ::renameat(t.dir(), "b", t.dir(), "d/b"); }, {"d/b", "d"});
    t.Call("rename missing", [&] { return ::renameat(t.dir(), "missing", t.dir(), "x"); });
    t.Call("rename n d (file over dir)", [&] { return ::renameat(t.dir(), "n", t.dir(), "d"); });
    t.Call("rename d n (dir over file)", [&] { return ::renameat(t.dir(), "d", t.dir(), "n"); });
    t.Call("rename d e (over non-empty dir)", [&] { return ::renameat(t.dir(), "d", t.dir(), "e"); });
    t.Call("rename d d/sub (into itself)", [&] { return ::renameat(t.dir(), "d", t.dir(), "d/sub"); });
    ::mkdirat(t.dir(), "empty", 0755);
    t.Call("rename d empty (over empty dir)", [&] { return ::renameat(t.dir(), "d", t.dir(), "empty"); }, {"d", "empty", "empty/b", "."});
    t.Call("rename empty e/moved (dir into dir)", [&] { return ::renameat(t.dir(), "empty", t.dir(), "e/moved"); }, {"e/moved", "e/moved/b", "e", "."});
    t.Call("rename n n (same)", [&] { return ::renameat(t.dir(), "n", t.dir(), "n"); }, {"n"});
    SetupStep(t, "linkat n n2", ::linkat(t.dir(), "n", t.dir(), "n2", 0));
    t.Call("rename n n2 (hard links to one file)", [&] { return ::renameat(t.dir(), "n", t.dir(), "n2"); }, {"n", "n2"});
    SetupStep(t, "symlinkat n2 sl", ::symlinkat("n2", t.dir(), "sl"));
    t.Call("rename sl sl2 (symlink)", [&] { return ::renameat(t.dir(), "sl", t.dir(), "sl2"); }, {"sl2"});
    fd = OpenAt(t, "n2", O_RDWR);
    t.Call("rename open file", [&] { return ::renameat(t.dir(), "n2", t.dir(), "opened"); }, {"opened"});
    t.Call("write after rename", [&] { return WriteStr(fd, "written"); }, {"opened"});
    ::close(fd);
    t.Readdir(".");
    t.Readdir("e");
    t.Readdir("e/moved");
  });
}

TEST_P(PosixParity, Statfs) {
  Check([](Trace& t) {
    struct statfs s;
    t.Call("fstatfs dir", [&] { return ::fstatfs(t.dir(), &s); });
    t.Note("f_bsize > 0", s.f_bsize > 0 ? "yes" : "no");
    t.Note("f_namelen", std::to_string(s.f_namelen));
    Put(t, "f", "x");
    const int fd = OpenAt(t, "f", O_RDONLY);
    t.Call("fstatfs file", [&] { return ::fstatfs(fd, &s); });
    ::close(fd);
  });
}

TEST_P(PosixParity, Xattrs) {
  Check([](Trace& t) {
    Put(t, "f", "x");
    const std::string p = "/proc/self/fd/" + std::to_string(t.dir()) + "/f";
    auto list = [&](const std::string& label) {
      char buf[4096];
      const ssize_t n = ::llistxattr(p.c_str(), buf, sizeof buf);
      std::vector<std::string> names;
      for (ssize_t i = 0; i < n;) {
        std::string name(buf + i);
        i += static_cast<ssize_t>(name.size()) + 1;
        // FedFS' virtual attributes (user.fedfs.*) are not part of parity.
        if (name.rfind("user.fedfs.", 0) != 0 && name.rfind("security.", 0) != 0) names.push_back(name);
      }
      std::sort(names.begin(), names.end());
      std::string all;
      for (const auto& x : names) all += x + " ";
      t.Note(label, n < 0 ? "-1 " + ErrnoName(errno) : all);
    };
    list("list (none)");
    t.Call("set user.a", [&] { return ::lsetxattr(p.c_str(), "user.a", "value-a", 7, 0); });
    t.Call("set user.b empty", [&] { return ::lsetxattr(p.c_str(), "user.b", "", 0, 0); });
    t.Call("set user.a CREATE (exists)", [&] { return ::lsetxattr(p.c_str(), "user.a", "v", 1, XATTR_CREATE); });
    t.Call("set user.c REPLACE (missing)", [&] { return ::lsetxattr(p.c_str(), "user.c", "v", 1, XATTR_REPLACE); });
    t.Call("set user.a REPLACE", [&] { return ::lsetxattr(p.c_str(), "user.a", "second", 6, XATTR_REPLACE); });
    const std::string big(3000, 'v');
    t.Call("set user.big 3000", [&] { return ::lsetxattr(p.c_str(), "user.big", big.data(), big.size(), 0); });
    char v[8192];
    long n = t.Call("get user.a", [&] { return ::lgetxattr(p.c_str(), "user.a", v, sizeof v); });
    t.Note("user.a", std::string(v, n > 0 ? n : 0));
    t.Call("get user.a size", [&] { return ::lgetxattr(p.c_str(), "user.a", nullptr, 0); });
    t.Call("get user.a small buffer", [&] { return ::lgetxattr(p.c_str(), "user.a", v, 2); });
    t.Call("get user.b", [&] { return ::lgetxattr(p.c_str(), "user.b", v, sizeof v); });
    t.Call("get user.big", [&] { return ::lgetxattr(p.c_str(), "user.big", v, sizeof v); });
    t.Call("get user.missing", [&] { return ::lgetxattr(p.c_str(), "user.missing", v, sizeof v); });
    list("list");
    t.Call("remove user.a", [&] { return ::lremovexattr(p.c_str(), "user.a"); });
    t.Call("remove user.a again", [&] { return ::lremovexattr(p.c_str(), "user.a"); });
    list("list after remove");
    t.Call("set bad namespace", [&] { return ::lsetxattr(p.c_str(), "nonsense.a", "v", 1, 0); });
    ::mkdirat(t.dir(), "d", 0755);
    const std::string dp = "/proc/self/fd/" + std::to_string(t.dir()) + "/d";
    t.Call("set on dir", [&] { return ::lsetxattr(dp.c_str(), "user.d", "dv", 2, 0); });
    t.Call("get on dir", [&] { return ::lgetxattr(dp.c_str(), "user.d", v, sizeof v); });
    const int fd = OpenAt(t, "f", O_RDONLY);
    t.Call("fgetxattr user.big", [&] { return ::fgetxattr(fd, "user.big", v, sizeof v); });
    t.Call("fsetxattr user.f", [&] { return ::fsetxattr(fd, "user.f", "ff", 2, 0); });
    ::close(fd);
  });
}

TEST_P(PosixParity, Fallocate) {
  Check([](Trace& t) {
    const int fd = OpenAt(t, "f", O_CREAT | O_RDWR);
    t.Call("fallocate 0..1MiB", [&] { return ::fallocate(fd, 0, 0, 1 << 20); }, {"f"});
    t.Call("posix_fallocate 0..2MiB", [&] { return -::posix_fallocate(fd, 0, 2 << 20); }, {"f"});
    if (!t.Has(Quirk::kFallocateModeZeroOnly)) {
      t.Call("fallocate KEEP_SIZE to 4MiB", [&] { return ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 4 << 20); }, {"f"});
      PwriteStr(fd, Pattern(8192, 'h'), 0);
      t.Call("fallocate PUNCH_HOLE", [&] { return ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096); }, {"f"});
      t.PreadData("read punched", fd, 8192, 0);
      t.Call("fallocate PUNCH_HOLE without KEEP_SIZE", [&] { return ::fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 4096); });
    }
    t.Call("fallocate negative length", [&] { return ::fallocate(fd, 0, 0, -1); });
    ::close(fd);
    const int ro = OpenAt(t, "f", O_RDONLY);
    t.Call("fallocate on O_RDONLY", [&] { return ::fallocate(ro, 0, 0, 100); });
    ::close(ro);
  });
}

TEST_P(PosixParity, FcntlLocksAndFlock) {
  Check([](Trace& t) {
    Put(t, "f", Pattern(1000, 'l'));
    const int fd = OpenAt(t, "f", O_RDWR);
    struct flock wr{};
    wr.l_type = F_WRLCK;
    wr.l_whence = SEEK_SET;
    wr.l_start = 0;
    wr.l_len = 100;
    t.Call("parent F_SETLK wr 0..100", [&] { return ::fcntl(fd, F_SETLK, &wr); });
    auto child_try = [](Trace& c) {
      const int cfd = ::openat(c.dir(), "f", O_RDWR | O_CLOEXEC);
      struct flock l{};
      l.l_type = F_WRLCK;
      l.l_whence = SEEK_SET;
      l.l_start = 50;
      l.l_len = 10;
      c.Call("F_SETLK wr 50..60", [&] { return ::fcntl(cfd, F_SETLK, &l); });
      struct flock q = l;
      c.Call("F_GETLK 50..60", [&] { return ::fcntl(cfd, F_GETLK, &q); });
      c.Note("F_GETLK type start len", std::to_string(q.l_type) + " " + std::to_string(q.l_start) + " " +
                                           std::to_string(q.l_len));
      l.l_start = 200;
      c.Call("F_SETLK wr 200..210 (free)", [&] { return ::fcntl(cfd, F_SETLK, &l); });
      l.l_type = F_RDLCK;
      l.l_start = 0;
      l.l_len = 0;
      c.Call("F_SETLK rd whole file", [&] { return ::fcntl(cfd, F_SETLK, &l); });
      c.Call("flock LOCK_EX|LOCK_NB", [&] { return ::flock(cfd, LOCK_EX | LOCK_NB); });
      ::close(cfd);
    };
    t.InChild(child_try);
    struct flock q{};
    q.l_type = F_WRLCK;
    q.l_whence = SEEK_SET;
    t.Call("parent F_GETLK (own lock invisible)", [&] { return ::fcntl(fd, F_GETLK, &q); });
    t.Note("parent F_GETLK type", std::to_string(q.l_type));
    wr.l_type = F_UNLCK;
    t.Call("parent F_SETLK unlock", [&] { return ::fcntl(fd, F_SETLK, &wr); });
    // The child's flock went with its last close. Through FUSE that close
    // returns before the lock is gone: the kernel sends the release that
    // drops it after the close, asynchronously (docs/namespace.md, "Locks"),
    // so a conflict right after the child exited is asked again, for up to
    // 2 s (natively the first try succeeds).
    t.Call("parent flock LOCK_EX|LOCK_NB", [&] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      for (;;) {
        const int rc = ::flock(fd, LOCK_EX | LOCK_NB);
        if (rc == 0 || errno != EWOULDBLOCK || std::chrono::steady_clock::now() >= until) return rc;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
    t.InChild(child_try);
    t.Call("parent flock LOCK_UN", [&] { return ::flock(fd, LOCK_UN); });
    t.Call("parent flock LOCK_SH|LOCK_NB", [&] { return ::flock(fd, LOCK_SH | LOCK_NB); });
    t.InChild([](Trace& c) {
      const int cfd = ::openat(c.dir(), "f", O_RDONLY | O_CLOEXEC);
      c.Call("flock LOCK_SH|LOCK_NB (shared ok)", [&] { return ::flock(cfd, LOCK_SH | LOCK_NB); });
      c.Call("flock LOCK_EX|LOCK_NB", [&] { return ::flock(cfd, LOCK_EX | LOCK_NB); });
      ::close(cfd);
    });
    t.Call("parent OFD F_OFD_SETLK wr", [&] {
      struct flock o{};
      o.l_type = F_WRLCK;
      o.l_whence = SEEK_SET;
      o.l_start = 500;
      o.l_len = 1;
      return ::fcntl(fd, F_OFD_SETLK, &o);
    });
    const int fd2 = OpenAt(t, "f", O_RDWR);
    t.Call("second OFD conflicts", [&] {
      struct flock o{};
      o.l_type = F_WRLCK;
      o.l_whence = SEEK_SET;
      o.l_start = 500;
      o.l_len = 1;
      return ::fcntl(fd2, F_OFD_SETLK, &o);
    });
    ::close(fd2);
    ::close(fd);
  });
}

TEST_P(PosixParity, LongNames) {
  Check([](Trace& t) {
    const std::string n255(255, 'n'), n256(256, 'n');
    t.Open("create 255", [&] { int r = OpenAt(t, n255, O_CREAT | O_WRONLY); if (r >= 0) ::close(r); return r; }, {n255});
    t.Open("create 256", [&] { return OpenAt(t, n256, O_CREAT | O_WRONLY); });
    t.Call("mkdir 255", [&] { return ::mkdirat(t.dir(), ("d" + std::string(254, 'd')).c_str(), 0755); });
    t.Call("mkdir 256", [&] { return ::mkdirat(t.dir(), std::string(256, 'd').c_str(), 0755); });
    t.Call("stat 256", [&] { struct stat st; return ::fstatat(t.dir(), n256.c_str(), &st, 0); });
    t.Call("rename 255 -> 256", [&] { return ::renameat(t.dir(), n255.c_str(), t.dir(), n256.c_str()); });
    t.Call("rename 255 -> 255'", [&] { return ::renameat(t.dir(), n255.c_str(), t.dir(), std::string(255, 'm').c_str()); }, {std::string(255, 'm')});
    t.Call("symlink to 256 name", [&] { return ::symlinkat(n256.c_str(), t.dir(), "s"); }, {"s"});
    t.Call("symlink named 256", [&] { return ::symlinkat("x", t.dir(), n256.c_str()); });
    t.Call("link 255 -> 256", [&] { return ::linkat(t.dir(), std::string(255, 'm').c_str(), t.dir(), n256.c_str(), 0); });
    t.Call("unlink 256", [&] { return ::unlinkat(t.dir(), n256.c_str(), 0); });
    t.Readdir(".");
  });
}

TEST_P(PosixParity, PathLongerThanPathMax) {
  Check([](Trace& t) {
    // 20 levels of 250-byte names: ~5000 bytes, more than PATH_MAX (4096).
    const std::string comp(250, 'p');
    int fd = ::dup(t.dir());
    std::string full = ".";
    for (int i = 0; i < 20; ++i) {
      const std::string name = comp.substr(0, 248) + std::to_string(10 + i);
      full += "/" + name;
      if (::mkdirat(fd, name.c_str(), 0755) != 0) {
        t.Note("mkdirat level " + std::to_string(i), ErrnoName(errno));
        break;
      }
      const int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      ::close(fd);
      fd = next;
      if (fd < 0) {
        t.Note("openat level " + std::to_string(i), ErrnoName(errno));
        return;
      }
    }
    t.Note("full path length > PATH_MAX", full.size() > PATH_MAX ? "yes" : "no");
    const int f = ::openat(fd, "deep", O_CREAT | O_RDWR | O_CLOEXEC, 0640);
    t.Note("create deep", f >= 0 ? "fd" : ErrnoName(errno));
    t.Call("write deep", [&] { return WriteStr(f, "deep data"); });
    t.PreadData("read deep", f, 100, 0);
    t.Fstat("deep", f);
    ::close(f);
    t.Call("renameat deep deeper", [&] { return ::renameat(fd, "deep", fd, "deeper"); });
    t.Call("linkat deeper h", [&] { return ::linkat(fd, "deeper", fd, "h", 0); });
    t.Call("symlinkat", [&] { return ::symlinkat("deeper", fd, "sl"); });
    t.Call("mkdirat sub", [&] { return ::mkdirat(fd, "sub", 0700); });
    struct stat st;
    t.Call("fstatat deeper", [&] { return ::fstatat(fd, "deeper", &st, 0); });
    t.Note("deeper nlink", std::to_string(st.st_nlink));
    t.Call("open full path (ENAMETOOLONG)", [&] { return ::openat(t.dir(), (full + "/deeper").c_str(), O_RDONLY); });
    t.Call("unlinkat h", [&] { return ::unlinkat(fd, "h", 0); });
    ::close(fd);
  });
}

TEST_P(PosixParity, OpenUnlinked) {
  Check([](Trace& t) {
    const int fd = OpenAt(t, "f", O_CREAT | O_RDWR);
    t.Call("write", [&] { return WriteStr(fd, "hello"); });
    t.Call("unlink f", [&] { return ::unlinkat(t.dir(), "f", 0); }, {"f"});
    t.Fstat("unlinked", fd);
    t.Call("pwrite after unlink", [&] { return PwriteStr(fd, "world", 5); });
    t.PreadData("pread after unlink", fd, 100, 0);
    t.Call("ftruncate after unlink", [&] { return ::ftruncate(fd, 3); });
    t.Fstat("truncated", fd);
    t.Call("fchmod after unlink", [&] { return ::fchmod(fd, 0600); });
    t.Fstat("chmodded", fd);
    t.Readdir(".");
    // A new file with the old name is a different file.
    Put(t, "f", "new content");
    t.PreadData("old fd still reads old data", fd, 100, 0);
    const int g = OpenAt(t, "f", O_RDONLY);
    t.PreadData("new file", g, 100, 0);
    ::close(g);
    // Rename over a file that is open: the open one keeps its data.
    const int h = OpenAt(t, "h", O_CREAT | O_RDWR);
    WriteStr(h, "victim");
    Put(t, "src", "winner");
    t.Call("rename src h (over open file)", [&] { return ::renameat(t.dir(), "src", t.dir(), "h"); }, {"h"});
    t.PreadData("replaced file through old fd", h, 100, 0);
    t.Fstat("replaced", h);
    ::close(h);
    ::close(fd);
  });
}

TEST_P(PosixParity, PermissionsAsNobody) {
  Check([](Trace& t) {
    ::mkdirat(t.dir(), "priv", 0700);
    SetupStep(t, "fchmodat priv", ::fchmodat(t.dir(), "priv", 0700, 0));
    Put(t, "priv/secret", "s");
    ::mkdirat(t.dir(), "pub", 0777);
    SetupStep(t, "fchmodat pub", ::fchmodat(t.dir(), "pub", 0777, 0));
    ::mkdirat(t.dir(), "sticky", 0777);
    SetupStep(t, "fchmodat sticky", ::fchmodat(t.dir(), "sticky", 01777, 0));
    Put(t, "sticky/roots", "r", 0666);
    SetupStep(t, "fchmodat sticky/roots", ::fchmodat(t.dir(), "sticky/roots", 0666, 0));
    Put(t, "ro", "read only", 0644);
    Put(t, "suid", "x", 0755);
    SetupStep(t, "fchmodat suid", ::fchmodat(t.dir(), "suid", 06777, 0));
    t.Stat("suid");
    Put(t, "sgid-nox", "x", 0644);
    SetupStep(t, "fchmodat sgid-nox", ::fchmodat(t.dir(), "sgid-nox", 06646, 0));
    t.Stat("sgid-nox");
    // A writer with CAP_FSETID (root) keeps the set-ID bits.
    {
      const int r = ::openat(t.dir(), "suid", O_WRONLY | O_CLOEXEC);
      t.Call("write suid file as root", [&] { return WriteStr(r, "z"); }, {"suid"});
      if (r >= 0) ::close(r);
    }
    t.InChild(
        [](Trace& c) {
          c.Call("stat priv/secret", [&] { struct stat st; return ::fstatat(c.dir(), "priv/secret", &st, 0); });
          c.Call("open priv/new O_CREAT", [&] { return ::openat(c.dir(), "priv/new", O_CREAT | O_WRONLY | O_CLOEXEC, 0644); });
          c.Call("readdir priv", [&] { return ::openat(c.dir(), "priv", O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
          // With kCreatesAsServerUser the new entries belong to root: leave
          // out what depends on their owner.
          const bool owner_ok = !c.Has(Quirk::kCreatesAsServerUser);
          c.Open("create pub/mine", [&] { int r = ::openat(c.dir(), "pub/mine", O_CREAT | O_WRONLY | O_CLOEXEC, 0644); if (r >= 0) ::close(r); return r; });
          c.Call("mkdir pub/mydir", [&] { return ::mkdirat(c.dir(), "pub/mydir", 0755); });
          c.Call("symlink pub/mylink", [&] { return ::symlinkat("mine", c.dir(), "pub/mylink"); });
          if (owner_ok) {
            c.Stat("pub/mine");
            c.Stat("pub/mydir");
            c.Stat("pub/mylink");
          }
          c.Call("mkdir at top (0755 root dir)", [&] { return ::mkdirat(c.dir(), "nope", 0755); });
          c.Call("open ro O_WRONLY", [&] { return ::openat(c.dir(), "ro", O_WRONLY | O_CLOEXEC); });
          c.Open("open ro O_RDONLY", [&] { int r = ::openat(c.dir(), "ro", O_RDONLY | O_CLOEXEC); if (r >= 0) ::close(r); return r; });
          c.Call("chmod ro", [&] { return ::fchmodat(c.dir(), "ro", 0777, 0); });
          c.Call("chown pub/mine to root", [&] { return ::fchownat(c.dir(), "pub/mine", 0, 0, 0); });
          if (owner_ok) {
            c.Call("chmod own file 0600", [&] { return ::fchmodat(c.dir(), "pub/mine", 0600, 0); }, {"pub/mine"});
            c.Call("chmod own file setgid (not member)", [&] { return ::fchmodat(c.dir(), "pub/mine", 02755, 0); }, {"pub/mine"});
          }
          c.Call("unlink sticky/roots", [&] { return ::unlinkat(c.dir(), "sticky/roots", 0); });
          c.Call("rename sticky/roots", [&] { return ::renameat(c.dir(), "sticky/roots", c.dir(), "sticky/r2"); });
          c.Call("truncate ro", [&] { const int r = ::openat(c.dir(), "ro", O_RDWR | O_TRUNC | O_CLOEXEC); return r < 0 ? -1L : (::close(r), 0L); });
          c.Call("utimensat ro explicit times", [&] { const timespec ts[2] = {{1, 0}, {1, 0}}; return ::utimensat(c.dir(), "ro", ts, 0); });
          c.Call("utimensat ro NOW (not owner, no write)", [&] { return ::utimensat(c.dir(), "ro", nullptr, 0); });
          c.Call("set user xattr on ro", [&] { return ::setxattr(("/proc/self/fd/" + std::to_string(c.dir()) + "/ro").c_str(), "user.x", "v", 1, 0); });
          // Writing to a set-user-ID file as another user clears the bits.
          const int s = ::openat(c.dir(), "suid", O_WRONLY | O_CLOEXEC);
          c.Call("write suid file", [&] { return WriteStr(s, "y"); }, {"suid"});
          if (s >= 0) ::close(s);
          // ... and set-group-ID too, group execute or not, when the writer
          // is not in the file's group.
          if (!c.Has(Quirk::kWritesAsServerUser)) {
            const int g = ::openat(c.dir(), "sgid-nox", O_WRONLY | O_CLOEXEC);
            c.Call("write suid+sgid file without group execute", [&] { return WriteStr(g, "y"); }, {"sgid-nox"});
            if (g >= 0) ::close(g);
          }
        },
        kNobody, kNobody);
    if (t.Has(Quirk::kCreatesAsServerUser)) return;  // owners below would be the server's
    t.Stat("pub/mine");
    t.Stat("pub/mydir");
    t.Readdir("pub");
  });
}

// The mount must accept O_DIRECT with unaligned user buffers (not parity: a
// native file system rejects them with EINVAL by design).
TEST_P(PosixParity, ODirectUnalignedOnMount) {
  if (!target_->is_mount()) GTEST_SKIP() << "native directories reject unaligned O_DIRECT (EINVAL) by design";
  if (quirks_.count(Quirk::kODirectPassthrough)) {
    GTEST_SKIP() << "reference quirk: " << target_->name() << " passes O_DIRECT through (EINVAL)";
  }
  const std::string path = target_->view(0) + "/odirect-unaligned";
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_DIRECT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << ErrnoName(errno);
  std::vector<char> buf(20000);
  char* p = buf.data() + 3;  // deliberately unaligned
  const std::string data = Pattern(10001, 'o');
  std::memcpy(p, data.data(), data.size());
  EXPECT_EQ(::pwrite(fd, p, data.size(), 7), static_cast<ssize_t>(data.size())) << ErrnoName(errno);
  std::memset(p, 0, data.size());
  EXPECT_EQ(::pread(fd, p, data.size(), 7), static_cast<ssize_t>(data.size())) << ErrnoName(errno);
  EXPECT_EQ(std::string(p, data.size()), data);
  ::close(fd);
  EXPECT_EQ(::unlink(path.c_str()), 0);
}

INSTANTIATE_TEST_SUITE_P(Native, PosixParity, ::testing::Values("native"));
INSTANTIATE_TEST_SUITE_P(PassthroughLl, PosixParity, ::testing::Values("passthrough_ll"));
INSTANTIATE_TEST_SUITE_P(FedfsLocal, PosixParity, ::testing::Values("fedfs-local"));
INSTANTIATE_TEST_SUITE_P(FedfsRemote, PosixParity, ::testing::Values("fedfs-remote"));

}  // namespace
}  // namespace fedfs::testing
