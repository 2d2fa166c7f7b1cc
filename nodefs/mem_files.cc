// MemNodeFs: open files, I/O and locks (nodefs/mem_node_fs.h).
#include "nodefs/mem_util.h"

namespace fedfs::ns {

using namespace mem_detail;

// ---------------------------------------------------------------------------
// Files

Result<Opened> MemNodeFs::OpenLocked(const Cred& c, const std::string& path, int flags,
                                     mode_t mode, bool create) {
  const char* op = create ? "create" : "open";
  const bool excl = create && (flags & O_EXCL);
  auto w = Resolve(c, path, !(flags & O_NOFOLLOW) && !excl, op);
  if (!w) return Err(w.error());
  const int acc = flags & O_ACCMODE;
  std::shared_ptr<Inode> n = w->node;
  if (!n) {
    if (!create || !w->parent) return Fail(ENOENT, op, path);
    if (!Permits(c, *w->parent, kW | kX)) return Fail(EACCES, op, path);
    n = NewChild(*w->parent, w->name, S_IFREG | (mode & 07777 & ~c.umask), c.uid, c.gid,
                 next_ino_++);
    ++inodes_;
  } else {
    if (excl) return Fail(EEXIST, op, path);
    if (S_ISLNK(n->mode)) return Fail(ELOOP, op, path);  // O_NOFOLLOW
    if (n->dir() && (acc != O_RDONLY || create)) return Fail(EISDIR, op, path);
    if ((flags & O_DIRECTORY) && !n->dir()) return Fail(ENOTDIR, op, path);
    int need = acc == O_RDONLY ? kR : acc == O_WRONLY ? kW : kR | kW;
    if (flags & O_TRUNC) need |= kW;
    if (!Permits(c, *n, need)) return Fail(EACCES, op, path);
    if ((flags & O_TRUNC) && S_ISREG(n->mode) && !n->data.empty()) {
      n->data.clear();
      n->Touch();
    }
  }
  auto f = std::make_shared<OpenFile>();
  f->inode = n;
  f->flags = flags;
  ++n->handles;
  Opened out;
  out.handle = next_handle_++;
  out.st = StatOf(*n);
  handles_.emplace(out.handle, std::move(f));
  return out;
}

Result<Opened> MemNodeFs::Open(const Cred& c, const std::string& path, int flags) {
  if (flags & O_CREAT) return Err(EINVAL, "open with O_CREAT: use Create");
  std::lock_guard lock(mu_);
  return OpenLocked(c, path, flags, 0, false);
}

Result<Opened> MemNodeFs::Create(const Cred& c, const std::string& path, int flags, mode_t mode) {
  std::lock_guard lock(mu_);
  return OpenLocked(c, path, flags | O_CREAT, mode, true);
}

Result<std::shared_ptr<MemNodeFs::OpenFile>> MemNodeFs::LookupLocked(Handle h) const {
  auto it = handles_.find(h);
  if (it == handles_.end()) return Err(EBADF, "unknown handle " + std::to_string(h));
  return it->second;
}

Result<size_t> MemNodeFs::Read(Handle h, uint64_t offset, std::span<std::byte> dst) {
  std::lock_guard lock(mu_);
  auto f = LookupLocked(h);
  if (!f) return Err(f.error());
  if ((*f)->acc() == O_WRONLY) return Err(EBADF, "read: handle not open for reading");
  const Inode& n = *(*f)->inode;
  if (n.dir()) return Err(EISDIR, "read");
  if (offset > static_cast<uint64_t>(INT64_MAX)) return Err(EINVAL, "read: offset");
  if (offset >= n.data.size()) return size_t{0};
  size_t len = std::min<size_t>(dst.size(), n.data.size() - offset);
  std::memcpy(dst.data(), n.data.data() + offset, len);
  return len;
}

Result<size_t> MemNodeFs::Write(Handle h, uint64_t offset, std::span<const std::byte> src,
                                const Writer& by) {
  std::lock_guard lock(mu_);
  auto f = LookupLocked(h);
  if (!f) return Err(f.error());
  if ((*f)->acc() == O_RDONLY) return Err(EBADF, "write: handle not open for writing");
  Inode& n = *(*f)->inode;
  if (offset > static_cast<uint64_t>(INT64_MAX)) return Err(EINVAL, "write: offset");
  if ((*f)->flags & O_APPEND) offset = n.data.size();  // as Linux pwrite on O_APPEND
  if (!S_ISREG(n.mode)) return src.size();             // fifos and devices swallow it
  if (by.kill_setid) n.mode &= ~SetIdBitsAWriteClears(n.mode, n.gid, by.cred);
  if (offset + src.size() > n.data.size()) n.data.resize(offset + src.size(), '\0');
  std::memcpy(n.data.data() + offset, src.data(), src.size());
  n.Touch();
  return src.size();
}

Status MemNodeFs::Fsync(Handle h, bool) {
  std::lock_guard lock(mu_);
  auto f = LookupLocked(h);
  if (!f) return Err(f.error());
  return Ok();
}

Status MemNodeFs::Fallocate(Handle h, int mode, uint64_t offset, uint64_t len) {
  std::lock_guard lock(mu_);
  auto f = LookupLocked(h);
  if (!f) return Err(f.error());
  if ((*f)->acc() == O_RDONLY) return Err(EBADF, "fallocate: handle not open for writing");
  if (len == 0 || offset > static_cast<uint64_t>(INT64_MAX) ||
      len > static_cast<uint64_t>(INT64_MAX) - offset) {
    return Err(EINVAL, "fallocate: range");
  }
  Inode& n = *(*f)->inode;
  if (!S_ISREG(n.mode)) return Err(ENODEV, "fallocate: not a regular file");
  const bool keep = mode & FALLOC_FL_KEEP_SIZE;
  const uint64_t end = offset + len;
  switch (mode & ~FALLOC_FL_KEEP_SIZE) {
    case 0:
      break;
    case FALLOC_FL_PUNCH_HOLE:
      if (!keep) return Err(EOPNOTSUPP, "fallocate: punch hole without keep size");
      [[fallthrough]];
    case FALLOC_FL_ZERO_RANGE:
      if (offset < n.data.size()) {
        std::fill(n.data.begin() + static_cast<ptrdiff_t>(offset),
                  n.data.begin() + static_cast<ptrdiff_t>(std::min<uint64_t>(end, n.data.size())),
                  '\0');
      }
      break;
    default:
      return Err(EOPNOTSUPP, "fallocate: mode");
  }
  if (!keep && end > n.data.size()) n.data.resize(end, '\0');
  n.Touch();
  return Ok();
}

Status MemNodeFs::Release(Handle h) {
  std::lock_guard lock(mu_);
  auto it = handles_.find(h);
  if (it == handles_.end()) return Err(EBADF, "release: unknown handle " + std::to_string(h));
  std::shared_ptr<Inode> n = it->second->inode;
  handles_.erase(it);
  if (--n->handles == 0) {
    n->locks.reset();  // the last handle of the file takes every lock with it
    ReleaseInodeLocked(n);
  }
  return Ok();
}

Status MemNodeFs::Flush(Handle h, uint64_t lock_owner) {
  std::lock_guard lock(mu_);
  auto f = LookupLocked(h);
  if (!f) return Err(f.error());
  Inode& n = *(*f)->inode;
  if (n.locks) {
    auto it = n.locks->find(lock_owner);
    if (it != n.locks->end()) it->second.posix.clear();
  }
  return Ok();
}

// ---------------------------------------------------------------------------
// Locks

namespace {

Result<std::pair<uint64_t, uint64_t>> LockSpan(const LockRange& r) {
  if (r.type != F_RDLCK && r.type != F_WRLCK && r.type != F_UNLCK) {
    return Err(EINVAL, "lock: bad type");
  }
  if (r.start > static_cast<uint64_t>(INT64_MAX) || r.len > static_cast<uint64_t>(INT64_MAX)) {
    return Err(EINVAL, "lock: range");
  }
  uint64_t end = r.len == 0 ? kEof : r.start + r.len;
  return std::make_pair(r.start, end);
}

// The first lock of another owner that conflicts with `type` over [s, e).
const Segment* Conflicting(const std::map<uint64_t, MemNodeFs::Inode::Owner>& locks,
                           uint64_t owner, int16_t type, uint64_t s, uint64_t e) {
  for (const auto& [o, st] : locks) {
    if (o == owner) continue;
    for (const Segment& seg : st.posix) {
      if (Overlaps(seg, s, e) && (type == F_WRLCK || seg.type == F_WRLCK)) return &seg;
    }
  }
  return nullptr;
}

}  // namespace

Result<LockRange> MemNodeFs::GetLk(Handle h, uint64_t owner, const LockRange& want) {
  std::lock_guard lock(mu_);
  auto f = LookupLocked(h);
  if (!f) return Err(f.error());
  auto span = LockSpan(want);
  if (!span) return Err(span.error());
  if (want.type == F_UNLCK) return Err(EINVAL, "getlk: F_UNLCK");
  LockRange out = want;
  out.type = F_UNLCK;
  const Inode& n = *(*f)->inode;
  if (!n.locks) return out;
  if (const Segment* seg = Conflicting(*n.locks, owner, want.type, span->first, span->second)) {
    out.type = seg->type;
    out.start = seg->start;
    out.len = seg->end == kEof ? 0 : seg->end - seg->start;
    out.pid = -1;  // as OFD locks report
  }
  return out;
}

Status MemNodeFs::SetLk(Handle h, uint64_t owner, const LockRange& want) {
  std::lock_guard lock(mu_);
  auto f = LookupLocked(h);
  if (!f) return Err(f.error());
  auto span = LockSpan(want);
  if (!span) return Err(span.error());
  const int acc = (*f)->acc();
  if ((want.type == F_WRLCK && acc == O_RDONLY) || (want.type == F_RDLCK && acc == O_WRONLY)) {
    return Err(EBADF, "setlk: handle not open for that lock type");
  }
  Inode& n = *(*f)->inode;
  if (!n.locks) {
    if (want.type == F_UNLCK) return Ok();
    n.locks = std::make_unique<std::map<uint64_t, Inode::Owner>>();
  }
  const auto [s, e] = *span;
  if (want.type != F_UNLCK && Conflicting(*n.locks, owner, want.type, s, e)) {
    return Err(EAGAIN, "setlk: conflicting lock");
  }
  // Cut [s, e) out of the owner's segments, then add the new one.
  std::vector<Segment>& mine = (*n.locks)[owner].posix;
  std::vector<Segment> next;
  for (const Segment& seg : mine) {
    if (!Overlaps(seg, s, e)) {
      next.push_back(seg);
      continue;
    }
    if (seg.start < s) next.push_back(Segment{seg.start, s, seg.type});
    if (seg.end > e) next.push_back(Segment{e, seg.end, seg.type});
  }
  if (want.type != F_UNLCK) next.push_back(Segment{s, e, want.type});
  std::sort(next.begin(), next.end(),
            [](const Segment& a, const Segment& b) { return a.start < b.start; });
  mine.swap(next);
  return Ok();
}

Status MemNodeFs::Flock(Handle h, uint64_t owner, int op) {
  std::lock_guard lock(mu_);
  auto f = LookupLocked(h);
  if (!f) return Err(f.error());
  const int base = op & ~LOCK_NB;
  if (base != LOCK_SH && base != LOCK_EX && base != LOCK_UN) return Err(EINVAL, "flock: op");
  Inode& n = *(*f)->inode;
  if (!n.locks) {
    if (base == LOCK_UN) return Ok();
    n.locks = std::make_unique<std::map<uint64_t, Inode::Owner>>();
  }
  if (base != LOCK_UN) {
    for (const auto& [o, st] : *n.locks) {
      if (o == owner || st.flock == 0) continue;
      if (base == LOCK_EX || st.flock == LOCK_EX) return Err(EWOULDBLOCK, "flock: held");
    }
  }
  (*n.locks)[owner].flock = base == LOCK_UN ? 0 : base;
  return Ok();
}

size_t MemNodeFs::InodeCount() const {
  std::lock_guard lock(mu_);
  return inodes_;
}

size_t MemNodeFs::OpenHandleCount() const {
  std::lock_guard lock(mu_);
  return handles_.size();
}


}  // namespace fedfs::ns
