#include "watch/local_watch.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/logging.h"
#include "common/thread_name.h"
#include "common/path.h"

namespace fedfs::ns {
namespace {

constexpr uint32_t kMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                           IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK;
constexpr uint32_t kAttrMask = IN_ATTRIB | IN_MODIFY;
constexpr uint32_t kSelfGone = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_UNMOUNT;
// One read of the inotify fd: room for about a thousand short-named events.
constexpr size_t kReadBuf = 64 * 1024;

std::shared_ptr<spdlog::logger> Log() {
  static auto log = Logger("namespace");
  return log;
}

// openat2(2) beneath `dirfd` without magic links (no glibc wrapper in 2.36).
// Retries EAGAIN, which RESOLVE_BENEATH returns when a concurrent rename made
// the check racy.
// Through no symlink, as the listings the watches go with (LocalNodeFs::
// ListDir): ELOOP for a symlink on the way.
int OpenDirBeneath(int dirfd, const std::string& rel) {
  struct open_how how {};
  how.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS;
  for (int attempt = 0;; ++attempt) {
    long fd = syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof(how));
    if (fd >= 0) return static_cast<int>(fd);
    if (errno == EINTR || (errno == EAGAIN && attempt < 16)) continue;
    return -1;
  }
}

}  // namespace

Result<std::unique_ptr<LocalWatch>> LocalWatch::Start(std::string export_root,
                                                      LocalWatchOptions opts, ChangeFn on_change,
                                                      LostFn on_lost) {
  if (!on_change || !on_lost) return Err(EINVAL, "local watch: callbacks required");
  if (opts.max_watches == 0) return Err(EINVAL, "local watch: max_watches must be at least 1");
  if (opts.batch_window.count() < 0) return Err(EINVAL, "local watch: negative batch_window");
  int root_fd = ::open(export_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return Err(errno, "local watch: open export root " + export_root);
  int ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (ino_fd < 0) {
    int e = errno;
    ::close(root_fd);
    return Err(e, "local watch: inotify_init1");
  }
  int ev_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ev_fd < 0) {
    int e = errno;
    ::close(ino_fd);
    ::close(root_fd);
    return Err(e, "local watch: eventfd");
  }
  std::unique_ptr<LocalWatch> w(new LocalWatch(std::move(export_root), opts, std::move(on_change),
                                               std::move(on_lost), root_fd, ino_fd, ev_fd));
  w->thread_ = std::thread([p = w.get()] { p->Run(); });
  NameThread(w->thread_, "autonomy-watch");
  return w;
}

LocalWatch::LocalWatch(std::string export_root, LocalWatchOptions opts, ChangeFn on_change,
                       LostFn on_lost, int root_fd, int inotify_fd, int event_fd)
    : export_root_(std::move(export_root)),
      opts_(opts),
      on_change_(std::move(on_change)),
      on_lost_(std::move(on_lost)),
      root_fd_(root_fd),
      inotify_fd_(inotify_fd),
      event_fd_(event_fd) {}

LocalWatch::~LocalWatch() {
  {
    std::lock_guard lk(pause_mu_);
    stop_ = true;
    pause_ = false;
  }
  pause_cv_.notify_all();
  Wake();
  if (thread_.joinable()) thread_.join();
  if (cached_fd_ >= 0) ::close(cached_fd_);
  ::close(event_fd_);
  ::close(inotify_fd_);
  ::close(root_fd_);
}

void LocalWatch::Wake() {
  uint64_t one = 1;
  // Fails only when the counter would overflow, which still leaves it readable.
  [[maybe_unused]] ssize_t n = ::write(event_fd_, &one, sizeof(one));
}

// ---------------------------------------------------------------------------
// Watches (any thread)

Status LocalWatch::Watch(const std::string& dir) {
  if (auto st = ValidateGlobalPath(dir); !st) {
    Log()->warn("local watch: refused path: {}", st.error().context);
    return Err(st.error().code, "watch: " + st.error().context);
  }
  std::lock_guard lk(mu_);
  if (auto it = by_path_.find(dir); it != by_path_.end()) {
    auto& e = by_wd_.at(it->second);
    lru_.splice(lru_.end(), lru_, e.lru);
    return Ok();
  }
  int fd = OpenDirBeneath(root_fd_, std::string(RelativePath(dir)));
  if (fd < 0) {
    int e = errno;
    if (e == ELOOP) return Err(ENOTDIR, "watch " + dir + ": a symlink on the way");
    if (e == EXDEV) {
      Log()->warn("local watch: '{}' escapes the export root: refused ({})", dir,
                  std::strerror(e));
    }
    return Err(e, "watch " + dir);
  }
  std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const uint32_t mask = opts_.on_attr ? kMask | kAttrMask : kMask;
  int wd = inotify_add_watch(inotify_fd_, proc.c_str(), mask);
  int e = errno;
  ::close(fd);
  if (wd < 0) return Err(e, "watch " + dir + ": inotify_add_watch");

  auto [it, inserted] = by_wd_.try_emplace(wd);
  if (inserted) {
    lru_.push_back(wd);
    it->second.lru = std::prev(lru_.end());
  } else {
    // The same directory under another path (a symlink beneath the root, or
    // a rename whose IN_MOVE_SELF the thread has not read yet).
    lru_.splice(lru_.end(), lru_, it->second.lru);
  }
  it->second.paths.push_back(dir);
  by_path_.emplace(dir, wd);
  ordered_paths_.insert(dir);

  if (by_wd_.size() > opts_.max_watches) {
    int victim = lru_.front();  // never `wd`: it was just moved to the back
    std::vector<std::string> lost = by_wd_.at(victim).paths;
    for (const auto& p : lost) RemovePathLocked(p, /*rm_watch=*/true);
    Log()->debug("local watch: max_watches {} reached, unwatched '{}'", opts_.max_watches,
                 lost.front());
    AddLostLocked(std::move(lost));
    Wake();
  }
  return Ok();
}

void LocalWatch::Unwatch(const std::string& dir) {
  std::lock_guard lk(mu_);
  RemovePathLocked(dir, /*rm_watch=*/true);
}

void LocalWatch::RemovePathLocked(const std::string& path, bool rm_watch) {
  auto pit = by_path_.find(path);
  if (pit == by_path_.end()) return;
  int wd = pit->second;
  by_path_.erase(pit);
  ordered_paths_.erase(path);
  auto wit = by_wd_.find(wd);
  if (wit == by_wd_.end()) return;
  auto& paths = wit->second.paths;
  paths.erase(std::remove(paths.begin(), paths.end(), path), paths.end());
  if (!paths.empty()) return;
  // EINVAL when the kernel already removed it (IN_IGNORED): nothing to do.
  if (rm_watch) inotify_rm_watch(inotify_fd_, wd);
  lru_.erase(wit->second.lru);
  by_wd_.erase(wit);
}

void LocalWatch::DropWatchLocked(int wd, std::vector<std::string>* lost) {
  auto wit = by_wd_.find(wd);
  if (wit == by_wd_.end()) return;
  std::vector<std::string> gone;
  for (const auto& p : wit->second.paths) {
    // p itself, then its strict descendants: the range [p + "/", p + "0")
    // ('0' follows '/'), or everything for the root.
    gone.push_back(p);
    auto first = p == "/" ? ordered_paths_.begin() : ordered_paths_.lower_bound(p + "/");
    auto last = p == "/" ? ordered_paths_.end() : ordered_paths_.lower_bound(p + "0");
    for (auto it = first; it != last; ++it) {
      if (*it != p) gone.push_back(*it);
    }
  }
  for (const auto& p : gone) RemovePathLocked(p, /*rm_watch=*/true);
  lost->insert(lost->end(), gone.begin(), gone.end());
}

bool LocalWatch::RemapMovedLocked(int wd) {
  auto wit = by_wd_.find(wd);
  if (wit == by_wd_.end()) return false;
  std::vector<std::pair<std::string, std::string>> moves;
  for (const auto& p : wit->second.paths) {
    auto m = moved_to_.find(p);
    // Its IN_MOVED_TO a few events ago, or it moved where nothing watched
    // saw it arrive (an entry left by such a move is not used later).
    if (m == moved_to_.end() || events_ - m->second.second > kMoveEvents) return false;
    // The new path still names another watched directory: one this move
    // replaced (an empty one, about to go) or, with RENAME_EXCHANGE, the
    // other one, which moves next. Lost, as before.
    if (auto taken = by_path_.find(m->second.first); taken != by_path_.end() && taken->second != wd) {
      return false;
    }
    moves.emplace_back(p, m->second.first);
  }
  for (const auto& [from, to] : moves) {
    moved_to_.erase(from);
    RemapPathsLocked(from, to);
  }
  return true;
}

void LocalWatch::RemapPathsLocked(const std::string& from, const std::string& to) {
  if (from == "/" || from == to) return;
  std::vector<std::string> olds{from};
  for (auto it = ordered_paths_.lower_bound(from + "/"); it != ordered_paths_.lower_bound(from + "0"); ++it) {
    olds.push_back(*it);
  }
  for (const std::string& old : olds) {
    auto pit = by_path_.find(old);
    if (pit == by_path_.end()) continue;
    const int wd = pit->second;
    const std::string now = to + old.substr(from.size());
    by_path_.erase(pit);
    ordered_paths_.erase(old);
    auto& paths = by_wd_.at(wd).paths;
    paths.erase(std::remove(paths.begin(), paths.end(), old), paths.end());
    // A path beneath that still names another watch (of a directory gone
    // meanwhile, whose IN_DELETE_SELF is still queued): it goes.
    if (auto taken = by_path_.find(now); taken != by_path_.end() && taken->second != wd) {
      RemovePathLocked(now, /*rm_watch=*/true);
    }
    if (by_path_.emplace(now, wd).second) {
      ordered_paths_.insert(now);
      paths.push_back(now);
    }
  }
}

void LocalWatch::AddLostLocked(std::vector<std::string> dirs) {
  lost_from_callers_.insert(lost_from_callers_.end(), std::make_move_iterator(dirs.begin()),
                            std::make_move_iterator(dirs.end()));
}

// ---------------------------------------------------------------------------
// Suppression

void LocalWatch::Ignore(std::string key) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lk(ignore_mu_);
  auto it = ignores_.find(key);
  if (it == ignores_.end() && ignores_.size() >= kMaxIgnores) {
    std::erase_if(ignores_, [&](const auto& kv) { return kv.second.until <= now; });
    if (ignores_.size() >= kMaxIgnores) {
      ignores_.erase(std::min_element(ignores_.begin(), ignores_.end(), [](const auto& a,
                                                                            const auto& b) {
        return a.second.until < b.second.until;
      }));
    }
  }
  auto& e = ignores_[std::move(key)];
  if (e.until <= now) e.count = 0;
  e.count++;
  e.until = now + kIgnoreFor;
}

bool LocalWatch::ConsumeIgnore(const std::string& dir, const std::string& name) {
  const std::string key = JoinPath(dir, name);
  std::lock_guard lk(ignore_mu_);
  if (ignores_.empty()) return false;
  auto it = ignores_.find(key);
  if (it == ignores_.end()) return false;
  if (it->second.until <= std::chrono::steady_clock::now()) {
    ignores_.erase(it);
    return false;
  }
  if (--it->second.count <= 0) ignores_.erase(it);
  return true;
}

// ---------------------------------------------------------------------------
// The watcher thread

void LocalWatch::Run() {
  for (;;) {
    {
      std::unique_lock lk(pause_mu_);
      if (stop_) return;
      if (pause_) {
        paused_ = true;
        pause_cv_.notify_all();
        pause_cv_.wait(lk, [&] { return !pause_ || stop_; });
        paused_ = false;
        if (stop_) return;
      }
    }
    int timeout = -1;
    if (!pending_changes_.empty() || !pending_lost_.empty()) {
      auto left = batch_start_ + opts_.batch_window - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) {
        Deliver();
        continue;
      }
      timeout = static_cast<int>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(left).count()) + 1;
    }
    struct pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {event_fd_, POLLIN, 0}};
    int n = ::poll(fds, 2, timeout);
    if (n < 0) {
      if (errno != EINTR) Log()->error("local watch: poll: {}", std::strerror(errno));
      continue;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(event_fd_, &v, sizeof(v));
    }
    std::vector<std::string> from_callers;
    {
      std::lock_guard lk(mu_);
      from_callers.swap(lost_from_callers_);
    }
    if (!from_callers.empty()) {
      if (pending_changes_.empty() && pending_lost_.empty()) {
        batch_start_ = std::chrono::steady_clock::now();
      }
      for (auto& d : from_callers) {
        if (pending_lost_set_.insert(d).second) pending_lost_.push_back(std::move(d));
      }
    }
    if (fds[0].revents & POLLIN && ReadEvents() < kReadBuf / 2 &&
        opts_.read_pause.count() > 0) {
      std::this_thread::sleep_for(opts_.read_pause);
    }
    if (pending_changes_.size() >= kMaxBatch) Deliver();
  }
}

size_t LocalWatch::ReadEvents() {
  alignas(struct inotify_event) char buf[kReadBuf];
  ssize_t n = ::read(inotify_fd_, buf, sizeof(buf));
  if (n <= 0) {
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      Log()->error("local watch: read inotify: {}", std::strerror(errno));
    }
    return 0;
  }
  const bool was_empty = pending_changes_.empty() && pending_lost_.empty();

  // Under mu_: translate wds to paths, drop watches that went away.
  std::vector<RawChange> raw;
  std::vector<std::string> lost;
  std::vector<std::string> attrs;  // paths whose attributes changed
  {
    std::lock_guard lk(mu_);
    for (ssize_t off = 0; off < n;) {
      const auto* ev = reinterpret_cast<const struct inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
      events_++;
      if (ev->mask & IN_Q_OVERFLOW) {
        overflows_++;
        Log()->warn("local watch: inotify queue overflow; {} watched directories reported lost",
                    ordered_paths_.size());
        lost.insert(lost.end(), ordered_paths_.begin(), ordered_paths_.end());
        continue;
      }
      auto it = by_wd_.find(ev->wd);
      if (it == by_wd_.end()) continue;  // unwatched since the event was queued
      const bool is_root =
          std::find(it->second.paths.begin(), it->second.paths.end(), "/") != it->second.paths.end();
      if ((ev->mask & IN_DELETE_SELF) && !is_root) {
        // Removed: it was empty, the events of what it held came before
        // this one, and its parent's IN_DELETE reports its name. Nothing
        // was missed (FedFS' own rmdir used to drop the VDs and the kernel
        // names of the federation through this). Not the export root: no
        // parent tells of it.
        std::vector<std::string> gone;
        DropWatchLocked(ev->wd, &gone);
        continue;
      }
      if ((ev->mask & IN_MOVE_SELF) && !is_root && RemapMovedLocked(ev->wd)) continue;
      if (ev->mask & kSelfGone) {
        DropWatchLocked(ev->wd, &lost);
        continue;
      }
      if ((ev->mask & IN_ISDIR) && (ev->mask & (IN_MOVED_FROM | IN_MOVED_TO)) && ev->len > 0 &&
          ev->cookie != 0 && !it->second.paths.empty()) {
        const std::string path = JoinPath(it->second.paths.front(), ev->name);
        if (moved_from_.size() >= kMaxMoves) moved_from_.clear();
        if (moved_to_.size() >= kMaxMoves) moved_to_.clear();
        if (ev->mask & IN_MOVED_FROM) {
          moved_from_[ev->cookie] = path;
        } else if (auto m = moved_from_.find(ev->cookie); m != moved_from_.end()) {
          moved_to_[m->second] = {path, events_};
          moved_from_.erase(m);
        }
      }
      if ((ev->mask & kAttrMask) && opts_.on_attr) {
        for (const auto& p : it->second.paths) {
          attrs.push_back(ev->len == 0 ? p : JoinPath(p, ev->name));
        }
        if (!(ev->mask & ~(kAttrMask | IN_ISDIR))) continue;
      }
      if (ev->len == 0) continue;
      RawChange rc;
      if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
        rc.kind = LocalChange::Kind::kAdd;
      } else if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) {
        rc.kind = LocalChange::Kind::kRemove;
      } else {
        continue;
      }
      rc.is_dir = (ev->mask & IN_ISDIR) != 0;
      rc.wd = ev->wd;
      rc.paths = it->second.paths;
      rc.name = ev->name;  // NUL-padded
      raw.push_back(std::move(rc));
    }
  }

  // Outside mu_: attribute changes, entry types and suppression.
  for (size_t i = 0; i < attrs.size(); ++i) {
    if (i > 0 && attrs[i] == attrs[i - 1]) continue;  // a burst of writes
    opts_.on_attr(attrs[i]);
  }
  for (auto& rc : raw) {
    // FedFS's own changes first (each event consumes its own suppression, so
    // the type of an entry nobody will hear of is never looked up).
    std::vector<std::string> report;
    for (auto& p : rc.paths) {
      if (!ConsumeIgnore(p, rc.name)) report.push_back(std::move(p));
    }
    if (report.empty()) continue;
    uint8_t type = DT_UNKNOWN;
    if (rc.is_dir) {
      type = DT_DIR;
    } else if (rc.kind == LocalChange::Kind::kAdd) {
      type = TypeOf(rc.wd, report.front(), rc.name);
      if (type == DT_UNKNOWN) continue;  // already gone: its kRemove follows
    }
    for (auto& p : report) pending_changes_.push_back(LocalChange{rc.kind, std::move(p), rc.name, type});
  }
  for (auto& d : lost) {
    if (pending_lost_set_.insert(d).second) pending_lost_.push_back(std::move(d));
  }
  if (was_empty && (!pending_changes_.empty() || !pending_lost_.empty())) {
    batch_start_ = std::chrono::steady_clock::now();
  }
  return static_cast<size_t>(n);
}

uint8_t LocalWatch::TypeOf(int wd, const std::string& path, const std::string& name) {
  if (cached_wd_ != wd) {
    if (cached_fd_ >= 0) ::close(cached_fd_);
    cached_fd_ = OpenDirBeneath(root_fd_, std::string(RelativePath(path)));
    cached_wd_ = cached_fd_ >= 0 ? wd : -1;
    if (cached_fd_ < 0) return DT_UNKNOWN;
  }
  struct stat st;
  if (::fstatat(cached_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return DT_UNKNOWN;
  return static_cast<uint8_t>(IFTODT(st.st_mode));
}

void LocalWatch::Deliver() {
  std::vector<LocalChange> changes;
  std::vector<std::string> lost;
  changes.swap(pending_changes_);
  lost.swap(pending_lost_);
  pending_lost_set_.clear();
  {
    std::lock_guard lk(mu_);
    changes_delivered_ += changes.size();
    lost_dirs_ += lost.size();
  }
  if (!changes.empty()) on_change_(std::move(changes));
  if (!lost.empty()) on_lost_(std::move(lost));
}

// ---------------------------------------------------------------------------

LocalWatch::Stats LocalWatch::stats() const {
  std::lock_guard lk(mu_);
  return Stats{by_wd_.size(), events_, changes_delivered_, overflows_, lost_dirs_};
}

void LocalWatch::PauseForTest(bool paused) {
  std::unique_lock lk(pause_mu_);
  pause_ = paused;
  if (!paused) {
    pause_cv_.notify_all();
    return;
  }
  Wake();
  pause_cv_.wait(lk, [&] { return paused_ || stop_; });
}

}  // namespace fedfs::ns
