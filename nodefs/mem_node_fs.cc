// MemNodeFs: construction, resolution, names, attributes, xattrs
// (nodefs/mem_node_fs.h, nodefs/mem_util.h).
#include "nodefs/mem_util.h"

#include "nodefs/dir_id.h"

namespace fedfs::ns {

using namespace mem_detail;


MemNodeFs::MemNodeFs(std::string node_id) : node_id_(std::move(node_id)) {
  root_ = std::make_shared<Inode>();
  root_->ino = 1;
  root_->mode = S_IFDIR | 0755;
  root_->nlink = 2;
  root_->atime = root_->mtime = root_->ctime = Now();
}

MemNodeFs::~MemNodeFs() = default;

Result<MemNodeFs::Walk> MemNodeFs::Resolve(const Cred& c, const std::string& path,
                                           bool follow_final, const char* op) const {
  if (auto st = ValidateGlobalPath(path); !st) {
    return Err(st.error().code, std::string(op) + " " + path + ": " + st.error().context);
  }
  Walk w;
  if (path == "/") {
    w.node = root_;
    return w;
  }
  std::deque<std::string> comps;
  for (size_t pos = 1; pos <= path.size();) {
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    comps.emplace_back(path.substr(pos, end - pos));
    pos = end + 1;
  }
  std::vector<std::shared_ptr<Inode>> stack{root_};
  int links = 0;
  while (!comps.empty()) {
    std::string name = std::move(comps.front());
    comps.pop_front();
    const bool last = comps.empty();
    const std::shared_ptr<Inode>& cur = stack.back();
    if (!cur->dir()) return Fail(ENOTDIR, op, path);
    if (!Permits(c, *cur, kX)) return Fail(EACCES, op, path);
    if (name == "." || name == "..") {  // only from symlink targets
      if (name == "..") {
        if (stack.size() == 1) return Fail(EXDEV, op, path);  // above the root
        stack.pop_back();
      }
      if (last) {
        w.node = stack.back();
        return w;
      }
      continue;
    }
    auto it = cur->children.find(name);
    if (it == cur->children.end()) {
      if (!last) return Fail(ENOENT, op, path);
      w.parent = cur;
      w.name = std::move(name);
      for (const auto& d : stack) w.chain.push_back(d.get());
      return w;
    }
    const std::shared_ptr<Inode>& child = it->second;
    if (S_ISLNK(child->mode) && (!last || follow_final)) {
      if (++links > kMaxSymlinks) return Fail(ELOOP, op, path);
      const std::string& target = child->data;
      if (target.empty()) return Fail(ENOENT, op, path);
      if (target[0] == '/') return Fail(EXDEV, op, path);  // absolute: leaves the root
      std::vector<std::string> parts;
      for (size_t pos = 0; pos <= target.size();) {
        size_t end = target.find('/', pos);
        if (end == std::string::npos) end = target.size();
        if (end > pos) parts.emplace_back(target.substr(pos, end - pos));
        pos = end + 1;
      }
      for (auto p = parts.rbegin(); p != parts.rend(); ++p) comps.push_front(std::move(*p));
      if (comps.empty()) {  // a target of only slashes cannot happen (not absolute)
        w.node = stack.back();
        return w;
      }
      continue;
    }
    if (last) {
      w.parent = cur;
      w.name = std::move(name);
      w.node = child;
      for (const auto& d : stack) w.chain.push_back(d.get());
      return w;
    }
    stack.push_back(child);
  }
  w.node = stack.back();
  return w;
}

Result<struct stat> MemNodeFs::Stat(const Cred& c, const std::string& path) {
  std::lock_guard lock(mu_);
  auto w = Resolve(c, path, false, "stat");
  if (!w) return Err(w.error());
  if (!w->node) return Fail(ENOENT, "stat", path);
  return StatOf(*w->node);
}

Status MemNodeFs::Access(const Cred& c, const std::string& path, int mode) {
  std::lock_guard lock(mu_);
  auto w = Resolve(c, path, true, "access");
  if (!w) return Err(w.error());
  if (!w->node) return Fail(ENOENT, "access", path);
  const int need = ((mode & R_OK) ? kR : 0) | ((mode & W_OK) ? kW : 0) | ((mode & X_OK) ? kX : 0);
  if (need != 0 && !Permits(c, *w->node, need)) return Fail(EACCES, "access", path);
  return Ok();
}

Result<std::vector<DirEntry>> MemNodeFs::ListDir(const Cred& c, const std::string& path) {
  std::lock_guard lock(mu_);
  // Through no symlink, as LocalNodeFs lists: a symlink on the way is not
  // this node's directory.
  if (ValidateGlobalPath(path)) {
    const Inode* at = root_.get();
    for (size_t pos = 1; pos < path.size() && at != nullptr && at->dir();) {
      size_t end = path.find('/', pos);
      if (end == std::string::npos) end = path.size();
      auto it = at->children.find(path.substr(pos, end - pos));
      at = it == at->children.end() ? nullptr : it->second.get();
      if (at != nullptr && S_ISLNK(at->mode)) return Fail(ENOTDIR, "listdir", path);
      pos = end + 1;
    }
  }
  auto w = Resolve(c, path, true, "listdir");
  if (!w) return Err(w.error());
  if (!w->node) return Fail(ENOENT, "listdir", path);
  if (!w->node->dir()) return Fail(ENOTDIR, "listdir", path);
  if (!Permits(c, *w->node, kR)) return Fail(EACCES, "listdir", path);
  std::vector<DirEntry> out;
  out.reserve(w->node->children.size());
  for (const auto& [name, child] : w->node->children) {
    DirEntry e{name, static_cast<uint8_t>(IFTODT(child->mode)), child->ino};
    if (child->dir() && child->xattrs) {
      if (auto x = child->xattrs->find(kDirIdXattr); x != child->xattrs->end()) {
        e.id = DecodeDirId(x->second, child->ino);
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}


Result<struct stat> MemNodeFs::Mkdir(const Cred& c, const std::string& path, mode_t mode) {
  std::lock_guard lock(mu_);
  auto w = Resolve(c, path, false, "mkdir");
  if (!w) return Err(w.error());
  if (w->node) return Fail(EEXIST, "mkdir", path);
  if (!Permits(c, *w->parent, kW | kX)) return Fail(EACCES, "mkdir", path);
  mode_t m = S_IFDIR | (mode & 01777 & ~c.umask);
  auto n = NewChild(*w->parent, w->name, m, c.uid, c.gid, next_ino_++);
  ++inodes_;
  return StatOf(*n);
}

Status MemNodeFs::MkdirParents(const std::string& path, const std::vector<DirTemplate>& templates) {
  std::lock_guard lock(mu_);
  if (auto st = ValidateGlobalPath(path); !st) return Err(st.error());
  const Cred root{};
  std::vector<std::string> ancestors;  // "/a", "/a/b", ... (not `path`)
  for (std::string p(ParentPath(path)); p != "/"; p = std::string(ParentPath(p))) {
    ancestors.push_back(p);
  }
  std::reverse(ancestors.begin(), ancestors.end());
  for (size_t i = 0; i < ancestors.size(); ++i) {
    // Real directories only, as LocalNodeFs: a symlink is not a copy.
    auto w = Resolve(root, ancestors[i], false, "mkdir-parents");
    if (!w) return Err(w.error());
    if (w->node) {
      if (!w->node->dir()) return Fail(ENOTDIR, "mkdir-parents", ancestors[i]);
      continue;
    }
    DirTemplate t = i < templates.size() ? templates[i] : DirTemplate{};
    auto n = NewChild(*w->parent, w->name, S_IFDIR | (t.mode & 07777), t.uid, t.gid, next_ino_++);
    n->mode = S_IFDIR | (t.mode & 07777);  // exactly the template, no set-gid inheritance
    n->gid = t.gid;
    if (t.id != 0) {
      if (!n->xattrs) n->xattrs = std::make_unique<std::map<std::string, std::string>>();
      (*n->xattrs)[kDirIdXattr] = EncodeDirId(t.id, n->ino);
    }
    ++inodes_;
  }
  return Ok();
}

Status MemNodeFs::Rmdir(const Cred& c, const std::string& path) {
  std::lock_guard lock(mu_);
  auto w = Resolve(c, path, false, "rmdir");
  if (!w) return Err(w.error());
  if (!w->parent) return Fail(w->node ? EBUSY : ENOENT, "rmdir", path);
  if (!w->node) return Fail(ENOENT, "rmdir", path);
  if (auto s = MayDelete(c, *w->parent, *w->node, "rmdir", path); !s) return s;
  if (!w->node->dir()) return Fail(ENOTDIR, "rmdir", path);
  if (!w->node->children.empty()) return Fail(ENOTEMPTY, "rmdir", path);
  w->parent->children.erase(w->name);
  --w->parent->nlink;
  w->parent->Touch();
  w->node->nlink = 0;
  --inodes_;
  return Ok();
}

Result<struct stat> MemNodeFs::Mknod(const Cred& c, const std::string& path, mode_t mode,
                                     dev_t rdev) {
  std::lock_guard lock(mu_);
  mode_t type = mode & S_IFMT;
  if (type == 0) type = S_IFREG;
  if (type == S_IFDIR) return Fail(EPERM, "mknod", path);
  if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK && type != S_IFCHR &&
      type != S_IFBLK) {
    return Fail(EINVAL, "mknod", path);
  }
  auto w = Resolve(c, path, false, "mknod");
  if (!w) return Err(w.error());
  if (w->node) return Fail(EEXIST, "mknod", path);
  if (!Permits(c, *w->parent, kW | kX)) return Fail(EACCES, "mknod", path);
  if ((type == S_IFCHR || type == S_IFBLK) && c.uid != 0) return Fail(EPERM, "mknod", path);
  auto n = NewChild(*w->parent, w->name, type | (mode & 07777 & ~c.umask), c.uid, c.gid,
                    next_ino_++);
  if (type == S_IFCHR || type == S_IFBLK) n->rdev = rdev;
  ++inodes_;
  return StatOf(*n);
}

Result<struct stat> MemNodeFs::Symlink(const Cred& c, const std::string& target,
                                       const std::string& path) {
  std::lock_guard lock(mu_);
  auto w = Resolve(c, path, false, "symlink");
  if (!w) return Err(w.error());
  if (w->node) return Fail(EEXIST, "symlink", path);
  if (target.empty()) return Fail(ENOENT, "symlink", path);
  if (target.size() >= PATH_MAX) return Fail(ENAMETOOLONG, "symlink", path);
  if (!Permits(c, *w->parent, kW | kX)) return Fail(EACCES, "symlink", path);
  auto n = NewChild(*w->parent, w->name, S_IFLNK | 0777, c.uid, c.gid, next_ino_++);
  n->data = target;
  ++inodes_;
  return StatOf(*n);
}

Result<std::string> MemNodeFs::Readlink(const Cred& c, const std::string& path) {
  std::lock_guard lock(mu_);
  auto w = Resolve(c, path, false, "readlink");
  if (!w) return Err(w.error());
  if (!w->node) return Fail(ENOENT, "readlink", path);
  if (!S_ISLNK(w->node->mode)) return Fail(EINVAL, "readlink", path);
  return w->node->data;
}

void MemNodeFs::ReleaseInodeLocked(const std::shared_ptr<Inode>& ino) {
  if (ino->nlink == 0 && ino->handles == 0 && !ino->dir()) --inodes_;
}

Status MemNodeFs::Unlink(const Cred& c, const std::string& path) {
  std::lock_guard lock(mu_);
  auto w = Resolve(c, path, false, "unlink");
  if (!w) return Err(w.error());
  if (!w->parent) return Fail(w->node ? EISDIR : ENOENT, "unlink", path);
  if (!w->node) return Fail(ENOENT, "unlink", path);
  if (auto s = MayDelete(c, *w->parent, *w->node, "unlink", path); !s) return s;
  if (w->node->dir()) return Fail(EISDIR, "unlink", path);
  w->parent->children.erase(w->name);
  w->parent->Touch();
  --w->node->nlink;
  w->node->ctime = Now();
  ReleaseInodeLocked(w->node);
  return Ok();
}

Status MemNodeFs::Rename(const Cred& c, const std::string& from, const std::string& to,
                         unsigned flags) {
  std::lock_guard lock(mu_);
  if ((flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) != 0 ||
      (flags == (RENAME_NOREPLACE | RENAME_EXCHANGE))) {
    return Fail(EINVAL, "rename", from);
  }
  auto a = Resolve(c, from, false, "rename");
  if (!a) return Err(a.error());
  auto b = Resolve(c, to, false, "rename");
  if (!b) return Err(b.error());
  if (!a->parent || !b->parent) return Fail(EBUSY, "rename", from);
  if (!a->node) return Fail(ENOENT, "rename", from);
  if ((flags & RENAME_NOREPLACE) && b->node) return Fail(EEXIST, "rename", to);
  if ((flags & RENAME_EXCHANGE) && !b->node) return Fail(ENOENT, "rename", to);
  if (a->node == b->node) return Ok();  // two names of one file: nothing to do
  if (auto s = MayDelete(c, *a->parent, *a->node, "rename", from); !s) return s;
  if (b->node) {
    if (auto s = MayDelete(c, *b->parent, *b->node, "rename", to); !s) return s;
  } else if (!Permits(c, *b->parent, kW | kX)) {
    return Fail(EACCES, "rename", to);
  }
  // Neither may move into its own subtree.
  auto within = [](const Walk& w, const Inode* n) {
    return std::find(w.chain.begin(), w.chain.end(), n) != w.chain.end();
  };
  if (within(*b, a->node.get())) return Fail(EINVAL, "rename", to);
  if ((flags & RENAME_EXCHANGE) && within(*a, b->node.get())) return Fail(EINVAL, "rename", from);

  const bool cross = a->parent != b->parent;
  if (flags & RENAME_EXCHANGE) {
    std::swap(a->parent->children[a->name], b->parent->children[b->name]);
    if (cross && a->node->dir() != b->node->dir()) {
      if (a->node->dir()) { --a->parent->nlink; ++b->parent->nlink; }
      else { ++a->parent->nlink; --b->parent->nlink; }
    }
    a->parent->Touch();
    b->parent->Touch();
    a->node->ctime = b->node->ctime = Now();
    return Ok();
  }
  if (b->node) {
    if (a->node->dir() && !b->node->dir()) return Fail(ENOTDIR, "rename", to);
    if (!a->node->dir() && b->node->dir()) return Fail(EISDIR, "rename", to);
    if (b->node->dir() && !b->node->children.empty()) return Fail(ENOTEMPTY, "rename", to);
    if (b->node->dir()) {
      --b->parent->nlink;
      b->node->nlink = 0;
      --inodes_;
    } else {
      --b->node->nlink;
      b->node->ctime = Now();
      ReleaseInodeLocked(b->node);
    }
  }
  std::shared_ptr<Inode> moving = a->node;
  a->parent->children.erase(a->name);
  b->parent->children[b->name] = moving;
  if (cross && moving->dir()) {
    --a->parent->nlink;
    ++b->parent->nlink;
  }
  a->parent->Touch();
  b->parent->Touch();
  moving->ctime = Now();
  return Ok();
}

Result<struct stat> MemNodeFs::Link(const Cred& c, const std::string& existing,
                                    const std::string& newpath) {
  std::lock_guard lock(mu_);
  auto a = Resolve(c, existing, false, "link");
  if (!a) return Err(a.error());
  if (!a->node) return Fail(ENOENT, "link", existing);
  auto b = Resolve(c, newpath, false, "link");
  if (!b) return Err(b.error());
  if (b->node || !b->parent) return Fail(EEXIST, "link", newpath);
  if (!Permits(c, *b->parent, kW | kX)) return Fail(EACCES, "link", newpath);
  if (a->node->dir()) return Fail(EPERM, "link", existing);
  b->parent->children.emplace(b->name, a->node);
  b->parent->Touch();
  ++a->node->nlink;
  a->node->ctime = Now();
  return StatOf(*a->node);
}

Result<struct stat> MemNodeFs::SetAttr(const Cred& c, const std::string& path,
                                       std::optional<Handle> handle, const SetAttrRequest& req) {
  std::lock_guard lock(mu_);
  std::shared_ptr<Inode> n;
  int acc = -1;  // the handle's access mode, -1 without a handle
  if (handle) {
    auto f = LookupLocked(*handle);
    if (!f) return Err(f.error());
    n = (*f)->inode;
    acc = (*f)->acc();
  } else {
    auto w = Resolve(c, path, false, "setattr");
    if (!w) return Err(w.error());
    if (!w->node) return Fail(ENOENT, "setattr", path);
    n = w->node;
  }
  const bool owner = c.uid == 0 || c.uid == n->uid;
  const timespec now = Now();
  if (req.mode) {
    if (S_ISLNK(n->mode)) return Fail(EOPNOTSUPP, "chmod", path);
    if (!owner) return Fail(EPERM, "chmod", path);
    mode_t m = *req.mode & 07777;
    if (c.uid != 0 && !InGroup(c, n->gid)) m &= ~S_ISGID;
    n->mode = (n->mode & S_IFMT) | m;
    n->ctime = now;
  }
  if (req.uid || req.gid) {
    const bool uid_change = req.uid && *req.uid != n->uid;
    const bool gid_change = req.gid && *req.gid != n->gid;
    if (c.uid != 0) {
      if (uid_change || c.uid != n->uid) return Fail(EPERM, "chown", path);
      if (gid_change && !InGroup(c, *req.gid)) return Fail(EPERM, "chown", path);
    }
    if (req.uid) n->uid = *req.uid;
    if (req.gid) n->gid = *req.gid;
    if (!n->dir() && !S_ISLNK(n->mode)) {
      n->mode &= ~S_ISUID;
      if (n->mode & S_IXGRP) n->mode &= ~S_ISGID;
    }
    n->ctime = now;
  }
  if (req.size) {
    if (*req.size < 0) return Fail(EINVAL, "truncate", path);
    if (n->dir()) return Fail(EISDIR, "truncate", path);
    if (S_ISLNK(n->mode)) return Fail(ELOOP, "truncate", path);
    if (handle) {
      if (acc == O_RDONLY) return Fail(EINVAL, "ftruncate", path);
    } else if (!Permits(c, *n, kW)) {
      return Fail(EACCES, "truncate", path);
    }
    if (S_ISREG(n->mode)) n->data.resize(static_cast<size_t>(*req.size), '\0');
    n->mtime = n->ctime = now;
  }
  if (req.atime || req.mtime) {
    auto explicit_time = [](const std::optional<timespec>& t) {
      return t && t->tv_nsec != UTIME_NOW && t->tv_nsec != UTIME_OMIT;
    };
    if (explicit_time(req.atime) || explicit_time(req.mtime)) {
      if (!owner) return Fail(EPERM, "utimens", path);
    } else if (!owner && !Permits(c, *n, kW)) {
      return Fail(EACCES, "utimens", path);
    }
    auto apply = [&](const std::optional<timespec>& t, timespec& field) {
      if (!t || t->tv_nsec == UTIME_OMIT) return;
      field = t->tv_nsec == UTIME_NOW ? now : *t;
    };
    apply(req.atime, n->atime);
    apply(req.mtime, n->mtime);
    n->ctime = now;
  }
  return StatOf(*n);
}

Result<struct statvfs> MemNodeFs::StatFs() {
  std::lock_guard lock(mu_);
  struct statvfs sv {};
  sv.f_bsize = 4096;
  sv.f_frsize = 4096;
  sv.f_blocks = (1ull << 40) / 4096;
  sv.f_bfree = sv.f_blocks;
  sv.f_bavail = sv.f_blocks;
  sv.f_files = 1ull << 32;
  sv.f_ffree = sv.f_files - inodes_;
  sv.f_favail = sv.f_ffree;
  sv.f_fsid = kDev;
  sv.f_namemax = NAME_MAX;
  return sv;
}

// ---------------------------------------------------------------------------
// Extended attributes

namespace {

Status CheckXattrName(const std::string& name, const char* op, const std::string& path) {
  if (name.empty() || name.size() > kXattrMaxName) return Fail(ERANGE, op, path);
  if (!UserNs(name) && !Trusted(name) && !Security(name)) return Fail(EOPNOTSUPP, op, path);
  return Ok();
}

}  // namespace

Result<std::string> MemNodeFs::GetXattr(const Cred& c, const std::string& path,
                                        const std::string& name, size_t size, size_t* needed) {
  if (needed) *needed = 0;
  std::lock_guard lock(mu_);
  auto w = Resolve(c, path, false, "getxattr");
  if (!w) return Err(w.error());
  if (!w->node) return Fail(ENOENT, "getxattr", path);
  if (auto s = CheckXattrName(name, "getxattr", path); !s) return Err(s.error());
  const Inode& n = *w->node;
  if (!S_ISREG(n.mode) && !n.dir()) return Fail(ENODATA, "getxattr", path);
  if (c.uid != 0 && Trusted(name)) return Fail(ENODATA, "getxattr", path);
  if (UserNs(name) && !Permits(c, n, kR)) return Fail(EACCES, "getxattr", path);
  if (!n.xattrs) return Fail(ENODATA, "getxattr", path);
  auto it = n.xattrs->find(name);
  if (it == n.xattrs->end()) return Fail(ENODATA, "getxattr", path);
  if (size == 0) {
    if (needed) *needed = it->second.size();
    return std::string();
  }
  if (it->second.size() > size) return Fail(ERANGE, "getxattr", path);
  if (needed) *needed = it->second.size();
  return it->second;
}

Status MemNodeFs::SetXattr(const Cred& c, const std::string& path, const std::string& name,
                           std::span<const std::byte> value, int flags) {
  std::lock_guard lock(mu_);
  auto w = Resolve(c, path, false, "setxattr");
  if (!w) return Err(w.error());
  if (!w->node) return Fail(ENOENT, "setxattr", path);
  if (auto s = CheckXattrName(name, "setxattr", path); !s) return s;
  if ((flags & ~(XATTR_CREATE | XATTR_REPLACE)) != 0) return Fail(EINVAL, "setxattr", path);
  Inode& n = *w->node;
  if (!S_ISREG(n.mode) && !n.dir()) return Fail(EPERM, "setxattr", path);
  if (c.uid != 0 && (Trusted(name) || Security(name))) return Fail(EPERM, "setxattr", path);
  if (UserNs(name) && !Permits(c, n, kW)) return Fail(EACCES, "setxattr", path);
  if (value.size() > kXattrMaxValue) return Fail(E2BIG, "setxattr", path);
  if (!n.xattrs) n.xattrs = std::make_unique<std::map<std::string, std::string>>();
  auto it = n.xattrs->find(name);
  if ((flags & XATTR_CREATE) && it != n.xattrs->end()) return Fail(EEXIST, "setxattr", path);
  if ((flags & XATTR_REPLACE) && it == n.xattrs->end()) return Fail(ENODATA, "setxattr", path);
  (*n.xattrs)[name].assign(reinterpret_cast<const char*>(value.data()), value.size());
  n.ctime = Now();
  return Ok();
}

Result<std::string> MemNodeFs::ListXattr(const Cred& c, const std::string& path, size_t size,
                                         size_t* needed) {
  if (needed) *needed = 0;
  std::lock_guard lock(mu_);
  auto w = Resolve(c, path, false, "listxattr");
  if (!w) return Err(w.error());
  if (!w->node) return Fail(ENOENT, "listxattr", path);
  const Inode& n = *w->node;
  std::string buf;
  if ((S_ISREG(n.mode) || n.dir()) && n.xattrs) {
    for (const auto& [k, v] : *n.xattrs) {
      if (c.uid != 0 && Trusted(k)) continue;
      buf.append(k).push_back('\0');
    }
  }
  if (needed) *needed = buf.size();
  if (size == 0) return std::string();
  if (buf.size() > size) return Fail(ERANGE, "listxattr", path);
  return buf;
}

Status MemNodeFs::RemoveXattr(const Cred& c, const std::string& path, const std::string& name) {
  std::lock_guard lock(mu_);
  auto w = Resolve(c, path, false, "removexattr");
  if (!w) return Err(w.error());
  if (!w->node) return Fail(ENOENT, "removexattr", path);
  if (auto s = CheckXattrName(name, "removexattr", path); !s) return s;
  Inode& n = *w->node;
  if (!S_ISREG(n.mode) && !n.dir()) return Fail(EPERM, "removexattr", path);
  if (c.uid != 0 && (Trusted(name) || Security(name))) return Fail(EPERM, "removexattr", path);
  if (UserNs(name) && !Permits(c, n, kW)) return Fail(EACCES, "removexattr", path);
  if (!n.xattrs || n.xattrs->erase(name) == 0) return Fail(ENODATA, "removexattr", path);
  n.ctime = Now();
  return Ok();
}


}  // namespace fedfs::ns
