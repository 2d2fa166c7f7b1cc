// Two coordinators renaming overlapping directories held by three nodes at
// the same instant, through real mounts (label "integration"; needs root and
// /dev/fuse): n1 renames /a to /x while n2 renames /a/b to /y, twenty times.
// Each round must end in one of the two orders on every export root (b under
// /x everywhere, or /y everywhere), never a mix (dirops/dir_ops.h, "Two
// coordinators": name locks at the managers).
//
// And plain renames racing with creates and other renames of three names in
// one directory, from two threads on each of three mounts: rename(2) without
// flags answers 0 or ENOENT there, never EEXIST (a rename that lost its
// claim or lock to another node five times in a row once gave up so).
//
// The Cluster stops the daemons by pid, unmounts and removes its temporary
// directory whatever happens.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

TEST(DirRace, OverlappingRenamesOfTwoCoordinatorsEndInOneOrderOnEveryNode) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c;
  std::vector<std::string> ids;
  const std::string e = c.StartMounted(3, &ids);
  ASSERT_TRUE(e.empty()) << e;
  auto M = [&](const std::string& id, const std::string& rel) { return c.Mountpoint(id) + rel; };
  auto R = [&](const std::string& id, const std::string& rel) { return c.ExportRoot(id) + rel; };
  auto is_dir = [](const std::string& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  };
  // /a/b on every node, each with a file of its own.
  ASSERT_EQ(::mkdir(M("n1", "/a").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir(M("n1", "/a/b").c_str(), 0755), 0) << std::strerror(errno);
  for (const auto& id : ids) {
    ASSERT_TRUE(std::ofstream(M(id, "/a/b/f-" + id)).good()) << id;
    ASSERT_TRUE(is_dir(R(id, "/a/b"))) << id;
  }

  int first_order = 0, second_order = 0;
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::atomic<int> ready{0};
    int rc1 = 0, rc2 = 0;
    auto race = [&](const std::string& from, const std::string& to, int* rc,
                    std::chrono::microseconds delay) {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      std::this_thread::sleep_for(delay);
      *rc = ::rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
    };
    // n1's start moves across n2's whole rename from round to round, so that
    // both orders and every overlap in between happen.
    const auto delay = std::chrono::microseconds(1500 * (round % 10));
    std::thread t1(race, M("n1", "/a"), M("n1", "/x"), &rc1, delay);
    std::thread t2(race, M("n2", "/a/b"), M("n2", "/y"), &rc2, std::chrono::microseconds(0));
    t1.join();
    t2.join();
    ASSERT_EQ(rc1, 0) << std::strerror(rc1);
    // n2's rename ran first (both done) or found /a/b gone (ENOENT).
    ASSERT_TRUE(rc2 == 0 || rc2 == ENOENT) << std::strerror(rc2);
    const bool b_moved = rc2 == 0;
    (b_moved ? second_order : first_order)++;
    for (const auto& id : ids) {
      SCOPED_TRACE(id);
      EXPECT_FALSE(fs::exists(R(id, "/a")));
      EXPECT_EQ(is_dir(R(id, "/x/b")), !b_moved);
      EXPECT_EQ(is_dir(R(id, "/y")), b_moved);
      EXPECT_TRUE(fs::exists(R(id, (b_moved ? "/y/f-" : "/x/b/f-") + id)));
    }
    if (HasFailure()) return;
    // Back to /a/b for the next round, through a mount.
    ASSERT_EQ(::rename(M("n3", "/x").c_str(), M("n3", "/a").c_str()), 0) << std::strerror(errno);
    if (b_moved) {
      ASSERT_EQ(::rename(M("n3", "/y").c_str(), M("n3", "/a/b").c_str()), 0)
          << std::strerror(errno);
    }
    for (const auto& id : ids) ASSERT_TRUE(is_dir(R(id, "/a/b"))) << id;
  }
  std::printf("orders: n1 first %d, n2 first %d\n", first_order, second_order);
}

TEST(DirRace, PlainRenamesRacingInOneDirectoryAnswerOnlyZeroOrEnoent) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c;
  std::vector<std::string> ids;
  // Files spread over the nodes by name: most renames cross nodes.
  const std::string e =
      c.StartMounted(3, &ids, "placement: {policy: local, rules: [{prefix: /s, policy: hash}]}\n");
  ASSERT_TRUE(e.empty()) << e;
  ASSERT_EQ(::mkdir((c.Mountpoint("n1") + "/s").c_str(), 0755), 0) << std::strerror(errno);
  const char* const names[] = {"a", "b", "c"};
  std::mutex mu;
  std::map<int, int> rename_errors;  // errno -> count
  int renames = 0;
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 2 * ids.size(); ++t) {
    threads.emplace_back([&, t] {
      const std::string dir = c.Mountpoint(ids[t / 2]) + "/s/";
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      std::uniform_int_distribution<int> pick(0, 2);
      for (int i = 0; i < 500; ++i) {
        const std::string a = dir + names[pick(rng)];
        if (pick(rng) == 0) {
          const int fd = ::open(a.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
          if (fd >= 0) ::close(fd);
          continue;
        }
        const std::string b = dir + names[pick(rng)];
        const int rc = ::rename(a.c_str(), b.c_str()) == 0 ? 0 : errno;
        std::lock_guard lock(mu);
        ++renames;
        ++rename_errors[rc];
      }
    });
  }
  for (auto& th : threads) th.join();
  std::string seen;
  for (const auto& [err, n] : rename_errors) {
    seen += std::string(err == 0 ? "ok" : std::strerror(err)) + ": " + std::to_string(n) + "; ";
  }
  std::printf("%d renames: %s\n", renames, seen.c_str());
  for (const auto& [err, n] : rename_errors) {
    EXPECT_TRUE(err == 0 || err == ENOENT) << n << " renames answered " << std::strerror(err);
  }
  EXPECT_GT(rename_errors[0], 0) << "no rename succeeded";
}

// A stat of a file this node is renaming away, through a name the kernel
// still has, answers the file (its attributes by its new name) until the
// rename returns: an ENOENT there, with the new name's absence still cached
// by the kernel, showed the file under neither name (the history test saw
// it once). One thread renames x to y through n1 while another stats x,
// then y, through n1 again and again, and a third changes x's mode through
// n3 (so that n1's kernel asks for x's attributes); the file is on n2.
TEST(DirRace, AFileBeingRenamedIsSeenUnderOneOfItsNamesByTheRenamingNode) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c;
  std::vector<std::string> ids;
  const std::string e =
      c.StartMounted(3, &ids, "placement: {policy: local, rules: [{prefix: /r, node: n2}]}\n");
  ASSERT_TRUE(e.empty()) << e;
  const std::string dir = c.Mountpoint("n1") + "/r";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << std::strerror(errno);
  const std::string x = dir + "/x", y = dir + "/y";
  int neither = 0;
  for (int round = 0; round < 300 && neither == 0; ++round) {
    const int fd = ::open(x.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ::close(fd);
    struct stat st {};
    ASSERT_EQ(::stat(x.c_str(), &st), 0);   // the kernel has x
    ASSERT_NE(::stat(y.c_str(), &st), 0);   // and y's absence
    std::atomic<bool> done{false};
    // Another node changes x meanwhile: n1's kernel asks for x's
    // attributes anew rather than keep them.
    std::thread chmods([&, other = c.Mountpoint("n3") + "/r/x"] {
      for (mode_t m = 0600; !done.load(); m ^= 0044) ::chmod(other.c_str(), m);
    });
    std::thread stats([&] {
      while (!done.load()) {
        struct stat a {}, b {};
        if (::stat(x.c_str(), &a) != 0 && errno == ENOENT && ::stat(y.c_str(), &b) != 0 &&
            errno == ENOENT && !done.load()) {
          ++neither;
        }
      }
    });
    const int rc = ::rename(x.c_str(), y.c_str()) == 0 ? 0 : errno;
    done = true;
    stats.join();
    chmods.join();
    ASSERT_EQ(rc, 0) << std::strerror(rc);
    ASSERT_EQ(::unlink(y.c_str()), 0) << std::strerror(errno);
  }
  EXPECT_EQ(neither, 0) << "a stat of x, then of y, both ENOENT while x was renamed to y";
}

}  // namespace
}  // namespace fedfs::testing
