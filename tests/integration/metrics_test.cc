// The daemon's metrics (docs/metrics.md) on three real daemons with FUSE
// mounts (label "integration"; needs root and /dev/fuse):
//  * `fedfsctl metrics` prints the Prometheus text that promtool (Debian's
//    prometheus package) checks without a complaint, with the requests made
//    through the mount counted by operation, every member up, traffic to
//    each peer, dirmerges and the other parts' counters;
//  * a real Prometheus server, started by the test on a free port, scrapes
//    the three daemons' endpoints and answers queries with their values;
//  * the endpoint's address is refused at start when it is taken.
// Prometheus is stopped by pid whatever happens; its data is in the
// Cluster's directory.
#include <signal.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <httplib.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

// A Prometheus server for the life of this object, stopped by pid.
class Prometheus {
 public:
  Prometheus(const std::string& dir, const std::vector<std::string>& targets) : dir_(dir) {
    port_ = FreePort();
    std::ofstream cfg(dir + "/prometheus.yml");
    cfg << "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        << "scrape_configs:\n  - job_name: fedfs\n    static_configs:\n      - targets: [";
    for (size_t i = 0; i < targets.size(); ++i) cfg << (i ? ", " : "") << '"' << targets[i] << '"';
    cfg << "]\n";
    cfg.close();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open((dir + "/prometheus.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      const std::string c = "--config.file=" + dir + "/prometheus.yml";
      const std::string s = "--storage.tsdb.path=" + dir + "/prometheus-data";
      const std::string w = "--web.listen-address=127.0.0.1:" + std::to_string(port_);
      ::execlp("prometheus", "prometheus", c.c_str(), s.c_str(), w.c_str(), nullptr);
      ::_exit(127);
    }
  }
  ~Prometheus() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      ::usleep(100'000);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::string Log() const { return ReadFileText(dir_ + "/prometheus.log"); }
  bool Ready() {
    httplib::Client cli("127.0.0.1", port_);
    auto r = cli.Get("/-/ready");
    return r && r->status == 200;
  }
  // The instant vector of `query`: [{"metric":{...},"value":[t,"v"]}, ...].
  nlohmann::json Query(const std::string& query) {
    httplib::Client cli("127.0.0.1", port_);
    auto r = cli.Get("/api/v1/query", httplib::Params{{"query", query}}, httplib::Headers{});
    if (!r || r->status != 200) return nullptr;
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success") return nullptr;
    return j["data"]["result"];
  }

 private:
  std::string dir_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
};

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "needs root (FUSE mounts)";
    const std::string err = c_.StartMounted(3, &ids_);
    ASSERT_EQ(err, "") << err;
    // Requests through n1's mount: creates, a listing, stats (and their
    // directory's dirmerge at its manager).
    const std::string dir = c_.Mountpoint("n1") + "/d";
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
    for (int i = 0; i < 20; ++i) {
      std::ofstream(dir + "/f" + std::to_string(i)) << "x";
    }
    ASSERT_EQ(ListNames(c_.Mountpoint("n2") + "/d").size(), 20u);
    ASSERT_EQ(ListNames(c_.Mountpoint("n3") + "/d").size(), 20u);
  }

  std::string Text(const std::string& id) {
    auto j = c_.Ctl(id, {"metrics"});
    if (!j.is_object()) return "";
    return j.value("text", "");
  }
  std::string Address(const std::string& id) {
    auto j = c_.Ctl(id, {"metrics"});
    return j.is_object() ? j.value("address", "") : "";
  }

  Cluster c_;
  std::vector<std::string> ids_;
};

TEST_F(MetricsTest, FedfsctlMetricsIsValidPrometheusText) {
  const std::string t = Text("n1");
  ASSERT_NE(t, "");
  EXPECT_GE(MetricSample(t, "fedfs_fuse_op_duration_seconds_count{node=\"n1\",op=\"create\"}"), 20) << t;
  EXPECT_GE(MetricSample(t, "fedfs_fuse_op_duration_seconds_count{node=\"n1\",op=\"mkdir\"}"), 1);
  EXPECT_EQ(MetricSample(t, "fedfs_fuse_op_duration_seconds_count{node=\"n1\",op=\"fallocate\"}"), 0);
  EXPECT_GE(MetricSample(t, "fedfs_fuse_op_duration_seconds_bucket{node=\"n1\",op=\"create\",le=\"+Inf\"}"), 20);
  EXPECT_EQ(MetricSample(t, "fedfs_membership_alive{node=\"n1\"}"), 3);
  for (const char* m : {"n1", "n2", "n3"}) {
    EXPECT_EQ(MetricSample(t, std::string("fedfs_member_up{node=\"n1\",member=\"") + m + "\"}"), 1) << m;
  }
  EXPECT_GE(MetricSample(t, "fedfs_transport_served_total{node=\"n1\"}"), 1);
  EXPECT_NE(t.find("fedfs_transport_calls_total{node=\"n1\",peer=\"n2\",addr=\""), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE fedfs_dt_dirmerge_duration_seconds histogram"), std::string::npos);
  EXPECT_NE(t.find("# TYPE fedfs_dt_lookups_total counter"), std::string::npos);
  EXPECT_NE(t.find("# TYPE fedfs_files_handles gauge"), std::string::npos);
  EXPECT_NE(t.find("# TYPE fedfs_cache_hits_total counter"), std::string::npos);
  EXPECT_NE(t.find("# TYPE fedfs_migration_done_total counter"), std::string::npos);
  EXPECT_EQ(MetricSample(t, "fedfs_journal_recovered_total{node=\"n1\"}"), 0);
  // Dirmerges happened at some manager of the federation.
  double dirmerges = 0;
  for (const auto& id : ids_) {
    dirmerges += MetricSample(Text(id), "fedfs_dt_dirmerge_duration_seconds_count{node=\"" + id + "\"}");
  }
  EXPECT_GE(dirmerges, 1);

  // promtool's checks of the exposition format and its naming rules.
  const std::string file = c_.dir() + "/n1.prom";
  std::ofstream(file) << t;
  auto r = RunCommand({"sh", "-c", "promtool check metrics < " + file});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out + r.err, "") << "promtool complained";
}

TEST_F(MetricsTest, APrometheusServerScrapesEveryNode) {
  std::vector<std::string> targets;
  for (const auto& id : ids_) {
    targets.push_back(Address(id));
    ASSERT_NE(targets.back(), "") << id;
  }
  Prometheus p(c_.dir(), targets);
  ASSERT_TRUE(WaitFor([&] { return p.Ready(); }, 60s)) << p.Log();
  nlohmann::json alive;
  ASSERT_TRUE(WaitFor(
      [&] {
        alive = p.Query("fedfs_membership_alive");
        if (!alive.is_array() || alive.size() != 3) return false;
        for (const auto& s : alive) {
          if (s["value"][1] != "3") return false;
        }
        return true;
      },
      60s))
      << alive.dump() << "\n" << p.Log();
  std::set<std::string> nodes;
  for (const auto& s : alive) nodes.insert(s["metric"].value("node", ""));
  EXPECT_EQ(nodes, (std::set<std::string>{"n1", "n2", "n3"}));
  auto up = p.Query("sum(up{job=\"fedfs\"})");
  ASSERT_TRUE(up.is_array() && up.size() == 1) << up.dump();
  EXPECT_EQ(up[0]["value"][1], "3");
  auto creates = p.Query("fedfs_fuse_op_duration_seconds_count{node=\"n1\",op=\"create\"}");
  ASSERT_TRUE(creates.is_array() && creates.size() == 1) << creates.dump();
  EXPECT_GE(std::stod(creates[0]["value"][1].get<std::string>()), 20);
  // A histogram quantile computes (the buckets are cumulative and ordered).
  auto q = p.Query(
      "histogram_quantile(0.5, sum by (le) (fedfs_fuse_op_duration_seconds_bucket{op=\"create\"}))");
  ASSERT_TRUE(q.is_array() && q.size() == 1) << q.dump();
  const double median = std::stod(q[0]["value"][1].get<std::string>());
  EXPECT_GT(median, 0);
  EXPECT_LT(median, 10);
}

TEST_F(MetricsTest, ATakenAddressIsRefusedAtStart) {
  const std::string taken = Address("n1");
  ASSERT_NE(taken, "");
  NodeConfig n4;
  n4.id = "n4";
  n4.listen = "127.0.0.1:" + std::to_string(FreePort());
  n4.peers = {};
  n4.mount = false;
  n4.extra_yaml = "metrics: {listen: \"" + taken + "\"}\n";
  const std::string cfg = c_.WriteConfig(n4);
  auto r = RunCommand({FEDFS_FEDFSD_PATH, "--config", cfg}, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("fedfsd: metrics.listen: address " + taken + " is already in use"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace fedfs::testing
