// LocalWatch: the autonomy watcher. Local programs may change this node's
// export root behind FedFS' back; LocalWatch watches the local directories
// that some virtual directory covers (inotify) and reports what changed, so
// the VD layer can update or invalidate what it holds.
//
// Ownership. The daemon owns one LocalWatch per node. It owns one inotify fd,
// one eventfd (to wake and stop its thread), an O_PATH fd of the export root
// and its thread; the destructor stops the thread and closes them all.
//
// Threads. Start() launches the watcher thread. Watch, Unwatch, Ignore,
// stats and PauseForTest are thread-safe (one internal mutex; Watch of an
// already watched directory is a hash lookup under it). Both callbacks run on
// the watcher thread only, never concurrently with each other, never under
// the internal mutex: they may call Watch/Unwatch/Ignore, but must not
// destroy the LocalWatch. They should return quickly: while they run, events
// wait in the kernel queue (which overflows past
// /proc/sys/fs/inotify/max_queued_events, reported as below).
//
// What is reported when.
//  * on_change: a batch of LocalChange in the order the kernel reported them,
//    delivered batch_window after the first change of the batch (or at once
//    when a batch reaches kMaxBatch changes). Only direct entries of watched
//    directories: a file or directory created, hard-linked, symlinked, made
//    (mkfifo/mknod) or moved in -> kAdd; unlinked, removed or moved out ->
//    kRemove. A rename within watched directories is a kRemove in the old
//    directory followed by a kAdd in the new one; a move in from an unwatched
//    place is a kAdd only, a move out to one a kRemove only. Types: DT_DIR
//    for directories; for other kAdd entries the type fstatat()
//    (AT_SYMLINK_NOFOLLOW) finds in the watched directory; a kAdd whose entry
//    is already gone again is skipped (its kRemove follows). kRemove of a
//    non-directory carries DT_UNKNOWN. New subdirectories are not watched
//    automatically: the owner calls Watch for the directories it covers.
//  * on_lost: directories whose changes may have been missed; the receiver
//    drops what it caches for them. Delivered with the same batch, after its
//    on_change. Reported are: every watched directory on a queue overflow
//    (IN_Q_OVERFLOW; the watches stay); the directory evicted by the
//    max_watches bound (no longer watched); a watched directory that was
//    itself moved to where no watched directory saw it arrive, or whose
//    file system went away (IN_MOVE_SELF, IN_IGNORED, IN_UNMOUNT), together
//    with every watched directory at or beneath its path (no longer
//    watched): events in it after the move would be taken for its old path.
//    A watched directory renamed from one watched directory to another
//    (FedFS' own renames among them) keeps its watch, and those beneath it
//    theirs, under the new paths, unless the new path names another watched
//    directory still (a rename over an empty one, RENAME_EXCHANGE: lost as
//    above); one that was removed (IN_DELETE_SELF) is unwatched. Neither is
//    reported: their parents' kRemove and kAdd tell of them. Unwatch() is
//    not reported.
//
// Paths. Directories are named by global paths (common/path.h); a path
// that fails ValidateGlobalPath is refused with EINVAL. A directory is opened
// beneath the export root with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS), as LocalNodeFs lists one: a
// symlink on the way is refused with ENOTDIR (not a directory of this node,
// a name conflict where other nodes have one), and the watch is
// added through /proc/self/fd/N of that descriptor. When two watched paths
// lead to the same directory (a bind mount), they share one
// watch and every change is reported for each of them. Directories whose
// relative path does not fit in PATH_MAX cannot be watched (ENAMETOOLONG).
//
// Bounds. At most max_watches kernel watches: past it the least recently
// watched directory (Watch of a watched directory counts as a re-watch) is
// unwatched and reported through on_lost. A batch holds at most kMaxBatch
// changes. Ignore remembers at most kMaxIgnores (dir, name) pairs, each for
// kIgnoreFor.
//
// Suppression. FedFS' own operations change the export root too and report
// those changes themselves. Ignore(path), called before such a change,
// suppresses the next event for that entry seen within kIgnoreFor (each call
// suppresses one event). A missed suppression only means a duplicate report,
// which is harmless.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/result.h"

namespace fedfs::ns {

struct LocalChange {
  enum class Kind : uint8_t { kAdd, kRemove };
  Kind kind;
  std::string dir;   // global path of the directory ("/", "/a/b")
  std::string name;  // entry name in that directory
  uint8_t type;      // DT_* of the entry (DT_UNKNOWN for kRemove of a non-directory)

  bool operator==(const LocalChange&) const = default;
};

struct LocalWatchOptions {
  // Bound on kernel watches; past it, the least recently (re)watched
  // directory is unwatched and reported through on_lost.
  size_t max_watches = 65536;
  // Changes are coalesced this long before they are delivered.
  std::chrono::milliseconds batch_window{20};
  // After a read of the inotify queue that did not fill half the buffer, the
  // thread waits this long before reading again, so a stream of events (one
  // per create, rename, write made through FedFS) costs one wake-up per
  // pause rather than one per event (and the kernel merges repeated events
  // meanwhile). Measured: rename and unlink over 10,000 files through a
  // one-node mount ran 20-40% slower with a wake-up per event.
  std::chrono::microseconds read_pause{2000};
  // Optional: called on the watcher thread, at once (not batched, never
  // suppressed by Ignore), with the global path of a watched directory or
  // of an entry in one whose attributes or data may have changed
  // (IN_ATTRIB, IN_MODIFY): the kernel's cached attributes
  // of it are stale. Must not block.
  std::function<void(const std::string& path)> on_attr;
};

class LocalWatch {
 public:
  using ChangeFn = std::function<void(std::vector<LocalChange>)>;
  using LostFn = std::function<void(std::vector<std::string> dirs)>;

  static constexpr size_t kMaxBatch = 65536;
  static constexpr size_t kMaxIgnores = 4096;
  static constexpr std::chrono::milliseconds kIgnoreFor{2000};

  // export_root: this node's export root directory (must exist). Callbacks
  // run on the watcher thread, never concurrently (see the top of the file).
  static Result<std::unique_ptr<LocalWatch>> Start(std::string export_root, LocalWatchOptions opts,
                                                   ChangeFn on_change, LostFn on_lost);
  ~LocalWatch();  // stops the thread, closes the inotify fd; no callback after it returns
  LocalWatch(const LocalWatch&) = delete;
  LocalWatch& operator=(const LocalWatch&) = delete;

  // Watches the local directory at global path `dir`. No-op (apart from
  // refreshing its place in the max_watches order) if already watched.
  // EINVAL for a malformed path, ENOENT/ENOTDIR if it is not a local
  // directory, EXDEV/ELOOP if it escapes the export root, ENOSPC when the
  // kernel's watch limit is reached.
  Status Watch(const std::string& dir);
  // Stops watching `dir` (no-op if not watched). Not reported via on_lost.
  void Unwatch(const std::string& dir);
  // Suppresses the next event for the entry at global path `path` (not "/")
  // within kIgnoreFor (see the top of the file).
  void Ignore(std::string path);

  struct Stats {
    uint64_t watches;            // kernel watches held now
    uint64_t events;             // inotify events read
    uint64_t changes_delivered;  // LocalChange passed to on_change
    uint64_t overflows;          // IN_Q_OVERFLOW seen
    uint64_t lost_dirs;          // directories passed to on_lost
  };
  Stats stats() const;

  // Test hook: true stops the thread from reading the inotify fd (returns
  // once the thread has stopped reading); false resumes it.
  void PauseForTest(bool paused);

 private:
  struct WatchEntry {
    std::vector<std::string> paths;  // global paths leading to this directory
    std::list<int>::iterator lru;    // position in lru_
  };
  // One event translated under mu_, typed and filtered outside it.
  struct RawChange {
    LocalChange::Kind kind;
    bool is_dir;
    int wd;
    std::vector<std::string> paths;
    std::string name;
  };

  LocalWatch(std::string export_root, LocalWatchOptions opts, ChangeFn on_change, LostFn on_lost,
             int root_fd, int inotify_fd, int event_fd);

  void Run();
  void Wake();
  // Reads every queued inotify event into pending_changes_/pending_lost_.
  size_t ReadEvents();  // bytes read
  void Deliver();
  // Entry type of `name` in the directory of watch `wd` (DT_UNKNOWN if gone).
  uint8_t TypeOf(int wd, const std::string& path, const std::string& name);
  bool ConsumeIgnore(const std::string& dir, const std::string& name);

  // Locked helpers (mu_ held).
  void RemovePathLocked(const std::string& path, bool rm_watch);
  void DropWatchLocked(int wd, std::vector<std::string>* lost);
  void AddLostLocked(std::vector<std::string> dirs);
  // A watched directory renamed from `from` to `to` within watched
  // directories (its IN_MOVED_FROM and IN_MOVED_TO read before its
  // IN_MOVE_SELF): it and the watched directories beneath it keep their
  // watches under the new paths (watch `wd`: false when a path of it has
  // no known destination, then it is lost as before).
  bool RemapMovedLocked(int wd);
  void RemapPathsLocked(const std::string& from, const std::string& to);

  const std::string export_root_;
  const LocalWatchOptions opts_;
  const ChangeFn on_change_;
  const LostFn on_lost_;
  const int root_fd_;
  const int inotify_fd_;
  const int event_fd_;

  mutable std::mutex mu_;
  std::unordered_map<int, WatchEntry> by_wd_;
  std::unordered_map<std::string, int> by_path_;
  std::set<std::string> ordered_paths_;  // by_path_'s keys, for subtree ranges
  std::list<int> lru_;                   // wds, least recently (re)watched first
  std::vector<std::string> lost_from_callers_;  // evictions by Watch, for the thread
  // Directories moved within watched ones, for their IN_MOVE_SELF (the
  // kernel queues IN_MOVED_FROM, IN_MOVED_TO, then IN_MOVE_SELF): the old
  // path by cookie until its IN_MOVED_TO, then old path -> new path. Each
  // bounded by kMaxMoves (cleared past it: a move then reads as lost).
  // A destination is used only within kMoveEvents events of its
  // IN_MOVED_TO (concurrent renames may interleave their events).
  static constexpr size_t kMaxMoves = 1024;
  static constexpr uint64_t kMoveEvents = 64;
  std::unordered_map<uint32_t, std::string> moved_from_;
  std::unordered_map<std::string, std::pair<std::string, uint64_t>> moved_to_;  // new path, events_
  uint64_t events_ = 0, changes_delivered_ = 0, overflows_ = 0, lost_dirs_ = 0;

  std::mutex ignore_mu_;
  struct IgnoreEntry {
    int count;
    std::chrono::steady_clock::time_point until;
  };
  std::unordered_map<std::string, IgnoreEntry> ignores_;  // key: the entry's global path

  std::mutex pause_mu_;
  std::condition_variable pause_cv_;
  bool pause_ = false, paused_ = false, stop_ = false;

  // Watcher-thread state only.
  std::vector<LocalChange> pending_changes_;
  std::vector<std::string> pending_lost_;
  std::unordered_set<std::string> pending_lost_set_;
  std::chrono::steady_clock::time_point batch_start_;
  int cached_wd_ = -1, cached_fd_ = -1;  // O_PATH fd of the last stat'ed directory

  std::thread thread_;
};

}  // namespace fedfs::ns
