// Directory operations while a member of the federation is dead (docs/
// namespace.md, "Dead nodes"; needs root and /dev/fuse): three daemons with
// mounts; /d is on n1 and on n3, which holds the file d/x; n3 is killed.
// While n1 knows it dead, no VD shows n3's part of /d (n1 alone holds it,
// empty, as far as any live node can tell): rmdir and rename of /d answer
// EHOSTDOWN (an rmdir used to succeed, and /d came back with x when n3
// returned), and so do those of a directory only n1 ever held (n3 might
// hold a part of any directory). Once n3 is back, /d lists x again and
// rmdir answers ENOTEMPTY. DeadBounds (below): how long calls that need a
// frozen or killed node take.
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <filesystem>
#include <map>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

int Errno(int rc) { return rc == 0 ? 0 : errno; }

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.insert(e.path().filename().string());
  return out;
}

TEST(DeadMember, DirectoryRmdirAndRenameWaitForADeadNodeThatMayHoldAPart) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c;
  std::vector<std::string> ids;
  const std::string e = c.StartMounted(3, &ids);
  ASSERT_TRUE(e.empty()) << e;
  const std::string m1 = c.Mountpoint("n1");
  ASSERT_EQ(::mkdir((m1 + "/d").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir((m1 + "/s").c_str(), 0755), 0) << std::strerror(errno);
  { std::ofstream(c.Mountpoint("n3") + "/d/x") << "x"; }
  ASSERT_TRUE(fs::exists(c.ExportRoot("n3") + "/d/x"));
  ASSERT_EQ(Names(m1 + "/d"), std::set<std::string>{"x"});

  c.Stop("n3", SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return c.SeesAlive("n1", {"n1", "n2"}); }, kNoHang)) << c.Log("n1");
  EXPECT_EQ(Names(m1 + "/d"), std::set<std::string>{});  // n3's part is out of sight
  EXPECT_EQ(Errno(::rmdir((m1 + "/d").c_str())), EHOSTDOWN);
  EXPECT_EQ(Errno(::rename((m1 + "/d").c_str(), (m1 + "/e").c_str())), EHOSTDOWN);
  EXPECT_EQ(Errno(::rmdir((m1 + "/s").c_str())), EHOSTDOWN);
  EXPECT_EQ(Errno(::rename((m1 + "/s").c_str(), (m1 + "/t").c_str())), EHOSTDOWN);
  EXPECT_TRUE(fs::is_directory(c.ExportRoot("n1") + "/d"));
  EXPECT_TRUE(fs::is_directory(c.ExportRoot("n1") + "/s"));

  c.Start("n3", c.dir() + "/n3.yaml");
  for (const auto& id : ids) {
    ASSERT_TRUE(WaitFor([&] { return c.SeesAlive(id, ids); }, kNoHang)) << id << "\n" << c.Log(id);
  }
  EXPECT_EQ(Names(m1 + "/d"), std::set<std::string>{"x"});
  EXPECT_EQ(Errno(::rmdir((m1 + "/d").c_str())), ENOTEMPTY);
  EXPECT_EQ(Errno(::rename((m1 + "/s").c_str(), (m1 + "/t").c_str())), 0);
  EXPECT_EQ(Errno(::rmdir((m1 + "/t").c_str())), 0);
}

// How long a call through a live node's mount takes when it needs a node
// that is frozen (SIGSTOP: silent, its connections open) or killed (its
// connections refused). Nine directories, each with files on n3 (n3 also
// manages some of them, by the ring); right after the fault, every call
// below runs at once in each directory, through n1's mount, on names that
// mount has not looked up before (so that they reach the daemons). Each
// must end, with its answer or an error, within kBound; the longest time
// and the answers of each kind are printed (docs/faults.md, "Bounds").
class DeadBounds : public ::testing::TestWithParam<int> {};

TEST_P(DeadBounds, EveryCallThatNeedsTheNodeEndsWithinTheBound) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  constexpr auto kBound = std::chrono::seconds(15);
  constexpr int kDirs = 9;
  const int sig = GetParam();
  Cluster c;
  std::vector<std::string> ids;
  const std::string e = c.StartMounted(3, &ids);
  ASSERT_TRUE(e.empty()) << e;
  const std::string m1 = c.Mountpoint("n1");
  for (int i = 0; i < kDirs; ++i) {
    const std::string d = "/d" + std::to_string(i);
    ASSERT_EQ(::mkdir((m1 + d).c_str(), 0755), 0) << std::strerror(errno);
    for (const char* f : {"stat", "read", "write"}) std::ofstream(c.Mountpoint("n3") + d + "/" + f) << "on n3";
    ASSERT_TRUE(fs::exists(c.ExportRoot("n3") + d + "/read"));
  }
  using Run = std::function<int(const std::string& dir)>;  // the errno it ended with (0: ok)
  const std::vector<std::pair<std::string, Run>> kinds = {
      {"stat of a file on it", [](const std::string& d) {
         struct stat st {};
         return Errno(::stat((d + "/stat").c_str(), &st));
       }},
      {"open and read of a file on it", [](const std::string& d) {
         const int fd = ::open((d + "/read").c_str(), O_RDONLY);
         if (fd < 0) return errno;
         char b[8];
         const int rc = ::read(fd, b, sizeof b) < 0 ? errno : 0;
         ::close(fd);
         return rc;
       }},
      {"open for writing of a file on it", [](const std::string& d) {
         const int fd = ::open((d + "/write").c_str(), O_WRONLY);
         if (fd < 0) return errno;
         ::close(fd);
         return 0;
       }},
      {"listing of a directory it has a part of", [](const std::string& d) {
         std::error_code ec;
         for (const auto& x : fs::directory_iterator(d, ec)) (void)x;
         return ec.value();
       }},
      {"create in such a directory", [](const std::string& d) {
         const int fd = ::open((d + "/new").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
         if (fd < 0) return errno;
         ::close(fd);
         return 0;
       }},
      {"mkdir in such a directory", [](const std::string& d) { return Errno(::mkdir((d + "/sub").c_str(), 0755)); }},
  };
  struct Outcome {
    std::chrono::milliseconds took{0};
    int err = 0;
  };
  std::vector<std::vector<Outcome>> got(kinds.size(), std::vector<Outcome>(kDirs));
  if (sig == SIGKILL) {
    c.Stop("n3", SIGKILL);
  } else {
    ASSERT_EQ(::kill(c.pid("n3"), SIGSTOP), 0);
  }
  {
    std::vector<std::thread> threads;
    for (size_t k = 0; k < kinds.size(); ++k) {
      for (int i = 0; i < kDirs; ++i) {
        threads.emplace_back([&, k, i] {
          const auto t0 = std::chrono::steady_clock::now();
          got[k][static_cast<size_t>(i)].err = kinds[k].second(m1 + "/d" + std::to_string(i));
          got[k][static_cast<size_t>(i)].took = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - t0);
        });
      }
    }
    for (auto& t : threads) t.join();
  }
  if (sig == SIGSTOP) ::kill(c.pid("n3"), SIGCONT);
  std::string report;
  for (size_t k = 0; k < kinds.size(); ++k) {
    std::chrono::milliseconds longest{0};
    std::map<std::string, int> answers;
    for (const Outcome& o : got[k]) {
      longest = std::max(longest, o.took);
      ++answers[o.err == 0 ? "ok" : std::strerror(o.err)];
      EXPECT_LT(o.took, kBound) << kinds[k].first;
    }
    report += "  " + kinds[k].first + ": longest " + std::to_string(longest.count()) + " ms;";
    for (const auto& [a, n] : answers) report += " " + a + " x" + std::to_string(n);
    report += "\n";
  }
  std::printf("n3 %s:\n%s", sig == SIGKILL ? "killed" : "frozen", report.c_str());
}

INSTANTIATE_TEST_SUITE_P(Signals, DeadBounds, ::testing::Values(SIGSTOP, SIGKILL),
                         [](const auto& info) {
                           return std::string(info.param == SIGKILL ? "Killed" : "Frozen");
                         });

}  // namespace
}  // namespace fedfs::testing
