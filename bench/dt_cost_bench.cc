// fedfs-dt-cost-bench: what one change of a virtual directory costs as the
// number of directory-table sharers grows (docs/namespace.md, "Directory
// table"). Runs the production VdService over MemNodeFs export roots on the
// fake network in simulated mode (one thread, simulated clock, a latency
// model from m2m/fake_network.h; no CPU cost model).
//
//   fedfs-dt-cost-bench [--model rdma|tcp-lan|wan] [--sharers 1,4,16,64]
//                       [--changes 10] [--slow-factor 5] [--broadcast-cap 2]
//                       [--seed 1]
//
// For each sharer count S there are N = S + 2 nodes: the manager M(P) of a
// directory P, the changer (the node that reports a change of P with
// VdService::Update) and S sharers. Before every change each sharer fetches
// VD(P) (a DT miss after the previous change: it is recorded as a sharer
// again); then the changer reports one new entry and the bench measures the
// simulated time until the change is acknowledged, and the messages and
// one-sided operations the network carried meanwhile (FakeNetwork
// TrafficStats), averaged over --changes changes (after one unmeasured
// warm-up change, which opens the connections).
//
// Variants (one table row each):
//   uniform    every link follows the model;
//   slow       one sharer's links have --slow-factor x the model's base latency;
//   broadcast  VdServiceOptions::max_sharers_per_vd = --broadcast-cap < S: the
//              manager stops recording sharers and announces every change by a
//              two-sided kNsDtInval to every live node (the fallback);
//   none       0 sharers (S = 0): the change's own round trip, the floor.
// "RTT" is one measured one-sided FetchAdd round trip from the manager to
// the slowest sharer (the largest mean over all sharers). The target: the
// acknowledgement takes the changer's round trip to the manager plus one
// parallel round to the sharers, so ack - floor ~ RTT whatever S is (not S x
// RTT), and latency / RTT stays flat as S grows.
//
// Threads: everything runs on the calling thread (the simulated network's
// owner thread).
#include <dirent.h>
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/executor.h"
#include "common/result.h"
#include "m2m/auth.h"
#include "m2m/fake_network.h"
#include "cluster/cluster.h"
#include "nodefs/mem_node_fs.h"
#include "common/path.h"
#include "vd/vd_service.h"

namespace fedfs::bench {
namespace {

using m2m::SimDuration;
using std::chrono::milliseconds;

constexpr int kVnodes = 64;
constexpr int kRttProbes = 8;

std::string NodeName(int i) { return "n" + std::to_string(i); }

double Us(SimDuration d) { return std::chrono::duration<double, std::micro>(d).count(); }

enum class Variant { kNone, kUniform, kSlow, kBroadcast };

const char* VariantName(Variant v) {
  switch (v) {
    case Variant::kNone: return "none";
    case Variant::kUniform: return "uniform";
    case Variant::kSlow: return "slow";
    case Variant::kBroadcast: return "broadcast";
  }
  return "?";
}

struct Config {
  std::string model = "rdma";
  std::vector<int> sharers = {1, 4, 16, 64};
  int changes = 10;
  double slow_factor = 5;
  size_t broadcast_cap = 2;
  uint64_t seed = 1;
};

struct Row {
  Variant variant = Variant::kUniform;
  int sharers = 0;
  double ack_us = 0;         // mean simulated time from Update to its acknowledgement
  double rtt_us = 0;         // one round trip manager -> slowest sharer
  double messages = 0;       // mean messages per change
  double one_sided = 0;      // mean one-sided operations per change
  double bumps = 0;          // mean invalidations the manager issued per change
  double broadcasts = 0;     // mean kNsDtInval per change
};

// One simulated federation: node 0 manages P, node 1 changes it, nodes
// 2..S+1 share it. Owns the network; nodes are destroyed before it.
class Federation {
 public:
  struct Node;
  Federation(const Config& cfg, const m2m::LinkModel& link, int sharers,
             ns::VdServiceOptions vo)
      : net_(NetOptions(cfg, link)), sharers_(sharers) {
    m2m::TransportOptions t;
    t.cluster_key = m2m::Bytes(m2m::kClusterKeyBytes, std::byte{0x44});
    const int n = sharers + 2;
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) ids.push_back(NodeName(i));
    for (int i = 0; i < n; ++i) {
      auto node = std::make_unique<Node>();
      node->id = ids[static_cast<size_t>(i)];
      node->fs = std::make_unique<ns::MemNodeFs>(node->id);
      node->transport = net_.NewTransport(t);
      node->vd = std::make_unique<ns::VdService>(vo, node->transport.get(), &node->view,
                                                 node->fs.get(), &inline_);
      node->vd->RegisterHandlers();
      nodes_.push_back(std::move(node));
    }
    auto ring = std::make_shared<const ns::Ring>(ids, kVnodes);
    for (auto& node : nodes_) {
      auto v = std::make_shared<ns::ClusterView>();
      v->self = node->id;
      v->epoch = 1;
      for (const auto& id : ids) v->live[id] = id;
      v->ring = ring;
      node->view.Set(std::move(v));
    }
    // P: the first /dir<k> whose manager is n0.
    for (int k = 0; path_.empty(); ++k) {
      std::string p = "/dir" + std::to_string(k);
      if (ring->Owner(p) == ids[0]) path_ = p;
    }
  }

  ~Federation() {
    for (auto& n : nodes_) n->transport->Shutdown();
    probe_regions_.clear();
    nodes_.clear();
  }

  Status Start() {
    for (auto& n : nodes_) {
      auto a = n->transport->Listen(n->id);
      if (!a) return Err(a.error());
    }
    // P exists on every node with one file each (as local programs made it).
    for (auto& n : nodes_) {
      if (auto s = n->fs->MkdirParents(ns::JoinPath(path_, "x"), {}); !s) return s;
      auto o = n->fs->Create(ns::Cred{}, ns::JoinPath(path_, "f-" + n->id), O_WRONLY, 0644);
      if (!o) return Err(o.error());
      if (auto s = n->fs->Release(o->handle); !s) return s;
    }
    // The manager builds VD(P) (dirmerge) so that changes find it resident.
    auto vd = Get(0);
    if (!vd) return Err(vd.error());
    return Ok();
  }

  Result<ns::VdPtr> Get(int i) {
    std::optional<Result<ns::VdPtr>> out;
    node(i).vd->Get(path_, [&](Result<ns::VdPtr> r) { out = std::move(r); });
    net_.RunUntilIdle();
    if (!out) return Err(EIO, "Get never completed");
    return std::move(*out);
  }

  // The changer (node 1) adds entry `name`; returns the simulated time until
  // the acknowledgement.
  Result<SimDuration> Change(const std::string& name) {
    auto o = node(1).fs->Create(ns::Cred{}, ns::JoinPath(path_, name), O_WRONLY, 0644);
    if (!o) return Err(o.error());
    if (auto s = node(1).fs->Release(o->handle); !s) return Err(s.error());
    ns::VdChange c{ns::VdChange::Kind::kAdd, name, DT_REG, node(1).id};
    std::optional<Status> done;
    std::optional<SimDuration> acked;
    const SimDuration start = net_.Now();
    node(1).vd->Update(path_, std::move(c), [&](Status s) {
      done = std::move(s);
      acked = net_.Now() - start;
    });
    net_.RunUntilIdle();
    if (!done) return Err(EIO, "Update never completed");
    if (!*done) return Err(done->error());
    return *acked;
  }

  // Mean round trip of one-sided FetchAdds from the manager to sharer `i`,
  // on a probe word registered at the sharer.
  Result<SimDuration> ProbeRtt(int i) {
    auto region = node(i).transport->Allocate(8);
    if (!region) return Err(region.error());
    auto ep = node(0).transport->GetEndpoint(node(i).id);
    auto remote = ep->Import((*region)->Export());
    if (!remote) return Err(remote.error());
    probe_regions_.push_back(std::move(*region));
    SimDuration total{0};
    for (int k = 0; k <= kRttProbes; ++k) {  // k == 0: connects, not counted
      std::optional<Result<uint64_t>> r;
      const SimDuration start = net_.Now();
      SimDuration took{0};
      ep->FetchAdd(**remote, 0, 1, std::chrono::seconds(10), [&](Result<uint64_t> v) {
        took = net_.Now() - start;
        r = std::move(v);
      });
      net_.RunUntilIdle();
      if (!r) return Err(EIO, "probe never completed");
      if (!*r) return Err(r->error());
      if (k > 0) total += took;
    }
    return total / kRttProbes;
  }

  struct Node {
    std::string id;
    std::unique_ptr<ns::MemNodeFs> fs;
    std::unique_ptr<m2m::Transport> transport;
    ns::SettableClusterView view;
    std::unique_ptr<ns::VdService> vd;  // declared last: destroyed first
  };

  Node& node(int i) { return *nodes_[static_cast<size_t>(i)]; }
  m2m::FakeNetwork& net() { return net_; }
  int sharers() const { return sharers_; }

 private:
  static m2m::FakeNetworkOptions NetOptions(const Config& cfg, const m2m::LinkModel& link) {
    m2m::FakeNetworkOptions o;
    o.mode = m2m::SchedulerMode::kSimulated;
    o.seed = cfg.seed;
    o.link = link;
    return o;
  }

  m2m::FakeNetwork net_;
  InlineExecutor inline_;
  int sharers_ = 0;
  std::string path_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<m2m::LocalRegion>> probe_regions_;
};

Result<Row> RunOne(const Config& cfg, const m2m::LinkModel& link, int sharers, Variant variant) {
  ns::VdServiceOptions vo;
  vo.rpc_timeout = milliseconds(5000);  // far above any model's round trip
  if (variant == Variant::kBroadcast) vo.max_sharers_per_vd = cfg.broadcast_cap;
  Federation f(cfg, link, sharers, vo);
  if (auto s = f.Start(); !s) return Err(s.error());
  if (variant == Variant::kSlow) {
    m2m::LinkModel slow = link;
    slow.base_latency = std::chrono::duration_cast<SimDuration>(link.base_latency *
                                                                 cfg.slow_factor);
    f.net().SetNodeModel(f.node(2).id, slow);
  }
  Row row;
  row.variant = variant;
  row.sharers = sharers;
  for (int i = 2; i < sharers + 2; ++i) {
    auto rtt = f.ProbeRtt(i);
    if (!rtt) return Err(rtt.error());
    row.rtt_us = std::max(row.rtt_us, Us(*rtt));
  }
  SimDuration total{0};
  uint64_t messages = 0, one_sided = 0, bumps = 0, broadcasts = 0;
  for (int c = 0; c <= cfg.changes; ++c) {  // c == 0: warm-up, not counted
    for (int i = 2; i < sharers + 2; ++i) {
      auto vd = f.Get(i);  // a miss after the previous change: records the sharer
      if (!vd) return Err(vd.error());
    }
    const auto before = f.node(0).vd->stats();
    f.net().ResetStats();
    auto took = f.Change("c" + std::to_string(c));
    if (!took) return Err(took.error());
    const auto traffic = f.net().TotalStats();
    const auto after = f.node(0).vd->stats();
    if (c == 0) continue;
    total += *took;
    messages += traffic.messages_sent;
    one_sided += traffic.one_sided_ops;
    bumps += after.invalidations_sent - before.invalidations_sent;
    broadcasts += after.broadcasts_sent - before.broadcasts_sent;
    if (after.invalidations_failed != before.invalidations_failed) {
      return Err(EIO, "an invalidation failed (see the log)");
    }
  }
  const double n = cfg.changes;
  row.ack_us = Us(total) / n;
  row.messages = static_cast<double>(messages) / n;
  row.one_sided = static_cast<double>(one_sided) / n;
  row.bumps = static_cast<double>(bumps) / n;
  row.broadcasts = static_cast<double>(broadcasts) / n;
  // Every sharer must have been reached by this change, one way or the other.
  const double reached = row.bumps + row.broadcasts;
  if (sharers > 0 && reached + 1e-9 < sharers) {
    return Err(EIO, "only " + std::to_string(reached) + " of " + std::to_string(sharers) +
                        " sharers invalidated per change");
  }
  return row;
}

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(std::stoi(item));
  }
  return out;
}

int Main(int argc, char** argv) {
  Config cfg;
  std::string sharers = "1,4,16,64";
  CLI::App app{"fedfs-dt-cost-bench: cost of one VD change vs directory-table sharers "
               "(simulated network)"};
  app.add_option("--model", cfg.model, "latency model")
      ->check(CLI::IsMember({"rdma", "tcp-lan", "wan"}))
      ->capture_default_str();
  app.add_option("--sharers", sharers, "sharer counts, comma-separated")->capture_default_str();
  app.add_option("--changes", cfg.changes, "changes averaged per row")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--slow-factor", cfg.slow_factor, "base-latency factor of the slow sharer")
      ->check(CLI::Range(1.0, 1000.0))
      ->capture_default_str();
  app.add_option("--broadcast-cap", cfg.broadcast_cap,
                 "max_sharers_per_vd of the broadcast rows (rows only for S > cap)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--seed", cfg.seed, "network seed (jitter)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    cfg.sharers = ParseList(sharers);
  } catch (const std::exception&) {
    std::fprintf(stderr, "fedfs-dt-cost-bench: bad --sharers '%s'\n", sharers.c_str());
    return 2;
  }
  for (int s : cfg.sharers) {
    if (s < 1 || s > 4096) {
      std::fprintf(stderr, "fedfs-dt-cost-bench: sharer counts must be 1..4096\n");
      return 2;
    }
  }
  auto link = m2m::LinkModel::Preset(cfg.model);
  if (!link) {
    std::fprintf(stderr, "fedfs-dt-cost-bench: %s\n", link.error().ToString().c_str());
    return 2;
  }

  std::vector<std::pair<int, Variant>> plan = {{0, Variant::kNone}};
  for (int s : cfg.sharers) plan.emplace_back(s, Variant::kUniform);
  for (int s : cfg.sharers) plan.emplace_back(s, Variant::kSlow);
  for (int s : cfg.sharers) {
    if (static_cast<size_t>(s) > cfg.broadcast_cap) plan.emplace_back(s, Variant::kBroadcast);
  }

  std::vector<Row> rows;
  for (const auto& [s, v] : plan) {
    auto r = RunOne(cfg, *link, s, v);
    if (!r) {
      std::fprintf(stderr, "fedfs-dt-cost-bench: %s, %d sharers: %s\n", VariantName(v), s,
                   r.error().ToString().c_str());
      return 1;
    }
    rows.push_back(*r);
  }

  const double floor_us = rows.front().ack_us;
  std::printf("fedfs-dt-cost-bench: model %s (one-way %.1f us + jitter <= %.1f us), %d changes "
              "per row, slow sharer x%.1f, broadcast cap %zu, seed %llu\n",
              cfg.model.c_str(), Us(link->base_latency), Us(link->jitter), cfg.changes,
              cfg.slow_factor, cfg.broadcast_cap, static_cast<unsigned long long>(cfg.seed));
  std::printf("nodes = sharers + 2 (manager, changer); floor = ack with 0 sharers = %.1f us "
              "(changer <-> manager round trip)\n", floor_us);
  std::printf("%-10s %7s %6s %11s %10s %9s %14s %9s %10s %7s %7s\n", "variant", "sharers",
              "nodes", "ack_us", "rtt_us", "ack/rtt", "(ack-floor)/rtt", "messages",
              "one_sided", "bumps", "bcasts");
  for (const Row& r : rows) {
    char ratio[32] = "-", inval[32] = "-";
    if (r.rtt_us > 0) {
      std::snprintf(ratio, sizeof(ratio), "%.2f", r.ack_us / r.rtt_us);
      std::snprintf(inval, sizeof(inval), "%.2f", (r.ack_us - floor_us) / r.rtt_us);
    }
    char rtt[32] = "-";
    if (r.rtt_us > 0) std::snprintf(rtt, sizeof(rtt), "%.1f", r.rtt_us);
    std::printf("%-10s %7d %6d %11.1f %10s %9s %14s %9.1f %10.1f %7.1f %7.1f\n",
                VariantName(r.variant), r.sharers, r.sharers + 2, r.ack_us, rtt, ratio, inval,
                r.messages, r.one_sided, r.bumps, r.broadcasts);
  }
  return 0;
}

}  // namespace
}  // namespace fedfs::bench

int main(int argc, char** argv) { return fedfs::bench::Main(argc, argv); }
