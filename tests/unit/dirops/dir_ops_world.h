// The three-node world of the DirOps tests (dirops/dir_ops.h): three
// LocalNodeFs over temporary export roots, each behind a fault-injecting
// wrapper; the journal in a RocksDbKv in the same temporary directory, closed
// and reopened to simulate a crash of the coordinator; VD changes noted and
// name locks kept as managers would. For dir_ops_test.cc and
// replace_file_test.cc only.
#pragma once

#include "dirops/dir_ops.h"

#include <dirent.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <memory>
#include <set>
#include <string>
#include <vector>
#include <gtest/gtest.h>
#include "dirops/kv.h"
#include "dirops/kv_keys.h"
#include "nodefs/local_node_fs.h"
namespace fedfs::ns::dirops_test {

namespace fs = std::filesystem;

inline const Cred kRoot{};

// Forwards the operations DirOps uses to a real NodeFs, with injected
// failures; every other operation answers ENOSYS.
class FaultyNodeFs final : public NodeFs {
 public:
  explicit FaultyNodeFs(std::unique_ptr<NodeFs> inner) : inner_(std::move(inner)) {}

  std::atomic<int> fail_rename{0};  // errno for Rename(from -> to) (not renames back)
  std::atomic<int> fail_rmdir{0};
  std::atomic<bool> down{false};    // every call: EHOSTDOWN

  const std::string& node_id() const override { return inner_->node_id(); }
  Result<struct stat> Stat(const Cred& c, const std::string& p) override {
    if (down) return Down();
    return inner_->Stat(c, p);
  }
  Status Access(const Cred& c, const std::string& p, int mode) override {
    if (down) return Down();
    return inner_->Access(c, p, mode);
  }
  Result<std::vector<DirEntry>> ListDir(const Cred& c, const std::string& p) override {
    if (down) return Down();
    return inner_->ListDir(c, p);
  }
  Result<struct stat> Mkdir(const Cred& c, const std::string& p, mode_t m) override {
    if (down) return Down();
    return inner_->Mkdir(c, p, m);
  }
  Status MkdirParents(const std::string& p, const std::vector<DirTemplate>& t) override {
    if (down) return Down();
    return inner_->MkdirParents(p, t);
  }
  Status Rmdir(const Cred& c, const std::string& p) override {
    if (down) return Down();
    if (int e = fail_rmdir.load()) return Err(e, "injected rmdir failure");
    return inner_->Rmdir(c, p);
  }
  Status Rename(const Cred& c, const std::string& from, const std::string& to,
                unsigned flags) override {
    if (down) return Down();
    if (int e = fail_rename.load(); e && from == rename_from) return Err(e, "injected");
    return inner_->Rename(c, from, to, flags);
  }
  Result<struct stat> SetAttr(const Cred& c, const std::string& p, std::optional<Handle> h,
                              const SetAttrRequest& r) override {
    if (down) return Down();
    return inner_->SetAttr(c, p, h, r);
  }
  std::string rename_from;  // the source whose rename fails

  Result<struct stat> Mknod(const Cred&, const std::string&, mode_t, dev_t) override {
    return No();
  }
  Result<struct stat> Symlink(const Cred&, const std::string&, const std::string&) override {
    return No();
  }
  Result<std::string> Readlink(const Cred&, const std::string&) override { return No(); }
  std::atomic<int> fail_unlink{0};  // errno for Unlink (ReplaceFile)
  Status Unlink(const Cred& c, const std::string& p) override {
    if (down) return Down();
    if (int e = fail_unlink.load()) return Err(e, "injected unlink failure");
    return inner_->Unlink(c, p);
  }
  Result<struct stat> Link(const Cred&, const std::string&, const std::string&) override {
    return No();
  }
  Result<struct statvfs> StatFs() override { return No(); }
  // The directory ids (nodefs/dir_id.h) are read so.
  Result<std::string> GetXattr(const Cred& c, const std::string& p, const std::string& name,
                               size_t size, size_t* needed) override {
    if (down) return Down();
    return inner_->GetXattr(c, p, name, size, needed);
  }
  Status SetXattr(const Cred&, const std::string&, const std::string&,
                  std::span<const std::byte>, int) override {
    return No();
  }
  Result<std::string> ListXattr(const Cred&, const std::string&, size_t, size_t*) override {
    return No();
  }
  Status RemoveXattr(const Cred&, const std::string&, const std::string&) override {
    return No();
  }
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
  static std::unexpected<Error> No() { return Err(ENOSYS, "not in the test double"); }
  static std::unexpected<Error> Down() { return Err(EHOSTDOWN, "injected: node down"); }
  std::unique_ptr<NodeFs> inner_;
};

struct SimulatedCrash {};

// Three nodes, their journal and a coordinator; removed at destruction.
struct World {
  const std::vector<std::string> kNodes{"n1", "n2", "n3"};

  World() { Init(); }
  void Init() {
    std::string tmpl = (fs::temp_directory_path() / "fedfs-dirops-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    for (const auto& n : kNodes) {
      fs::create_directories(Root(n));
      auto local = LocalNodeFs::Open(n, Root(n));
      ASSERT_TRUE(local) << local.error().ToString();
      nodes_[n] = std::make_unique<FaultyNodeFs>(std::move(*local));
    }
    auto view = std::make_shared<ClusterView>();
    view->self = "n1";
    view->epoch = 1;
    for (const auto& n : kNodes) view->live[n] = n + ":1";
    view_ = view;
    OpenKv();
  }

  ~World() {
    ops_.reset();
    kv_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Root(const std::string& n) const { return dir_ + "/" + n + "-export"; }
  std::string Local(const std::string& n, const std::string& p) const { return Root(n) + p; }

  void OpenKv() {
    auto kv = OpenRocksDbKv({dir_ + "/state"});
    ASSERT_TRUE(kv) << kv.error().ToString();
    kv_ = std::move(*kv);
  }

  // A new coordinator over the current journal (as after a restart).
  void NewOps(DirOpsHooks hooks = {}) {
    ops_.reset();
    ops_ = MakeOps("n1", kv_.get(), std::move(hooks));
  }
  // A coordinator `id` over `kv` and this world's nodes; its VD changes are
  // noted and its name locks kept in `locks_`, as managers would.
  std::unique_ptr<DirOps> MakeOps(const std::string& id, Kv* kv, DirOpsHooks hooks = {},
                                  std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
    DirOpsOptions o;
    o.retry_initial = std::chrono::milliseconds(20);
    o.retry_max = std::chrono::milliseconds(100);
    o.deadline = deadline;
    return std::make_unique<DirOps>(
        id, kv,
        [this](const std::string& n) -> NodeFs* {
          {
            std::lock_guard lock(locks_mu_);
            if (auto left = lookups_left_.find(n); left != lookups_left_.end()) {
              if (left->second == 0) return nullptr;  // declared dead by now
              --left->second;
            }
          }
          auto it = nodes_.find(n);
          return it == nodes_.end() ? nullptr : it->second.get();
        },
        [this] { return std::shared_ptr<const ClusterView>(view_); },
        [this](const std::string& dir, const VdChange& ch) -> Status {
          std::lock_guard lock(locks_mu_);
          const auto key = std::make_pair(dir, ch.name);
          if (ch.kind == VdChange::Kind::kLock) {
            auto [it, added] = locks_.try_emplace(key, ch.node);
            if (!added && it->second != ch.node) return Err(EAGAIN, dir + "/" + ch.name);
            return Ok();
          }
          if (ch.kind == VdChange::Kind::kRelease) {
            if (auto it = locks_.find(key); it != locks_.end() && it->second == ch.node) {
              locks_.erase(it);
            }
            return Ok();
          }
          notes_.push_back((ch.kind == VdChange::Kind::kAdd ? "+" : "-") + dir + ":" + ch.name +
                           "@" + ch.node);
          return Ok();
        },
        o, std::move(hooks));
  }

  // Simulated crash: the coordinator and its journal handle go away, the
  // journal is reopened from disk.
  void CrashAndRestart() {
    ops_.reset();
    kv_.reset();
    OpenKv();
    NewOps();
  }

  void MakeDir(const std::string& n, const std::string& p, mode_t mode = 0755) {
    fs::create_directories(Local(n, p));
    ASSERT_EQ(::chmod(Local(n, p).c_str(), mode), 0);
  }
  void MakeFile(const std::string& n, const std::string& p) {
    fs::create_directories(fs::path(Local(n, p)).parent_path());
    std::ofstream(Local(n, p)) << p;
  }
  bool IsDir(const std::string& n, const std::string& p) const {
    struct stat st {};
    return ::lstat(Local(n, p).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }
  bool Exists(const std::string& n, const std::string& p) const {
    struct stat st {};
    return ::lstat(Local(n, p).c_str(), &st) == 0;
  }
  // Relative paths of everything beneath `p` on node n (sorted).
  std::set<std::string> Tree(const std::string& n, const std::string& p) const {
    std::set<std::string> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(Local(n, p), ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      out.insert(fs::relative(it->path(), Local(n, p)).string());
    }
    return out;
  }
  size_t JournalSize() { return kv_->Scan(kvkeys::kDirOpsJournalPrefix).value().size(); }

  // The standard layout: /a/d on all three nodes, each with its own content;
  // /b only on n1 (mode 0711), so n2 and n3 need the destination's parent.
  void StandardLayout() {
    MakeFile("n1", "/a/d/f1");
    MakeFile("n2", "/a/d/f2");
    MakeFile("n3", "/a/d/sub/f3");
    MakeDir("n1", "/b", 0711);
    for (const auto& n : kNodes) before_[n] = Tree(n, "/a/d");
  }
  // Asserts the rename /a/d -> /b/e is wholly done (true) or wholly not.
  void ExpectWhole(bool renamed, const std::string& from = "/a/d", const std::string& to = "/b/e") {
    for (const auto& n : kNodes) {
      SCOPED_TRACE(n);
      if (renamed) {
        EXPECT_FALSE(Exists(n, from));
        ASSERT_TRUE(IsDir(n, to));
        EXPECT_EQ(Tree(n, to), before_[n]);
      } else {
        ASSERT_TRUE(IsDir(n, from));
        EXPECT_EQ(Tree(n, from), before_[n]);
        EXPECT_FALSE(Exists(n, to));
      }
    }
  }
  // Whether the rename is wholly done, wholly not (asserted), judged on n1.
  bool JudgeRename() {
    const bool renamed = IsDir("n1", "/b/e");
    ExpectWhole(renamed);
    return renamed;
  }

  FaultyNodeFs& Node(const std::string& n) { return *nodes_.at(n); }

  std::string dir_;
  std::map<std::string, std::unique_ptr<FaultyNodeFs>> nodes_;
  std::shared_ptr<ClusterView> view_;
  std::unique_ptr<Kv> kv_;
  std::unique_ptr<DirOps> ops_;
  std::vector<std::string> notes_;
  std::mutex locks_mu_;
  std::map<std::pair<std::string, std::string>, std::string> locks_;  // (dir, name) -> node
  // Lookups of a node's NodeFs left before it has none (a node membership
  // declares dead while an operation runs); absent: no limit. Under locks_mu_.
  std::map<std::string, int> lookups_left_;
  std::map<std::string, std::set<std::string>> before_;
};

class DirOpsTest : public ::testing::Test, public World {};


inline std::vector<std::string> StepsOf(const std::function<void(DirOpsHooks)>& run) {
  auto steps = std::make_shared<std::vector<std::string>>();
  run({.at_step = [steps](std::string_view s) { steps->emplace_back(s); }});
  return *steps;
}

class DirOpsCrashTest : public DirOpsTest {};


}  // namespace fedfs::ns::dirops_test
