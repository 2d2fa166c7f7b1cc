// A simulated federation running the VD service over the fake network, for
// the VD service's tests (vd_service_test.cc, vd_lease_test.cc): 3-8 nodes in
// one thread, each with an in-memory "local" file system (only ListDir
// matters here), an InlineExecutor and its own cluster view. Message counts
// come from the fake network's per-method statistics.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/path.h"
#include "common/rpc_methods.h"
#include "m2m/auth.h"
#include "m2m/fake_network.h"
#include "vd/vd_service.h"

namespace fedfs::ns::vd_test {

// ---- An in-memory node file system: directories of (name -> type) ----------

class MemFs final : public NodeFs {
 public:
  explicit MemFs(std::string node) : node_(std::move(node)) { dirs_["/"]; }

  // Adds a directory (and its ancestors) or a non-directory entry.
  void AddDir(const std::string& path) {
    if (path == "/") return;
    AddDir(std::string(ParentPath(path)));
    dirs_[std::string(ParentPath(path))][std::string(BaseName(path))] = DT_DIR;
    dirs_[path];
  }
  void AddFile(const std::string& path, uint8_t type = DT_REG) {
    AddDir(std::string(ParentPath(path)));
    dirs_[std::string(ParentPath(path))][std::string(BaseName(path))] = type;
  }
  void Remove(const std::string& path) {
    dirs_[std::string(ParentPath(path))].erase(std::string(BaseName(path)));
  }
  int list_calls = 0;

  const std::string& node_id() const override { return node_; }
  Status Access(const Cred&, const std::string&, int) override { return No(); }
  Result<std::vector<DirEntry>> ListDir(const Cred&, const std::string& path) override {
    ++list_calls;
    auto it = dirs_.find(path);
    if (it == dirs_.end()) {
      auto parent = dirs_.find(std::string(ParentPath(path)));
      if (parent != dirs_.end()) {
        auto e = parent->second.find(std::string(BaseName(path)));
        if (e != parent->second.end()) return Err(ENOTDIR, path);
      }
      return Err(ENOENT, path);
    }
    std::vector<DirEntry> out;
    uint64_t ino = 1;
    for (const auto& [name, type] : it->second) out.push_back(DirEntry{name, type, ino++});
    return out;
  }

  // Everything else is not needed by the VD service.
  Result<struct stat> Stat(const Cred&, const std::string&) override { return No(); }
  Result<struct stat> Mkdir(const Cred&, const std::string&, mode_t) override { return No(); }
  Status MkdirParents(const std::string&, const std::vector<DirTemplate>&) override { return No(); }
  Status Rmdir(const Cred&, const std::string&) override { return No(); }
  Result<struct stat> Mknod(const Cred&, const std::string&, mode_t, dev_t) override { return No(); }
  Result<struct stat> Symlink(const Cred&, const std::string&, const std::string&) override {
    return No();
  }
  Result<std::string> Readlink(const Cred&, const std::string&) override { return No(); }
  Status Unlink(const Cred&, const std::string&) override { return No(); }
  Status Rename(const Cred&, const std::string&, const std::string&, unsigned) override {
    return No();
  }
  Result<struct stat> Link(const Cred&, const std::string&, const std::string&) override {
    return No();
  }
  Result<struct stat> SetAttr(const Cred&, const std::string&, std::optional<Handle>,
                              const SetAttrRequest&) override {
    return No();
  }
  Result<struct statvfs> StatFs() override { return No(); }
  Result<std::string> GetXattr(const Cred&, const std::string&, const std::string&, size_t,
                               size_t*) override {
    return No();
  }
  Status SetXattr(const Cred&, const std::string&, const std::string&,
                  std::span<const std::byte>, int) override {
    return No();
  }
  Result<std::string> ListXattr(const Cred&, const std::string&, size_t, size_t*) override {
    return No();
  }
  Status RemoveXattr(const Cred&, const std::string&, const std::string&) override { return No(); }
  Result<Opened> Open(const Cred&, const std::string&, int) override { return No(); }
  Result<Opened> Create(const Cred&, const std::string&, int, mode_t) override { return No(); }
  Result<size_t> Read(Handle, uint64_t, std::span<std::byte>) override { return No(); }
  Result<size_t> Write(Handle, uint64_t, std::span<const std::byte>, const Writer&) override {
    return No();
  }
  Status Flush(Handle, uint64_t) override { return No(); }
  Status Fsync(Handle, bool) override { return No(); }
  Status Fallocate(Handle, int, uint64_t, uint64_t) override { return No(); }
  Status Release(Handle) override { return No(); }
  Result<LockRange> GetLk(Handle, uint64_t, const LockRange&) override { return No(); }
  Status SetLk(Handle, uint64_t, const LockRange&) override { return No(); }
  Status Flock(Handle, uint64_t, int) override { return No(); }

 private:
  static std::unexpected<Error> No() { return Err(ENOSYS, "not in the test fake"); }
  std::string node_;
  std::map<std::string, std::map<std::string, uint8_t>> dirs_;
};

// A settable view; `next` (if set) replaces the current view after `after`
// more calls of Current() (a membership refresh racing with a request). May
// be set from another thread than the one reading it.
class TestViewSource final : public ClusterViewSource {
 public:
  std::shared_ptr<const ClusterView> Current() const override {
    std::lock_guard lock(mu_);
    if (next_ && switch_after_-- == 0) {
      view_ = std::move(next_);
      next_.reset();
    }
    return view_;
  }
  void Set(std::shared_ptr<const ClusterView> v) {
    std::lock_guard lock(mu_);
    view_ = std::move(v);
  }
  void SetLater(std::shared_ptr<const ClusterView> v, int after) {
    std::lock_guard lock(mu_);
    next_ = std::move(v);
    switch_after_ = after;
  }

 private:
  mutable std::mutex mu_;
  mutable std::shared_ptr<const ClusterView> view_;
  mutable std::shared_ptr<const ClusterView> next_;
  mutable int switch_after_ = 0;
};

constexpr uint16_t kListLocal = MethodId(RpcMethod::kNsListLocal);
constexpr uint16_t kVdGet = MethodId(RpcMethod::kNsVdGet);
constexpr uint16_t kVdUpdate = MethodId(RpcMethod::kNsVdUpdate);

inline std::string Name(int i) { return "n" + std::to_string(i); }

// Changes reach whole-copy sharers as deltas (VdServiceOptions::deltas, off
// by default): for the tests of deltas.
inline VdServiceOptions Deltas(VdServiceOptions o = {}) {
  o.deltas = true;
  return o;
}

// A simulated federation of `n` nodes running the VD service.
class Federation {
 public:
  // `dropping_node`: that node's blocking executor drops every task (as a
  // shut-down pool does).
  // `wrap`: given each node's index and transport, the transport it uses
  // (a test's decorator).
  using Wrap = std::function<std::unique_ptr<m2m::Transport>(int, std::unique_ptr<m2m::Transport>)>;
  explicit Federation(int n, VdServiceOptions options = {}, uint64_t seed = 1,
                      m2m::LinkModel link = m2m::LinkModel::Rdma(), int dropping_node = -1,
                      const Wrap& wrap = nullptr)
      : net_(Options(seed, link)) {
    for (int i = 0; i < n; ++i) {
      auto node = std::make_unique<Node>();
      node->fs = std::make_unique<MemFs>(Name(i));
      m2m::TransportOptions t;
      t.cluster_key = m2m::Bytes(m2m::kClusterKeyBytes, std::byte{7});
      node->transport = net_.NewTransport(t);
      if (wrap) node->transport = wrap(i, std::move(node->transport));
      node->svc = std::make_unique<VdService>(options, node->transport.get(), &node->view,
                                              node->fs.get(),
                                              i == dropping_node ? static_cast<Executor*>(&dropping_)
                                                                 : &inline_);
      node->svc->RegisterHandlers();
      auto addr = node->transport->Listen(Name(i));
      EXPECT_TRUE(addr) << addr.error().ToString();
      nodes_.push_back(std::move(node));
    }
    std::vector<std::string> all;
    for (int i = 0; i < n; ++i) all.push_back(Name(i));
    SetViews(all, 1);
  }

  static m2m::FakeNetworkOptions Options(uint64_t seed, m2m::LinkModel link) {
    m2m::FakeNetworkOptions o;
    o.mode = m2m::SchedulerMode::kSimulated;
    o.seed = seed;
    link.jitter = std::chrono::microseconds(3);  // jitter from the seeded RNG
    o.link = link;
    return o;
  }

  // Every node's view: `live` alive, the others dead, at `epoch`.
  void SetViews(const std::vector<std::string>& live, uint64_t epoch) {
    for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i]->view.Set(MakeView(Name(i), live, epoch));
  }
  std::shared_ptr<const ClusterView> MakeView(const std::string& self,
                                              const std::vector<std::string>& live,
                                              uint64_t epoch) const {
    auto v = std::make_shared<ClusterView>();
    v->self = self;
    v->epoch = epoch;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const std::string id = Name(static_cast<int>(i));
      if (std::find(live.begin(), live.end(), id) != live.end()) v->live[id] = id;
      else v->dead[id] = id;
    }
    v->ring = std::make_shared<const Ring>(live, 64);
    return v;
  }

  MemFs& fs(int i) { return *nodes_[i]->fs; }
  VdService& svc(int i) { return *nodes_[i]->svc; }
  TestViewSource& view(int i) { return nodes_[i]->view; }
  m2m::FakeNetwork& net() { return net_; }
  int size() const { return static_cast<int>(nodes_.size()); }
  int Index(const std::string& id) const { return std::stoi(id.substr(1)); }
  std::string Manager(const std::string& path) { return view(0).Current()->Manager(path); }

  Result<VdPtr> Get(int from, const std::string& path) {
    std::optional<Result<VdPtr>> out;
    svc(from).Get(path, [&](Result<VdPtr> r) { out = std::move(r); });
    net_.RunUntilIdle();
    EXPECT_TRUE(out.has_value()) << "Get never completed";
    if (!out) return Err(EIO, "never completed");
    return std::move(*out);
  }
  Status Update(int from, const std::string& path, VdChange c) {
    std::optional<Status> out;
    svc(from).Update(path, std::move(c), [&](Status s) { out = std::move(s); });
    net_.RunUntilIdle();
    EXPECT_TRUE(out.has_value()) << "Update never completed";
    if (!out) return Err(EIO, "never completed");
    return std::move(*out);
  }
  Result<std::vector<Conflict>> Conflicts(int from, const std::string& path) {
    std::optional<Result<std::vector<Conflict>>> out;
    svc(from).Conflicts(path, [&](Result<std::vector<Conflict>> r) { out = std::move(r); });
    net_.RunUntilIdle();
    EXPECT_TRUE(out.has_value());
    if (!out) return Err(EIO, "never completed");
    return std::move(*out);
  }

  uint64_t Requests(uint16_t method) {
    auto s = net_.TotalStats();
    auto it = s.per_method.find(method);
    return it == s.per_method.end() ? 0 : it->second.requests;
  }

  // Some node that is not in `avoid`.
  int Other(std::set<int> avoid) const {
    for (int i = 0; i < size(); ++i) {
      if (!avoid.count(i)) return i;
    }
    return -1;
  }

 private:
  struct Node {
    std::unique_ptr<MemFs> fs;
    TestViewSource view;
    std::unique_ptr<m2m::Transport> transport;
    std::unique_ptr<VdService> svc;
  };
  class DroppingExecutor final : public Executor {
   public:
    void Post(Task task) override { Task dropped = std::move(task); }
  };
  m2m::FakeNetwork net_;
  InlineExecutor inline_;
  DroppingExecutor dropping_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

inline std::vector<std::string> Names(const VirtualDirectory& vd) {
  std::vector<std::string> out;
  for (const auto& e : vd.entries) out.push_back(e.name);
  return out;
}

// A path under "/" whose manager in `f`'s current view is (or is not) `node`.
inline std::string PathManagedBy(Federation& f, const std::string& node, bool by = true,
                          const std::string& stem = "/d") {
  for (int i = 0; i < 10000; ++i) {
    std::string p = stem + std::to_string(i);
    if ((f.Manager(p) == node) == by) return p;
  }
  ADD_FAILURE() << "no path managed by " << node;
  return "/";
}

// Puts directory `path` on every node with a file "f<i>" on node i and a
// subdirectory "sub" on nodes 0 and 1.
inline void Populate(Federation& f, const std::string& path) {
  for (int i = 0; i < f.size(); ++i) {
    f.fs(i).AddDir(path);
    f.fs(i).AddFile(path + "/f" + std::to_string(i));
  }
  f.fs(0).AddDir(path + "/sub");
  f.fs(1).AddDir(path + "/sub");
}


constexpr uint16_t kDtInval = MethodId(RpcMethod::kNsDtInval);

// VD(p), managed by n0, cached by n1 and by `other`; n1 answers one-sided
// operations 5 ms late each way.
inline void ShareWithSlowN1(Federation& f, const std::string& p, int other) {
  Populate(f, p);
  ASSERT_TRUE(f.Get(1, p));
  ASSERT_TRUE(f.Get(other, p));
  m2m::LinkModel slow = m2m::LinkModel::Rdma();
  slow.base_latency = std::chrono::milliseconds(5);
  f.net().SetNodeModel("n1", slow);
}

inline VdChange Add(const std::string& node, const std::string& name, uint8_t type = DT_REG) {
  return VdChange{VdChange::Kind::kAdd, name, type, node};
}
inline VdChange Remove(const std::string& node, const std::string& name) {
  return VdChange{VdChange::Kind::kRemove, name, 0, node};
}

inline std::set<std::string> NameSet(const VirtualDirectory& vd) {
  std::set<std::string> out;
  for (const auto& e : vd.entries) out.insert(e.name);
  return out;
}

}  // namespace fedfs::ns::vd_test
