// fedfs-bench: the namespace-scalability simulator (bench/sim/sim.h).
//
//   fedfs-bench sim [--nodes 8,64,256,1024] [--model rdma|tcp-lan|wan|zero]
//                   [--latency-us X] [--bandwidth B/s] [--seed S] [--ops N]
//                   [--workload W] [--zipf-s 0.99] [--dt-capacity 0,44,...]
//                   [--clients C] [--concurrency K] [--dir-entries 100,1000,...]
//                   [--cache 0,4MiB,...] [--coop on,off] [--out DIR]
//   fedfs-bench study --out DIR     the default study (a few minutes)
//
// Writes CSV (one file per run, header row), summary.md and PNG plots
// (gnuplot) into --out. Progress lines go to stderr when it is a terminal.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/sim/report.h"
#include "bench/sim/sim.h"
#include "common/logging.h"

namespace fb = fedfs::bench;

namespace {

bool Tty() { return isatty(STDERR_FILENO) == 1; }

fb::ProgressFn Progress() {
  if (!Tty()) return {};
  return [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
}

void Step(const std::string& line) {
  if (Tty()) std::fprintf(stderr, "%s\n", line.c_str());
}

int Fail(const fedfs::Error& e) {
  std::fprintf(stderr, "fedfs-bench: %s\n", e.ToString().c_str());
  return 1;
}

fedfs::Status MakeOut(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fedfs::Err(ec.value(), "cannot create " + dir);
  return fedfs::Ok();
}

std::string Figures(const fb::RunResult& r) {
  char b[256];
  std::snprintf(b, sizeof(b), "%.0f ops/s, %.2f msgs/op, %llu errors, %llu faults injected, %.1fs wall",
                r.ops_per_sec, r.msgs_per_op, static_cast<unsigned long long>(r.errors),
                static_cast<unsigned long long>(r.faults_injected), r.wall_seconds);
  std::string out = b;
  if (const auto it = r.per_op.find("read"); it != r.per_op.end() && r.ops_done > 0) {
    const double ops = static_cast<double>(r.ops_done);
    std::snprintf(b, sizeof(b),
                  "; reads: %.2f local hits, %.2f peer hits, %.2f disk reads per read, mean "
                  "%.1f µs, %llu bad",
                  static_cast<double>(r.cache_hits) / ops, static_cast<double>(r.peer_hits) / ops,
                  static_cast<double>(r.disk_reads) / ops, it->second.mean_us,
                  static_cast<unsigned long long>(r.bad_reads));
    out += b;
  }
  return out;
}

// The runs of `fedfs-bench sim` at N = `n`: `o` for every combination of
// directory size, DT capacity, cache size and cooperation ("on"/"off").
std::vector<fb::SimOptions> Sweep(const fb::SimOptions& o, int n,
                                  const std::vector<uint64_t>& dir_entries,
                                  const std::vector<size_t>& capacities,
                                  const std::vector<uint64_t>& caches,
                                  const std::vector<std::string>& coops) {
  std::vector<fb::SimOptions> runs;
  for (uint64_t entries : dir_entries) {
    for (size_t cap : capacities) {
      for (uint64_t cache : caches) {
        for (const std::string& coop : coops) {
          fb::SimOptions run = o;
          run.nodes = n;
          run.dt_capacity = cap;
          run.dir_entries = entries;
          run.cache_bytes = cache;
          run.cache_coop = coop == "on";
          runs.push_back(run);
        }
      }
    }
  }
  return runs;
}

// The DT capacity sweep of the study: capacities as fractions of the
// directories of the zipf-lookup tree.
std::vector<size_t> StudyCapacities(uint64_t dirs) {
  std::vector<size_t> out;
  for (double pct : {0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0}) {
    size_t c = static_cast<size_t>(static_cast<double>(dirs) * pct / 100.0 + 0.5);
    if (c == 0) c = 1;
    if (out.empty() || out.back() != c) out.push_back(c);
  }
  return out;
}

uint64_t TreeDirs(const fb::SimOptions& o) {
  uint64_t dirs = 1, level = 1;
  for (int d = 0; d < o.tree_depth; ++d) {
    level *= static_cast<uint64_t>(o.tree_fanout);
    dirs += level;
  }
  return dirs;
}

int Finish(const std::string& out, const fb::ReportData& data) {
  std::string note;
  if (auto s = fb::WriteReport(out, data, &note); !s) return Fail(s.error());
  if (!note.empty()) std::fprintf(stderr, "fedfs-bench: %s\n", note.c_str());
  std::printf("fedfs-bench: results in %s (summary.md)\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedfs-bench: namespace-scalability simulation of FedFS"};
  app.require_subcommand(1);
  std::string log_level = "error";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")->capture_default_str();

  fb::SimOptions o;
  std::vector<int> nodes{8, 64};
  std::vector<size_t> capacities;
  std::string out = "fedfs-bench-out";

  auto* sim = app.add_subcommand("sim", "run one workload over a list of node counts");
  sim->add_option("--nodes", nodes, "node counts (comma-separated list)")->delimiter(',');
  sim->add_option("--model", o.model, "link model: zero, rdma, tcp-lan, wan")->capture_default_str();
  sim->add_option("--latency-us", o.latency_us, "one-way base latency override (µs)");
  sim->add_option("--bandwidth", o.bandwidth, "bandwidth override (bytes/s)");
  sim->add_option("--local-op-us", o.local_op_us,
                  "simulated CPU cost of a request's local overhead and of each local NodeFs call (µs)")
      ->capture_default_str();
  sim->add_option("--seed", o.seed, "seed of the network and the workload")->capture_default_str();
  sim->add_option("--ops", o.ops, "operations per run")->capture_default_str();
  sim->add_option("--workload", o.workload,
                  "create-stat-private | create-stat-shared | fanout-wide | fanout-deep | "
                  "hot-dir | zipf-lookup | churn | read-remote")
      ->capture_default_str();
  sim->add_option("--zipf-s", o.zipf_s,
                  "Zipf exponent of zipf-lookup (files) and read-remote (blocks); 0: uniform")
      ->capture_default_str();
  std::vector<uint64_t> caches;
  sim->add_option("--cache", caches,
                  "each node's cache of other nodes' file data, bytes (e.g. 16MiB; comma-separated "
                  "list: one run per size; default 0, none)")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false));
  sim->add_option("--cache-block", o.cache_block, "the cache's block, bytes (power of two)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  std::vector<std::string> coops;
  sim->add_option("--coop", coops,
                  "on: the caches cooperate (blocks read from other nodes' memory); off: each "
                  "caches alone (comma-separated list: a run each; default on)")
      ->delimiter(',')
      ->check(CLI::IsMember({"on", "off"}));
  sim->add_option("--cache-forward", o.cache_forward,
                  "N-chance forwarding's recirculation limit with --coop on (0: off)")
      ->capture_default_str();
  sim->add_option("--read-files", o.read_files, "read-remote: files of the working set on node 0")
      ->capture_default_str();
  sim->add_option("--write-percent", o.write_percent,
                  "read-remote: percent of operations that write a block (each read checked "
                  "against the writes acknowledged)")
      ->capture_default_str();
  sim->add_option("--file-bytes", o.file_bytes, "read-remote: bytes per file")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  sim->add_option("--read-bytes", o.read_bytes, "read-remote: bytes per read (block-aligned)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  sim->add_option("--disk-read-us", o.disk_read_us,
                  "simulated time of a read of an export root (its disk; no page cache)")
      ->capture_default_str();
  sim->add_option("--dt-capacity", capacities,
                  "directory-table entries per node, 0: none (comma-separated list: a hit-ratio "
                  "sweep; default 4096, the daemon's)")
      ->delimiter(',');
  sim->add_option("--clients", o.clients, "clients (0: one per node)")->capture_default_str();
  sim->add_option("--concurrency", o.concurrency, "operations in flight per client")
      ->capture_default_str();
  sim->add_option("--resolve", o.resolve, "walk (look up every directory) | parent")
      ->capture_default_str();
  sim->add_option("--placement", o.placement, "local | hash")->capture_default_str();
  sim->add_option("--vnodes", o.vnodes, "ring points per node (fedfsd: ring.vnodes)")
      ->capture_default_str();
  sim->add_option("--warmup", o.warmup_ops,
                  "operations run before the measured ones (first touches, DT fills)")
      ->capture_default_str();
  sim->add_option("--dirs-per-client", o.dirs_per_client,
                  "create-stat-private/churn: private directories per client")
      ->capture_default_str();
  std::vector<uint64_t> dir_entries;
  sim->add_option("--dir-entries", dir_entries,
                  "create-stat-shared: files already in /shared (comma-separated list: one run "
                  "per size at each N; a plot of cost vs size)")
      ->delimiter(',');
  sim->add_option("--faults", o.faults,
                  "faults every node's transport injects, as FEDFS_TEST_FAULTS (drop, "
                  "disconnect, duplicate, seed; no delays), e.g. drop=0.01,duplicate=0.01");
  sim->add_option("--out", out, "output directory")->capture_default_str();

  auto* study = app.add_subcommand(
      "study", "the default study: N = 8..1024, workloads, DT sweep, cooperative caching");
  study->add_option("--out", out, "output directory")->capture_default_str();
  study->add_option("--seed", o.seed, "seed")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  fedfs::InitLogging("bench", log_level);
  if (auto s = MakeOut(out); !s) return Fail(s.error());

  if (sim->parsed()) {
    if (capacities.empty()) capacities.push_back(o.dt_capacity);
    std::string cmd = "fedfs-bench";
    for (int i = 1; i < argc; ++i) cmd += std::string(" ") + argv[i];
    fb::ReportData data;
    data.command = cmd;
    std::vector<fb::RunResult> rows;
    if (dir_entries.empty()) dir_entries.push_back(o.dir_entries);
    if (caches.empty()) caches.push_back(o.cache_bytes);
    if (coops.empty()) coops.push_back(o.cache_coop ? "on" : "off");
    for (int n : nodes) {
      for (const fb::SimOptions& run : Sweep(o, n, dir_entries, capacities, caches, coops)) {
        const uint64_t entries = run.dir_entries;
        const size_t cap = run.dt_capacity;
        Step("sim " + run.workload + " N=" + std::to_string(n) + " dt=" + std::to_string(cap) +
             (entries > 0 ? " entries=" + std::to_string(entries) : std::string()) +
             (run.cache_bytes > 0 ? " cache=" + std::to_string(run.cache_bytes) +
                                        " coop=" + (run.cache_coop ? "on" : "off")
                                  : std::string()));
        auto r = fb::RunSim(run, Progress());
        if (!r) return Fail(r.error());
        Step("  " + Figures(*r));
        rows.push_back(*r);
        if (run.workload == "read-remote") {
          data.cache.push_back(*r);  // its own section: no creates or stats to plot
          continue;
        }
        if (run.cache_bytes != caches.front() || (run.cache_coop ? "on" : "off") != coops.front()) {
          continue;
        }
        const bool first_cap = cap == capacities.front();
        if (first_cap && entries == dir_entries.front()) data.scaling.push_back(*r);
        if (capacities.size() > 1 && n == nodes.back() && entries == dir_entries.front()) {
          data.dt_sweep.push_back(*r);
        }
        if (dir_entries.size() > 1 && first_cap && n == nodes.back()) {
          data.dir_size.push_back(*r);
        }
      }
      fb::SimOptions dm = o;
      dm.nodes = n;
      Step("dirmerge N=" + std::to_string(n));
      auto d = fb::MeasureDirmerge(dm);
      if (!d) return Fail(d.error());
      data.dirmerge.push_back(*d);
    }
    if (auto s = fb::WriteRunsCsv(out + "/" + o.workload + ".csv", rows); !s) return Fail(s.error());
    if (auto s = fb::WriteDirmergeCsv(out + "/dirmerge.csv", data.dirmerge); !s) {
      return Fail(s.error());
    }
    if (capacities.size() > 1 && !data.dt_sweep.empty() && !data.dt_sweep.front().dt_measured) {
      data.dt_note = "this build's VdService has no directory table yet";
    }
    return Finish(out, data);
  }

  // The default study. Sizes are chosen to finish in a few minutes of CPU on
  // a shared 2-core machine: the cost is dominated by first touches at large
  // N (a fresh directory's dirmerge is 2 (N - 1) messages, a manager's first
  // contact with a node a 4-message handshake), not by the measured
  // operations, which are ~1 message each in the steady state.
  fb::ReportData data;
  data.command = "fedfs-bench study --out " + out;
  const auto wall0 = std::chrono::steady_clock::now();
  const std::clock_t cpu0 = std::clock();
  fb::SimOptions base;  // directory table on: 4096 entries, the daemon's default
  base.seed = o.seed;
  base.model = "rdma";
  auto run_one = [&](const fb::SimOptions& run, const std::string& what)
      -> fedfs::Result<fb::RunResult> {
    Step("study: " + what);
    auto r = fb::RunSim(run, Progress());
    if (r) Step("  " + Figures(*r));
    return r;
  };
  // Scaling: mdtest-like create/stat in private directories, steady state
  // after a warm-up of two create/stat pairs per client.
  for (int n : {8, 32, 128, 512, 1024}) {
    fb::SimOptions run = base;
    run.nodes = n;
    run.workload = "create-stat-private";
    run.warmup_ops = 4 * static_cast<uint64_t>(n);
    run.ops = 20000;
    auto r = run_one(run, "scaling N=" + std::to_string(n));
    if (!r) return Fail(r.error());
    data.scaling.push_back(*r);
    Step("study: dirmerge N=" + std::to_string(n));
    auto d = fb::MeasureDirmerge(run);
    if (!d) return Fail(d.error());
    data.dirmerge.push_back(*d);
  }
  // Manager load with many directories per node (N = 1024 with one
  // directory per client is in the scaling rows).
  {
    fb::SimOptions run = base;
    run.nodes = 128;
    run.workload = "create-stat-private";
    run.dirs_per_client = 32;
    run.warmup_ops = 4 * 128 * 32;
    run.ops = 40000;
    auto r = run_one(run, "load N=128, 32 directories per client");
    if (!r) return Fail(r.error());
    data.load.push_back(*r);
  }
  data.load.insert(data.load.begin(), data.scaling.back());
  data.placement.push_back(fb::MeasurePlacement(128, 256, 32));
  for (uint32_t v : {64u, 256u}) {
    for (int per : {1, 4, 16, 64, 256}) data.placement.push_back(fb::MeasurePlacement(1024, v, per));
  }
  // The other workloads at N = 64 (cold: first touches included).
  for (const char* w : {"create-stat-private", "create-stat-shared", "fanout-wide", "fanout-deep",
                        "hot-dir", "zipf-lookup", "churn"}) {
    fb::SimOptions run = base;
    run.nodes = 64;
    run.workload = w;
    run.ops = 10000;
    auto r = run_one(run, std::string("workload ") + w + " N=64");
    if (!r) return Fail(r.error());
    data.workloads.push_back(*r);
  }
  // DT hit ratio vs capacity under Zipf(0.99) lookups, steady state: the
  // warm-up's lookups fill the tables before the measured ones.
  fb::SimOptions z = base;
  z.nodes = 32;
  z.workload = "zipf-lookup";
  z.warmup_ops = 20000;
  z.ops = 20000;
  for (size_t cap : StudyCapacities(TreeDirs(z))) {
    fb::SimOptions run = z;
    run.dt_capacity = cap;
    auto r = run_one(run, "DT capacity " + std::to_string(cap));
    if (!r) return Fail(r.error());
    data.dt_sweep.push_back(*r);
    if (!r->dt_measured) {
      data.dt_note = "this build's VdService has no directory table yet";
      data.dt_sweep.clear();
      break;
    }
  }
  // Cooperative caching: 16 MiB of files on node 0 read uniformly in 64 KiB
  // blocks by every other node, each node's cache from an eighth of that to
  // all of it, alone, cooperating, and cooperating with N-chance forwarding
  // (the daemon's default), steady state.
  for (int n : {4, 16, 64}) {
    for (uint64_t mib : {2, 4, 8, 16}) {
      for (int way : {0, 1, 2}) {
        const bool coop = way > 0;
        fb::SimOptions run = base;
        run.nodes = n;
        run.workload = "read-remote";
        run.zipf_s = 0;
        run.read_files = 64;
        run.file_bytes = uint64_t{256} << 10;
        run.read_bytes = uint64_t{64} << 10;
        run.cache_bytes = mib << 20;
        run.cache_block = uint64_t{64} << 10;
        run.cache_coop = coop;
        run.cache_forward = way == 2 ? 2 : 0;
        run.warmup_ops = 20000;
        run.ops = 20000;
        auto r = run_one(run, "cache N=" + std::to_string(n) + " " + std::to_string(mib) +
                                  " MiB" + (way == 2 ? " fwd" : coop ? " coop" : " alone"));
        if (!r) return Fail(r.error());
        data.cache.push_back(*r);
      }
    }
  }
  for (auto [name, rows] : {std::pair{"scaling", &data.scaling}, std::pair{"workloads", &data.workloads},
                            std::pair{"dt", &data.dt_sweep}, std::pair{"load", &data.load},
                            std::pair{"cache", &data.cache}}) {
    if (rows->empty()) continue;
    if (auto s = fb::WriteRunsCsv(out + "/" + name + ".csv", *rows); !s) return Fail(s.error());
  }
  if (auto s = fb::WriteDirmergeCsv(out + "/dirmerge.csv", data.dirmerge); !s) {
    return Fail(s.error());
  }
  if (auto s = fb::WritePlacementCsv(out + "/placement.csv", data.placement); !s) {
    return Fail(s.error());
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  const double cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  std::fprintf(stderr, "fedfs-bench: study took %.1f s wall, %.1f s CPU\n", wall, cpu);
  return Finish(out, data);
}
