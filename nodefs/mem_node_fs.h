// MemNodeFs: a small, real in-memory implementation of NodeFs
// (nodefs/node_fs.h): one node's export root kept as a tree of inodes in
// this process. For the simulator (fedfs-bench sim runs 1024+ nodes in one
// process, each with its own MemNodeFs) and for tests that need a NodeFs
// without a disk.
//
// What it models, with the errno the system calls give (the NodeFs contract
// suite in tests/unit/namespace checks it against a native directory):
//  * directories, regular files with their bytes, symlinks, fifos and device
//    nodes (nodes only: no I/O beyond what a regular file does), hard links and
//    link counts (a directory: 2 + subdirectories), mode/uid/gid/times, open
//    unlinked files, user/trusted/security xattrs;
//  * permission checks as the kernel makes them for the caller's uid, gid and
//    groups (root passes everything except executing a file without x bits),
//    umask on new files, set-gid directories, sticky directories, set-ID
//    bits cleared by a Write whose writer lacks CAP_FSETID;
//  * symlinks inside paths are followed beneath the root: an absolute target
//    or one that climbs above the root answers EXDEV (as RESOLVE_BENEATH),
//    more than 40 symlinks ELOOP; the final component is followed only by the
//    operations whose system call follows it (Open, Create, ListDir);
//  * POSIX byte-range locks per (file, owner) and flock per (file, owner),
//    with the LocalNodeFs lifetime rules: Flush drops the owner's POSIX locks,
//    the last Release of a file drops all of its locks;
//  * StatFs answers fixed figures (a 1 TiB file system of 4 KiB blocks).
// Not modelled: a local program acting on an export root directory (there is
// none), O_DIRECT alignment (always accepted), blocking opens of fifos.
//
// Memory: an empty MemNodeFs is one root inode (~250 bytes); each inode costs
// its name, ~200 bytes and its data. Timestamps come from CLOCK_REALTIME and
// never influence results or message sizes.
//
// Threads: thread-safe (one mutex per MemNodeFs; no method blocks or calls
// out while holding it). Never calls the network; fine on the simulator's
// thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nodefs/node_fs.h"

namespace fedfs::ns {

class MemNodeFs final : public NodeFs {
 public:
  explicit MemNodeFs(std::string node_id);
  ~MemNodeFs() override;
  MemNodeFs(const MemNodeFs&) = delete;
  MemNodeFs& operator=(const MemNodeFs&) = delete;

  const std::string& node_id() const override { return node_id_; }

  Result<struct stat> Stat(const Cred& c, const std::string& path) override;
  Status Access(const Cred& c, const std::string& path, int mode) override;
  Result<std::vector<DirEntry>> ListDir(const Cred& c, const std::string& path) override;
  Result<struct stat> Mkdir(const Cred& c, const std::string& path, mode_t mode) override;
  Status MkdirParents(const std::string& path, const std::vector<DirTemplate>& templates) override;
  Status Rmdir(const Cred& c, const std::string& path) override;
  Result<struct stat> Mknod(const Cred& c, const std::string& path, mode_t mode,
                            dev_t rdev) override;
  Result<struct stat> Symlink(const Cred& c, const std::string& target,
                              const std::string& path) override;
  Result<std::string> Readlink(const Cred& c, const std::string& path) override;
  Status Unlink(const Cred& c, const std::string& path) override;
  Status Rename(const Cred& c, const std::string& from, const std::string& to,
                unsigned flags) override;
  Result<struct stat> Link(const Cred& c, const std::string& existing,
                           const std::string& newpath) override;
  Result<struct stat> SetAttr(const Cred& c, const std::string& path, std::optional<Handle> handle,
                              const SetAttrRequest& req) override;
  Result<struct statvfs> StatFs() override;

  Result<std::string> GetXattr(const Cred& c, const std::string& path, const std::string& name,
                               size_t size, size_t* needed) override;
  Status SetXattr(const Cred& c, const std::string& path, const std::string& name,
                  std::span<const std::byte> value, int flags) override;
  Result<std::string> ListXattr(const Cred& c, const std::string& path, size_t size,
                                size_t* needed) override;
  Status RemoveXattr(const Cred& c, const std::string& path, const std::string& name) override;

  Result<Opened> Open(const Cred& c, const std::string& path, int flags) override;
  Result<Opened> Create(const Cred& c, const std::string& path, int flags, mode_t mode) override;
  Result<size_t> Read(Handle h, uint64_t offset, std::span<std::byte> dst) override;
  using NodeFs::Write;
  Result<size_t> Write(Handle h, uint64_t offset, std::span<const std::byte> src,
                       const Writer& by) override;
  Status Flush(Handle h, uint64_t lock_owner) override;
  Status Fsync(Handle h, bool datasync) override;
  Status Fallocate(Handle h, int mode, uint64_t offset, uint64_t len) override;
  Status Release(Handle h) override;

  Result<LockRange> GetLk(Handle h, uint64_t owner, const LockRange& want) override;
  Status SetLk(Handle h, uint64_t owner, const LockRange& want) override;
  Status Flock(Handle h, uint64_t owner, int op) override;

  // Inodes alive (reachable or open), for memory accounting and tests.
  size_t InodeCount() const;
  size_t OpenHandleCount() const;

  struct Inode;  // implementation (mem_node_fs.cc)

 private:
  struct OpenFile;
  struct Walk;

  // Path resolution; REQUIRES mu_.
  Result<Walk> Resolve(const Cred& c, const std::string& path, bool follow_final,
                       const char* op) const;
  Result<std::shared_ptr<OpenFile>> LookupLocked(Handle h) const;
  Result<Opened> OpenLocked(const Cred& c, const std::string& path, int flags, mode_t mode,
                            bool create);
  void ReleaseInodeLocked(const std::shared_ptr<Inode>& ino);

  const std::string node_id_;
  mutable std::mutex mu_;
  std::shared_ptr<Inode> root_;                                // GUARDED_BY(mu_)
  std::map<Handle, std::shared_ptr<OpenFile>> handles_;        // GUARDED_BY(mu_)
  Handle next_handle_ = 1;                                     // GUARDED_BY(mu_)
  uint64_t next_ino_ = 2;                                      // GUARDED_BY(mu_)
  size_t inodes_ = 1;                                          // GUARDED_BY(mu_)
};

}  // namespace fedfs::ns
