// The simulator runs the production code path (label "integration"): the
// same small sequence of operations -- a directory present in every export
// root, five files created in it from one node, then five stats of one of
// them from that node -- runs once through the FUSE mounts of a real 3-daemon
// federation and once through fedfs-bench's simulator (bench/sim/sim.h,
// RunScript), and the same VdService counters move the same way in both:
// one dirmerge of the directory at its manager, one update applied per
// create (there, then at the node it lends the directory to), directory-table hits (and few requests) at the non-manager that
// repeats its lookups. The daemons are named like the simulator's nodes and
// use the same ring (256 vnodes), so both agree on every manager.
//
// Needs root and /dev/fuse (as mount_test). The Cluster stops the daemons by
// pid, unmounts and removes its directory whatever happens.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench/sim/sim.h"
#include "cluster/ring.h"
#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int kNodes = 3;
constexpr uint32_t kVnodes = 256;  // fedfsd's ring.vnodes default
constexpr int kCreates = 5;
constexpr int kStats = 5;

// The counters both worlds report, for one node.
struct Counters {
  uint64_t gets_served = 0, dirmerges = 0, updates_applied = 0, lookups = 0, gets_sent = 0,
           hits = 0, misses = 0;
};

Counters Delta(const Counters& a, const Counters& b) {
  return {b.gets_served - a.gets_served, b.dirmerges - a.dirmerges,
          b.updates_applied - a.updates_applied, b.lookups - a.lookups,
          b.gets_sent - a.gets_sent, b.hits - a.hits, b.misses - a.misses};
}

Counters FromStats(const ns::VdService::Stats& s) {
  return {s.gets_served, s.dirmerges, s.updates_applied, s.lookups, s.gets_sent, s.dt.hits,
          s.dt.misses};
}

// fedfsctl dt --json of one daemon (the "dt" control command).
Counters FromDaemon(const Cluster& c, const std::string& id) {
  CommandResult r = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c.Socket(id), "dt", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << r.out;
  if (!j.is_object()) return {};
  auto u = [](const Json& o, const char* k) { return o.value(k, uint64_t{0}); };
  Counters out{u(j, "gets_served"), u(j, "dirmerges"), u(j, "updates_applied"), u(j, "lookups"),
               u(j, "gets_sent")};
  EXPECT_TRUE(j["table"].is_object()) << "the daemon runs without a directory table";
  if (j["table"].is_object()) {
    out.hits = u(j["table"], "hits");
    out.misses = u(j["table"], "misses");
  }
  return out;
}

// The checks, applied to both worlds. `deltas` by node index; `mgr` is the
// index of M(dir), `client` the node that ran the operations.
void CheckSameCodePath(const char* world, const std::vector<Counters>& deltas, int mgr,
                       int client) {
  SCOPED_TRACE(world);
  // One dirmerge of the new directory, at its manager (no rebuilds).
  EXPECT_EQ(deltas[static_cast<size_t>(mgr)].dirmerges, 1u);
  // One update applied per create: at M(dir) until it lends the directory to
  // the client (after 3 in a row, the default directory_table.lend_after;
  // docs/namespace.md "Leases"), then at the client.
  constexpr uint64_t kLendAfter = 3;
  static_assert(kCreates > static_cast<int>(kLendAfter));
  EXPECT_EQ(deltas[static_cast<size_t>(mgr)].updates_applied, kLendAfter);
  EXPECT_EQ(deltas[static_cast<size_t>(client)].updates_applied, kCreates - kLendAfter);
  uint64_t updates = 0;
  for (const auto& d : deltas) updates += d.updates_applied;
  EXPECT_EQ(updates, static_cast<uint64_t>(kCreates));
  // The client is not M(dir): its repeated lookups hit its directory table;
  // only the first lookup of each directory asked a manager.
  const Counters& c = deltas[static_cast<size_t>(client)];
  EXPECT_GE(c.hits, static_cast<uint64_t>(kStats));
  EXPECT_GE(c.misses, 1u);
  EXPECT_GE(c.gets_sent, 1u);
  EXPECT_LT(c.gets_sent, c.lookups / 2) << "lookups " << c.lookups;
  EXPECT_EQ(c.gets_sent, c.misses);
  // M(dir) served the client's get (the miss) as a manager.
  EXPECT_GE(deltas[static_cast<size_t>(mgr)].gets_served, 1u);
}

TEST(BenchCounters, SimulatorAndDaemonsMoveTheSameCounters) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  std::vector<std::string> ids;
  for (int i = 0; i < kNodes; ++i) ids.push_back(bench::NodeId(i));
  // A directory whose manager is neither M("/") nor the client, so the
  // client's lookups of both are remote (DT) lookups.
  const daemon::Ring ring(ids, kVnodes);
  std::string dir;
  int mgr = -1, client = -1;
  for (int k = 0; dir.empty() && k < 1000; ++k) {
    const std::string d = "/bench" + std::to_string(k);
    const std::string& m = ring.Owner(d);
    if (m == ring.Owner("/")) continue;
    dir = d;
    for (int i = 0; i < kNodes; ++i) {
      if (ids[static_cast<size_t>(i)] == m) mgr = i;
      else if (ids[static_cast<size_t>(i)] != ring.Owner("/")) client = i;
    }
  }
  ASSERT_FALSE(dir.empty());
  ASSERT_GE(mgr, 0);
  ASSERT_GE(client, 0);

  std::vector<bench::ScriptOp> ops;
  for (int f = 0; f < kCreates; ++f) ops.push_back({"create", client, dir + "/f" + std::to_string(f)});
  for (int s = 0; s < kStats; ++s) ops.push_back({"stat", client, dir + "/f0"});

  // The simulator.
  bench::SimOptions o;
  o.nodes = kNodes;
  o.vnodes = kVnodes;
  o.dt_capacity = 4096;
  auto sim = bench::RunScript(o, {dir}, ops);
  ASSERT_TRUE(sim) << sim.error().ToString();
  ASSERT_EQ(sim->ids, ids);
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_TRUE(sim->ok[i]) << ops[i].kind << " " << ops[i].path;
  std::vector<Counters> sim_deltas;
  for (int i = 0; i < kNodes; ++i) {
    sim_deltas.push_back(Delta(FromStats(sim->before[static_cast<size_t>(i)]),
                               FromStats(sim->after[static_cast<size_t>(i)])));
  }
  CheckSameCodePath("simulator", sim_deltas, mgr, client);

  // Real daemons with mounts, the directory put into every export root.
  Cluster c;
  std::vector<std::string> addrs, configs;
  for (int i = 0; i < kNodes; ++i) addrs.push_back("127.0.0.1:" + std::to_string(FreePort()));
  for (int i = 0; i < kNodes; ++i) {
    std::vector<std::string> peers(addrs.begin(), addrs.begin() + i);
    configs.push_back(c.WriteConfig({.id = ids[static_cast<size_t>(i)],
                                     .listen = addrs[static_cast<size_t>(i)],
                                     .peers = peers,
                                     .extra_yaml = "ring:\n  vnodes: 256\n"
                                                   "directory_table:\n  entries: 4096\n"}));
    fs::create_directories(c.ExportRoot(ids[static_cast<size_t>(i)]) + dir);
  }
  for (int i = 0; i < kNodes; ++i) c.Start(ids[static_cast<size_t>(i)], configs[static_cast<size_t>(i)]);
  for (const auto& id : ids) {
    ASSERT_TRUE(WaitFor([&] { return c.SeesAlive(id, ids); }, kNoHang)) << id << ":\n" << c.Log(id);
    ASSERT_TRUE(WaitFor([&] { return IsMounted(c.Mountpoint(id)); }, kNoHang)) << id << ":\n" << c.Log(id);
  }
  std::vector<Counters> before;
  for (const auto& id : ids) before.push_back(FromDaemon(c, id));
  const std::string mnt = c.Mountpoint(ids[static_cast<size_t>(client)]);
  for (const auto& op : ops) {
    const std::string p = mnt + op.path;
    if (op.kind == "create") {
      const int fd = ::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
      EXPECT_GE(fd, 0) << p << ": " << std::strerror(errno);
      if (fd >= 0) ::close(fd);
    } else {
      struct stat st {};
      EXPECT_EQ(::stat(p.c_str(), &st), 0) << p << ": " << std::strerror(errno);
    }
  }
  std::vector<Counters> daemon_deltas;
  for (int i = 0; i < kNodes; ++i) {
    daemon_deltas.push_back(Delta(before[static_cast<size_t>(i)], FromDaemon(c, ids[static_cast<size_t>(i)])));
  }
  CheckSameCodePath("daemons", daemon_deltas, mgr, client);
  for (int i = 0; i < kNodes; ++i) {
    const Counters& s = sim_deltas[static_cast<size_t>(i)];
    const Counters& d = daemon_deltas[static_cast<size_t>(i)];
    // Printed for the record: the kernel adds lookups of its own (getattr,
    // open), so lookups/hits differ; dirmerges and updates match exactly.
    std::printf("%s: sim dirmerges %lu updates %lu lookups %lu gets_sent %lu hits %lu | "
                "daemon dirmerges %lu updates %lu lookups %lu gets_sent %lu hits %lu\n",
                ids[static_cast<size_t>(i)].c_str(), s.dirmerges, s.updates_applied, s.lookups,
                s.gets_sent, s.hits, d.dirmerges, d.updates_applied, d.lookups, d.gets_sent, d.hits);
    EXPECT_EQ(s.dirmerges, d.dirmerges) << ids[static_cast<size_t>(i)];
    EXPECT_EQ(s.updates_applied, d.updates_applied) << ids[static_cast<size_t>(i)];
  }
}

}  // namespace
}  // namespace fedfs::testing
