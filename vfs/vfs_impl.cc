// VfsImpl: construction, inode numbers, resolution, attribute caches and
// the helpers the operations share (vfs/vfs_impl.h).
#include "vfs/vfs_impl.h"

#include <dirent.h>
#include <linux/fs.h>
#include <sys/file.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "common/cooperative.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/path.h"
#include "vfs/vfs_util.h"

namespace fedfs::ns {

using namespace vfs_detail;


VfsImpl::VfsImpl(VfsOptions options, VfsDeps deps)
    : options_(std::move(options)),
      deps_(std::move(deps)),
      streams_({.after = options_.stream_after}),
      table_(kRootIno, [] {
        Inode root;
        root.parent = 0;
        root.type = S_IFDIR;
        root.st_ino = DirIno("/");
        root.nlookup = 1;  // never forgotten
        root.generation = 1;
        return root;
      }()) {}

VfsImpl::~VfsImpl() = default;

// ---------------------------------------------------------------- helpers

uint64_t VfsImpl::DirIno(uint64_t id, const std::string& path) {
  return (kDirTag << 48) | ((id != 0 ? id : StableHash(path)) & kInoMask);
}

uint16_t VfsImpl::TagOf(const std::string& node) const {
  if (node.empty() || node == deps_.cluster->Current()->self) return options_.node_tag;
  if (deps_.tag_of) {
    if (const uint16_t t = deps_.tag_of(node); t != 0) return t;
  }
  // Derived tag, kept away from 0, 0xffff and this node's configured tag.
  uint16_t t = static_cast<uint16_t>(StableHash(node) % 65534 + 1);
  if (t == options_.node_tag) t = static_cast<uint16_t>(t % 65534 + 1);
  return t;
}

uint64_t VfsImpl::FileIno(const std::string& node, uint64_t local_ino) const {
  return (uint64_t{TagOf(node)} << 48) | (local_ino & kInoMask);
}

uint64_t VfsImpl::GlobalOwner(uint64_t owner) const {
  return (uint64_t{options_.node_tag} << 48) ^ owner;
}

Result<VfsImpl::Resolved> VfsImpl::Resolve(uint64_t ino) const {
  std::lock_guard lock(mu_);
  const Inode* n = table_.Find(ino);
  if (n == nullptr) return Err(ESTALE, "unknown inode " + std::to_string(ino));
  std::string path = table_.Path(ino);
  if (path.empty()) return Err(ENOENT, "inode " + std::to_string(ino) + " was removed");
  return Resolved{std::move(path), n->type, n->node, n->st_ino};
}

Result<VfsImpl::Resolved> VfsImpl::ResolveDir(uint64_t ino) const {
  auto r = Resolve(ino);
  if (r && !IsDir(r->type)) return Err(ENOTDIR, r->path);
  return r;
}

Result<std::shared_ptr<NodeFs>> VfsImpl::FsOf(const std::string& node) {
  auto view = deps_.cluster->Current();
  if (node.empty() || node == view->self) {
    // Non-owning alias of the local NodeFs.
    return std::shared_ptr<NodeFs>(std::shared_ptr<NodeFs>{}, deps_.local);
  }
  auto live = view->live.find(node);
  if (live == view->live.end()) {
    return Err(EHOSTDOWN, "node " + node + " is down");
  }
  {
    std::lock_guard lock(remotes_mu_);
    if (auto it = remotes_.find(node); it != remotes_.end()) return it->second;
  }
  if (!deps_.make_remote) return Err(EHOSTDOWN, "no remote access to node " + node);
  std::shared_ptr<NodeFs> fs = deps_.make_remote(node, live->second);
  if (!fs) return Err(EHOSTDOWN, "cannot reach node " + node);
  std::lock_guard lock(remotes_mu_);
  auto [it, inserted] = remotes_.emplace(node, std::move(fs));
  return it->second;
}

Result<struct stat> VfsImpl::DirAttr(const Cred& c, const std::string& path, const VdPtr& vd,
                                     uint64_t st_ino) {
  Error last{ENOENT, path};
  for (const auto& h : vd->holders) {  // sorted by node id
    auto fs = FsOf(h);
    if (!fs) {
      last = fs.error();
      continue;
    }
    auto st = (*fs)->Stat(c, path);
    if (!st) {
      last = st.error();
      if (st.error().code == EACCES || st.error().code == EPERM) return Err(st.error());
      continue;
    }
    if (!S_ISDIR(st->st_mode)) continue;  // changed behind our back
    st->st_nlink = 2 + vd->subdirs;
    st->st_ino = st_ino;
    return *st;
  }
  return Err(std::move(last));
}

std::optional<struct stat> VfsImpl::KeptDirAttrOf(uint64_t ino) {
  std::lock_guard lock(dir_attrs_mu_);
  auto it = dir_attrs_.find(ino);
  if (it == dir_attrs_.end()) return std::nullopt;
  if (it->second.changes != DirChanges() ||
      SteadyNow() - it->second.at > kDirAttrReuse) {
    dir_attrs_.erase(it);
    return std::nullopt;
  }
  return it->second.st;
}

void VfsImpl::KeepDirAttr(uint64_t ino, const struct stat& st, uint64_t changes) {
  const auto now = SteadyNow();
  std::lock_guard lock(dir_attrs_mu_);
  if (changes != DirChanges()) return;
  if (dir_attrs_.size() >= 4096) {
    std::erase_if(dir_attrs_, [&](const auto& e) { return now - e.second.at > kDirAttrReuse; });
  }
  dir_attrs_[ino] = KeptDirAttr{st, now, changes};
}

auto VfsImpl::DirAfterFileChange(uint64_t dir_st_ino, const VirtualDirectory& vd,
                                 const std::string& node,
                                 const std::optional<struct stat>& parent) const -> DirAfter {
  DirAfter a;
  if (vd.holders.empty()) return a;
  if (vd.holders.front() != node) {
    a.carry = std::find(vd.holders.begin(), vd.holders.end(), node) != vd.holders.end();
  } else if (parent) {
    a.st = *parent;
    a.st->st_nlink = 2 + vd.subdirs;
    a.st->st_ino = dir_st_ino;
  }
  return a;
}

void VfsImpl::KeepDirAfter(uint64_t ino, const DirAfter& a, uint64_t before) {
  if (a.st) return KeepDirAttr(ino, *a.st, before + 2);
  if (!a.carry) return;
  std::lock_guard lock(dir_attrs_mu_);
  auto it = dir_attrs_.find(ino);
  if (it == dir_attrs_.end()) return;
  // Its own two bumps only.
  if (it->second.changes == before && DirChanges() == before + 2) {
    it->second.changes = before + 2;
  }
}

Result<VfsImpl::Child> VfsImpl::ChildFromEntry(const Cred& c, const std::string& dir_path,
                                               const VdEntry& e) {
  Child ch;
  ch.name = e.name;
  ch.real_name = e.RealName();
  ch.type = TypeFromDt(e.type);
  const std::string path = JoinPath(dir_path, ch.real_name);
  if (e.type == DT_DIR) {
    auto vd = deps_.vds->GetSummary(path);
    if (!vd) return Err(vd.error());
    auto st = DirAttr(c, path, *vd, DirIno(e.id, path));
    if (!st) return Err(st.error());
    ch.st = *st;
    return ch;
  }
  if (e.holders.empty()) return Err(ENOENT, path + " has no holder");
  ch.node = e.holders.front();
  auto fs = FsOf(ch.node);
  if (!fs) return Err(fs.error());
  Result<struct stat> st = Err(EIO, "stat");
  // A remote file: its node is asked to tell of its changes, so that the
  // getattr after this lookup needs no second request (Remember, LookupAttr).
  if (e.type == DT_REG && Watchable(ch.node)) {
    ch.changes = local_changes_.load(std::memory_order_acquire);
    auto ws = StatForLookup(c, dir_path, ch.real_name, ch.node, **fs, &ch.taken);
    if (!ws) return Err(ws.error());
    st = ws->st;
    if (S_ISREG(ws->st.st_mode) && ws->st.st_nlink == 1) ch.watch = ws->watch;
  } else {
    st = (*fs)->Stat(c, path);
  }
  if (!st) return Err(st.error());
  ch.type = st->st_mode & S_IFMT;
  st->st_ino = FileIno(ch.node, st->st_ino);
  ch.st = *st;
  return ch;
}


// An entry that its holder no longer has is being removed, renamed or
// replaced (by a file on another node) by another operation whose VD update
// has not reached the manager yet: the VD is asked again (from the manager)
// until the entry changed, for a bounded time, and the lookup tried again;
// so a lookup that answers ENOENT is never followed by a listing that still
// shows the name, and a name that always existed is never missed.
Result<VfsImpl::Child> VfsImpl::LookupChild(const Cred& c, const std::string& dir_path,
                                            const std::string& name, bool* absent) {
  for (int attempt = 0;; ++attempt) {
    auto vd = deps_.vds->GetName(dir_path, name);
    if (!vd) return Err(vd.error());
    const VdEntry* e = (*vd)->Find(name);
    if (e == nullptr) {
      if (absent != nullptr) *absent = (*vd)->cacheable && (*vd)->kernel_may_cache;
      return Err(ENOENT, JoinPath(dir_path, name));
    }
    auto ch = ChildFromEntry(c, dir_path, *e);
    if (!ch && ch.error().code == ENOENT && e->type != DT_DIR) {
      if (attempt == 2) return Err(ENOENT, JoinPath(dir_path, name));
      const std::optional<VdEntry> was = *e;
      AwaitVd(dir_path, name, [&](const VdEntry* now) { return !SameEntry(now, was); });
      continue;
    }
    if (ch) ch->cacheable = (*vd)->cacheable && (*vd)->kernel_may_cache;
    return ch;
  }
}

// Until VD(dir) from its manager shows `name` as `settled` wants (listed, no
// longer listed, changed), for at most ~50 ms: another node's operation
// changed the holder first and reports to the manager next. Answering before
// the manager agrees would let a later listing contradict this answer.
void VfsImpl::AwaitVd(const std::string& dir, const std::string& name,
                      const std::function<bool(const VdEntry*)>& settled) {
  auto backoff = std::chrono::microseconds(200);
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto vd = deps_.vds->GetFresh(dir);
    if (!vd || settled((*vd)->Find(name))) return;
    SleepFor(backoff);  // a fiber sleeps in simulated time (common/cooperative.h)
    backoff *= 2;
  }
}

void VfsImpl::NamesFrom(const std::string& dir, const std::string& name) const {
  if (KernelCache* k = kernel_.load(std::memory_order_acquire)) k->NamesFrom(dir, name);
}

uint64_t VfsImpl::NamesEpoch() const {
  KernelCache* k = kernel_.load(std::memory_order_acquire);
  return k != nullptr ? k->NamesEpoch() : 0;
}

EntryOut VfsImpl::Remember(uint64_t parent, const Child& ch, uint64_t names_epoch) {
  EntryOut out;
  out.attr = ch.st;
  out.attr_timeout = options_.attr_timeout;
  out.entry_timeout = options_.entry_timeout;
  KernelCache* const k = kernel_.load(std::memory_order_acquire);
  if (k != nullptr && ch.cacheable && k->Coherent() && k->NamesEpoch() == names_epoch) {
    out.entry_timeout = std::max(out.entry_timeout, options_.coherent_entry_timeout);
    out.attr_timeout = CoherentAttrTimeout(ch.type, ch.node, ch.st.st_nlink);
  }
  std::lock_guard lock(mu_);
  // Attributes its node tells the changes of: the getattr that follows
  // this lookup may answer them (the kernel keeps that answer). So may the
  // kernel keep them from this reply at once, as it would that getattr's
  // (AttrTimeout), when nothing that LookupAttr checks stands against it:
  // this node changed no file since it asked, and no handle of it is open
  // here. A change told meanwhile moved the kernel's attr_version, and the
  // kernel then drops these attributes (as a racing getattr's).
  auto watched = [&] {
    if (ch.watch && WatchLocked(out.ino, ch.node, *ch.watch, ch.taken)) {
      Inode& n = *table_.Find(out.ino);
      n.lookup_attr = true;
      n.lookup_mark = ch.changes;
      n.lookup_at = SteadyNow();
      if (k != nullptr && k->Coherent() &&
          ch.changes == local_changes_.load(std::memory_order_acquire)) {
        std::lock_guard files_lock(files_mu_);  // order: mu_, files_mu_
        if (!files_by_ino_.contains(out.ino)) {
          out.attr_timeout =
              std::max(out.attr_timeout, options_.coherent_remote_open_attr_timeout);
        }
      }
    }
  };
  if (const auto known = table_.Named(parent, ch.name)) {
    Inode& n = *table_.Find(*known);
    if ((n.type & S_IFMT) == (ch.type & S_IFMT) && n.node == ch.node &&
        n.real_name == ch.real_name && (IsDir(ch.type) || n.st_ino == ch.st.st_ino)) {
      ++n.nlookup;
      out.ino = *known;
      out.generation = n.generation;
      out.attr.st_ino = n.st_ino;
      n.last = out.attr;
      watched();
      n.attrs_unsure = n.attrs_unsure || out.attr_timeout > 0;
      return out;
    }
    // Replaced behind our back: the old inode keeps its remaining lookups.
    table_.MarkReplaced(*known);
  }
  Inode n;
  n.parent = parent;
  n.name = ch.name;
  n.real_name = ch.real_name;
  n.type = ch.type & S_IFMT;
  n.node = ch.node;
  n.st_ino = ch.st.st_ino;
  n.nlookup = 1;
  n.generation = 1;
  n.last = out.attr;
  out.ino = table_.Add(std::move(n));
  out.generation = 1;
  watched();
  table_.Find(out.ino)->attrs_unsure = out.attr_timeout > 0;
  return out;
}

double VfsImpl::CoherentAttrTimeout(mode_t type, const std::string& node, nlink_t nlink) const {
  if (IsDir(type)) return std::max(options_.attr_timeout, options_.coherent_dir_attr_timeout);
  // Attributes of files held elsewhere change there without a word to this
  // node. Each name of a hard-linked file is its own kernel inode here, so
  // a change through one name would leave the others' copies stale.
  if (node != deps_.cluster->Current()->self || nlink > 1) return options_.attr_timeout;
  return std::max(options_.attr_timeout, options_.coherent_file_attr_timeout);
}

double VfsImpl::AttrTimeout(uint64_t ino, const struct stat& st) const {
  KernelCache* k = kernel_.load(std::memory_order_acquire);
  if (k == nullptr || !k->Coherent()) return options_.attr_timeout;
  mode_t type = S_IFDIR;
  std::string node;
  if (ino != kRootIno) {
    std::lock_guard lock(mu_);
    const Inode* n = table_.Find(ino);
    if (n == nullptr) return options_.attr_timeout;
    type = n->type;
    node = n->node;
  }
  if (S_ISREG(type) && st.st_nlink == 1 && node != deps_.cluster->Current()->self) {
    std::lock_guard lock(files_mu_);
    if (ToldLocked(ino) || watch_of_.contains(ino)) {
      return std::max(options_.attr_timeout, options_.coherent_remote_open_attr_timeout);
    }
  }
  return CoherentAttrTimeout(type, node, st.st_nlink);
}

bool VfsImpl::ToldLocked(uint64_t ino) const {
  auto [b, e] = files_by_ino_.equal_range(ino);
  for (auto i = b; i != e; ++i) {
    if (files_.at(i->second).told) return true;
  }
  return false;
}

bool VfsImpl::Watchable(const std::string& node) const {
  KernelCache* k = kernel_.load(std::memory_order_acquire);
  return k != nullptr && k->Coherent() && node != deps_.cluster->Current()->self;
}

bool VfsImpl::WatchLocked(uint64_t ino, const std::string& node, Handle watch, uint64_t taken) {
  std::lock_guard files_lock(files_mu_);  // order: mu_, files_mu_
  if (callbacks_taken_ != taken || !table_.Contains(ino)) return false;
  const std::pair<std::string, Handle> key{node, watch};
  if (auto old = watched_.find(key); old != watched_.end()) watch_of_.erase(old->second);
  DropWatchLocked(ino);
  // The node keeps one watch per file of its own, named by the file's
  // number there, until this node's session ends: the watch of a file gone
  // names the next file given its number. The inode whose pages it kept
  // told of is told through it no more.
  if (auto pw = page_watches_.find(key); pw != page_watches_.end() && pw->second != ino) {
    const uint64_t other = pw->second;
    ErasePageWatchLocked(key);
    if (!PagesToldLocked(other)) pages_.erase(other);
  }
  watched_[key] = ino;
  watch_of_[ino] = key;
  return true;
}

uint64_t VfsImpl::CallbacksTaken() const {
  std::lock_guard lock(files_mu_);
  return callbacks_taken_;
}

void VfsImpl::DropWatchLocked(uint64_t ino) {
  auto w = watch_of_.find(ino);
  if (w == watch_of_.end()) return;
  watched_.erase(w->second);
  watch_of_.erase(w);
}

void VfsImpl::DropPageWatchesLocked(uint64_t ino) {
  auto [b, e] = page_watch_of_.equal_range(ino);
  for (auto i = b; i != e; ++i) page_watches_.erase(i->second);
  page_watch_of_.erase(ino);
}

void VfsImpl::ErasePageWatchLocked(const std::pair<std::string, Handle>& key) {
  auto it = page_watches_.find(key);
  if (it == page_watches_.end()) return;
  auto [b, e] = page_watch_of_.equal_range(it->second);
  for (auto i = b; i != e; ++i) {
    if (i->second == key) {
      page_watch_of_.erase(i);
      break;
    }
  }
  page_watches_.erase(it);
}

void VfsImpl::RemoteAttrsChanged(const std::string& node, const std::vector<Handle>& handles,
                                 DataRange data, bool ended) {
  std::vector<uint64_t> inos;
  std::vector<uint64_t> untold;  // told of no more: every cached block goes
  {
    std::lock_guard lock(files_mu_);
    ++callbacks_taken_;
    for (Handle h : handles) {
      const std::pair<std::string, Handle> key{node, h};
      ErasePrefetchedLocked(key);
      if (auto it = told_.find(key); it != told_.end()) inos.push_back(it->second);
      // A watch is used once for attributes: the next GetAttr watches again
      // (the node keeps it, or ended it and this was the word). For the
      // kernel's pages it lives on until the word that it ended.
      uint64_t watched = 0;
      if (auto it = watched_.find(key); it != watched_.end()) {
        watched = it->second;
        watch_of_.erase(it->second);
        watched_.erase(it);
      }
      uint64_t paged = 0;
      if (auto it = page_watches_.find(key); it != page_watches_.end()) {
        paged = it->second;
        if (ended) ErasePageWatchLocked(key);
      } else if (watched != 0 && !ended && options_.keep_remote_pages) {
        page_watches_.emplace(key, watched);
        page_watch_of_.emplace(watched, key);
      }
      if (watched != 0) inos.push_back(watched);
      if (paged != 0 && paged != watched) inos.push_back(paged);
    }
    // No longer told of the file: the kernel's pages of it go at its next
    // open (AddFile). Before this callback is answered, so that an open
    // racing with a change that is not told sees it.
    for (uint64_t ino : inos) {
      if (PagesToldLocked(ino)) continue;
      untold.push_back(ino);
      if (pages_.erase(ino) != 0) {
        Logger("vfs")->debug("inode {}: told of no more by {}: its pages go", ino, node);
      }
    }
  }
  // Its cached blocks (vfs_cache.cc): those holding the bytes named, or all
  // of them when this was the last way this node is told of the file (a
  // later change's callback would find nothing to name here).
  for (uint64_t ino : inos) {
    if (std::find(untold.begin(), untold.end(), ino) != untold.end()) {
      DataChanged(ino);
    } else if (!data.empty()) {
      DataChanged(ino, data);
    }
  }
  KernelCache* k = kernel_.load(std::memory_order_acquire);
  if (k == nullptr) return;
  for (uint64_t ino : inos) {
    if (data.empty()) {
      DropKernelAttrs(*k, ino);
    } else {
      DropPages(ino, data);
    }
  }
}

bool VfsImpl::AttrsUnsure(uint64_t ino) const {
  std::lock_guard lock(mu_);
  const Inode* n = table_.Find(ino);
  return n != nullptr && n->attrs_unsure;
}

// The kernel makes the inode of a lookup's reply after it read the reply:
// an invalidation in between finds no inode (the kernel says so), and the
// reply's attributes would then be cached after the change. So while
// attributes went out that way (Inode::attrs_unsure), one that found no
// inode is tried again until the kernel has it, or this node no longer
// does (the kernel forgot it: it had made it, or never will), or for at
// most kHangGuard.
void VfsImpl::DropKernelAttrs(KernelCache& k, uint64_t ino) {
  constexpr auto kHangGuard = std::chrono::seconds(2);
  const auto give_up = SteadyNow() + kHangGuard;
  auto backoff = std::chrono::microseconds(50);
  for (;;) {
    const bool found = k.InvalidateAttrs(ino);
    {
      std::lock_guard lock(mu_);
      Inode* n = table_.Find(ino);
      if (n == nullptr || !n->attrs_unsure) return;
      if (found) {
        n->attrs_unsure = false;  // the kernel has it: later drops reach it
        return;
      }
    }
    if (SteadyNow() >= give_up) {
      Logger("vfs")->warn("inode {}: the kernel has not made it {} s after its lookup's reply",
                          ino, kHangGuard.count());
      return;
    }
    SleepFor(backoff);
    backoff = std::min(backoff * 2, std::chrono::microseconds(5000));
  }
}

void VfsImpl::RemoteSessionLost(const std::string& node, bool untold) {
  std::set<uint64_t> inos;
  {
    std::lock_guard lock(files_mu_);
    for (auto& [fh, f] : files_) {
      if (!f.told || f.fs->node_id() != node) continue;
      inos.insert(f.ino);
      if (untold) {
        told_.erase({node, f.handle});
        f.told = false;
      }
    }
    // The watches `node` gave (both maps are ordered by node first).
    auto of_node = [&](const auto& m) {
      std::vector<std::pair<std::pair<std::string, Handle>, uint64_t>> out;
      for (auto it = m.lower_bound({node, Handle{0}}); it != m.end() && it->first.first == node; ++it) {
        out.emplace_back(it->first, it->second);
      }
      return out;
    };
    for (const auto& [key, ino] : of_node(watched_)) {
      inos.insert(ino);
      if (untold) {
        watch_of_.erase(ino);
        watched_.erase(key);
      }
    }
    for (const auto& [key, ino] : of_node(page_watches_)) {
      inos.insert(ino);
      if (untold) ErasePageWatchLocked(key);
    }
    for (auto it = prefetch_of_.lower_bound({node, Handle{0}});
         it != prefetch_of_.end() && it->first.first == node;) {
      prefetched_.erase(it->second);
      it = prefetch_of_.erase(it);
    }
    for (const auto& [ino, in] : pages_) {
      if (in.node == node) inos.insert(ino);
    }
    for (uint64_t ino : inos) pages_.erase(ino);
  }
  if (!inos.empty()) {
    Logger("vfs")->info("what this node caches of {} files of {} dropped{}", inos.size(), node,
                        untold ? " (told of their changes no more)" : "");
  }
  for (uint64_t ino : inos) {
    if (deps_.cache != nullptr) DataChanged(ino);
    DropPages(ino, DataRange{});
  }
}

// The kernel's attributes of `ino` and its pages of `range`; the pages
// later when this node's own write of them is in flight (PageDrops).
void VfsImpl::DropPages(uint64_t ino, DataRange range) {
  KernelCache* k = kernel_.load(std::memory_order_acquire);
  if (k == nullptr) return;
  if (page_drops_.DropNowOrLater(ino, range)) {
    k->InvalidateData(ino, range.offset, range.length);
    // That does not say whether the kernel had the inode: while a reply
    // may still make it, its attributes are dropped as DropKernelAttrs does.
    if (AttrsUnsure(ino)) DropKernelAttrs(*k, ino);
  } else {
    DropKernelAttrs(*k, ino);
  }
}

void VfsImpl::InvalidateAttrsOf(const std::string& path) {
  KernelCache* k = kernel_.load(std::memory_order_acquire);
  if (k == nullptr || path.empty() || path[0] != '/') return;
  uint64_t ino = kRootIno;
  bool file = false;
  {
    std::lock_guard lock(mu_);
    size_t pos = 1;
    while (pos < path.size()) {  // (parent, name) one component at a time
      const size_t end = std::min(path.find('/', pos), path.size());
      auto child = table_.Named(ino, path.substr(pos, end - pos));
      if (!child) return;  // the kernel has not looked it up
      ino = *child;
      pos = end + 1;
    }
    const Inode* n = table_.Find(ino);
    file = n != nullptr && S_ISREG(n->type);
  }
  // A file held here, changed by another node or a local program: its pages
  // too (the kernel drops them only when told, fuse/fuse_ops.cc).
  if (file) {
    DropPages(ino, DataRange{});
  } else {
    DropKernelAttrs(*k, ino);
  }
}

void VfsImpl::DetachName(uint64_t parent, const std::string& name) {
  std::lock_guard lock(mu_);
  table_.Unlink(parent, name);
}

void VfsImpl::MaybeEraseLocked(uint64_t ino) {
  for (const uint64_t gone : table_.EraseUnused(ino)) {
    {
      std::lock_guard files_lock(files_mu_);
      DropWatchLocked(gone);
      DropPageWatchesLocked(gone);
      pages_.erase(gone);
    }
    if (deps_.cache != nullptr) {
      DataChanged(gone);
      std::lock_guard cache_lock(cache_mu_);
      cached_in_.erase(gone);
    }
  }
}

void VfsImpl::ReportAdd(const std::string& dir, const std::string& name, uint8_t type,
                        const std::string& node, uint64_t id) {
  if (auto s = deps_.vds->Add(dir, name, type, node, id); !s) {
    Log()->warn("VD update (add {} in {}) failed: {}", name, dir, s.error().ToString());
  }
}

bool VfsImpl::ReportRemove(const std::string& dir, const std::string& name,
                           const std::string& node) {
  if (auto s = deps_.vds->Remove(dir, name, node); !s) {
    Log()->warn("VD update (remove {} in {}) failed: {}", name, dir, s.error().ToString());
    return false;
  }
  return true;
}


Status VfsImpl::EnsureDirOn(const Cred& c, const std::string& node, const std::string& dir_path,
                            const VdPtr& dir_vd) {
  if (std::find(dir_vd->holders.begin(), dir_vd->holders.end(), node) != dir_vd->holders.end()) {
    return Ok();
  }
  if (dir_vd->holders.empty()) return Err(ENOENT, dir_path);
  // Every ancestor of dir_path exists on a holder of dir_path: copy their
  // attributes and identities from there.
  const std::string& src_node = dir_vd->holders.front();
  auto src = FsOf(src_node);
  if (!src) return Err(src.error());
  std::vector<std::string> ancestors;  // "/a", "/a/b", ..., dir_path
  for (std::string p = dir_path; p != "/"; p = std::string(ParentPath(p))) ancestors.push_back(p);
  std::reverse(ancestors.begin(), ancestors.end());
  std::vector<NodeFs::DirTemplate> templates;
  for (const auto& a : ancestors) {
    auto st = (*src)->Stat(c, a);
    if (!st) return Err(st.error());
    if (!S_ISDIR(st->st_mode)) return Err(ENOTDIR, a + " is not a directory on " + src_node);
    FEDFS_TRY(id, CopyDirIdOn(**src, src_node, a, *st));
    templates.push_back({static_cast<mode_t>(st->st_mode & 07777), st->st_uid, st->st_gid, *id});
  }
  auto dst = FsOf(node);
  if (!dst) return Err(dst.error());
  // MkdirParents creates the ancestors of its argument: name a child.
  if (auto s = (*dst)->MkdirParents(JoinPath(dir_path, "x"), templates); !s) return s;
  for (size_t i = 0; i < ancestors.size(); ++i) {
    const std::string& a = ancestors[i];
    ReportAdd(std::string(ParentPath(a)), std::string(BaseName(a)), DT_DIR, node, templates[i].id);
  }
  return Ok();
}

Result<std::string> VfsImpl::PlaceNew(const Cred& c, const std::string& dir_path,
                                      const VdPtr& dir_vd, const std::string& path, bool is_dir,
                                      uint8_t add_type, NewName* added) {
  auto view = deps_.cluster->Current();
  std::string node = view->self;
  if (deps_.place) {
    auto chosen = deps_.place(*view, path, is_dir);
    if (!chosen) return Err(chosen.error());
    if (!chosen->empty()) node = std::move(*chosen);
  }
  if (node != view->self && !view->IsAlive(node)) {
    return Err(EHOSTDOWN, "placement chose node " + node + ", which is down");
  }
  if (node == view->self && LowOnRoom()) {  // vfs_room.cc
    const std::string other = RoomyNode(node, options_.on_full.min_free);
    if (!other.empty()) {
      node = other;
      room_creates_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (auto s = EnsureDirOn(c, node, dir_path, dir_vd); !s) {
    // The chosen node has something else than a directory on the way (a
    // symlink or a file: a name conflict, docs/namespace.md): the file goes
    // to the directory's first holder instead.
    const int e = s.error().code;
    if ((e != ENOTDIR && e != EEXIST && e != EXDEV) || dir_vd->holders.empty()) {
      return Err(s.error());
    }
    Log()->debug("create {}: {} cannot hold {} ({}): placed on {}", path, node,
                        dir_path, s.error().ToString(), dir_vd->holders.front());
    node = dir_vd->holders.front();
  }
  // EEXIST only once the manager lists the name (a claim in flight is
  // waited out), and its round has reached this node's copy.
  FEDFS_TRY(claimed, ClaimNew(dir_path, std::string(BaseName(path)), add_type, node));
  if (added != nullptr) *added = *claimed;
  return node;
}

Result<VfsImpl::NewName> VfsImpl::ClaimNew(const std::string& dir_path, const std::string& name,
                                           uint8_t add_type, const std::string& node) {
  if (add_type != 0) {
    FEDFS_TRY(a, deps_.vds->AddNew(dir_path, name, add_type, node));
    return NewName{*a != 0 ? NewEntry::kAdded : NewEntry::kClaimed, *a};
  }
  if (auto s = deps_.vds->Claim(dir_path, name); !s) return Err(s.error());
  return NewName{};
}

void VfsImpl::AbandonNew(const std::string& dir_path, const std::string& name,
                         const std::string& node, const NewName& owed) {
  if (owed.owed == NewEntry::kAdded) {
    ReportRemove(dir_path, name, node);  // ends the claim too
  } else {
    ReleaseNew(dir_path, name);
  }
}

void VfsImpl::ReleaseNew(const std::string& dir_path, const std::string& name) {
  deps_.vds->Release(dir_path, name);
}

void VfsImpl::ReportNew(const std::string& dir_path, const std::string& name, uint8_t type,
                        const std::string& node, uint64_t id, const NewName& owed) {
  if (owed.owed == NewEntry::kAdded) {
    deps_.vds->Created(dir_path, name, owed.token);
  } else if (owed.owed == NewEntry::kClaimed) {
    ReportAdd(dir_path, name, type, node, id);
  }
}


bool VfsImpl::ReportEdits(const std::string& dir, const std::vector<VdEdit>& edits) {
  if (auto s = deps_.vds->Apply(dir, edits); !s) {
    Log()->warn("VD update ({} changes in {}) failed: {}", edits.size(), dir, s.error().ToString());
    return false;
  }
  return true;
}


}  // namespace fedfs::ns
