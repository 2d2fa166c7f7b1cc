// CSV, Markdown and gnuplot output of fedfs-bench (bench/sim/report.h).
#include "bench/sim/report.h"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

extern char** environ;

namespace fedfs::bench {

namespace {

std::string F(double v) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.3f", v);
  return b;
}

std::string F9(double v) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.9f", v);
  return b;
}

const OpStats* Op(const RunResult& r, const std::string& kind) {
  auto it = r.per_op.find(kind);
  return it == r.per_op.end() ? nullptr : &it->second;
}

uint64_t Req(const RunResult& r, const std::string& m) {
  auto it = r.requests.find(m);
  return it == r.requests.end() ? 0 : it->second;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) return Err(errno ? errno : EIO, "cannot write " + path);
  f << text;
  f.close();
  if (!f) return Err(EIO, "write failed: " + path);
  return Ok();
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

std::vector<std::string> RunRow(const RunResult& r) {
  const SimOptions& o = r.options;
  std::vector<std::string> v = {
      o.workload, std::to_string(o.nodes), o.model, std::to_string(o.seed),
      std::to_string(o.ops), std::to_string(o.clients > 0 ? o.clients : o.nodes),
      std::to_string(o.concurrency), o.resolve, o.placement, std::to_string(o.dt_capacity),
      std::to_string(r.directories), std::to_string(r.ops_done), std::to_string(r.errors),
      F9(r.sim_seconds), F(r.ops_per_sec)};
  for (const char* k : {"create", "stat", "unlink", "lookup"}) {
    const OpStats* s = Op(r, k);
    v.push_back(std::to_string(s ? s->count : 0));
    v.push_back(F(s ? s->p50_us : 0));
    v.push_back(F(s ? s->p99_us : 0));
  }
  for (auto x : {std::to_string(r.messages), std::to_string(r.bytes), F(r.msgs_per_op),
                 F(r.bytes_per_op), std::to_string(Req(r, "vd_get")),
                 std::to_string(Req(r, "vd_update")), std::to_string(Req(r, "list_local")),
                 std::to_string(Req(r, "fs_meta")), std::to_string(r.gets_served),
                 std::to_string(r.dirmerges), std::to_string(r.updates_applied),
                 std::to_string(r.mgr_max), F(r.mgr_mean), F(r.mgr_imbalance),
                 std::to_string(r.dt_measured ? 1 : 0), std::to_string(r.dt_hits),
                 std::to_string(r.dt_misses), F(r.dt_hit_ratio), std::to_string(r.invalidations),
                 std::to_string(r.changes), F(r.invalidations_per_change),
                 std::to_string(o.vnodes), std::to_string(o.dirs_per_client),
                 std::to_string(o.warmup_ops), F(r.ring_imbalance),
                 std::to_string(r.warmup_messages), std::to_string(r.warmup_dirmerges),
                 std::to_string(o.dir_entries)}) {
    v.push_back(x);
  }
  const OpStats* rd = Op(r, "read");
  for (auto x : {std::to_string(rd ? rd->count : 0), F(rd ? rd->p50_us : 0),
                 F(rd ? rd->p99_us : 0), F(rd ? rd->mean_us : 0), std::to_string(o.cache_bytes),
                 std::to_string(o.cache_block), std::to_string(o.cache_coop ? 1 : 0),
                 std::to_string(o.read_files), std::to_string(o.file_bytes),
                 std::to_string(o.read_bytes), F(o.zipf_s), F(o.disk_read_us),
                 std::to_string(r.cache_hits), std::to_string(r.cache_misses),
                 std::to_string(r.peer_hits), std::to_string(r.tag_misses),
                 std::to_string(r.disk_reads), std::to_string(r.disk_read_bytes),
                 std::to_string(r.bad_reads), std::to_string(o.cache_forward),
                 std::to_string(r.forwarded), std::to_string(o.write_percent),
                 std::to_string(Op(r, "write") ? Op(r, "write")->count : 0),
                 F(Op(r, "write") ? Op(r, "write")->p50_us : 0),
                 F(Op(r, "write") ? Op(r, "write")->p99_us : 0)}) {
    v.push_back(x);
  }
  return v;
}

// Runs gnuplot on `script`; Ok iff it exited 0.
Status RunGnuplot(const std::string& script) {
  pid_t pid = 0;
  std::string prog = "gnuplot";
  char* argv[] = {prog.data(), const_cast<char*>(script.c_str()), nullptr};
  int rc = posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv, environ);
  if (rc != 0) return Err(rc, "cannot start gnuplot");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Err(errno, "waitpid gnuplot");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Err(EIO, "gnuplot failed on " + script);
  }
  return Ok();
}

uint64_t RpcMessages(const std::map<std::string, uint64_t>& requests) {
  uint64_t n = 0;
  for (const auto& [m, c] : requests) n += 2 * c;  // request + reply
  return n;
}

// Messages per operation by cause, for the scaling runs.
std::string MessagesSection(const std::vector<RunResult>& rows) {
  std::ostringstream md;
  md << "## Messages per operation\n\n"
        "Every packet counts: a request and its reply are 2 messages, a new connection costs 4 "
        "(hello, challenge, proof, result of the mutual authentication), a one-sided "
        "invalidation 2. Every operation runs through the node's facade as FUSE requests do "
        "(a Lookup of each directory of the path with resolve `walk`, then the operation). In "
        "the steady state a create is: the VD reads of `/`, `/p` and the parent (hits in the "
        "directory table: 0 messages, or a local read when this node is their manager), the "
        "attributes of each directory looked up from its first holder (for `/p`, held by every "
        "node, that is n0000: one kFsMeta, 2, from every other node), the name claimed and its "
        "entry added at the manager of the parent in one kNsVdUpdate (kAddNew), and the claim "
        "ended by a kNsVdUpdate (kRelease) not waited for once the file is made (4 in all, or 0 "
        "when this node manages it or holds its lease: a private directory is lent to its "
        "client after its third change in a row, so its changes then cost no message), the "
        "file created on this node "
        "(placement `local`: 0 messages) and the invalidation round (0 in a private "
        "directory). A stat is the same lookups, then the file's lookup and getattr on this "
        "node: 2 (the stat of `/p`). In a directory that many nodes change, a lookup in a copy "
        "gone stale asks its manager for that one name (kNsVdGetName, 2), and a node whose copy "
        "keeps going stale is recorded for names only: the creation of new names bumps nothing "
        "there, and the names that exist (the stat of a file just created, the directory's "
        "own summary) are answered from its table (docs/namespace.md, \"Names in a busy "
        "directory\").\n\n"
        "The first touch of a directory costs what the steady state does not: a DT miss "
        "(kNsVdGet, 2), a dirmerge at its manager (kNsListLocal to each of the N - 1 other "
        "nodes: 2 (N - 1)) and, the first time the manager talks to a node, a connection (4). "
        "The warm-up phase absorbs those; its totals are in the second table. A run without a "
        "warm-up counts them in its measured phase (the list_local and connection columns "
        "below).\n\n";
  md << "Measured phase, messages per operation:\n\n"
        "| N | total | vd_get | vd_get_name | vd_update | list_local (dirmerge) | "
        "fs_meta (remote file op) | connections + one-sided |\n"
        "|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const double ops = static_cast<double>(std::max<uint64_t>(1, r.ops_done));
    auto per = [&](const char* m) { return F(2.0 * static_cast<double>(Req(r, m)) / ops); };
    const uint64_t rpc = RpcMessages(r.requests);
    const double other =
        r.messages > rpc ? static_cast<double>(r.messages - rpc) / ops : 0.0;
    md << "| " << r.options.nodes << " | " << F(r.msgs_per_op) << " | " << per("vd_get") << " | "
       << per("vd_get_name") << " | " << per("vd_update") << " | " << per("list_local") << " | "
       << per("fs_meta") << " | " << F(other) << " |\n";
  }
  bool any_warmup = false;
  for (const auto& r : rows) any_warmup = any_warmup || r.warmup_done > 0;
  if (any_warmup) {
    md << "\nWarm-up phase (first touches), totals:\n\n"
          "| N | ops | messages | dirmerges | kNsListLocal | messages per dirmerge (list) | "
          "connections + one-sided |\n|---|---|---|---|---|---|---|\n";
    for (const auto& r : rows) {
      auto it = r.warmup_requests.find("list_local");
      const uint64_t list = it == r.warmup_requests.end() ? 0 : it->second;
      const uint64_t rpc = RpcMessages(r.warmup_requests);
      md << "| " << r.options.nodes << " | " << r.warmup_done << " | " << r.warmup_messages
         << " | " << r.warmup_dirmerges << " | " << list << " | "
         << F(r.warmup_dirmerges ? 2.0 * static_cast<double>(list) /
                                       static_cast<double>(r.warmup_dirmerges)
                                 : 0.0)
         << " | " << (r.warmup_messages > rpc ? r.warmup_messages - rpc : 0) << " |\n";
    }
  }
  return md.str();
}

constexpr const char* kTerm =
    "set terminal pngcairo size 900,560 noenhanced font 'sans,11'\n"
    "set grid\nset key top left\n";

}  // namespace

const std::vector<std::string>& RunCsvColumns() {
  static const std::vector<std::string> c = {
      "workload", "nodes", "model", "seed", "ops", "clients", "concurrency", "resolve",
      "placement", "dt_capacity", "directories", "ops_done", "errors", "sim_seconds",
      "ops_per_sec", "create_count", "create_p50_us", "create_p99_us", "stat_count",
      "stat_p50_us", "stat_p99_us", "unlink_count", "unlink_p50_us", "unlink_p99_us",
      "lookup_count", "lookup_p50_us", "lookup_p99_us", "messages", "bytes", "msgs_per_op",
      "bytes_per_op", "vd_get_requests", "vd_update_requests", "list_local_requests",
      "fs_meta_requests", "gets_served", "dirmerges", "updates_applied", "mgr_max", "mgr_mean",
      "mgr_imbalance", "dt_measured", "dt_hits", "dt_misses", "dt_hit_ratio", "invalidations",
      "changes", "invalidations_per_change", "vnodes", "dirs_per_client", "warmup_ops",
      "ring_imbalance", "warmup_messages", "warmup_dirmerges", "dir_entries", "read_count",
      "read_p50_us", "read_p99_us", "read_mean_us", "cache_bytes", "cache_block", "cache_coop",
      "read_files", "file_bytes", "read_bytes", "zipf_s", "disk_read_us", "cache_hits",
      "cache_misses", "peer_hits", "tag_misses", "disk_reads", "disk_read_bytes", "bad_reads",
      "cache_forward", "forwarded", "write_percent", "write_count", "write_p50_us",
      "write_p99_us"};
  return c;
}

const std::vector<std::string>& PlacementCsvColumns() {
  static const std::vector<std::string> c = {"nodes",    "vnodes",    "dirs_per_client",
                                             "directories", "max_dirs", "mean_dirs",
                                             "dirs_imbalance", "ring_imbalance"};
  return c;
}

Status WritePlacementCsv(const std::string& path, const std::vector<PlacementResult>& rows) {
  std::string text = Join(PlacementCsvColumns(), ",") + "\n";
  for (const auto& p : rows) {
    text += std::to_string(p.nodes) + "," + std::to_string(p.vnodes) + "," +
            std::to_string(p.dirs_per_client) + "," + std::to_string(p.directories) + "," +
            std::to_string(p.max_dirs) + "," + F(p.mean_dirs) + "," + F(p.dirs_imbalance) + "," +
            F(p.ring_imbalance) + "\n";
  }
  return WriteFile(path, text);
}

const std::vector<std::string>& DirmergeCsvColumns() {
  static const std::vector<std::string> c = {"nodes", "messages", "bytes", "list_requests",
                                             "sim_us", "entries"};
  return c;
}

Status WriteRunsCsv(const std::string& path, const std::vector<RunResult>& rows) {
  std::string text = Join(RunCsvColumns(), ",") + "\n";
  for (const auto& r : rows) text += Join(RunRow(r), ",") + "\n";
  return WriteFile(path, text);
}

Status WriteDirmergeCsv(const std::string& path, const std::vector<DirmergeResult>& rows) {
  std::string text = Join(DirmergeCsvColumns(), ",") + "\n";
  for (const auto& d : rows) {
    text += std::to_string(d.nodes) + "," + std::to_string(d.messages) + "," +
            std::to_string(d.bytes) + "," + std::to_string(d.list_requests) + "," + F(d.sim_us) +
            "," + std::to_string(d.entries) + "\n";
  }
  return WriteFile(path, text);
}

bool HaveGnuplot() {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (!dir.empty() && access((dir + "/gnuplot").c_str(), X_OK) == 0) return true;
  }
  return false;
}

Status WriteReport(const std::string& out, const ReportData& d, std::string* plots_note) {
  std::vector<std::pair<std::string, std::string>> plots;  // name -> gnuplot script
  std::ostringstream md;
  md << "# fedfs-bench: namespace scalability\n\n";
  md << "Produced by `" << d.command << "`. Every figure is simulated time on the fake "
        "network's clock (one process, every node built by node::Node as fedfsd builds "
        "its own, over an in-memory export root); the same command and seed reproduce every "
        "number.\n\n";

  if (!d.scaling.empty()) {
    const RunResult& first = d.scaling.front();
    const RunResult& last = d.scaling.back();
    md << "## Latency and throughput vs N (`latency_vs_n.png`, `throughput_vs_n.png`)\n\n";
    md << "Workload `" << first.options.workload << "`, model `" << first.options.model
       << "`, " << first.options.ops << " operations per run, one client per node, "
       << first.options.concurrency << " in flight per client, path resolution `"
       << first.options.resolve << "`. `latency_vs_n.png` shows p50 and p99 of each operation "
       << "type (µs, log scale) against the number of nodes; `throughput_vs_n.png` the "
          "aggregate simulated operations per second.\n\n";
    md << "| N | warm-up ops | ops/s | create p50 µs | create p99 µs | stat p50 µs | stat p99 µs "
          "| msgs/op | load max/mean | errors |\n|---|---|---|---|---|---|---|---|---|---|\n";
    std::ostringstream dat;
    dat << "# nodes ops_per_sec create_p50 create_p99 stat_p50 stat_p99 mgr_imbalance mgr_max "
           "mgr_mean ring_imbalance\n";
    for (const auto& r : d.scaling) {
      const OpStats* c = Op(r, "create");
      const OpStats* s = Op(r, "stat") ? Op(r, "stat") : Op(r, "lookup");
      md << "| " << r.options.nodes << " | " << r.warmup_done << " | " << F(r.ops_per_sec)
         << " | " << F(c ? c->p50_us : 0) << " | " << F(c ? c->p99_us : 0) << " | "
         << F(s ? s->p50_us : 0) << " | " << F(s ? s->p99_us : 0) << " | " << F(r.msgs_per_op)
         << " | " << F(r.mgr_imbalance) << " | " << r.errors << " |\n";
      dat << r.options.nodes << " " << F(r.ops_per_sec) << " " << F(c ? c->p50_us : 0) << " "
          << F(c ? c->p99_us : 0) << " " << F(s ? s->p50_us : 0) << " " << F(s ? s->p99_us : 0)
          << " " << F(r.mgr_imbalance) << " " << r.mgr_max << " " << F(r.mgr_mean) << " "
          << F(r.ring_imbalance) << "\n";
    }
    if (auto s = WriteFile(out + "/scaling.dat", dat.str()); !s) return s;
    md << "\n" << MessagesSection(d.scaling);
    md << "\n## Manager load balance vs N (`load_vs_n.png`)\n\n"
       << "Load of a node = requests it served as a manager: VdService `gets_served` + "
          "`updates_applied` + `dirmerges` of the measured phase; the figure is the maximum "
          "over the mean across all nodes (1 = perfect balance). With the directory table on, "
          "lookups of `/` and `/p` hit in every node's table and no longer load their managers; "
          "what remains is mostly one update per create at the manager of the client's "
          "directory. A manager also serves its own client's lookups of the directories it "
          "manages (counted in `gets_served`, locally), so a node that manages its own client's "
          "directory, `/` or `/p` carries requests of its own client on top, which the "
          "placement figure below does not count. `ring` is the ring "
          "alone: N x the largest share of the hash space a node owns (Ring::Share), the limit "
          "for infinitely many equally busy directories.\n\n";
    md << "At the largest N (" << last.options.nodes << ", " << last.options.vnodes
       << " vnodes, " << last.directories << " directories): max " << last.mgr_max << ", mean "
       << F(last.mgr_mean) << ", **max/mean " << F(last.mgr_imbalance) << "** (ring alone "
       << F(last.ring_imbalance) << ").\n\n";
    plots.emplace_back("latency_vs_n",
                       std::string() +
                           "set logscale x 2\nset logscale y\nset xlabel 'nodes (N)'\n"
                           "set ylabel 'latency (simulated µs)'\nset title 'Operation latency vs N'\n"
                           "plot 'scaling.dat' u 1:3 w lp t 'create p50', '' u 1:4 w lp t 'create p99', "
                           "'' u 1:5 w lp t 'stat p50', '' u 1:6 w lp t 'stat p99'\n");
    plots.emplace_back("throughput_vs_n",
                       std::string() +
                           "set logscale x 2\nset xlabel 'nodes (N)'\n"
                           "set ylabel 'throughput (simulated ops/s)'\n"
                           "set title 'Aggregate throughput vs N'\n"
                           "plot 'scaling.dat' u 1:2 w lp t 'ops/s'\n");
    plots.emplace_back("load_vs_n",
                       std::string() +
                           "set logscale x 2\nset xlabel 'nodes (N)'\n"
                           "set ylabel 'manager requests, max / mean'\n"
                           "set title 'Manager load balance vs N'\n"
                           "plot 'scaling.dat' u 1:7 w lp t 'measured max/mean', "
                           "'' u 1:10 w lp t 'ring share (N x max share)'\n");
  }

  if (!d.load.empty() || !d.placement.empty()) {
    md << "## Manager load with many directories\n\n";
    if (!d.load.empty()) {
      md << "Measured (steady state, after a warm-up that touched every directory):\n\n"
            "| workload | N | vnodes | directories | load max | load mean | max/mean | ring "
            "alone |\n|---|---|---|---|---|---|---|---|\n";
      for (const auto& r : d.load) {
        md << "| " << r.options.workload << " | " << r.options.nodes << " | " << r.options.vnodes
           << " | " << r.directories << " | " << r.mgr_max << " | " << F(r.mgr_mean) << " | **"
           << F(r.mgr_imbalance) << "** | " << F(r.ring_imbalance) << " |\n";
      }
      md << "\n";
    }
    if (!d.placement.empty()) {
      md << "Where the ring puts the create-stat-private directories (no simulation: "
            "Ring::Owner of each directory name; with equally busy directories this is the "
            "manager load max/mean). Few directories per node are balls in bins: the busiest "
            "node manages several times the mean whatever the ring; with many, the ring's own "
            "imbalance (`ring alone`) is what remains.\n\n"
            "| N | vnodes | dirs per node | directories | max | mean | max/mean | ring alone "
            "|\n|---|---|---|---|---|---|---|---|\n";
      for (const auto& p : d.placement) {
        md << "| " << p.nodes << " | " << p.vnodes << " | " << p.dirs_per_client << " | "
           << p.directories << " | " << p.max_dirs << " | " << F(p.mean_dirs) << " | "
           << F(p.dirs_imbalance) << " | " << F(p.ring_imbalance) << " |\n";
      }
      md << "\n";
    }
  }

  if (!d.dirmerge.empty()) {
    md << "## Dirmerge cost vs N (`dirmerge_vs_n.png`)\n\n"
       << "One dirmerge of a directory present on every node (" << d.dirmerge.front().entries /
              std::max(1, d.dirmerge.front().nodes)
       << " entries per node), measured with warm connections: a Get from a node that is not "
          "the manager. Messages count every packet (requests and replies); time is from the "
          "Get to its answer. Left axis messages, right axis simulated µs. It is one parallel "
          "round: 2 messages per other node (messages grow linearly), and the time is one "
          "round trip to the slowest leaf plus the manager's cost of issuing N - 1 requests "
          "and merging N listings, so it grows slowly with N rather than with N round "
          "trips.\n\n";
    md << "| N | messages | kNsListLocal | bytes | time µs |\n|---|---|---|---|---|\n";
    std::ostringstream dat;
    dat << "# nodes messages bytes list_requests sim_us\n";
    for (const auto& r : d.dirmerge) {
      md << "| " << r.nodes << " | " << r.messages << " | " << r.list_requests << " | " << r.bytes
         << " | " << F(r.sim_us) << " |\n";
      dat << r.nodes << " " << r.messages << " " << r.bytes << " " << r.list_requests << " "
          << F(r.sim_us) << "\n";
    }
    md << "\n";
    if (auto s = WriteFile(out + "/dirmerge.dat", dat.str()); !s) return s;
    plots.emplace_back("dirmerge_vs_n",
                       std::string() +
                           "set logscale x 2\nset xlabel 'nodes (N)'\n"
                           "set ylabel 'messages per dirmerge'\nset y2label 'simulated µs'\n"
                           "set ytics nomirror\nset y2tics\n"
                           "set title 'Cost of one dirmerge vs N'\n"
                           "plot 'dirmerge.dat' u 1:2 w lp t 'messages' axes x1y1, "
                           "'' u 1:5 w lp t 'time (µs)' axes x1y2\n");
  }

  md << "## Directory-table hit ratio vs capacity (`hitratio_vs_capacity.png`)\n\n";
  const bool have_dt = !d.dt_sweep.empty() && d.dt_sweep.front().dt_measured;
  if (have_dt) {
    const RunResult& f = d.dt_sweep.front();
    md << "Workload `" << f.options.workload << "` (Zipf s = " << F(f.options.zipf_s) << ") at N = "
       << f.options.nodes << " over " << f.directories
       << " directories; capacity is the number of DT entries per node, shown as a percentage "
          "of the directories. Hit ratio = hits / (hits + misses) over all nodes, ";
    if (f.warmup_done > 0) {
      md << "counted after " << f.warmup_done
         << " warm-up lookups that filled the tables (the steady-state ratio). ";
    } else {
      md << "counted from empty tables (no warm-up: the misses that fill them are included). ";
    }
    md << "Every lookup resolves each directory of the path (`walk`), so the shallow, popular "
          "directories dominate: they are what a small table keeps.\n\n";
    md << "| capacity (entries) | % of dirs | hit ratio | invalidations/change | msgs/op |\n"
          "|---|---|---|---|---|\n";
    std::ostringstream dat;
    dat << "# capacity pct_dirs hit_ratio inval_per_change\n";
    const RunResult* at1 = nullptr;
    for (const auto& r : d.dt_sweep) {
      const double pct = 100.0 * static_cast<double>(r.options.dt_capacity) /
                         static_cast<double>(std::max<uint64_t>(1, r.directories));
      md << "| " << r.options.dt_capacity << " | " << F(pct) << " | " << F(r.dt_hit_ratio)
         << " | " << F(r.invalidations_per_change) << " | " << F(r.msgs_per_op) << " |\n";
      dat << r.options.dt_capacity << " " << F(pct) << " " << F(r.dt_hit_ratio) << " "
          << F(r.invalidations_per_change) << "\n";
      if (at1 == nullptr && pct >= 0.999) at1 = &r;
    }
    if (at1 != nullptr) {
      md << "\nKey figure: **hit ratio " << F(at1->dt_hit_ratio) << " at capacity "
         << at1->options.dt_capacity << " entries ("
         << F(100.0 * static_cast<double>(at1->options.dt_capacity) /
              static_cast<double>(std::max<uint64_t>(1, at1->directories)))
         << "% of directories, the smallest capacity of the sweep at 1% or more)**.\n";
    }
    md << "\n";
    if (auto s = WriteFile(out + "/dt.dat", dat.str()); !s) return s;
    plots.emplace_back("hitratio_vs_capacity",
                       std::string() +
                           "set logscale x\nset xlabel 'DT capacity (% of directories)'\n"
                           "set ylabel 'hit ratio'\nset yrange [0:1]\n"
                           "set title 'Directory-table hit ratio vs capacity'\n"
                           "plot 'dt.dat' u 2:3 w lp t 'hit ratio'\n");
  } else {
    md << "Not measured: " << (d.dt_note.empty() ? "no capacity sweep was run." : d.dt_note)
       << "\n\n";
  }

  if (!d.dir_size.empty()) {
    const RunResult& f = d.dir_size.front();
    md << "## Cost per operation vs directory size (`bytes_vs_dir_entries.png`)\n\n"
       << "Workload `" << f.options.workload << "` at N = " << f.options.nodes
       << ": the shared directory already holds the given number of files (spread over the "
          "nodes) when the run begins; figures are of the measured phase.\n\n"
          "| entries | bytes/op | msgs/op | ops/s/node | ratio of bytes/op to the smallest |\n"
          "|---|---|---|---|---|\n";
    std::ostringstream dat;
    dat << "# entries bytes_per_op msgs_per_op ops_per_sec_per_node\n";
    const double base = std::max(1e-9, f.bytes_per_op);
    for (const auto& r : d.dir_size) {
      const double per_node = r.ops_per_sec / std::max(1, r.options.nodes);
      md << "| " << r.options.dir_entries << " | " << F(r.bytes_per_op) << " | "
         << F(r.msgs_per_op) << " | " << F(per_node) << " | " << F(r.bytes_per_op / base)
         << " |\n";
      dat << std::max<uint64_t>(1, r.options.dir_entries) << " " << F(r.bytes_per_op) << " "
          << F(r.msgs_per_op) << " " << F(per_node) << "\n";
    }
    md << "\n";
    if (auto s = WriteFile(out + "/dir_size.dat", dat.str()); !s) return s;
    plots.emplace_back("bytes_vs_dir_entries",
                       std::string() +
                           "set logscale x\nset xlabel 'entries in the directory'\n"
                           "set ylabel 'bytes per operation'\nset yrange [0:*]\n"
                           "set title 'Network bytes per operation vs directory size'\n"
                           "plot 'dir_size.dat' u 1:2 w lp t 'bytes/op'\n");
  }

  if (!d.cache.empty()) {
    const SimOptions& o = d.cache.front().options;
    md << "## Cooperative caching (`cache_disk_reads.png`)\n\n"
       << "Workload `read-remote`: node 0 holds " << o.read_files << " files of " << o.file_bytes
       << " bytes; a client on every other node reads " << o.read_bytes
       << " bytes at a time (Zipf s = " << F(o.zipf_s)
       << (o.write_percent > 0 ? "; " + std::to_string(o.write_percent) +
                                     " % of the operations write a block instead"
                               : std::string())
       << " over the blocks), each read checked; a read of an export root costs "
       << F(o.disk_read_us)
       << " µs (its disk; no page cache). Per read: answered from the node's own cache, "
          "read one-sidedly from another node's cache, read at node 0 (its disk); tag misses "
          "are copies named by node 0 that had moved on (read again from node 0); forwards are "
          "evicted last copies stored in another node's cache (N-chance). Ways: alone (no "
          "cooperation), coop (peers' memory, no forwarding), fwd N (and forwarding, N "
          "recirculations). Own hits count the hits after a forwarded block was fetched back "
          "too.\n\n"
          "| N | cache MiB/node | way | own hits | peers' memory | disk reads | tag misses | "
          "forwards | read p50 µs | p99 µs | mean µs | msgs/read | bad reads |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    std::ostringstream dat;
    std::vector<std::string> series;
    // One series per (N, way), along the cache size.
    auto way = [](const SimOptions& x) {
      if (!x.cache_coop) return std::string("alone");
      return x.cache_forward > 0 ? "fwd " + std::to_string(x.cache_forward) : std::string("coop");
    };
    std::vector<RunResult> rows = d.cache;
    std::stable_sort(rows.begin(), rows.end(), [&](const RunResult& a, const RunResult& b) {
      return std::make_tuple(a.options.nodes, way(a.options), a.options.cache_bytes) <
             std::make_tuple(b.options.nodes, way(b.options), b.options.cache_bytes);
    });
    std::string prev;
    for (const auto& r : rows) {
      const OpStats* rd = Op(r, "read");
      const double ops = static_cast<double>(std::max<uint64_t>(1, rd ? rd->count : 0));
      const double mib = static_cast<double>(r.options.cache_bytes) / (1 << 20);
      md << "| " << r.options.nodes << " | " << F(mib) << " | " << way(r.options) << " | "
         << F(r.cache_hits / ops) << " | " << F(r.peer_hits / ops) << " | "
         << F(r.disk_reads / ops) << " | " << F(r.tag_misses / ops) << " | "
         << F(r.forwarded / ops) << " | " << F(rd ? rd->p50_us : 0) << " | "
         << F(rd ? rd->p99_us : 0) << " | " << F(rd ? rd->mean_us : 0) << " | "
         << F(r.msgs_per_op) << " | " << r.bad_reads << " |\n";
      const std::string name = "N=" + std::to_string(r.options.nodes) + " " + way(r.options);
      if (name != prev) {
        if (!series.empty()) dat << "\n\n";
        dat << "# " << name << ": cache_mib disk_reads_per_read mean_us\n";
        series.push_back(name);
        prev = name;
      }
      dat << F(mib) << " " << F(r.disk_reads / ops) << " " << F(rd ? rd->mean_us : 0) << "\n";
    }
    md << "\n";
    if (auto s = WriteFile(out + "/cache.dat", dat.str()); !s) return s;
    std::string plot = "plot ";
    for (size_t i = 0; i < series.size(); ++i) {
      plot += (i ? ", " : "") + std::string("'cache.dat' index ") + std::to_string(i) +
              " u 1:2 w lp t '" + series[i] + "'";
    }
    plots.emplace_back("cache_disk_reads",
                       "set xlabel 'cache per node (MiB)'\nset ylabel 'disk reads per read'\n"
                       "set yrange [0:*]\nset key top right\n"
                       "set title 'Disk reads per read, with and without cooperation'\n" +
                           plot + "\n");
  }

  if (!d.workloads.empty()) {
    md << "## Workloads\n\n| workload | N | ops/s | p50 µs (first op type) | p99 µs | msgs/op | "
          "dirmerges | max/mean load | errors |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& r : d.workloads) {
      const OpStats* s = r.per_op.empty() ? nullptr : &r.per_op.begin()->second;
      std::string first = r.per_op.empty() ? "-" : r.per_op.begin()->first;
      md << "| " << r.options.workload << " | " << r.options.nodes << " | " << F(r.ops_per_sec)
         << " | " << first << " " << F(s ? s->p50_us : 0) << " | " << F(s ? s->p99_us : 0)
         << " | " << F(r.msgs_per_op) << " | " << r.dirmerges << " | " << F(r.mgr_imbalance)
         << " | " << r.errors << " |\n";
    }
    md << "\n";
  }

  std::string note;
  if (plots.empty()) {
    // Nothing to draw.
  } else if (!HaveGnuplot()) {
    note = "gnuplot not found: CSV and summary.md written, PNG plots skipped "
           "(install gnuplot-nox, e.g. scripts/install-deps.sh)";
  } else {
    for (const auto& [name, script] : plots) {
      std::string gp = out + "/" + name + ".gp";
      std::string text = "cd '" + out + "'\n" + kTerm + "set output '" + name + ".png'\n" + script;
      if (auto s = WriteFile(gp, text); !s) return s;
      if (auto s = RunGnuplot(gp); !s) {
        note += (note.empty() ? "" : "; ") + s.error().ToString();
      }
    }
  }
  md << "## Plots\n\n";
  if (!note.empty()) {
    md << note << ".\n";
  } else {
    for (const auto& [name, script] : plots) md << "- `" << name << ".png`\n";
  }
  if (plots_note) *plots_note = note;
  return WriteFile(out + "/summary.md", md.str());
}

}  // namespace fedfs::bench
