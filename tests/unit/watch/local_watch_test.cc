// LocalWatch (watch/local_watch.h) on a temporary export root: the exact
// changes delivered for local operations, renames across watched and
// unwatched directories, lost directories (removed/renamed watched
// directories, the max_watches bound, queue overflow), path escapes and
// suppression. Waits are bounded polls on a condition variable; "nothing
// else was reported" is checked with a sentinel file created last (inotify
// reports the events of one instance in order).
#include "watch/local_watch.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "common/path.h"

namespace fedfs::ns {

// For gtest messages (found by ADL, so outside the anonymous namespace).
static void PrintTo(const LocalChange& c, std::ostream* os) {
  *os << (c.kind == LocalChange::Kind::kAdd ? "add " : "remove ") << c.dir << " " << c.name
      << " type " << int(c.type);
}

namespace {

using Kind = LocalChange::Kind;
constexpr auto kWait = std::chrono::seconds(20);  // bound on every wait; never reached when correct

// Receives both callbacks; tests wait on it.
class Collector {
 public:
  void OnChange(std::vector<LocalChange> c) {
    std::lock_guard lk(mu_);
    changes_.insert(changes_.end(), c.begin(), c.end());
    batches_++;
    cv_.notify_all();
  }
  void OnLost(std::vector<std::string> d) {
    std::lock_guard lk(mu_);
    lost_.insert(lost_.end(), d.begin(), d.end());
    cv_.notify_all();
  }
  // Waits (bounded) until pred(changes, lost) holds; false on timeout.
  template <class Pred>
  bool WaitFor(Pred pred) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, kWait, [&] { return pred(changes_, lost_); });
  }
  // Removes and returns the changes up to and including the first kAdd of
  // (dir, name).
  std::vector<LocalChange> TakeThrough(const std::string& dir, const std::string& name) {
    std::lock_guard lk(mu_);
    auto it = std::find_if(changes_.begin(), changes_.end(), [&](const LocalChange& c) {
      return c.kind == Kind::kAdd && c.dir == dir && c.name == name;
    });
    if (it != changes_.end()) ++it;
    std::vector<LocalChange> out(changes_.begin(), it);
    changes_.erase(changes_.begin(), it);
    return out;
  }
  std::vector<std::string> TakeLost() {
    std::lock_guard lk(mu_);
    auto out = std::move(lost_);
    lost_.clear();
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<LocalChange> changes_;
  std::vector<std::string> lost_;
  int batches_ = 0;
};

bool IsSentinel(const LocalChange& c) { return c.name.rfind(".sentinel-", 0) == 0; }

class LocalWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = std::filesystem::temp_directory_path() / "fedfs-watch-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    base_ = tmpl;
    root_ = base_ + "/root";
    outside_ = base_ + "/outside";
    std::filesystem::create_directory(root_);
    std::filesystem::create_directory(outside_);
  }
  void TearDown() override {
    watch_.reset();  // no events while the tree goes
    if (!base_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(base_, ec);
    }
  }

  void StartWatch(LocalWatchOptions opts = {}) {
    auto w = LocalWatch::Start(
        root_, opts, [this](std::vector<LocalChange> c) { col_.OnChange(std::move(c)); },
        [this](std::vector<std::string> d) { col_.OnLost(std::move(d)); });
    ASSERT_TRUE(w) << w.error().ToString();
    watch_ = std::move(*w);
  }

  // The local path of global path `p`.
  std::string R(const std::string& p) const { return p == "/" ? root_ : root_ + p; }
  void Touch(const std::string& p) {
    int fd = ::open(R(p).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << p;
    ::close(fd);
  }
  void Mkdir(const std::string& p) { ASSERT_EQ(::mkdir(R(p).c_str(), 0755), 0) << p; }

  // Creates a sentinel in watched `dir`, waits for its kAdd and returns the
  // changes reported before it (sentinels of earlier calls left out).
  std::vector<LocalChange> Settle(const std::string& dir = "/") {
    std::string name = ".sentinel-" + std::to_string(++sentinels_);
    std::string path = JoinPath(dir, name);
    Touch(path);
    bool seen = col_.WaitFor([&](const auto& ch, const auto&) {
      return std::any_of(ch.begin(), ch.end(), [&](const LocalChange& c) {
        return c.kind == Kind::kAdd && c.dir == dir && c.name == name;
      });
    });
    EXPECT_TRUE(seen) << "sentinel " << path << " not reported";
    ::unlink(R(path).c_str());
    auto got = col_.TakeThrough(dir, name);
    std::erase_if(got, IsSentinel);
    return got;
  }

  std::string base_, root_, outside_;
  Collector col_;
  std::unique_ptr<LocalWatch> watch_;
  int sentinels_ = 0;
};

LocalChange Add(std::string dir, std::string name, uint8_t type) {
  return LocalChange{Kind::kAdd, std::move(dir), std::move(name), type};
}
LocalChange Rm(std::string dir, std::string name, uint8_t type = DT_UNKNOWN) {
  return LocalChange{Kind::kRemove, std::move(dir), std::move(name), type};
}

TEST_F(LocalWatchTest, StartFailsForMissingRoot) {
  auto w = LocalWatch::Start(root_ + "/nope", {}, [](auto) {}, [](auto) {});
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, ENOENT);
}

TEST_F(LocalWatchTest, ReportsEachKindOfEntry) {
  StartWatch();
  ASSERT_TRUE(watch_->Watch("/"));
  ASSERT_TRUE(watch_->Watch("/"));  // already watched: no-op
  Mkdir("/d");
  Touch("/f");
  ASSERT_EQ(::symlink("f", R("/l").c_str()), 0);
  ASSERT_EQ(::mkfifo(R("/p").c_str(), 0644), 0);
  ASSERT_EQ(::link(R("/f").c_str(), R("/h").c_str()), 0);
  EXPECT_EQ(Settle(), (std::vector<LocalChange>{Add("/", "d", DT_DIR), Add("/", "f", DT_REG),
                                                Add("/", "l", DT_LNK), Add("/", "p", DT_FIFO),
                                                Add("/", "h", DT_REG)}));

  ASSERT_EQ(::unlink(R("/f").c_str()), 0);
  ASSERT_EQ(::rmdir(R("/d").c_str()), 0);
  ASSERT_EQ(::unlink(R("/l").c_str()), 0);
  ASSERT_EQ(::rename(R("/p").c_str(), R("/q").c_str()), 0);
  EXPECT_EQ(Settle(), (std::vector<LocalChange>{Rm("/", "f"), Rm("/", "d", DT_DIR), Rm("/", "l"),
                                                Rm("/", "p"), Add("/", "q", DT_FIFO)}));
  EXPECT_TRUE(col_.TakeLost().empty());
  auto s = watch_->stats();
  EXPECT_EQ(s.watches, 1u);
  EXPECT_GE(s.events, 10u);
  EXPECT_GE(s.changes_delivered, 10u);
  EXPECT_EQ(s.overflows, 0u);
  EXPECT_EQ(s.lost_dirs, 0u);
}

TEST_F(LocalWatchTest, ChangesInUnwatchedSubdirectoriesAreNotReported) {
  Mkdir("/d");
  StartWatch();
  ASSERT_TRUE(watch_->Watch("/"));
  Touch("/d/inner");
  Mkdir("/d/sub");
  EXPECT_TRUE(Settle().empty());
}

TEST_F(LocalWatchTest, RenameBetweenWatchedDirectories) {
  Mkdir("/a");
  Mkdir("/b");
  Mkdir("/a/sub");
  Touch("/a/x");
  StartWatch();
  ASSERT_TRUE(watch_->Watch("/a"));
  ASSERT_TRUE(watch_->Watch("/b"));
  ASSERT_EQ(::rename(R("/a/x").c_str(), R("/b/y").c_str()), 0);
  ASSERT_EQ(::rename(R("/a/sub").c_str(), R("/b/sub2").c_str()), 0);
  EXPECT_EQ(Settle("/a"), (std::vector<LocalChange>{Rm("/a", "x"), Add("/b", "y", DT_REG),
                                                    Rm("/a", "sub", DT_DIR),
                                                    Add("/b", "sub2", DT_DIR)}));
}

TEST_F(LocalWatchTest, MovesInFromAndOutToUnwatchedPlaces) {
  Mkdir("/w");
  Mkdir("/u");
  Touch("/u/x");
  Touch("/w/y");
  int fd = ::open((outside_ + "/z").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ::close(fd);
  StartWatch();
  ASSERT_TRUE(watch_->Watch("/w"));
  ASSERT_EQ(::rename(R("/u/x").c_str(), R("/w/x").c_str()), 0);          // unwatched dir -> in
  ASSERT_EQ(::rename(R("/w/y").c_str(), R("/u/y").c_str()), 0);          // out -> unwatched dir
  ASSERT_EQ(::rename((outside_ + "/z").c_str(), R("/w/z").c_str()), 0);  // from outside the root
  EXPECT_EQ(Settle("/w"), (std::vector<LocalChange>{Add("/w", "x", DT_REG), Rm("/w", "y"),
                                                    Add("/w", "z", DT_REG)}));
}

// A watched directory moved where no watched directory sees it arrive is
// lost (events in it after the move would be taken for its old path), with
// the watched directories beneath it. One renamed between watched
// directories keeps its watches under the new paths, and a removed one is
// unwatched (it was empty): neither is lost, their parents report them, so
// FedFS' own rmdir and rename drop nothing anywhere.
TEST_F(LocalWatchTest, MovedAwayWatchedDirectoryIsLostARenamedOrRemovedOneIsNot) {
  Mkdir("/x");
  Mkdir("/d");
  Mkdir("/d/e");
  Mkdir("/d/e/f");
  Mkdir("/d-x");  // sorts between "/d" and "/d/e": must not be taken for the subtree
  Mkdir("/u");    // not watched
  StartWatch();
  for (const char* p : {"/", "/x", "/d", "/d/e", "/d/e/f", "/d-x"}) {
    ASSERT_TRUE(watch_->Watch(p)) << p;
  }
  EXPECT_EQ(watch_->stats().watches, 6u);

  ASSERT_EQ(::rmdir(R("/x").c_str()), 0);
  EXPECT_EQ(Settle(), (std::vector<LocalChange>{Rm("/", "x", DT_DIR)}));
  EXPECT_TRUE(col_.TakeLost().empty());
  EXPECT_EQ(watch_->stats().watches, 5u);

  // Renamed within "/": its watches follow, and a change in it is reported
  // under the new path.
  ASSERT_EQ(::rename(R("/d").c_str(), R("/d2").c_str()), 0);
  EXPECT_EQ(Settle(), (std::vector<LocalChange>{Rm("/", "d", DT_DIR), Add("/", "d2", DT_DIR)}));
  Touch("/d2/e/n");
  EXPECT_EQ(Settle("/d2/e"), (std::vector<LocalChange>{Add("/d2/e", "n", DT_REG)}));
  EXPECT_TRUE(col_.TakeLost().empty());
  EXPECT_EQ(watch_->stats().watches, 5u);
  ASSERT_TRUE(watch_->Watch("/d2/e/f"));  // already watched under its new path
  EXPECT_EQ(watch_->stats().watches, 5u);

  // Two watched directories exchanged: the first to move is lost, the
  // other keeps its watch under its new path.
  Mkdir("/y");
  ASSERT_TRUE(watch_->Watch("/y"));
  ASSERT_EQ(::renameat2(AT_FDCWD, R("/y").c_str(), AT_FDCWD, R("/d-x").c_str(), RENAME_EXCHANGE), 0);
  ASSERT_TRUE(col_.WaitFor([](const auto&, const auto& lost) { return !lost.empty(); }));
  EXPECT_EQ(col_.TakeLost(), (std::vector<std::string>{"/y"}));
  (void)Settle();
  Touch("/y/was-d-x");
  EXPECT_EQ(Settle("/y"), (std::vector<LocalChange>{Add("/y", "was-d-x", DT_REG)}));
  ASSERT_EQ(::rmdir(R("/d-x").c_str()), 0);  // the old /y, unwatched now
  (void)Settle();
  EXPECT_EQ(watch_->stats().watches, 5u);

  // Moved into an unwatched directory: lost, with what is beneath it.
  ASSERT_EQ(::rename(R("/d2").c_str(), R("/u/d2").c_str()), 0);
  ASSERT_TRUE(col_.WaitFor([](const auto&, const auto& lost) { return lost.size() >= 3; }));
  EXPECT_EQ(Settle(), (std::vector<LocalChange>{Rm("/", "d2", DT_DIR)}));
  EXPECT_EQ(col_.TakeLost(), (std::vector<std::string>{"/d2", "/d2/e", "/d2/e/f"}));
  auto s = watch_->stats();
  EXPECT_EQ(s.watches, 2u);  // "/" and "/y" (the old /d-x)
  EXPECT_EQ(s.lost_dirs, 4u);

  // The moved directory can be watched again under its new name.
  ASSERT_TRUE(watch_->Watch("/u/d2/e"));
  Touch("/u/d2/e/m");
  EXPECT_EQ(Settle("/u/d2/e"), (std::vector<LocalChange>{Add("/u/d2/e", "m", DT_REG)}));
}

TEST_F(LocalWatchTest, MaxWatchesEvictsLeastRecentlyWatched) {
  Mkdir("/a");
  Mkdir("/b");
  Mkdir("/c");
  LocalWatchOptions opts;
  opts.max_watches = 2;
  StartWatch(opts);
  ASSERT_TRUE(watch_->Watch("/a"));
  ASSERT_TRUE(watch_->Watch("/b"));
  ASSERT_TRUE(watch_->Watch("/a"));  // re-watch: /b is now the least recent
  ASSERT_TRUE(watch_->Watch("/c"));
  ASSERT_TRUE(col_.WaitFor([](const auto&, const auto& lost) { return !lost.empty(); }));
  EXPECT_EQ(col_.TakeLost(), (std::vector<std::string>{"/b"}));
  EXPECT_EQ(watch_->stats().watches, 2u);

  Touch("/b/gone");  // no longer watched
  Touch("/c/kept");
  EXPECT_EQ(Settle("/a"), (std::vector<LocalChange>{Add("/c", "kept", DT_REG)}));
  EXPECT_EQ(watch_->stats().lost_dirs, 1u);
}

TEST_F(LocalWatchTest, UnwatchStopsReportsWithoutLoss) {
  Mkdir("/d");
  StartWatch();
  ASSERT_TRUE(watch_->Watch("/"));
  ASSERT_TRUE(watch_->Watch("/d"));
  watch_->Unwatch("/d");
  watch_->Unwatch("/not-watched");
  EXPECT_EQ(watch_->stats().watches, 1u);
  Touch("/d/f");
  EXPECT_TRUE(Settle().empty());
  EXPECT_TRUE(col_.TakeLost().empty());
}

// fs.inotify.max_queued_events set to a known value while the guard lives,
// when permitted (root), and the value before put back by the destructor,
// whatever way the scope is left. An inotify instance takes the limit when it
// is made (inotify_init), so a guard around that alone changes the machine's
// setting for a moment. Guards of concurrent processes (a run in another
// worktree) take turns (flock on the sysctl file), so none restores the old
// value while another's instance is being made. value(): the limit in effect
// while the guard lives (the machine's when it may not be changed; 0 if
// unreadable).
class QueuedEventsLimit {
 public:
  explicit QueuedEventsLimit(size_t want) {
    lock_fd_ = ::open(kPath, O_RDONLY | O_CLOEXEC);
    if (lock_fd_ >= 0) ::flock(lock_fd_, LOCK_EX);
    if (!(std::ifstream(kPath) >> was_)) return;
    value_ = was_;
    if (was_ != want && Write(want)) {
      value_ = want;
      changed_ = true;
    }
  }
  ~QueuedEventsLimit() {
    if (changed_) {
      EXPECT_TRUE(Write(was_)) << "could not restore " << kPath << " to " << was_;
    }
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
  }
  QueuedEventsLimit(const QueuedEventsLimit&) = delete;
  QueuedEventsLimit& operator=(const QueuedEventsLimit&) = delete;
  size_t value() const { return value_; }

 private:
  static constexpr const char* kPath = "/proc/sys/fs/inotify/max_queued_events";
  static bool Write(size_t v) {
    const int fd = ::open(kPath, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const std::string text = std::to_string(v) + "\n";
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    return ok;
  }
  int lock_fd_ = -1;
  size_t was_ = 0, value_ = 0;
  bool changed_ = false;
};

TEST_F(LocalWatchTest, QueueOverflowReportsEveryWatchedDirectory) {
  // The watch's queue holds max_queued_events, as it was when StartWatch made
  // the inotify instance: the kernel's default (16384) as root, whatever the
  // machine sets; without root the machine's value, and a value too large to
  // flood quickly skips the test.
  Mkdir("/d");
  Mkdir("/e");
  size_t max_queued = 0;
  {
    QueuedEventsLimit limit(16384);
    max_queued = limit.value();
    StartWatch();
  }
  if (HasFatalFailure()) return;
  if (max_queued == 0) GTEST_SKIP() << "cannot read fs.inotify.max_queued_events";
  if (max_queued > 200000) GTEST_SKIP() << "max_queued_events " << max_queued << " too large";
  ASSERT_TRUE(watch_->Watch("/"));
  ASSERT_TRUE(watch_->Watch("/d"));
  ASSERT_TRUE(watch_->Watch("/e"));
  watch_->PauseForTest(true);
  for (size_t i = 0; i < max_queued + 1000; ++i) {
    std::string p = R("/d/f" + std::to_string(i));
    int fd = ::open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
      watch_->PauseForTest(false);
      FAIL() << "create " << p << ": " << std::strerror(errno);
    }
    ::close(fd);
  }
  watch_->PauseForTest(false);
  ASSERT_TRUE(col_.WaitFor([](const auto&, const auto& lost) { return lost.size() >= 3; }));
  EXPECT_EQ(col_.TakeLost(), (std::vector<std::string>{"/", "/d", "/e"}));
  auto s = watch_->stats();
  EXPECT_GE(s.overflows, 1u);
  EXPECT_EQ(s.watches, 3u);  // watches are kept
  // Still watching after the overflow.
  Touch("/e/after");
  auto got = Settle();
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), Add("/e", "after", DT_REG));
}

TEST_F(LocalWatchTest, RefusesPathsOutsideTheRoot) {
  Mkdir("/d");
  Touch("/file");
  ASSERT_EQ(::symlink(outside_.c_str(), R("/abs").c_str()), 0);
  ASSERT_EQ(::symlink("..", R("/up").c_str()), 0);
  ASSERT_EQ(::symlink("../../..", R("/d/upup").c_str()), 0);
  StartWatch();
  for (const char* p : {"/../x", "/..", "", "rel", "/d/", "//d", "/d/./x"}) {
    auto st = watch_->Watch(p);
    ASSERT_FALSE(st) << p;
    EXPECT_EQ(st.error().code, EINVAL) << p;
  }
  // Watches go through no symlink (as listings): every symlink on the way is
  // refused as not a directory here, whether it stays beneath the root or not.
  ASSERT_EQ(::symlink("d", R("/in").c_str()), 0);
  for (const char* p : {"/abs", "/up", "/up/outside", "/d/upup", "/in"}) {
    auto st = watch_->Watch(p);
    ASSERT_FALSE(st) << p;
    EXPECT_EQ(st.error().code, ENOTDIR) << p;
  }
  auto st = watch_->Watch("/missing");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ENOENT);
  st = watch_->Watch("/file");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ENOTDIR);
  EXPECT_EQ(watch_->stats().watches, 0u);
}

// A symlink to a directory is not a second name of it here: its listing is
// refused too (LocalNodeFs::ListDir), so nothing of it is merged or watched.
TEST_F(LocalWatchTest, ASymlinkToADirectoryBeneathTheRootIsNotWatched) {
  Mkdir("/d");
  ASSERT_EQ(::symlink("d", R("/in").c_str()), 0);
  StartWatch();
  ASSERT_TRUE(watch_->Watch("/d"));
  auto in = watch_->Watch("/in");
  ASSERT_FALSE(in);
  EXPECT_EQ(in.error().code, ENOTDIR);
  EXPECT_EQ(watch_->stats().watches, 1u);
  Touch("/d/f");
  EXPECT_EQ(Settle("/d"), (std::vector<LocalChange>{Add("/d", "f", DT_REG)}));
}

TEST_F(LocalWatchTest, IgnoreSuppressesOneEvent) {
  StartWatch();
  ASSERT_TRUE(watch_->Watch("/"));
  watch_->Ignore("/a");
  watch_->Ignore("/other/b");  // another directory: no effect here
  Touch("/a");
  Touch("/b");
  EXPECT_EQ(Settle(), (std::vector<LocalChange>{Add("/", "b", DT_REG)}));
  ASSERT_EQ(::unlink(R("/a").c_str()), 0);  // the suppression was used up
  EXPECT_EQ(Settle(), (std::vector<LocalChange>{Rm("/", "a")}));
}

TEST_F(LocalWatchTest, CallbacksMayCallBack) {
  Mkdir("/d");
  std::unique_ptr<LocalWatch> w;
  std::mutex mu;
  std::condition_variable cv;
  bool sub_seen = false;
  LocalWatch* self = nullptr;
  auto started = LocalWatch::Start(
      root_, {},
      [&](std::vector<LocalChange> c) {
        for (const auto& ch : c) {
          // A new subdirectory is watched from the callback, as the VD layer would.
          if (ch.dir == "/d" && ch.type == DT_DIR) {
            EXPECT_TRUE(self->Watch("/d/" + ch.name));
          }
          if (ch.dir == "/d/s" && ch.name == "f") {
            std::lock_guard lk(mu);
            sub_seen = true;
            cv.notify_all();
          }
        }
      },
      [](std::vector<std::string>) {});
  ASSERT_TRUE(started);
  w = std::move(*started);
  self = w.get();
  ASSERT_TRUE(w->Watch("/d"));
  Mkdir("/d/s");
  // Bounded poll until the callback's Watch took effect (f created before it
  // would not be reported).
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (w->stats().watches < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(w->stats().watches, 2u);
  Touch("/d/s/f");
  std::unique_lock lk(mu);
  EXPECT_TRUE(cv.wait_for(lk, kWait, [&] { return sub_seen; }));
  lk.unlock();
  w.reset();
}

}  // namespace
}  // namespace fedfs::ns
