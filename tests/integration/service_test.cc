// fedfsd under a service manager (label "integration"; needs root and
// /dev/fuse), speaking systemd's notify protocol to a socket of the test's
// own (NOTIFY_SOCKET, as systemd sets it for a Type=notify unit):
//  * READY=1 comes once the node is mounted and has joined: when it
//    arrives, the mount is usable and the node already sees its seed alive;
//  * WATCHDOG=1 pings come while the mount answers, when WATCHDOG_USEC asks;
//  * STOPPING=1 comes on SIGTERM;
//  * --clear-stale-mount: the stale mount a killed daemon left is cleared by
//    the next start (what the unit's ExecStart does), which mounts again;
//    without it the start is refused with one line.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

// The service manager's end: a datagram socket the daemons notify.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    ::unlink(path.c_str());
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool ok() const { return ok_; }
  // The next message within `timeout`, or nullopt.
  std::optional<std::string> Next(std::chrono::milliseconds timeout) {
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<size_t>(n));
  }
  // Messages until one contains `what` (it included), within `timeout`.
  std::optional<std::string> Until(const std::string& what, std::chrono::milliseconds timeout,
                                   std::vector<std::string>* seen) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      auto m = Next(std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now() + 1ms));
      if (!m) break;
      if (seen != nullptr) seen->push_back(*m);
      if (m->find(what) != std::string::npos) return m;
    }
    return std::nullopt;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
};

bool Usable(const std::string& mnt, const std::string& name) {
  {
    std::ofstream f(mnt + "/" + name);
    f << "ready";
    if (!f) return false;
  }
  return ReadFileText(mnt + "/" + name) == "ready";
}

TEST(Service, ReadyOnlyOnceMountedAndJoinedThenWatchdogAndStopping) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root (FUSE mounts)";
  Cluster c;
  NotifySocket sock(c.dir() + "/notify.sock");
  ASSERT_TRUE(sock.ok()) << std::strerror(errno);
  ScopedEnv notify("NOTIFY_SOCKET", c.dir() + "/notify.sock");
  ScopedEnv watchdog("WATCHDOG_USEC", "300000");

  const std::string a1 = "127.0.0.1:" + std::to_string(FreePort());
  c.Start("n1", c.WriteConfig({.id = "n1", .listen = a1}));
  std::vector<std::string> seen;
  auto ready = sock.Until("READY=1", 30s, &seen);
  ASSERT_TRUE(ready) << c.Log("n1");
  // Checked as soon as READY arrives: the mount works already.
  EXPECT_TRUE(IsMounted(c.Mountpoint("n1")));
  EXPECT_TRUE(Usable(c.Mountpoint("n1"), "a"));
  EXPECT_NE(ready->find("STATUS=node n1 mounted at " + c.Mountpoint("n1") + "; 1 member(s) alive"),
            std::string::npos)
      << *ready;
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), "STATUS=starting");  // before anything else

  // A node with a seed: READY once it sees the seed alive.
  c.Start("n2", c.WriteConfig({.id = "n2", .listen = "127.0.0.1:" + std::to_string(FreePort()),
                                .peers = {a1}}));
  ready = sock.Until("READY=1", 30s, nullptr);
  ASSERT_TRUE(ready) << c.Log("n2");
  EXPECT_TRUE(IsMounted(c.Mountpoint("n2")));
  EXPECT_EQ(ReadFileText(c.Mountpoint("n2") + "/a"), "ready");
  EXPECT_NE(ready->find("STATUS=node n2 mounted at " + c.Mountpoint("n2") + "; 2 member(s) alive"),
            std::string::npos)
      << *ready;

  // The watchdog, every 150 ms while the mount answers.
  int pings = 0;
  for (int i = 0; i < 10 && pings < 4; ++i) {
    if (sock.Until("WATCHDOG=1", 2s, nullptr)) ++pings;
  }
  EXPECT_GE(pings, 4);

  ASSERT_EQ(c.Stop("n2", SIGTERM), 0) << c.Log("n2");
  EXPECT_TRUE(sock.Until("STOPPING=1", 10s, nullptr));
}

TEST(Service, AStaleMountOfAKilledDaemonIsClearedByTheNextStart) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root (FUSE mounts)";
  Cluster c;
  const std::string cfg =
      c.WriteConfig({.id = "n1", .listen = "127.0.0.1:" + std::to_string(FreePort())});
  c.Start("n1", cfg);
  ASSERT_TRUE(WaitFor([&] { return IsMounted(c.Mountpoint("n1")) && c.AliveCount("n1") == 1; }, kNoHang))
      << c.Log("n1");
  ASSERT_TRUE(Usable(c.Mountpoint("n1"), "kept"));
  c.Stop("n1", SIGKILL, /*keep_stale_mount=*/true);
  ASSERT_TRUE(IsMounted(c.Mountpoint("n1"))) << "the killed daemon's mount is left";
  struct stat st {};
  // Every request gets ENOTCONN once the kernel has ended the connection.
  ASSERT_TRUE(WaitFor([&] { return ::stat(c.Mountpoint("n1").c_str(), &st) == -1 && errno == ENOTCONN; },
                      kNoHang));

  // Without the flag: refused, one line naming the cure.
  auto r = RunCommand({FEDFS_FEDFSD_PATH, "--config", cfg}, 30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is a stale FUSE mount"), std::string::npos) << r.err;

  c.Start("n1", cfg, "", {"--clear-stale-mount"});
  ASSERT_TRUE(WaitFor([&] { return c.AliveCount("n1") == 1; }, kNoHang)) << c.Log("n1");
  EXPECT_NE(c.Log("n1").find("cleared the stale FedFS mount at " + c.Mountpoint("n1")),
            std::string::npos)
      << c.Log("n1");
  ASSERT_TRUE(WaitFor([&] { return ReadFileText(c.Mountpoint("n1") + "/kept") == "ready"; }, kNoHang));
  ASSERT_EQ(c.Stop("n1", SIGTERM), 0) << c.Log("n1");
}

}  // namespace
}  // namespace fedfs::testing
