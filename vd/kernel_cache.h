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
// InvalidateNamesOf; KernelNameMarks keeps that record).
//
// Threads: any.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>

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
  // A request in directory `dir` may hand the kernel names of it (entries,
  // present or missing, or a name it moves there): called before the
  // request reads the directory, after it took NamesEpoch.
  virtual void NamesFrom(const std::string& dir) { (void)dir; }
  // The names the kernel may hold in directory `dir` are stale: drops every
  // name (InvalidateNames) unless none of `dir` was handed out (NamesFrom)
  // since the last drop. A request that marks `dir` after this reads the
  // directory after the change that made this call (the caller's order).
  virtual void InvalidateNamesOf(const std::string& dir) {
    (void)dir;
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

// The directories whose names went to the kernel since its names were last
// dropped, for KernelCache::NamesFrom/InvalidateNamesOf. Past `max`
// directories it stops counting and says every directory may have names
// (until the next drop). Thread-safe.
class KernelNameMarks {
 public:
  explicit KernelNameMarks(size_t max = 65536) : max_(max) {}
  void Mark(const std::string& dir) {
    std::lock_guard lock(mu_);
    if (all_) return;
    if (dirs_.size() >= max_) {
      all_ = true;
      dirs_.clear();
      return;
    }
    dirs_.insert(dir);
  }
  bool Marked(const std::string& dir) const {
    std::lock_guard lock(mu_);
    return all_ || dirs_.contains(dir);
  }
  // Every name is about to be dropped: called before the drop, so a mark
  // made meanwhile stays (the request that made it may have started after
  // the drop and hand its names for keeps).
  void Clear() {
    std::lock_guard lock(mu_);
    dirs_.clear();
    all_ = false;
  }

 private:
  const size_t max_;
  mutable std::mutex mu_;
  std::unordered_set<std::string> dirs_;
  bool all_ = false;
};

}  // namespace fedfs::ns
