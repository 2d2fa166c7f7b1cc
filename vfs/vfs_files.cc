// VfsImpl: open files, directories, statfs, xattrs and the queries
// (vfs/vfs_impl.h).
#include "vfs/vfs_impl.h"

#include <dirent.h>
#include <linux/fs.h>
#include <sys/file.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/cooperative.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/path.h"
#include "vfs/vfs_util.h"

namespace fedfs::ns {

using namespace vfs_detail;

// ---------------------------------------------------------------- files

Result<VfsImpl::OpenFile> VfsImpl::FileOf(uint64_t fh) const {
  std::lock_guard lock(files_mu_);
  auto it = files_.find(fh);
  if (it == files_.end()) return Err(EBADF, "unknown file handle " + std::to_string(fh));
  return it->second;
}

std::optional<uint64_t> VfsImpl::AnyFileHandleOf(uint64_t ino) const {
  std::lock_guard lock(files_mu_);
  auto it = files_by_ino_.find(ino);
  if (it == files_by_ino_.end()) return std::nullopt;
  return it->second;
}

Result<VfsImpl::OpenFile> VfsImpl::AnyFileOf(uint64_t ino) const {
  auto fh = AnyFileHandleOf(ino);
  if (!fh) return Err(ENOENT, "inode " + std::to_string(ino) + " was removed");
  return FileOf(*fh);
}

// The kernel's pages of a file held elsewhere stay valid while its node
// tells this one of every change, each change's range dropped before the
// change is acknowledged (RemoteAttrsChanged): from an open whose handle is
// told (the kernel dropped its pages at that open, or kept pages valid
// before it) until no handle is told and no watch is left (Release,
// RemoteAttrsChanged), the inode is forgotten, or the node (the file
// moved) or the session with it changed (the node may have forgotten whom
// it tells, or never known: CachedIn). An open outside that keeps nothing:
// the kernel drops the file's pages then.
uint64_t VfsImpl::AddFile(OpenFile f, bool* keep_pages) {
  // A deferred handle's file is watched for this node (vfs_deferred.cc).
  const bool pages = options_.keep_remote_pages && (f.told || f.deferred);
  CachedIn now;
  if (pages) now = CachedInOf(f);
  std::lock_guard lock(files_mu_);
  const uint64_t fh = next_fh_++;
  files_by_ino_.emplace(f.ino, fh);
  if (f.told) told_.emplace(std::make_pair(f.fs->node_id(), f.handle), f.ino);
  if (f.deferred) deferred_.emplace(std::make_pair(f.fs->node_id(), f.watch), fh);
  if (pages) {
    auto [it, added] = pages_.try_emplace(f.ino, now);
    if (keep_pages != nullptr) *keep_pages = !added && it->second == now;
    if (keep_pages != nullptr && !added && !(it->second == now)) {
      Logger("vfs")->debug("inode {}: pages from {} session {} not kept (now {} session {})",
                           f.ino, it->second.node, it->second.session, now.node, now.session);
    }
    it->second = now;
  } else if (pages_.erase(f.ino) != 0) {
    Logger("vfs")->debug("inode {}: opened without being told: its pages go", f.ino);
  }
  files_.emplace(fh, std::move(f));
  return fh;
}

Result<FileOut> VfsImpl::Open(const Cred& c, uint64_t ino, int flags) {
  if (flags & O_TRUNC) Changing();  // as a setattr of the size
  std::optional<DataChange> data_change;
  if (flags & O_TRUNC) data_change.emplace(*this, ino);
  FEDFS_TRY(r, Resolve(ino));
  if (IsDir(r->type)) return Err(EISDIR, r->path);
  FEDFS_TRY(fs, FsOf(r->node));
  if (auto d = DeferredOpen(c, ino, flags, *fs, r->node)) return *d;  // vfs_deferred.cc
  auto op = (*fs)->Open(c, r->path, flags & ~(O_CREAT | O_EXCL));
  if (!op && op.error().code == ENOENT) {
    // Gone since the kernel looked it up: ESTALE makes open(2) look the path
    // up again, and create it if it was an O_CREAT open.
    return Err(ESTALE, r->path + " changed on node " + r->node);
  }
  if (!op) return Err(op.error());
  FileOut out;
  out.direct_io = AppendOnly(flags);
  out.fh = AddFile(OpenFile{*fs, op->handle, ino, op->attr_callbacks, false, out.direct_io, flags},
                   &out.keep_cache);
  return out;
}

// O_APPEND: each write(2) reaches the holder as one request, whose O_APPEND
// fd puts it whole at the file's end there (nodefs/local_node_fs.h). Through
// the page cache the kernel would split a write at a page boundary of its
// own idea of the end of file (stale when another node or a local program
// appended), and the two parts would be appended apart, another writer's
// record between them. So the kernel is told to write such a handle
// directly (FOPEN_DIRECT_IO; mapping it shared stays possible where the
// kernel allows it, fuse/fuse_ops.cc).
bool VfsImpl::AppendOnly(int flags) { return (flags & O_APPEND) != 0; }

// A create races with other nodes' creates and unlinks of the same name: a
// lost claim (another node is creating it) or an existing file that vanished
// before it was opened starts over, a few times.
Result<std::pair<EntryOut, FileOut>> VfsImpl::Create(const Cred& c, uint64_t parent,
                                                     const std::string& name, mode_t mode,
                                                     int flags) {
  for (int attempt = 0;; ++attempt) {
    auto r = CreateOnce(c, parent, name, mode, flags, attempt == 0);
    const bool raced = !r && ((r.error().code == EEXIST && !(flags & O_EXCL)) ||
                              (r.error().code == ENOENT && r.error().context == "raced"));
    if (!raced || attempt == 4) return r;
  }
}

Result<std::pair<EntryOut, FileOut>> VfsImpl::CreateOnce(const Cred& c, uint64_t parent,
                                                         const std::string& name, mode_t mode,
                                                         int flags, bool first) {
  const uint64_t names_epoch = NamesEpoch();
  if (auto s = ValidateName(name); !s) return Err(s.error());
  FEDFS_TRY(dir, ResolveDir(parent));
  NamesFrom(dir->path, name);
  // The first try may look at a stale copy: the claim decides whether the
  // name exists (EEXIST: tried again, asking the manager), and a name it
  // shows is asked for again before it is opened.
  FEDFS_TRY(vd, first ? deps_.vds->Peek(dir->path, name) : deps_.vds->GetName(dir->path, name));
  if (first && (*vd)->Find(name) != nullptr) {
    FEDFS_TRY(now, deps_.vds->GetName(dir->path, name));
    vd = std::move(now);
  }
  if (const VdEntry* e = (*vd)->Find(name)) {
    // Lost a race with another creator: open the existing file.
    if (flags & O_EXCL) return Err(EEXIST, JoinPath(dir->path, name));
    if (e->type == DT_DIR) return Err(EISDIR, JoinPath(dir->path, name));
    auto ch = ChildFromEntry(c, dir->path, *e);
    if (!ch && ch.error().code == ENOENT) return Err(ENOENT, "raced");  // unlinked meanwhile
    if (!ch) return Err(ch.error());
    ch->cacheable = (*vd)->kernel_may_cache;
    if (flags & O_TRUNC) ch->watch.reset();  // these attributes are from before the open
    FEDFS_TRY(fs, FsOf(ch->node));
    auto op = (*fs)->Open(c, JoinPath(dir->path, ch->real_name), flags & ~(O_CREAT | O_EXCL));
    if (!op && op.error().code == ENOENT) return Err(ENOENT, "raced");
    if (!op) return Err(op.error());
    EntryOut entry = Remember(parent, *ch, names_epoch);
    if (flags & O_TRUNC) DataChanged(entry.ino);
    FileOut out;
    out.direct_io = AppendOnly(flags);
    out.fh = AddFile(
        OpenFile{*fs, op->handle, entry.ino, op->attr_callbacks, false, out.direct_io, flags},
        &out.keep_cache);
    return std::make_pair(entry, out);
  }
  std::shared_ptr<NodeFs> fs;  // the chosen node's, kept by the open file
  const uint64_t taken = CallbacksTaken();  // before the create (see WatchLocked)
  const uint64_t dir_before = DirChanges();
  std::optional<DirChange> dir_change(std::in_place, *this);  // KeptDirAttr
  // Only what a create reads of VD(parent) is kept (no entries): unshared,
  // the manager changes VD(P) in place (vd_service.cc) when it adds the
  // entry with the claim.
  *vd = PartialOf(*vd, name);
  NewName owed;
  auto made = MakeNew<Opened>(
      c, dir->path, *vd, name, false,
      [&](const std::shared_ptr<NodeFs>& f, const std::string& p) {
        fs = f;
        return f->Create(c, p, flags | O_CREAT, mode);
      },
      DT_REG, &owed);
  // The first try's copy of VD(parent) may be stale, its holders those of a
  // directory since renamed or removed (another made under the name since):
  // asked again.
  if (!made && first && made.error().code == ENOENT) return Err(ENOENT, "raced");
  if (!made) return Err(made.error());
  const auto& [node, op] = *made;
  const bool kernel_ok = (*vd)->kernel_may_cache;
  const DirAfter dir_after = DirAfterFileChange(dir->st_ino, **vd, node, op.parent);
  ReportNew(dir->path, name, DT_REG, node, 0, owed);
  dir_change.reset();
  KeepDirAfter(parent, dir_after, dir_before);
  Child ch{name, name, S_IFREG, node, op.st};
  ch.cacheable = kernel_ok;
  ch.st.st_ino = FileIno(node, op.st.st_ino);
  EntryOut entry = Remember(parent, ch, names_epoch);
  FileOut out;
  out.direct_io = AppendOnly(flags);
  out.fh = AddFile(OpenFile{fs, op.handle, entry.ino, op.attr_callbacks, false, out.direct_io, flags},
                   &out.keep_cache);
  if (op.watch) {
    // Watched by its node from the create on: the kernel may keep these
    // attributes after the close too (as after a getattr, GetAttr).
    std::lock_guard lock(mu_);
    WatchLocked(entry.ino, node, *op.watch, taken);
  }
  if (entry.attr_timeout > 0 || op.attr_callbacks) {
    entry.attr_timeout = std::max(entry.attr_timeout, AttrTimeout(entry.ino, entry.attr));
  }
  return std::make_pair(entry, out);
}

Result<size_t> VfsImpl::Read(uint64_t fh, uint64_t offset, std::span<std::byte> dst) {
  return WithFile(fh, [&](const OpenFile& f) -> Result<size_t> {
    if (deps_.cache != nullptr && f.told && OneLink(f.ino)) {
      // A long sequential stream goes past the cache unless it holds the
      // read's first block (docs/coopcache.md, "Sequential reads").
      if (!streams_.Read(fh, offset, dst.size()) ||
          deps_.cache->Has(f.ino, offset / deps_.cache->block_size())) {
        return CachedRead(f, offset, dst);
      }
      auto n = f.fs->Read(f.handle, offset, dst);
      if (n) deps_.cache->NoteStreamed(*n);
      return n;
    }
    auto n = f.fs->Read(f.handle, offset, dst);
    if (n) CountLocal(f, *n);
    return n;
  });
}

void VfsImpl::CountLocal(const OpenFile& f, uint64_t bytes) {
  if (!options_.on_local_access || f.fs.get() != deps_.local) return;
  if (auto p = PathOf(f.ino)) options_.on_local_access(*p, bytes);
}

bool VfsImpl::OneLink(uint64_t ino) const {
  std::lock_guard lock(mu_);
  const Inode* n = table_.Find(ino);
  return n != nullptr && S_ISREG(n->type) && n->last.st_nlink == 1;
}

Result<size_t> VfsImpl::Write(uint64_t fh, uint64_t offset, std::span<const std::byte> src,
                              const Writer& by) {
  Changing();  // its node does not tell this node's session (Inode::lookup_attr)
  FEDFS_TRY(f, FileOf(fh));
  // An O_APPEND handle (direct) writes where the file ends at its node.
  DataChange data_change{*this, f->ino,
                         f->direct ? DataRange{} : DataRange{offset, src.size()}};
  // The kernel holds its locks of these pages until answered: a drop of
  // them that other nodes' changes ask for meanwhile waits (PageDrops).
  PageDrops::Writing writing{page_drops_, f->ino, offset, src.size()};
  if (f->direct) {
    // Written past the kernel's pages (an O_APPEND handle): the page holding
    // the old end may be cached with zeros past it. The next open drops them.
    std::lock_guard lock(files_mu_);
    pages_.erase(f->ino);
  }
  auto n = WithFile(fh, [&](const OpenFile& g) {
    auto w = g.fs->Write(g.handle, offset, src, by);
    if (w) CountLocal(g, *w);
    return w;
  });
  if (!n && NoRoom(n.error().code)) {
    return WriteForRoom(fh, offset, src, by, n.error());  // vfs_room.cc
  }
  if (n && !f->dirty) MarkDirty(fh);
  return n;
}

void VfsImpl::MarkDirty(uint64_t fh) {
  std::lock_guard lock(files_mu_);
  if (auto it = files_.find(fh); it != files_.end()) it->second.dirty = true;
}

// A close: the holder's flush releases the closer's POSIX locks and reports
// a write-back error. A handle that wrote nothing, of a file no handle here
// locked, has neither: answered here, without a round trip to the holder
// (every write was already answered by the holder).
Status VfsImpl::Flush(uint64_t fh, uint64_t lock_owner) {
  FEDFS_TRY(f, FileOf(fh));
  if (!f->dirty) {
    std::lock_guard lock(files_mu_);
    if (!lock_inos_.contains(f->ino)) return Ok();
  }
  if (f->deferred) {  // another handle's locks: this process's go with this close
    return WithFile(fh, [&](const OpenFile& g) { return g.fs->Flush(g.handle, GlobalOwner(lock_owner)); });
  }
  return f->fs->Flush(f->handle, GlobalOwner(lock_owner));
}

Status VfsImpl::Fsync(uint64_t fh, bool datasync) {
  return WithFile(fh, [&](const OpenFile& f) { return f.fs->Fsync(f.handle, datasync); });
}

Status VfsImpl::Release(uint64_t fh) {
  OpenFile f;
  bool untold = false, locked = false, shared = false;
  {
    std::lock_guard lock(files_mu_);
    auto it = files_.find(fh);
    if (it == files_.end()) return Err(EBADF, "unknown file handle");
    f = std::move(it->second);
    files_.erase(it);
    if (f.deferred) ForgetDeferredLocked(f, fh);
    streams_.Forget(fh);
    shared = !f.deferred && UnshareLocked(f.fs->node_id(), f.handle);  // vfs_deferred.cc
    auto [b, e] = files_by_ino_.equal_range(f.ino);
    for (auto i = b; i != e; ++i) {
      if (i->second == fh) {
        files_by_ino_.erase(i);
        break;
      }
    }
    locked = lock_inos_.contains(f.ino);
    if (!files_by_ino_.contains(f.ino)) lock_inos_.erase(f.ino);  // each close released its locks
    if (f.told && !shared) {
      told_.erase({f.fs->node_id(), f.handle});
      // Still told through another handle, or as a watch (a create's).
      untold = !ToldLocked(f.ino) && !watch_of_.contains(f.ino);
      if (!PagesToldLocked(f.ino) && pages_.erase(f.ino) != 0) {  // before the node stops telling
        Logger("vfs")->debug("inode {}: closed with no watch left: its pages go", f.ino);
      }
    }
  }
  // The kernel may cache the attributes only while changes are told: drop
  // them before the node stops telling (a reply to a getattr racing with
  // this is not cached: the kernel's attr_version moved). So do the cached
  // blocks (vfs_cache.cc).
  if (untold) {
    if (KernelCache* k = kernel_.load(std::memory_order_acquire)) k->InvalidateAttrs(f.ino);
    DataChanged(f.ino);
  }
  if (f.deferred || shared) return Ok();  // nothing opened, or others use it
  // Without locks the holder's close changes nothing another node waits
  // for: it may travel with a later request (NodeFs::ReleaseLater).
  return locked ? f.fs->Release(f.handle) : f.fs->ReleaseLater(f.handle);
}

Status VfsImpl::Fallocate(uint64_t fh, int mode, uint64_t offset, uint64_t len) {
  Changing();  // its node does not tell this node's session (Inode::lookup_attr)
  FEDFS_TRY(f, FileOf(fh));
  DataChange data_change{*this, f->ino};
  Status s = WithFile(
      fh, [&](const OpenFile& g) { return g.fs->Fallocate(g.handle, mode, offset, len); });
  if (s && !f->dirty) MarkDirty(fh);
  return s;
}

void VfsImpl::NoteLocks(uint64_t ino) {
  std::lock_guard lock(files_mu_);
  lock_inos_.insert(ino);
}

Result<LockRange> VfsImpl::GetLk(uint64_t fh, uint64_t owner, const LockRange& want) {
  return WithFile(fh, [&](const OpenFile& f) {
    return f.fs->GetLk(f.handle, GlobalOwner(owner), want);
  });
}

Status VfsImpl::SetLk(uint64_t fh, uint64_t owner, const LockRange& want, bool wait) {
  FEDFS_TRY(f, FileOf(fh));
  // One attempt: a waiting caller (the FUSE frontend) retries with backoff
  // and stops when its request is interrupted.
  (void)wait;
  NoteLocks(f->ino);
  return WithFile(fh, [&](const OpenFile& g) {
    return g.fs->SetLk(g.handle, GlobalOwner(owner), want);
  });
}

Status VfsImpl::Flock(uint64_t fh, uint64_t owner, int op) {
  FEDFS_TRY(f, FileOf(fh));
  NoteLocks(f->ino);
  return WithFile(fh, [&](const OpenFile& g) {
    return g.fs->Flock(g.handle, GlobalOwner(owner), op);
  });
}

// ---------------------------------------------------------------- directories

std::vector<DirEntryOut> VfsImpl::Snapshot(const std::string& path, uint64_t ino,
                                           const VdPtr& vd, uint64_t parent_st_ino,
                                           const std::set<std::string>& left_out) const {
  std::vector<DirEntryOut> out;
  out.reserve(vd->entries.size() + 2);
  std::lock_guard lock(mu_);
  const Inode* self = table_.Find(ino);
  out.push_back({".", self != nullptr ? self->st_ino : DirIno(path), S_IFDIR, 1});
  out.push_back({"..", parent_st_ino, S_IFDIR, 2});
  for (const auto& e : vd->entries) {
    if (!left_out.empty() && std::all_of(e.holders.begin(), e.holders.end(), [&](const auto& n) {
          return left_out.contains(n);
        })) {
      continue;
    }
    DirEntryOut d;
    d.name = e.name;
    d.type = TypeFromDt(e.type);
    const std::string real = e.RealName();
    if (e.type == DT_DIR) {
      d.ino = DirIno(e.id, JoinPath(path, real));
    } else if (auto known = table_.Named(ino, e.name)) {
      d.ino = table_.Find(*known)->st_ino;
    } else {
      // Not known yet: a stand-in from the holder and name (st_ino comes
      // with the first lookup).
      const std::string holder = e.holders.empty() ? std::string() : e.holders.front();
      d.ino = (uint64_t{0xfffe} << 48) | (StableHash(holder + ":" + JoinPath(path, real)) & kInoMask);
    }
    d.next_offset = out.size() + 1;
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::set<std::string>> VfsImpl::Unasked(const Cred& c, const std::string& path,
                                               const VirtualDirectory& vd) {
  std::set<std::string> out;
  for (const std::string& node : vd.holders) {
    auto fs = FsOf(node);
    const Status s = fs ? (*fs)->Access(c, path, R_OK) : Status(Err(fs.error()));
    if (s) continue;
    if (s.error().code == EACCES || s.error().code == EPERM) return Err(s.error());
    out.insert(node);
  }
  return out;
}

uint64_t VfsImpl::ParentStIno(uint64_t ino, const std::string& path) const {
  std::lock_guard lock(mu_);
  const Inode* n = table_.Find(ino);
  const Inode* p = n != nullptr && ino != kRootIno ? table_.Find(n->parent) : n;
  return p != nullptr ? p->st_ino : DirIno(std::string(ParentPath(path)));
}

Result<uint64_t> VfsImpl::OpenDir(const Cred& c, uint64_t ino) {
  FEDFS_TRY(r, ResolveDir(ino));
  FEDFS_TRY(vd, deps_.vds->Get(r->path));
  FEDFS_TRY(unasked, Unasked(c, r->path, **vd));
  const uint64_t parent_ino = ParentStIno(ino, r->path);
  auto d = std::make_shared<DirHandle>();
  d->ino = ino;
  d->path = r->path;
  d->unasked = std::move(*unasked);
  d->entries = std::make_shared<const std::vector<DirEntryOut>>(
      Snapshot(r->path, ino, *vd, parent_ino, d->unasked));
  std::lock_guard lock(files_mu_);
  const uint64_t dh = next_fh_++;
  dirs_.emplace(dh, std::move(d));
  return dh;
}

Result<std::vector<DirEntryOut>> VfsImpl::ReadDir(uint64_t dh, uint64_t offset, size_t max) {
  std::shared_ptr<DirHandle> d;
  {
    std::lock_guard lock(files_mu_);
    auto it = dirs_.find(dh);
    if (it == dirs_.end()) return Err(EBADF, "unknown directory handle");
    d = it->second;
  }
  std::shared_ptr<const std::vector<DirEntryOut>> snapshot;
  {
    std::lock_guard lock(files_mu_);
    if (offset == 0 && !d->fresh) d->entries.reset();  // rewinddir: refresh below
    d->fresh = false;
    snapshot = d->entries;
  }
  if (!snapshot) {
    FEDFS_TRY(vd, deps_.vds->Get(d->path));
    snapshot = std::make_shared<const std::vector<DirEntryOut>>(
        Snapshot(d->path, d->ino, *vd, ParentStIno(d->ino, d->path), d->unasked));
    std::lock_guard lock(files_mu_);
    d->entries = snapshot;
  }
  std::vector<DirEntryOut> out;
  max = std::min(max == 0 ? options_.max_readdir_batch : max, options_.max_readdir_batch);
  for (size_t i = offset; i < snapshot->size() && out.size() < max; ++i) {
    out.push_back((*snapshot)[i]);
  }
  return out;
}

Status VfsImpl::ReleaseDir(uint64_t dh) {
  std::lock_guard lock(files_mu_);
  dirs_.erase(dh);
  return Ok();
}

// ---------------------------------------------------------------- misc

Result<struct statvfs> VfsImpl::StatFs() {
  auto view = deps_.cluster->Current();
  std::vector<std::string> nodes;
  nodes.push_back(view->self);
  for (const auto& [id, addr] : view->live) {
    if (id != view->self) nodes.push_back(id);
  }
  std::optional<struct statvfs> sum;
  unsigned __int128 blocks = 0, bfree = 0, bavail = 0;
  Error last{EIO, "statfs"};
  for (const auto& n : nodes) {
    auto fs = FsOf(n);
    if (!fs) continue;
    auto st = (*fs)->StatFs();
    if (!st) {
      last = st.error();
      continue;
    }
    if (!sum) {
      sum = *st;
      sum->f_files = sum->f_ffree = sum->f_favail = 0;
    }
    const uint64_t unit = st->f_frsize ? st->f_frsize : st->f_bsize;
    blocks += static_cast<unsigned __int128>(st->f_blocks) * unit;
    bfree += static_cast<unsigned __int128>(st->f_bfree) * unit;
    bavail += static_cast<unsigned __int128>(st->f_bavail) * unit;
    sum->f_files += st->f_files;
    sum->f_ffree += st->f_ffree;
    sum->f_favail += st->f_favail;
    sum->f_namemax = std::min<unsigned long>(sum->f_namemax, st->f_namemax);
  }
  if (!sum) return Err(std::move(last));
  const uint64_t unit = sum->f_frsize ? sum->f_frsize : sum->f_bsize;
  sum->f_frsize = unit;
  sum->f_blocks = static_cast<fsblkcnt_t>(blocks / unit);
  sum->f_bfree = static_cast<fsblkcnt_t>(bfree / unit);
  sum->f_bavail = static_cast<fsblkcnt_t>(bavail / unit);
  return *sum;
}

Result<std::vector<std::string>> VfsImpl::Where(const std::string& path) {
  if (auto s = ValidateGlobalPath(path); !s) return Err(s.error());
  if (path == "/") {
    FEDFS_TRY(vd, deps_.vds->Get("/"));
    return (*vd)->holders;
  }
  FEDFS_TRY(vd, deps_.vds->Get(std::string(ParentPath(path))));
  const VdEntry* e = (*vd)->Find(std::string(BaseName(path)));
  if (e == nullptr) return Err(ENOENT, path);
  return e->holders;
}

Result<std::vector<VdEntry>> VfsImpl::List(const std::string& path) {
  if (auto s = ValidateGlobalPath(path); !s) return Err(s.error());
  if (path != "/") {
    FEDFS_TRY(parent, deps_.vds->Get(std::string(ParentPath(path))));
    const VdEntry* e = (*parent)->Find(std::string(BaseName(path)));
    if (e == nullptr) return Err(ENOENT, path);
    if (e->type != DT_DIR) return Err(ENOTDIR, path);
  }
  FEDFS_TRY(vd, deps_.vds->Get(path));
  std::vector<VdEntry> out;
  for (const VdEntry& e : (*vd)->entries) out.push_back(e);
  return out;
}

NodeFs* VfsImpl::NodeFsFor(const std::string& node) {
  auto fs = FsOf(node);
  return fs ? fs->get() : nullptr;
}

Result<std::string> VfsImpl::PathOf(uint64_t ino) const {
  FEDFS_TRY(r, Resolve(ino));
  return r->path;
}

std::map<std::string, uint64_t> VfsImpl::FreeBytes(bool fresh) {
  const auto now = SteadyNow();
  {
    std::lock_guard lock(free_mu_);
    if (!fresh && free_at_ != std::chrono::steady_clock::time_point{} &&
        now - free_at_ < std::chrono::seconds(1)) {
      return free_bytes_;
    }
  }
  std::map<std::string, uint64_t> out;
  auto view = deps_.cluster->Current();
  std::vector<std::string> nodes{view->self};
  for (const auto& [id, addr] : view->live) {
    if (id != view->self) nodes.push_back(id);
  }
  for (const auto& n : nodes) {
    auto fs = FsOf(n);
    if (!fs) continue;
    auto st = (*fs)->StatFs();
    if (st) out[n] = static_cast<uint64_t>(st->f_bavail) * (st->f_frsize ? st->f_frsize : st->f_bsize);
  }
  std::lock_guard lock(free_mu_);
  free_bytes_ = out;
  free_at_ = now;
  return out;
}

size_t VfsImpl::InodeCount() const {
  std::lock_guard lock(mu_);
  return table_.size();
}

namespace {
Result<std::string> SizedAnswer(std::string value, size_t size, size_t* needed) {
  if (needed) *needed = value.size();
  if (size == 0) return std::string();
  if (value.size() > size) return Err(ERANGE, "xattr buffer too small");
  return value;
}
}  // namespace

Result<std::string> VfsImpl::GetXattr(const Cred& c, uint64_t ino, const std::string& name,
                                      size_t size, size_t* needed) {
  // FedFS' own (a directory's id, nodefs/dir_id.h): not the user's.
  if (name.starts_with(kFedfsXattrPrefix)) return Err(ENODATA, name);
  FEDFS_TRY(r, Resolve(ino));
  if (name == kLocationXattr) {
    if (!IsDir(r->type)) return SizedAnswer(r->node, size, needed);
    FEDFS_TRY(vd, deps_.vds->GetSummary(r->path));
    return SizedAnswer(Join((*vd)->holders, ","), size, needed);
  }
  std::string node = r->node;
  if (IsDir(r->type)) {
    FEDFS_TRY(vd, deps_.vds->GetSummary(r->path));
    if ((*vd)->holders.empty()) return Err(ENOENT, r->path);
    node = (*vd)->holders.front();
  } else if (auto any = AnyFileHandleOf(ino); any) {
    // Open here: ask through the handle (the same permission checks, run as
    // the caller; the file the kernel means even if its name has moved).
    auto v = WithFile(*any, [&](const OpenFile& f) {
      return f.fs->GetXattrOf(c, f.handle, name, size, needed);
    });
    if (v || v.error().code != ENOSYS) return v;
  }
  FEDFS_TRY(fs, FsOf(node));
  return (*fs)->GetXattr(c, r->path, name, size, needed);
}

template <class Change>
Status VfsImpl::ChangeXattr(uint64_t ino, const std::string& name, Change change) {
  if (name == kLocationXattr) return Err(EPERM, "user.fedfs.location is read-only");
  if (name.starts_with(kFedfsXattrPrefix)) return Err(EPERM, name + " is FedFS' own");
  FEDFS_TRY(r, Resolve(ino));
  std::vector<std::string> nodes{r->node};
  if (IsDir(r->type)) {
    FEDFS_TRY(vd, deps_.vds->GetSummary(r->path));
    nodes = (*vd)->holders;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    FEDFS_TRY(fs, FsOf(nodes[i]));
    Status s = change(**fs, r->path);
    if (!s && i == 0) return s;
  }
  return Ok();
}

Status VfsImpl::SetXattr(const Cred& c, uint64_t ino, const std::string& name,
                         std::span<const std::byte> value, int flags) {
  Changing();  // its node does not tell this node's session (Inode::lookup_attr)
  DirChange dir_change(*this);  // KeptDirAttr (a directory's ctime)
  return ChangeXattr(ino, name, [&](NodeFs& fs, const std::string& path) {
    return fs.SetXattr(c, path, name, value, flags);
  });
}

Result<std::string> VfsImpl::ListXattr(const Cred& c, uint64_t ino, size_t size,
                                       size_t* needed) {
  FEDFS_TRY(r, Resolve(ino));
  std::string node = r->node;
  if (IsDir(r->type)) {
    FEDFS_TRY(vd, deps_.vds->GetSummary(r->path));
    if ((*vd)->holders.empty()) return Err(ENOENT, r->path);
    node = (*vd)->holders.front();
  }
  FEDFS_TRY(fs, FsOf(node));
  size_t need = 0;
  FEDFS_TRY(probe, (*fs)->ListXattr(c, r->path, 0, &need));
  std::string names;
  if (need > 0) {
    FEDFS_TRY(all, (*fs)->ListXattr(c, r->path, need, &need));
    for (size_t at = 0; at < all->size();) {  // without FedFS' own names
      const size_t end = std::min(all->find('\0', at), all->size());
      const std::string_view one(all->data() + at, end - at);
      if (!one.empty() && !one.starts_with(kFedfsXattrPrefix)) {
        names.append(one);
        names.push_back('\0');
      }
      at = end + 1;
    }
  }
  names.append(kLocationXattr);
  names.push_back('\0');
  return SizedAnswer(std::move(names), size, needed);
}

Status VfsImpl::RemoveXattr(const Cred& c, uint64_t ino, const std::string& name) {
  Changing();  // its node does not tell this node's session (Inode::lookup_attr)
  DirChange dir_change(*this);  // KeptDirAttr (a directory's ctime)
  return ChangeXattr(ino, name, [&](NodeFs& fs, const std::string& path) {
    return fs.RemoveXattr(c, path, name);
  });
}

#undef FEDFS_TRY


}  // namespace fedfs::ns
