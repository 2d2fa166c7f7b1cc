// The namespace-scalability simulation (bench/sim/sim.h).
//
// Structure: Federation (bench/sim/federation.h) owns the fake network, the
// fibers and the nodes, each built by node::Node as the daemon builds its
// own; Driver runs one workload on it: clients with `concurrency` slots
// each, every slot a fiber issuing operations one after the other through
// its node's facade (PathClient: Lookup of each component, then the
// operation), exactly as FUSE requests reach a daemon's facade. Nothing here
// knows how an operation is done.
#include "bench/sim/sim.h"

#include "m2m/faulty_transport.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <set>

#include "bench/sim/federation.h"
#include "bench/sim/path_client.h"
#include "bench/sim/reads.h"
#include "bench/sim/zipf.h"
#include "common/cooperative.h"
#include "common/path.h"
#include "common/rpc_methods.h"

namespace fedfs::bench {

namespace {

using m2m::SimDuration;
using std::chrono::duration;

const std::vector<std::string>& Workloads() {
  static const std::vector<std::string> w = {"create-stat-private", "create-stat-shared",
                                             "fanout-wide",         "fanout-deep",
                                             "hot-dir",             "zipf-lookup",
                                             "churn",               "read-remote"};
  return w;
}

double Us(SimDuration d) { return duration<double, std::micro>(d).count(); }

std::string MethodName(uint16_t m) {
  switch (static_cast<RpcMethod>(m)) {
    case RpcMethod::kNsListLocal: return "list_local";
    case RpcMethod::kNsVdGet: return "vd_get";
    case RpcMethod::kNsVdUpdate: return "vd_update";
    case RpcMethod::kNsConflicts: return "conflicts";
    case RpcMethod::kNsVdDrop: return "vd_drop";
    case RpcMethod::kNsDtInval: return "dt_inval";
    case RpcMethod::kNsVdRecall: return "vd_recall";
    case RpcMethod::kNsVdRenew: return "vd_renew";
    case RpcMethod::kNsVdGetName: return "vd_get_name";
    case RpcMethod::kFsHello: return "fs_hello";
    case RpcMethod::kFsMeta: return "fs_meta";
    case RpcMethod::kFsData: return "fs_data";
    case RpcMethod::kFsAttrChanged: return "fs_attr_changed";
    default: return "method_" + std::to_string(m);
  }
}

struct Totals {
  m2m::TrafficStats traffic;
  std::vector<ns::VdService::Stats> vd;
  // Summed over the nodes: their caches, and their export roots' reads.
  uint64_t cache_hits = 0, cache_misses = 0, peer_hits = 0, tag_misses = 0, forwarded = 0;
  uint64_t disk_reads = 0, disk_read_bytes = 0;
};

Totals Snapshot(Federation& f) {
  Totals t;
  t.traffic = f.net().TotalStats();
  t.vd.reserve(static_cast<size_t>(f.size()));
  for (int i = 0; i < f.size(); ++i) {
    SimNode& n = f.node(i);
    t.vd.push_back(n.node->vd_service().stats());
    t.disk_reads += n.local->reads();
    t.disk_read_bytes += n.local->read_bytes();
    if (const coop::BlockCache* c = n.node->cache()) {
      const auto s = c->stats();
      t.cache_hits += s.hits;
      t.cache_misses += s.misses;
    }
    if (const coop::PeerFetch* p = n.node->peers()) {
      const auto s = p->stats();
      t.peer_hits += s.remote_hits;
      t.tag_misses += s.tag_misses;
    }
    if (const coop::Forwarder* fw = n.node->forwarder()) t.forwarded += fw->stats().forwarded;
  }
  return t;
}

// Requests per method name sent between two snapshots.
std::map<std::string, uint64_t> RequestsBetween(const m2m::TrafficStats& before,
                                                const m2m::TrafficStats& after) {
  std::map<std::string, uint64_t> out;
  for (const auto& [m, st] : after.per_method) {
    uint64_t prev = 0;
    if (auto it = before.per_method.find(m); it != before.per_method.end()) {
      prev = it->second.requests;
    }
    if (st.requests > prev) out[MethodName(m)] = st.requests - prev;
  }
  return out;
}

// ---- Workloads -----------------------------------------------------------------

struct OpSpec {
  std::string kind;  // create | stat | unlink | lookup | read
  std::string path;
  RemoteReads::Op read;  // read
};

// Per (client, slot) generator state.
struct Slot {
  int client = 0;
  int index = 0;
  uint64_t made = 0;
  std::string last;                // last file this slot created
  std::vector<std::string> mine;   // hot-dir: files this slot created and not removed
  bool create_next = true;
};

class Driver {
 public:
  Driver(const SimOptions& o, Federation& f, const ProgressFn& progress)
      : o_(o), f_(f), progress_(progress), rng_(o.seed * 0x9e3779b97f4a7c15ULL + 7) {}

  uint64_t Setup();  // returns the number of directories
  Result<RunResult> Run();
  // One operation from `node`'s client, run to completion; true iff it
  // succeeded.
  bool RunOne(int node, OpSpec spec);

 private:
  OpSpec Next(Slot& s);
  // A slot's fiber: operations one after the other until the phase's limit.
  void SlotLoop(size_t slot);
  // One operation through `node`'s facade (in a fiber); true iff it succeeded.
  bool Perform(int node, const OpSpec& spec);
  void Finish(const std::string& kind, SimDuration t0, bool ok);
  void MaybeChurn();
  // read-remote: node 0 holds the files and runs no client.
  int ClientNode(int client) const {
    if (reads_) return 1 + client % (f_.size() - 1);
    return client % f_.size();
  }
  PathClient& Client(int node);
  // Client `client`'s j-th private directory.
  std::string ClientDir(int client, uint64_t j = 0) const {
    std::string d = "/p/c" + std::to_string(client);
    if (o_.dirs_per_client > 1) d += "d" + std::to_string(j % static_cast<uint64_t>(o_.dirs_per_client));
    return d;
  }
  void RunPhase(uint64_t ops);
  size_t Uniform(size_t n) { return static_cast<size_t>(rng_() % n); }

  const SimOptions& o_;
  Federation& f_;
  const ProgressFn& progress_;
  std::mt19937_64 rng_;
  std::vector<Slot> slots_;
  std::map<int, std::unique_ptr<PathClient>> clients_;  // per node
  // resolve = "parent": the parent directory's inode, looked up once per
  // node (as a kernel keeps the dentries of a working directory).
  std::map<std::pair<int, std::string>, uint64_t> parents_;
  uint64_t limit_ = 0;       // operations the current phase issues
  bool measuring_ = false;   // false during the warm-up
  uint64_t issued_ = 0;
  uint64_t completed_ = 0;
  uint64_t errors_ = 0;
  SimDuration start_{0}, last_done_{0};
  std::map<std::string, std::vector<int64_t>> lat_;  // ns per op kind
  std::map<std::string, uint64_t> op_errors_;
  uint64_t next_progress_ = 0;
  // Workload data.
  int wide_dirs_ = 0;
  int deep_levels_ = 16;
  std::vector<std::string> hot_files_;
  std::vector<std::string> tree_files_;
  std::unique_ptr<Zipf> zipf_;
  std::unique_ptr<RemoteReads> reads_;  // read-remote
  // Churn.
  std::vector<uint64_t> churn_at_;
  size_t churn_next_ = 0;
  int churn_victim_ = -1;
};

uint64_t Driver::Setup() {
  const int n = f_.size();
  const std::string& w = o_.workload;
  if (w == "read-remote") reads_ = std::make_unique<RemoteReads>(o_, f_);
  const int clients = o_.clients > 0 ? o_.clients : (reads_ ? n - 1 : n);
  for (int c = 0; c < clients; ++c) {
    for (int s = 0; s < o_.concurrency; ++s) slots_.push_back(Slot{c, s});
  }
  uint64_t dirs = 0;
  if (w == "create-stat-private" || w == "churn") {
    const auto per = static_cast<uint64_t>(o_.dirs_per_client);
    for (int c = 0; c < clients; ++c) {
      for (uint64_t j = 0; j < per; ++j) f_.SetupDir(ClientNode(c), ClientDir(c, j));
    }
    dirs = 1 + static_cast<uint64_t>(clients) * per;
  } else if (w == "create-stat-shared") {
    for (int i = 0; i < n; ++i) f_.SetupDir(i, "/shared");
    for (uint64_t k = 0; k < o_.dir_entries; ++k) {
      f_.SetupFile(static_cast<int>(k % static_cast<uint64_t>(n)), "/shared/e" + std::to_string(k));
    }
    dirs = 1;
  } else if (w == "fanout-wide") {
    wide_dirs_ = std::max(64, 4 * n);
    for (int d = 0; d < wide_dirs_; ++d) f_.SetupDir(d % n, "/w/d" + std::to_string(d));
    dirs = 1 + static_cast<uint64_t>(wide_dirs_);
  } else if (w == "fanout-deep") {
    std::string p = "/deep";
    for (int l = 1; l <= deep_levels_; ++l) p += "/l" + std::to_string(l);
    f_.SetupDir(0, p);
    dirs = 1 + static_cast<uint64_t>(deep_levels_);
  } else if (w == "hot-dir") {
    for (int i = 0; i < n; ++i) f_.SetupDir(i, "/hot");
    for (int h = 0; h < 1024; ++h) {
      hot_files_.push_back("/hot/h" + std::to_string(h));
      f_.SetupFile(h % n, hot_files_.back());
    }
    dirs = 1;
  } else if (w == "read-remote") {
    reads_->Setup();
    dirs = 2;
  } else if (w == "zipf-lookup") {
    std::vector<std::string> level{"/z"};
    for (int d = 0; d < o_.tree_depth; ++d) {
      std::vector<std::string> next;
      for (const auto& parent : level) {
        for (int k = 0; k < o_.tree_fanout; ++k) next.push_back(parent + "/d" + std::to_string(k));
      }
      for (const auto& dir : next) {
        for (int k = 0; k < o_.files_per_dir; ++k) {
          std::string file = dir + "/f" + std::to_string(k);
          f_.SetupFile(static_cast<int>(Uniform(static_cast<size_t>(n))), file);
          tree_files_.push_back(std::move(file));
        }
      }
      dirs += next.size();
      level = std::move(next);
    }
    // Popularity ranks: a seeded permutation, so hot files are spread over
    // the tree rather than all in its first directory.
    std::shuffle(tree_files_.begin(), tree_files_.end(), rng_);
    zipf_ = std::make_unique<Zipf>(tree_files_.size(), o_.zipf_s);
    dirs += 1;
  }
  if (w == "churn") {
    for (int e = 1; e <= o_.churn_events; ++e) {
      churn_at_.push_back(o_.ops * static_cast<uint64_t>(e) /
                          static_cast<uint64_t>(o_.churn_events + 1));
    }
  }
  return dirs;
}

OpSpec Driver::Next(Slot& s) {
  const std::string& w = o_.workload;
  const std::string tag = std::to_string(s.client) + "-" + std::to_string(s.index) + "-";
  if (w == "zipf-lookup") return OpSpec{"lookup", tree_files_[(*zipf_)(rng_)], {}};
  if (reads_) {
    const RemoteReads::Op r = reads_->Next(rng_);
    return OpSpec{r.write ? "write" : "read", {}, r};
  }
  if (w == "hot-dir") {
    const size_t r = Uniform(100);
    if (r < 5 || (r < 10 && s.mine.empty())) {
      std::string p = "/hot/c" + tag + std::to_string(s.made++);
      s.mine.push_back(p);
      return OpSpec{"create", p, {}};
    }
    if (r < 10) {
      std::string p = s.mine.back();
      s.mine.pop_back();
      return OpSpec{"unlink", p, {}};
    }
    // Stat a pre-existing file (never one being removed by another slot).
    return OpSpec{"stat", hot_files_[Uniform(hot_files_.size())], {}};
  }
  // Create/stat pairs: create a new file, then stat it.
  if (!s.create_next) {
    s.create_next = true;
    return OpSpec{"stat", s.last, {}};
  }
  s.create_next = false;
  std::string dir;
  if (w == "create-stat-private" || w == "churn") dir = ClientDir(s.client, s.made);
  else if (w == "create-stat-shared") dir = "/shared";
  else if (w == "fanout-wide") dir = "/w/d" + std::to_string(Uniform(static_cast<size_t>(wide_dirs_)));
  else {  // fanout-deep
    dir = "/deep";
    const size_t depth = 1 + Uniform(static_cast<size_t>(deep_levels_));
    for (size_t l = 1; l <= depth; ++l) dir += "/l" + std::to_string(l);
  }
  s.last = ns::JoinPath(dir, "f" + tag + std::to_string(s.made++));
  return OpSpec{"create", s.last, {}};
}

PathClient& Driver::Client(int node) {
  auto& c = clients_[node];
  // As root with umask 022, as the simulator's files always were.
  if (!c) c = std::make_unique<PathClient>(&f_.node(node).node->vfs(), ns::Cred{0, 0, {}, 022});
  return *c;
}

bool Driver::Perform(int node, const OpSpec& spec) {
  if (spec.kind == "read" || spec.kind == "write") return reads_->Perform(node, spec.read);
  PathClient& pc = Client(node);
  if (o_.resolve == "walk") return pc.Run(PathOp{spec.kind, spec.path, {}}).ok();
  const std::string dir(ns::ParentPath(spec.path));
  const std::string name(ns::BaseName(spec.path));
  uint64_t parent = 0;
  if (auto it = parents_.find({node, dir}); it != parents_.end()) {
    parent = it->second;
  } else {
    std::vector<uint64_t> held;  // kept: the inode stays known
    auto ino = pc.Walk(dir, &held);
    if (!ino) return false;
    parents_[{node, dir}] = parent = *ino;
  }
  if (spec.kind == "create") return pc.Create(parent, name).ok();
  if (spec.kind == "stat") return pc.Stat(parent, name).ok();
  if (spec.kind == "unlink") return pc.Unlink(parent, name).ok();
  return pc.Lookup(parent, name).ok();
}

void Driver::SlotLoop(size_t slot) {
  while (issued_ < limit_) {
    Slot& s = slots_[slot];
    const int node = ClientNode(s.client);
    if (!f_.node(node).alive) {
      SleepFor(std::chrono::milliseconds(1));  // the client waits for its node
      continue;
    }
    ++issued_;
    const OpSpec spec = Next(s);
    const SimDuration t0 = f_.net().Now();
    SleepFor(f_.local_cost());  // the client's own request overhead
    Finish(spec.kind, t0, Perform(node, spec));
  }
}

void Driver::Finish(const std::string& kind, SimDuration t0, bool ok) {
  const SimDuration now = f_.net().Now();
  lat_[kind].push_back((now - t0).count());
  if (!ok) {
    ++errors_;
    ++op_errors_[kind];
  }
  ++completed_;
  last_done_ = std::max(last_done_, now);
  if (progress_ && completed_ >= next_progress_) {
    progress_(std::string(measuring_ ? "  " : "  warm-up ") + o_.workload +
              " N=" + std::to_string(f_.size()) + ": " + std::to_string(completed_) + "/" +
              std::to_string(limit_) + " ops");
    next_progress_ += std::max<uint64_t>(1, limit_ / 10);
  }
  if (measuring_) MaybeChurn();
}

void Driver::MaybeChurn() {
  while (churn_next_ < churn_at_.size() && completed_ >= churn_at_[churn_next_]) {
    if (churn_victim_ < 0) {
      // A node other than n0000 leaves (killed: silent to everyone).
      churn_victim_ = 1 + static_cast<int>(Uniform(static_cast<size_t>(f_.size() - 1)));
      f_.SetAlive(churn_victim_, false);
    } else {
      f_.SetAlive(churn_victim_, true);  // and rejoins with its export root
      churn_victim_ = -1;
    }
    ++churn_next_;
  }
}

bool Driver::RunOne(int node, OpSpec spec) {
  bool ok = false;
  f_.fibers().Spawn([&] {
    const SimDuration t0 = f_.net().Now();
    SleepFor(f_.local_cost());
    ok = Perform(node, spec);
    Finish(spec.kind, t0, ok);
  });
  f_.net().RunUntilIdle();
  return ok;
}

// Issues `ops` operations over all slots and runs the network until they
// (and everything they caused) are done.
void Driver::RunPhase(uint64_t ops) {
  limit_ = ops;
  for (size_t s = 0; s < slots_.size(); ++s) f_.fibers().Spawn([this, s] { SlotLoop(s); });
  f_.net().RunUntilIdle();
}

Result<RunResult> Driver::Run() {
  const auto wall0 = std::chrono::steady_clock::now();
  RunResult out;
  out.options = o_;
  out.directories = Setup();
  if (o_.warmup_ops > 0) {
    const Totals w0 = Snapshot(f_);
    RunPhase(o_.warmup_ops);
    const Totals w1 = Snapshot(f_);
    out.warmup_done = completed_;
    out.warmup_messages = w1.traffic.messages_sent - w0.traffic.messages_sent;
    out.warmup_requests = RequestsBetween(w0.traffic, w1.traffic);
    for (size_t i = 0; i < w1.vd.size(); ++i) {
      out.warmup_dirmerges += w1.vd[i].dirmerges - w0.vd[i].dirmerges;
    }
    // Only the measured phase is reported.
    issued_ = completed_ = errors_ = 0;
    next_progress_ = 0;
    lat_.clear();
    op_errors_.clear();
  }
  measuring_ = true;
  const Totals before = Snapshot(f_);
  start_ = last_done_ = f_.net().Now();
  RunPhase(o_.ops);
  const Totals after = Snapshot(f_);
  out.ring_imbalance = f_.RingImbalance();

  out.ops_done = completed_;
  out.errors = errors_;
  out.faults_injected = f_.FaultsInjected();
  out.sim_seconds = duration<double>(last_done_ - start_).count();
  out.ops_per_sec = out.sim_seconds > 0 ? static_cast<double>(completed_) / out.sim_seconds : 0;
  for (auto& [kind, v] : lat_) {
    std::sort(v.begin(), v.end());
    OpStats s;
    s.count = v.size();
    s.errors = op_errors_[kind];
    auto at = [&](double q) {
      size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
      return static_cast<double>(v[std::min(i, v.size() - 1)]) / 1000.0;
    };
    s.p50_us = at(0.50);
    s.p99_us = at(0.99);
    double sum = 0;
    for (int64_t x : v) sum += static_cast<double>(x);
    s.mean_us = sum / static_cast<double>(v.size()) / 1000.0;
    out.per_op[kind] = s;
  }
  out.messages = after.traffic.messages_sent - before.traffic.messages_sent;
  out.bytes = after.traffic.bytes_sent - before.traffic.bytes_sent;
  out.requests = RequestsBetween(before.traffic, after.traffic);
  if (completed_ > 0) {
    out.msgs_per_op = static_cast<double>(out.messages) / static_cast<double>(completed_);
    out.bytes_per_op = static_cast<double>(out.bytes) / static_cast<double>(completed_);
  }
  uint64_t total = 0;
  for (size_t i = 0; i < after.vd.size(); ++i) {
    const auto& a = after.vd[i];
    const auto& b = before.vd[i];
    const uint64_t served = (a.gets_served - b.gets_served) +
                            (a.updates_applied - b.updates_applied) + (a.dirmerges - b.dirmerges);
    out.mgr_max = std::max(out.mgr_max, served);
    total += served;
    out.gets_served += a.gets_served - b.gets_served;
    out.dirmerges += a.dirmerges - b.dirmerges;
    out.updates_applied += a.updates_applied - b.updates_applied;
  }
  out.mgr_mean = static_cast<double>(total) / static_cast<double>(after.vd.size());
  out.mgr_imbalance = out.mgr_mean > 0 ? static_cast<double>(out.mgr_max) / out.mgr_mean : 0;
  out.changes = out.updates_applied;
  // Directory tables: hits and misses over all nodes; invalidations are the
  // managers' one-sided bumps plus broadcast messages (overflow fallback).
  for (size_t i = 0; i < after.vd.size(); ++i) {
    const auto& a = after.vd[i];
    const auto& b = before.vd[i];
    if (!a.has_dt) continue;
    out.dt_measured = true;
    out.dt_hits += a.dt.hits - b.dt.hits;
    out.dt_misses += a.dt.misses - b.dt.misses;
    out.invalidations += (a.invalidations_sent - b.invalidations_sent) +
                         (a.broadcasts_sent - b.broadcasts_sent);
  }
  if (out.dt_hits + out.dt_misses > 0) {
    out.dt_hit_ratio = static_cast<double>(out.dt_hits) /
                       static_cast<double>(out.dt_hits + out.dt_misses);
  }
  if (out.changes > 0) {
    out.invalidations_per_change =
        static_cast<double>(out.invalidations) / static_cast<double>(out.changes);
  }
  if (o_.cache_bytes > 0) {
    out.cache_measured = true;
    out.cache_hits = after.cache_hits - before.cache_hits;
    out.cache_misses = after.cache_misses - before.cache_misses;
    out.peer_hits = after.peer_hits - before.peer_hits;
    out.tag_misses = after.tag_misses - before.tag_misses;
    out.forwarded = after.forwarded - before.forwarded;
  }
  out.disk_reads = after.disk_reads - before.disk_reads;
  out.disk_read_bytes = after.disk_read_bytes - before.disk_read_bytes;
  if (reads_) {
    out.bad_reads = reads_->bad_reads();
    f_.fibers().Spawn([this] { reads_->CloseAll(); });
    f_.net().RunUntilIdle();
  }
  out.wall_seconds =
      duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return out;
}

}  // namespace

Status ValidateSimOptions(const SimOptions& o) {
  if (o.nodes < 1) return Err(EINVAL, "--nodes must be at least 1");
  if (o.nodes > 100000) return Err(EINVAL, "--nodes above 100000");
  if (auto m = m2m::LinkModel::Preset(o.model); !m) {
    return Err(EINVAL, "--model must be zero, rdma, tcp-lan or wan");
  }
  if (std::find(Workloads().begin(), Workloads().end(), o.workload) == Workloads().end()) {
    return Err(EINVAL, "unknown --workload " + o.workload);
  }
  if (o.concurrency < 1) return Err(EINVAL, "--concurrency must be at least 1");
  if (o.clients < 0) return Err(EINVAL, "--clients must not be negative");
  if (o.resolve != "walk" && o.resolve != "parent") {
    return Err(EINVAL, "--resolve must be walk or parent");
  }
  if (o.placement != "local" && o.placement != "hash") {
    return Err(EINVAL, "--placement must be local or hash");
  }
  if (o.local_op_us < 0) return Err(EINVAL, "--local-op-us must not be negative");
  if (o.zipf_s < 0) return Err(EINVAL, "--zipf-s must not be negative");
  if (o.workload == "read-remote") {
    if (o.nodes < 2) return Err(EINVAL, "read-remote needs at least 2 nodes");
    if (o.read_bytes == 0 || o.read_bytes % 8 != 0 || o.read_bytes > (uint64_t{16} << 20)) {
      return Err(EINVAL, "--read-bytes must be a multiple of 8 in (0, 16 MiB]");
    }
    if (o.file_bytes == 0 || o.file_bytes % o.read_bytes != 0 || o.file_bytes > (uint64_t{1} << 30)) {
      return Err(EINVAL, "--file-bytes must be a multiple of --read-bytes, at most 1 GiB");
    }
    if (o.read_files == 0 || o.read_files * (o.file_bytes / o.read_bytes) > (uint64_t{1} << 24)) {
      return Err(EINVAL, "--read-files: between 1 and 2^24 blocks of --read-bytes in all");
    }
    if (o.read_files >= 65535 || o.file_bytes > (uint64_t{128} << 20)) {
      return Err(EINVAL, "--read-files below 65535, --file-bytes at most 128 MiB");
    }
    if (o.write_percent > 100) return Err(EINVAL, "--write-percent above 100");
    if (o.ops + o.warmup_ops >= (uint64_t{1} << 24)) {
      return Err(EINVAL, "read-remote: --ops and --warmup below 2^24 in all");
    }
    if (o.read_files * o.file_bytes > (uint64_t{16} << 30)) {
      return Err(EINVAL, "--read-files x --file-bytes above 16 GiB (held in memory)");
    }
  }
  if (o.disk_read_us < 0) return Err(EINVAL, "--disk-read-us must not be negative");
  if (o.cache_bytes > 0 && (o.cache_block == 0 || o.cache_bytes < o.cache_block)) {
    return Err(EINVAL, "--cache must hold at least one --cache-block");
  }
  if (o.workload == "churn" && o.nodes < 2) return Err(EINVAL, "churn needs at least 2 nodes");
  if (o.vnodes < 1) return Err(EINVAL, "--vnodes must be at least 1");
  if (o.dirs_per_client < 1) return Err(EINVAL, "--dirs-per-client must be at least 1");
  if (o.dir_entries > 0 && o.workload != "create-stat-shared") {
    return Err(EINVAL, "--dir-entries needs --workload create-stat-shared");
  }
  if (o.dir_entries > 10'000'000) return Err(EINVAL, "--dir-entries above 10000000");
  if (o.tree_fanout < 1 || o.tree_depth < 1 || o.files_per_dir < 1) {
    return Err(EINVAL, "tree shape must be positive");
  }
  if (!o.faults.empty()) {
    auto spec = m2m::ParseFaultSpec(o.faults);
    if (!spec) return Err(EINVAL, "--faults: " + spec.error().context);
    if (spec->delay > 0) return Err(EINVAL, "--faults: no delays in the simulator (the link model has jitter)");
  }
  return Ok();
}

Result<RunResult> RunSim(const SimOptions& options, const ProgressFn& progress) {
  if (auto v = ValidateSimOptions(options); !v) return Err(v.error());
  auto f = Federation::Create(options);
  if (!f) return Err(f.error());
  Driver d(options, **f, progress);
  return d.Run();
}

Result<ScriptResult> RunScript(const SimOptions& options, const std::vector<std::string>& dirs,
                               const std::vector<ScriptOp>& ops) {
  if (auto v = ValidateSimOptions(options); !v) return Err(v.error());
  for (const auto& op : ops) {
    if ((op.kind != "create" && op.kind != "stat") || op.node < 0 || op.node >= options.nodes) {
      return Err(EINVAL, "bad script operation " + op.kind + " " + op.path);
    }
  }
  auto fed = Federation::Create(options);
  if (!fed) return Err(fed.error());
  Federation& f = **fed;
  const ProgressFn no_progress;  // the Driver keeps a reference
  Driver d(options, f, no_progress);
  for (const auto& dir : dirs) {
    for (int i = 0; i < f.size(); ++i) f.SetupDir(i, dir);
  }
  ScriptResult out;
  for (int i = 0; i < f.size(); ++i) out.ids.push_back(f.node(i).id);
  out.before = Snapshot(f).vd;
  for (const auto& op : ops) out.ok.push_back(d.RunOne(op.node, OpSpec{op.kind, op.path, {}}));
  out.after = Snapshot(f).vd;
  return out;
}

Result<std::vector<PathAnswer>> RunPathScript(const SimOptions& options,
                                              const std::vector<PathStep>& steps) {
  if (auto v = ValidateSimOptions(options); !v) return Err(v.error());
  auto fed = Federation::Create(options);
  if (!fed) return Err(fed.error());
  Federation& f = **fed;
  std::vector<PathAnswer> out;
  for (const PathStep& step : steps) {
    if (step.node < 0 || step.node >= f.size()) return Err(EINVAL, "no node " + std::to_string(step.node));
    PathClient client(&f.node(step.node).node->vfs(), ns::Cred{0, 0, {}, 022});
    f.fibers().Spawn([&] { out.push_back(client.Run(step.op)); });
    f.net().RunUntilIdle();
  }
  return out;
}

PlacementResult MeasurePlacement(int nodes, uint32_t vnodes, int dirs_per_client) {
  PlacementResult out;
  out.nodes = nodes;
  out.vnodes = vnodes;
  out.dirs_per_client = dirs_per_client;
  std::vector<std::string> ids;
  for (int i = 0; i < nodes; ++i) ids.push_back(NodeId(i));
  const ns::Ring ring(ids, vnodes);
  std::map<std::string, uint64_t> managed;
  double max_share = 0;
  for (const auto& id : ids) {
    managed[id] = 0;
    max_share = std::max(max_share, ring.Share(id));
  }
  for (int c = 0; c < nodes; ++c) {
    for (int j = 0; j < dirs_per_client; ++j) {
      // The names Driver::ClientDir gives.
      std::string d = "/p/c" + std::to_string(c);
      if (dirs_per_client > 1) d += "d" + std::to_string(j);
      ++managed[ring.Owner(d)];
      ++out.directories;
    }
  }
  for (const auto& [id, n] : managed) out.max_dirs = std::max(out.max_dirs, n);
  out.mean_dirs = static_cast<double>(out.directories) / static_cast<double>(std::max(1, nodes));
  out.dirs_imbalance = out.mean_dirs > 0 ? static_cast<double>(out.max_dirs) / out.mean_dirs : 0;
  out.ring_imbalance = max_share * static_cast<double>(nodes);
  return out;
}

Result<DirmergeResult> MeasureDirmerge(const SimOptions& options) {
  if (auto v = ValidateSimOptions(options); !v) return Err(v.error());
  auto fed = Federation::Create(options);
  if (!fed) return Err(fed.error());
  Federation& f = **fed;
  const int n = f.size();
  // Two directories with the same manager: the first warms the manager's
  // connections to every node, the second is measured.
  auto view = f.node(0).view.Current();
  const std::string d0 = "/dm/x0";
  const std::string mgr = view->Manager(d0);
  std::string d1;
  for (int k = 1; d1.empty(); ++k) {
    std::string c = "/dm/x" + std::to_string(k);
    if (view->Manager(c) == mgr) d1 = c;
  }
  for (int i = 0; i < n; ++i) {
    for (const auto& d : {d0, d1}) {
      f.SetupDir(i, d);
      for (int e = 0; e < options.dirmerge_entries; ++e) {
        f.SetupFile(i, d + "/e" + std::to_string(i) + "-" + std::to_string(e));
      }
    }
  }
  const int client = f.Index(mgr) == 0 ? std::min(1, n - 1) : 0;
  bool ok = false;
  f.node(client).node->vd_service().Get(d0, [&](Result<ns::VdPtr> r) { ok = r.has_value(); });
  f.net().RunUntilIdle();
  if (!ok) return Err(EIO, "warm-up dirmerge failed");
  const Totals before = Snapshot(f);
  const SimDuration t0 = f.net().Now();
  SimDuration t1{0};
  uint64_t entries = 0;
  ok = false;
  f.node(client).node->vd_service().Get(d1, [&](Result<ns::VdPtr> r) {
    t1 = f.net().Now();
    ok = r.has_value();
    if (ok) entries = (*r)->entries.size();
  });
  f.net().RunUntilIdle();
  if (!ok) return Err(EIO, "measured dirmerge failed");
  const Totals after = Snapshot(f);
  DirmergeResult out;
  out.nodes = n;
  out.messages = after.traffic.messages_sent - before.traffic.messages_sent;
  out.bytes = after.traffic.bytes_sent - before.traffic.bytes_sent;
  auto req = [](const m2m::TrafficStats& s, uint16_t m) -> uint64_t {
    auto it = s.per_method.find(m);
    return it == s.per_method.end() ? 0 : it->second.requests;
  };
  const uint16_t list = MethodId(RpcMethod::kNsListLocal);
  out.list_requests = req(after.traffic, list) - req(before.traffic, list);
  out.sim_us = Us(t1 - t0);
  out.entries = entries;
  return out;
}

}  // namespace fedfs::bench
