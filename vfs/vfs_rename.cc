// VfsImpl: renames (vfs/vfs_impl.h): within one directory in one call to a
// manager elsewhere where it can, else its names held, the holder's rename,
// the changes reported; journaled across nodes for directories held by
// several nodes and for a replaced file on another node.
#include "vfs/vfs_impl.h"

#include <dirent.h>
#include <linux/fs.h>

#include <algorithm>
#include <cstdio>

#include "common/logging.h"
#include "common/path.h"
#include "vfs/vfs_util.h"

namespace fedfs::ns {

using namespace vfs_detail;

namespace {

// A directory this node renamed (or exchanged) takes the names its kernel
// caches beneath it, present and missing, along to their new paths: the
// kernel moves the directory's dentry with its children when the reply
// arrives. No manager of those paths handed them to this node, so none
// would tell it of their next change, and this node's own change of the
// parents drops nothing here ("Kernel caches", docs/namespace.md): a
// missing name kept that way hid a file that another node then created
// there (the chaos run). So they are dropped, all at once as the kernel
// takes it, after the table names the moved inodes anew: a lookup after
// the drop reads the new paths, one in flight goes out uncached.
void DropMovedNames(KernelCache* k) {
  if (k != nullptr && k->Coherent()) k->InvalidateNames();
}

}  // namespace

// A rename reads its two names, then holds them (a lock, or a claim of a new
// name) and checks them again: one call to the manager within a directory.
// Another node may change them in between; then it starts over, holding both
// names before it reads them, so that the second try cannot lose a race (a
// bounded number of first-style tries made a rename in a busy shared
// directory fail with EEXIST, which rename(2) never returns).
Status VfsImpl::Rename(const Cred& c, uint64_t parent, const std::string& name,
                       uint64_t new_parent, const std::string& new_name, unsigned flags) {
  Changing();  // its node does not tell this node's session (Inode::lookup_attr)
  DirChange dir_change(*this);  // KeptDirAttr
  for (int attempt = 0;; ++attempt) {
    Status s = RenameOnce(c, parent, name, new_parent, new_name, flags, attempt > 0);
    const bool raced = !s && s.error().code == EEXIST && s.error().context == "raced";
    if (!raced) return s;
    // Held first, only the source's entry can have changed before it was
    // held: each try after the first follows another node's finished change.
    if (attempt == 64) return Err(EAGAIN, "rename: " + name + " keeps changing");
  }
}

Status VfsImpl::RenameOnce(const Cred& c, uint64_t parent, const std::string& name,
                           uint64_t new_parent, const std::string& new_name, unsigned flags,
                           bool hold_first) {
  if (auto s = ValidateName(new_name); !s) return Err(s.error());
  if ((flags & RENAME_EXCHANGE) && (flags & RENAME_NOREPLACE)) return Err(EINVAL, "rename flags");
  FEDFS_TRY(sdir, ResolveDir(parent));
  FEDFS_TRY(ddir, ResolveDir(new_parent));
  // Before their names go (vfs_deferred.cc).
  OpenDeferredOf(parent, name);
  OpenDeferredOf(new_parent, new_name);
  // The kernel keeps the name it moves (and, exchanged, the other one).
  for (const std::string* n : {&name, &new_name}) {
    NamesFrom(sdir->path, *n);
    NamesFrom(ddir->path, *n);
  }
  FEDFS_TRY(svd, deps_.vds->GetName(sdir->path, name));
  const VdEntry* se = (*svd)->Find(name);
  if (se == nullptr) return Err(ENOENT, JoinPath(sdir->path, name));
  const VdEntry src = *se;
  const std::string sreal = src.RealName();
  const std::string from = JoinPath(sdir->path, sreal);
  const std::string to = JoinPath(ddir->path, new_name);
  // Onto itself: nothing to do, unless the caller asked not to replace an
  // existing name (it exists: it is the source).
  if (from == to) return (flags & RENAME_NOREPLACE) ? Status(Err(EEXIST, to)) : Ok();
  if (src.type == DT_DIR && PathWithin(to, from)) return Err(EINVAL, "rename into itself");
  // The source's name, and the destination's if it exists, are held until
  // the change is reported.
  NameLocks locks(deps_.vds);
  if (hold_first) {
    // Both names held, then read: no other node changes them in between. A
    // lock of a name that does not exist holds it as a claim does.
    if (auto s = locks.Take({{sdir->path, sreal}, {ddir->path, new_name}}); !s) return s;
    FEDFS_TRY(again, deps_.vds->GetName(sdir->path, name));
    if (!SameEntry((*again)->Find(name), src)) return Err(EEXIST, "raced");
    svd = std::move(again);
  }
  // A partial VD holds one name: the destination's is asked for apart.
  FEDFS_TRY(dvd, sdir->path == ddir->path && !(*svd)->partial
                     ? Result<VdPtr>(*svd)
                     : deps_.vds->GetName(ddir->path, new_name));
  const VdEntry* de = (*dvd)->Find(new_name);
  std::optional<VdEntry> dst;
  if (de) dst = *de;
  const std::optional<VdEntry> dst_read = dst;  // as read, before the decisions below
  if (dst && (flags & RENAME_NOREPLACE)) return Err(EEXIST, to);
  if (!dst && (flags & RENAME_EXCHANGE)) return Err(ENOENT, to);
  // A file renamed to a new name within one directory managed elsewhere:
  // one call to its manager, which has the file's node rename it
  // (docs/namespace.md "Unlinks and renames in one call").
  if (!dst && !hold_first && sdir->path == ddir->path && src.type != DT_DIR && sreal == name &&
      src.holders.size() == 1 && (flags & ~unsigned{RENAME_NOREPLACE}) == 0) {
    RenamingAway renaming(this, from);
    auto one = deps_.vds->Rename(sdir->path, name, new_name, flags, c);
    if (one && one->renamed) {
      std::lock_guard lock(mu_);
      const std::optional<uint64_t> s_ino = table_.TakeName(parent, name);
      const std::optional<uint64_t> d_ino = table_.TakeName(new_parent, new_name);
      if (d_ino) table_.Find(*d_ino)->linked = false;
      if (s_ino) table_.Move(*s_ino, new_parent, new_name);
      return Ok();
    }
    if (!one) {
      const int e = one.error().code;
      // The new name exists (at the manager, or at the file's node): a
      // replace, held first on the next try.
      if (e == EEXIST) {
        return (flags & RENAME_NOREPLACE) ? Status(Err(EEXIST, to)) : Status(Err(EEXIST, "raced"));
      }
      if (e == ENOENT) AwaitVd(sdir->path, name, Unlisted);  // removed meanwhile
      if (e != ENOSYS && e != EPROTO) return Err(one.error());
    }
    // Not renamed there (or not asked): renamed here, as below.
  }

  const bool src_dir = src.type == DT_DIR;
  std::string node;  // where the rename runs
  if (src_dir) {
    if (auto s = NoDeadMember("rename " + from); !s) return s;
    const bool single = !DeadMembers() && src.holders.size() == 1 &&
                        (!dst || (dst->holders.size() == 1 && dst->holders[0] == src.holders[0]));
    if (!single) {
      if (deps_.dir_ops == nullptr) {
        return Err(EXDEV, "rename of a directory held by several nodes: " + from);
      }
      if (auto s = deps_.dir_ops->RenameDir(c, from, to, flags, src.holders); !s) return s;
      ForgetSubtreeVds(from);
      ForgetSubtreeVds(to);
      {
        std::lock_guard lock(mu_);
        table_.Unlink(new_parent, new_name);
        if (auto ino = table_.TakeName(parent, name)) table_.Move(*ino, new_parent, new_name);
      }
      DropMovedNames(kernel_.load(std::memory_order_acquire));
      return Ok();
    }
    node = src.holders[0];
  } else {
    node = src.holders.empty() ? std::string() : src.holders.front();
  }
  // The destination's copy on another node, removed after the rename.
  std::optional<std::pair<std::string, std::string>> remote_dst;  // (node, real name)
  if (dst) {
    const bool dst_dir = dst->type == DT_DIR;
    if (!(flags & RENAME_EXCHANGE)) {
      if (src_dir && !dst_dir) return Err(ENOTDIR, to);
      if (!src_dir && dst_dir) return Err(EISDIR, to);
    }
    const bool dst_here = std::find(dst->holders.begin(), dst->holders.end(), node) !=
                          dst->holders.end();
    const std::string dreal = dst->RealName();
    if (!dst_here || dreal != new_name) {
      if (flags & RENAME_EXCHANGE) return Err(EXDEV, "exchange across nodes: " + from + ", " + to);
      if (dst_dir) return Err(EXDEV, "replace a directory on another node: " + to);
      // The destination lives on another node (or under another real name):
      // rename first (so a failed rename deletes nothing), then remove that
      // copy, journaled across nodes (DirOps::ReplaceFile).
      remote_dst = std::make_pair(dst->holders.front(), dreal);
      dst.reset();
    }
  }
  // A new name is claimed, unless it is held already. What was read before
  // the names were held is checked again once they are (another node may
  // have changed them meanwhile: start over).
  const bool claimed = !dst && !remote_dst && !hold_first;
  // Within one directory, the lock on the source and the claim of the new
  // name are one call to the manager; otherwise the locks (in order), then
  // the claim.
  const bool lock_and_claim = claimed && sdir->path == ddir->path;
  // EEXIST on the claim: the name was created meanwhile; then replace it.
  const auto raced_if_exists = [](Status s) -> Status {
    if (s || s.error().code != EEXIST) return s;
    return Err(EEXIST, "raced");
  };
  if (!hold_first) {
    if (lock_and_claim) {
      if (Status s = raced_if_exists(locks.TakeWithClaim(sdir->path, sreal, new_name)); !s) {
        return s;
      }
    } else {
      std::vector<std::pair<std::string, std::string>> names{{sdir->path, sreal}};
      if (!claimed) names.emplace_back(ddir->path, new_name);
      if (auto s = locks.Take(std::move(names)); !s) return s;
    }
    auto unchanged = [&]() -> Status {
      FEDFS_TRY(svd2, deps_.vds->GetName(sdir->path, name));
      if (!SameEntry((*svd2)->Find(name), src)) return Err(EEXIST, "raced");
      FEDFS_TRY(dvd2, sdir->path == ddir->path && !(*svd2)->partial
                          ? Result<VdPtr>(*svd2)
                          : deps_.vds->GetName(ddir->path, new_name));
      if (!SameEntry((*dvd2)->Find(new_name), dst_read)) return Err(EEXIST, "raced");
      return Ok();
    };
    if (Status same = unchanged(); !same) {
      if (lock_and_claim) ReleaseNew(ddir->path, new_name);
      return same;
    }
  }
  if (claimed && !lock_and_claim) {
    if (Status s = raced_if_exists(deps_.vds->Claim(ddir->path, new_name)); !s) return s;
  }
  // Known as being renamed away until the table names the inode anew.
  RenamingAway renaming(this, from);
  Status done = EnsureDirOn(c, node, ddir->path, *dvd);
  auto fs = FsOf(node);
  if (done && !fs) done = Err(fs.error());
  if (done && remote_dst && remote_dst->first != node && deps_.dir_ops != nullptr) {
    // Over a file on another node: journaled, so that a crash leaves one of
    // the two at the name (dirops/dir_ops.h, ReplaceFile).
    done = deps_.dir_ops->ReplaceFile(c, from, node, to, JoinPath(ddir->path, remote_dst->second),
                                      remote_dst->first);
  } else if (done) {
    done = (*fs)->Rename(c, from, to, flags);
    if (done && remote_dst) {  // one node, or no journal wired (tests): rename, then unlink
      auto dfs = FsOf(remote_dst->first);
      Status gone = dfs ? (*dfs)->Unlink(c, JoinPath(ddir->path, remote_dst->second))
                        : Status(Err(dfs.error()));
      if (!gone && gone.error().code != ENOENT) {
        Log()->warn("rename {} -> {}: the replaced copy on {} stays: {}", from, to,
                    remote_dst->first, gone.error().ToString());
        remote_dst.reset();
      }
    }
  }
  if (!done) {
    if (claimed) ReleaseNew(ddir->path, new_name);
    // The source went meanwhile (another node removed or renamed it).
    if (done.error().code == ENOENT) AwaitVd(sdir->path, name, Unlisted);
    return done;
  }
  if (src_dir || (dst && dst->type == DT_DIR)) {
    ForgetSubtreeVds(from);
    ForgetSubtreeVds(to);
  }
  if (!(flags & RENAME_EXCHANGE) && dst && (*fs)->Stat(c, from)) {
    // Two hard links of one file: rename(2) does nothing, both names stay.
    return Ok();
  }
  svd->reset();  // unshared, the managers change the VDs in place (vd_service.cc)
  dvd->reset();
  std::vector<VdEdit> src_edits{{.add = false, .name = sreal, .node = node}};
  std::vector<VdEdit> dst_edits;
  if (flags & RENAME_EXCHANGE) {
    dst_edits.push_back({.add = false, .name = new_name, .node = node});
    src_edits.push_back({.add = true, .name = sreal, .type = dst->type, .node = node, .id = dst->id});
  }
  if (remote_dst) dst_edits.push_back({.add = false, .name = remote_dst->second, .node = remote_dst->first});
  dst_edits.push_back({.add = true, .name = new_name, .type = src.type, .node = node, .id = src.id});
  if (sdir->path == ddir->path) {
    // One directory: one change, seen whole or not at all.
    src_edits.insert(src_edits.end(), dst_edits.begin(), dst_edits.end());
    if (ReportEdits(sdir->path, src_edits)) locks.Reported();
  } else {
    // Two directories, two managers: the new name first, so that a reader in
    // between sees both names rather than neither.
    const bool d = ReportEdits(ddir->path, dst_edits);
    if (ReportEdits(sdir->path, src_edits) && d) locks.Reported();
  }

  {
    std::lock_guard lock(mu_);
    const std::optional<uint64_t> s_ino = table_.TakeName(parent, name);
    const std::optional<uint64_t> d_ino = table_.TakeName(new_parent, new_name);
    if (flags & RENAME_EXCHANGE) {
      if (s_ino) table_.Move(*s_ino, new_parent, new_name);
      if (d_ino) table_.Move(*d_ino, parent, sreal);
    } else {
      if (d_ino) table_.Find(*d_ino)->linked = false;
      if (s_ino) table_.Move(*s_ino, new_parent, new_name);
    }
  }
  if (src_dir || ((flags & RENAME_EXCHANGE) && dst && dst->type == DT_DIR)) {
    DropMovedNames(kernel_.load(std::memory_order_acquire));
  }
  return Ok();
}

}  // namespace fedfs::ns
