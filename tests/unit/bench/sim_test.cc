// fedfs-bench sim (bench/sim/sim.h, report.h): a tiny sweep end to end
// through the real binary (CSV and summary.md parse and carry the expected
// columns, with and without gnuplot on PATH), reproducibility (one seed, the
// same messages and simulated latencies), and that the production VdService
// runs in the simulation (its counters move as the operations demand).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/sim/report.h"
#include "bench/sim/sim.h"
#include "cluster/ring.h"

extern char** environ;

namespace fedfs::bench {
namespace {

// A temporary directory removed when the test ends, passed or failed.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string t = std::string(tmp && *tmp ? tmp : "/tmp") + "/fedfs-sim-test-XXXXXX";
    if (mkdtemp(t.data()) != nullptr) path_ = t;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs the fedfs-bench binary with `args` and `env`; returns its exit code.
int RunBench(const std::vector<std::string>& args, std::vector<std::string> env) {
  std::vector<std::string> argv{FEDFS_BENCH_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> a, e;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  for (auto& s : env) e.push_back(s.data());
  e.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, a[0], &fa, nullptr, a.data(), e.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    std::string cell;
    while (std::getline(ls, cell, ',')) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

void CheckSweepOutput(const std::string& out) {
  auto rows = ParseCsv(Read(out + "/create-stat-shared.csv"));
  ASSERT_EQ(rows.size(), 3u);  // header + N = 4, 8
  EXPECT_EQ(rows[0], RunCsvColumns());
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), RunCsvColumns().size());
    EXPECT_EQ(rows[i][0], "create-stat-shared");
    EXPECT_EQ(rows[i][11], "120");  // ops_done
    EXPECT_EQ(rows[i][12], "0");    // errors
    EXPECT_GT(std::stod(rows[i][14]), 0);  // ops_per_sec
  }
  EXPECT_EQ(rows[1][1], "4");
  EXPECT_EQ(rows[2][1], "8");
  auto dm = ParseCsv(Read(out + "/dirmerge.csv"));
  ASSERT_EQ(dm.size(), 3u);
  EXPECT_EQ(dm[0], DirmergeCsvColumns());
  EXPECT_EQ(dm[1][3], "3");  // kNsListLocal to every other node
  EXPECT_EQ(dm[2][3], "7");
  const std::string md = Read(out + "/summary.md");
  EXPECT_NE(md.find("## Latency and throughput vs N"), std::string::npos);
  EXPECT_NE(md.find("## Dirmerge cost vs N"), std::string::npos);
  EXPECT_NE(md.find("## Manager load balance vs N"), std::string::npos);
  EXPECT_NE(md.find("## Directory-table hit ratio vs capacity"), std::string::npos);
  EXPECT_NE(md.find("max/mean"), std::string::npos);
}

TEST(BenchSim, TinySweepEndToEnd) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::vector<std::string> args = {"sim", "--nodes", "4,8", "--ops", "120", "--workload",
                                         "create-stat-shared", "--seed", "3", "--out",
                                         dir.path() + "/a"};
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  ASSERT_EQ(RunBench(args, env), 0);
  CheckSweepOutput(dir.path() + "/a");
  if (HaveGnuplot()) {
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/a/dirmerge_vs_n.png"));
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/a/latency_vs_n.png"));
  }

  // Without gnuplot on PATH: CSV and Markdown all the same, plots named missing.
  std::vector<std::string> bare = {"PATH=" + dir.path() + "/nothing-here"};
  std::vector<std::string> args2 = args;
  args2.back() = dir.path() + "/b";
  ASSERT_EQ(RunBench(args2, bare), 0);
  CheckSweepOutput(dir.path() + "/b");
  EXPECT_NE(Read(dir.path() + "/b/summary.md").find("gnuplot not found"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/b/dirmerge_vs_n.png"));
  // The same seed wrote the same CSV.
  EXPECT_EQ(Read(dir.path() + "/a/create-stat-shared.csv"),
            Read(dir.path() + "/b/create-stat-shared.csv"));
}

SimOptions Small(const std::string& workload) {
  SimOptions o;
  o.nodes = 16;
  o.ops = 400;
  o.workload = workload;
  o.model = "tcp-lan";  // jitter from the seeded RNG
  o.concurrency = 2;
  o.seed = 11;
  return o;
}

TEST(BenchSim, SameSeedSameMessagesAndLatencies) {
  for (const char* w : {"create-stat-private", "hot-dir", "churn"}) {
    SCOPED_TRACE(w);
    auto a = RunSim(Small(w));
    auto b = RunSim(Small(w));
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->messages, b->messages);
    EXPECT_EQ(a->bytes, b->bytes);
    EXPECT_EQ(a->requests, b->requests);
    EXPECT_EQ(a->sim_seconds, b->sim_seconds);
    ASSERT_EQ(a->per_op.size(), b->per_op.size());
    for (const auto& [kind, s] : a->per_op) {
      EXPECT_EQ(s.count, b->per_op[kind].count) << kind;
      EXPECT_EQ(s.p50_us, b->per_op[kind].p50_us) << kind;
      EXPECT_EQ(s.p99_us, b->per_op[kind].p99_us) << kind;
      EXPECT_EQ(s.mean_us, b->per_op[kind].mean_us) << kind;
    }
    EXPECT_EQ(a->gets_served, b->gets_served);
    EXPECT_EQ(a->dirmerges, b->dirmerges);
  }
  // Another seed draws other jitter.
  SimOptions o = Small("create-stat-private");
  auto a = RunSim(o);
  o.seed = 12;
  auto c = RunSim(o);
  ASSERT_TRUE(a && c);
  EXPECT_NE(a->per_op["create"].mean_us, c->per_op["create"].mean_us);
}

// The simulation runs the daemon's code: the VdService counters move exactly
// as the facade's operations demand. create-stat-shared with parent
// resolution and no directory table: each node's client looks /shared up
// once (Lookup of "shared" in /: a Get of / and, for the attributes of a
// directory entry, a Get of /shared, then a stat of /shared at its first
// holder n0000), then every operation is one VdService::Get of /shared
// (VfsImpl::Create or Lookup), every create one claim and one update of
// /shared at its manager (only the update changes the VD). / and /shared are
// built once each (two dirmerges), and every Get from a node other than the
// manager is one kNsVdGet served there.
TEST(BenchSim, ProductionVdServiceCountersMove) {
  SimOptions o;
  o.nodes = 8;
  o.ops = 200;
  o.workload = "create-stat-shared";
  o.resolve = "parent";
  o.dt_capacity = 0;
  auto r = RunSim(o);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->errors, 0u);
  const uint64_t creates = r->per_op["create"].count;
  EXPECT_EQ(creates + r->per_op["stat"].count, 200u);
  EXPECT_GE(creates, 100u);
  EXPECT_EQ(r->dirmerges, 2u);  // / and /shared
  EXPECT_EQ(r->updates_applied, creates);
  // Nothing but VD traffic, and the 7 other nodes' one stat of /shared at
  // n0000 (each the first call of a new file session: one Hello).
  EXPECT_EQ(r->requests["vd_update"] + r->requests["vd_get"] + r->requests["list_local"] +
                r->requests["fs_hello"] + r->requests["fs_meta"],
            r->requests["vd_update"] + r->requests["vd_get"] + 14u + 7u + 7u);
  EXPECT_EQ(r->requests.size(), 5u);
  // A claim and an update per create from a node other than M(/shared).
  EXPECT_EQ(r->requests["vd_update"] % 2, 0u);
  EXPECT_LE(r->requests["vd_update"], 2 * creates);
  // Every operation's Get served by M(/shared), plus each node's walk.
  EXPECT_EQ(r->gets_served, 200u + 2u * 8u);
  EXPECT_GT(r->requests["vd_get"], 100u);
  EXPECT_LT(r->requests["vd_get"], 216u);
  EXPECT_EQ(r->requests["list_local"], 14u);  // two dirmerges: every other node
  // The manager of /shared did all but the walks' work on /.
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(NodeId(i));
  const daemon::Ring ring(ids, o.vnodes);
  const bool same = ring.Owner("/") == ring.Owner("/shared");
  EXPECT_EQ(r->mgr_max, 200u + 8u + creates + 1u + (same ? 9u : 0u));
  EXPECT_DOUBLE_EQ(r->mgr_mean * 8, static_cast<double>(216u + creates + 2u));
}

TEST(BenchSim, DirectoryTableMeasuredWhenEnabled) {
  SimOptions o;
  o.nodes = 16;
  o.ops = 2000;
  o.workload = "zipf-lookup";
  o.tree_fanout = 4;
  o.tree_depth = 3;
  o.dt_capacity = 0;
  auto off = RunSim(o);
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->dt_measured);
  o.dt_capacity = 16;
  auto on = RunSim(o);
  ASSERT_TRUE(on);
  EXPECT_TRUE(on->dt_measured);
  EXPECT_GT(on->dt_hits, 0u);
  EXPECT_GT(on->dt_hit_ratio, 0.0);
  EXPECT_LT(on->msgs_per_op, off->msgs_per_op);  // hits send nothing
}

// The directory table is on by default (the daemon's 4096 entries).
TEST(BenchSim, DirectoryTableOnByDefault) {
  EXPECT_EQ(SimOptions{}.dt_capacity, 4096u);
  EXPECT_EQ(SimOptions{}.vnodes, 256u);
}

// A warm-up absorbs the first touches: the measured phase of
// create-stat-private has no dirmerge, no VD get and no new session left,
// and a create is one update. What is left is the facade's steady state:
// a create is a claim and an update at M(dir) (when remote, 2 messages
// each); with resolve = walk every operation also looks up /p, whose
// attributes come from its first holder n0000 (one kFsMeta, 2 messages,
// from every other node); the client's own directory and files are local.
TEST(BenchSim, WarmupLeavesTheSteadyState) {
  SimOptions o;
  o.nodes = 16;
  o.workload = "create-stat-private";
  o.ops = 400;
  auto cold = RunSim(o);
  o.warmup_ops = 4 * 16;
  auto warm = RunSim(o);
  ASSERT_TRUE(cold && warm);
  EXPECT_EQ(cold->warmup_done, 0u);
  EXPECT_EQ(warm->warmup_done, 64u);
  EXPECT_EQ(warm->ops_done, 400u);
  EXPECT_EQ(warm->errors, 0u);
  EXPECT_GT(cold->dirmerges, 0u);
  EXPECT_EQ(warm->dirmerges, 0u);
  EXPECT_GT(warm->warmup_dirmerges, 0u);
  EXPECT_EQ(warm->requests.count("list_local"), 0u);
  EXPECT_LT(warm->msgs_per_op, cold->msgs_per_op);
  // Every create is one update; with the DT no lookup leaves its node.
  const uint64_t creates = warm->per_op["create"].count;
  EXPECT_EQ(warm->updates_applied, creates);
  EXPECT_EQ(warm->dt_misses, 0u);
  EXPECT_EQ(warm->requests.count("vd_get"), 0u);
  EXPECT_EQ(warm->requests.count("fs_hello"), 0u);
  // Every message is one of these requests or its reply.
  EXPECT_EQ(warm->requests.size(), 2u);
  const uint64_t updates = warm->requests["vd_update"], metas = warm->requests["fs_meta"];
  EXPECT_EQ(warm->messages, 2 * (updates + metas));
  EXPECT_LE(updates, 2 * creates);
  EXPECT_LE(metas, warm->ops_done);
  EXPECT_LE(warm->msgs_per_op, 4.0 + 1e-9);
  // Resolving the parent once instead: only the creates' claims and updates.
  o.resolve = "parent";
  auto parent = RunSim(o);
  ASSERT_TRUE(parent);
  EXPECT_EQ(parent->errors, 0u);
  EXPECT_EQ(parent->requests.size(), 1u);
  EXPECT_EQ(parent->messages, 2 * parent->requests["vd_update"]);
  EXPECT_LE(parent->requests["vd_update"], 2 * parent->per_op["create"].count);
  EXPECT_LE(parent->msgs_per_op, 2.0 + 1e-9);
}

// Manager load counts gets served, updates applied and dirmerges; more
// directories per node spread it (balls in bins), more vnodes even the ring.
TEST(BenchSim, ManagerLoadAndPlacement) {
  SimOptions o;
  o.nodes = 8;
  o.workload = "create-stat-private";
  o.ops = 200;
  auto r = RunSim(o);
  ASSERT_TRUE(r);
  EXPECT_GT(r->mgr_max, 0u);
  EXPECT_NEAR(r->mgr_mean * 8, static_cast<double>(r->gets_served + r->updates_applied + r->dirmerges),
              1e-6);
  EXPECT_GE(r->ring_imbalance, 1.0);
  const PlacementResult few = MeasurePlacement(1024, 256, 1);
  const PlacementResult many = MeasurePlacement(1024, 256, 256);
  EXPECT_EQ(few.directories, 1024u);
  EXPECT_EQ(many.directories, 1024u * 256u);
  EXPECT_GT(few.dirs_imbalance, many.dirs_imbalance);
  EXPECT_LT(MeasurePlacement(1024, 256, 1).ring_imbalance,
            MeasurePlacement(1024, 16, 1).ring_imbalance);
}

// A scripted sequence (the simulator half of
// tests/integration/bench_counters_test.cc): one dirmerge at M(dir), one
// update per create there, DT hits at a non-manager client.
TEST(BenchSim, ScriptMovesVdServiceCounters) {
  SimOptions o;
  o.nodes = 3;
  std::vector<ScriptOp> ops;
  for (int f = 0; f < 5; ++f) ops.push_back({"create", 1, "/s/f" + std::to_string(f)});
  for (int i = 0; i < 5; ++i) ops.push_back({"stat", 1, "/s/f0"});
  auto r = RunScript(o, {"/s"}, ops);
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(r->ids.size(), 3u);
  EXPECT_EQ(r->ids[0], NodeId(0));
  for (bool ok : r->ok) EXPECT_TRUE(ok);
  uint64_t updates = 0, dirmerges = 0;
  for (size_t i = 0; i < 3; ++i) {
    updates += r->after[i].updates_applied - r->before[i].updates_applied;
    dirmerges += r->after[i].dirmerges - r->before[i].dirmerges;
  }
  EXPECT_EQ(updates, 5u);
  EXPECT_GE(dirmerges, 1u);  // /s, and / when it was not resident
  EXPECT_LE(dirmerges, 2u);
  // Per operation: the walk's Lookup of "s" in / gets VD(/) and, for the
  // directory's attributes, VD(/s); then the file's lookup gets VD(/s). A
  // create's check looks at this node's copy of VD(/s) instead
  // (VdService::Peek, no lookup counted), but for the last two creates: after
  // three, /s is lent to this node (docs/namespace.md, "Leases"), which then
  // reads its own (counted).
  EXPECT_EQ(r->after[1].lookups - r->before[1].lookups, 27u);
  EXPECT_FALSE(RunScript(o, {}, {{"mkdir", 0, "/x"}}));
}

TEST(BenchSim, DirmergeCostGrowsWithN) {
  SimOptions o;
  o.nodes = 4;
  auto a = MeasureDirmerge(o);
  o.nodes = 32;
  auto b = MeasureDirmerge(o);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->list_requests, 3u);
  EXPECT_EQ(b->list_requests, 31u);
  EXPECT_EQ(b->entries, 32u * 4u);
  EXPECT_GT(b->messages, a->messages);
}

TEST(BenchSim, BadOptionsRefused) {
  SimOptions o;
  o.workload = "nope";
  EXPECT_EQ(RunSim(o).error().code, EINVAL);
  o = SimOptions{};
  o.model = "carrier-pigeon";
  EXPECT_EQ(RunSim(o).error().code, EINVAL);
  o = SimOptions{};
  o.faults = "drop=2";
  EXPECT_EQ(RunSim(o).error().code, EINVAL);
  o.faults = "delay=0.1:1ms";  // the link model's jitter is the simulator's
  EXPECT_EQ(RunSim(o).error().code, EINVAL);
}

// Faults in the simulation: every node's transport loses requests and
// replies, breaks connections and duplicates requests; every operation
// still completes (answered, or failed with an error the run counts), the
// faults show in the figures, and one seed gives one run.
TEST(BenchSim, InjectedFaultsAreSurvivedAndReproducible) {
  SimOptions o = Small("create-stat-shared");
  o.faults = "drop=0.01,disconnect=0.002,duplicate=0.02,seed=3";
  auto a = RunSim(o);
  ASSERT_TRUE(a) << a.error().ToString();
  EXPECT_EQ(a->ops_done, o.ops);
  EXPECT_GT(a->faults_injected, 10u);
  EXPECT_LT(a->errors, o.ops / 10) << "most operations outlive the faults (resent)";
  auto b = RunSim(o);
  ASSERT_TRUE(b);
  EXPECT_EQ(a->messages, b->messages);
  EXPECT_EQ(a->faults_injected, b->faults_injected);
  EXPECT_EQ(a->errors, b->errors);
  SimOptions none = Small("create-stat-shared");
  auto c = RunSim(none);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->faults_injected, 0u);
  EXPECT_EQ(c->errors, 0u);
}

}  // namespace
}  // namespace fedfs::bench
