// LocalNodeFs: NodeFs (nodefs/node_fs.h) on this node's export root, by
// system calls. Owned by the daemon (one per node); the FileService serves
// remote callers with it and the Vfs uses it for local files.
//
// Path resolution. Every global path is checked with ValidateGlobalPath
// (EINVAL for "..", "." or empty components: logged at warn; ENAMETOOLONG for
// a component over 255 bytes). The parent directory of the target is opened
// as an O_PATH fd with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
// relative to the export root's fd; the final component is then handled with
// *at() calls on that fd (never following a final symlink except where the
// system call named in node_fs.h does: Open/Create follow it, beneath the
// root, like open(2); ListDir follows it like opendir(3)). Intermediate
// symlinks are FOLLOWED when they stay beneath the root (RESOLVE_BENEATH
// allows that; a local user's `ln -s data/2024 current` keeps working). Any
// escape (absolute symlink, symlink climbing above the root) fails with the
// errno openat2 gives, EXDEV, logged at warn with the offending path.
// Parent paths longer than PATH_MAX are walked in chunks of whole components
// (each shorter than PATH_MAX), each chunk resolved with RESOLVE_BENEATH
// relative to the previous chunk's fd; beneath-ness is transitive. A relative
// symlink inside one chunk may not climb above that chunk's starting
// directory (EXDEV), a conservative restriction only for such long paths.
//
// Credentials. Every operation that takes a Cred runs under ScopedCred
// (nodefs/cred.h) on the calling thread: resolution, permission checks
// and owners of new objects are the caller's. MkdirParents runs as the
// daemon (root) and sets each new directory's mode/uid/gid from the
// templates; StatFs runs as the daemon. Handle operations (Read, Write, locks,
// ...) run as the daemon: permission was checked at Open, as for an fd. So a
// write never clears set-ID bits by itself (the daemon has CAP_FSETID): a
// Write whose writer lacks CAP_FSETID clears those SetIdBitsAWriteClears
// names first (fstat, then fchmod as the daemon); truncates, chowns and
// O_TRUNC opens run as the caller, so the kernel clears them as natively.
//
// Handles. Open/Create return an index into a handle table (never the raw
// fd); unknown or released handles give EBADF. Handles are never reused.
//  * O_DIRECT: the file is opened with O_DIRECT (plain open when the file
//    system refuses O_DIRECT). A Read/Write that the kernel rejects with
//    EINVAL for alignment is retried once with O_DIRECT cleared on that open
//    file (fcntl F_SETFL, serialized per handle, then set again): never
//    EINVAL for alignment. Concurrent I/O on the same handle during such a
//    retry may go through the page cache; the data is the same.
//  * O_APPEND: kept on the fd. Linux pwrite(2) on an O_APPEND fd ignores the
//    offset and writes at the current end of file, atomically: exactly
//    append semantics, even when another node or a local program extended
//    the file since the caller last saw its size.
//  * An open handle keeps working after its file is unlinked or renamed.
//
// Locks (the lock table of the file's node). For each (file dev+ino, owner)
// the table keeps one private open file description of the file (reopened
// with open_by_handle_at(2) on the handle's own fd, falling back to
// /proc/self/fd/<our own fd> for file systems without export support: a
// path we build from our own descriptor, never one from the network). POSIX
// byte-range locks are open-file-description locks (F_OFD_GETLK/F_OFD_SETLK)
// on that description, flock(2) locks are taken on it too (always LOCK_NB).
// So locks of different owners conflict with each other, and with local
// programs using the export root (classic fcntl, OFD and flock locks), while
// one owner's locks merge and convert as POSIX locks of one process do.
// GetLk reports the conflicting lock; its pid is -1 when the holder is an
// OFD lock (another owner here, or a local program's OFD lock) and the real
// pid for a local program's classic fcntl lock. Flush(h, owner) releases the
// owner's POSIX locks on that file (close(2) semantics) and keeps flock
// locks (the caller releases them with Flock(LOCK_UN) when the FUSE release
// says so); Release closes the handle and, when it was the file's last
// handle here, closes the lock descriptions (dropping every remaining lock).
// F_WRLCK needs a handle open for writing and F_RDLCK one open for reading
// (EBADF otherwise), as with fcntl(2).
//
// Xattrs. Never through /proc magic links. The target is opened O_PATH
// beneath the root (as the caller); regular files and directories are then
// opened O_RDONLY (as the daemon, checked to be the same inode) for
// f*xattr, which run as the caller so the kernel's xattr permission checks
// are the caller's. Other file types (symlinks, fifos, sockets, devices) have
// no user.* xattrs: GetXattr gives ENODATA, SetXattr EPERM, RemoveXattr
// EPERM (as lgetxattr/lsetxattr/lremovexattr give for user.* names) and
// ListXattr an empty list (security.* labels of such objects are not shown).
//
// Threads: all methods are thread-safe and may block in system calls.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <functional>

#include "common/result.h"
#include "nodefs/move_gate.h"
#include "nodefs/move_support.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

class LocalNodeFs final : public NodeFs, public MoveSupport {
 public:
  // Opens `export_root` (an existing directory; O_PATH|O_DIRECTORY, kept for
  // the object's lifetime). ENOENT/ENOTDIR/EACCES as open(2) gives them.
  static Result<std::unique_ptr<LocalNodeFs>> Open(std::string node_id, std::string export_root);
  ~LocalNodeFs() override;

  const std::string& node_id() const override { return node_id_; }
  const std::string& export_root() const { return export_root_; }

  // Called with each path a namespace change is about to touch (create,
  // mknod, mkdir and the parents MkdirParents may make, symlink, link, unlink,
  // rmdir, both names of a rename), before the change, on the calling thread:
  // the daemon tells its autonomy watcher to skip the echo of changes FedFS
  // makes itself. Set once, before use.
  void SetChangeHook(std::function<void(const std::string& path)> hook) {
    change_hook_ = std::move(hook);
  }
  // Told of every change this object makes to a regular file's attributes
  // (node_fs.h): the daemon's FileService, which tells the other nodes that
  // have the file open. Null (the default): no one. Any thread; the observer
  // must outlive its use (clear it first).
  void SetAttrObserver(AttrObserver* o) { attr_observer_.store(o, std::memory_order_release); }

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

  Result<std::string> GetXattrOf(const Cred& c, Handle h, const std::string& name, size_t size,
                                 size_t* needed) override;
  Result<std::string> GetXattr(const Cred& c, const std::string& path, const std::string& name,
                               size_t size, size_t* needed) override;
  Status SetXattr(const Cred& c, const std::string& path, const std::string& name,
                  std::span<const std::byte> value, int flags) override;
  Result<std::string> ListXattr(const Cred& c, const std::string& path, size_t size,
                                size_t* needed) override;
  Status RemoveXattr(const Cred& c, const std::string& path, const std::string& name) override;

  Result<Opened> Open(const Cred& c, const std::string& path, int flags) override;
  Result<std::string> FileHandleOf(const std::string& path) override;
  Result<Opened> OpenByFileHandle(const std::string& handle, int flags) override;
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

  // Number of open handles (tests, `fedfsctl` statistics).
  size_t OpenHandleCount() const;

  // MoveSupport (local_move.cc).
  Result<Frozen> Freeze(dev_t dev, ino_t ino) override;
  void Hold(dev_t dev, ino_t ino) override;
  void MarkMoved(dev_t dev, ino_t ino) override;
  void Thaw(dev_t dev, ino_t ino) override;
  Result<int> CreateUnnamed(const std::string& dir) override;
  Result<struct stat> LinkUnnamed(int fd, const std::string& path) override;

  struct OpenFile;  // defined in local_node_fs.cc

 private:
  void Changing(const std::string& path) const {
    if (change_hook_) change_hook_(path);
  }
  std::function<void(const std::string& path)> change_hook_;
  // The observer when it wants to hear of changes now, else null.
  AttrObserver* Observer() const {
    AttrObserver* o = attr_observer_.load(std::memory_order_acquire);
    return o != nullptr && o->Interested() ? o : nullptr;
  }
  static void Tell(AttrObserver* o, const struct stat& st, DataRange data) {
    if (o != nullptr && S_ISREG(st.st_mode)) o->AttrsChanged(st.st_dev, st.st_ino, data);
  }
  // Tell of the file open as `fd` (its attributes only).
  void TellFd(int fd) const {
    struct stat st {};
    if (AttrObserver* o = Observer(); o != nullptr && fstat(fd, &st) == 0) {
      Tell(o, st, DataRange::None());
    }
  }
  std::atomic<AttrObserver*> attr_observer_{nullptr};
  // The move gate (move_support.h): a changing operation holds the pass its
  // file's gate lets through (waits while the file is frozen; ESTALE once
  // it moved). `key_of` names the file; it is asked only while some file is
  // gated (nullopt: no such file, the operation fails by itself). A read
  // (`changes` false) passes a frozen file and waits only while the move is
  // committed and its name not yet switched (Held), so that the ESTALE it
  // gets once the file moved sends it where the file now is.
  Result<MoveGate::Pass> PassFor(const std::function<std::optional<MoveGate::Key>()>& key_of,
                                 bool changes = true);
  std::optional<MoveGate::Key> KeyOfPath(const std::string& path);
  // ESTALE if the handle's file moved to another node or is about to (Held):
  // the check of a read by this node's own mount, which must not wait while
  // Held (its kernel keeps the read's pages locked, and the move drops this
  // kernel's pages of the file before it switches the name).
  Status MovedCheck(const OpenFile& f) const;
  MoveGate gate_;
  // Drops the gate of a file, then its pin (pinned_) if it has one.
  void DropGate(const MoveGate::Key& k);
  struct Parent;
  static Result<std::string> FGetXattr(const Cred& c, int fd, const std::string& what,
                                       const std::string& name, size_t size, size_t* needed);
  struct LockDesc;  // one private open file description (closed on destruction)
  struct InodeLocks {
    size_t handles = 0;  // open handles of this inode here
    std::map<uint64_t, std::shared_ptr<LockDesc>> owners;  // lock owner -> its description
  };
  using InodeKey = std::pair<dev_t, ino_t>;
  struct InodeKeyHash {
    size_t operator()(const InodeKey& k) const {
      return std::hash<uint64_t>()(static_cast<uint64_t>(k.first) * 0x9e3779b97f4a7c15ULL ^
                                   static_cast<uint64_t>(k.second));
    }
  };

  LocalNodeFs(std::string node_id, std::string export_root, int root_fd);

  // Validates `path` and opens its parent beneath the root (as the current
  // thread's credentials). For "/", the parent is the root and name ".".
  // `sibling`: the resolved parent of `sibling_path`; when both paths are in
  // one directory its descriptor is used (after `path` is validated).
  Result<Parent> ResolveParent(const std::string& path, const char* op,
                               const Parent* sibling = nullptr,
                               const std::string& sibling_path = {});
  // For calls that resolve their last component beneath a descriptor
  // themselves (openat2): validates `path` and, when it fits in one call,
  // answers the root and the whole relative path, so the kernel walks it
  // once (no open and close of the parent); else as ResolveParent.
  Result<Parent> ResolveWhole(const std::string& path, const char* op);
  // Opens `rel` (relative, "." allowed) beneath `dirfd` as an O_PATH
  // directory, in chunks when longer than PATH_MAX.
  // The id stored with subdirectory `name` of `dirfd` whose inode number is
  // `ino` (nodefs/dir_id.h), 0 if none; and storing one on directory `fd`
  // (logged once if the file system refuses).
  static uint64_t StoredDirId(int dirfd, const char* name, uint64_t ino);
  static void StoreDirId(int fd, uint64_t id, const std::string& path);
  Result<int> OpenDirBeneath(int dirfd, std::string_view rel, const std::string& path,
                             const char* op);
  // `by_handle`: open the file FileHandleOf named so instead of `path`
  // (as the daemon; `path` only names it in errors).
  Result<Opened> OpenCommon(const Cred& c, const std::string& path, int flags, mode_t mode,
                            const char* op, const std::string* by_handle = nullptr);
  Result<std::shared_ptr<OpenFile>> Lookup(Handle h) const;
  // The private lock description of (file, owner); created when `create`,
  // otherwise null when there is none.
  Result<std::shared_ptr<LockDesc>> LockFd(const OpenFile& f, uint64_t owner, bool create);
  // Opens the xattr target; *fd is -1 for file types without user xattrs.
  Status XattrTarget(const Cred& c, const std::string& path, const char* op, int* fd);

  const std::string node_id_;
  const std::string export_root_;
  const int root_fd_;

  // Lock order: mu_ is a leaf (no system call that can block is made while
  // holding it, except close(2) of lock descriptions, which does not block).
  mutable std::mutex mu_;
  Handle next_handle_ = 1;                                          // GUARDED_BY(mu_)
  std::unordered_map<Handle, std::shared_ptr<OpenFile>> handles_;   // GUARDED_BY(mu_)
  std::unordered_map<InodeKey, InodeLocks, InodeKeyHash> inodes_;   // GUARDED_BY(mu_)
  // Gated files whose last name went here (a moved file's copy, the move's
  // last step: migration/): an O_PATH descriptor of each keeps its inode,
  // and so its number, until its gate goes (DropGate). Else a file created
  // here meanwhile could be given that number and meet the gate: its create
  // made the file, then answered ESTALE, and the kernel's retry EEXIST.
  std::unordered_map<InodeKey, int, InodeKeyHash> pinned_;          // GUARDED_BY(mu_)
  // Moved files whose move ended (Thaw) while handles here were still open:
  // the last one's Release drops the gate. Not before the move ended: a
  // handle released between MarkMoved and the move's unlink of the name
  // dropped the gate, and the unlink then opened the old file for the
  // deferred opens of other nodes (files/file_service.h, NameGoing), which
  // read its old bytes from then on.
  std::unordered_set<InodeKey, InodeKeyHash> thawed_;               // GUARDED_BY(mu_)
};

}  // namespace fedfs::ns
