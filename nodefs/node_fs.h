// NodeFs: the operations FedFS performs on ONE node's export root, addressed
// by global path (common/path.h), on behalf of a user (Cred).
//
// Two implementations with identical semantics:
//  * LocalNodeFs (nodefs/local_node_fs.h): system calls on this node's
//    export root. Every path is resolved beneath the root (openat2 with
//    RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, walked in pieces so that paths
//    longer than PATH_MAX work); `..`, absolute paths and symlinks leading
//    outside are refused with EXDEV/EINVAL and logged. Each operation runs
//    with the caller's fsuid, fsgid and supplementary groups on the calling
//    thread (nodefs/cred.h), so permission checks and the owners of new
//    files mean what they mean locally.
//  * RemoteNodeFs (files/remote_node_fs.h): forwards each operation to the
//    node that holds the data, whose FileService (files/file_service.h)
//    runs it on its LocalNodeFs. Control travels in small RPCs; file data
//    moves one-sided (Put/Get) between pre-registered buffers.
//
// Semantics follow the system calls named in each comment: return values and
// errno are those the local system call gives (the POSIX parity suite in
// tests/posix checks this), plus the transport's errnos for a remote node
// (docs/errors.md): EHOSTDOWN when the node is known dead, ETIMEDOUT at the
// deadline.
//
// Threads: every method may block (system calls or a remote call with a
// deadline); call them from worker threads (FUSE workers, the FileService
// pool), never from the transport's progress context. Implementations are
// thread-safe.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/path.h"
#include "common/result.h"

namespace fedfs::ns {

// Who performs an operation: the FUSE request's uid, gid and the caller's
// supplementary groups.
struct Cred {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
  // umask of the calling process, applied to modes of new files/directories.
  uint32_t umask = 0;
};

// Who writes (NodeFs::Write). The FUSE frontend asks for
// FUSE_HANDLE_KILLPRIV_V2: the kernel then leaves clearing a file's set-ID
// bits on write to the file system and flags each write whose writer lacks
// CAP_FSETID (FUSE_WRITE_KILL_SUIDGID). The file's node clears them as a
// native write by that writer would (SetIdBitsAWriteClears), on its own
// authority: the writer need not be allowed to chmod the file. The default
// is a writer with CAP_FSETID: nothing is cleared.
struct Writer {
  bool kill_setid = false;  // the writer lacks CAP_FSETID
  Cred cred;                // the writer; its gid and groups decide set-group-ID
};

// The set-ID bits that a write by `writer`, lacking CAP_FSETID, clears of a
// file of mode `mode` and group `gid`, as the kernel decides for a native
// write (setattr_should_drop_suidgid): set-user-ID always, set-group-ID when
// the file is group-executable or the writer is not in its group; nothing
// for other than regular files. The one place FedFS decides it.
inline mode_t SetIdBitsAWriteClears(mode_t mode, gid_t gid, const Cred& writer) {
  if (!S_ISREG(mode)) return 0;
  mode_t drop = mode & S_ISUID;
  if (mode & S_ISGID) {
    const bool member = writer.gid == gid || std::find(writer.groups.begin(), writer.groups.end(),
                                                       gid) != writer.groups.end();
    if ((mode & S_IXGRP) || !member) drop |= S_ISGID;
  }
  return drop;
}

// One entry of a node's local directory listing.
struct DirEntry {
  std::string name;
  uint8_t type = 0;  // DT_REG, DT_DIR, DT_LNK, DT_FIFO, ... (DT_UNKNOWN never)
  uint64_t ino = 0;  // local st_ino
  // A file being moved to another node (migration/, docs/migration.md,
  // "Visibility"): 0 for every ordinary entry. Set only by the VD service's
  // `annotate_listing` hook, never by a NodeFs.
  uint64_t move_id = 0;
  enum MoveRole : uint8_t { kNotMoving = 0, kIncoming = 1, kOutgoing = 2 };
  uint8_t move_role = kNotMoving;
  // A directory's stored id (nodefs/dir_id.h: kDirIdXattr, checked against
  // `ino`); 0 when none is stored, and for every other type.
  uint64_t id = 0;
};

// What SetAttr changes; unset fields stay as they are.
struct SetAttrRequest {
  std::optional<mode_t> mode;  // chmod (permission bits)
  std::optional<uid_t> uid;    // chown
  std::optional<gid_t> gid;
  std::optional<off_t> size;   // truncate
  // utimensat semantics: tv_nsec may be UTIME_NOW; unset = UTIME_OMIT.
  std::optional<timespec> atime;
  std::optional<timespec> mtime;
};

// An open file on the node that holds it; valid until Release.
using Handle = uint64_t;

struct Opened {
  Handle handle = 0;
  struct stat st {};
  // The file's node tells this object of every change of the file's
  // attributes while the handle is open (RemoteNodeFs: FsAttrChanged), so
  // they may be cached until then.
  bool attr_callbacks = false;
  // Create only (RemoteNodeFs): the file is also watched as this (see
  // StatWatched), so its changes are told after the release as well.
  std::optional<Handle> watch;
  // Create only (RemoteNodeFs): the attributes of the file's directory on
  // its node right after the create.
  std::optional<struct stat> parent;
};

// A Stat whose file's node tells of the file's changes (see StatWatched).
struct WatchedStat {
  struct stat st {};
  // The name the file's node uses in FsAttrChanged (RemoteNodeFs: like an
  // open handle's); none: nothing will be told.
  std::optional<Handle> watch;
};

// The bytes of a file a change may have altered: [offset, offset + length).
// The default is every byte (the file's end included); None() is a change
// of attributes only (mode, owner, times, links, xattrs).
struct DataRange {
  static constexpr uint64_t kToEnd = ~uint64_t{0};
  uint64_t offset = 0;
  uint64_t length = kToEnd;
  static DataRange None() { return {0, 0}; }
  static DataRange From(uint64_t offset) { return {offset, kToEnd}; }
  bool empty() const { return length == 0; }
};

// Told of changes a NodeFs makes to the attributes of regular files (size,
// times, mode, owner, link count, xattrs), on the calling thread, after each
// change succeeded, with the bytes the change may have altered.
class AttrObserver {
 public:
  virtual ~AttrObserver() = default;
  // False while no change needs telling: the NodeFs then does not even
  // locate the file a change touched.
  virtual bool Interested() const = 0;
  // The file (st_dev, st_ino) changed, its data within `data`. May block
  // (bounded).
  virtual void AttrsChanged(dev_t dev, ino_t ino, DataRange data) = 0;
  // Before a change takes the name `path` (global) away from regular file
  // (dev, ino): an unlink of it, a rename of it or over it; on the calling
  // thread, under the caller's credentials. True: the observer did
  // something that the file's AttrsChanged must follow even if the change
  // then fails (the NodeFs calls it either way).
  virtual bool NameGoing(dev_t dev, ino_t ino, const std::string& path) {
    (void)dev, (void)ino, (void)path;
    return false;
  }
};

// Byte-range lock request/answer (fcntl F_GETLK/F_SETLK semantics; l_pid is
// reported, not interpreted).
struct LockRange {
  int16_t type = F_UNLCK;  // F_RDLCK, F_WRLCK, F_UNLCK
  uint64_t start = 0;
  uint64_t len = 0;        // 0: to end of file
  int32_t pid = 0;
};

class NodeFs {
 public:
  virtual ~NodeFs() = default;

  // The node this object operates on.
  virtual const std::string& node_id() const = 0;

  // Which session with that node this object is in: changes when a new one
  // starts (RemoteNodeFs: a Hello that did not continue a session the node
  // kept telling of its changes: after it restarted, expired the session or
  // stopped telling this node; what it told of before may not hold). 0 for a
  // local one.
  virtual uint64_t SessionCount() const { return 0; }

  // lstat(2).
  virtual Result<struct stat> Stat(const Cred& c, const std::string& path) = 0;
  // Stat, and when this object takes its node's change callbacks and `path`
  // is a regular file with one link, the node tells it of every later change
  // of the file's attributes (FsAttrChanged naming `watch`). The node may end
  // a watch at any time (it keeps a bounded number per client) and then
  // tells it once more, the same way: a watch that was told of nothing is
  // still in force. Default: Stat, no watch.
  virtual Result<WatchedStat> StatWatched(const Cred& c, const std::string& path) {
    auto st = Stat(c, path);
    if (!st) return Err(st.error());
    return WatchedStat{*st, std::nullopt};
  }
  // StatWatched of entry `name` of directory `dir` (first, named so) and,
  // in the same request to a remote node, of up to `along` regular files
  // that follow it there (in byte order and in version order:
  // files/name_windows.h), as the caller may list them
  // (files/fs_wire.h, kMaxStatMany). Default: `name` only.
  using NamedWatchedStat = std::pair<std::string, Result<WatchedStat>>;
  virtual Result<std::vector<NamedWatchedStat>> StatWatchedAlong(const Cred& c, const std::string& dir,
                                                                 const std::string& name, size_t along) {
    (void)along;
    std::vector<NamedWatchedStat> out;
    out.emplace_back(name, StatWatched(c, JoinPath(dir, name)));
    return out;
  }
  // access(2) for the caller's effective rights (faccessat with AT_EACCESS:
  // its uid, gid and groups; root's capabilities): Ok, or EACCES (the errno
  // of the check), ENOENT, ... A final symlink is followed, beneath the root.
  virtual Status Access(const Cred& c, const std::string& path, int mode) = 0;
  // The local directory listing (without "." and ".."); ENOTDIR, ENOENT.
  virtual Result<std::vector<DirEntry>> ListDir(const Cred& c, const std::string& path) = 0;
  // mkdir(2); returns the new directory's lstat.
  virtual Result<struct stat> Mkdir(const Cred& c, const std::string& path, mode_t mode) = 0;
  // Creates the missing ancestors of `path` (not `path` itself), each with the
  // mode, uid and gid given for it in `templates` (indexed by depth, from the
  // first component; missing entries: 0755 root:root). Existing ones are left
  // as they are. Used when placement puts a file on a node that lacks its
  // parent directory. A template's `id` (not 0) is stored with the copy it
  // makes (nodefs/dir_id.h), so that the copy keeps the directory's identity.
  struct DirTemplate {
    mode_t mode = 0755;
    uid_t uid = 0;
    gid_t gid = 0;
    uint64_t id = 0;
  };
  virtual Status MkdirParents(const std::string& path, const std::vector<DirTemplate>& templates) = 0;
  // rmdir(2).
  virtual Status Rmdir(const Cred& c, const std::string& path) = 0;
  // mknod(2) (regular files and fifos; device nodes as the kernel allows).
  virtual Result<struct stat> Mknod(const Cred& c, const std::string& path, mode_t mode,
                                    dev_t rdev) = 0;
  // symlink(2): creates `path` pointing to `target` (target is stored as is).
  virtual Result<struct stat> Symlink(const Cred& c, const std::string& target,
                                      const std::string& path) = 0;
  // readlink(2).
  virtual Result<std::string> Readlink(const Cred& c, const std::string& path) = 0;
  // unlink(2).
  virtual Status Unlink(const Cred& c, const std::string& path) = 0;
  // Unlink, and the attributes of the directory the file was in right after
  // it, where they come at no extra cost (RemoteNodeFs: in the reply);
  // nullopt otherwise. Default: Unlink.
  virtual Result<std::optional<struct stat>> UnlinkSeeingParent(const Cred& c,
                                                                const std::string& path) {
    if (auto s = Unlink(c, path); !s) return Err(s.error());
    return std::optional<struct stat>();
  }
  // renameat2(2) within this node (flags: RENAME_NOREPLACE, RENAME_EXCHANGE).
  // Creates no parents: the caller ensures the destination's parent exists.
  virtual Status Rename(const Cred& c, const std::string& from, const std::string& to,
                        unsigned flags) = 0;
  // link(2) within this node; returns the new link's lstat.
  virtual Result<struct stat> Link(const Cred& c, const std::string& existing,
                                   const std::string& newpath) = 0;
  // chmod/chown/truncate/utimensat; with a handle, on the open file
  // (fchmod/ftruncate/...); returns the resulting lstat.
  virtual Result<struct stat> SetAttr(const Cred& c, const std::string& path,
                                      std::optional<Handle> handle,
                                      const SetAttrRequest& req) = 0;
  // statvfs(2) of the export root's file system.
  virtual Result<struct statvfs> StatFs() = 0;

  // Extended attributes (getxattr/setxattr/listxattr/removexattr, l* forms:
  // never following a final symlink). `size` 0 asks for the size only: the
  // result is then empty and the size is in `*needed`.
  virtual Result<std::string> GetXattr(const Cred& c, const std::string& path,
                                       const std::string& name, size_t size,
                                       size_t* needed) = 0;
  // fgetxattr(2) through an open handle of the file (the kernel asks
  // security.capability before every write: through the handle that costs
  // one system call, not a path resolution). ENOSYS: not offered here, ask
  // by path.
  virtual Result<std::string> GetXattrOf(const Cred& c, Handle h, const std::string& name,
                                         size_t size, size_t* needed) {
    (void)c, (void)h, (void)name, (void)size, (void)needed;
    return Err(ENOSYS, "getxattr through a handle");
  }
  virtual Status SetXattr(const Cred& c, const std::string& path, const std::string& name,
                          std::span<const std::byte> value, int flags) = 0;
  // The names, NUL-separated, as listxattr(2) returns them.
  virtual Result<std::string> ListXattr(const Cred& c, const std::string& path, size_t size,
                                        size_t* needed) = 0;
  virtual Status RemoveXattr(const Cred& c, const std::string& path,
                             const std::string& name) = 0;

  // open(2) of an existing file. O_CREAT is not allowed here (use Create).
  // O_DIRECT is honoured where the buffers allow it and otherwise stripped:
  // never EINVAL because of alignment.
  virtual Result<Opened> Open(const Cred& c, const std::string& path, int flags) = 0;
  // Open of the file at `path` that must be the one whose inode number has
  // `ino48` as its low 48 bits (kIno48Mask): ESTALE (nothing left open) if
  // the name now names another file or none. The first use of an open
  // that was answered without asking the file's node (vfs/vfs_deferred.cc).
  // `watch`: the watch (StatWatched) the open was answered under; a node
  // that still keeps it may open the file it names wherever it is now
  // (RemoteNodeFs; ignored here).
  static constexpr uint64_t kIno48Mask = (uint64_t{1} << 48) - 1;
  // A name of the file at `path` that outlives its path (its directory
  // renamed, the file renamed), and an open by that name as the daemon:
  // for deferred opens whose path went (files/file_service.h). Opaque
  // bytes, only ever handed back to the object that made them. Default:
  // ENOTSUP.
  virtual Result<std::string> FileHandleOf(const std::string& path) {
    return Err(ENOTSUP, path + ": no file handles here");
  }
  virtual Result<Opened> OpenByFileHandle(const std::string& handle, int flags) {
    (void)handle, (void)flags;
    return Err(ENOTSUP, "no file handles here");
  }
  virtual Result<Opened> OpenExpecting(const Cred& c, const std::string& path, int flags,
                                       uint64_t ino48, Handle watch) {
    (void)watch;
    auto r = Open(c, path, flags);
    if (!r && r.error().code == ENOENT) return Err(ESTALE, path + ": gone since it was opened");
    if (!r || (r->st.st_ino & kIno48Mask) == (ino48 & kIno48Mask)) return r;
    (void)Release(r->handle);
    return Err(ESTALE, path + ": another file since it was opened");
  }
  // open(2) with O_CREAT (O_EXCL as given).
  virtual Result<Opened> Create(const Cred& c, const std::string& path, int flags,
                                mode_t mode) = 0;
  // pread(2)/pwrite(2); short counts as the system call gives them. A write
  // by a writer that lacks CAP_FSETID first clears the set-ID bits it would
  // natively (Writer); a failure to clear them is logged, the write goes on.
  virtual Result<size_t> Read(Handle h, uint64_t offset, std::span<std::byte> dst) = 0;
  virtual Result<size_t> Write(Handle h, uint64_t offset, std::span<const std::byte> src,
                               const Writer& by) = 0;
  // Cooperative reads (docs/coopcache.md, "Blocks fetched from peers'
  // memory"): a read of whole blocks of the reader's cache (`ask.block`
  // bytes each, from `offset`), which the reader will keep in its cache at
  // ask.frames[i] (frame, tag) for block i. The file's node may answer with
  // copies of the leading blocks kept by other nodes instead of bytes
  // (CoopRead.copies, n 0), unless ask.replace (a copy it named was wrong).
  // Implementations without cooperation read (the default).
  struct CoopAsk {
    uint64_t block = 0;
    std::vector<std::pair<uint32_t, uint64_t>> frames;
    bool replace = false;
  };
  struct CoopCopyAt {
    uint64_t index = 0;  // block of the file
    uint32_t length = 0;
    std::string addr;
    uint64_t data_addr = 0, data_length = 0;
    std::vector<std::byte> data_rkey;
    uint64_t tags_addr = 0, tags_length = 0;
    std::vector<std::byte> tags_rkey;
    uint32_t frame = 0;
    uint64_t tag = 0;
  };
  struct CoopRead {
    size_t n = 0;
    std::vector<CoopCopyAt> copies;
    uint64_t dev = 0, ino = 0;  // the file at its node (0, 0: not said)
  };
  virtual Result<CoopRead> ReadCoop(Handle h, uint64_t offset, std::span<std::byte> dst,
                                    const CoopAsk& ask) {
    (void)ask;
    auto n = Read(h, offset, dst);
    if (!n) return Err(n.error());
    return CoopRead{*n, {}};
  }
  // N-chance forwarding (docs/coopcache.md, "N-chance forwarding"): the
  // client's half of fs.fbs's kCoopEvict (to the file's node: this node
  // evicted its copy; a peer to forward it to, or nullopt), kCoopStore (to
  // that peer: keep these bytes; where it keeps them, as a copy others read)
  // and kCoopMoved (to the
  // file's node: `node` keeps it at frame/tag, as of `version`).
  // Implementations without cooperation answer ENOTSUP (the default).
  struct CoopBlock {
    uint64_t block = 0;         // cache block size
    uint64_t dev = 0, ino = 0;  // the file at its node
    uint64_t index = 0;         // block of the file
    uint32_t frame = 0;
    uint64_t tag = 0;
    uint32_t length = 0;
    uint32_t recirc = 0;
    std::string node;     // Store: the file's node; Moved: the node keeping it
    uint64_t version = 0;  // Moved
    std::span<const std::byte> bytes;  // Store (length of them)
  };
  struct CoopTarget {
    std::string node;
    uint64_t version = 0;
  };
  virtual Result<std::optional<CoopTarget>> CoopEvict(const CoopBlock& b) {
    (void)b;
    return Err(ENOTSUP, "no cooperative caching");
  }
  virtual Result<CoopCopyAt> CoopStore(const CoopBlock& b) {
    (void)b;
    return Err(ENOTSUP, "no cooperative caching");
  }
  virtual Status CoopMoved(const CoopBlock& b) {
    (void)b;
    return Err(ENOTSUP, "no cooperative caching");
  }
  // A write by a writer with CAP_FSETID (implementations say
  // `using NodeFs::Write`).
  Result<size_t> Write(Handle h, uint64_t offset, std::span<const std::byte> src) {
    return Write(h, offset, src, Writer{});
  }
  // close-time flush (no-op locally beyond releasing POSIX locks of `owner`).
  virtual Status Flush(Handle h, uint64_t lock_owner) = 0;
  // fsync(2)/fdatasync(2).
  virtual Status Fsync(Handle h, bool datasync) = 0;
  // fallocate(2).
  virtual Status Fallocate(Handle h, int mode, uint64_t offset, uint64_t len) = 0;
  // Closes the handle; its locks go with it.
  virtual Status Release(Handle h) = 0;
  // Release, which the node may carry out later (RemoteNodeFs: with the next
  // request to that node, or after release_delay): for a handle of a file
  // that holds no lock taken through this NodeFs, whose closing no one
  // waits for. Errors of the late release are not reported. Default: Release.
  virtual Status ReleaseLater(Handle h) { return Release(h); }

  // POSIX byte-range locks held for `owner` (an id unique across the
  // federation, e.g. node tag << 48 ^ FUSE lock owner). The node that holds
  // the file keeps the lock table, so locks conflict across all nodes and with
  // local programs using the export root (open file description locks).
  // GetLk: the first conflicting lock, or type F_UNLCK. SetLk: never blocks;
  // EAGAIN on conflict (callers that must wait retry with backoff).
  virtual Result<LockRange> GetLk(Handle h, uint64_t owner, const LockRange& want) = 0;
  virtual Status SetLk(Handle h, uint64_t owner, const LockRange& want) = 0;
  // flock(2) (LOCK_SH/LOCK_EX/LOCK_UN, always with LOCK_NB semantics).
  virtual Status Flock(Handle h, uint64_t owner, int op) = 0;
};

}  // namespace fedfs::ns
