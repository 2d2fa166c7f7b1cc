// VfsImpl: handles of a file that moved to another node (migration/): its
// old node answers ESTALE to every operation through them, and they are
// opened again where the file is now (vfs/vfs_impl.h, Reopened).
#include <dirent.h>
#include <fcntl.h>

#include "common/logging.h"
#include "common/path.h"
#include "vfs/vfs_impl.h"

namespace fedfs::ns {

Result<VfsImpl::OpenFile> VfsImpl::Reopened(uint64_t fh, const OpenFile& stale) {
  const Error moved{ESTALE, "the file moved"};
  auto path = PathOf(stale.ino);
  if (!path) path = FormerPathOf(stale.ino);
  if (!path) {
    Logger("vfs")->debug("inode {}: its file moved from {}; its path: {}", stale.ino, stale.fs->node_id(),
                         path.error().ToString());
    return Err(moved);
  }
  const std::string dir(ParentPath(*path)), name(BaseName(*path));
  auto vd = deps_.vds->GetFresh(dir);
  const VdEntry* e = vd ? (*vd)->Find(name) : nullptr;
  if (e == nullptr || e->type == DT_DIR || e->holders.empty() ||
      e->holders.front() == stale.fs->node_id()) {
    Logger("vfs")->debug("{}: its file moved from {}, but {}", *path, stale.fs->node_id(),
                         !vd ? "its directory: " + vd.error().ToString()
                             : e == nullptr ? std::string("no such name now")
                                            : "no other node holds it now");
    return Err(moved);  // not held elsewhere: ESTALE stands
  }
  const std::string node = e->holders.front();
  auto fs = FsOf(node);
  if (!fs) return Err(fs.error());
  auto op = (*fs)->Open(Cred{}, *path, stale.flags & ~(O_CREAT | O_EXCL | O_TRUNC));
  if (!op) {
    Logger("vfs")->debug("{}: its file moved from {} to {}, which did not open it: {}", *path,
                         stale.fs->node_id(), node, op.error().ToString());
    return Err(op.error());
  }
  OpenFile now = stale;
  bool release_stale = false;
  now.fs = *fs;
  now.handle = op->handle;
  now.told = op->attr_callbacks;
  {
    std::lock_guard lock(files_mu_);
    auto it = files_.find(fh);
    if (it == files_.end() || it->second.fs != stale.fs || it->second.handle != stale.handle) {
      // Released meanwhile, or opened again by another thread first.
      const bool gone = it == files_.end();
      OpenFile current = gone ? OpenFile{} : it->second;
      (void)now.fs->Release(now.handle);  // best effort: a handle nobody uses
      if (gone) return Err(EBADF, "file handle released");
      return current;
    }
    if (it->second.deferred) ForgetDeferredLocked(it->second, fh);
    it->second.deferred = false;
    // A deferred handle opened nothing at the old node; a shared one stays
    // open for the others that use it.
    release_stale = !stale.deferred && !UnshareLocked(stale.fs->node_id(), stale.handle);
    if (stale.told && release_stale) told_.erase({stale.fs->node_id(), stale.handle});
    if (now.told) told_.emplace(std::make_pair(node, now.handle), stale.ino);
    pages_.erase(stale.ino);  // the next open keeps no page
    // Watches of the file at its old node tell of nothing more.
    DropWatchLocked(stale.ino);
    DropPageWatchesLocked(stale.ino);
    it->second.fs = now.fs;
    it->second.handle = now.handle;
    it->second.told = now.told;
    now = it->second;
  }
  {
    std::lock_guard lock(mu_);
    if (Inode* n = table_.Find(stale.ino)) {
      n->node = node;
      n->st_ino = FileIno(node, op->st.st_ino);
    }
  }
  if (release_stale) (void)stale.fs->Release(stale.handle);  // best effort: the old copy is gone
  Logger("vfs")->info("a handle of {} follows it from {} to {}", *path, stale.fs->node_id(), node);
  return now;
}

// A lookup through this node found the file at its new node first and gave
// it a new inode (the number differs there): the old one was unlinked as
// replaced, its name taken by the moved file.
Result<std::string> VfsImpl::FormerPathOf(uint64_t ino) const {
  std::lock_guard lock(mu_);
  const Inode* n = table_.Find(ino);
  if (n == nullptr || !n->replaced || S_ISDIR(n->type)) return Err(ENOENT, "inode " + std::to_string(ino));
  std::string dir = table_.Path(n->parent);
  if (dir.empty()) return Err(ENOENT, "inode " + std::to_string(ino) + ": its directory was removed");
  return JoinPath(dir, n->real_name);
}

}  // namespace fedfs::ns
