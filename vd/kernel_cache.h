// KernelCache: what the namespace tells the kernel's caches of this node's
// FUSE mount (implemented by fuse/, absent in simulations and unit tests).
//
// The kernel caches names (dentries, positive and negative) and attributes
// for the timeouts each reply carries. FedFS lets it cache names only while
// it can take them back at once: every change of a directory that this
// node's kernel may have names of ends, before the change is acknowledged,
// with InvalidateNames() here (docs/namespace.md, "Kernel caches"). Both
// calls are one write to /dev/fuse that takes no lock in the kernel, so they
// are safe from any thread, including one serving a request in the very
// directory concerned (fuse_lowlevel_notify_inval_entry is not: it waits for
// the directory's lock, which a creating process may hold while it waits for
// this node).
//
// Both drop every name the kernel has, in every directory: so a drop for
// one directory is made only when names of that directory may be in the
// kernel, i.e. were handed to it since the last drop (NamesFrom,
// InvalidateNamesOf; KernelNameMarks keeps that record, by name: a change
// of names this kernel was never handed drops nothing).
//
// Threads: any.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace fedfs::ns {

class KernelCache {
 public:
  virtual ~KernelCache() = default;
  // True when the kernel takes InvalidateNames (Linux 6.16+, FUSE 7.44:
  // FUSE_NOTIFY_INC_EPOCH). While false, names must not be cached.
  virtual bool Coherent() const = 0;
  // Every name the kernel holds for this mount is stale: each is looked up
  // again at its next use (lazily; nothing is sent now).
  virtual void InvalidateNames() = 0;
  // How many times InvalidateNames was called. A reply that hands the kernel
  // a name must not let it cache the name if this moved while the request
  // was served: the reply may predate the change that invalidated it.
  virtual uint64_t NamesEpoch() const = 0;
  // A request in directory `dir` may hand the kernel name `name` of it
  // (an entry, present or missing, or a name it makes or moves there; ""
  // for any name of `dir`): called before the request reads the directory,
  // after it took NamesEpoch.
  virtual void NamesFrom(const std::string& dir, const std::string& name) {
    (void)dir;
    (void)name;
  }
  // The names `names` of directory `dir` (null: any name of it) may be
  // stale in the kernel: drops every name (InvalidateNames) unless none of
  // them was handed out (NamesFrom) since the last drop. A request that
  // marks one after this reads the directory after the change that made
  // this call (the caller's order).
  virtual void InvalidateNamesOf(const std::string& dir,
                                 const std::vector<std::string>* names = nullptr) {
    (void)dir;
    (void)names;
    InvalidateNames();
  }
  // The kernel's cached attributes of FUSE inode `ino` are stale. False: the
  // kernel has no inode `ino` (not yet, or no longer); true otherwise.
  virtual bool InvalidateAttrs(uint64_t ino) = 0;
  // Its attributes and the pages it caches of bytes [offset, offset +
  // length) are stale (length DataRange::kToEnd: to the end). Unlike the
  // calls above this may block: it waits for the pages being read in (whose
  // reads this node's daemon serves) and writes back pages dirtied through
  // a shared mapping. Never from the transport's progress context or from
  // a request of the same inode.
  virtual void InvalidateData(uint64_t ino, uint64_t offset, uint64_t length) {
    (void)offset;
    (void)length;
    InvalidateAttrs(ino);
  }
};

// The names that went to the kernel since its names were last dropped, by
// directory, for KernelCache::NamesFrom/InvalidateNamesOf. A name is kept
// by its base (before its last '@': a conflict's alias "a@n2" and the real
// name "a" are one), so a change of "a" finds the kernel's "a@n2". Past
// `max_names` names in one directory that directory counts as wholly
// handed out; past `max` marks in all, every directory does (until the
// next drop). Thread-safe.
class KernelNameMarks {
 public:
  explicit KernelNameMarks(size_t max = 65536, size_t max_names = 4096)
      : max_(max), max_names_(max_names) {}
  // `name` "": any name of `dir`.
  void Mark(const std::string& dir, const std::string& name) {
    std::lock_guard lock(mu_);
    if (all_) return;
    if (marks_ >= max_) {
      all_ = true;
      dirs_.clear();
      marks_ = 0;
      return;
    }
    auto [it, added] = dirs_.try_emplace(dir);
    if (added) ++marks_;
    Dir& d = it->second;
    if (d.whole) return;
    if (name.empty() || d.names.size() >= max_names_) {
      marks_ -= d.names.size();
      d.names.clear();
      d.whole = true;
      return;
    }
    if (d.names.insert(Base(name)).second) ++marks_;
  }
  // Whether a name of `dir` among `names` (null: any) was marked.
  bool Marked(const std::string& dir, const std::vector<std::string>* names = nullptr) const {
    std::lock_guard lock(mu_);
    if (all_) return true;
    auto it = dirs_.find(dir);
    if (it == dirs_.end()) return false;
    if (it->second.whole || names == nullptr) return true;
    for (const std::string& n : *names) {
      if (n.empty() || it->second.names.contains(Base(n))) return true;
    }
    return false;
  }
  // Every name is about to be dropped: called before the drop, so a mark
  // made meanwhile stays (the request that made it may have started after
  // the drop and hand its names for keeps).
  void Clear() {
    std::lock_guard lock(mu_);
    dirs_.clear();
    marks_ = 0;
    all_ = false;
  }

 private:
  struct Dir {
    bool whole = false;
    std::unordered_set<std::string> names;
  };
  static std::string Base(const std::string& name) {
    const size_t at = name.rfind('@');
    return at == std::string::npos || at == 0 ? name : name.substr(0, at);
  }
  const size_t max_;
  const size_t max_names_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Dir> dirs_;
  size_t marks_ = 0;  // directories and names in dirs_
  bool all_ = false;
};

}  // namespace fedfs::ns
