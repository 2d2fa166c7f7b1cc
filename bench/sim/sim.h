// fedfs-bench sim: a namespace-scalability simulation. N nodes (8 .. 1024+)
// live in one process on the fake network in simulated time
// (m2m/fake_network.h, kSimulated), each built by node::Node exactly as
// fedfsd builds its own (bench/sim/federation.h): the production file
// service, VD service, facade (ns::VfsImpl) and directory operations, over
// a MemNodeFs export root, a MemKv journal and the fake network's
// transport; every node's ClusterView is built directly (ring over the live
// nodes). There is no model of the namespace here: each client performs its
// operations through its node's facade as FUSE requests would
// (bench/sim/path_client.h: a Lookup of each directory of the path, or of
// the parent only once with resolve = "parent", then Create + Release,
// Lookup + GetAttr, Unlink, ...), and the production code decides which
// messages flow and what they cost. Its blocking calls run on fibers
// (bench/sim/fibers.h), each wait a suspension in simulated time.
//
// Determinism: one thread; the fake network's seeded RNG and the workload's
// own seeded generator are the only randomness; no wall clock reaches the
// results; all iteration is over ordered containers. The same options give
// the same RunResult (wall_seconds aside).
//
// Threads: everything runs on the calling thread (and its fibers). Not
// thread-safe; one simulation per thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/sim/path_client.h"
#include "common/result.h"
#include "vd/vd_service.h"

namespace fedfs::bench {

struct SimOptions {
  int nodes = 8;
  std::string model = "rdma";             // zero | rdma | tcp-lan | wan
  std::optional<double> latency_us;       // overrides the model's one-way base latency
  std::optional<double> bandwidth;        // overrides the model's bytes per second
  double jitter_us = -1;                  // < 0: 10% of the base latency
  // CPU cost charged on the simulated clock for work that sends nothing: the
  // client's own request overhead (kernel + FUSE) before each operation, and
  // each NodeFs call made on a node's own export root (bench/sim/charged_fs.h:
  // its own calls and those it serves for others). Without it, local
  // operations would take no time and a node managing its own directories
  // would finish its whole share at t = 0.
  double local_op_us = 1.0;
  uint64_t seed = 1;
  uint64_t ops = 10000;
  // create-stat-private | create-stat-shared | fanout-wide | fanout-deep |
  // hot-dir | zipf-lookup | churn | read-remote
  std::string workload = "create-stat-private";
  // Zipf exponent of zipf-lookup (files) and read-remote (blocks); 0 is
  // uniform.
  double zipf_s = 0.99;
  // read-remote: node 0 holds read_files files of file_bytes each under
  // /data; a client on every other node keeps each file it reads open and
  // reads read_bytes at a block-aligned offset drawn by Zipf(zipf_s) over
  // all the blocks of the working set (a seeded permutation of their
  // ranks), checking the bytes. Node 0 runs no client.
  uint64_t read_files = 64;
  // read-remote: the share of operations (percent) that write a whole
  // block (read_bytes) instead, each a new version of it, every read then
  // checked against the versions acknowledged (bench/sim/reads.h).
  uint32_t write_percent = 0;
  uint64_t file_bytes = uint64_t{1} << 20;
  uint64_t read_bytes = uint64_t{64} << 10;
  // Simulated time charged per read of an export root (its disk: the model
  // has no page cache), on top of local_op_us.
  double disk_read_us = 100;
  // Each node's cache of other nodes' file data (docs/coopcache.md;
  // node::NodeOptions::cache): 0 (default) none. cache_block: its blocks.
  // cache_coop: its blocks readable by the other nodes and theirs read
  // (false: each node caches alone, "no cooperation"). cache_forward: N-chance
  // forwarding's recirculation limit (0: off; 2, the daemon's default),
  // with cache_coop only; it runs on the simulation's fibers.
  uint64_t cache_bytes = 0;
  uint64_t cache_block = uint64_t{64} << 10;
  bool cache_coop = true;
  uint32_t cache_forward = 2;
  int clients = 0;       // 0: one per node (client i runs on node i mod N)
  int concurrency = 1;   // operations in flight per client
  std::string resolve = "walk";       // walk: Get every directory of the path; parent: only the parent
  std::string placement = "local";    // local | hash (vd/placement.h)
  // Directory-table entries per node (0: none). On by default with the
  // production default (VdServiceOptions::dt_entries).
  size_t dt_capacity = 4096;
  // Points per node on the consistent-hash ring (fedfsd's ring.vnodes
  // default is 256; the ring's share imbalance shrinks as 1/sqrt(vnodes)).
  uint32_t vnodes = 256;
  // Operations of the same workload run before the measured ones (their
  // latencies, messages and counters are not reported): first-touch
  // dirmerges, connection setup and DT fills happen there, so the measured
  // phase shows the steady state. Churn events happen only while measuring.
  uint64_t warmup_ops = 0;
  // create-stat-private and churn: each client spreads its files round-robin
  // over this many private directories (mdtest -u with several directories
  // per task), so that N * dirs_per_client directories spread over the ring.
  int dirs_per_client = 1;
  // zipf-lookup: the pre-built tree (fanout^1 + ... + fanout^depth
  // directories, files_per_dir files each on seeded random nodes).
  int tree_fanout = 16;
  int tree_depth = 3;
  int files_per_dir = 4;
  // churn: this many membership changes (alternately a node leaves and
  // rejoins), evenly spread over the operations.
  int churn_events = 8;
  // dirmerge measurement: entries each node holds in the measured directory.
  int dirmerge_entries = 4;
  // create-stat-shared: files already in /shared when the run begins,
  // spread round-robin over the nodes (the directory's size; the cost of an
  // operation in it should not grow with it).
  uint64_t dir_entries = 0;
  // Faults every node's transport injects (m2m/faulty_transport.h, the
  // FEDFS_TEST_FAULTS syntax, each node seeded with seed + its index): lost
  // requests and replies, broken connections, duplicated requests. Delays
  // are refused: the link model's jitter is the simulator's. "": none.
  std::string faults;
};

// Validates names and ranges (EINVAL with the reason).
Status ValidateSimOptions(const SimOptions& o);

struct OpStats {
  uint64_t count = 0;
  uint64_t errors = 0;
  double p50_us = 0;
  double p99_us = 0;
  double mean_us = 0;
};

struct RunResult {
  SimOptions options;
  uint64_t ops_done = 0;
  uint64_t errors = 0;
  double sim_seconds = 0;      // simulated time of the workload phase
  double ops_per_sec = 0;      // ops_done / sim_seconds
  std::map<std::string, OpStats> per_op;  // "create", "stat", "unlink", "lookup"
  // Network traffic of the workload phase (fake network TrafficStats).
  uint64_t messages = 0;       // every packet: requests, replies, handshakes, one-sided
  uint64_t bytes = 0;
  double msgs_per_op = 0;
  double bytes_per_op = 0;
  std::map<std::string, uint64_t> requests;  // per method name ("vd_get", "fs_meta", ...)
  // Manager load: requests served per node as a manager (gets_served +
  // updates_applied + dirmerges of the measured phase), max and mean over
  // all nodes.
  uint64_t mgr_max = 0;
  double mgr_mean = 0;
  double mgr_imbalance = 0;    // max / mean
  // The ring alone: N * the largest share of the hash space any live node
  // owns (Ring::Share). The load imbalance of infinitely many equally busy
  // directories; a finite number of directories adds sampling noise on top.
  double ring_imbalance = 0;
  uint64_t warmup_done = 0;    // operations run in the warm-up phase
  uint64_t warmup_messages = 0;  // every packet of the warm-up phase
  std::map<std::string, uint64_t> warmup_requests;  // per method, warm-up phase
  uint64_t warmup_dirmerges = 0;
  uint64_t gets_served = 0;
  uint64_t dirmerges = 0;
  uint64_t updates_applied = 0;
  // Directory table (when VdService has one and dt_capacity > 0).
  bool dt_measured = false;
  uint64_t dt_hits = 0;
  uint64_t dt_misses = 0;
  double dt_hit_ratio = 0;
  uint64_t invalidations = 0;  // one-sided bumps + broadcast messages sent
  uint64_t changes = 0;        // VD changes applied (updates)
  double invalidations_per_change = 0;
  uint64_t directories = 0;    // directories in the namespace at the start
  uint64_t faults_injected = 0;  // lost messages, broken connections, duplicates (whole run)
  // The file-data caches (cache_bytes > 0), summed over the nodes, measured
  // phase: reads answered from the node's own cache (blocks), blocks read
  // from another node's cache (one-sided), reads of export roots (each a
  // disk read in the model: the file's node's reads for the others, and its
  // own) and their bytes, and reads whose bytes were not the file's (must
  // be 0).
  bool cache_measured = false;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t peer_hits = 0;
  uint64_t tag_misses = 0;
  uint64_t forwarded = 0;  // blocks forwarded to another node's cache (N-chance)
  uint64_t disk_reads = 0;
  uint64_t disk_read_bytes = 0;
  uint64_t bad_reads = 0;
  double wall_seconds = 0;     // real time the run took (not reproducible)
};

struct DirmergeResult {
  int nodes = 0;
  uint64_t messages = 0;       // every packet of one Get that rebuilt the VD
  uint64_t bytes = 0;
  uint64_t list_requests = 0;  // kNsListLocal requests
  double sim_us = 0;           // simulated time from the Get to its answer
  uint64_t entries = 0;        // entries of the merged VD
};

// Where the ring puts the directories of create-stat-private (no messages,
// no simulation: Ring::Owner of each directory name): how evenly `nodes`
// nodes with `vnodes` ring points each manage nodes * dirs_per_client
// directories. With equally busy directories this is the steady-state
// manager load; it separates the ring's own imbalance (vnodes) from the
// sampling noise of few directories per node.
struct PlacementResult {
  int nodes = 0;
  uint32_t vnodes = 0;
  int dirs_per_client = 0;
  uint64_t directories = 0;
  uint64_t max_dirs = 0;       // directories managed by the busiest node
  double mean_dirs = 0;
  double dirs_imbalance = 0;   // max_dirs / mean_dirs
  double ring_imbalance = 0;   // N * largest Ring::Share
};
PlacementResult MeasurePlacement(int nodes, uint32_t vnodes, int dirs_per_client);

// A scripted sequence, to run the same operations as on real daemons and
// compare the VdService counters (tests/integration/bench_counters_test.cc).
// Node i is named NodeId(i) ("n0000", ...), on a ring of options.vnodes
// points per node, so a federation of daemons with the same ids agrees on
// every manager.
struct ScriptOp {
  std::string kind;  // create | stat
  int node = 0;      // the node whose client runs it
  std::string path;
};
struct ScriptResult {
  std::vector<std::string> ids;                  // node ids, by index
  std::vector<ns::VdService::Stats> before, after;  // per node, around the script
  std::vector<bool> ok;                          // per operation
};
std::string NodeId(int i);
// `dirs` exist in every node's export root before the script (put there as
// local programs would, like files placed in a daemon's export root). The
// operations run one after the other, each to completion.
Result<ScriptResult> RunScript(const SimOptions& options, const std::vector<std::string>& dirs,
                               const std::vector<ScriptOp>& ops);

// The same federation answering a scripted sequence of path operations,
// each through node `node`'s facade (PathClient::Run), one after the other,
// each to completion: every answer, in order (the simulator's half of
// tests/unit/bench/sim_equivalence_test.cc).
struct PathStep {
  int node = 0;
  PathOp op;
};
Result<std::vector<PathAnswer>> RunPathScript(const SimOptions& options,
                                              const std::vector<PathStep>& steps);

// One line of progress (for a terminal); may be empty.
using ProgressFn = std::function<void(const std::string&)>;

// Runs one workload. EINVAL for bad options; EIO if the simulation could not
// be set up.
Result<RunResult> RunSim(const SimOptions& options, const ProgressFn& progress = {});

// The cost of one dirmerge of a directory present on all `options.nodes`
// nodes, measured with warm connections: a Get from a node that is not the
// manager of a directory whose VD is not resident.
Result<DirmergeResult> MeasureDirmerge(const SimOptions& options);

}  // namespace fedfs::bench
