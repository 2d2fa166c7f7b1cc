#include "tests/posix/syscall_trace.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace fedfs::testing {
namespace {

const char* TypeName(mode_t m) {
  switch (m & S_IFMT) {
    case S_IFREG: return "reg";
    case S_IFDIR: return "dir";
    case S_IFLNK: return "lnk";
    case S_IFIFO: return "fifo";
    case S_IFSOCK: return "sock";
    case S_IFCHR: return "chr";
    case S_IFBLK: return "blk";
    default: return "?";
  }
}

const char* DirentType(unsigned char t) {
  switch (t) {
    case DT_REG: return "reg";
    case DT_DIR: return "dir";
    case DT_LNK: return "lnk";
    case DT_FIFO: return "fifo";
    case DT_SOCK: return "sock";
    case DT_UNKNOWN: return "unknown";
    default: return "other";
  }
}

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string Fnv1a(const void* data, size_t len) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string ErrnoName(int e) {
  const char* n = strerrorname_np(e);
  return n ? n : "errno" + std::to_string(e);
}

Trace::Trace(int dirfd, std::set<Quirk> quirks) : dirfd_(dirfd), quirks_(std::move(quirks)) {}

void Trace::Add(std::string line) { lines_.push_back(std::move(line)); }

std::string Trace::StatLine(const struct stat& st) const {
  char buf[160];
  if (S_ISDIR(st.st_mode)) {
    std::snprintf(buf, sizeof buf, "%s mode=%04o nlink=%lu uid=%u gid=%u", TypeName(st.st_mode),
                  st.st_mode & 07777, static_cast<unsigned long>(st.st_nlink), st.st_uid, st.st_gid);
  } else {
    std::snprintf(buf, sizeof buf, "%s mode=%04o nlink=%lu uid=%u gid=%u size=%lld",
                  TypeName(st.st_mode), st.st_mode & 07777, static_cast<unsigned long>(st.st_nlink),
                  st.st_uid, st.st_gid, static_cast<long long>(st.st_size));
  }
  return buf;
}

long Trace::Call(const std::string& label, const std::function<long()>& fn,
                 std::initializer_list<std::string> stat_paths) {
  errno = 0;
  const long r = fn();
  const int e = errno;
  Add(label + " -> " + (r < 0 ? std::to_string(r) + " " + ErrnoName(e) : std::to_string(r)));
  for (const auto& p : stat_paths) Stat(p);
  errno = e;
  return r;
}

int Trace::Open(const std::string& label, const std::function<int()>& fn,
                std::initializer_list<std::string> stat_paths) {
  errno = 0;
  const int fd = fn();
  const int e = errno;
  Add(label + " -> " + (fd < 0 ? "-1 " + ErrnoName(e) : std::string("fd")));
  for (const auto& p : stat_paths) Stat(p);
  errno = e;
  return fd;
}

void Trace::Fstat(const std::string& label, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Add("  fstat " + label + ": -1 " + ErrnoName(errno));
  } else {
    Add("  fstat " + label + ": " + StatLine(st));
  }
}

void Trace::Stat(const std::string& path) {
  struct stat st;
  if (::fstatat(dirfd_, path.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    Add("  lstat " + path.substr(0, 64) + ": -1 " + ErrnoName(errno));
  } else {
    Add("  lstat " + path.substr(0, 64) + ": " + StatLine(st));
  }
}

void Trace::StatFollow(const std::string& path) {
  struct stat st;
  if (::fstatat(dirfd_, path.c_str(), &st, 0) != 0) {
    Add("  stat " + path.substr(0, 64) + ": -1 " + ErrnoName(errno));
  } else {
    Add("  stat " + path.substr(0, 64) + ": " + StatLine(st));
  }
}

void Trace::PreadData(const std::string& label, int fd, size_t len, off_t off) {
  std::string buf(len, '\0');
  const ssize_t n = ::pread(fd, buf.data(), len, off);
  if (n < 0) {
    Add(label + " -> -1 " + ErrnoName(errno));
  } else {
    Add(label + " -> " + std::to_string(n) + " fnv=" + Fnv1a(buf.data(), static_cast<size_t>(n)));
  }
}

void Trace::Readdir(const std::string& path) {
  const int fd = ::openat(dirfd_, path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    Add("readdir " + path + " -> -1 " + ErrnoName(errno));
    return;
  }
  DIR* d = ::fdopendir(fd);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) names.push_back(std::string(e->d_name) + ":" + DirentType(e->d_type));
  const int e = errno;
  ::closedir(d);
  std::sort(names.begin(), names.end());
  std::string all;
  for (const auto& n : names) all += n + "\n";
  if (names.size() <= 12) {
    std::string l;
    for (const auto& n : names) l += " " + n;
    Add("readdir " + path + " ->" + l + (e ? " then " + ErrnoName(e) : ""));
  } else {
    Add("readdir " + path + " -> " + std::to_string(names.size()) + " entries fnv=" +
        Fnv1a(all.data(), all.size()) + (e ? " then " + ErrnoName(e) : ""));
  }
}

void Trace::Note(const std::string& label, const std::string& value) { Add(label + " = " + value); }

void Trace::InChild(const std::function<void(Trace&)>& fn, int uid, int gid) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    Add("child: pipe failed");
    return;
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    ::alarm(30);  // a hung file system must not hang the test: the child dies, the parent reports it
    if (uid >= 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(gid)) != 0 ||
          ::setuid(static_cast<uid_t>(uid)) != 0) {
        WriteAll(p[1], std::string("setuid failed: ") + std::strerror(errno) + "\n");
        ::_exit(3);
      }
    }
    Trace child(dirfd_, quirks_);
    fn(child);
    std::string out;
    for (const auto& l : child.lines()) out += l + "\n";
    ::_exit(WriteAll(p[1], out) ? 0 : 4);
  }
  ::close(p[1]);
  if (pid < 0) {
    ::close(p[0]);
    Add("child: fork failed");
    return;
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(p[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(p[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  size_t start = 0;
  while (start < out.size()) {
    size_t nl = out.find('\n', start);
    if (nl == std::string::npos) nl = out.size();
    Add("[child] " + out.substr(start, nl - start));
    start = nl + 1;
  }
  Add("[child] exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)));
}

std::string DiffLines(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  if (a == b) return "";
  // LCS table; recordings are at most a few hundred lines.
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> l(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;) {
      l[i][j] = a[i] == b[j] ? l[i + 1][j + 1] + 1 : std::max(l[i + 1][j], l[i][j + 1]);
    }
  }
  std::string out = "--- native\n+++ mount\n";
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      out += "  " + a[i++] + "\n";
      ++j;
    } else if (j < m && (i == n || l[i][j + 1] >= l[i + 1][j])) {
      out += "+ " + b[j++] + "\n";
    } else {
      out += "- " + a[i++] + "\n";
    }
  }
  return out;
}

namespace {

// Runs seq in a fresh directory `name` beneath root; its recording.
std::vector<std::string> RunIn(const std::string& root, const std::string& name,
                               const std::function<void(Trace&)>& seq, const std::set<Quirk>& quirks) {
  const std::string dir = root + "/" + name;
  RemoveTree(dir);
  if (::mkdir(dir.c_str(), 0755) != 0 || ::chmod(dir.c_str(), 0755) != 0) {
    return {"setup: mkdir " + dir + ": " + std::strerror(errno)};
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return {"setup: open " + dir + ": " + std::strerror(errno)};
  Trace t(fd, quirks);
  seq(t);
  ::close(fd);
  std::vector<std::string> lines = t.lines();
  if (!RemoveTree(dir)) lines.push_back("cleanup: could not remove the case directory");
  return lines;
}

}  // namespace

std::string CompareSequence(const std::string& name, const std::function<void(Trace&)>& seq,
                            const std::string& native_root, const std::string& target_root,
                            const std::set<Quirk>& quirks, std::vector<std::string>* native_lines) {
  const mode_t old = ::umask(022);
  const auto want = RunIn(native_root, name, seq, quirks);
  const auto got = RunIn(target_root, name, seq, quirks);
  ::umask(old);
  if (native_lines) *native_lines = want;
  return DiffLines(want, got);
}

}  // namespace fedfs::testing
