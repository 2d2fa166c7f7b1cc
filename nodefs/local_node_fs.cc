// LocalNodeFs: resolution beneath the root, names, attributes, xattrs
// (nodefs/local_node_fs.h).
#include "nodefs/local_util.h"

namespace fedfs::ns {

using namespace local_detail;

LocalNodeFs::LocalNodeFs(std::string node_id, std::string export_root, int root_fd)
    : node_id_(std::move(node_id)), export_root_(std::move(export_root)), root_fd_(root_fd) {}

LocalNodeFs::~LocalNodeFs() {
  handles_.clear();
  inodes_.clear();
  for (const auto& [key, fd] : pinned_) ::close(fd);
  ::close(root_fd_);
}

Result<std::unique_ptr<LocalNodeFs>> LocalNodeFs::Open(std::string node_id,
                                                       std::string export_root) {
  int fd = ::open(export_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return SysErr("open export root", export_root);
  return std::unique_ptr<LocalNodeFs>(
      new LocalNodeFs(std::move(node_id), std::move(export_root), fd));
}

// ---------------------------------------------------------------------------
// Resolution

Result<int> LocalNodeFs::OpenDirBeneath(int dirfd, std::string_view rel, const std::string& path,
                                        const char* op) {
  constexpr uint64_t kDirFlags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  auto fail = [&](int e) -> std::unexpected<Error> {
    if (e == EXDEV || e == ELOOP) {
      Log()->warn("{}: path '{}' escapes the export root or loops: refused ({})", op, Shown(path),
                  std::strerror(e));
    }
    return SysErr(op, path, e);
  };
  if (rel.size() < kChunk) {
    std::string r(rel);
    int fd = OpenAt2(dirfd, r.c_str(), kDirFlags, 0);
    if (fd < 0) return fail(errno);
    return fd;
  }
  // Longer than PATH_MAX allows: whole components, chunk by chunk.
  UniqueFd cur;
  size_t pos = 0;
  while (pos < rel.size()) {
    size_t end = pos;
    while (end < rel.size()) {
      size_t next = rel.find('/', end);
      if (next == std::string_view::npos) next = rel.size();
      if (next - pos >= kChunk && end > pos) break;
      end = next == rel.size() ? next : next + 1;
      if (next == rel.size()) break;
    }
    std::string chunk(rel.substr(pos, end - pos));
    if (!chunk.empty() && chunk.back() == '/') chunk.pop_back();
    int fd = OpenAt2(cur.get() >= 0 ? cur.get() : dirfd, chunk.c_str(), kDirFlags, 0);
    if (fd < 0) return fail(errno);
    cur.reset(fd);
    pos = end;
  }
  return cur.release();
}

Result<LocalNodeFs::Parent> LocalNodeFs::ResolveParent(const std::string& path, const char* op,
                                                       const Parent* sibling,
                                                       const std::string& sibling_path) {
  if (auto st = ValidateGlobalPath(path); !st) {
    if (st.error().code == ENAMETOOLONG) {
      Log()->debug("{}: {}: {}", op, Shown(path), st.error().context);
    } else {
      Log()->warn("{}: refused path '{}': {}", op, Shown(path), st.error().context);
    }
    return Err(st.error().code, std::string(op) + " " + Shown(path) + ": " + st.error().context);
  }
  Parent p;
  if (path == "/") {
    auto fd = OpenDirBeneath(root_fd_, ".", path, op);
    if (!fd) return Err(fd.error());
    p.owned.reset(*fd);
    p.dir = *fd;
    p.name = ".";
    return p;
  }
  p.name = std::string(BaseName(path));
  const std::string_view parent = ParentPath(path);
  if (parent == "/") {
    p.dir = root_fd_;
    return p;
  }
  if (sibling != nullptr && parent == ParentPath(sibling_path)) {
    p.dir = sibling->dir;  // one directory: its descriptor serves both names
    return p;
  }
  auto fd = OpenDirBeneath(root_fd_, RelativePath(parent), path, op);
  if (!fd) return Err(fd.error());
  p.owned.reset(*fd);
  p.dir = *fd;
  return p;
}

Result<LocalNodeFs::Parent> LocalNodeFs::ResolveWhole(const std::string& path, const char* op) {
  const std::string_view rel = RelativePath(path);
  if (path == "/" || rel.size() >= kChunk || ParentPath(path) == "/") {
    return ResolveParent(path, op);
  }
  if (auto st = ValidateGlobalPath(path); !st) return ResolveParent(path, op);  // logs, refuses
  Parent p;
  p.dir = root_fd_;
  p.name = std::string(rel);
  return p;
}

// ---------------------------------------------------------------------------
// Names

#define FEDFS_PARENT(var, path, op)            \
  auto var##_r = ResolveParent(path, op);      \
  if (!var##_r) return Err(var##_r.error());   \
  Parent& var = *var##_r;

Result<struct stat> LocalNodeFs::Stat(const Cred& c, const std::string& path) {
  FEDFS_AS(c);
  FEDFS_PARENT(p, path, "stat");
  struct stat st {};
  if (fstatat(p.dir, p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return SysErr("stat", path);
  }
  return st;
}

Status LocalNodeFs::Access(const Cred& c, const std::string& path, int mode) {
  FEDFS_AS(c);
  auto p = ResolveWhole(path, "access");
  if (!p) return Err(p.error());
  const int fd = OpenAt2(p->dir, p->name.c_str(), O_PATH | O_CLOEXEC, 0);
  if (fd < 0) return SysErr("access", path);
  UniqueFd guard(fd);
  if (faccessat(fd, "", mode, AT_EACCESS | AT_EMPTY_PATH) != 0) return SysErr("access", path);
  return Ok();
}

Result<std::vector<DirEntry>> LocalNodeFs::ListDir(const Cred& c, const std::string& path) {
  FEDFS_AS(c);
  auto p = ResolveWhole(path, "listdir");
  if (!p) return Err(p.error());
  // Through no symlink: a symlink where other nodes have a directory makes
  // this node no holder of it (a name conflict, docs/namespace.md), never a
  // second way into another directory.
  int fd = OpenAt2(p->dir, p->name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0,
                   kResolve | RESOLVE_NO_SYMLINKS);
  if (fd < 0 && errno == ELOOP) return SysErr("listdir (a symlink on the way)", path, ENOTDIR);
  if (fd < 0) return SysErr("listdir", path);
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    int e = errno;
    ::close(fd);
    return SysErr("listdir", path, e);
  }
  std::vector<DirEntry> out;
  for (;;) {
    errno = 0;
    struct dirent* de = readdir(d);
    if (de == nullptr) {
      if (errno != 0) {
        int e = errno;
        closedir(d);
        return SysErr("readdir", path, e);
      }
      break;
    }
    std::string_view name(de->d_name);
    if (name == "." || name == "..") continue;
    DirEntry e;
    e.name = std::string(name);
    e.type = de->d_type;
    e.ino = de->d_ino;
    if (e.type == DT_UNKNOWN) {
      struct stat st {};
      if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // raced
      e.type = static_cast<uint8_t>(IFTODT(st.st_mode));
    }
    if (e.type == DT_DIR) e.id = StoredDirId(dirfd(d), de->d_name, e.ino);
    out.push_back(std::move(e));
  }
  closedir(d);
  return out;
}

uint64_t LocalNodeFs::StoredDirId(int dirfd, const char* name, uint64_t ino) {
  // By the descriptor's /proc name: no descriptor of the subdirectory itself
  // (f*xattr would need one opened for reading), and lgetxattr never follows
  // a final symlink.
  const std::string at = "/proc/self/fd/" + std::to_string(dirfd) + "/" + name;
  char buf[kDirIdXattrSize + 1];
  const ssize_t n = lgetxattr(at.c_str(), kDirIdXattr, buf, sizeof buf);
  if (n < 0) return 0;  // none (ENODATA), or not supported here: DirIdOf
  return DecodeDirId(std::string_view(buf, static_cast<size_t>(n)), ino);
}

void LocalNodeFs::StoreDirId(int fd, uint64_t id, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return;
  const std::string v = EncodeDirId(id, st.st_ino);
  if (fsetxattr(fd, kDirIdXattr, v.data(), v.size(), 0) == 0) return;
  // The copy then has an id of its own, and the directory's st_ino may
  // change when it is listed with this copy (docs/namespace.md).
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    Log()->warn("cannot store a directory id on '{}': {} (directories copied here may change "
                "their inode number)",
                Shown(path), std::strerror(errno));
  }
}

Result<struct stat> LocalNodeFs::Mkdir(const Cred& c, const std::string& path, mode_t mode) {
  FEDFS_AS(c);
  FEDFS_PARENT(p, path, "mkdir");
  Changing(path);
  if (mkdirat(p.dir, p.name.c_str(), scoped_cred.NewMode(mode & 07777)) != 0) {
    return SysErr("mkdir", path);
  }
  struct stat st {};
  if (fstatat(p.dir, p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return SysErr("mkdir: stat", path);
  }
  return st;
}

Status LocalNodeFs::MkdirParents(const std::string& path,
                                 const std::vector<DirTemplate>& templates) {
  const char* op = "mkdir-parents";
  if (auto st = ValidateGlobalPath(path); !st) {
    Log()->warn("{}: refused path '{}': {}", op, Shown(path), st.error().context);
    return Err(st.error());
  }
  std::string_view parent = ParentPath(path);
  if (parent == "/") return Ok();
  for (std::string_view a = parent; a != "/"; a = ParentPath(a)) Changing(std::string(a));
  auto rootfd = OpenDirBeneath(root_fd_, ".", path, op);
  if (!rootfd) return Err(rootfd.error());
  UniqueFd cur(*rootfd);
  std::string_view rel = RelativePath(parent);
  size_t depth = 0;
  size_t pos = 0;
  while (pos <= rel.size()) {
    size_t end = rel.find('/', pos);
    if (end == std::string_view::npos) end = rel.size();
    std::string comp(rel.substr(pos, end - pos));
    // Real directories only: a symlink there is not this node's copy of the
    // directory (docs/namespace.md, "Name conflicts").
    int fd = OpenAt2(cur.get(), comp.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0,
                     kResolve | RESOLVE_NO_SYMLINKS);
    if (fd < 0 && errno == ELOOP) return SysErr(op, path + " (a symlink on the way)", ENOTDIR);
    if (fd < 0 && errno == ENOENT) {
      DirTemplate t = depth < templates.size() ? templates[depth] : DirTemplate{};
      if (mkdirat(cur.get(), comp.c_str(), 0700) != 0 && errno != EEXIST) {
        return SysErr(op, path);
      }
      // Set owner and mode on the directory itself (never through a name
      // that could meanwhile have become a symlink): open it, then f*().
      fd = OpenAt2(cur.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
      if (fd >= 0) {
        if (fchown(fd, t.uid, t.gid) != 0 || fchmod(fd, t.mode & 07777) != 0) {
          int e = errno;
          ::close(fd);
          return SysErr(op, path, e);
        }
        if (t.id != 0) StoreDirId(fd, t.id, path);
      }
    }
    if (fd < 0) {
      if (errno == EXDEV || errno == ELOOP) {
        Log()->warn("{}: path '{}' escapes the export root: refused", op, Shown(path));
      }
      return SysErr(op, path);
    }
    cur.reset(fd);
    ++depth;
    pos = end + 1;
  }
  return Ok();
}

Status LocalNodeFs::Rmdir(const Cred& c, const std::string& path) {
  FEDFS_AS(c);
  FEDFS_PARENT(p, path, "rmdir");
  Changing(path);
  if (unlinkat(p.dir, p.name.c_str(), AT_REMOVEDIR) != 0) return SysErr("rmdir", path);
  return Ok();
}

Result<struct stat> LocalNodeFs::Mknod(const Cred& c, const std::string& path, mode_t mode,
                                       dev_t rdev) {
  FEDFS_AS(c);
  FEDFS_PARENT(p, path, "mknod");
  if ((mode & S_IFMT) == 0) mode |= S_IFREG;
  mode_t m = (mode & S_IFMT) | scoped_cred.NewMode(mode & 07777);
  Changing(path);
  if (mknodat(p.dir, p.name.c_str(), m, rdev) != 0) return SysErr("mknod", path);
  struct stat st {};
  if (fstatat(p.dir, p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return SysErr("mknod: stat", path);
  }
  return st;
}

Result<struct stat> LocalNodeFs::Symlink(const Cred& c, const std::string& target,
                                         const std::string& path) {
  if (target.find('\0') != std::string::npos) return Err(EINVAL, "symlink target contains NUL");
  FEDFS_AS(c);
  FEDFS_PARENT(p, path, "symlink");
  Changing(path);
  if (symlinkat(target.c_str(), p.dir, p.name.c_str()) != 0) return SysErr("symlink", path);
  struct stat st {};
  if (fstatat(p.dir, p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return SysErr("symlink: stat", path);
  }
  return st;
}

Result<std::string> LocalNodeFs::Readlink(const Cred& c, const std::string& path) {
  FEDFS_AS(c);
  FEDFS_PARENT(p, path, "readlink");
  std::string buf(PATH_MAX, '\0');
  ssize_t n = readlinkat(p.dir, p.name.c_str(), buf.data(), buf.size());
  if (n < 0) return SysErr("readlink", path);
  buf.resize(static_cast<size_t>(n));
  return buf;
}

Result<std::string> LocalNodeFs::FileHandleOf(const std::string& path) {
  FEDFS_PARENT(p, path, "name_to_handle_at");
  std::vector<uint64_t> buf((sizeof(struct file_handle) + MAX_HANDLE_SZ) / 8 + 1);
  auto* fh = reinterpret_cast<struct file_handle*>(buf.data());
  fh->handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  if (name_to_handle_at(p.dir, p.name.c_str(), fh, &mount_id, 0) != 0) {
    return SysErr("name_to_handle_at", path);
  }
  return std::string(reinterpret_cast<const char*>(buf.data()),
                     sizeof(struct file_handle) + fh->handle_bytes);
}

Status LocalNodeFs::Unlink(const Cred& c, const std::string& path) {
  FEDFS_AS(c);
  FEDFS_PARENT(p, path, "unlink");
  Changing(path);
  // The file's link count drops: located first, for the observer.
  AttrObserver* o = Observer();
  struct stat was {};
  if (o != nullptr && fstatat(p.dir, p.name.c_str(), &was, AT_SYMLINK_NOFOLLOW) != 0) o = nullptr;
  const bool going = o != nullptr && S_ISREG(was.st_mode) && o->NameGoing(was.st_dev, was.st_ino, path);
  // A gated file's name going: its inode is pinned until its gate goes.
  int pin = -1;
  MoveGate::Key key;
  if (gate_.Any()) {
    struct stat st {};
    if (fstatat(p.dir, p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        gate_.StateOf({st.st_dev, st.st_ino}) != MoveGate::State::kNone) {
      key = {st.st_dev, st.st_ino};
      pin = openat(p.dir, p.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    }
  }
  if (unlinkat(p.dir, p.name.c_str(), 0) != 0) {
    const int e = errno;
    if (pin >= 0) ::close(pin);
    if (going) Tell(o, was, DataRange::None());
    return SysErr("unlink", path, e);
  }
  if (pin >= 0) {
    {
      std::lock_guard lock(mu_);
      if (pinned_.try_emplace(key, pin).second) pin = -1;  // else pinned already
    }
    if (pin >= 0) ::close(pin);
    // The gate went meanwhile (its DropGate found no pin yet): so does the pin.
    if (gate_.StateOf(key) == MoveGate::State::kNone) DropGate(key);
  }
  Tell(o, was, DataRange::None());
  return Ok();
}

Status LocalNodeFs::Rename(const Cred& c, const std::string& from, const std::string& to,
                           unsigned flags) {
  FEDFS_AS(c);
  FEDFS_PARENT(a, from, "rename");
  auto b = ResolveParent(to, "rename", &a, from);
  if (!b) return Err(b.error());
  Changing(from);
  Changing(to);
  // The source's ctime changes, a replaced destination's link count drops.
  AttrObserver* o = Observer();
  struct stat src {}, dst {};
  if (o != nullptr) {
    if (fstatat(a.dir, a.name.c_str(), &src, AT_SYMLINK_NOFOLLOW) != 0) src.st_mode = 0;
    if (fstatat(b->dir, b->name.c_str(), &dst, AT_SYMLINK_NOFOLLOW) != 0) dst.st_mode = 0;
  }
  bool going = false;
  if (o != nullptr && S_ISREG(src.st_mode)) going |= o->NameGoing(src.st_dev, src.st_ino, from);
  if (o != nullptr && S_ISREG(dst.st_mode) && !(src.st_dev == dst.st_dev && src.st_ino == dst.st_ino)) {
    going |= o->NameGoing(dst.st_dev, dst.st_ino, to);
  }
  const bool failed = renameat2(a.dir, a.name.c_str(), b->dir, b->name.c_str(), flags) != 0;
  const int e = errno;
  if (!failed || going) {  // NameGoing's work is told of either way
    Tell(o, src, DataRange::None());
    Tell(o, dst, DataRange::None());
  }
  if (failed) return SysErr("rename", from + " -> " + to, e);
  return Ok();
}

Result<struct stat> LocalNodeFs::Link(const Cred& c, const std::string& existing,
                                      const std::string& newpath) {
  FEDFS_AS(c);
  FEDFS_PARENT(a, existing, "link");
  auto b_r = ResolveParent(newpath, "link", &a, existing);
  if (!b_r) return Err(b_r.error());
  const Parent& b = *b_r;
  Changing(newpath);
  if (linkat(a.dir, a.name.c_str(), b.dir, b.name.c_str(), 0) != 0) {
    return SysErr("link", existing + " -> " + newpath);
  }
  struct stat st {};
  if (fstatat(b.dir, b.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return SysErr("link: stat", newpath);
  }
  Tell(Observer(), st, DataRange::None());
  return st;
}

// The bytes a setattr may alter: from the new size on (a truncate), else none.
static DataRange SizeChange(const SetAttrRequest& r) {
  return r.size ? DataRange::From(static_cast<uint64_t>(*r.size)) : DataRange::None();
}

Result<struct stat> LocalNodeFs::SetAttr(const Cred& c, const std::string& path,
                                         std::optional<Handle> handle,
                                         const SetAttrRequest& req) {
  struct timespec ts[2];
  ts[0] = req.atime.value_or(timespec{0, UTIME_OMIT});
  ts[1] = req.mtime.value_or(timespec{0, UTIME_OMIT});
  const bool times = req.atime.has_value() || req.mtime.has_value();
  const uid_t uid = req.uid.value_or(static_cast<uid_t>(-1));
  const gid_t gid = req.gid.value_or(static_cast<gid_t>(-1));
  const bool chown = req.uid.has_value() || req.gid.has_value();

  if (handle) {
    auto f = Lookup(*handle);
    if (!f) return Err(f.error());
    auto pass = PassFor([&] { return MoveGate::Key{(*f)->dev, (*f)->ino}; });
    if (!pass) return Err(pass.error());
    FEDFS_AS(c);  // fchmod/fchown/futimens check ownership against the caller
    int fd = (*f)->fd;
    if (req.mode && fchmod(fd, *req.mode & 07777) != 0) return SysErr("fchmod", path);
    if (chown && fchown(fd, uid, gid) != 0) return SysErr("fchown", path);
    if (req.size) {
      if (*req.size < 0) return Err(EINVAL, "ftruncate: negative size");
      if (ftruncate(fd, *req.size) != 0) return SysErr("ftruncate", path);
    }
    if (times && futimens(fd, ts) != 0) return SysErr("futimens", path);
    struct stat st {};
    if (fstat(fd, &st) != 0) return SysErr("fstat", path);
    if (req.mode || chown || req.size || times) {
      Tell(Observer(), st, SizeChange(req));
    }
    return st;
  }

  auto pass = PassFor([&] { return KeyOfPath(path); });
  if (!pass) return Err(pass.error());
  FEDFS_AS(c);
  FEDFS_PARENT(p, path, "setattr");
  const int pfd = p.dir;
  const char* name = p.name.c_str();
  if (req.mode) {
    mode_t m = *req.mode & 07777;
    if (syscall(SYS_fchmodat2, pfd, name, m, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOSYS) return SysErr("chmod", path);
      // Kernels before 6.6: refuse symlinks as fchmodat2 would, else chmod.
      struct stat st {};
      if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return SysErr("chmod", path);
      if (S_ISLNK(st.st_mode)) return SysErr("chmod", path, EOPNOTSUPP);
      if (fchmodat(pfd, name, m, 0) != 0) return SysErr("chmod", path);
    }
  }
  if (chown && fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
    return SysErr("chown", path);
  }
  if (req.size) {
    if (*req.size < 0) return Err(EINVAL, "truncate: negative size");
    int fd = OpenAt2(pfd, name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0);
    if (fd < 0) return SysErr("truncate", path);
    UniqueFd guard(fd);
    if (ftruncate(fd, *req.size) != 0) return SysErr("truncate", path);
  }
  if (times && utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW) != 0) return SysErr("utimens", path);
  struct stat st {};
  if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return SysErr("setattr: stat", path);
  if (req.mode || chown || req.size || times) {
      Tell(Observer(), st, SizeChange(req));
    }
  return st;
}

Result<struct statvfs> LocalNodeFs::StatFs() {
  struct statvfs sv {};
  if (fstatvfs(root_fd_, &sv) != 0) return SysErr("statfs", export_root_);
  return sv;
}

// ---------------------------------------------------------------------------
// Extended attributes

Status LocalNodeFs::XattrTarget(const Cred& c, const std::string& path, const char* op,
                                int* out) {
  *out = -1;
  Parent parent;
  struct stat st {};
  {
    FEDFS_AS(c);
    FEDFS_PARENT(p, path, op);
    int fd = OpenAt2(p.dir, p.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0) return SysErr(op, path);
    UniqueFd guard(fd);
    if (fstat(fd, &st) != 0) return SysErr(op, path);
    parent = std::move(p);
  }
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return Ok();
  // As the daemon: f*xattr need a real descriptor, and reading the xattrs of
  // a file needs no read permission on its data. The xattr calls themselves
  // run as the caller.
  int flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  if (S_ISDIR(st.st_mode)) flags |= O_DIRECTORY;
  int fd = OpenAt2(parent.dir, parent.name.c_str(), static_cast<uint64_t>(flags), 0);
  if (fd < 0) return SysErr(op, path);
  struct stat st2 {};
  if (fstat(fd, &st2) != 0 || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino) {
    ::close(fd);
    return SysErr(op, path, ENOENT);  // replaced while we looked: as if gone
  }
  *out = fd;
  return Ok();
}

// fgetxattr of `fd` as the caller. The daemon keeps CAP_SYS_ADMIN under a
// non-root fsuid: trusted.* is hidden as the kernel hides it from
// unprivileged callers.
Result<std::string> LocalNodeFs::FGetXattr(const Cred& c, int fd, const std::string& what,
                                           const std::string& name, size_t size,
                                           size_t* needed) {
  if (c.uid != 0 && Trusted(name)) return SysErr("getxattr", what, ENODATA);
  FEDFS_AS(c);
  if (size == 0) {
    ssize_t n = fgetxattr(fd, name.c_str(), nullptr, 0);
    if (n < 0) return SysErr("getxattr", what);
    if (needed) *needed = static_cast<size_t>(n);
    return std::string();
  }
  std::string buf(std::min<size_t>(size, 65536), '\0');
  ssize_t n = fgetxattr(fd, name.c_str(), buf.data(), buf.size());
  if (n < 0) return SysErr("getxattr", what);
  buf.resize(static_cast<size_t>(n));
  if (needed) *needed = static_cast<size_t>(n);
  return buf;
}

Result<std::string> LocalNodeFs::GetXattr(const Cred& c, const std::string& path,
                                          const std::string& name, size_t size, size_t* needed) {
  if (needed) *needed = 0;
  int raw = -1;
  if (auto st = XattrTarget(c, path, "getxattr", &raw); !st) return Err(st.error());
  UniqueFd fd(raw);
  if (fd.get() < 0) return SysErr("getxattr", path, ENODATA);
  return FGetXattr(c, fd.get(), path, name, size, needed);
}

Result<std::string> LocalNodeFs::GetXattrOf(const Cred& c, Handle h, const std::string& name,
                                            size_t size, size_t* needed) {
  if (needed) *needed = 0;
  auto f = Lookup(h);
  if (!f) return Err(f.error());
  return FGetXattr(c, (*f)->fd, "handle " + std::to_string(h), name, size, needed);
}

Status LocalNodeFs::SetXattr(const Cred& c, const std::string& path, const std::string& name,
                             std::span<const std::byte> value, int flags) {
  auto pass = PassFor([&] { return KeyOfPath(path); });
  if (!pass) return Err(pass.error());
  int raw = -1;
  if (auto st = XattrTarget(c, path, "setxattr", &raw); !st) return Err(st.error());
  UniqueFd fd(raw);
  if (fd.get() < 0) return SysErr("setxattr", path, EPERM);
  // The daemon keeps CAP_SYS_ADMIN and CAP_SETFCAP under a non-root fsuid:
  // a non-root caller may not set trusted.* or security.* (file capabilities).
  if (c.uid != 0 && (Trusted(name) || Security(name))) return SysErr("setxattr", path, EPERM);
  FEDFS_AS(c);
  if (fsetxattr(fd.get(), name.c_str(), value.data(), value.size(), flags) != 0) {
    return SysErr("setxattr", path);
  }
  TellFd(fd.get());
  return Ok();
}

Result<std::string> LocalNodeFs::ListXattr(const Cred& c, const std::string& path, size_t size,
                                           size_t* needed) {
  if (needed) *needed = 0;
  int raw = -1;
  if (auto st = XattrTarget(c, path, "listxattr", &raw); !st) return Err(st.error());
  UniqueFd fd(raw);
  if (fd.get() < 0) return std::string();
  FEDFS_AS(c);
  // Read the whole list (filtering may shrink it), then answer size/ERANGE.
  std::string buf;
  for (;;) {
    ssize_t n = flistxattr(fd.get(), nullptr, 0);
    if (n < 0) return SysErr("listxattr", path);
    buf.assign(static_cast<size_t>(n), '\0');
    if (n == 0) break;
    ssize_t m = flistxattr(fd.get(), buf.data(), buf.size());
    if (m >= 0) {
      buf.resize(static_cast<size_t>(m));
      break;
    }
    if (errno != ERANGE) return SysErr("listxattr", path);  // ERANGE: grew, retry
  }
  if (c.uid != 0) {
    std::string filtered;
    for (size_t pos = 0; pos < buf.size();) {
      size_t end = buf.find('\0', pos);
      if (end == std::string::npos) end = buf.size();
      std::string one = buf.substr(pos, end - pos);
      if (!Trusted(one)) filtered.append(one).push_back('\0');
      pos = end + 1;
    }
    buf.swap(filtered);
  }
  if (needed) *needed = buf.size();
  if (size == 0) return std::string();
  if (buf.size() > size) return SysErr("listxattr", path, ERANGE);
  return buf;
}

Status LocalNodeFs::RemoveXattr(const Cred& c, const std::string& path, const std::string& name) {
  auto pass = PassFor([&] { return KeyOfPath(path); });
  if (!pass) return Err(pass.error());
  int raw = -1;
  if (auto st = XattrTarget(c, path, "removexattr", &raw); !st) return Err(st.error());
  UniqueFd fd(raw);
  if (fd.get() < 0) return SysErr("removexattr", path, EPERM);
  // Except file capabilities, for a caller who may write the file: the
  // caller's kernel removes them before the first write to a file that has
  // them, whoever writes (a removexattr(2) of them it refuses itself without
  // CAP_SETFCAP).
  const bool caps = name == "security.capability";
  if (c.uid != 0 && (Trusted(name) || (Security(name) && !caps))) {
    return SysErr("removexattr", path, EPERM);
  }
  FEDFS_AS(c);
  if (caps && c.uid != 0 && faccessat(fd.get(), "", W_OK, AT_EACCESS | AT_EMPTY_PATH) != 0) {
    return SysErr("removexattr", path, EPERM);
  }
  if (fremovexattr(fd.get(), name.c_str()) != 0) return SysErr("removexattr", path);
  TellFd(fd.get());
  return Ok();
}


}  // namespace fedfs::ns
