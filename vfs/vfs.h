// Vfs: the per-node facade the FUSE frontend talks to (as Ceph's Client::ll_*
// is for fuse_ll.cc). It speaks inode numbers, like the FUSE low-level API,
// without any FUSE type, so that fuse/ is the only module that includes FUSE.
//
// It owns the inode table (FUSE node id -> global path, type, location),
// resolves names through virtual directories (VdService), picks the node for
// new files (Placement), and forwards every file operation to the NodeFs of
// the node that holds the file (LocalNodeFs for this node, RemoteNodeFs for
// others). Multi-node directory operations (rename, rmdir of a directory held
// by several nodes) go through the journaled coordinator (dirops/dir_ops.h).
//
// Inode numbers (st_ino) are unique across the federation: a file's is
// (node tag << 48) | (its local st_ino & (2^48 - 1)), node tag from the
// holder's config (announced through membership, VfsDeps::tag_of); a
// directory's is (0xffff << 48) | (its id & (2^48 - 1)), the id kept across
// rename (nodefs/dir_id.h; the root's: a hash of "/"), as its parent's VD
// entry gave it when first looked up, kept while the kernel knows it. Hard
// links of one file show one st_ino and the local link count.
//
// Threads: all methods may block (remote calls with deadlines) and are called
// from FUSE worker threads; thread-safe.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

inline constexpr uint64_t kRootIno = 1;  // FUSE_ROOT_ID

// ino 0: a negative entry (Lookup of a name that does not exist, when the
// kernel may remember that for entry_timeout seconds); nothing is counted.
struct EntryOut {
  uint64_t ino = 0;         // FUSE node id (lookup count incremented by one)
  uint64_t generation = 0;
  struct stat attr {};      // st_ino already federation-unique
  double attr_timeout = 0;  // seconds the kernel may cache attr
  double entry_timeout = 0; // seconds the kernel may cache the name
};

struct FileOut {
  uint64_t fh = 0;
  bool direct_io = false;
  bool keep_cache = false;
};

struct DirEntryOut {
  std::string name;
  uint64_t ino = 0;  // st_ino
  mode_t type = 0;   // S_IF* bits
  uint64_t next_offset = 0;
};

class Vfs {
 public:
  virtual ~Vfs() = default;

  // A missing name: ENOENT, or a negative EntryOut (ino 0) when the kernel
  // may cache the absence (VfsImpl: only while it can take it back).
  virtual Result<EntryOut> Lookup(const Cred& c, uint64_t parent, const std::string& name) = 0;
  virtual void Forget(uint64_t ino, uint64_t nlookup) = 0;
  // Seconds the kernel may keep the attributes `st` of `ino` (GETATTR and
  // SETATTR replies; lookups carry theirs in EntryOut).
  virtual double AttrTimeout(uint64_t ino, const struct stat& st) const {
    (void)ino;
    (void)st;
    return 0;
  }
  virtual Result<struct stat> GetAttr(const Cred& c, uint64_t ino, std::optional<uint64_t> fh) = 0;
  virtual Result<struct stat> SetAttr(const Cred& c, uint64_t ino, std::optional<uint64_t> fh,
                                      const SetAttrRequest& req) = 0;
  virtual Result<std::string> Readlink(const Cred& c, uint64_t ino) = 0;
  virtual Result<EntryOut> Mknod(const Cred& c, uint64_t parent, const std::string& name,
                                 mode_t mode, dev_t rdev) = 0;
  virtual Result<EntryOut> Mkdir(const Cred& c, uint64_t parent, const std::string& name,
                                 mode_t mode) = 0;
  virtual Status Unlink(const Cred& c, uint64_t parent, const std::string& name) = 0;
  virtual Status Rmdir(const Cred& c, uint64_t parent, const std::string& name) = 0;
  virtual Result<EntryOut> Symlink(const Cred& c, const std::string& target, uint64_t parent,
                                   const std::string& name) = 0;
  virtual Status Rename(const Cred& c, uint64_t parent, const std::string& name,
                        uint64_t new_parent, const std::string& new_name, unsigned flags) = 0;
  virtual Result<EntryOut> Link(const Cred& c, uint64_t ino, uint64_t new_parent,
                                const std::string& new_name) = 0;

  virtual Result<FileOut> Open(const Cred& c, uint64_t ino, int flags) = 0;
  virtual Result<std::pair<EntryOut, FileOut>> Create(const Cred& c, uint64_t parent,
                                                      const std::string& name, mode_t mode,
                                                      int flags) = 0;
  virtual Result<size_t> Read(uint64_t fh, uint64_t offset, std::span<std::byte> dst) = 0;
  // `by`: the writer, and whether it lacks CAP_FSETID (NodeFs::Write).
  virtual Result<size_t> Write(uint64_t fh, uint64_t offset, std::span<const std::byte> src,
                               const Writer& by) = 0;
  virtual Status Flush(uint64_t fh, uint64_t lock_owner) = 0;
  virtual Status Fsync(uint64_t fh, bool datasync) = 0;
  virtual Status Release(uint64_t fh) = 0;
  virtual Status Fallocate(uint64_t fh, int mode, uint64_t offset, uint64_t len) = 0;

  virtual Result<uint64_t> OpenDir(const Cred& c, uint64_t ino) = 0;
  // Entries from `offset` (0 = start, then an entry's next_offset), at most
  // `max` of them; "." and ".." included.
  virtual Result<std::vector<DirEntryOut>> ReadDir(uint64_t dh, uint64_t offset, size_t max) = 0;
  virtual Status ReleaseDir(uint64_t dh) = 0;

  virtual Result<struct statvfs> StatFs() = 0;

  virtual Result<std::string> GetXattr(const Cred& c, uint64_t ino, const std::string& name,
                                       size_t size, size_t* needed) = 0;
  virtual Status SetXattr(const Cred& c, uint64_t ino, const std::string& name,
                          std::span<const std::byte> value, int flags) = 0;
  virtual Result<std::string> ListXattr(const Cred& c, uint64_t ino, size_t size,
                                        size_t* needed) = 0;
  virtual Status RemoveXattr(const Cred& c, uint64_t ino, const std::string& name) = 0;

  virtual Result<LockRange> GetLk(uint64_t fh, uint64_t owner, const LockRange& want) = 0;
  virtual Status SetLk(uint64_t fh, uint64_t owner, const LockRange& want, bool wait) = 0;
  virtual Status Flock(uint64_t fh, uint64_t owner, int op) = 0;
};

}  // namespace fedfs::ns
