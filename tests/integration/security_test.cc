// Security of the daemon with real processes (label "integration"; needs
// root and /dev/fuse like the mount tests):
//  * root squash: with security.root_squash on a node, a root caller on
//    another node creates files there owned by squash_uid/squash_gid; its
//    own mount (local callers) and nodes without the option keep uid 0;
//  * capability reduction: every thread of a running daemon lacks
//    CAP_SYS_MODULE & co. in its effective, permitted and bounding sets, keeps
//    what serving callers needs, and still unmounts and exits 0 on SIGTERM.
// The Cluster stops the daemons by pid and clears their mounts, whatever
// happens.
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

std::string Loop() { return "127.0.0.1:" + std::to_string(FreePort()); }

class MountSecurity : public ::testing::Test {
 protected:
  // n1 and n2, both mounting; files under /sq are placed on n2; n2's config
  // gets `n2_yaml`.
  void Launch(const std::string& n2_yaml) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    const std::string a1 = Loop(), a2 = Loop();
    const std::string rule = "placement: {rules: [{prefix: /sq, node: n2}]}\n";
    const std::string c1 = c_.WriteConfig({.id = "n1", .listen = a1, .extra_yaml = rule});
    const std::string c2 =
        c_.WriteConfig({.id = "n2", .listen = a2, .peers = {a1}, .extra_yaml = rule + n2_yaml});
    // A world-writable directory on n2 only, so squashed callers may create.
    fs::create_directories(c_.ExportRoot("n2") + "/sq");
    ::chmod((c_.ExportRoot("n2") + "/sq").c_str(), 0777);
    c_.Start("n1", c1);
    c_.Start("n2", c2);
    for (const char* id : {"n1", "n2"}) {
      ASSERT_TRUE(WaitFor([&] { return c_.SeesAlive(id, {"n1", "n2"}); }, kNoHang)) << c_.Log(id);
      ASSERT_TRUE(WaitFor([&] { return IsMounted(c_.Mountpoint(id)); }, kNoHang)) << c_.Log(id);
    }
  }
  // Creates `name` in /sq through `via`'s mount (as this root process) and
  // returns the owner of the file in n2's export root.
  std::pair<uid_t, gid_t> CreateThrough(const std::string& via, const std::string& name) {
    const std::string path = c_.Mountpoint(via) + "/sq/" + name;
    const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_EXCL, 0644);
    EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
    if (fd >= 0) ::close(fd);
    struct stat st {};
    const std::string on_n2 = c_.ExportRoot("n2") + "/sq/" + name;
    EXPECT_EQ(::stat(on_n2.c_str(), &st), 0) << on_n2 << " (placed elsewhere?)";
    return {st.st_uid, st.st_gid};
  }

  Cluster c_;
};

TEST_F(MountSecurity, RootSquashMapsRemoteRootToTheSquashIds) {
  ASSERT_NO_FATAL_FAILURE(Launch("security: {root_squash: true, squash_uid: 65534, squash_gid: 65534}\n"));
  if (IsSkipped()) return;
  // Root through n1's mount: a remote caller of n2, squashed.
  EXPECT_EQ(CreateThrough("n1", "from-n1"), (std::pair<uid_t, gid_t>{65534, 65534}));
  // Root through n2's own mount: a local caller, not squashed.
  EXPECT_EQ(CreateThrough("n2", "from-n2"), (std::pair<uid_t, gid_t>{0, 0}));
  // The squashed caller is not root on n2: it cannot chown.
  EXPECT_EQ(::chown((c_.Mountpoint("n1") + "/sq/from-n1").c_str(), 0, 0), -1);
  EXPECT_EQ(errno, EPERM);
}

TEST_F(MountSecurity, WithoutRootSquashRemoteRootStaysRoot) {
  ASSERT_NO_FATAL_FAILURE(Launch(""));
  if (IsSkipped()) return;
  EXPECT_EQ(CreateThrough("n1", "from-n1"), (std::pair<uid_t, gid_t>{0, 0}));
}

// The Cap* lines of /proc/<pid>/task/<tid>/status, by thread.
std::map<std::string, std::map<std::string, uint64_t>> Caps(pid_t pid) {
  std::map<std::string, std::map<std::string, uint64_t>> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::istringstream in(ReadFileText(e.path().string() + "/status"));
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("Cap", 0) != 0) continue;
      const size_t colon = line.find(':');
      out[e.path().filename()][line.substr(0, colon)] = std::stoull(line.substr(colon + 1), nullptr, 16);
    }
  }
  return out;
}

TEST_F(MountSecurity, DaemonDropsUnneededCapabilitiesInEveryThread) {
  ASSERT_NO_FATAL_FAILURE(Launch(""));
  if (IsSkipped()) return;
  const pid_t pid = c_.pid("n1");
  // Work through the mount first so that FUSE workers exist too.
  EXPECT_EQ(CreateThrough("n1", "x"), (std::pair<uid_t, gid_t>{0, 0}));
  const auto caps = Caps(pid);
  ASSERT_GT(caps.size(), 3u) << "threads of " << pid;
  auto bit = [](int cap) { return uint64_t{1} << cap; };
  for (const auto& [tid, c] : caps) {
    SCOPED_TRACE("thread " + tid);
    for (const char* set : {"CapEff", "CapPrm", "CapBnd"}) {
      ASSERT_TRUE(c.contains(set));
      for (int cap : {CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE, CAP_NET_ADMIN, CAP_SYS_BOOT,
                      CAP_SETPCAP, CAP_NET_RAW, CAP_KILL}) {
        EXPECT_EQ(c.at(set) & bit(cap), 0u) << set << " has capability " << cap;
      }
    }
    for (int cap : {CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE, CAP_MKNOD,
                    CAP_SYS_ADMIN}) {
      EXPECT_NE(c.at("CapEff") & bit(cap), 0u) << "CapEff lacks capability " << cap;
    }
  }
  // Still unmounts and exits 0 on SIGTERM.
  EXPECT_EQ(c_.Stop("n1"), 0) << c_.Log("n1");
  EXPECT_FALSE(IsMounted(c_.Mountpoint("n1")));
}

}  // namespace
}  // namespace fedfs::testing
