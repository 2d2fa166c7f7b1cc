// VfsImpl: deferred opens (vfs/vfs_impl.h, VfsOptions::deferred_open;
// docs/namespace.md, "Opens without a round trip").
//
// A read-only open of a file held on another node that watches it for this
// one is answered at once: the kernel checked the caller's permission
// against attributes that node keeps exact (default_permissions), so the
// node would answer the open as the kernel did. The file is opened there at
// the handle's first operation that needs it (a read past the kernel's
// pages, a lock, an fsync, ...; WithFile), by its path then, as the opener,
// expecting the same file (NodeFs::OpenExpecting). Its name may have gone
// meanwhile:
//  * through this node (an unlink of it, a rename of it or over it): its
//    deferred handles are opened first (OpenDeferredOf);
//  * through another node or the file's own node's mount: that node opens
//    the file for this one before the name goes and hands the handle over
//    in the change's callback (files/file_service.h, "Deferred opens";
//    RemotePinned): the deferred handles of the file adopt it (several of
//    them share it, shared_), or it is released;
//  * a move to another node: the open at the old node answers ESTALE, and
//    the handle is opened where the file is now (Reopened).
// What is not kept: a file unlinked or renamed behind FedFS' back on its
// node (a local program), or moved with its directory by another node (the
// path this node knows names nothing): such a handle's first use answers
// ESTALE, where an open made at once reads on.
#include <fcntl.h>

#include "common/logging.h"
#include "vfs/vfs_impl.h"
#include "vfs/vfs_util.h"

namespace fedfs::ns {

using namespace vfs_detail;

// A handle answered without asking, or nullopt when `flags` or the file's
// state need its node now.
std::optional<FileOut> VfsImpl::DeferredOpen(const Cred& c, uint64_t ino, int flags,
                                             const std::shared_ptr<NodeFs>& fs,
                                             const std::string& node) {
  if (!options_.deferred_open || fs.get() == deps_.local) return std::nullopt;
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT)) != 0) return std::nullopt;
  OpenFile f{fs, 0, ino, false, false, AppendOnly(flags), flags};
  f.deferred = true;
  f.cred = c;
  f.session = fs->SessionCount();
  {
    std::lock_guard lock(mu_);
    const Inode* n = table_.Find(ino);
    if (n == nullptr || !S_ISREG(n->type) || n->node != node || !n->linked) return std::nullopt;
    f.expect = n->st_ino & kInoMask;
  }
  {
    std::lock_guard lock(files_mu_);
    auto w = watch_of_.find(ino);
    if (w == watch_of_.end() || w->second.first != node) return std::nullopt;
    f.watch = w->second.second;
  }
  FileOut out;
  out.direct_io = f.direct;
  out.fh = AddFile(std::move(f), &out.keep_cache);
  deferred_opened_.fetch_add(1, std::memory_order_relaxed);
  return out;
}

// Opens deferred handle `fh` (as `at`) at its node; its OpenFile now.
// ESTALE: its path names another file or none there.
Result<VfsImpl::OpenFile> VfsImpl::Materialized(uint64_t fh, const OpenFile& at) {
  auto path = PathOf(at.ino);
  Result<Opened> op = Err(ESTALE, "the file's name is gone");
  if (path) {
    // The watch names the file only in the session it was made in.
    const Handle watch = at.fs->SessionCount() == at.session ? at.watch : 0;
    op = at.fs->OpenExpecting(at.cred, *path, at.flags & ~(O_CREAT | O_EXCL | O_TRUNC), at.expect,
                              watch);
    if (!op && op.error().code == ENOENT) op = Err(ESTALE, *path + ": gone since it was opened");
  }
  std::unique_lock lock(files_mu_);
  auto it = files_.find(fh);
  if (it == files_.end() || !it->second.deferred) {
    // Released, adopted a handle or opened by another thread meanwhile.
    Result<OpenFile> now = Err(EBADF, "file handle released");
    if (it != files_.end()) now = it->second;
    lock.unlock();
    if (op) (void)at.fs->ReleaseLater(op->handle);  // may send: not under the lock
    return now;
  }
  if (!op) {
    if (op.error().code == ESTALE) deferred_stale_.fetch_add(1, std::memory_order_relaxed);
    Logger("vfs")->debug("inode {}: deferred open at {}: {}", at.ino, at.fs->node_id(),
                         op.error().ToString());
    return Err(op.error());
  }
  OpenFile& f = it->second;
  ForgetDeferredLocked(f, fh);
  f.deferred = false;
  f.handle = op->handle;
  f.told = op->attr_callbacks;
  if (f.told) told_.emplace(std::make_pair(f.fs->node_id(), f.handle), f.ino);
  deferred_used_.fetch_add(1, std::memory_order_relaxed);
  return f;
}

// Before this node changes the name of inode (parent, name): its deferred
// handles are opened first (a name gone cannot be opened).
void VfsImpl::OpenDeferredOf(uint64_t parent, const std::string& name) {
  if (!options_.deferred_open) return;
  std::optional<uint64_t> ino;
  {
    std::lock_guard lock(mu_);
    ino = table_.Named(parent, name);
  }
  if (!ino) return;
  std::vector<std::pair<uint64_t, OpenFile>> todo;
  {
    std::lock_guard lock(files_mu_);
    auto [b, e] = files_by_ino_.equal_range(*ino);
    for (auto i = b; i != e; ++i) {
      auto f = files_.find(i->second);
      if (f != files_.end() && f->second.deferred) todo.emplace_back(i->second, f->second);
    }
  }
  for (const auto& [fh, f] : todo) (void)Materialized(fh, f);  // ESTALE: its first use says so
}

void VfsImpl::ForgetDeferredLocked(const OpenFile& f, uint64_t fh) {
  auto [b, e] = deferred_.equal_range({f.fs->node_id(), f.watch});
  for (auto i = b; i != e; ++i) {
    if (i->second == fh) {
      deferred_.erase(i);
      return;
    }
  }
}

// A handle several OpenFiles use (an adopted one) loses one: true if others
// still use it (not to be released).
bool VfsImpl::UnshareLocked(const std::string& node, Handle h) {
  auto it = shared_.find({node, h});
  if (it == shared_.end()) return false;
  if (--it->second > 0) return true;
  shared_.erase(it);
  return false;
}

std::vector<Handle> VfsImpl::RemotePinned(const std::string& node,
                                          const std::vector<std::pair<Handle, Handle>>& pinned) {
  std::vector<Handle> unused;
  {
    std::lock_guard lock(files_mu_);
    for (const auto& [watch, rh] : pinned) {
      auto [b, e] = deferred_.equal_range({node, watch});
      std::vector<uint64_t> fhs;
      for (auto i = b; i != e; ++i) fhs.push_back(i->second);
      deferred_.erase(b, e);
      int n = 0;
      for (uint64_t fh : fhs) {
        auto it = files_.find(fh);
        if (it == files_.end() || !it->second.deferred) continue;
        OpenFile& f = it->second;
        // A watch of an earlier session with the node: another file may
        // have its id now (opened by path at its first use instead).
        if (f.fs->SessionCount() != f.session) continue;
        f.deferred = false;
        f.handle = rh;
        f.told = true;  // the node tells its sessions of handles it opened for them
        if (n++ == 0) told_.emplace(std::make_pair(node, rh), f.ino);
      }
      if (n == 0) {
        unused.push_back(rh);
        continue;
      }
      if (n > 1) shared_[{node, rh}] = n;
      deferred_adopted_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    }
  }
  return unused;
}

void VfsImpl::ReleaseUnadopted(const std::string& node, const std::vector<Handle>& handles) {
  auto fs = FsOf(node);
  if (!fs) return;  // the node's session ends with it
  for (Handle h : handles) (void)(*fs)->ReleaseLater(h);
}

VfsImpl::DeferredStats VfsImpl::deferred_stats() const {
  return DeferredStats{deferred_opened_.load(), deferred_used_.load(), deferred_adopted_.load(),
                       deferred_stale_.load()};
}

}  // namespace fedfs::ns
