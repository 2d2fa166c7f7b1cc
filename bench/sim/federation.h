// The simulator's federation (bench/sim/sim.h): N nodes in one process on
// the fake network in simulated time, each built by node::Node -- the
// daemon's wiring: file service, VD service and its blocking client,
// facade, directory operations -- over in-memory parts only where the
// daemon has hardware or disks: the fake network's transport, a MemNodeFs
// export root (behind ChargedNodeFs, the local cost model), a MemKv journal,
// and a FiberExecutor for the services' blocking work. Every node's cluster
// view is built directly (a ring over the live nodes, a new epoch on every
// change). The facade's calls block: they are made from fibers
// (bench/sim/fibers.h).
//
// Threads: one (the simulation's). Internal to fedfs_bench_sim.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bench/sim/charged_fs.h"
#include "bench/sim/fibers.h"
#include "bench/sim/sim.h"
#include "cluster/cluster.h"
#include "dirops/kv.h"
#include "m2m/fake_network.h"
#include "m2m/faulty_transport.h"
#include "node/node.h"
#include "nodefs/mem_node_fs.h"

namespace fedfs::bench {

struct SimNode {
  std::string id;
  std::unique_ptr<ns::MemNodeFs> root;     // the export root
  std::unique_ptr<ChargedNodeFs> local;    // what the node's parts call
  std::unique_ptr<ns::MemKv> kv;
  std::unique_ptr<m2m::Transport> transport;
  m2m::FaultyTransport* faults = nullptr;  // `transport`, when it injects faults
  ns::SettableClusterView view;            // replaced on membership changes
  std::unique_ptr<node::Node> node;
  bool alive = true;
};

class Federation {
 public:
  // The nodes, listening, with their first views. EINVAL/EIO on failure.
  static Result<std::unique_ptr<Federation>> Create(const SimOptions& o);
  // The clients and their remote sessions stop (goodbyes sent in simulated
  // time), then the services, the transports, the network.
  ~Federation();
  Federation(const Federation&) = delete;
  Federation& operator=(const Federation&) = delete;

  // A new epoch: every live node gets a view of the live set (dead nodes
  // keep their old view: they hear nothing).
  void PublishViews();
  // Kills (silent to everyone) or revives node i, and publishes views.
  void SetAlive(int i, bool alive);

  int Index(const std::string& id) const { return std::stoi(id.substr(1)); }
  // N * the largest ring share of a live node (1: perfectly even).
  double RingImbalance() const;
  // Faults the nodes' transports injected so far (SimOptions::faults).
  uint64_t FaultsInjected() const;
  int size() const { return static_cast<int>(nodes_.size()); }
  SimNode& node(int i) { return *nodes_[static_cast<size_t>(i)]; }
  m2m::FakeNetwork& net() { return *net_; }
  FiberScheduler& fibers() { return *fibers_; }
  m2m::SimDuration local_cost() const { return local_cost_; }

  // Setup, as local programs would: direct MemNodeFs calls, no messages.
  void SetupDir(int i, const std::string& dir);
  // A file of `data` (empty by default).
  void SetupFile(int i, const std::string& path, std::span<const std::byte> data = {});

 private:
  Federation(const SimOptions& o, const m2m::LinkModel& link);
  Status Build(const SimOptions& o);

  std::unique_ptr<m2m::FakeNetwork> net_;
  std::unique_ptr<FiberScheduler> fibers_;
  std::unique_ptr<FiberExecutor> pool_;
  const m2m::SimDuration local_cost_;
  const m2m::SimDuration disk_read_cost_;
  const uint32_t vnodes_;
  std::vector<std::unique_ptr<SimNode>> nodes_;
  uint64_t epoch_ = 0;
};

// Node i's options: the daemon's defaults (fedfsd's NodeOptions) but for
// what the simulation varies (directory table, placement, the file-data
// cache: without the memory check's thread or forwarding's; with it, the
// holders' callbacks, which keep its blocks exact), with id NodeId(i)
// as its address and tag i + 1. Shared with tests that wire the same nodes
// over other environments.
node::NodeOptions SimNodeOptions(const SimOptions& o, int i);

// The link model the options name (the preset with its overrides).
Result<m2m::LinkModel> LinkOf(const SimOptions& o);

}  // namespace fedfs::bench
