// LocalNodeFs: open files, I/O and locks (nodefs/local_node_fs.h).
#include "nodefs/local_util.h"

namespace fedfs::ns {

using namespace local_detail;

// ---------------------------------------------------------------------------
// Files

Result<Opened> LocalNodeFs::OpenCommon(const Cred& c, const std::string& path, int flags,
                                       mode_t mode, const char* op, const std::string* by_handle) {
  flags |= O_CLOEXEC | O_NOCTTY;
  const bool creat = (flags & O_CREAT) != 0;
  // Opens that change the file (O_TRUNC) wait while it is frozen for a
  // move; an open for writing does not: its writes wait. It may be the
  // reopen at the new node of a read in flight, which holds the kernel's
  // page locks that the move's drop of every node's pages waits for.
  const bool changes = (flags & O_TRUNC) != 0;
  const int asked_flags = flags;
  for (;;) {
  flags = asked_flags;
  MoveGate::Pass pass = gate_.Enter();
  int fd = -1;
  bool direct = (flags & O_DIRECT) != 0;
  if (by_handle != nullptr) {
    // The bytes FileHandleOf made, into an aligned struct file_handle.
    std::vector<uint64_t> buf((by_handle->size() + 7) / 8 + 1);
    std::memcpy(buf.data(), by_handle->data(), by_handle->size());
    auto* fh = reinterpret_cast<struct file_handle*>(buf.data());
    if (by_handle->size() < sizeof(struct file_handle) ||
        fh->handle_bytes != by_handle->size() - sizeof(struct file_handle)) {
      return Err(EINVAL, "malformed file handle");
    }
    // The root as an open (not O_PATH) descriptor names the file system.
    const int mount_fd = openat(root_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (mount_fd < 0) return SysErr(op, path);
    fd = open_by_handle_at(mount_fd, fh, flags & ~O_CREAT);
    const int e = errno;
    ::close(mount_fd);
    if (fd < 0) return SysErr(op, path, e);
  } else {
    FEDFS_AS(c);
    auto p = ResolveWhole(path, op);
    if (!p) return Err(p.error());
    const uint64_t m = creat ? scoped_cred.NewMode(mode & 07777) : 0;
    fd = OpenAt2(p->dir, p->name.c_str(), static_cast<uint64_t>(flags), m);
    if (fd < 0 && errno == EINVAL && direct) {
      // The file system does not do O_DIRECT at all: strip it.
      direct = false;
      flags &= ~O_DIRECT;
      fd = OpenAt2(p->dir, p->name.c_str(), static_cast<uint64_t>(flags), m);
    }
    if (fd < 0 && errno == EXDEV) {
      Log()->warn("{}: path '{}' escapes the export root: refused", op, Shown(path));
      errno = EXDEV;
    }
    if (fd < 0) return SysErr(op, path);
  }
  Opened out;
  if (fstat(fd, &out.st) != 0) {
    int e = errno;
    ::close(fd);
    return SysErr(op, path, e);
  }
  if (gate_.Any() && S_ISREG(out.st.st_mode)) {
    const MoveGate::Key key{out.st.st_dev, out.st.st_ino};
    Status s = gate_.Check(key, pass, changes);
    if (!s) {
      ::close(fd);
      if (s.error().code == EAGAIN) continue;  // the move was undone: again
      return Err(s.error());
    }
  }
  auto f = std::make_shared<OpenFile>(fd, flags, direct, out.st.st_dev, out.st.st_ino);
  {
    std::lock_guard lock(mu_);
    out.handle = next_handle_++;
    handles_.emplace(out.handle, std::move(f));
    ++inodes_[InodeKey{out.st.st_dev, out.st.st_ino}].handles;
  }
  if (flags & O_TRUNC) Tell(Observer(), out.st, DataRange{});
  return out;
  }
}

Result<Opened> LocalNodeFs::Open(const Cred& c, const std::string& path, int flags) {
  if (flags & O_CREAT) return Err(EINVAL, "open with O_CREAT: use Create");
  return OpenCommon(c, path, flags, 0, "open");
}

Result<Opened> LocalNodeFs::OpenByFileHandle(const std::string& handle, int flags) {
  if (flags & (O_CREAT | O_TRUNC)) return Err(EINVAL, "open by file handle with O_CREAT or O_TRUNC");
  return OpenCommon(Cred{}, "(by file handle)", flags, 0, "open_by_handle_at", &handle);
}

Result<Opened> LocalNodeFs::Create(const Cred& c, const std::string& path, int flags,
                                   mode_t mode) {
  Changing(path);
  return OpenCommon(c, path, flags | O_CREAT, mode, "create");
}

Result<std::shared_ptr<LocalNodeFs::OpenFile>> LocalNodeFs::Lookup(Handle h) const {
  std::lock_guard lock(mu_);
  auto it = handles_.find(h);
  if (it == handles_.end()) return Err(EBADF, "unknown handle " + std::to_string(h));
  return it->second;
}

namespace {

// Runs `io` with O_DIRECT cleared on f's open file description (an I/O the
// kernel refused for alignment), then sets it again.
template <class Fn>
ssize_t WithoutDirect(int fd, std::mutex& mu, Fn io) {
  std::lock_guard lock(mu);
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) != 0) return -1;
  ssize_t n;
  do {
    n = io();
  } while (n < 0 && errno == EINTR);
  int e = errno;
  fcntl(fd, F_SETFL, fl);
  errno = e;
  return n;
}

}  // namespace

Result<size_t> LocalNodeFs::Read(Handle h, uint64_t offset, std::span<std::byte> dst) {
  auto f = Lookup(h);
  if (!f) return Err(f.error());
  if (offset > static_cast<uint64_t>(INT64_MAX)) return Err(EINVAL, "read: offset");
  OpenFile& file = **f;
  // A read never waits at the gate (nodefs/move_support.h): ESTALE once the
  // file moved, else its bytes.
  if (auto s = MovedCheck(file); !s) return Err(s.error());
  auto io = [&] { return pread(file.fd, dst.data(), dst.size(), static_cast<off_t>(offset)); };
  ssize_t n;
  do {
    n = io();
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EINVAL && file.direct) n = WithoutDirect(file.fd, file.direct_mu, io);
  if (n < 0) return Err(errno, "read");
  return static_cast<size_t>(n);
}

Result<size_t> LocalNodeFs::Write(Handle h, uint64_t offset, std::span<const std::byte> src,
                                  const Writer& by) {
  auto f = Lookup(h);
  if (!f) return Err(f.error());
  if (offset > static_cast<uint64_t>(INT64_MAX)) return Err(EINVAL, "write: offset");
  OpenFile& file = **f;
  auto pass = PassFor([&] { return MoveGate::Key{file.dev, file.ino}; });
  if (!pass) return Err(pass.error());
  // Before the data, as a native write does (file_remove_privs).
  struct stat st {};
  if (by.kill_setid && fstat(file.fd, &st) == 0) {
    if (const mode_t drop = SetIdBitsAWriteClears(st.st_mode, st.st_gid, by.cred); drop != 0) {
      // Told with the write's own change below.
      if (fchmod(file.fd, st.st_mode & 07777 & ~drop) != 0) {
        Log()->warn("write: clearing the set-ID bits of inode {}: {}", st.st_ino,
                    std::strerror(errno));
      }
    }
  }
  // O_APPEND fds: Linux pwrite appends at the current end, ignoring offset;
  // the bytes changed start at or after the end seen before the write.
  AttrObserver* const o = Observer();
  DataRange changed{offset, src.size()};
  if ((file.flags & O_APPEND) && o != nullptr) {
    struct stat before {};
    const bool known = fstat(file.fd, &before) == 0;
    changed = DataRange::From(known ? static_cast<uint64_t>(before.st_size) : 0);
  }
  auto io = [&] { return pwrite(file.fd, src.data(), src.size(), static_cast<off_t>(offset)); };
  ssize_t n;
  do {
    n = io();
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EINVAL && file.direct) n = WithoutDirect(file.fd, file.direct_mu, io);
  if (n < 0) return Err(errno, "write");
  if (o != nullptr) o->AttrsChanged(file.dev, file.ino, changed);
  return static_cast<size_t>(n);
}

Status LocalNodeFs::Fsync(Handle h, bool datasync) {
  auto f = Lookup(h);
  if (!f) return Err(f.error());
  int rc = datasync ? fdatasync((*f)->fd) : fsync((*f)->fd);
  if (rc != 0) return Err(errno, "fsync");
  return Ok();
}

Status LocalNodeFs::Fallocate(Handle h, int mode, uint64_t offset, uint64_t len) {
  auto f = Lookup(h);
  if (!f) return Err(f.error());
  auto pass = PassFor([&] { return MoveGate::Key{(*f)->dev, (*f)->ino}; });
  if (!pass) return Err(pass.error());
  if (offset > static_cast<uint64_t>(INT64_MAX) || len > static_cast<uint64_t>(INT64_MAX)) {
    return Err(EINVAL, "fallocate: range");
  }
  if (fallocate((*f)->fd, mode, static_cast<off_t>(offset), static_cast<off_t>(len)) != 0) {
    return Err(errno, "fallocate");
  }
  // Plain allocation and zeroing change [offset, offset + len); collapsing
  // and inserting ranges move every byte after offset.
  const bool shifts = (mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)) != 0;
  const DataRange changed = shifts ? DataRange::From(offset) : DataRange{offset, len};
  if (AttrObserver* o = Observer()) o->AttrsChanged((*f)->dev, (*f)->ino, changed);
  return Ok();
}

Status LocalNodeFs::Release(Handle h) {
  bool last = false;
  std::shared_ptr<OpenFile> f;
  std::map<uint64_t, std::shared_ptr<LockDesc>> dropped;
  {
    std::lock_guard lock(mu_);
    auto it = handles_.find(h);
    if (it == handles_.end()) return Err(EBADF, "release: unknown handle " + std::to_string(h));
    f = std::move(it->second);
    handles_.erase(it);
    auto in = inodes_.find(InodeKey{f->dev, f->ino});
    if (in != inodes_.end() && --in->second.handles == 0) {
      dropped.swap(in->second.owners);
      inodes_.erase(in);
      // The last handle of a file whose move ended: its gate goes
      // (move_support.h). One released while the move goes on leaves the
      // gate to the move (thawed_).
      last = thawed_.erase(InodeKey{f->dev, f->ino}) != 0;
    }
  }
  if (last) DropGate({f->dev, f->ino});
  return Ok();  // f and the dropped lock descriptions close here, unlocked
}

Status LocalNodeFs::Flush(Handle h, uint64_t lock_owner) {
  auto f = Lookup(h);
  if (!f) return Err(f.error());
  auto d = LockFd(**f, lock_owner, false);
  if (!d) return Err(d.error());
  if (!*d) return Ok();
  struct flock fl {};
  fl.l_type = F_UNLCK;
  fl.l_whence = SEEK_SET;
  if (fcntl((*d)->fd, F_OFD_SETLK, &fl) != 0) return Err(errno, "flush: unlock");
  return Ok();
}

size_t LocalNodeFs::OpenHandleCount() const {
  std::lock_guard lock(mu_);
  return handles_.size();
}

// ---------------------------------------------------------------------------
// Locks

namespace {

// A new open file description of the same file as `fd` (see the header).
int Reopen(int fd) {
  static const int kModes[] = {O_RDWR, O_RDONLY, O_WRONLY};
  constexpr int kFlags = O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  alignas(struct file_handle) char storage[sizeof(struct file_handle) + MAX_HANDLE_SZ];
  auto* fh = reinterpret_cast<struct file_handle*>(storage);
  fh->handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  if (name_to_handle_at(fd, "", fh, &mount_id, AT_EMPTY_PATH) == 0) {
    for (int m : kModes) {
      int nfd = open_by_handle_at(fd, fh, m | kFlags);
      if (nfd >= 0) return nfd;
      if (errno != EISDIR && errno != EACCES && errno != EROFS && errno != ETXTBSY &&
          errno != EPERM) {
        break;
      }
    }
  }
  // Our own descriptor's /proc entry (not a path from the network).
  char proc[64];
  std::snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
  for (int m : kModes) {
    int nfd = ::open(proc, m | kFlags);
    if (nfd >= 0) return nfd;
  }
  return -1;
}

Result<struct flock> ToFlock(const LockRange& r) {
  if (r.type != F_RDLCK && r.type != F_WRLCK && r.type != F_UNLCK) {
    return Err(EINVAL, "lock: bad type");
  }
  if (r.start > static_cast<uint64_t>(INT64_MAX) || r.len > static_cast<uint64_t>(INT64_MAX)) {
    return Err(EINVAL, "lock: range");
  }
  struct flock fl {};
  fl.l_type = r.type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(r.start);
  fl.l_len = static_cast<off_t>(r.len);
  fl.l_pid = 0;  // required 0 for OFD locks
  return fl;
}

}  // namespace

Result<std::shared_ptr<LocalNodeFs::LockDesc>> LocalNodeFs::LockFd(const OpenFile& f,
                                                                  uint64_t owner, bool create) {
  const InodeKey key{f.dev, f.ino};
  {
    std::lock_guard lock(mu_);
    auto in = inodes_.find(key);
    if (in == inodes_.end()) return Err(EBADF, "lock: file released");
    auto it = in->second.owners.find(owner);
    if (it != in->second.owners.end()) return it->second;
    if (!create) return std::shared_ptr<LockDesc>();
  }
  int fd = Reopen(f.fd);
  if (fd < 0) return Err(errno, "lock: reopen for owner");
  auto d = std::make_shared<LockDesc>(fd);
  std::lock_guard lock(mu_);
  auto in = inodes_.find(key);
  if (in == inodes_.end()) return Err(EBADF, "lock: file released");
  auto [it, inserted] = in->second.owners.emplace(owner, d);
  return it->second;  // a concurrent creator's description wins; ours closes
}

Result<LockRange> LocalNodeFs::GetLk(Handle h, uint64_t owner, const LockRange& want) {
  auto f = Lookup(h);
  if (!f) return Err(f.error());
  auto fl = ToFlock(want);
  if (!fl) return Err(fl.error());
  if (fl->l_type == F_UNLCK) return Err(EINVAL, "getlk: F_UNLCK");
  auto d = LockFd(**f, owner, true);
  if (!d) return Err(d.error());
  if (fcntl((*d)->fd, F_OFD_GETLK, &*fl) != 0) return Err(errno, "getlk");
  LockRange out;
  out.type = static_cast<int16_t>(fl->l_type);
  out.start = static_cast<uint64_t>(fl->l_start);
  out.len = static_cast<uint64_t>(fl->l_len);
  out.pid = fl->l_pid;
  return out;
}

Status LocalNodeFs::SetLk(Handle h, uint64_t owner, const LockRange& want) {
  auto f = Lookup(h);
  if (!f) return Err(f.error());
  auto pass = PassFor([&] { return MoveGate::Key{(*f)->dev, (*f)->ino}; });
  if (!pass) return Err(pass.error());
  auto fl = ToFlock(want);
  if (!fl) return Err(fl.error());
  const int acc = (*f)->flags & O_ACCMODE;
  if ((fl->l_type == F_WRLCK && acc == O_RDONLY) || (fl->l_type == F_RDLCK && acc == O_WRONLY)) {
    return Err(EBADF, "setlk: handle not open for that lock type");
  }
  auto d = LockFd(**f, owner, fl->l_type != F_UNLCK);
  if (!d) return Err(d.error());
  if (!*d) return Ok();  // unlocking with no locks held
  if (fcntl((*d)->fd, F_OFD_SETLK, &*fl) != 0) return Err(errno, "setlk");
  return Ok();
}

Status LocalNodeFs::Flock(Handle h, uint64_t owner, int op) {
  auto f = Lookup(h);
  if (!f) return Err(f.error());
  auto pass = PassFor([&] { return MoveGate::Key{(*f)->dev, (*f)->ino}; });
  if (!pass) return Err(pass.error());
  const int base = op & ~LOCK_NB;
  if (base != LOCK_SH && base != LOCK_EX && base != LOCK_UN) return Err(EINVAL, "flock: op");
  auto d = LockFd(**f, owner, base != LOCK_UN);
  if (!d) return Err(d.error());
  if (!*d) return Ok();
  if (flock((*d)->fd, base | LOCK_NB) != 0) return Err(errno, "flock");
  return Ok();
}


}  // namespace fedfs::ns
