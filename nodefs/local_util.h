// What LocalNodeFs's files share (local_node_fs.cc: resolution beneath the
// root, names, attributes, xattrs; local_files.cc: open files, I/O, locks):
// openat2 resolution constants, error helpers, the per-object structs.
// Internal to fedfs_ns_local.
#pragma once

#include "nodefs/local_node_fs.h"

#include <mutex>

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>

#include "common/logging.h"
#include "nodefs/cred.h"
#include "nodefs/dir_id.h"
#include "common/path.h"

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452  // Linux 6.6; same number on every architecture
#endif


namespace fedfs::ns {
namespace local_detail {


inline constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
// Longest piece of a parent path resolved by one openat2 (bytes, < PATH_MAX).
inline constexpr size_t kChunk = PATH_MAX - NAME_MAX - 2;

// Owns one file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// openat2(2) (no glibc wrapper in 2.36). Retries EAGAIN, which
// RESOLVE_BENEATH returns when a concurrent rename made the check racy.
inline int OpenAt2(int dirfd, const char* path, uint64_t flags, uint64_t mode,
                   uint64_t resolve = kResolve) {
  struct open_how how {};
  how.flags = flags;
  how.mode = mode;
  how.resolve = resolve;
  for (int attempt = 0;; ++attempt) {
    long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
    if (fd >= 0) return static_cast<int>(fd);
    if (errno == EINTR || (errno == EAGAIN && attempt < 16)) continue;
    return -1;
  }
}

// Paths in log lines and error contexts: bounded.
inline std::string Shown(std::string_view path) {
  if (path.size() <= 200) return std::string(path);
  return std::string(path.substr(0, 96)) + "..." + std::string(path.substr(path.size() - 96));
}

inline std::unexpected<Error> SysErr(const char* op, std::string_view path, int e = errno) {
  return Err(e, std::string(op) + " " + Shown(path));
}

inline std::shared_ptr<spdlog::logger> Log() {
  static auto log = Logger("namespace");
  return log;
}

inline bool Trusted(const std::string& name) { return name.rfind("trusted.", 0) == 0; }
inline bool Security(const std::string& name) { return name.rfind("security.", 0) == 0; }


}  // namespace local_detail

using local_detail::UniqueFd;

// Runs the rest of the enclosing function with the caller's credentials.
#define FEDFS_AS(cred)                                 \
  ScopedCred scoped_cred;                              \
  if (auto st_ = scoped_cred.Enter(cred); !st_) {      \
    Log()->error("credentials: {}", st_.error().ToString()); \
    return Err(st_.error());                           \
  }



struct LocalNodeFs::Parent {
  int dir = -1;      // O_PATH directory beneath the root: `owned`, or the root's
  UniqueFd owned;    // (a parent that is the root costs no open and no close)
  std::string name;  // final component ("." for the root itself)
};

struct LocalNodeFs::LockDesc {
  explicit LockDesc(int f) : fd(f) {}
  ~LockDesc() { ::close(fd); }
  LockDesc(const LockDesc&) = delete;
  LockDesc& operator=(const LockDesc&) = delete;
  const int fd;
};

struct LocalNodeFs::OpenFile {
  OpenFile(int f, int fl, bool d, dev_t dv, ino_t in) : fd(f), flags(fl), direct(d), dev(dv), ino(in) {}
  ~OpenFile() { ::close(fd); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;

  const int fd;
  const int flags;    // as opened (O_ACCMODE, O_APPEND, ...)
  const bool direct;  // O_DIRECT actually set on fd
  const dev_t dev;
  const ino_t ino;
  std::mutex direct_mu;  // serializes clearing O_DIRECT for an unaligned I/O
};

}  // namespace fedfs::ns
