#include "namespace/vfs_impl.h"

#include <dirent.h>
#include <linux/fs.h>
#include <sys/file.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/hash.h"
#include "common/logging.h"
#include "namespace/path.h"

namespace fedfs::ns {
namespace {

constexpr uint64_t kInoMask = (uint64_t{1} << 48) - 1;
constexpr uint64_t kDirTag = 0xffff;

mode_t TypeFromDt(uint8_t dt) { return static_cast<mode_t>(DTTOIF(dt)); }
uint8_t DtFromMode(mode_t m) { return static_cast<uint8_t>(IFTODT(m & S_IFMT)); }
bool IsDir(mode_t type) { return S_ISDIR(type); }

std::shared_ptr<spdlog::logger> Log() {
  static auto log = Logger("vfs");
  return log;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

}  // namespace

VfsImpl::VfsImpl(VfsOptions options, VfsDeps deps)
    : options_(std::move(options)), deps_(std::move(deps)) {
  Inode root;
  root.parent = 0;
  root.type = S_IFDIR;
  root.st_ino = DirIno("/");
  root.nlookup = 1;  // never forgotten
  root.generation = 1;
  inodes_.emplace(kRootIno, std::move(root));
}

VfsImpl::~VfsImpl() = default;

#define FEDFS_TRY(var, expr)            \
  auto var = (expr);                    \
  if (!var) return Err(var.error())

// ---------------------------------------------------------------- helpers

uint64_t VfsImpl::DirIno(const std::string& path) {
  return (kDirTag << 48) | (StableHash(path) & kInoMask);
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

std::string VfsImpl::PathLocked(uint64_t ino) const {
  if (ino == kRootIno) return "/";
  std::vector<const std::string*> parts;
  uint64_t cur = ino;
  while (cur != kRootIno) {
    auto it = inodes_.find(cur);
    if (it == inodes_.end() || !it->second.linked) return "";
    const Inode& n = it->second;
    parts.push_back(IsDir(n.type) ? &n.name : &n.real_name);
    cur = n.parent;
  }
  std::string path;
  for (auto p = parts.rbegin(); p != parts.rend(); ++p) {
    path += '/';
    path += **p;
  }
  return path;
}

Result<VfsImpl::Resolved> VfsImpl::Resolve(uint64_t ino) const {
  std::lock_guard lock(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return Err(ESTALE, "unknown inode " + std::to_string(ino));
  std::string path = PathLocked(ino);
  if (path.empty()) return Err(ENOENT, "inode " + std::to_string(ino) + " was removed");
  return Resolved{std::move(path), it->second.type, it->second.node, it->second.st_ino};
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

Result<struct stat> VfsImpl::DirAttr(const Cred& c, const std::string& path, const VdPtr& vd) {
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
    st->st_ino = DirIno(path);
    return *st;
  }
  return Err(std::move(last));
}

Result<VfsImpl::Child> VfsImpl::ChildFromEntry(const Cred& c, const std::string& dir_path,
                                               const VdEntry& e) {
  Child ch;
  ch.name = e.name;
  ch.real_name = e.RealName();
  ch.type = TypeFromDt(e.type);
  const std::string path = JoinPath(dir_path, ch.real_name);
  if (e.type == DT_DIR) {
    auto vd = deps_.vds->Get(path);
    if (!vd) return Err(vd.error());
    auto st = DirAttr(c, path, *vd);
    if (!st) return Err(st.error());
    ch.st = *st;
    return ch;
  }
  if (e.holders.empty()) return Err(ENOENT, path + " has no holder");
  ch.node = e.holders.front();
  auto fs = FsOf(ch.node);
  if (!fs) return Err(fs.error());
  auto st = (*fs)->Stat(c, path);
  if (!st) return Err(st.error());
  ch.type = st->st_mode & S_IFMT;
  st->st_ino = FileIno(ch.node, st->st_ino);
  ch.st = *st;
  return ch;
}

namespace {
// One file or directory under one name: same real name, holders and type.
bool SameEntry(const VdEntry* e, const std::optional<VdEntry>& was) {
  if (e == nullptr || !was) return e == nullptr && !was;
  return e->real_name == was->real_name && e->holders == was->holders && e->type == was->type;
}
bool Unlisted(const VdEntry* e) { return e == nullptr; }
}  // namespace

// An entry that its holder no longer has is being removed, renamed or
// replaced (by a file on another node) by another operation whose VD update
// has not reached the manager yet: the VD is asked again (from the manager)
// until the entry changed, for a bounded time, and the lookup tried again;
// so a lookup that answers ENOENT is never followed by a listing that still
// shows the name, and a name that always existed is never missed.
Result<VfsImpl::Child> VfsImpl::LookupChild(const Cred& c, const std::string& dir_path,
                                            const std::string& name, bool* absent) {
  for (int attempt = 0;; ++attempt) {
    auto vd = deps_.vds->Get(dir_path);
    if (!vd) return Err(vd.error());
    const VdEntry* e = (*vd)->Find(name);
    if (e == nullptr) {
      if (absent != nullptr) *absent = (*vd)->cacheable;
      return Err(ENOENT, JoinPath(dir_path, name));
    }
    auto ch = ChildFromEntry(c, dir_path, *e);
    if (!ch && ch.error().code == ENOENT && e->type != DT_DIR) {
      if (attempt == 2) return Err(ENOENT, JoinPath(dir_path, name));
      const std::optional<VdEntry> was = *e;
      AwaitVd(dir_path, name, [&](const VdEntry* now) { return !SameEntry(now, was); });
      continue;
    }
    if (ch) ch->cacheable = (*vd)->cacheable;
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
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
  }
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
  if (KernelCache* k = kernel_.load(std::memory_order_acquire);
      k != nullptr && ch.cacheable && k->Coherent() && k->NamesEpoch() == names_epoch) {
    out.entry_timeout = std::max(out.entry_timeout, options_.coherent_entry_timeout);
    out.attr_timeout = CoherentAttrTimeout(ch.type, ch.node, ch.st.st_nlink);
  }
  std::lock_guard lock(mu_);
  const auto key = std::make_pair(parent, ch.name);
  if (auto it = names_.find(key); it != names_.end()) {
    Inode& n = inodes_.at(it->second);
    if ((n.type & S_IFMT) == (ch.type & S_IFMT) && n.node == ch.node &&
        n.real_name == ch.real_name && (IsDir(ch.type) || n.st_ino == ch.st.st_ino)) {
      ++n.nlookup;
      out.ino = it->second;
      out.generation = n.generation;
      out.attr.st_ino = n.st_ino;
      n.last = out.attr;
      return out;
    }
    // Replaced behind our back: the old inode keeps its remaining lookups.
    MarkReplacedLocked(it->second);
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
  const uint64_t ino = next_ino_++;
  inodes_.emplace(ino, std::move(n));
  names_.emplace(key, ino);
  ++inodes_.at(parent).children;
  out.ino = ino;
  out.generation = 1;
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
    auto it = inodes_.find(ino);
    if (it == inodes_.end()) return options_.attr_timeout;
    type = it->second.type;
    node = it->second.node;
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

void VfsImpl::DropWatchLocked(uint64_t ino) {
  auto w = watch_of_.find(ino);
  if (w == watch_of_.end()) return;
  watched_.erase(w->second);
  watch_of_.erase(w);
}

void VfsImpl::RemoteAttrsChanged(const std::string& node, const std::vector<Handle>& handles) {
  std::vector<uint64_t> inos;
  {
    std::lock_guard lock(files_mu_);
    ++callbacks_taken_;
    for (Handle h : handles) {
      if (auto it = told_.find({node, h}); it != told_.end()) inos.push_back(it->second);
      // A watch is used once: the next GetAttr watches again (the node keeps
      // it, or ended it and this was the word).
      if (auto it = watched_.find({node, h}); it != watched_.end()) {
        inos.push_back(it->second);
        watch_of_.erase(it->second);
        watched_.erase(it);
      }
    }
  }
  KernelCache* k = kernel_.load(std::memory_order_acquire);
  if (k == nullptr) return;
  for (uint64_t ino : inos) k->InvalidateAttrs(ino);
}

void VfsImpl::InvalidateAttrsOf(const std::string& path) {
  KernelCache* k = kernel_.load(std::memory_order_acquire);
  if (k == nullptr || path.empty() || path[0] != '/') return;
  uint64_t ino = kRootIno;
  {
    std::lock_guard lock(mu_);
    size_t pos = 1;
    while (pos < path.size()) {  // (parent, name) one component at a time
      const size_t end = std::min(path.find('/', pos), path.size());
      auto it = names_.find({ino, path.substr(pos, end - pos)});
      if (it == names_.end()) return;  // the kernel has not looked it up
      ino = it->second;
      pos = end + 1;
    }
  }
  k->InvalidateAttrs(ino);
}

void VfsImpl::DetachName(uint64_t parent, const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = names_.find({parent, name});
  if (it == names_.end()) return;
  inodes_.at(it->second).linked = false;
  names_.erase(it);
}

void VfsImpl::MaybeEraseLocked(uint64_t ino) {
  while (ino != kRootIno) {
    auto it = inodes_.find(ino);
    if (it == inodes_.end()) return;
    Inode& n = it->second;
    if (n.nlookup > 0 || n.children > 0) return;
    if (n.linked) names_.erase({n.parent, n.name});
    const uint64_t parent = n.parent;
    inodes_.erase(it);
    {
      std::lock_guard files_lock(files_mu_);
      DropWatchLocked(ino);
    }
    auto p = inodes_.find(parent);
    if (p == inodes_.end()) return;
    --p->second.children;
    ino = parent;
  }
}

void VfsImpl::ReportAdd(const std::string& dir, const std::string& name, uint8_t type,
                        const std::string& node) {
  if (auto s = deps_.vds->Add(dir, name, type, node); !s) {
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

// The name locks (VdClient::Lock, which waits out another node's hold) of
// one operation: taken in (directory, name) order, so two operations never
// wait for each other in a cycle. Released at the end unless the
// operation's reported change ended them at the manager (Reported).
class VfsImpl::NameLocks {
 public:
  explicit NameLocks(VdClient* vds) : vds_(vds) {}
  NameLocks(const NameLocks&) = delete;
  NameLocks& operator=(const NameLocks&) = delete;
  ~NameLocks() {
    for (const auto& [dir, name] : held_) vds_->Release(dir, name);
  }

  Status Take(std::vector<std::pair<std::string, std::string>> names) {
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    for (auto& [dir, name] : names) {
      if (auto s = vds_->Lock(dir, name); !s) return s;
      held_.emplace_back(std::move(dir), std::move(name));
    }
    return Ok();
  }
  // Locks `name` and claims `claim` in directory `dir` in one step (no other
  // lock held: a rename within one directory). The claim is the caller's to
  // end (ReleaseNew) unless the reported change ends it.
  Status TakeWithClaim(const std::string& dir, const std::string& name, const std::string& claim) {
    if (auto s = vds_->LockAndClaim(dir, name, claim); !s) return s;
    held_.emplace_back(dir, name);
    return Ok();
  }
  // The operation reported its change: the manager ended the locks.
  void Reported() { held_.clear(); }

 private:
  VdClient* vds_;
  std::vector<std::pair<std::string, std::string>> held_;
};

Status VfsImpl::EnsureDirOn(const Cred& c, const std::string& node, const std::string& dir_path,
                            const VdPtr& dir_vd) {
  if (std::find(dir_vd->holders.begin(), dir_vd->holders.end(), node) != dir_vd->holders.end()) {
    return Ok();
  }
  if (dir_vd->holders.empty()) return Err(ENOENT, dir_path);
  // Every ancestor of dir_path exists on a holder of dir_path: copy their
  // attributes from there.
  auto src = FsOf(dir_vd->holders.front());
  if (!src) return Err(src.error());
  std::vector<std::string> ancestors;  // "/a", "/a/b", ..., dir_path
  for (std::string p = dir_path; p != "/"; p = std::string(ParentPath(p))) ancestors.push_back(p);
  std::reverse(ancestors.begin(), ancestors.end());
  std::vector<NodeFs::DirTemplate> templates;
  for (const auto& a : ancestors) {
    auto st = (*src)->Stat(c, a);
    if (!st) return Err(st.error());
    templates.push_back({static_cast<mode_t>(st->st_mode & 07777), st->st_uid, st->st_gid});
  }
  auto dst = FsOf(node);
  if (!dst) return Err(dst.error());
  // MkdirParents creates the ancestors of its argument: name a child.
  if (auto s = (*dst)->MkdirParents(JoinPath(dir_path, "x"), templates); !s) return s;
  for (const auto& a : ancestors) ReportAdd(std::string(ParentPath(a)), std::string(BaseName(a)), DT_DIR, node);
  return Ok();
}

Result<std::string> VfsImpl::PlaceNew(const Cred& c, const std::string& dir_path,
                                      const VdPtr& dir_vd, const std::string& path, bool is_dir) {
  auto view = deps_.cluster->Current();
  std::string node = view->self;
  if (deps_.place) {
    std::string chosen = deps_.place(*view, path, is_dir);
    if (!chosen.empty()) node = std::move(chosen);
  }
  if (node != view->self && !view->IsAlive(node)) {
    return Err(EHOSTDOWN, "placement chose node " + node + ", which is down");
  }
  if (auto s = EnsureDirOn(c, node, dir_path, dir_vd); !s) return Err(s.error());
  const std::string name(BaseName(path));
  // EEXIST only once the manager lists the name (a claim in flight is
  // waited out), and its round has reached this node's copy.
  if (auto s = deps_.vds->Claim(dir_path, name); !s) return Err(s.error());
  return node;
}

void VfsImpl::ReleaseNew(const std::string& dir_path, const std::string& name) {
  deps_.vds->Release(dir_path, name);
}

template <class T, class Make>
Result<std::pair<std::string, T>> VfsImpl::MakeNew(const Cred& c, const std::string& dir_path,
                                                   const VdPtr& dir_vd, const std::string& name,
                                                   bool is_dir, Make make) {
  const std::string path = JoinPath(dir_path, name);
  FEDFS_TRY(node, PlaceNew(c, dir_path, dir_vd, path, is_dir));
  auto fs = FsOf(*node);
  Result<T> made = fs ? make(*fs, path) : Result<T>(Err(fs.error()));
  if (!made) {
    ReleaseNew(dir_path, name);
    return Err(made.error());
  }
  return std::make_pair(std::move(*node), std::move(*made));
}

bool VfsImpl::ReportEdits(const std::string& dir, const std::vector<VdEdit>& edits) {
  if (auto s = deps_.vds->Apply(dir, edits); !s) {
    Log()->warn("VD update ({} changes in {}) failed: {}", edits.size(), dir, s.error().ToString());
    return false;
  }
  return true;
}

// ---------------------------------------------------------------- names

Result<EntryOut> VfsImpl::Lookup(const Cred& c, uint64_t parent, const std::string& name) {
  const uint64_t names_epoch = NamesEpoch();
  if (auto s = ValidateName(name); !s) return Err(s.error());
  auto dir = ResolveDir(parent);
  if (!dir) return Err(dir.error());
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
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return;
  it->second.nlookup -= std::min(nlookup, it->second.nlookup);
  MaybeEraseLocked(ino);
}

Result<struct stat> VfsImpl::GetAttr(const Cred& c, uint64_t ino, std::optional<uint64_t> fh) {
  auto r = Resolve(ino);
  if (!r) {
    // An open-unlinked file: fstat semantics through a handle of it (SetAttr
    // with nothing to change returns the open file's attributes). The kernel
    // sends fstat without a handle, so any open handle of the inode will do.
    if (r.error().code != ENOENT) return Err(r.error());
    auto f = fh ? FileOf(*fh) : AnyFileOf(ino);
    if (!f) {
      // Its name now names another file (a rename over it, seen by a
      // lookup here): what it was, unlinked.
      std::lock_guard lock(mu_);
      if (auto it = inodes_.find(ino); it != inodes_.end() && it->second.replaced) {
        return ReplacedAttr(it->second);
      }
      return Err(f.error());
    }
    auto st = f->fs->SetAttr(c, "/", f->handle, SetAttrRequest{});
    if (!st) return st;
    std::lock_guard lock(mu_);
    if (auto it = inodes_.find(ino); it != inodes_.end()) st->st_ino = it->second.st_ino;
    return st;
  }
  if (IsDir(r->type)) {
    auto vd = deps_.vds->Get(r->path);
    if (!vd) return Err(vd.error());
    return DirAttr(c, r->path, *vd);
  }
  auto fs = FsOf(r->node);
  if (!fs) return Err(fs.error());
  Result<struct stat> st = Err(EIO, "getattr");
  // A remote file with one link: its node is asked to tell of its changes,
  // so that the kernel may keep what this answers (AttrTimeout). A change
  // told before the watch is known here could not be applied to it: then
  // this answer is not kept.
  KernelCache* k = kernel_.load(std::memory_order_acquire);
  if (S_ISREG(r->type) && k != nullptr && k->Coherent() &&
      r->node != deps_.cluster->Current()->self) {
    uint64_t taken = 0;
    {
      std::lock_guard lock(files_mu_);
      taken = callbacks_taken_;
    }
    auto ws = (*fs)->StatWatched(c, r->path);
    if (ws) {
      st = ws->st;
      if (ws->watch) {
        std::lock_guard lock(mu_);  // the inode must still be known (order: mu_, files_mu_)
        std::lock_guard files_lock(files_mu_);
        if (callbacks_taken_ == taken && inodes_.contains(ino)) {
          const std::pair<std::string, Handle> key{r->node, *ws->watch};
          if (auto old = watched_.find(key); old != watched_.end()) watch_of_.erase(old->second);
          DropWatchLocked(ino);
          watched_[key] = ino;
          watch_of_[ino] = key;
        }
      }
    } else {
      st = Err(ws.error());
    }
  } else {
    st = (*fs)->Stat(c, r->path);
  }
  if (!st && st.error().code == ENOENT) {
    // Removed or renamed on its node since the kernel looked it up: through
    // an open handle, fstat semantics; else ENOENT once the manager agrees.
    if (auto f = fh ? FileOf(*fh) : AnyFileOf(ino); f) {
      st = f->fs->SetAttr(c, "/", f->handle, SetAttrRequest{});
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
        if (inodes_.contains(ino)) {
          // Its name goes: the next lookup makes a new inode for the new file.
          return ReplacedAttr(MarkReplacedLocked(ino));
        }
      }
      return Err(ENOENT, r->path + " changed on node " + r->node);
    }
  }
  if (!st) return st;
  st->st_ino = FileIno(r->node, st->st_ino);
  std::lock_guard lock(mu_);
  if (auto it = inodes_.find(ino); it != inodes_.end()) {
    it->second.last = *st;
  }
  return st;
}

VfsImpl::Inode& VfsImpl::MarkReplacedLocked(uint64_t ino) {
  Inode& n = inodes_.at(ino);
  if (auto it = names_.find({n.parent, n.name}); it != names_.end() && it->second == ino) {
    names_.erase(it);
  }
  n.linked = false;
  n.replaced = true;
  return n;
}

struct stat VfsImpl::ReplacedAttr(const Inode& n) {
  struct stat st = n.last;
  st.st_nlink = 0;
  return st;
}

Result<struct stat> VfsImpl::SetAttr(const Cred& c_in, uint64_t ino, std::optional<uint64_t> fh,
                                     const SetAttrRequest& req) {
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
    if (auto f = FileOf(*fh)) {
      auto r = Resolve(ino);
      auto st = f->fs->SetAttr(c, r ? r->path : std::string("/"), f->handle, req);
      if (!st) return st;
      std::lock_guard lock(mu_);
      if (auto it = inodes_.find(ino); it != inodes_.end()) st->st_ino = it->second.st_ino;
      return st;
    }
  }
  auto r = Resolve(ino);
  if (!r) return Err(r.error());
  if (IsDir(r->type)) {
    // Attributes of a directory are set on every node that holds it.
    auto vd = deps_.vds->Get(r->path);
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
    return DirAttr(c, r->path, *vd);
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

namespace {
// The parent dir, its VD, and the new entry's path, for the create family.
struct NewEntry {
  std::string dir;
  VdPtr vd;
  std::string path;
};
}  // namespace

Result<EntryOut> VfsImpl::Mknod(const Cred& c, uint64_t parent, const std::string& name,
                                mode_t mode, dev_t rdev) {
  const uint64_t names_epoch = NamesEpoch();
  if (auto s = ValidateName(name); !s) return Err(s.error());
  FEDFS_TRY(dir, ResolveDir(parent));
  FEDFS_TRY(vd, deps_.vds->Get(dir->path));
  if ((*vd)->Find(name)) return Err(EEXIST, JoinPath(dir->path, name));
  FEDFS_TRY(made, MakeNew<struct stat>(c, dir->path, *vd, name, false,
                                       [&](const std::shared_ptr<NodeFs>& fs, const std::string& p) {
                                         return fs->Mknod(c, p, mode, rdev);
                                       }));
  const auto& [node, st] = *made;
  vd->reset();  // unshared, the manager changes VD(P) in place (vd_service.cc)
  ReportAdd(dir->path, name, DtFromMode(st.st_mode), node);
  Child ch{name, name, static_cast<mode_t>(st.st_mode & S_IFMT), node, st};
  ch.st.st_ino = FileIno(node, st.st_ino);
  return Remember(parent, ch, names_epoch);
}

Result<EntryOut> VfsImpl::Mkdir(const Cred& c, uint64_t parent, const std::string& name,
                                mode_t mode) {
  const uint64_t names_epoch = NamesEpoch();
  if (auto s = ValidateName(name); !s) return Err(s.error());
  FEDFS_TRY(dir, ResolveDir(parent));
  FEDFS_TRY(vd, deps_.vds->Get(dir->path));
  if ((*vd)->Find(name)) return Err(EEXIST, JoinPath(dir->path, name));
  FEDFS_TRY(made, MakeNew<struct stat>(c, dir->path, *vd, name, true,
                                       [&](const std::shared_ptr<NodeFs>& fs, const std::string& p) {
                                         return fs->Mkdir(c, p, mode);
                                       }));
  vd->reset();  // unshared, the manager changes VD(P) in place (vd_service.cc)
  ReportAdd(dir->path, name, DT_DIR, made->first);
  Child ch{name, name, S_IFDIR, "", made->second};
  ch.st.st_ino = DirIno(JoinPath(dir->path, name));
  ch.st.st_nlink = 2;
  return Remember(parent, ch, names_epoch);
}

Result<EntryOut> VfsImpl::Symlink(const Cred& c, const std::string& target, uint64_t parent,
                                  const std::string& name) {
  const uint64_t names_epoch = NamesEpoch();
  if (auto s = ValidateName(name); !s) return Err(s.error());
  FEDFS_TRY(dir, ResolveDir(parent));
  FEDFS_TRY(vd, deps_.vds->Get(dir->path));
  if ((*vd)->Find(name)) return Err(EEXIST, JoinPath(dir->path, name));
  FEDFS_TRY(made, MakeNew<struct stat>(c, dir->path, *vd, name, false,
                                       [&](const std::shared_ptr<NodeFs>& fs, const std::string& p) {
                                         return fs->Symlink(c, target, p);
                                       }));
  const auto& [node, st] = *made;
  vd->reset();  // unshared, the manager changes VD(P) in place (vd_service.cc)
  ReportAdd(dir->path, name, DT_LNK, node);
  Child ch{name, name, S_IFLNK, node, st};
  ch.st.st_ino = FileIno(node, st.st_ino);
  return Remember(parent, ch, names_epoch);
}

Result<EntryOut> VfsImpl::Link(const Cred& c, uint64_t ino, uint64_t new_parent,
                               const std::string& new_name) {
  const uint64_t names_epoch = NamesEpoch();
  if (auto s = ValidateName(new_name); !s) return Err(s.error());
  FEDFS_TRY(src, Resolve(ino));
  if (IsDir(src->type)) return Err(EPERM, src->path + " is a directory");
  FEDFS_TRY(dir, ResolveDir(new_parent));
  FEDFS_TRY(vd, deps_.vds->Get(dir->path));
  if ((*vd)->Find(new_name)) return Err(EEXIST, JoinPath(dir->path, new_name));
  // A hard link lives on the file's node, in a directory that node holds.
  const auto& h = (*vd)->holders;
  if (std::find(h.begin(), h.end(), src->node) == h.end()) {
    return Err(EXDEV, "link: " + dir->path + " is not on node " + src->node);
  }
  const std::string path = JoinPath(dir->path, new_name);
  if (auto s = deps_.vds->Claim(dir->path, new_name); !s) return Err(s.error());
  auto fs = FsOf(src->node);
  auto st = fs ? (*fs)->Link(c, src->path, path) : Result<struct stat>(Err(fs.error()));
  if (!st) {
    ReleaseNew(dir->path, new_name);
    return Err(st.error());
  }
  vd->reset();  // unshared, the manager changes VD(P) in place (vd_service.cc)
  ReportAdd(dir->path, new_name, DtFromMode(st->st_mode), src->node);
  // The new name is a kernel inode of its own: the old name's cached link
  // count is now wrong (non-blocking; safe inside this request).
  if (KernelCache* k = kernel_.load(std::memory_order_acquire)) k->InvalidateAttrs(ino);
  Child ch{new_name, new_name, static_cast<mode_t>(st->st_mode & S_IFMT), src->node, *st};
  ch.st.st_ino = FileIno(src->node, st->st_ino);
  return Remember(new_parent, ch, names_epoch);
}

Status VfsImpl::Unlink(const Cred& c, uint64_t parent, const std::string& name) {
  FEDFS_TRY(dir, ResolveDir(parent));
  NameLocks locks(deps_.vds);
  std::string locked;  // the real name held
  Result<VdPtr> vd = Err(EIO, "unlink");
  const VdEntry* e = nullptr;
  for (int attempt = 0;; ++attempt) {
    vd = deps_.vds->Get(dir->path);
    if (!vd) return Err(vd.error());
    e = (*vd)->Find(name);
    if (e == nullptr) return Err(ENOENT, JoinPath(dir->path, name));
    if (e->type == DT_DIR) return Err(EISDIR, JoinPath(dir->path, name));
    const std::string r = e->RealName();
    if (r == locked || attempt == 3) break;  // (read again under the lock)
    if (auto s = locks.Take({{dir->path, r}}); !s) return s;
    locked = r;
  }
  const std::string node = e->holders.empty() ? std::string() : e->holders.front();
  const std::string real = e->RealName();
  FEDFS_TRY(fs, FsOf(node));
  if (auto s = (*fs)->Unlink(c, JoinPath(dir->path, real)); !s) {
    if (s.error().code == ENOENT) AwaitVd(dir->path, name, Unlisted);  // removed meanwhile
    return s;
  }
  vd->reset();  // unshared, the manager changes VD(P) in place (vd_service.cc)
  if (ReportRemove(dir->path, real, node)) locks.Reported();
  DetachName(parent, name);
  return Ok();
}

// Starts over (a few times) when the directory gained or lost a holder
// between the first look and holding its name.
Status VfsImpl::Rmdir(const Cred& c, uint64_t parent, const std::string& name) {
  for (int attempt = 0;; ++attempt) {
    Status s = RmdirOnce(c, parent, name);
    if (s || s.error().context != "raced" || attempt == 4) return s;
  }
}

Status VfsImpl::RmdirOnce(const Cred& c, uint64_t parent, const std::string& name) {
  FEDFS_TRY(dir, ResolveDir(parent));
  FEDFS_TRY(vd, deps_.vds->Get(dir->path));
  const VdEntry* e = (*vd)->Find(name);
  if (e == nullptr) return Err(ENOENT, JoinPath(dir->path, name));
  if (e->type != DT_DIR) return Err(ENOTDIR, JoinPath(dir->path, name));
  const std::string path = JoinPath(dir->path, name);
  const std::vector<std::string> holders = e->holders;
  if (holders.size() > 1 && deps_.dir_ops != nullptr) {
    if (auto s = deps_.dir_ops->RemoveDir(c, path, holders); !s) return s;
    ForgetSubtreeVds(path);
    DetachName(parent, name);
    return Ok();
  }
  NameLocks locks(deps_.vds);
  {
    if (auto s = locks.Take({{dir->path, name}}); !s) return s;
    FEDFS_TRY(vd2, deps_.vds->Get(dir->path));
    const VdEntry* e2 = (*vd2)->Find(name);
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

void VfsImpl::ForgetSubtreeVds(const std::string& path) {
  // The operation already succeeded; a failure here only leaves VDs that the
  // next epoch or eviction rebuilds, so it is logged, not returned.
  if (auto s = deps_.vds->DropSubtree(path); !s) {
    Log()->warn("forgetting the VDs under {}: {}", path, s.error().ToString());
  }
}

// A rename to a new name claims it first; losing that claim to a concurrent
// create starts over (the name now exists: a replace).
Status VfsImpl::Rename(const Cred& c, uint64_t parent, const std::string& name,
                       uint64_t new_parent, const std::string& new_name, unsigned flags) {
  for (int attempt = 0;; ++attempt) {
    Status s = RenameOnce(c, parent, name, new_parent, new_name, flags);
    const bool raced = !s && s.error().code == EEXIST && s.error().context == "raced";
    if (!raced) return s;
    if (attempt == 4) return Err(EEXIST, "rename: " + new_name + " keeps being created");
  }
}

Status VfsImpl::RenameOnce(const Cred& c, uint64_t parent, const std::string& name,
                           uint64_t new_parent, const std::string& new_name, unsigned flags) {
  if (auto s = ValidateName(new_name); !s) return Err(s.error());
  if ((flags & RENAME_EXCHANGE) && (flags & RENAME_NOREPLACE)) return Err(EINVAL, "rename flags");
  FEDFS_TRY(sdir, ResolveDir(parent));
  FEDFS_TRY(ddir, ResolveDir(new_parent));
  FEDFS_TRY(svd, deps_.vds->Get(sdir->path));
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
  FEDFS_TRY(dvd, sdir->path == ddir->path ? Result<VdPtr>(*svd) : deps_.vds->Get(ddir->path));
  const VdEntry* de = (*dvd)->Find(new_name);
  std::optional<VdEntry> dst;
  if (de) dst = *de;
  const std::optional<VdEntry> dst_read = dst;  // as read, before the decisions below
  if (dst && (flags & RENAME_NOREPLACE)) return Err(EEXIST, to);
  if (!dst && (flags & RENAME_EXCHANGE)) return Err(ENOENT, to);

  const bool src_dir = src.type == DT_DIR;
  std::string node;  // where the rename runs
  if (src_dir) {
    const bool single = src.holders.size() == 1 &&
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
        if (auto it = names_.find({new_parent, new_name}); it != names_.end()) {
          inodes_.at(it->second).linked = false;
          names_.erase(it);
        }
        if (auto it = names_.find({parent, name}); it != names_.end()) {
          const uint64_t ino = it->second;
          names_.erase(it);
          Inode& n = inodes_.at(ino);
          --inodes_.at(n.parent).children;
          n.parent = new_parent;
          n.name = n.real_name = new_name;
          ++inodes_.at(new_parent).children;
          names_.emplace(std::make_pair(new_parent, new_name), ino);
        }
      }
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
      // The destination lives on another node: rename first (so a failed
      // rename deletes nothing), then remove that copy (not atomic;
      // docs/namespace.md).
      remote_dst = std::make_pair(dst->holders.front(), dreal);
      dst.reset();
    }
  }
  const bool claimed = !dst && !remote_dst;
  // The source's name, and the destination's if it exists, are held until
  // the change is reported; then what was read before holding them is
  // checked again (another node may have changed them meanwhile: start
  // over).
  NameLocks locks(deps_.vds);
  // Within one directory, the lock on the source and the claim of the new
  // name are one call to the manager; otherwise the locks (in order), then
  // the claim.
  const bool lock_and_claim = claimed && sdir->path == ddir->path;
  // EEXIST on the claim: the name was created meanwhile; then replace it.
  const auto raced_if_exists = [](Status s) -> Status {
    if (s || s.error().code != EEXIST) return s;
    return Err(EEXIST, "raced");
  };
  {
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
      FEDFS_TRY(svd2, deps_.vds->Get(sdir->path));
      if (!SameEntry((*svd2)->Find(name), src)) return Err(EEXIST, "raced");
      FEDFS_TRY(dvd2, sdir->path == ddir->path ? Result<VdPtr>(*svd2) : deps_.vds->Get(ddir->path));
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
  Status done = EnsureDirOn(c, node, ddir->path, *dvd);
  auto fs = FsOf(node);
  if (done && !fs) done = Err(fs.error());
  if (done) done = (*fs)->Rename(c, from, to, flags);
  if (!done) {
    if (claimed) ReleaseNew(ddir->path, new_name);
    // The source went meanwhile (another node removed or renamed it).
    if (done.error().code == ENOENT) AwaitVd(sdir->path, name, Unlisted);
    return done;
  }
  if (remote_dst) {
    auto dfs = FsOf(remote_dst->first);
    Status gone = dfs ? (*dfs)->Unlink(c, JoinPath(ddir->path, remote_dst->second))
                      : Status(Err(dfs.error()));
    if (!gone && gone.error().code != ENOENT) {
      Log()->warn("rename {} -> {}: the replaced copy on {} stays: {}", from, to,
                  remote_dst->first, gone.error().ToString());
      remote_dst.reset();
    }
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
    src_edits.push_back({.add = true, .name = sreal, .type = dst->type, .node = node});
  }
  if (remote_dst) dst_edits.push_back({.add = false, .name = remote_dst->second, .node = remote_dst->first});
  dst_edits.push_back({.add = true, .name = new_name, .type = src.type, .node = node});
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

  std::lock_guard lock(mu_);
  auto s_it = names_.find({parent, name});
  auto d_it = names_.find({new_parent, new_name});
  std::optional<uint64_t> s_ino, d_ino;
  if (s_it != names_.end()) {
    s_ino = s_it->second;
    names_.erase(s_it);
  }
  if (d_it != names_.end()) {
    d_ino = d_it->second;
    names_.erase(d_it);
  }
  auto move = [&](uint64_t ino, uint64_t np, const std::string& nn) {
    Inode& n = inodes_.at(ino);
    --inodes_.at(n.parent).children;
    n.parent = np;
    n.name = n.real_name = nn;
    ++inodes_.at(np).children;
    names_[{np, nn}] = ino;
  };
  if (flags & RENAME_EXCHANGE) {
    if (s_ino) move(*s_ino, new_parent, new_name);
    if (d_ino) move(*d_ino, parent, sreal);
  } else {
    if (d_ino) inodes_.at(*d_ino).linked = false;
    if (s_ino) move(*s_ino, new_parent, new_name);
  }
  return Ok();
}

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

uint64_t VfsImpl::AddFile(OpenFile f) {
  std::lock_guard lock(files_mu_);
  const uint64_t fh = next_fh_++;
  files_by_ino_.emplace(f.ino, fh);
  if (f.told) told_.emplace(std::make_pair(f.fs->node_id(), f.handle), f.ino);
  files_.emplace(fh, std::move(f));
  return fh;
}

Result<FileOut> VfsImpl::Open(const Cred& c, uint64_t ino, int flags) {
  FEDFS_TRY(r, Resolve(ino));
  if (IsDir(r->type)) return Err(EISDIR, r->path);
  FEDFS_TRY(fs, FsOf(r->node));
  auto op = (*fs)->Open(c, r->path, flags & ~(O_CREAT | O_EXCL));
  if (!op && op.error().code == ENOENT) {
    // Gone since the kernel looked it up: ESTALE makes open(2) look the path
    // up again, and create it if it was an O_CREAT open.
    return Err(ESTALE, r->path + " changed on node " + r->node);
  }
  if (!op) return Err(op.error());
  FileOut out;
  out.fh = AddFile(OpenFile{*fs, op->handle, ino, op->attr_callbacks});
  return out;
}

// A create races with other nodes' creates and unlinks of the same name: a
// lost claim (another node is creating it) or an existing file that vanished
// before it was opened starts over, a few times.
Result<std::pair<EntryOut, FileOut>> VfsImpl::Create(const Cred& c, uint64_t parent,
                                                     const std::string& name, mode_t mode,
                                                     int flags) {
  for (int attempt = 0;; ++attempt) {
    auto r = CreateOnce(c, parent, name, mode, flags);
    const bool raced = !r && ((r.error().code == EEXIST && !(flags & O_EXCL)) ||
                              (r.error().code == ENOENT && r.error().context == "raced"));
    if (!raced || attempt == 4) return r;
  }
}

Result<std::pair<EntryOut, FileOut>> VfsImpl::CreateOnce(const Cred& c, uint64_t parent,
                                                         const std::string& name, mode_t mode,
                                                         int flags) {
  const uint64_t names_epoch = NamesEpoch();
  if (auto s = ValidateName(name); !s) return Err(s.error());
  FEDFS_TRY(dir, ResolveDir(parent));
  FEDFS_TRY(vd, deps_.vds->Get(dir->path));
  if (const VdEntry* e = (*vd)->Find(name)) {
    // Lost a race with another creator: open the existing file.
    if (flags & O_EXCL) return Err(EEXIST, JoinPath(dir->path, name));
    if (e->type == DT_DIR) return Err(EISDIR, JoinPath(dir->path, name));
    auto ch = ChildFromEntry(c, dir->path, *e);
    if (!ch && ch.error().code == ENOENT) return Err(ENOENT, "raced");  // unlinked meanwhile
    if (!ch) return Err(ch.error());
    FEDFS_TRY(fs, FsOf(ch->node));
    auto op = (*fs)->Open(c, JoinPath(dir->path, ch->real_name), flags & ~(O_CREAT | O_EXCL));
    if (!op && op.error().code == ENOENT) return Err(ENOENT, "raced");
    if (!op) return Err(op.error());
    EntryOut entry = Remember(parent, *ch, names_epoch);
    FileOut out;
    out.fh = AddFile(OpenFile{*fs, op->handle, entry.ino, op->attr_callbacks});
    return std::make_pair(entry, out);
  }
  std::shared_ptr<NodeFs> fs;  // the chosen node's, kept by the open file
  FEDFS_TRY(made, MakeNew<Opened>(c, dir->path, *vd, name, false,
                                  [&](const std::shared_ptr<NodeFs>& f, const std::string& p) {
                                    fs = f;
                                    return f->Create(c, p, flags | O_CREAT, mode);
                                  }));
  const auto& [node, op] = *made;
  vd->reset();  // unshared, the manager changes VD(P) in place (vd_service.cc)
  ReportAdd(dir->path, name, DT_REG, node);
  Child ch{name, name, S_IFREG, node, op.st};
  ch.st.st_ino = FileIno(node, op.st.st_ino);
  EntryOut entry = Remember(parent, ch, names_epoch);
  FileOut out;
  out.fh = AddFile(OpenFile{fs, op.handle, entry.ino, op.attr_callbacks});
  return std::make_pair(entry, out);
}

Result<size_t> VfsImpl::Read(uint64_t fh, uint64_t offset, std::span<std::byte> dst) {
  FEDFS_TRY(f, FileOf(fh));
  return f->fs->Read(f->handle, offset, dst);
}

Result<size_t> VfsImpl::Write(uint64_t fh, uint64_t offset, std::span<const std::byte> src,
                              const Writer& by) {
  FEDFS_TRY(f, FileOf(fh));
  return f->fs->Write(f->handle, offset, src, by);
}

Status VfsImpl::Flush(uint64_t fh, uint64_t lock_owner) {
  FEDFS_TRY(f, FileOf(fh));
  return f->fs->Flush(f->handle, GlobalOwner(lock_owner));
}

Status VfsImpl::Fsync(uint64_t fh, bool datasync) {
  FEDFS_TRY(f, FileOf(fh));
  return f->fs->Fsync(f->handle, datasync);
}

Status VfsImpl::Release(uint64_t fh) {
  OpenFile f;
  bool untold = false;
  {
    std::lock_guard lock(files_mu_);
    auto it = files_.find(fh);
    if (it == files_.end()) return Err(EBADF, "unknown file handle");
    f = std::move(it->second);
    files_.erase(it);
    auto [b, e] = files_by_ino_.equal_range(f.ino);
    for (auto i = b; i != e; ++i) {
      if (i->second == fh) {
        files_by_ino_.erase(i);
        break;
      }
    }
    if (f.told) {
      told_.erase({f.fs->node_id(), f.handle});
      untold = !ToldLocked(f.ino);  // else still told through another handle
    }
  }
  // The kernel may cache the attributes only while changes are told: drop
  // them before the node stops telling (a reply to a getattr racing with
  // this is not cached: the kernel's attr_version moved).
  if (untold) {
    if (KernelCache* k = kernel_.load(std::memory_order_acquire)) k->InvalidateAttrs(f.ino);
  }
  return f.fs->Release(f.handle);
}

Status VfsImpl::Fallocate(uint64_t fh, int mode, uint64_t offset, uint64_t len) {
  FEDFS_TRY(f, FileOf(fh));
  return f->fs->Fallocate(f->handle, mode, offset, len);
}

Result<LockRange> VfsImpl::GetLk(uint64_t fh, uint64_t owner, const LockRange& want) {
  FEDFS_TRY(f, FileOf(fh));
  return f->fs->GetLk(f->handle, GlobalOwner(owner), want);
}

Status VfsImpl::SetLk(uint64_t fh, uint64_t owner, const LockRange& want, bool wait) {
  FEDFS_TRY(f, FileOf(fh));
  // One attempt: a waiting caller (the FUSE frontend) retries with backoff
  // and stops when its request is interrupted.
  (void)wait;
  return f->fs->SetLk(f->handle, GlobalOwner(owner), want);
}

Status VfsImpl::Flock(uint64_t fh, uint64_t owner, int op) {
  FEDFS_TRY(f, FileOf(fh));
  return f->fs->Flock(f->handle, GlobalOwner(owner), op);
}

// ---------------------------------------------------------------- directories

std::vector<DirEntryOut> VfsImpl::Snapshot(const std::string& path, uint64_t ino,
                                           const VdPtr& vd, uint64_t parent_st_ino,
                                           const std::set<std::string>& left_out) const {
  std::vector<DirEntryOut> out;
  out.reserve(vd->entries.size() + 2);
  out.push_back({".", DirIno(path), S_IFDIR, 1});
  out.push_back({"..", parent_st_ino, S_IFDIR, 2});
  std::lock_guard lock(mu_);
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
      d.ino = DirIno(JoinPath(path, real));
    } else if (auto it = names_.find({ino, e.name}); it != names_.end()) {
      d.ino = inodes_.at(it->second).st_ino;
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

Result<uint64_t> VfsImpl::OpenDir(const Cred& c, uint64_t ino) {
  FEDFS_TRY(r, ResolveDir(ino));
  FEDFS_TRY(vd, deps_.vds->Get(r->path));
  FEDFS_TRY(unasked, Unasked(c, r->path, **vd));
  uint64_t parent_ino = DirIno(std::string(ParentPath(r->path)));
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
        Snapshot(d->path, d->ino, *vd, DirIno(std::string(ParentPath(d->path))), d->unasked));
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

NodeFs* VfsImpl::NodeFsFor(const std::string& node) {
  auto fs = FsOf(node);
  return fs ? fs->get() : nullptr;
}

Result<std::string> VfsImpl::PathOf(uint64_t ino) const {
  FEDFS_TRY(r, Resolve(ino));
  return r->path;
}

std::map<std::string, uint64_t> VfsImpl::FreeBytes() {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(free_mu_);
    if (free_at_ != std::chrono::steady_clock::time_point{} &&
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
  return inodes_.size();
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
  FEDFS_TRY(r, Resolve(ino));
  if (name == kLocationXattr) {
    if (!IsDir(r->type)) return SizedAnswer(r->node, size, needed);
    FEDFS_TRY(vd, deps_.vds->Get(r->path));
    return SizedAnswer(Join((*vd)->holders, ","), size, needed);
  }
  std::string node = r->node;
  if (IsDir(r->type)) {
    FEDFS_TRY(vd, deps_.vds->Get(r->path));
    if ((*vd)->holders.empty()) return Err(ENOENT, r->path);
    node = (*vd)->holders.front();
  } else if (auto f = AnyFileOf(ino); f) {
    // Open here: ask through the handle (the same permission checks, run as
    // the caller; the file the kernel means even if its name has moved).
    auto v = f->fs->GetXattrOf(c, f->handle, name, size, needed);
    if (v || v.error().code != ENOSYS) return v;
  }
  FEDFS_TRY(fs, FsOf(node));
  return (*fs)->GetXattr(c, r->path, name, size, needed);
}

Status VfsImpl::SetXattr(const Cred& c, uint64_t ino, const std::string& name,
                         std::span<const std::byte> value, int flags) {
  if (name == kLocationXattr) return Err(EPERM, "user.fedfs.location is read-only");
  FEDFS_TRY(r, Resolve(ino));
  std::vector<std::string> nodes{r->node};
  if (IsDir(r->type)) {
    FEDFS_TRY(vd, deps_.vds->Get(r->path));
    nodes = (*vd)->holders;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    FEDFS_TRY(fs, FsOf(nodes[i]));
    auto s = (*fs)->SetXattr(c, r->path, name, value, flags);
    if (!s && i == 0) return s;
  }
  return Ok();
}

Result<std::string> VfsImpl::ListXattr(const Cred& c, uint64_t ino, size_t size,
                                       size_t* needed) {
  FEDFS_TRY(r, Resolve(ino));
  std::string node = r->node;
  if (IsDir(r->type)) {
    FEDFS_TRY(vd, deps_.vds->Get(r->path));
    if ((*vd)->holders.empty()) return Err(ENOENT, r->path);
    node = (*vd)->holders.front();
  }
  FEDFS_TRY(fs, FsOf(node));
  size_t need = 0;
  FEDFS_TRY(probe, (*fs)->ListXattr(c, r->path, 0, &need));
  std::string names;
  if (need > 0) {
    FEDFS_TRY(all, (*fs)->ListXattr(c, r->path, need, &need));
    names = std::move(*all);
  }
  names.append(kLocationXattr);
  names.push_back('\0');
  return SizedAnswer(std::move(names), size, needed);
}

Status VfsImpl::RemoveXattr(const Cred& c, uint64_t ino, const std::string& name) {
  if (name == kLocationXattr) return Err(EPERM, "user.fedfs.location is read-only");
  FEDFS_TRY(r, Resolve(ino));
  std::vector<std::string> nodes{r->node};
  if (IsDir(r->type)) {
    FEDFS_TRY(vd, deps_.vds->Get(r->path));
    nodes = (*vd)->holders;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    FEDFS_TRY(fs, FsOf(nodes[i]));
    auto s = (*fs)->RemoveXattr(c, r->path, name);
    if (!s && i == 0) return s;
  }
  return Ok();
}

#undef FEDFS_TRY

}  // namespace fedfs::ns
