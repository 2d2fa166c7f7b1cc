// VfsImpl: the namespace operations (lookup, attributes, create family,
// link, unlink, rmdir; vfs/vfs_impl.h). Renames: vfs_rename.cc.
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

// ---------------------------------------------------------------- names

Result<EntryOut> VfsImpl::Lookup(const Cred& c, uint64_t parent, const std::string& name) {
  const uint64_t names_epoch = NamesEpoch();
  if (auto s = ValidateName(name); !s) return Err(s.error());
  auto dir = ResolveDir(parent);
  if (!dir) return Err(dir.error());
  NamesFrom(dir->path, name);
  bool absent = false;
  auto ch = LookupChild(c, dir->path, name, &absent);
  if (!ch) {
    // A name that no node has is remembered by the kernel like a name that
    // exists (a negative entry), under the same rule: only while every
    // change of the directory takes the kernel's names back, and only if
    // none did while this lookup was served. Programs that probe for files
    // (search paths of compilers, interpreters, the dynamic linker, PATH)
    // then ask the kernel, not this daemon, for each miss.
    if (absent && ch.error().code == ENOENT) {
      if (KernelCache* k = kernel_.load(std::memory_order_acquire);
          k != nullptr && k->Coherent() && k->NamesEpoch() == names_epoch &&
          std::max(options_.entry_timeout, options_.coherent_entry_timeout) > 0) {
        EntryOut negative;
        negative.entry_timeout = std::max(options_.entry_timeout, options_.coherent_entry_timeout);
        return negative;
      }
    }
    return Err(ch.error());
  }
  return Remember(parent, *ch, names_epoch);
}

void VfsImpl::Forget(uint64_t ino, uint64_t nlookup) {
  if (ino == kRootIno) return;
  std::lock_guard lock(mu_);
  Inode* n = table_.Find(ino);
  if (n == nullptr) return;
  n->nlookup -= std::min(nlookup, n->nlookup);
  MaybeEraseLocked(ino);
}

bool VfsImpl::RenamedAway(const std::string& path) {
  std::unique_lock lock(mu_);
  if (!renaming_.contains(path)) return false;
  // A rename's calls end within their own timeouts; past this bound it is
  // answered as gone.
  return renamed_.wait_for(lock, std::chrono::seconds(30),
                           [&] { return !renaming_.contains(path); });
}

bool VfsImpl::MovedSince(uint64_t ino, const std::string& path) {
  auto now = Resolve(ino);
  return now && now->path != path;
}

Result<struct stat> VfsImpl::GetAttr(const Cred& c, uint64_t ino, std::optional<uint64_t> fh) {
  auto r = Resolve(ino);
  if (!r) {
    // An open-unlinked file: fstat semantics through a handle of it (SetAttr
    // with nothing to change returns the open file's attributes). The kernel
    // sends fstat without a handle, so any open handle of the inode will do.
    if (r.error().code != ENOENT) return Err(r.error());
    const std::optional<uint64_t> open_fh = fh ? fh : AnyFileHandleOf(ino);
    auto f = open_fh ? FileOf(*open_fh) : AnyFileOf(ino);
    if (!f) {
      // Its name now names another file (a rename over it, seen by a
      // lookup here): what it was, unlinked.
      std::lock_guard lock(mu_);
      if (const Inode* n = table_.Find(ino); n != nullptr && n->replaced) {
        return ReplacedAttr(*n);
      }
      return Err(f.error());
    }
    auto st = WithFile(*open_fh, [&](const OpenFile& f) {
      return f.fs->SetAttr(c, "/", f.handle, SetAttrRequest{});
    });
    if (!st) return st;
    std::lock_guard lock(mu_);
    if (const Inode* n = table_.Find(ino)) st->st_ino = n->st_ino;
    return st;
  }
  if (IsDir(r->type)) {
    if (auto kept = KeptDirAttrOf(ino)) return *kept;
    const uint64_t changes = DirChanges();
    auto vd = deps_.vds->GetSummary(r->path);
    if (!vd) return Err(vd.error());
    auto st = DirAttr(c, r->path, *vd, r->st_ino);
    if (st) KeepDirAttr(ino, *st, changes);
    return st;
  }
  if (auto kept = LookupAttr(ino)) return *kept;
  auto fs = FsOf(r->node);
  if (!fs) return Err(fs.error());
  Result<struct stat> st = Err(EIO, "getattr");
  // A remote file with one link: its node is asked to tell of its changes,
  // so that the kernel may keep what this answers (AttrTimeout). A change
  // told before the watch is known here could not be applied to it: then
  // this answer is not kept.
  if (S_ISREG(r->type) && Watchable(r->node)) {
    const uint64_t taken = CallbacksTaken();
    auto ws = (*fs)->StatWatched(c, r->path);
    if (ws) {
      st = ws->st;
      if (ws->watch) {
        std::lock_guard lock(mu_);
        WatchLocked(ino, r->node, *ws->watch, taken);
      }
    } else {
      st = Err(ws.error());
    }
  } else {
    st = (*fs)->Stat(c, r->path);
  }
  if (!st && st.error().code == ENOENT && (RenamedAway(r->path) || MovedSince(ino, r->path))) {
    // This node's own rename in flight moved it, or moved it while the
    // file's node was asked (the rename done, its answer maybe not yet seen
    // by the kernel): the kernel, which has not moved its name yet, gets
    // the file's attributes by its new name (an ENOENT here, with the new
    // name's absence still cached by the kernel, showed the file under
    // neither name).
    return GetAttr(c, ino, fh);
  }
  if (!st && st.error().code == ENOENT) {
    // Removed or renamed on its node since the kernel looked it up: through
    // an open handle, fstat semantics; else ENOENT once the manager agrees.
    if (auto open_fh = fh ? fh : AnyFileHandleOf(ino); open_fh && FileOf(*open_fh)) {
      st = WithFile(*open_fh, [&](const OpenFile& f) {
        return f.fs->SetAttr(c, "/", f.handle, SetAttrRequest{});
      });
    } else {
      // Gone, or its name now names another file (a rename over it from
      // another node): then what it was, unlinked.
      const std::string dir(ParentPath(r->path)), name(BaseName(r->path));
      auto other = [&](const VdEntry* e) {
        return e != nullptr &&
               (e->holders.empty() || e->holders.front() != r->node ||
                e->RealName() != name);
      };
      AwaitVd(dir, name, [&](const VdEntry* e) { return e == nullptr || other(e); });
      auto vd = deps_.vds->Get(dir);
      if (vd && other((*vd)->Find(name))) {
        std::lock_guard lock(mu_);
        if (table_.Contains(ino)) {
          // Its name goes: the next lookup makes a new inode for the new file.
          return ReplacedAttr(table_.MarkReplaced(ino));
        }
      }
      return Err(ENOENT, r->path + " changed on node " + r->node);
    }
  }
  if (!st) return st;
  st->st_ino = FileIno(r->node, st->st_ino);
  std::lock_guard lock(mu_);
  if (Inode* n = table_.Find(ino)) n->last = *st;
  return st;
}

// The getattr that follows a lookup of a remote file: the lookup's
// attributes, once, if its node still watches the file for this node (no
// change told since), this node changed no file since it asked, the kernel
// has no handle of it open (writes through one are not told back), and
// the lookup was a moment ago.
std::optional<struct stat> VfsImpl::LookupAttr(uint64_t ino) {
  constexpr auto kFor = std::chrono::milliseconds(100);
  std::lock_guard lock(mu_);
  Inode* n = table_.Find(ino);
  if (n == nullptr || !n->lookup_attr) return std::nullopt;
  n->lookup_attr = false;
  if (n->lookup_mark != local_changes_.load(std::memory_order_acquire) ||
      SteadyNow() - n->lookup_at > kFor) {
    return std::nullopt;
  }
  std::lock_guard files_lock(files_mu_);
  if (!watch_of_.contains(ino) || files_by_ino_.contains(ino)) return std::nullopt;
  return n->last;
}

struct stat VfsImpl::ReplacedAttr(const Inode& n) {
  struct stat st = n.last;
  st.st_nlink = 0;
  return st;
}

Result<struct stat> VfsImpl::SetAttr(const Cred& c_in, uint64_t ino, std::optional<uint64_t> fh,
                                     const SetAttrRequest& req) {
  Changing();  // its node does not tell this node's session (Inode::lookup_attr)
  DirChange dir_change(*this);  // KeptDirAttr
  std::optional<DataChange> data_change;
  if (req.size) data_change.emplace(*this, ino);  // a truncate
  Cred c = c_in;
  if (req.mode && !req.uid && !req.gid && !req.size && !req.atime && !req.mtime) {
    // The kernel clears set-id bits after a write by a non-owner with a
    // setattr in the writer's name, which chmod would refuse: a change that
    // only drops S_ISUID/S_ISGID runs as root (the kernel checked explicit
    // chmods already under default_permissions; docs/namespace.md).
    auto cur = GetAttr(c, ino, fh);
    if (cur && (cur->st_mode & 07777 & ~static_cast<mode_t>(S_ISUID | S_ISGID)) == *req.mode &&
        (cur->st_mode & 07777) != *req.mode) {
      c = Cred{};
    }
  }
  std::optional<uint64_t> open_fh = fh;
  if (!open_fh && !Resolve(ino)) {
    if (auto any = AnyFileHandleOf(ino)) open_fh = *any;  // open-unlinked file
  }
  fh = open_fh;
  if (fh) {
    if (FileOf(*fh)) {
      auto r = Resolve(ino);
      auto st = WithFile(*fh, [&](const OpenFile& f) {
        return f.fs->SetAttr(c, r ? r->path : std::string("/"), f.handle, req);
      });
      if (!st) return st;
      std::lock_guard lock(mu_);
      if (const Inode* n = table_.Find(ino)) st->st_ino = n->st_ino;
      return st;
    }
  }
  auto r = Resolve(ino);
  if (!r) return Err(r.error());
  if (IsDir(r->type)) {
    // Attributes of a directory are set on every node that holds it.
    auto vd = deps_.vds->GetSummary(r->path);
    if (!vd) return Err(vd.error());
    std::optional<Error> first_error;
    bool any = false;
    for (const auto& h : (*vd)->holders) {
      auto fs = FsOf(h);
      auto st = fs ? (*fs)->SetAttr(c, r->path, std::nullopt, req)
                   : Result<struct stat>(Err(fs.error()));
      if (st) {
        any = true;
      } else if (!first_error) {
        first_error = st.error();
      }
    }
    if (!any && first_error) return Err(*first_error);
    return DirAttr(c, r->path, *vd, r->st_ino);
  }
  auto fs = FsOf(r->node);
  if (!fs) return Err(fs.error());
  auto st = (*fs)->SetAttr(c, r->path, std::nullopt, req);
  if (!st) return st;
  st->st_ino = FileIno(r->node, st->st_ino);
  return st;
}

Result<std::string> VfsImpl::Readlink(const Cred& c, uint64_t ino) {
  auto r = Resolve(ino);
  if (!r) return Err(r.error());
  if (!S_ISLNK(r->type)) return Err(EINVAL, r->path + " is not a symlink");
  auto fs = FsOf(r->node);
  if (!fs) return Err(fs.error());
  return (*fs)->Readlink(c, r->path);
}

template <class Make>
Result<EntryOut> VfsImpl::MakeEntry(const Cred& c, uint64_t parent, const std::string& name,
                                    mode_t type, Make make) {
  DirChange dir_change(*this);  // KeptDirAttr
  const uint64_t names_epoch = NamesEpoch();
  if (auto s = ValidateName(name); !s) return Err(s.error());
  FEDFS_TRY(dir, ResolveDir(parent));
  NamesFrom(dir->path, name);
  // The claim decides whether the name exists; this look only saves it when
  // the name is there for sure (a stale copy is asked again).
  FEDFS_TRY(vd, deps_.vds->Peek(dir->path, name));
  // VD(parent) from its manager; EEXIST if it has the name.
  // Only what a new entry reads of VD(parent) is kept (no entries):
  // unshared, the manager changes VD(P) in place when it adds the entry
  // with the claim (AddNew).
  auto fresh = [&]() -> Result<VdPtr> {
    FEDFS_TRY(now, deps_.vds->GetName(dir->path, name));
    if ((*now)->Find(name)) return Err(EEXIST, JoinPath(dir->path, name));
    return PartialOf(*now, name);
  };
  bool peeked = true;
  if ((*vd)->Find(name)) {
    FEDFS_TRY(now, fresh());
    vd = std::move(now);
    peeked = false;
  } else {
    *vd = PartialOf(*vd, name);
  }
  const bool is_dir = type == S_IFDIR;
  // A directory's identity is known once it is made: claimed, then added.
  const uint8_t add_type = type != 0 && !is_dir ? DtFromMode(type) : 0;
  NewName owed;
  auto made = MakeNew<struct stat>(c, dir->path, *vd, name, is_dir, make, add_type, &owed);
  if (!made && peeked && made.error().code == ENOENT) {
    // A stale copy's holders (of a directory since renamed or removed,
    // another made under its name since): once more with a fresh copy.
    FEDFS_TRY(now, fresh());
    vd = std::move(now);
    made = MakeNew<struct stat>(c, dir->path, *vd, name, is_dir, make, add_type, &owed);
  }
  if (!made) return Err(made.error());
  const auto& [node, st] = *made;
  const mode_t made_type = type != 0 ? type : static_cast<mode_t>(st.st_mode & S_IFMT);
  const bool kernel_ok = (*vd)->kernel_may_cache;
  // A directory is held by no one node; its identity is its first copy's
  // (nodefs/dir_id.h).
  const uint64_t dir_id = is_dir ? DirIdOf(node, st.st_ino) : 0;
  ReportNew(dir->path, name, DtFromMode(made_type), node, dir_id, owed);
  Child ch{name, name, made_type, is_dir ? std::string() : node, st};
  ch.cacheable = kernel_ok;
  if (is_dir) {
    ch.st.st_ino = DirIno(dir_id, JoinPath(dir->path, name));
    ch.st.st_nlink = 2;
  } else {
    ch.st.st_ino = FileIno(node, st.st_ino);
  }
  return Remember(parent, ch, names_epoch);
}

Result<EntryOut> VfsImpl::Mknod(const Cred& c, uint64_t parent, const std::string& name,
                                mode_t mode, dev_t rdev) {
  // mknod(2) makes a regular file where the mode names no type.
  const mode_t type = (mode & S_IFMT) != 0 ? (mode & S_IFMT) : S_IFREG;
  return MakeEntry(c, parent, name, type,
                   [&](const std::shared_ptr<NodeFs>& fs, const std::string& p) {
                     return fs->Mknod(c, p, mode, rdev);
                   });
}

Result<EntryOut> VfsImpl::Mkdir(const Cred& c, uint64_t parent, const std::string& name,
                                mode_t mode) {
  return MakeEntry(c, parent, name, S_IFDIR,
                   [&](const std::shared_ptr<NodeFs>& fs, const std::string& p) {
                     return fs->Mkdir(c, p, mode);
                   });
}

Result<EntryOut> VfsImpl::Symlink(const Cred& c, const std::string& target, uint64_t parent,
                                  const std::string& name) {
  return MakeEntry(c, parent, name, S_IFLNK,
                   [&](const std::shared_ptr<NodeFs>& fs, const std::string& p) {
                     return fs->Symlink(c, target, p);
                   });
}

Result<EntryOut> VfsImpl::Link(const Cred& c, uint64_t ino, uint64_t new_parent,
                               const std::string& new_name) {
  Changing();  // its node does not tell this node's session (Inode::lookup_attr)
  DirChange dir_change(*this);  // KeptDirAttr
  DataChange data_change{*this, ino};  // a second name: no longer cached (vfs_cache.cc)
  const uint64_t names_epoch = NamesEpoch();
  if (auto s = ValidateName(new_name); !s) return Err(s.error());
  FEDFS_TRY(src, Resolve(ino));
  if (IsDir(src->type)) return Err(EPERM, src->path + " is a directory");
  FEDFS_TRY(dir, ResolveDir(new_parent));
  NamesFrom(dir->path, new_name);
  FEDFS_TRY(vd, deps_.vds->GetName(dir->path, new_name));
  if ((*vd)->Find(new_name)) return Err(EEXIST, JoinPath(dir->path, new_name));
  // A hard link lives on the file's node, in a directory that node holds.
  const auto& h = (*vd)->holders;
  if (std::find(h.begin(), h.end(), src->node) == h.end()) {
    return Err(EXDEV, "link: " + dir->path + " is not on node " + src->node);
  }
  const std::string path = JoinPath(dir->path, new_name);
  // The claim and the entry in one call where the manager can, as a create
  // ("Creates in one round trip", docs/namespace.md).
  FEDFS_TRY(owed, ClaimNew(dir->path, new_name, DtFromMode(src->type), src->node));
  auto fs = FsOf(src->node);
  auto st = fs ? (*fs)->Link(c, src->path, path) : Result<struct stat>(Err(fs.error()));
  if (!st) {
    AbandonNew(dir->path, new_name, src->node, *owed);
    return Err(st.error());
  }
  const bool kernel_ok = (*vd)->kernel_may_cache;
  vd->reset();  // unshared, the manager changes VD(P) in place (vd_service.cc)
  ReportNew(dir->path, new_name, DtFromMode(st->st_mode), src->node, 0, *owed);
  // The new name is a kernel inode of its own: the old name's cached link
  // count is now wrong (non-blocking; safe inside this request).
  if (KernelCache* k = kernel_.load(std::memory_order_acquire)) k->InvalidateAttrs(ino);
  Child ch{new_name, new_name, static_cast<mode_t>(st->st_mode & S_IFMT), src->node, *st};
  ch.cacheable = kernel_ok;
  ch.st.st_ino = FileIno(src->node, st->st_ino);
  return Remember(new_parent, ch, names_epoch);
}

Status VfsImpl::Unlink(const Cred& c, uint64_t parent, const std::string& name) {
  const uint64_t dir_before = DirChanges();
  std::optional<DirChange> dir_change(std::in_place, *this);  // KeptDirAttr
  FEDFS_TRY(dir, ResolveDir(parent));
  // Its node does not tell this node's session (Inode::lookup_attr).
  UnlinkChanging(parent, dir->path, name);
  OpenDeferredOf(parent, name);  // before the name goes (vfs_deferred.cc)
  // In one call to a manager elsewhere, which has the file's node unlink it
  // (docs/namespace.md "Unlinks and renames in one call").
  auto one = deps_.vds->Unlink(dir->path, name, c);
  if (!one && one.error().code != ENOSYS && one.error().code != EPROTO) {
    if (one.error().code == ENOENT) AwaitVd(dir->path, name, Unlisted);  // removed meanwhile
    return Err(one.error());
  }
  if (one) {
    const VdEntry* e = one->part->Find(name);
    if (e == nullptr) return Err(ENOENT, JoinPath(dir->path, name));
    if (e->type == DT_DIR) return Err(EISDIR, JoinPath(dir->path, name));
    if (one->unlinked && !e->holders.empty()) {
      const DirAfter dir_after =
          DirAfterFileChange(dir->st_ino, *one->part, e->holders.front(), one->parent);
      DetachName(parent, name);
      dir_change.reset();
      KeepDirAfter(parent, dir_after, dir_before);
      return Ok();
    }
    // An alias (a conflict copy): unlinked here, as below.
  }
  NameLocks locks(deps_.vds);
  // The name read under its lock, in one round trip to the manager; an
  // alias (a conflict copy, whose real name differs) is read, then its real
  // name locked and read again.
  FEDFS_TRY(first, locks.TakeRead(dir->path, name));
  Result<VdPtr> vd = std::move(first->part);
  const VdEntry* e = (*vd)->Find(name);
  std::string locked = first->held ? name : std::string();  // the real name held
  for (int attempt = 0;; ++attempt) {
    if (e == nullptr) return Err(ENOENT, JoinPath(dir->path, name));
    if (e->type == DT_DIR) return Err(EISDIR, JoinPath(dir->path, name));
    const std::string r = e->RealName();
    if (r == locked || attempt == 3) break;  // (read again under the lock)
    if (auto s = locks.Take({{dir->path, r}}); !s) return s;
    locked = r;
    vd = deps_.vds->GetName(dir->path, name);
    if (!vd) return Err(vd.error());
    e = (*vd)->Find(name);
  }
  const std::string node = e->holders.empty() ? std::string() : e->holders.front();
  const std::string real = e->RealName();
  FEDFS_TRY(fs, FsOf(node));
  auto gone = (*fs)->UnlinkSeeingParent(c, JoinPath(dir->path, real));
  if (!gone) {
    if (gone.error().code == ENOENT) AwaitVd(dir->path, name, Unlisted);  // removed meanwhile
    return Err(gone.error());
  }
  const DirAfter dir_after = DirAfterFileChange(dir->st_ino, **vd, node, *gone);
  vd->reset();  // unshared, the manager changes VD(P) in place (vd_service.cc)
  if (ReportRemove(dir->path, real, node)) locks.Reported();
  DetachName(parent, name);
  dir_change.reset();
  KeepDirAfter(parent, dir_after, dir_before);
  return Ok();
}

// Starts over (a few times) when the directory gained or lost a holder
// between the first look and holding its name.
Status VfsImpl::Rmdir(const Cred& c, uint64_t parent, const std::string& name) {
  DirChange dir_change(*this);  // KeptDirAttr
  for (int attempt = 0;; ++attempt) {
    Status s = RmdirOnce(c, parent, name);
    if (s || s.error().context != "raced" || attempt == 4) return s;
  }
}

Status VfsImpl::RmdirOnce(const Cred& c, uint64_t parent, const std::string& name) {
  FEDFS_TRY(dir, ResolveDir(parent));
  FEDFS_TRY(vd, deps_.vds->GetName(dir->path, name));
  const VdEntry* e = (*vd)->Find(name);
  if (e == nullptr) return Err(ENOENT, JoinPath(dir->path, name));
  if (e->type != DT_DIR) return Err(ENOTDIR, JoinPath(dir->path, name));
  const std::string path = JoinPath(dir->path, name);
  const std::vector<std::string> holders = e->holders;
  if (auto s = NoDeadMember("rmdir " + path); !s) return s;
  if ((holders.size() > 1 || DeadMembers()) && deps_.dir_ops != nullptr) {
    if (auto s = deps_.dir_ops->RemoveDir(c, path, holders); !s) return s;
    ForgetSubtreeVds(path);
    DetachName(parent, name);
    return Ok();
  }
  NameLocks locks(deps_.vds);
  {
    // Read again under the lock, in the same call when the name is its
    // own real name (VdClient::LockRead).
    FEDFS_TRY(read, locks.TakeRead(dir->path, name));
    VdPtr vd2 = std::move(read->part);
    if (!read->held && vd2->Find(name) != nullptr) {
      if (auto s = locks.Take({{dir->path, name}}); !s) return s;
      FEDFS_TRY(again, deps_.vds->GetName(dir->path, name));
      vd2 = std::move(*again);
    }
    const VdEntry* e2 = vd2->Find(name);
    if (e2 == nullptr) return Err(ENOENT, path);
    if (e2->type != DT_DIR) return Err(ENOTDIR, path);
    if (e2->holders != holders) return Err(EAGAIN, "raced");
  }
  {
    if (holders.size() > 1) {
      // Without the journaled coordinator: refuse unless empty everywhere,
      // then remove it node by node (docs/namespace.md).
      FEDFS_TRY(child, deps_.vds->Get(path));
      if (!(*child)->entries.empty()) return Err(ENOTEMPTY, path);
    }
    for (const auto& h : holders) {
      FEDFS_TRY(fs, FsOf(h));
      if (auto s = (*fs)->Rmdir(c, path); !s && s.error().code != ENOENT) return s;
    }
  }
  bool reported = true;
  for (const auto& h : holders) reported = ReportRemove(dir->path, name, h) && reported;
  if (reported) locks.Reported();
  ForgetSubtreeVds(path);
  DetachName(parent, name);
  return Ok();
}

// A dead node may hold a part of any directory that no VD shows now (even
// of one that a single live node holds): removing or renaming it around
// that node would make the part reappear under the old name when it
// returns. So directory rmdir and rename go through the journaled
// operations, which record what the dead member must apply, or wait for the
// federation to be whole (dirops/dir_ops.h, "Dead nodes").
bool VfsImpl::DeadMembers() const { return !deps_.cluster->Current()->dead.empty(); }

Status VfsImpl::NoDeadMember(const std::string& what) const {
  auto view = deps_.cluster->Current();
  if (view->dead.empty()) return Ok();
  if (deps_.dir_ops != nullptr && deps_.dir_ops->RecordsDeadMembers()) return Ok();
  return Err(EHOSTDOWN, what + ": node " + view->dead.begin()->first +
                            " is dead: directory operations wait for it");
}

void VfsImpl::ForgetSubtreeVds(const std::string& path) {
  // The operation already succeeded; a failure here only leaves VDs that the
  // next epoch or eviction rebuilds, so it is logged, not returned.
  if (auto s = deps_.vds->DropSubtree(path); !s) {
    Log()->warn("forgetting the VDs under {}: {}", path, s.error().ToString());
  }
}

}  // namespace fedfs::ns
