// What MemNodeFs's files share (mem_node_fs.cc: resolution, names,
// attributes, xattrs; mem_files.cc: open files, I/O, locks): the inode and
// handle structs, permission checks, constants. Internal to fedfs_ns_mem.
//
// MemNodeFs (nodefs/mem_node_fs.h): an export root as a tree of inodes.
//
// Every public method takes mu_ once, resolves its path(s) and acts on the
// inodes; nothing calls out. A directory owns its children (shared_ptr); an
// open handle keeps its inode alive after the last name is gone.
#pragma once

#include "nodefs/mem_node_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/file.h>
#include <sys/xattr.h>
#include <time.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <deque>
#include <limits>
#include <set>

#include "common/path.h"

namespace fedfs::ns {
namespace mem_detail {

inline constexpr int kMaxSymlinks = 40;
inline constexpr size_t kXattrMaxValue = 65536;
inline constexpr size_t kXattrMaxName = 255;
inline constexpr dev_t kDev = 0xfedf;
inline constexpr uint64_t kEof = std::numeric_limits<uint64_t>::max();

inline constexpr int kR = 4, kW = 2, kX = 1;

inline timespec Now() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return t;
}

inline bool InGroup(const Cred& c, gid_t g) {
  return c.gid == g || std::find(c.groups.begin(), c.groups.end(), g) != c.groups.end();
}

inline std::unexpected<Error> Fail(int code, const char* op, const std::string& path) {
  return Err(code, std::string(op) + " " + path);
}

inline bool Trusted(const std::string& n) { return n.rfind("trusted.", 0) == 0; }
inline bool Security(const std::string& n) { return n.rfind("security.", 0) == 0; }
inline bool UserNs(const std::string& n) { return n.rfind("user.", 0) == 0; }

}  // namespace mem_detail

using namespace mem_detail;

// One POSIX lock segment [start, end) of one owner.
struct Segment {
  uint64_t start = 0;
  uint64_t end = 0;  // exclusive; kEof: to end of file
  int16_t type = F_RDLCK;
};

struct MemNodeFs::Inode {
  uint64_t ino = 0;
  mode_t mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  nlink_t nlink = 1;
  dev_t rdev = 0;
  timespec atime{}, mtime{}, ctime{};
  std::string data;  // file bytes, or the symlink target
  std::map<std::string, std::shared_ptr<Inode>, std::less<>> children;  // directories
  std::unique_ptr<std::map<std::string, std::string>> xattrs;            // rare: on demand
  uint32_t handles = 0;
  struct Owner {
    std::vector<Segment> posix;
    int flock = 0;  // 0, LOCK_SH or LOCK_EX
  };
  std::unique_ptr<std::map<uint64_t, Owner>> locks;  // while handles > 0

  bool dir() const { return S_ISDIR(mode); }
  void Touch() { mtime = ctime = Now(); }
};

struct MemNodeFs::OpenFile {
  std::shared_ptr<Inode> inode;
  int flags = 0;
  int acc() const { return flags & O_ACCMODE; }
};

// The result of resolving a path: the directory that holds the final name
// (null when the path names the root or ends in a followed "."/".."), the
// name, the object if it exists, and every directory from the root down to
// `parent` (for the rename-into-own-subtree check).
struct MemNodeFs::Walk {
  std::shared_ptr<Inode> parent;
  std::string name;
  std::shared_ptr<Inode> node;
  std::vector<const Inode*> chain;
};

namespace mem_detail {

inline bool Permits(const Cred& c, const MemNodeFs::Inode& n, int mask) {
  if (c.uid == 0) {
    return !((mask & kX) && !S_ISDIR(n.mode) && !(n.mode & 0111));
  }
  int bits;
  if (c.uid == n.uid) bits = (n.mode >> 6) & 7;
  else if (InGroup(c, n.gid)) bits = (n.mode >> 3) & 7;
  else bits = n.mode & 7;
  return (bits & mask) == mask;
}

inline struct stat StatOf(const MemNodeFs::Inode& n) {
  struct stat st {};
  st.st_dev = kDev;
  st.st_ino = n.ino;
  st.st_mode = n.mode;
  st.st_nlink = n.nlink;
  st.st_uid = n.uid;
  st.st_gid = n.gid;
  st.st_rdev = n.rdev;
  st.st_size = n.dir() ? 4096 : static_cast<off_t>(n.data.size());
  st.st_blksize = 4096;
  st.st_blocks = static_cast<blkcnt_t>((st.st_size + 4095) / 4096 * 8);
  st.st_atim = n.atime;
  st.st_mtim = n.mtime;
  st.st_ctim = n.ctime;
  return st;
}

// May `c` remove or replace the entry `victim` of directory `dir`?
inline Status MayDelete(const Cred& c, const MemNodeFs::Inode& dir, const MemNodeFs::Inode& victim,
                 const char* op, const std::string& path) {
  if (!Permits(c, dir, kW | kX)) return Fail(EACCES, op, path);
  if ((dir.mode & S_ISVTX) && c.uid != 0 && c.uid != dir.uid && c.uid != victim.uid) {
    return Fail(EPERM, op, path);
  }
  return Ok();
}

inline bool Overlaps(const Segment& a, uint64_t start, uint64_t end) {
  return a.start < end && start < a.end;
}


// A new inode in `parent` under `name`, owned by the caller (group of a
// set-gid parent).
inline std::shared_ptr<MemNodeFs::Inode> NewChild(MemNodeFs::Inode& parent, const std::string& name,
                                           mode_t mode, uid_t uid, gid_t gid, uint64_t ino) {
  auto n = std::make_shared<MemNodeFs::Inode>();
  n->ino = ino;
  n->mode = mode;
  n->uid = uid;
  n->gid = gid;
  if (parent.mode & S_ISGID) {
    n->gid = parent.gid;
    if (S_ISDIR(mode)) n->mode |= S_ISGID;
  }
  n->atime = n->mtime = n->ctime = Now();
  if (S_ISDIR(mode)) {
    n->nlink = 2;
    ++parent.nlink;
  }
  parent.children.emplace(name, n);
  parent.Touch();
  return n;
}


}  // namespace mem_detail
}  // namespace fedfs::ns
