// Crash test of the journaled multi-node directory rename (namespace/
// dir_ops.h) with 3 real daemons and FUSE mounts: a directory present on all
// three export roots is renamed through node n1's mount while n1 is told
// (FEDFS_TEST_PAUSE_AT) to stop at one step of the protocol; once its log
// says "paused at <step>", n1 is SIGKILLed, its stale mount cleared, and it
// is restarted. Its recovery must leave the directory wholly renamed or
// wholly not, on every export root, with every node's content intact.
//
// ReplaceCrash: the same for a file renamed over a file of that name held by
// another node (DirOps::ReplaceFile): after the restart exactly one of the two
// files is at the name, on the export roots and through every mount.
//
// The daemon journals the rename in its `state_dir` (RocksDB; the Cluster's
// configs set it) and announces the pause hook at startup: a daemon that
// cannot open its journal, does not announce the hook, never pauses, or
// exits on its own fails the test.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

std::set<std::string> Tree(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    out.insert(fs::relative(it->path(), dir).string());
  }
  return out;
}

// Configs of `ids` on free loopback ports, each seeded with the first
// (node_tag, state_dir <dir>/<id>-state), by id.
std::map<std::string, std::string> SeededConfigs(Cluster& c, const std::vector<std::string>& ids) {
  std::map<std::string, std::string> configs;
  std::vector<std::string> addrs;
  for (size_t i = 0; i < ids.size(); ++i) addrs.push_back("127.0.0.1:" + std::to_string(FreePort()));
  for (size_t i = 0; i < ids.size(); ++i) {
    NodeConfig nc;
    nc.id = ids[i];
    nc.listen = addrs[i];
    if (i > 0) nc.peers = {addrs[0]};
    configs[ids[i]] = c.WriteConfig(nc);
  }
  return configs;
}

// Waits until `cond` holds while node `name` runs; false if the bound passed
// or the node exited (the Cluster then fails the test with its exit status
// and log).
bool WhileRunning(Cluster& c, const std::string& name, const std::function<bool()>& cond) {
  return WaitFor([&] { return !c.Running(name) || cond(); }, kNoHang) && c.Running(name);
}

// Whether node `name`'s log holds `text`, as a condition.
std::function<bool()> Logged(Cluster& c, const std::string& name, const std::string& text) {
  return [&c, name, text] { return c.Log(name).find(text) != std::string::npos; };
}

class DirRenameCrash : public ::testing::TestWithParam<std::string> {};

TEST_P(DirRenameCrash, WhollyRenamedOrWhollyNot) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  const std::string step = GetParam();
  Cluster c;
  const std::vector<std::string> ids{"n1", "n2", "n3"};
  std::map<std::string, std::string> configs = SeededConfigs(c, ids);
  auto root = [&](const std::string& id) { return c.ExportRoot(id); };
  auto mnt = [&](const std::string& id) { return c.Mountpoint(id); };
  // /top/d on every node, each with its own content; /top/e nowhere.
  std::map<std::string, std::set<std::string>> before;
  for (const auto& id : ids) {
    fs::create_directories(root(id) + "/top/d/sub-" + id);
    std::ofstream(root(id) + "/top/d/file-" + id) << id;
    before[id] = Tree(root(id) + "/top/d");
  }

  auto while_running = [&](const std::string& name, const std::function<bool()>& cond) {
    return WhileRunning(c, name, cond);
  };
  auto logged = [&](const std::string& name, const std::string& text) {
    return Logged(c, name, text);
  };

  // n1 coordinates and pauses at `step`; it says so once its journal is open.
  ::setenv("FEDFS_TEST_PAUSE_AT", step.c_str(), 1);
  c.Start("n1", configs["n1"]);
  ::unsetenv("FEDFS_TEST_PAUSE_AT");
  ASSERT_TRUE(while_running("n1", logged("n1", "test hook: operations pause at step \"" + step + "\"")))
      << "n1 did not announce the pause hook:\n" << c.Log("n1");
  c.Start("n2", configs["n2"]);
  c.Start("n3", configs["n3"]);
  ASSERT_TRUE(while_running("n1", [&] { return c.SeesAlive("n1", ids); })) << c.Log("n1");
  ASSERT_TRUE(while_running("n1", [&] { return IsMounted(mnt("n1")); })) << c.Log("n1");

  // The rename hangs at the paused step: run it in a child process.
  const std::string from = mnt("n1") + "/top/d", to = mnt("n1") + "/top/e";
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = ::rename(from.c_str(), to.c_str());
    ::_exit(rc == 0 ? 0 : (errno & 0x7f));
  }
  const bool paused = while_running("n1", logged("n1", "paused at " + step));
  const int killed = c.Stop("n1", SIGKILL);  // also clears its stale mount
  int status = 0;
  // With its daemon gone, the kernel aborts the FUSE request: the child returns.
  if (!WaitFor([&] { return ::waitpid(child, &status, WNOHANG) == child; }, kNoHang)) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  ASSERT_TRUE(paused) << "n1 never paused at " << step << ":\n" << c.Log("n1");
  ASSERT_EQ(killed, 128 + SIGKILL) << DescribeExit(killed);
  ASSERT_FALSE(IsMounted(mnt("n1"))) << "n1's stale mount was not cleared";

  // Restart n1 (no pause): it recovers the journaled rename.
  c.Start("n1-restarted", configs["n1"]);
  ASSERT_TRUE(while_running(
      "n1-restarted",
      [&] {
        const std::string log = c.Log("n1-restarted");
        // An outcome logged by the journal (dirops/dir_ops.cc), not any
        // other line that happens to say "dropped".
        std::istringstream lines(log);
        for (std::string line; std::getline(lines, line);) {
          if (line.find("[dirops]") == std::string::npos) continue;
          if (line.find("rolled forward") != std::string::npos ||
              line.find("rolled back") != std::string::npos ||
              line.find("dropped") != std::string::npos) {
            return true;
          }
        }
        return false;
      }))
      << c.Log("n1-restarted");

  const bool renamed = fs::exists(root("n1") + "/top/e");
  for (const auto& id : ids) {
    SCOPED_TRACE(id + (renamed ? ": expected renamed" : ": expected not renamed"));
    const std::string there = root(id) + (renamed ? "/top/e" : "/top/d");
    const std::string gone = root(id) + (renamed ? "/top/d" : "/top/e");
    EXPECT_TRUE(fs::is_directory(there));
    EXPECT_FALSE(fs::exists(gone));
    EXPECT_EQ(Tree(there), before[id]);
  }
  if (step.starts_with("renamed:") || step.starts_with("done:") || step == "notified") {
    EXPECT_TRUE(renamed);
  }
  if (step == "journaled" || step == "validated") {
    EXPECT_FALSE(renamed);
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, DirRenameCrash,
                         ::testing::Values("journaled", "validated", "renamed:n1", "done:n2",
                                           "renamed:n3", "notified"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) {
                             if (ch == ':') ch = '_';
                           }
                           return s;
                         });

class ReplaceCrash : public ::testing::TestWithParam<std::string> {};

TEST_P(ReplaceCrash, OneOfTheTwoFilesIsAtTheName) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  const std::string step = GetParam();
  Cluster c;
  const std::vector<std::string> ids{"n1", "n2", "n3"};
  std::map<std::string, std::string> configs = SeededConfigs(c, ids);
  auto root = [&](const std::string& id) { return c.ExportRoot(id); };
  auto mnt = [&](const std::string& id) { return c.Mountpoint(id); };
  // /top/src on n1, /top/dst on n2.
  fs::create_directories(root("n1") + "/top");
  fs::create_directories(root("n2") + "/top");
  std::ofstream(root("n1") + "/top/src") << "source";
  std::ofstream(root("n2") + "/top/dst") << "old destination";
  auto while_running = [&](const std::string& name, const std::function<bool()>& cond) {
    return WhileRunning(c, name, cond);
  };
  auto logged = [&](const std::string& name, const std::string& text) {
    return Logged(c, name, text);
  };

  ::setenv("FEDFS_TEST_PAUSE_AT", step.c_str(), 1);
  c.Start("n1", configs["n1"]);
  ::unsetenv("FEDFS_TEST_PAUSE_AT");
  ASSERT_TRUE(while_running("n1", logged("n1", "test hook: operations pause at step \"" + step + "\"")))
      << c.Log("n1");
  c.Start("n2", configs["n2"]);
  c.Start("n3", configs["n3"]);
  ASSERT_TRUE(while_running("n1", [&] { return c.SeesAlive("n1", ids); })) << c.Log("n1");
  for (const auto& id : ids) {
    ASSERT_TRUE(WaitFor([&] { return IsMounted(mnt(id)); }, kNoHang)) << id;
  }

  const std::string from = mnt("n1") + "/top/src", to = mnt("n1") + "/top/dst";
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = ::rename(from.c_str(), to.c_str());
    ::_exit(rc == 0 ? 0 : (errno & 0x7f));
  }
  const bool paused = while_running("n1", logged("n1", "paused at " + step));
  const int killed = c.Stop("n1", SIGKILL);
  int status = 0;
  if (!WaitFor([&] { return ::waitpid(child, &status, WNOHANG) == child; }, kNoHang)) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  ASSERT_TRUE(paused) << "n1 never paused at " << step << ":\n" << c.Log("n1");
  ASSERT_EQ(killed, 128 + SIGKILL) << DescribeExit(killed);

  c.Start("n1-restarted", configs["n1"]);
  ASSERT_TRUE(while_running("n1-restarted", [&] {
    const std::string log = c.Log("n1-restarted");
    return log.find("rolled forward") != std::string::npos ||
           log.find("nothing changed, dropped") != std::string::npos;
  })) << c.Log("n1-restarted");
  ASSERT_TRUE(while_running("n1-restarted", [&] { return IsMounted(mnt("n1")); }));

  const bool renamed = step != "replace-journaled";
  SCOPED_TRACE(renamed ? "expected renamed" : "expected not renamed");
  EXPECT_EQ(fs::exists(root("n1") + "/top/dst"), renamed);
  EXPECT_EQ(fs::exists(root("n2") + "/top/dst"), !renamed);
  EXPECT_EQ(fs::exists(root("n1") + "/top/src"), !renamed);
  const std::string want = renamed ? "source" : "old destination";
  const std::set<std::string> names =
      renamed ? std::set<std::string>{"dst"} : std::set<std::string>{"dst", "src"};
  for (const auto& id : ids) {
    EXPECT_TRUE(WaitFor([&] { return ListNames(mnt(id) + "/top") == names; }, kNoHang))
        << id << " lists " << ListNames(mnt(id) + "/top").size() << " names";
    EXPECT_EQ(ReadFileText(mnt(id) + "/top/dst"), want) << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, ReplaceCrash,
                         ::testing::Values("replace-journaled", "replace-renamed:n1",
                                           "replace-unlinked:n2"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) {
                             if (ch == ':' || ch == '-') ch = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace fedfs::testing
