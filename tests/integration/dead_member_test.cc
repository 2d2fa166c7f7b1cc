// Directory operations while a member of the federation is dead (docs/
// faults.md, "Directory operations with dead members"; needs root and
// /dev/fuse): three daemons with mounts; they go ahead among the live
// members and the dead one applies them when it returns (GoAheadWhileAway);
// fedfsctl forget. DeadBounds (below): how long calls that need a frozen or
// killed node take.
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

// directory_ops.record_dead_members (off by default: docs/config.md).
constexpr const char* kRecord = "directory_ops:\n  record_dead_members: true\n";

// Off (the default), a directory rmdir or rename waits for a dead member:
// EHOSTDOWN, nothing changed.
TEST(DeadMember, WithoutRecordsDirectoryOperationsWaitForADeadMember) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c;
  std::vector<std::string> ids;
  const std::string e = c.StartMounted(3, &ids);
  ASSERT_TRUE(e.empty()) << e;
  const std::string m1 = c.Mountpoint("n1");
  ASSERT_EQ(::mkdir((m1 + "/d").c_str(), 0755), 0) << std::strerror(errno);
  c.Stop("n3", SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return c.SeesAlive("n1", {"n1", "n2"}); }, kNoHang)) << c.Log("n1");
  EXPECT_EQ(Errno(::rmdir((m1 + "/d").c_str())), EHOSTDOWN);
  EXPECT_EQ(Errno(::rename((m1 + "/d").c_str(), (m1 + "/e").c_str())), EHOSTDOWN);
  EXPECT_TRUE(fs::is_directory(m1 + "/d"));
}

// The records of `id` (fedfsctl pending --json): (member, kind, from).
std::set<std::string> PendingOf(const Cluster& c, const std::string& id) {
  std::set<std::string> out;
  const auto j = c.Ctl(id, {"pending"});
  if (j.is_null()) return {"<no answer>"};
  for (const auto& r : j["records"]) {
    out.insert(r["node"].get<std::string>() + " " + r["kind"].get<std::string>() + " " +
               r["from"].get<std::string>());
  }
  return out;
}

// Everything beneath `dir` of an export root, as relative paths.
std::set<std::string> Tree(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    out.insert(fs::relative(it->path(), dir).string());
  }
  return out;
}

// In a directory P that n3 manages, n3 holds a part of P/d (d/x), of P/r
// (r/y) and of P/s (s/z); P/e is on n1 only. n3 goes away (killed, or
// frozen past the failure timeout); through n1's mount: rmdir P/d (its union
// is empty among the live), rename P/r -> P/r2, rename P/s -> P/e/s2 (a
// destination whose parent n3 lacks). While n3 is away every live node holds
// its records and `fedfsctl pending` shows them. When n3 is back it applies
// them before any node counts it alive (and, restarted, before it mounts):
// d, r and s never reappear through any mount, r/y shows under r2, s/z
// under e/s2, and d/x (which no live node could see when P/d was found
// empty) is kept in /.fedfs-orphans/<op>/P/d/x.
void GoAheadWhileAway(bool kill) {
  Cluster c;
  std::vector<std::string> ids;
  const std::string e = c.StartMounted(3, &ids, kRecord);
  ASSERT_TRUE(e.empty()) << e;
  const std::string m1 = c.Mountpoint("n1"), m3 = c.Mountpoint("n3");
  // Everything happens in a directory P that n3 manages when all are alive:
  // a returning n3 builds VD(P) itself, with its own listing in it.
  std::string P;
  for (int i = 0; i < 64 && P.empty(); ++i) {
    const std::string cand = "/p" + std::to_string(i);
    if (c.Ctl("n1", {"ring", cand})["manager"] == "n3") P = cand;
  }
  ASSERT_FALSE(P.empty()) << "no directory managed by n3";
  ASSERT_EQ(::mkdir((m1 + P).c_str(), 0755), 0) << std::strerror(errno);
  for (const char* d : {"/d", "/r", "/s", "/e"}) {
    ASSERT_EQ(::mkdir((m1 + P + d).c_str(), 0755), 0) << d << ": " << std::strerror(errno);
  }
  { std::ofstream(m3 + P + "/d/x") << "x"; }
  { std::ofstream(m3 + P + "/r/y") << "y"; }
  { std::ofstream(m3 + P + "/s/z") << "z"; }
  ASSERT_TRUE(fs::exists(c.ExportRoot("n3") + P + "/d/x"));
  ASSERT_TRUE(fs::exists(c.ExportRoot("n3") + P + "/s/z"));
  ASSERT_EQ(Names(m1 + P + "/d"), std::set<std::string>{"x"});

  if (kill) {
    c.Stop("n3", SIGKILL);
  } else {
    ASSERT_EQ(::kill(c.pid("n3"), SIGSTOP), 0);
  }
  ASSERT_TRUE(WaitFor([&] { return c.SeesAlive("n1", {"n1", "n2"}); }, kNoHang)) << c.Log("n1");
  ASSERT_TRUE(WaitFor([&] { return c.SeesAlive("n2", {"n1", "n2"}); }, kNoHang)) << c.Log("n2");
  EXPECT_EQ(Names(m1 + P + "/d"), std::set<std::string>{});  // n3's part is out of sight
  EXPECT_EQ(Errno(::rmdir((m1 + P + "/d").c_str())), 0) << c.Log("n1");
  EXPECT_EQ(Errno(::rename((m1 + P + "/r").c_str(), (m1 + P + "/r2").c_str())), 0) << c.Log("n1");
  EXPECT_EQ(Errno(::rename((m1 + P + "/s").c_str(), (m1 + P + "/e/s2").c_str())), 0)
      << c.Log("n1");
  const std::set<std::string> want{"n3 rmdir " + P + "/d", "n3 rename " + P + "/r",
                                   "n3 rename " + P + "/s"};
  EXPECT_EQ(PendingOf(c, "n1"), want);
  EXPECT_EQ(PendingOf(c, "n2"), want);  // copied before the operations answered

  const std::set<std::string> old{"d", "r", "s"};
  auto no_old_name = [&](const std::set<std::string>& names) {
    for (const auto& n : old) {
      if (names.contains(n)) return false;
    }
    return true;
  };
  if (kill) {
    c.Start("n3", c.dir() + "/n3.yaml");
    // A restarted member applies what it missed before it mounts: its mount
    // never lists the old names, also in P, which it manages in its view.
    ASSERT_TRUE(WaitFor([&] { return IsMounted(m3); }, kNoHang)) << c.Log("n3");
    EXPECT_TRUE(no_old_name(Names(m3 + P))) << c.Log("n3");
  } else {
    ASSERT_EQ(::kill(c.pid("n3"), SIGCONT), 0);
  }
  for (const auto& id : ids) {
    ASSERT_TRUE(WaitFor([&] { return c.SeesAlive(id, ids); }, kNoHang)) << id << "\n" << c.Log(id);
  }
  EXPECT_EQ(PendingOf(c, "n1"), std::set<std::string>{});
  EXPECT_EQ(PendingOf(c, "n2"), std::set<std::string>{});
  // n3's export root: as if it had been there.
  const std::set<std::string> tree = Tree(c.ExportRoot("n3") + P);
  EXPECT_TRUE(no_old_name(tree));
  EXPECT_TRUE(tree.contains("r2/y"));
  EXPECT_TRUE(tree.contains("e/s2/z"));
  std::string orphan;
  for (const auto& p : Tree(c.ExportRoot("n3"))) {
    if (p.starts_with(".fedfs-orphans/") && p.ends_with(P.substr(1) + "/d/x")) orphan = p;
  }
  EXPECT_FALSE(orphan.empty()) << "d/x not kept in the orphans";
  // Every mount agrees, none shows an old name.
  for (const auto& id : ids) {
    const std::string m = c.Mountpoint(id) + P;
    EXPECT_TRUE(no_old_name(Names(m))) << id;
    EXPECT_EQ(Names(m + "/r2"), std::set<std::string>{"y"}) << id;
    EXPECT_EQ(Names(m + "/e"), std::set<std::string>{"s2"}) << id;
    EXPECT_EQ(Names(m + "/e/s2"), std::set<std::string>{"z"}) << id;
    if (!orphan.empty()) {
      EXPECT_TRUE(fs::exists(c.Mountpoint(id) + "/" + orphan)) << id << ": " << orphan;
    }
  }
}

TEST(DeadMember, DirectoryOperationsGoAheadAndAKilledMemberAppliesThemWhenItRestarts) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  GoAheadWhileAway(/*kill=*/true);
}

TEST(DeadMember, DirectoryOperationsGoAheadAndAFrozenMemberAppliesThemWhenItWakes) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  GoAheadWhileAway(/*kill=*/false);
}

// fedfsctl forget: a dead member's records are dropped on every live node,
// and it leaves every view.
TEST(DeadMember, AForgottenMemberLeavesTheViewsAndItsRecordsGo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c;
  std::vector<std::string> ids;
  const std::string e = c.StartMounted(3, &ids, kRecord);
  ASSERT_TRUE(e.empty()) << e;
  const std::string m1 = c.Mountpoint("n1");
  ASSERT_EQ(::mkdir((m1 + "/d").c_str(), 0755), 0) << std::strerror(errno);
  EXPECT_TRUE(c.Ctl("n1", {"forget", "n3"}).is_null());  // alive: refused
  c.Stop("n3", SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return c.SeesAlive("n1", {"n1", "n2"}); }, kNoHang)) << c.Log("n1");
  ASSERT_EQ(Errno(::rename((m1 + "/d").c_str(), (m1 + "/d2").c_str())), 0) << c.Log("n1");
  EXPECT_EQ(PendingOf(c, "n2"), std::set<std::string>{"n3 rename /d"});
  const auto reply = c.Ctl("n1", {"forget", "n3"});
  ASSERT_FALSE(reply.is_null()) << c.Log("n1");
  EXPECT_EQ(reply["dropped"], 1);
  EXPECT_EQ(PendingOf(c, "n1"), std::set<std::string>{});
  EXPECT_EQ(PendingOf(c, "n2"), std::set<std::string>{});
  for (const char* id : {"n1", "n2"}) {
    EXPECT_TRUE(WaitFor([&] { return c.Member(id, "n3").is_null(); }, kNoHang)) << id;
    EXPECT_EQ(c.Ctl(id, {"pending"})["forgotten"], nlohmann::json::array({"n3"})) << id;
  }
  // Directory operations need nobody now.
  EXPECT_EQ(Errno(::rmdir((m1 + "/d2").c_str())), 0);
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
