// The simulator's nodes and daemon-wired nodes answer the same sequence of
// operations identically (issue 22). One scripted sequence of path
// operations -- mkdir, create, stat, listings, a file renamed across
// directories held by different nodes, a directory held by three nodes
// renamed (journaled multi-node operation), unlink, rmdir, and the errors
// EEXIST, ENOENT, ENOTEMPTY, ENOTDIR, EISDIR -- runs, each operation from a
// given node:
//  (a) in fedfs-bench's simulator (RunPathScript: node::Node over MemNodeFs,
//      MemKv, the fake network in simulated time, on fibers);
//  (b) on three nodes built by the same node::Node wiring as fedfsd over
//      real LocalNodeFs export roots in temporary directories and RocksDB
//      journals (OpenRocksDbKv), on the fake network in real time with a
//      thread pool, the facade called from this thread as FUSE workers do.
// Every answer (errno, type, listing) must be equal, and equal to what the
// script expects. Runs as root (per-caller credentials, as the daemon).
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/sim/federation.h"
#include "bench/sim/path_client.h"
#include "bench/sim/sim.h"
#include "cluster/cluster.h"
#include "common/executor.h"
#include "dirops/kv.h"
#include "m2m/auth.h"
#include "m2m/fake_network.h"
#include "node/node.h"
#include "nodefs/local_node_fs.h"

namespace fedfs::bench {
namespace {

constexpr int kNodes = 3;

struct Expect {
  int node;
  PathOp op;
  PathAnswer want;
};

PathAnswer Ok(mode_t type = 0) { return PathAnswer{0, type, {}}; }
PathAnswer Fail(int err) { return PathAnswer{err, 0, {}}; }
PathAnswer List(std::vector<std::string> names) { return PathAnswer{0, 0, std::move(names)}; }

std::vector<Expect> Script() {
  return {
      {0, {"mkdir", "/a"}, Ok(S_IFDIR)},
      {1, {"mkdir", "/a"}, Fail(EEXIST)},
      {1, {"create", "/a/f1"}, Ok(S_IFREG)},  // on node 1, /a made there too
      {2, {"create", "/a/f1"}, Fail(EEXIST)},
      {2, {"stat", "/a/f1"}, Ok(S_IFREG)},
      {0, {"stat", "/a"}, Ok(S_IFDIR)},
      {0, {"stat", "/a/nope"}, Fail(ENOENT)},
      {2, {"mkdir", "/b"}, Ok(S_IFDIR)},
      {0, {"create", "/b/g"}, Ok(S_IFREG)},
      {2, {"readdir", "/a"}, List({"f1"})},
      {1, {"readdir", "/"}, List({"a/", "b/"})},
      {2, {"rename", "/a/f1", "/b/f1"}, Ok()},  // a file, from node 2, held by node 1
      {0, {"readdir", "/a"}, List({})},
      {1, {"readdir", "/b"}, List({"f1", "g"})},
      {0, {"rmdir", "/b"}, Fail(ENOTEMPTY)},
      {1, {"mkdir", "/a/sub"}, Ok(S_IFDIR)},
      {2, {"create", "/a/sub/x"}, Ok(S_IFREG)},  // /a and /a/sub now on all three nodes
      {0, {"rename", "/a", "/c"}, Ok()},         // a directory held by three nodes
      {1, {"stat", "/a"}, Fail(ENOENT)},
      {2, {"readdir", "/c"}, List({"sub/"})},
      {0, {"readdir", "/c/sub"}, List({"x"})},
      {1, {"stat", "/c/sub/x"}, Ok(S_IFREG)},
      {2, {"rmdir", "/c/sub/x"}, Fail(ENOTDIR)},
      {2, {"unlink", "/c/sub"}, Fail(EISDIR)},
      {1, {"unlink", "/c/sub/x"}, Ok()},
      {0, {"unlink", "/c/sub/x"}, Fail(ENOENT)},
      {2, {"rmdir", "/c/sub"}, Ok()},
      {1, {"rmdir", "/c"}, Ok()},
      {0, {"create", "/nope/f"}, Fail(ENOENT)},
      {2, {"rmdir", "/nope"}, Fail(ENOENT)},
      {1, {"unlink", "/b/f1"}, Ok()},
      {2, {"unlink", "/b/g"}, Ok()},
      {0, {"rmdir", "/b"}, Ok()},
      {1, {"readdir", "/"}, List({})},
  };
}

// (b): nodes wired by node::Node as fedfsd wires them, over real export
// roots and RocksDB, on the fake network in real time.
class DaemonWired {
 public:
  explicit DaemonWired(const SimOptions& o)
      : net_(m2m::FakeNetworkOptions{}), pool_(std::make_unique<ThreadPool>(8, "blocking")) {
    const char* tmp = std::getenv("TMPDIR");
    std::string t = std::string(tmp && *tmp ? tmp : "/tmp") + "/fedfs-equiv-XXXXXX";
    if (mkdtemp(t.data()) == nullptr) return;
    dir_ = t;
    m2m::TransportOptions to;
    to.cluster_key = m2m::Bytes(m2m::kClusterKeyBytes, std::byte{0x5e});
    std::vector<std::string> ids;
    for (int i = 0; i < kNodes; ++i) ids.push_back(NodeId(i));
    auto ring = std::make_shared<const ns::Ring>(ids, o.vnodes);
    for (int i = 0; i < kNodes; ++i) {
      auto n = std::make_unique<One>();
      const std::string root = dir_ + "/" + ids[static_cast<size_t>(i)] + "/export";
      std::filesystem::create_directories(root);
      auto local = ns::LocalNodeFs::Open(ids[static_cast<size_t>(i)], root);
      if (!local) return;
      n->local = std::move(*local);
      auto kv = ns::OpenRocksDbKv({dir_ + "/" + ids[static_cast<size_t>(i)] + "/state"});
      if (!kv) return;
      n->kv = std::move(*kv);
      n->transport = net_.NewTransport(to);
      auto v = std::make_shared<ns::ClusterView>();
      v->self = ids[static_cast<size_t>(i)];
      v->epoch = 1;
      for (const auto& id : ids) v->live.emplace(id, id);
      v->ring = ring;
      n->view.Set(std::move(v));
      node::NodeEnv env;
      env.transport = n->transport.get();
      env.cluster = &n->view;
      env.local = n->local.get();
      env.kv = n->kv.get();
      env.pool = pool_.get();
      env.tag_of = [](const std::string& id) { return static_cast<uint16_t>(std::stoi(id.substr(1)) + 1); };
      auto built = node::Node::Create(SimNodeOptions(o, i), std::move(env));
      if (!built) return;
      n->node = std::move(*built);
      if (!n->node->Recover()) return;
      nodes_.push_back(std::move(n));
    }
    for (auto& n : nodes_) {
      if (!n->transport->Listen(n->node->cluster().Current()->self)) return;
    }
    ready_ = true;
  }
  ~DaemonWired() {
    // As fedfsd stops: clients, transports, the pool, then the services.
    for (auto& n : nodes_) n->node->StopClients();
    for (auto& n : nodes_) n->transport->Shutdown();
    pool_.reset();
    nodes_.clear();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  bool ready() const { return ready_; }
  PathAnswer Run(int node, const PathOp& op) {
    PathClient c(&nodes_[static_cast<size_t>(node)]->node->vfs(), ns::Cred{0, 0, {}, 022});
    return c.Run(op);
  }

 private:
  struct One {
    std::unique_ptr<ns::LocalNodeFs> local;
    std::unique_ptr<ns::Kv> kv;
    std::unique_ptr<m2m::Transport> transport;
    ns::SettableClusterView view;
    std::unique_ptr<node::Node> node;
  };
  m2m::FakeNetwork net_;
  std::unique_ptr<ThreadPool> pool_;
  std::string dir_;
  std::vector<std::unique_ptr<One>> nodes_;
  bool ready_ = false;
};

TEST(SimEquivalence, SimulatorAndDaemonWiredNodesAnswerAlike) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (per-caller credentials on the export roots)";
  SimOptions o;
  o.nodes = kNodes;
  const std::vector<Expect> script = Script();
  std::vector<PathStep> steps;
  for (const Expect& e : script) steps.push_back({e.node, e.op});

  auto sim = RunPathScript(o, steps);
  ASSERT_TRUE(sim) << sim.error().ToString();
  ASSERT_EQ(sim->size(), script.size());

  DaemonWired wired(o);
  ASSERT_TRUE(wired.ready());
  for (size_t i = 0; i < script.size(); ++i) {
    const Expect& e = script[i];
    SCOPED_TRACE(std::to_string(i) + ": node " + std::to_string(e.node) + " " + e.op.kind + " " +
                 e.op.path + (e.op.path2.empty() ? "" : " " + e.op.path2));
    const PathAnswer daemon = wired.Run(e.node, e.op);
    EXPECT_EQ((*sim)[i], daemon) << "simulator " << (*sim)[i].ToString() << " | daemon-wired "
                                 << daemon.ToString();
    EXPECT_EQ(daemon, e.want) << "daemon-wired " << daemon.ToString() << " | expected "
                              << e.want.ToString();
  }
}

}  // namespace
}  // namespace fedfs::bench
