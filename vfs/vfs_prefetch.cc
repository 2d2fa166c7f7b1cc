// Attributes of remote files fetched along with a lookup's (docs/namespace.md,
// "Neighbours' attributes"). A program that stats the files of a directory
// held on another node one by one (ls -l without readdirplus, find, make,
// a job reading its neighbour's outputs) would cost one round trip to that
// node per file. Once two lookups in a row asked the same node for files of
// the same directory, the next one asks, in the same request (kStatMany),
// for up to kAlong more: regular files that follow its name in the node's
// own listing of the directory (as the asker may list it), in byte order
// and in version order (files/name_windows.h). The node watches each as it
// watches a looked-up file (StatWatched): it tells this node of every later
// change, and the change drops the kept attributes (RemoteAttrsChanged). A
// later lookup of such a name answers from them, with the watch, as if it
// had asked. Kept are only answers to a request during which no callback at
// all arrived (one of them could have been about these files); they are
// dropped after kKeptFor, past kKeptMax, when this node itself changed a
// remote file since (its node does not tell the session that changed it),
// and when the node's session is lost. Where names asked along served no
// lookup before the next one missed (a directory whose files this node
// itself keeps changing, say), the next kSkipAlong misses ask for their
// own name only, twice as many after each such ask in a row.
// An unlink by this node of a watched file with one link changes no other
// file's attributes: it drops what is kept of that file only (UnlinkChanging),
// so a job that removes its neighbour's files one by one keeps using the
// names asked along.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>

#include "common/path.h"
#include "vfs/vfs_impl.h"

namespace fedfs::ns {

namespace {
constexpr size_t kAlong = 128;    // names asked along with a lookup's
constexpr size_t kKeptMax = 16384;
constexpr auto kKeptFor = std::chrono::seconds(2);
constexpr int kSkipAlong = 15;
constexpr int kSkipAlongMax = 1023;
}  // namespace

void VfsImpl::ErasePrefetchedLocked(const std::pair<std::string, Handle>& key) {
  auto it = prefetch_of_.find(key);
  if (it == prefetch_of_.end()) return;
  prefetched_.erase(it->second);
  prefetch_of_.erase(it);
}

void VfsImpl::ErasePrefetchedPathLocked(const std::string& path) {
  auto it = prefetched_.find(path);
  if (it == prefetched_.end()) return;
  prefetch_of_.erase({it->second.node, it->second.watch});
  prefetched_.erase(it);
}

Result<WatchedStat> VfsImpl::StatForLookup(const Cred& c, const std::string& dir_path,
                                           const std::string& real_name, const std::string& node,
                                           NodeFs& fs, uint64_t* taken) {
  const std::string path = JoinPath(dir_path, real_name);
  const uint64_t changes = local_changes_.load(std::memory_order_acquire);
  const auto now = std::chrono::steady_clock::now();
  bool along = false;
  {
    std::lock_guard lock(files_mu_);
    if (auto it = prefetched_.find(path); it != prefetched_.end()) {
      const Prefetched p = it->second;
      prefetch_of_.erase({p.node, p.watch});
      prefetched_.erase(it);
      if (p.node == node && p.changes == changes && now - p.at < kKeptFor) {
        *taken = callbacks_taken_;
        along_served_ = true;
        along_skip_next_ = kSkipAlong;
        return WatchedStat{p.st, p.watch};
      }
    }
    if (scan_dir_ == dir_path && scan_node_ == node) {
      ++scan_misses_;
    } else {
      scan_dir_ = dir_path;
      scan_node_ = node;
      scan_misses_ = 1;
      along_served_ = true;
      along_skip_ = 0;
      along_skip_next_ = kSkipAlong;
    }
    if (scan_misses_ >= 2) {
      if (along_skip_ > 0) {
        --along_skip_;
      } else if (!along_served_) {
        // The names asked along last time served no lookup before this
        // one missed (they changed, or this node changes files there, or
        // the lookups go elsewhere): the next misses ask for one name, 15
        // of them, twice as many after each such ask in a row (up to 1023).
        along_skip_ = std::max(along_skip_next_, kSkipAlong);
        along_skip_next_ = std::min(2 * along_skip_ + 1, kSkipAlongMax);
        along_served_ = true;
      } else {
        along = true;
        along_served_ = false;
      }
    }
    *taken = callbacks_taken_;
  }
  if (!along) return fs.StatWatched(c, path);
  auto many = fs.StatWatchedAlong(c, dir_path, real_name, kAlong);
  if (!many) return fs.StatWatched(c, path);  // e.g. a node that does not know kStatMany
  {
    std::lock_guard lock(files_mu_);
    if (callbacks_taken_ == *taken) {
      for (size_t i = 1; i < many->size(); ++i) {
        const auto& [name, w] = (*many)[i];
        if (!w || !w->watch || !S_ISREG(w->st.st_mode) || w->st.st_nlink != 1) continue;
        std::string p = JoinPath(dir_path, name);
        if (auto old = prefetched_.find(p); old != prefetched_.end()) {
          prefetch_of_.erase({old->second.node, old->second.watch});
        }
        prefetch_of_[{node, *w->watch}] = p;
        prefetched_[p] = Prefetched{node, *w->watch, w->st, changes, now};
        prefetch_order_.push_back(std::move(p));
      }
      // Every kept path is in prefetch_order_: bounding it bounds them.
      while (prefetch_order_.size() > kKeptMax) {
        ErasePrefetchedPathLocked(prefetch_order_.front());
        prefetch_order_.pop_front();
      }
    }
  }
  return std::move((*many)[0].second);
}

void VfsImpl::UnlinkChanging(uint64_t parent, const std::string& dir_path,
                             const std::string& name) {
  // The file the name stands for here, with one link and watched for this
  // node: its node tells this node of every change another session makes,
  // a second name included, so the unlink can change no other file's
  // attributes (were it another file, now, its kept attributes go with its
  // path; one with more names is never kept). Else every kept attribute goes.
  // No lookup in the directory runs meanwhile to keep the file's attributes
  // again: the kernel holds the directory's lock for the unlink.
  {
    std::lock_guard lock(mu_);  // order: mu_, files_mu_
    const auto known = table_.Named(parent, name);
    Inode* n = known ? table_.Find(*known) : nullptr;
    if (n != nullptr && S_ISREG(n->type) && n->last.st_nlink == 1) {
      std::lock_guard files_lock(files_mu_);
      if (watch_of_.contains(*known)) {
        n->lookup_attr = false;
        ErasePrefetchedPathLocked(JoinPath(dir_path, name));
        return;
      }
    }
  }
  Changing();
}

}  // namespace fedfs::ns
