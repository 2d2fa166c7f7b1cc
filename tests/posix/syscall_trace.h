// Recording sequences of system calls for POSIX parity tests (mergerfs
// tests/ style): the same sequence runs in a native directory and in a
// mount, each step recorded as one text line, and the two recordings must be
// identical.
//
// A step records: its label, the return value (a file descriptor is recorded
// as "fd", byte counts and 0/-1 as numbers), errno when it failed, and the
// lstat of the paths it names afterwards: type, mode, nlink, uid, gid and size
// (size left out for directories, whose size is file-system specific; times,
// inode and device numbers are never recorded). Data read back is recorded as
// its length and an FNV-1a hash.
//
// A Trace works relative to a directory fd (the case directory) and uses only
// *at() calls, so paths longer than PATH_MAX work beneath it. InChild() runs
// steps in a forked child (optionally as another user) and appends its lines,
// prefixed "[child] ", through a pipe. Not thread-safe.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "tests/posix/mount_target.h"

namespace fedfs::testing {

class Trace {
 public:
  // `dirfd`: the case directory (not owned). `quirks`: steps a sequence
  // leaves out on both sides.
  Trace(int dirfd, std::set<Quirk> quirks);

  int dir() const { return dirfd_; }
  bool Has(Quirk q) const { return quirks_.count(q) != 0; }

  // Runs fn (a system call returning >= 0 or -1 with errno) and records
  // "label -> ret" or "label -> -1 ENAME", then the lstat of each path.
  long Call(const std::string& label, const std::function<long()>& fn,
            std::initializer_list<std::string> stat_paths = {});
  // Same for calls returning a file descriptor: a non-negative result is
  // recorded as "fd" and returned.
  int Open(const std::string& label, const std::function<int()>& fn,
           std::initializer_list<std::string> stat_paths = {});
  // Records fstat(fd) as "label -> <stat>" (or the error).
  void Fstat(const std::string& label, int fd);
  // Records the lstat of a path relative to dir() ("." = the directory).
  void Stat(const std::string& path);
  // Records stat (following symlinks).
  void StatFollow(const std::string& path);
  // Reads up to `len` bytes at `off` with pread and records length + hash.
  void PreadData(const std::string& label, int fd, size_t len, off_t off);
  // Records the sorted entries of directory `path` as name:type.
  void Readdir(const std::string& path);
  // Records a free-form fact (must be deterministic on both sides).
  void Note(const std::string& label, const std::string& value);

  // Forks; the child runs fn with a Trace on the same directory, as `uid` /
  // `gid` with no supplementary groups when uid >= 0, then exits. Its lines
  // are appended here, prefixed "[child] ". Records the child's exit status.
  void InChild(const std::function<void(Trace&)>& fn, int uid = -1, int gid = -1);

  const std::vector<std::string>& lines() const { return lines_; }

 private:
  void Add(std::string line);
  std::string StatLine(const struct stat& st) const;
  int dirfd_;
  std::set<Quirk> quirks_;
  std::vector<std::string> lines_;
};

// FNV-1a of `data`, as 16 hex digits.
std::string Fnv1a(const void* data, size_t len);
// errno name ("ENOENT"), or the number.
std::string ErrnoName(int e);

// Runs `seq` twice: in a fresh case directory `name` beneath `native_root`
// and beneath `target_root`, and returns "" if the recordings match,
// otherwise a readable side-by-side diff. The case directories are created
// mode 0755 and removed afterwards.
std::string CompareSequence(const std::string& name, const std::function<void(Trace&)>& seq,
                            const std::string& native_root, const std::string& target_root,
                            const std::set<Quirk>& quirks, std::vector<std::string>* native_lines = nullptr);

// A readable line diff of two recordings ("" if equal).
std::string DiffLines(const std::vector<std::string>& want, const std::vector<std::string>& got);

}  // namespace fedfs::testing
