// The simulator's federation (bench/sim/federation.h).
#include "bench/sim/federation.h"

#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "common/path.h"
#include "m2m/auth.h"

namespace fedfs::bench {

namespace {

using std::chrono::nanoseconds;

std::string NodeName(int i) {
  char b[16];
  std::snprintf(b, sizeof(b), "n%04d", i);
  return b;
}

m2m::FakeNetworkOptions NetOptions(const SimOptions& o, const m2m::LinkModel& link) {
  m2m::FakeNetworkOptions n;
  n.mode = m2m::SchedulerMode::kSimulated;
  n.seed = o.seed;
  n.link = link;
  return n;
}

}  // namespace

std::string NodeId(int i) { return NodeName(i); }

Result<m2m::LinkModel> LinkOf(const SimOptions& o) {
  auto m = m2m::LinkModel::Preset(o.model);
  if (!m) return Err(m.error());
  if (o.latency_us) m->base_latency = nanoseconds(static_cast<int64_t>(*o.latency_us * 1000));
  if (o.bandwidth) m->bytes_per_second = *o.bandwidth;
  m->jitter = o.jitter_us >= 0 ? nanoseconds(static_cast<int64_t>(o.jitter_us * 1000))
                               : m->base_latency / 10;
  return *m;
}

node::NodeOptions SimNodeOptions(const SimOptions& o, int i) {
  node::NodeOptions no;
  no.node_id = NodeName(i);
  no.address = no.node_id;
  no.rpc_timeout = std::chrono::milliseconds(2000);
  no.dt_entries = o.dt_capacity;  // 0: no directory table
  no.vfs.node_tag = static_cast<uint16_t>(i + 1);
  no.placement.policy = o.placement;
  if (o.cache_bytes > 0) {
    no.cache.size_bytes = o.cache_bytes;
    no.cache.block_bytes = o.cache_block;
    no.share_cache = o.cache_coop;
    no.cache_forward = o.cache_coop ? o.cache_forward : 0;
    no.cache_forward_on_pool = true;
    no.files.forward_seed = o.seed * 1000003 + static_cast<uint64_t>(i) + 1;
    no.cache_guard = false;
    no.remote_callbacks = true;
  }
  return no;
}

Federation::Federation(const SimOptions& o, const m2m::LinkModel& link)
    : net_(std::make_unique<m2m::FakeNetwork>(NetOptions(o, link))),
      fibers_(std::make_unique<FiberScheduler>(*net_)),
      pool_(std::make_unique<FiberExecutor>(fibers_.get())),
      local_cost_(nanoseconds(static_cast<int64_t>(o.local_op_us * 1000))),
      disk_read_cost_(nanoseconds(static_cast<int64_t>(o.disk_read_us * 1000))),
      vnodes_(o.vnodes) {}

Result<std::unique_ptr<Federation>> Federation::Create(const SimOptions& o) {
  auto link = LinkOf(o);
  if (!link) return Err(link.error());
  std::unique_ptr<Federation> f(new Federation(o, *link));
  if (auto s = f->Build(o); !s) return Err(s.error());
  return f;
}

Status Federation::Build(const SimOptions& o) {
  m2m::TransportOptions t;
  t.cluster_key = m2m::Bytes(m2m::kClusterKeyBytes, std::byte{0x5e});
  nodes_.reserve(static_cast<size_t>(o.nodes));
  for (int i = 0; i < o.nodes; ++i) {
    auto n = std::make_unique<SimNode>();
    n->id = NodeName(i);
    n->root = std::make_unique<ns::MemNodeFs>(n->id);
    n->local = std::make_unique<ChargedNodeFs>(n->root.get(), local_cost_, disk_read_cost_);
    n->kv = std::make_unique<ns::MemKv>();
    n->transport = net_->NewTransport(t);
    if (!o.faults.empty()) {
      auto spec = m2m::ParseFaultSpec(o.faults);  // validated (ValidateSimOptions)
      if (!spec) return Err(spec.error());
      spec->seed += static_cast<uint64_t>(i);
      auto faulty = std::make_unique<m2m::FaultyTransport>(std::move(n->transport), *spec);
      n->faults = faulty.get();
      n->transport = std::move(faulty);
    }
    node::NodeOptions no = SimNodeOptions(o, i);
    node::NodeEnv env;
    env.transport = n->transport.get();
    env.cluster = &n->view;
    env.local = n->local.get();
    env.kv = n->kv.get();
    env.pool = pool_.get();
    env.tag_of = [this](const std::string& id) { return static_cast<uint16_t>(Index(id) + 1); };
    auto built = node::Node::Create(std::move(no), std::move(env));
    if (!built) return Err(EIO, "node " + n->id + ": " + built.error().ToString());
    n->node = std::move(*built);
    // The file service hears of changes made on the export root, as the
    // daemon wires its LocalNodeFs.
    n->local->SetAttrObserver(&n->node->file_service());
    nodes_.push_back(std::move(n));
  }
  for (auto& n : nodes_) {
    auto a = n->transport->Listen(n->id);
    if (!a) return Err(EIO, "listen: " + a.error().ToString());
  }
  PublishViews();
  return Ok();
}

uint64_t Federation::FaultsInjected() const {
  uint64_t sum = 0;
  for (const auto& n : nodes_) {
    if (n->faults == nullptr) continue;
    const auto c = n->faults->counts();
    sum += c.dropped_requests + c.dropped_replies + c.disconnects + c.duplicated;
  }
  return sum;
}

Federation::~Federation() {
  // As the daemon stops: the clients first (remote sessions say goodbye, a
  // call each: from a fiber, in simulated time), then the services.
  fibers_->Spawn([this] {
    for (auto& n : nodes_) {
      if (n->node) n->node->StopClients();
    }
  });
  net_->RunUntilIdle();
  for (auto& n : nodes_) {
    if (n->transport) n->transport->Shutdown();
  }
  net_->RunUntilIdle();
  for (auto& n : nodes_) {
    n->local->SetAttrObserver(nullptr);
    n->node.reset();
  }
  nodes_.clear();
  pool_.reset();
  fibers_.reset();
  net_.reset();
}

void Federation::PublishViews() {
  ++epoch_;
  std::vector<std::string> live;
  std::map<std::string, std::string> live_map, dead_map;
  for (const auto& n : nodes_) {
    if (n->alive) {
      live.push_back(n->id);
      live_map.emplace(n->id, n->id);
    } else {
      dead_map.emplace(n->id, n->id);
    }
  }
  auto ring = std::make_shared<const ns::Ring>(live, vnodes_);
  for (auto& n : nodes_) {
    if (!n->alive) continue;
    auto v = std::make_shared<ns::ClusterView>();
    v->self = n->id;
    v->epoch = epoch_;
    v->live = live_map;
    v->dead = dead_map;
    v->ring = ring;
    n->view.Set(std::move(v));
  }
}

void Federation::SetAlive(int i, bool alive) {
  SimNode& n = node(i);
  if (n.alive == alive) return;
  n.alive = alive;
  // Both fail only for an address no transport holds; every node has one.
  if (alive) net_->Revive(n.id).IgnoreError();
  else net_->Kill(n.id).IgnoreError();
  PublishViews();
}

double Federation::RingImbalance() const {
  for (const auto& n : nodes_) {
    if (!n->alive) continue;
    const auto& ring = *n->view.Current()->ring;
    double max_share = 0;
    for (const auto& m : ring.members()) max_share = std::max(max_share, ring.Share(m));
    return max_share * static_cast<double>(ring.members().size());
  }
  return 0;
}

namespace {

// Setup runs as root on a MemNodeFs with the driver's own paths: a failure
// is a bug of the simulator, whose figures would then mean nothing.
void SetupOrDie(const Status& s, const std::string& what) {
  if (s) return;
  std::fprintf(stderr, "sim: setting up %s: %s\n", what.c_str(), s.error().ToString().c_str());
  std::abort();
}

}  // namespace

void Federation::SetupDir(int i, const std::string& dir) {
  SetupOrDie(node(i).root->MkdirParents(ns::JoinPath(dir, "x"), {}), dir);
}

void Federation::SetupFile(int i, const std::string& path, std::span<const std::byte> data) {
  SetupDir(i, std::string(ns::ParentPath(path)));
  ns::NodeFs& root = *node(i).root;
  auto o = root.Create(ns::Cred{}, path, O_WRONLY, 0644);
  SetupOrDie(o ? Status(Ok()) : Status(Err(o.error())), path);
  if (!data.empty()) {
    auto n = root.Write(o->handle, 0, data);
    SetupOrDie(n ? Status(Ok()) : Status(Err(n.error())), path);
  }
  SetupOrDie(root.Release(o->handle), path);
}

}  // namespace fedfs::bench
