// fedfsd refuses bad configurations with ONE line on stderr that names the
// problem, and a non-zero exit (2: config, 1: start-up such as a port in use).
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

struct Case {
  const char* name;
  std::string replace;  // line prefix to drop from the good config ("" none)
  std::string add;      // line(s) to add
  int exit_code;
  std::vector<std::string> expect;
};

class BadConfig : public ::testing::Test {
 protected:
  // The good config as lines.
  std::vector<std::string> GoodLines() {
    return {"node_id: n1", "node_tag: 1", "listen: \"127.0.0.1:" + std::to_string(port_) + "\"",
            "export_root: " + c_.dir(), "mountpoint: /fedfs",
            "cluster_key_file: " + c_.key_file(),
            "control_socket: " + c_.Socket("n1"), "transport: {tls: tcp, net_devices: lo}",
            "metrics: {listen: \"127.0.0.1:0\"}"};
  }
  CommandResult RunWith(const Case& k) {
    std::string text;
    for (const auto& l : GoodLines()) {
      if (!k.replace.empty() && l.rfind(k.replace, 0) == 0) continue;
      text += l + "\n";
    }
    text += k.add;
    const std::string cfg = c_.WriteFile("bad.yaml", text);
    return RunCommand({FEDFS_FEDFSD_PATH, "--config", cfg}, 15s);
  }
  static void ExpectOneLine(const CommandResult& r, int code, const std::vector<std::string>& want) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    std::string err = r.err;
    while (!err.empty() && err.back() == '\n') err.pop_back();
    EXPECT_FALSE(err.empty());
    EXPECT_EQ(err.find('\n'), std::string::npos) << "more than one line:\n" << r.err;
    for (const auto& w : want) EXPECT_NE(err.find(w), std::string::npos) << "want '" << w << "' in: " << err;
  }

  Cluster c_;
  uint16_t port_ = FreePort();
};

TEST_F(BadConfig, EachProblemGivesOneLineAndNonZeroExit) {
  const std::string open_key = c_.NewKeyFile("open.key", 0644);
  const std::vector<Case> cases = {
      {"missing field", "listen:", "", 2, {"field 'listen'", "missing"}},
      {"missing key field", "cluster_key_file:", "", 2, {"field 'cluster_key_file'", "missing"}},
      {"unknown key", "", "colour: blue\n", 2, {"unknown key 'colour'"}},
      {"bad address", "listen:", "listen: abc\n", 2, {"field 'listen'", "\"abc\" is not host:port"}},
      {"bad peer address", "", "peers: [\"127.0.0.1:99999\"]\n", 2, {"field 'peers[0]'"}},
      {"key readable by others", "cluster_key_file:", "cluster_key_file: " + open_key + "\n", 2,
       {"field 'cluster_key_file'", open_key, "group or others"}},
      {"key missing", "cluster_key_file:", "cluster_key_file: " + c_.dir() + "/none.key\n", 2,
       {"field 'cluster_key_file'", "none.key", "No such file"}},
      {"export root missing", "export_root:", "export_root: /nonexistent/fedfs\n", 2,
       {"field 'export_root'", "does not exist"}},
      {"timeouts", "", "timeouts: {heartbeat_interval_ms: 300, failure_timeout_ms: 200}\n", 2,
       {"field 'timeouts.failure_timeout_ms'"}},
      {"bad squash uid", "", "security: {root_squash: true, squash_uid: 0}\n", 2,
       {"field 'security.squash_uid'", "out of range"}},
      {"bad root_squash", "", "security: {root_squash: sometimes}\n", 2,
       {"field 'security.root_squash'"}},
      // A mount inside the export root would have the daemon answer requests on
      // its own mount: a stat there waited for itself, unkillable.
      {"mountpoint inside the export root", "mountpoint:", "mountpoint: " + c_.dir() + "/sub\n", 2,
       {"field 'mountpoint'", "is inside export_root"}},
      {"key given twice", "", "node_tag: 2\n", 2, {"key 'node_tag' given twice"}},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    ExpectOneLine(RunWith(k), k.exit_code, k.expect);
  }
}

TEST_F(BadConfig, MissingConfigFileAndNoArguments) {
  auto r = RunCommand({FEDFS_FEDFSD_PATH, "--config", c_.dir() + "/nothing.yaml"}, 15s);
  ExpectOneLine(r, 2, {"nothing.yaml", "No such file"});
  auto none = RunCommand({FEDFS_FEDFSD_PATH}, 15s);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--config"), std::string::npos) << none.err;
}

TEST_F(BadConfig, PortInUse) {
  // Occupy the port with a bound (and listening) socket.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port_);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(fd, 1), 0);
  ExpectOneLine(RunWith({"port in use", "", "", 1, {}}), 1,
                {"127.0.0.1:" + std::to_string(port_), "already in use"});
  ::close(fd);
  // Only bound, not listening: still refused.
  const int fd2 = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::bind(fd2, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  ExpectOneLine(RunWith({"port bound", "", "", 1, {}}), 1, {"already in use"});
  ::close(fd2);
}

// fedfsd --check-config lists every problem, one line each (the config's,
// then starting's: ports, control socket, mountpoint), exits 2 if there is
// one and 0 with one line on stdout if not, and starts nothing.
TEST_F(BadConfig, CheckConfigListsEveryProblemAndStartsNothing) {
  const std::string open_key = c_.NewKeyFile("open2.key", 0644);
  std::string text;
  for (const auto& l : GoodLines()) {
    if (l.rfind("node_id", 0) == 0 || l.rfind("node_tag", 0) == 0 ||
        l.rfind("cluster_key_file", 0) == 0) {
      continue;
    }
    text += l + "\n";
  }
  text += "node_id: \"bad id\"\ncluster_key_file: " + open_key + "\nbogus: 1\n";
  const std::string bad = c_.WriteFile("check-bad.yaml", text);
  auto r = RunCommand({FEDFS_FEDFSD_PATH, "--config", bad, "--check-config"}, 15s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  std::vector<std::string> lines;
  std::istringstream in(r.err);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u) << r.err;
  const std::vector<std::string> want = {"field 'node_id'", "field 'node_tag': missing",
                                         "accessible by group or others", "unknown key 'bogus'"};
  for (const auto& w : want) {
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(),
                            [&](const std::string& l) { return l.find(w) != std::string::npos; }))
        << "want '" << w << "' in:\n" << r.err;
  }
  for (const auto& l : lines) EXPECT_EQ(l.rfind("fedfsd: config ", 0), 0u) << l;

  // A good config (that mounts nothing: /fedfs need not exist): one line on
  // stdout, exit 0, nothing left behind.
  std::string good_text = "fuse: {mount: false}\n";
  for (const auto& l : GoodLines()) good_text += l + "\n";
  const std::string good = c_.WriteFile("check-good.yaml", good_text);
  auto ok = RunCommand({FEDFS_FEDFSD_PATH, "--config", good, "--check-config"}, 15s);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.err, "");
  EXPECT_NE(ok.out.find(": ok (node n1, listen 127.0.0.1:" + std::to_string(port_)), std::string::npos)
      << ok.out;
  EXPECT_FALSE(std::filesystem::exists(c_.Socket("n1")));

  // Its listen port taken now: a problem of starting, named.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port_);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(fd, 1), 0);
  auto taken = RunCommand({FEDFS_FEDFSD_PATH, "--config", good, "--check-config"}, 15s);
  ::close(fd);
  EXPECT_EQ(taken.exit_code, 2);
  EXPECT_NE(taken.err.find("already in use"), std::string::npos) << taken.err;
  EXPECT_EQ(std::count(taken.err.begin(), taken.err.end(), '\n'), 1) << taken.err;
}

// A good config starts and stops without a warning: none of UCX's (an
// unused setting was reported at every exit) and none of the daemon's.
TEST_F(BadConfig, GoodConfigStartsAndStopsWithoutWarnings) {
  const std::string cfg = c_.WriteConfig({.id = "n1", .listen = "127.0.0.1:" + std::to_string(port_)});
  c_.Start("n1", cfg);
  ASSERT_TRUE(WaitFor([&] { return c_.AliveCount("n1") == 1; }, kNoHang)) << c_.Log("n1");
  ASSERT_EQ(c_.Stop("n1", SIGTERM), 0) << c_.Log("n1");
  const std::string log = c_.Log("n1");
  EXPECT_NE(log.find("stopped"), std::string::npos) << log;
  EXPECT_EQ(log.find("WARN"), std::string::npos) << log;
  EXPECT_EQ(log.find(" W n1 "), std::string::npos) << log;
}

TEST_F(BadConfig, ControlSocketOfARunningDaemon) {
  const std::string cfg = c_.WriteConfig({.id = "n1", .listen = "127.0.0.1:" + std::to_string(port_)});
  c_.Start("n1", cfg);
  ASSERT_TRUE(WaitFor([&] { return c_.AliveCount("n1") == 1; }, kNoHang)) << c_.Log("n1");
  // Same control socket, another port: refused, and the first keeps running.
  const std::string cfg2 = c_.WriteFile(
      "second.yaml", ReadFileText(cfg) + "\n");  // same socket path ...
  std::string text = ReadFileText(cfg);
  const std::string from = "127.0.0.1:" + std::to_string(port_);
  text.replace(text.find(from), from.size(), "127.0.0.1:" + std::to_string(FreePort()));
  c_.WriteFile("second.yaml", text);
  ExpectOneLine(RunCommand({FEDFS_FEDFSD_PATH, "--config", cfg2}, 15s), 1,
                {"in use by a running fedfsd"});
  EXPECT_EQ(c_.AliveCount("n1"), 1);
}

// Another daemon on this machine: a mountpoint inside its export root, or an
// export root on its mountpoint, is refused with one line naming it
// (fedfsd/local_daemons.h); the running daemon is not disturbed.
TEST_F(BadConfig, PathsOfAnotherDaemonOnThisMachine) {
  c_.Start("n1", c_.WriteConfig({.id = "n1", .listen = "127.0.0.1:" + std::to_string(port_)}));
  ASSERT_TRUE(WaitFor([&] { return c_.AliveCount("n1") == 1; }, kNoHang)) << c_.Log("n1");
  const ScopedEnv env("FEDFS_RUN_DIR", c_.dir() + "/run");  // where the Cluster's daemons register
  const std::string good = ReadFileText(c_.WriteConfig({.id = "n2", .listen = "127.0.0.1:" + std::to_string(FreePort())}));
  auto with_line = [&](const std::string& key, const std::string& value) {
    std::istringstream in(good);
    std::string text;
    for (std::string l; std::getline(in, l);) text += (l.rfind(key + ": ", 0) == 0 ? key + ": " + value : l) + "\n";
    return c_.WriteFile("n2-bad.yaml", text);
  };
  const std::string inside = c_.ExportRoot("n1") + "/sub";
  ASSERT_EQ(::mkdir(inside.c_str(), 0755), 0);
  ExpectOneLine(RunCommand({FEDFS_FEDFSD_PATH, "--config", with_line("mountpoint", inside)}, 15s), 1,
                {"mountpoint", "is inside the export root", "of node n1", "running on this machine"});
  ExpectOneLine(RunCommand({FEDFS_FEDFSD_PATH, "--config", with_line("export_root", c_.Mountpoint("n1"))}, 15s), 1,
                {"export_root", "is the mountpoint", "of node n1"});
  EXPECT_EQ(c_.AliveCount("n1"), 1);
  // The same config with its own paths starts (and registers) fine.
  c_.Start("n2", c_.WriteFile("n2-good.yaml", good));
  ASSERT_TRUE(WaitFor([&] { return c_.AliveCount("n2") >= 1; }, kNoHang)) << c_.Log("n2");
}

}  // namespace
}  // namespace fedfs::testing
