// A FUSE daemon SIGKILLed while one of its threads waits in the kernel on its
// own mount (fuse/death_guard.h; label "integration", needs root and
// /dev/fuse). The daemon here is a minimal libfuse low-level file system in a
// child process, so that the wait is arranged exactly rather than hoped for:
// one file whose WRITE is never answered, and a thread that, once the write
// is in, asks the kernel to drop that file's pages
// (fuse_lowlevel_notify_inval_inode) and waits uninterruptibly for the page
// lock the write holds. That is what a fedfsd chaos run met (docs/faults.md,
// "Chaos run"). Then the daemon is SIGKILLed.
//
//  * Without a guard the killed process does not end and the writer stays
//    blocked (the case is real; cleaned up by aborting the connection).
//  * With an armed guard the process ends, the writer gets an error, and the
//    guard's child is gone.
//  * A guard told to go (the clean stop) exits without aborting: the mount
//    still answers.
#define FUSE_USE_VERSION 312
#include <dirent.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "fuse/death_guard.h"

namespace fedfs::fuse {
namespace {

using Clock = std::chrono::steady_clock;
constexpr fuse_ino_t kFile = 2;

// ------------------------------------------------ the daemon (child process)

int g_events = -1;  // the child's end of the event pipe to the test
std::atomic<bool> g_write_in{false};

void Event(char c) {
  if (::write(g_events, &c, 1) != 1) ::_exit(3);
}

void FillAttr(fuse_ino_t ino, struct stat* st) {
  *st = {};
  st->st_ino = ino;
  st->st_mode = ino == FUSE_ROOT_ID ? (S_IFDIR | 0755) : (S_IFREG | 0666);
  st->st_nlink = ino == FUSE_ROOT_ID ? 2 : 1;
  st->st_size = ino == FUSE_ROOT_ID ? 0 : 8192;
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (parent != FUSE_ROOT_ID || std::strcmp(name, "f") != 0) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_entry_param e{};
  e.ino = kFile;
  e.attr_timeout = 3600;
  e.entry_timeout = 3600;
  FillAttr(kFile, &e.attr);
  fuse_reply_entry(req, &e);
}

void Getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  struct stat st;
  FillAttr(ino, &st);
  fuse_reply_attr(req, &st, 3600);
}

void Open(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

void Write(fuse_req_t, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) {
  // Never answered: the writer keeps its pages locked and waits. 'W' goes
  // out before the drop thread is woken, so that the test sees W before I.
  Event('W');
  g_write_in.store(true);
  g_write_in.notify_all();
  for (;;) ::pause();
}

[[noreturn]] void DaemonMain(const std::string& mp, bool guarded) {
  std::unique_ptr<DeathGuard> guard;
  if (guarded) {
    auto g = DeathGuard::Start();
    if (!g) ::_exit(4);
    guard = std::move(*g);
  }
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
    o.lookup = Lookup;
    o.getattr = Getattr;
    o.open = Open;
    o.write = Write;
    return o;
  }();
  char arg0[] = "guard-test";
  char* argv[] = {arg0, nullptr};
  fuse_args args = FUSE_ARGS_INIT(1, argv);
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, nullptr);
  if (se == nullptr || fuse_session_mount(se, mp.c_str()) != 0) ::_exit(5);
  std::thread loop([se] { fuse_session_loop(se); });
  std::thread drop([se] {
    g_write_in.wait(false);
    Event('I');
    fuse_lowlevel_notify_inval_inode(se, kFile, 0, 0);  // waits for the page lock
    Event('J');
  });
  struct stat st {};
  if (::stat(mp.c_str(), &st) != 0) ::_exit(6);
  if (guard && !guard->Arm(std::to_string((major(st.st_dev) << 20) | minor(st.st_dev)))) ::_exit(7);
  Event('M');
  loop.join();  // the main thread waits here, killable, as fedfsd's waits in sigwait
  ::_exit(0);
}

// ------------------------------------------------------------------ the test

// Waits up to `limit` for one byte on `fd`; 0 if none came.
char NextEvent(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(limit.count())) != 1) return 0;
  char c = 0;
  return ::read(fd, &c, 1) == 1 ? c : 0;
}

// True once the child `*pid` has ended within `limit`; it is then reaped and
// *pid set to -1 (so that nothing signals a reused pid later).
bool Ended(pid_t* pid, std::chrono::milliseconds limit, int* status = nullptr) {
  if (*pid <= 0) return true;
  const auto until = Clock::now() + limit;
  int s = 0;
  do {
    if (::waitpid(*pid, &s, WNOHANG) == *pid) {
      if (status != nullptr) *status = s;
      *pid = -1;
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (Clock::now() < until);
  return false;
}

// The /proc/<pid>/task/<tid>/stat line of each thread of `pid`, with the
// thread's directory.
template <class Fn>
void ForEachThread(pid_t pid, Fn&& fn) {
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(t.path() / "stat");
    std::string line;
    std::getline(in, line);
    fn(t.path(), line);
  }
}

// Some thread of `pid` in uninterruptible sleep (state D).
bool HasThreadInD(pid_t pid) {
  bool found = false;
  ForEachThread(pid, [&](const std::filesystem::path&, const std::string& stat) {
    const size_t paren = stat.rfind(')');
    found = found || (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'D');
  });
  return found;
}

// Aborts the connection of the mount at `mp` from this test: a guard owned by
// a thread that ends at once does it (no fusectl mount left behind).
void AbortFromOutside(const std::string& conn) {
  std::unique_ptr<DeathGuard> guard;
  std::thread owner([&] {
    auto g = DeathGuard::Start();
    ASSERT_TRUE(g.has_value());
    ASSERT_TRUE((*g)->Arm(conn).has_value());
    guard = std::move(*g);
  });
  owner.join();
  pid_t pid = guard->pid();
  EXPECT_TRUE(Ended(&pid, std::chrono::seconds(10))) << "the guard did not act on its owner's death";
  guard.reset();  // reaped above already; nothing left to wait for
}

class DeathGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "needs root and /dev/fuse";
    }
    char tmpl[] = "/tmp/fedfs-guard-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    mp_ = dir_ + "/mnt";
    ASSERT_EQ(::mkdir(mp_.c_str(), 0755), 0);
    ASSERT_EQ(::pipe(events_), 0);
  }

  void TearDown() override {
    // Whatever happened: nothing of ours runs, nothing stays mounted.
    if (!Ended(&daemon_, std::chrono::milliseconds(0))) {
      ::kill(daemon_, SIGKILL);
      if (!Ended(&daemon_, std::chrono::seconds(2)) && !conn_.empty()) {
        AbortFromOutside(conn_);
        Ended(&daemon_, std::chrono::seconds(10));
      }
    }
    if (!Ended(&writer_, std::chrono::milliseconds(0))) {
      ::kill(writer_, SIGKILL);
      Ended(&writer_, std::chrono::seconds(10));
    }
    if (!mp_.empty()) ::umount2(mp_.c_str(), MNT_DETACH);
    for (int fd : events_) {
      if (fd >= 0) ::close(fd);
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  // Starts the daemon and waits until it is mounted.
  void StartDaemon(bool guarded) {
    daemon_ = ::fork();
    ASSERT_GE(daemon_, 0);
    if (daemon_ == 0) {
      ::close(events_[0]);
      g_events = events_[1];
      DaemonMain(mp_, guarded);
    }
    ::close(events_[1]);
    events_[1] = -1;
    ASSERT_EQ(NextEvent(events_[0], std::chrono::seconds(10)), 'M') << "the daemon did not mount";
    struct stat st {};
    ASSERT_EQ(::stat(mp_.c_str(), &st), 0);
    conn_ = std::to_string((major(st.st_dev) << 20) | minor(st.st_dev));
  }

  // Starts a process writing the first 512 bytes of the file through the
  // mount; its exit status is the errno of the write (0 if it succeeded).
  // Part of a page not cached: the kernel keeps that page locked while it
  // waits for the answer (a page written whole is unlocked before).
  void StartWriter() {
    writer_ = ::fork();
    ASSERT_GE(writer_, 0);
    if (writer_ == 0) {
      const int fd = ::open((mp_ + "/f").c_str(), O_WRONLY);
      if (fd < 0) ::_exit(100);
      char sector[512];
      std::memset(sector, 'x', sizeof sector);
      const ssize_t n = ::pwrite(fd, sector, sizeof sector, 0);
      ::_exit(n == static_cast<ssize_t>(sizeof sector) ? 0 : (errno & 0x7f));
    }
  }

  // The write is in the daemon, and its page drop waits for the lock.
  void ArrangeTheWait() {
    StartWriter();
    ASSERT_EQ(NextEvent(events_[0], std::chrono::seconds(10)), 'W') << "the write did not arrive";
    ASSERT_EQ(NextEvent(events_[0], std::chrono::seconds(10)), 'I');
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (!HasThreadInD(daemon_) && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!HasThreadInD(daemon_)) {  // what each thread waits for, to see why
      for (pid_t p : {daemon_, writer_}) {
        ForEachThread(p, [](const std::filesystem::path& dir, const std::string& stat) {
          std::stringstream stack;
          stack << std::ifstream(dir / "stack").rdbuf();
          std::fprintf(stderr, "%s\n%s\n", stat.c_str(), stack.str().c_str());
        });
      }
    }
    ASSERT_TRUE(HasThreadInD(daemon_)) << "the page drop is not waiting in the kernel";
    ASSERT_EQ(NextEvent(events_[0], std::chrono::milliseconds(200)), 0) << "the page drop went through";
  }

  std::string dir_, mp_, conn_;
  int events_[2] = {-1, -1};
  pid_t daemon_ = -1, writer_ = -1;
};

TEST_F(DeathGuardTest, WithoutAGuardTheKilledDaemonNeverEnds) {
  StartDaemon(/*guarded=*/false);
  ArrangeTheWait();
  ASSERT_EQ(::kill(daemon_, SIGKILL), 0);
  EXPECT_FALSE(Ended(&daemon_, std::chrono::seconds(3))) << "the case this guard exists for did not arise";
  EXPECT_FALSE(Ended(&writer_, std::chrono::milliseconds(0)));
  AbortFromOutside(conn_);
  EXPECT_TRUE(Ended(&daemon_, std::chrono::seconds(10)));
  int status = 0;
  EXPECT_TRUE(Ended(&writer_, std::chrono::seconds(10), &status));
}

TEST_F(DeathGuardTest, AnArmedGuardEndsTheKilledDaemonsConnection) {
  StartDaemon(/*guarded=*/true);
  ArrangeTheWait();
  ASSERT_EQ(::kill(daemon_, SIGKILL), 0);
  ASSERT_TRUE(Ended(&daemon_, std::chrono::seconds(10))) << "the killed daemon did not end";
  int status = 0;
  ASSERT_TRUE(Ended(&writer_, std::chrono::seconds(10), &status)) << "the writer is still blocked";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_TRUE(WEXITSTATUS(status) == ENOTCONN || WEXITSTATUS(status) == ECONNABORTED)
      << "the write ended with errno " << WEXITSTATUS(status);
  // The mount answers (with ENOTCONN) instead of hanging: a lookup of a
  // name it never saw goes to the (dead) daemon.
  struct stat st {};
  EXPECT_NE(::stat((mp_ + "/g").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOTCONN);
}

TEST_F(DeathGuardTest, AGuardLetGoAbortsNothing) {
  std::unique_ptr<DeathGuard> guard;
  std::thread owner([&] {
    auto g = DeathGuard::Start();
    ASSERT_TRUE(g.has_value());
    guard = std::move(*g);
  });
  owner.join();
  // The owner thread is gone but the guard was never armed: it has nothing
  // to do and ends by itself; Arm now fails, the destructor reaps it.
  ASSERT_TRUE(guard);
  pid_t pid = guard->pid();
  EXPECT_TRUE(Ended(&pid, std::chrono::seconds(10)));

  StartDaemon(/*guarded=*/false);
  auto g = DeathGuard::Start();
  ASSERT_TRUE(g.has_value());
  ASSERT_TRUE((*g)->Arm(conn_).has_value());
  EXPECT_FALSE((*g)->Arm("12a").has_value());
  EXPECT_FALSE((*g)->Arm("").has_value());
  ASSERT_TRUE((*g)->Disarm().has_value());
  pid = (*g)->pid();
  g->reset();  // the clean stop: tells the child to go and reaps it
  EXPECT_NE(::kill(pid, 0), 0);
  struct stat st {};
  EXPECT_EQ(::stat((mp_ + "/f").c_str(), &st), 0) << "the connection was aborted: " << std::strerror(errno);
}

}  // namespace
}  // namespace fedfs::fuse
