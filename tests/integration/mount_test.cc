// The global namespace through FUSE with real daemons (label "integration"):
// three fedfsd processes, each mounting the namespace under the test's
// temporary directory. Files put directly into the export roots are listed
// and readable through every mount; changes made through one mount are seen
// through the others; a stale mount is refused with a clear message; the
// files of a killed node fail with a clear errno while the rest lists fine.
// The Cluster unmounts whatever is left, whatever happens.
#include <dirent.h>
#include <sched.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <fstream>
#include <set>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

std::string Loop() { return "127.0.0.1:" + std::to_string(FreePort()); }

void Put(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::trunc) << text;
}

// Names in a directory (tests/tools/cluster.h).
std::set<std::string> List(const std::string& dir) { return ListNames(dir); }

bool Contains(const std::set<std::string>& s, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (!s.contains(n)) return false;
  }
  return true;
}

std::string Xattr(const std::string& path, const char* name) {
  char buf[256];
  const ssize_t n = ::getxattr(path.c_str(), name, buf, sizeof buf);
  return n < 0 ? "<errno " + std::to_string(errno) + ">" : std::string(buf, static_cast<size_t>(n));
}

class Mount : public ::testing::Test {
 protected:
  // Starts n1..n<count> with mounts; returns when all see each other and
  // every mount is up.
  void StartNodes(int count, const std::string& extra_yaml = "") {
    std::vector<std::string> addrs;
    for (int i = 0; i < count; ++i) addrs.push_back(Loop());
    for (int i = 0; i < count; ++i) {
      const std::string id = "n" + std::to_string(i + 1);
      std::vector<std::string> peers(addrs.begin(), addrs.begin() + i);
      configs_[id] = c_.WriteConfig(
          {.id = id, .listen = addrs[i], .peers = peers, .extra_yaml = extra_yaml});
      ids_.push_back(id);
    }
  }
  void Launch() {
    for (const auto& id : ids_) c_.Start(id, configs_[id]);
    for (const auto& id : ids_) {
      ASSERT_TRUE(WaitFor([&] { return c_.SeesAlive(id, ids_); }, kNoHang))
          << id << " log:\n" << c_.Log(id);
      ASSERT_TRUE(WaitFor([&] { return IsMounted(c_.Mountpoint(id)); }, kNoHang))
          << id << " log:\n" << c_.Log(id);
    }
  }
  std::string M(const std::string& id, const std::string& rel = "") const {
    return c_.Mountpoint(id) + rel;
  }
  std::string E(const std::string& id, const std::string& rel) const {
    return c_.ExportRoot(id) + rel;
  }

  Cluster c_;
  std::vector<std::string> ids_;
  std::map<std::string, std::string> configs_;
};

TEST_F(Mount, MergedTreeAndChangesSeenByEveryMount) {
  StartNodes(3);
  // Placed directly in the export roots, as local programs would.
  Put(E("n1", "/top1.txt"), "one\n");
  Put(E("n1", "/shared/from1.txt"), "from n1\n");
  Put(E("n2", "/shared/from2.txt"), "from n2\n");
  Put(E("n3", "/only3/deep/x.txt"), "deep on n3\n");
  ASSERT_NO_FATAL_FAILURE(Launch());

  for (const auto& id : ids_) {
    EXPECT_TRUE(
        WaitFor([&] { return Contains(List(M(id)), {"top1.txt", "shared", "only3"}); }, kNoHang))
        << id;
    EXPECT_TRUE(Contains(List(M(id, "/shared")), {"from1.txt", "from2.txt"})) << id;
    EXPECT_EQ(ReadFileText(M(id, "/top1.txt")), "one\n") << id;
    EXPECT_EQ(ReadFileText(M(id, "/shared/from1.txt")), "from n1\n") << id;
    EXPECT_EQ(ReadFileText(M(id, "/shared/from2.txt")), "from n2\n") << id;
    EXPECT_EQ(ReadFileText(M(id, "/only3/deep/x.txt")), "deep on n3\n") << id;
    EXPECT_EQ(Xattr(M(id, "/shared/from2.txt"), "user.fedfs.location"), "n2") << id;
    struct stat st {};
    ASSERT_EQ(::stat(M(id, "/shared").c_str(), &st), 0) << id << ": " << std::strerror(errno);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
  }
  // st_ino: unique across nodes, the same through every mount.
  struct stat a {}, b {};
  ASSERT_EQ(::stat(M("n1", "/shared/from1.txt").c_str(), &a), 0);
  ASSERT_EQ(::stat(M("n1", "/shared/from2.txt").c_str(), &b), 0);
  EXPECT_NE(a.st_ino, b.st_ino);

  // Create through n1's mount, read through n3's.
  {
    std::ofstream(M("n1", "/created.txt")) << "made on n1\n";
  }
  EXPECT_EQ(ReadFileText(M("n3", "/created.txt")), "made on n1\n");
  EXPECT_EQ(ReadFileText(E("n1", "/created.txt")), "made on n1\n");  // placement: local
  // mkdir through n1, seen by n2 and n3.
  ASSERT_EQ(::mkdir(M("n1", "/newdir").c_str(), 0755), 0) << std::strerror(errno);
  for (const char* id : {"n2", "n3"}) {
    struct stat st {};
    ASSERT_EQ(::stat(M(id, "/newdir").c_str(), &st), 0) << id;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << id;
  }
  // Rename through n2 (the file stays on n1), seen by n3.
  ASSERT_EQ(::rename(M("n2", "/created.txt").c_str(), M("n2", "/newdir/moved.txt").c_str()), 0)
      << std::strerror(errno);
  EXPECT_TRUE(List(M("n3")).count("created.txt") == 0);
  EXPECT_EQ(ReadFileText(M("n3", "/newdir/moved.txt")), "made on n1\n");
  EXPECT_TRUE(fs::exists(E("n1", "/newdir/moved.txt")));
  // A file on n2 renamed into a directory n2 lacks: n2 creates the parent.
  ASSERT_EQ(::rename(M("n3", "/shared/from2.txt").c_str(), M("n3", "/newdir/from2.txt").c_str()), 0)
      << std::strerror(errno);
  EXPECT_TRUE(fs::exists(E("n2", "/newdir/from2.txt")));
  EXPECT_EQ(ReadFileText(M("n1", "/newdir/from2.txt")), "from n2\n");
  EXPECT_EQ(List(M("n1", "/newdir")), (std::set<std::string>{"from2.txt", "moved.txt"}));
  // fedfsctl where.
  auto r = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n3"), "where", "/newdir/from2.txt"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("n2"), std::string::npos) << r.out;
  // Unlink through n3, gone everywhere.
  ASSERT_EQ(::unlink(M("n3", "/newdir/moved.txt").c_str()), 0) << std::strerror(errno);
  for (const auto& id : ids_) {
    struct stat st {};
    EXPECT_EQ(::stat(M(id, "/newdir/moved.txt").c_str(), &st), -1) << id;
    EXPECT_EQ(errno, ENOENT) << id;
  }
  EXPECT_FALSE(fs::exists(E("n1", "/newdir/moved.txt")));
  // link across nodes: EXDEV; on the same node: fine.
  EXPECT_EQ(::link(M("n1", "/top1.txt").c_str(), M("n1", "/only3/deep/l").c_str()), -1);
  EXPECT_EQ(errno, EXDEV);
  ASSERT_EQ(::link(M("n2", "/top1.txt").c_str(), M("n2", "/top1.link").c_str()), 0)
      << std::strerror(errno);
  struct stat l1 {}, l2 {};
  ASSERT_EQ(::stat(M("n3", "/top1.txt").c_str(), &l1), 0);
  ASSERT_EQ(::stat(M("n3", "/top1.link").c_str(), &l2), 0);
  EXPECT_EQ(l1.st_ino, l2.st_ino);
  EXPECT_EQ(l1.st_nlink, 2u);
}

// Node tags travel in membership: a file on n2 has one st_ino in every
// mount, n2's own included: (n2's node_tag << 48) | its local inode number.
TEST_F(Mount, RemoteFileHasTheSameInodeNumberInEveryMount) {
  StartNodes(3);
  Put(E("n2", "/ino/on2.txt"), "two\n");
  ASSERT_NO_FATAL_FAILURE(Launch());
  struct stat local {};
  ASSERT_EQ(::stat(E("n2", "/ino/on2.txt").c_str(), &local), 0);
  const std::string cfg = ReadFileText(configs_["n2"]);
  const size_t at = cfg.find("node_tag: ");
  ASSERT_NE(at, std::string::npos) << cfg;
  const uint64_t tag = std::stoull(cfg.substr(at + 10));
  const uint64_t want = (tag << 48) | (local.st_ino & ((uint64_t{1} << 48) - 1));
  for (const char* id : {"n1", "n3", "n2"}) {
    struct stat st {};
    ASSERT_EQ(::stat(M(id, "/ino/on2.txt").c_str(), &st), 0) << id << ": " << std::strerror(errno);
    EXPECT_EQ(st.st_ino, want) << id << " (tag " << tag << ")";
  }
}

TEST_F(Mount, StaleMountIsRefusedWithAClearMessage) {
  StartNodes(1);
  ASSERT_NO_FATAL_FAILURE(Launch());
  c_.Stop("n1", SIGKILL, /*keep_stale_mount=*/true);
  struct stat st {};
  ASSERT_EQ(::stat(M("n1").c_str(), &st), -1);
  // Over io_uring the kernel ends the connection when it has torn down the
  // dead daemon's rings, just after its exit: a request in between is
  // aborted (ECONNABORTED). Then every request gets ENOTCONN.
  ASSERT_TRUE(errno == ENOTCONN || errno == ECONNABORTED) << std::strerror(errno);
  ASSERT_TRUE(WaitFor([&] { return ::stat(M("n1").c_str(), &st) == -1 && errno == ENOTCONN; },
                      kNoHang));
  auto r = RunCommand({FEDFS_FEDFSD_PATH, "--config", configs_["n1"]}, 30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("fusermount3 -u " + M("n1")), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // Cleared with fusermount3 -u, the daemon starts again.
  ASSERT_TRUE(c_.ClearMount(M("n1")));
  c_.Start("n1", configs_["n1"]);
  ASSERT_TRUE(WaitFor([&] { return IsMounted(M("n1")); }, kNoHang)) << c_.Log("n1");
}

// A process keeps the mount busy (a directory fd in it, like a shell's
// working directory): SIGTERM still stops the daemon cleanly, and that
// process then gets ENOTCONN, as from any FUSE mount whose daemon is gone.
TEST_F(Mount, StopsCleanlyWhileAProcessKeepsTheMountBusy) {
  StartNodes(1);
  ASSERT_NO_FATAL_FAILURE(Launch());
  const int dfd = ::open(M("n1").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dfd, 0) << std::strerror(errno);
  struct stat st {};
  EXPECT_EQ(::fstatat(dfd, "nothing-here", &st, 0), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(c_.Stop("n1", SIGTERM), 0) << c_.Log("n1");
  EXPECT_EQ(::fstatat(dfd, "nothing-here", &st, 0), -1);
  EXPECT_EQ(errno, ENOTCONN);
  ::close(dfd);
}

// What the kernel says thread `tid` of this process is doing: its system
// call (/proc/self/task/<tid>/syscall: the number and arguments while it
// sleeps in one, "running" otherwise) and where it sleeps (its kernel stack,
// or its wchan where the stack cannot be read).
std::string KernelStateOf(pid_t tid) {
  const std::string task = "/proc/self/task/" + std::to_string(tid);
  std::string where = ReadFileText(task + "/stack");
  if (where.empty()) where = ReadFileText(task + "/wchan") + "\n";
  return "syscall: " + ReadFileText(task + "/syscall") + where;
}

// True when thread `tid` sleeps in flock(2) waiting for the FUSE daemon's
// answer: the kernel has sent the request (request_wait_answer) and not yet
// had the reply.
bool WaitsInFuseFlock(pid_t tid) {
  const std::string s = KernelStateOf(tid);
  return s.starts_with("syscall: " + std::to_string(SYS_flock) + " ") &&
         s.find("request_wait_answer") != std::string::npos;
}

// A request that blocks in the daemon (a flock that waits for another
// holder) ties up one worker and no more: other requests are served
// meanwhile, here with two workers at most. SIGTERM still stops the daemon
// cleanly while a flock waits; the waiter gets ENOLCK.
TEST_F(Mount, ABlockedRequestHoldsUpNoOther) {
  StartNodes(1, "fuse: {max_threads: 2}\n");
  ASSERT_NO_FATAL_FAILURE(Launch());
  const std::string f = M("n1", "/lock");
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  };
  const Fd a{::open(f.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644)};
  ASSERT_GE(a.fd, 0) << std::strerror(errno);
  const Fd b{::open(f.c_str(), O_RDWR | O_CLOEXEC)};
  ASSERT_GE(b.fd, 0) << std::strerror(errno);
  ASSERT_EQ(::flock(a.fd, LOCK_EX), 0) << std::strerror(errno);

  // flock(fd, LOCK_EX) in a thread of its own, which first publishes its
  // thread id: 0 or the errno.
  std::atomic<pid_t> tid{0};
  auto lock = [&tid](int fd) {
    return std::async(std::launch::async, [&tid, fd] {
      tid = ::gettid();
      return ::flock(fd, LOCK_EX) == 0 ? 0 : errno;
    });
  };
  std::future<int> waiter, waiter2;
  std::future<bool> others;
  // Whatever fails, nothing outlives the test: a flock or a request still
  // stuck at the end is ended by killing the daemon (the kernel then fails
  // them), before the futures wait for them.
  struct Unstick {
    std::function<void()> f;
    ~Unstick() { f(); }
  } unstick{[&] {
    for (const std::future_status s :
         {waiter.valid() ? waiter.wait_for(0s) : std::future_status::ready,
          waiter2.valid() ? waiter2.wait_for(0s) : std::future_status::ready,
          others.valid() ? others.wait_for(0s) : std::future_status::ready}) {
      if (s != std::future_status::ready) {
        c_.Stop("n1", SIGKILL);
        return;
      }
    }
  }};
  auto blocked = [&] { return tid != 0 && WaitsInFuseFlock(tid); };
  // Why `w` is not blocked, for the failure message.
  auto why_not = [&](std::future<int>& w) -> std::string {
    if (tid == 0) return "its thread never started";
    if (w.wait_for(0s) == std::future_status::ready) {
      return "flock returned: " + std::string(std::strerror(w.get()));
    }
    return KernelStateOf(tid);
  };

  waiter = lock(b.fd);
  ASSERT_TRUE(WaitFor(blocked, kNoHang))
      << "the waiter's flock is not waiting for the daemon; " << why_not(waiter);
  others = std::async(std::launch::async, [&] {
    for (int i = 0; i < 20; ++i) {
      const std::string p = M("n1", "/other-" + std::to_string(i));
      Put(p, "x");
      if (!fs::exists(p)) return false;
    }
    return List(M("n1")).size() == 21;
  });
  ASSERT_EQ(others.wait_for(kNoHang), std::future_status::ready) << c_.Log("n1");
  EXPECT_TRUE(others.get());
  ASSERT_TRUE(blocked()) << "the other requests ended the wait; " << why_not(waiter);
  ASSERT_EQ(::flock(a.fd, LOCK_UN), 0);
  ASSERT_EQ(waiter.wait_for(kNoHang), std::future_status::ready)
      << "the waiter did not get the lock once it was released; " << KernelStateOf(tid);
  const int got = waiter.get();
  EXPECT_EQ(got, 0) << std::strerror(got);

  tid = 0;
  waiter2 = lock(a.fd);  // b holds it now
  ASSERT_TRUE(WaitFor(blocked, kNoHang))
      << "the second waiter's flock is not waiting for the daemon; " << why_not(waiter2);
  EXPECT_EQ(c_.Stop("n1", SIGTERM), 0) << c_.Log("n1");
  ASSERT_EQ(waiter2.wait_for(kNoHang), std::future_status::ready);
  const int ended = waiter2.get();
  EXPECT_EQ(ended, ENOLCK) << std::strerror(ended) << c_.Log("n1");
}

// Requests go over io_uring when the kernel's switch allows it, else over
// /dev/fuse, and the daemon says which (scripts/test.sh runs the suites once
// each way). Either way the same operations give the same results.
TEST_F(Mount, RequestsGoOverIoUringWhenTheKernelOffersIt) {
  std::ifstream sw("/sys/module/fuse/parameters/enable_uring");
  char on = 'N';
  const bool have = static_cast<bool>(sw >> on);
  StartNodes(1);
  ASSERT_NO_FATAL_FAILURE(Launch());
  const std::string big(3 << 20, 'q');
  Put(M("n1", "/big"), big);
  std::ifstream in(M("n1", "/big"), std::ios::binary);
  const std::string back((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(back == big) << back.size() << " bytes read back";
  EXPECT_EQ(c_.Stop("n1", SIGTERM, /*keep_stale_mount=*/true), 0) << c_.Log("n1");
  EXPECT_FALSE(IsMounted(M("n1"))) << "the daemon left its mount behind\n" << c_.Log("n1");
  const std::string log = c_.Log("n1");
  if (have && (on == 'Y' || on == '1')) {
    EXPECT_NE(log.find("FUSE over io_uring: "), std::string::npos) << log;
    const size_t at = log.find(" requests were served over io_uring");
    ASSERT_NE(at, std::string::npos) << log;
    const size_t from = log.rfind(' ', at - 1) + 1;
    EXPECT_GT(std::stoull(log.substr(from, at - from)), 10u) << log;
  } else {
    EXPECT_NE(log.find("io_uring unavailable: "), std::string::npos) << log;
    EXPECT_EQ(log.find("requests were served over io_uring"), std::string::npos) << log;
  }
}

// Over io_uring the queue threads wait as SCHED_IDLE (fuse/uring_channel.cc,
// SetIdle), which a program keeping every CPU busy would starve: the
// daemon's watcher sees requests left untaken and makes the threads
// SCHED_OTHER, and the work gets done. Over /dev/fuse nothing changes.
TEST_F(Mount, BusyCpusDoNotStarveTheQueueThreads) {
  std::ifstream sw("/sys/module/fuse/parameters/enable_uring");
  char on = 'N';
  const bool uring = (sw >> on) && (on == 'Y' || on == '1');
  StartNodes(1);
  ASSERT_NO_FATAL_FAILURE(Launch());
  // One busy loop per CPU, each pinned to its CPU, stopped by pid below.
  std::vector<pid_t> hogs;
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  for (long c = 0; c < cpus; ++c) {
    const pid_t p = ::fork();
    ASSERT_GE(p, 0);
    if (p == 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(static_cast<int>(c), &set);
      ::sched_setaffinity(0, sizeof set, &set);
      for (;;) __asm__ __volatile__("");
    }
    hogs.push_back(p);
  }
  struct Reap {
    std::vector<pid_t>* pids;
    ~Reap() {
      for (pid_t p : *pids) ::kill(p, SIGKILL);
      for (pid_t p : *pids) ::waitpid(p, nullptr, 0);
    }
  } reap{&hogs};
  for (int i = 0; i < 300; ++i) {
    const std::string p = M("n1", "/busy-" + std::to_string(i));
    Put(p, "x");
    ASSERT_EQ(::unlink(p.c_str()), 0) << p << ": " << std::strerror(errno);
  }
  EXPECT_EQ(c_.Stop("n1", SIGTERM), 0) << c_.Log("n1");
  const std::string log = c_.Log("n1");
  if (uring) {
    EXPECT_NE(log.find("(a busy CPU?); queue threads run as SCHED_OTHER"), std::string::npos)
        << log;
  } else {
    EXPECT_EQ(log.find("(a busy CPU?)"), std::string::npos) << log;
  }
}

TEST_F(Mount, FilesOfAKilledNodeFailClearlyWhileTheRestLists) {
  StartNodes(3);
  Put(E("n1", "/d/one.txt"), "1\n");
  Put(E("n3", "/d/three.txt"), "3\n");
  ASSERT_NO_FATAL_FAILURE(Launch());
  ASSERT_EQ(ReadFileText(M("n1", "/d/three.txt")), "3\n");
  const int fd = ::open(M("n1", "/d/three.txt").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  c_.Stop("n3", SIGKILL);
  // The kernel keeps the pages read above (fuse.keep_cache) and would answer
  // from them without asking: dropped, so that the read reaches the node.
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  char buf[16];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  const int err = errno;
  EXPECT_EQ(n, -1);
  EXPECT_TRUE(err == EHOSTDOWN || err == ETIMEDOUT) << std::strerror(err);
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), -1);
  EXPECT_TRUE(errno == EHOSTDOWN || errno == ETIMEDOUT) << std::strerror(errno);
  ::close(fd);
  // The rest of the namespace keeps working; the dead node's file leaves
  // the listing once the failure is detected.
  EXPECT_TRUE(
      WaitFor([&] { return List(M("n1", "/d")) == std::set<std::string>{"one.txt"}; }, kNoHang))
      << ::testing::PrintToString(List(M("n1", "/d")));
  // (Until a node has noticed the failure, a directory the dead node
  // managed may time out there: wait for n2 too.)
  EXPECT_TRUE(WaitFor([&] { return ReadFileText(M("n2", "/d/one.txt")) == "1\n"; }, kNoHang))
      << c_.Log("n2");
}

// tracefs on /sys/kernel/tracing while this object lives: a fresh machine
// may have nothing mounted there. Mounted only if nothing is, and then
// unmounted again by the destructor, whatever happens. error(): the errno of
// a mount that failed (ENODEV: the kernel has no tracefs), else 0.
class TracefsMount {
 public:
  static constexpr const char* kDir = "/sys/kernel/tracing";
  TracefsMount() {
    if (IsMounted(kDir)) return;
    if (::mount("nodev", kDir, "tracefs", 0, nullptr) == 0) {
      mounted_ = true;
    } else {
      error_ = errno;
    }
  }
  ~TracefsMount() {
    if (!mounted_) return;
    if (const std::string err = UnmountOrDetach(kDir); !err.empty()) {
      ADD_FAILURE() << "cannot unmount the tracefs this test mounted on " << kDir << ": " << err;
    }
  }
  TracefsMount(const TracefsMount&) = delete;
  TracefsMount& operator=(const TracefsMount&) = delete;
  int error() const { return error_; }

 private:
  bool mounted_ = false;
  int error_ = 0;
};

// The FUSE requests one mount's kernel sends, recorded by the kernel's
// fuse_request_send tracepoint in a tracing instance of this test's own
// (removed again by the destructor, whatever happens; tracefs is mounted for
// it if need be). missing(): what the kernel lacks for it ("" if nothing);
// error(): what else went wrong ("" if nothing).
class RequestTrace {
 public:
  explicit RequestTrace(const std::string& mountpoint) {
    if (tracefs_.error() == ENODEV) {
      missing_ = "the kernel has no tracefs: FUSE requests cannot be counted";
      return;
    }
    const std::string base = TracefsMount::kDir;
    if (tracefs_.error() != 0) {
      error_ = "cannot mount tracefs on " + base + ": " + std::strerror(tracefs_.error());
      return;
    }
    if (!fs::is_directory(base + "/events/fuse/fuse_request_send")) {
      missing_ = "the kernel has no fuse_request_send tracepoint: FUSE requests cannot be counted";
      return;
    }
    struct stat st {};
    if (::stat(mountpoint.c_str(), &st) != 0) {
      error_ = mountpoint + ": " + std::strerror(errno);
      return;
    }
    conn_ = (static_cast<uint64_t>(major(st.st_dev)) << 20) | minor(st.st_dev);
    const std::string dir = base + "/instances/fedfs-mount-test-" + std::to_string(::getpid());
    if (::mkdir(dir.c_str(), 0700) != 0) {
      error_ = "cannot make the tracing instance " + dir + ": " + std::strerror(errno);
      return;
    }
    dir_ = dir;
    std::ofstream enable(dir_ + "/events/fuse/fuse_request_send/enable");
    enable << "1";
    enable.flush();
    if (!enable) error_ = "cannot enable fuse_request_send in " + dir_;
  }
  ~RequestTrace() {
    if (dir_.empty()) return;
    std::ofstream(dir_ + "/events/fuse/fuse_request_send/enable") << "0";
    if (::rmdir(dir_.c_str()) != 0) {
      ADD_FAILURE() << "cannot remove the tracing instance " << dir_ << ": " << std::strerror(errno);
    }
  }
  const std::string& missing() const { return missing_; }
  const std::string& error() const { return error_; }
  // Requests of type `op` (e.g. "FUSE_GETXATTR") recorded so far.
  int Count(const std::string& op) const {
    std::ifstream in(dir_ + "/trace");
    const std::string conn = "connection " + std::to_string(conn_) + " ";
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.find(conn) != std::string::npos && line.find("(" + op + ")") != std::string::npos) ++n;
    }
    return n;
  }

 private:
  TracefsMount tracefs_;  // first in, last out: outlives the instance
  uint64_t conn_ = 0;
  std::string dir_;
  std::string missing_, error_;
};

// Writes `n` bytes, one per pwrite, to `path` as root, or as nobody in a
// child process; returns "" or what failed.
std::string WriteBytes(const std::string& path, int n, bool as_nobody) {
  auto write_all = [&]() -> std::string {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return "open: " + std::string(std::strerror(errno));
    for (int i = 0; i < n; ++i) {
      if (::pwrite(fd, "w", 1, i) != 1) {
        const std::string e = "write: " + std::string(std::strerror(errno));
        ::close(fd);
        return e;
      }
    }
    return ::close(fd) == 0 ? "" : "close: " + std::string(std::strerror(errno));
  };
  if (!as_nobody) return write_all();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      ::_exit(2);
    }
    const std::string e = write_all();
    if (!e.empty()) std::fprintf(stderr, "as nobody: %s\n", e.c_str());
    ::_exit(e.empty() ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return "fork/wait failed";
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "" : "as nobody: status " + std::to_string(status);
}

// File capabilities (security.capability) go when a file is written, as on
// a local file system, whoever writes, for files on this node and on another
// alike. FedFS asks for FUSE_HANDLE_KILLPRIV_V2, so the kernel asks whether
// a file has them only before its first write, not before each one (a
// GETXATTR per write before).
TEST_F(Mount, WritesClearCapabilitiesWithoutAskingForThemEachTime) {
  StartNodes(2);
  const std::vector<std::pair<std::string, std::string>> files = {
      {"n1", "/kp/local"}, {"n2", "/kp/remote"}, {"n1", "/kp/local-nobody"}, {"n2", "/kp/remote-nobody"}};
  // struct vfs_cap_data, revision 2: CAP_NET_RAW permitted.
  const uint32_t caps[5] = {0x02000000, 1u << 13, 0, 0, 0};
  for (const auto& [id, name] : files) {
    Put(E(id, name), "data\n");
    ASSERT_EQ(::chmod(E(id, name).c_str(), 0666), 0);
    ASSERT_EQ(::setxattr(E(id, name).c_str(), "security.capability", caps, sizeof caps, 0), 0)
        << name << ": " << std::strerror(errno);
  }
  ASSERT_NO_FATAL_FAILURE(Launch());
  // nobody must reach the mount: the test's directory and the roots.
  ASSERT_EQ(::chmod(fs::path(M("n1")).parent_path().c_str(), 0755), 0);
  for (const char* id : {"n1", "n2"}) ASSERT_EQ(::chmod(E(id, "").c_str(), 0755), 0);
  RequestTrace trace(M("n1"));
  ASSERT_EQ(trace.error(), "");
  for (const auto& [id, name] : files) {
    EXPECT_EQ(WriteBytes(M("n1", name), 20, name.ends_with("nobody")), "") << name << "\n" << c_.Log("n1");
  }
  for (const auto& [id, name] : files) {
    EXPECT_EQ(::getxattr(E(id, name).c_str(), "security.capability", nullptr, 0), -1) << name;
    EXPECT_EQ(errno, ENODATA) << name;
  }
  if (!trace.missing().empty()) GTEST_SKIP() << trace.missing();
  EXPECT_GE(trace.Count("FUSE_WRITE"), 80);
  // At most two per file: the first write finds them and has them removed,
  // the next finds none; from then on the kernel knows (S_NOSEC).
  EXPECT_LE(trace.Count("FUSE_GETXATTR"), 2 * static_cast<int>(files.size()));
}

}  // namespace
}  // namespace fedfs::testing
