// node::Node (node/node.h): nodes built by the daemon's wiring over the
// real-time fake network, MemNodeFs export roots and MemKv journals, driven
// through their facades from the test's thread as FUSE workers would.
#include "node/node.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <mutex>
#include <set>

#include "common/executor.h"
#include "dirops/kv.h"
#include "m2m/auth.h"
#include "m2m/fake_network.h"
#include "nodefs/mem_node_fs.h"

namespace fedfs::node {
namespace {

constexpr uint64_t kRoot = 1;

// A view the test changes while the nodes read it from their threads.
class LockedView final : public ns::ClusterViewSource {
 public:
  std::shared_ptr<const ns::ClusterView> Current() const override {
    std::lock_guard lock(mu_);
    return view_;
  }
  void Set(std::shared_ptr<const ns::ClusterView> v) {
    std::lock_guard lock(mu_);
    view_ = std::move(v);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const ns::ClusterView> view_;
};

// Counts what the node tells the kernel.
class CountingKernel final : public ns::KernelCache {
 public:
  bool Coherent() const override { return true; }
  void InvalidateNames() override { ++names; }
  uint64_t NamesEpoch() const override { return names.load(); }
  bool InvalidateAttrs(uint64_t) override { return true; }
  std::atomic<uint64_t> names{0};
};

std::string Name(int i) { return "n" + std::to_string(i); }

struct Nodes {
  explicit Nodes(int n) : net(Options()), pool(2, "node-test") {
    for (int i = 0; i < n; ++i) all.push_back(Name(i));
    views.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      fs.push_back(std::make_unique<ns::MemNodeFs>(Name(i)));
      kv.push_back(std::make_unique<ns::MemKv>());
      views[static_cast<size_t>(i)] = std::make_unique<LockedView>();
      views[static_cast<size_t>(i)]->Set(View(i, 1));
      transports.push_back(
          net.NewTransport({.cluster_key = m2m::Bytes(m2m::kClusterKeyBytes, std::byte{7})}));
      NodeOptions o;
      o.node_id = Name(i);
      o.address = Name(i);
      o.rpc_timeout = std::chrono::milliseconds(2000);
      NodeEnv env;
      env.transport = transports.back().get();
      env.cluster = views[static_cast<size_t>(i)].get();
      env.local = fs.back().get();
      env.kv = kv.back().get();
      env.pool = &pool;
      auto node = Node::Create(std::move(o), std::move(env));
      EXPECT_TRUE(node) << (node ? "" : node.error().ToString());
      nodes.push_back(std::move(*node));
      EXPECT_TRUE(transports.back()->Listen(Name(i)));
    }
  }
  ~Nodes() {
    for (auto& n : nodes) n->StopClients();
    for (auto& t : transports) t->Shutdown();
    nodes.clear();
  }
  static m2m::FakeNetworkOptions Options() {
    m2m::FakeNetworkOptions o;
    o.mode = m2m::SchedulerMode::kRealTime;
    return o;
  }
  std::shared_ptr<const ns::ClusterView> View(int self, uint64_t epoch) const {
    auto v = std::make_shared<ns::ClusterView>();
    v->self = Name(self);
    v->epoch = epoch;
    for (const auto& n : all) v->live[n] = n;
    v->ring = std::make_shared<const ns::Ring>(all, 64);
    return v;
  }
  ns::VfsImpl& vfs(int i) { return nodes[static_cast<size_t>(i)]->vfs(); }

  // Node i's facade: the inode of `name` in directory inode `parent`.
  Result<uint64_t> Lookup(int i, uint64_t parent, const std::string& name) {
    auto e = vfs(i).Lookup(ns::Cred{}, parent, name);
    if (!e) return Err(e.error());
    if (e->ino == 0) return Err(ENOENT, name);
    return e->ino;
  }
  // The names node i lists in directory inode `dir`.
  std::set<std::string> List(int i, uint64_t dir) {
    std::set<std::string> out;
    auto dh = vfs(i).OpenDir(ns::Cred{}, dir);
    EXPECT_TRUE(dh);
    if (!dh) return out;
    uint64_t off = 0;
    for (;;) {
      auto batch = vfs(i).ReadDir(*dh, off, 64);
      EXPECT_TRUE(batch);
      if (!batch || batch->empty()) break;
      for (const auto& e : *batch) {
        if (e.name != "." && e.name != "..") out.insert(e.name);
        off = e.next_offset;
      }
    }
    EXPECT_TRUE(vfs(i).ReleaseDir(*dh));
    return out;
  }

  m2m::FakeNetwork net;
  ThreadPool pool;
  std::vector<std::string> all;
  std::vector<std::unique_ptr<ns::MemNodeFs>> fs;
  std::vector<std::unique_ptr<ns::Kv>> kv;
  std::vector<std::unique_ptr<LockedView>> views;
  std::vector<std::unique_ptr<m2m::Transport>> transports;
  std::vector<std::unique_ptr<Node>> nodes;
};

TEST(Node, WhatOneNodeCreatesAnotherSeesAndReads) {
  Nodes n(2);
  auto d = n.vfs(0).Mkdir(ns::Cred{}, kRoot, "d", 0755);
  ASSERT_TRUE(d) << d.error().ToString();
  auto f = n.vfs(0).Create(ns::Cred{}, d->ino, "f", S_IFREG | 0644, O_WRONLY);
  ASSERT_TRUE(f) << f.error().ToString();
  const std::string text = "written on n0";
  auto w = n.vfs(0).Write(f->second.fh, 0, std::as_bytes(std::span(text)), ns::Writer{});
  ASSERT_TRUE(w);
  ASSERT_TRUE(n.vfs(0).Release(f->second.fh));

  // Placement "local" (the default): the file is on n0, read by n1 through
  // the file service.
  auto d1 = n.Lookup(1, kRoot, "d");
  ASSERT_TRUE(d1) << d1.error().ToString();
  auto f1 = n.Lookup(1, *d1, "f");
  ASSERT_TRUE(f1) << f1.error().ToString();
  auto where = n.vfs(1).Where("/d/f");
  ASSERT_TRUE(where);
  EXPECT_EQ(*where, std::vector<std::string>{"n0"});
  auto o = n.vfs(1).Open(ns::Cred{}, *f1, O_RDONLY);
  ASSERT_TRUE(o) << o.error().ToString();
  std::string back(text.size(), '\0');
  auto r = n.vfs(1).Read(o->fh, 0, std::as_writable_bytes(std::span(back)));
  ASSERT_TRUE(r);
  EXPECT_EQ(back.substr(0, *r), text);
  EXPECT_TRUE(n.vfs(1).Release(o->fh));

  // A directory renamed by n1 is seen under its new name, with its file, by
  // n0.
  ASSERT_TRUE(n.vfs(1).Rename(ns::Cred{}, kRoot, "d", kRoot, "e", 0));
  EXPECT_EQ(n.List(0, kRoot), (std::set<std::string>{"e"}));
  auto e0 = n.Lookup(0, kRoot, "e");
  ASSERT_TRUE(e0);
  EXPECT_EQ(n.List(0, *e0), (std::set<std::string>{"f"}));
}

TEST(Node, LocalChangesReportedReachTheOtherNode) {
  Nodes n(2);
  ASSERT_TRUE(n.vfs(0).Mkdir(ns::Cred{}, kRoot, "d", 0755));
  auto d0 = n.Lookup(0, kRoot, "d");
  ASSERT_TRUE(d0);
  EXPECT_TRUE(n.List(0, *d0).empty());  // VD(/d) now known at its manager

  // A local program on n1 makes a file and, in a burst (more than the
  // per-directory limit), many more; the watcher's batches are reported.
  ns::MemNodeFs& local = *n.fs[1];
  auto add = [&](const std::string& name) {
    auto o = local.Create(ns::Cred{}, "/d/" + name, O_WRONLY | O_CREAT, 0644);
    ASSERT_TRUE(o) << o.error().ToString();
    ASSERT_TRUE(local.Release(o->handle));
  };
  ASSERT_TRUE(local.MkdirParents("/d/x", {}));
  add("one");
  n.nodes[1]->ReportLocalChanges({{ns::LocalChange::Kind::kAdd, "/", "d", DT_DIR},
                                  {ns::LocalChange::Kind::kAdd, "/d", "one", DT_REG}});
  std::set<std::string> want{"one"};
  for (int t = 0; t < 200 && n.List(0, *d0) != want; ++t) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(n.List(0, *d0), want);

  std::vector<ns::LocalChange> burst;
  for (int i = 0; i < 100; ++i) {
    add("b" + std::to_string(i));
    want.insert("b" + std::to_string(i));
    burst.push_back({ns::LocalChange::Kind::kAdd, "/d", "b" + std::to_string(i), DT_REG});
  }
  n.nodes[1]->ReportLocalChanges(std::move(burst));
  for (int t = 0; t < 200 && n.List(0, *d0) != want; ++t) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(n.List(0, *d0), want);
}

TEST(Node, ANewEpochDropsTheKernelsNamesOnce) {
  Nodes n(2);
  CountingKernel kernel;
  n.nodes[0]->SetKernelCache(&kernel);
  (void)n.nodes[0]->cluster().Current();
  const uint64_t before = kernel.names.load();
  (void)n.nodes[0]->cluster().Current();
  EXPECT_EQ(kernel.names.load(), before);  // same view: nothing dropped
  n.views[0]->Set(n.View(0, 2));
  (void)n.nodes[0]->cluster().Current();
  EXPECT_EQ(kernel.names.load(), before + 1);
  n.views[0]->Set(n.View(0, 2));  // a new view of the same epoch
  (void)n.nodes[0]->cluster().Current();
  EXPECT_EQ(kernel.names.load(), before + 1);
  n.nodes[0]->SetKernelCache(nullptr);
  n.views[0]->Set(n.View(0, 3));
  (void)n.nodes[0]->cluster().Current();
  EXPECT_EQ(kernel.names.load(), before + 1);  // unwired: told nothing
}

}  // namespace
}  // namespace fedfs::node
