// DirOps (dirops/dir_ops.h): journaled multi-node rename and rmdir of
// directories. Three nodes in one process: three LocalNodeFs over temporary
// export roots, each behind a fault-injecting wrapper; the journal in a
// RocksDbKv in the same temporary directory, closed and reopened to simulate
// a crash of the coordinator. The crash tests stop the operation at EVERY
// step (a hook that throws), then recover with a new DirOps over the reopened
// journal and check that the directory is wholly renamed (or removed) or
// wholly not, on every node.
#include "dirops/dir_ops.h"

#include <dirent.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dirops/kv.h"
#include "dirops/kv_keys.h"
#include "nodefs/local_node_fs.h"

namespace fedfs::ns {
namespace {

namespace fs = std::filesystem;

const Cred kRoot{};

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
    DirOpsOptions o;
    o.retry_initial = std::chrono::milliseconds(20);
    o.retry_max = std::chrono::milliseconds(100);
    ops_ = std::make_unique<DirOps>(
        "n1", kv_.get(),
        [this](const std::string& n) -> NodeFs* {
          auto it = nodes_.find(n);
          return it == nodes_.end() ? nullptr : it->second.get();
        },
        [this] { return std::shared_ptr<const ClusterView>(view_); },
        [this](const std::string& dir, const VdChange& ch) -> Status {
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
  std::map<std::string, std::set<std::string>> before_;
};

class DirOpsTest : public ::testing::Test, public World {};

TEST_F(DirOpsTest, RenameDirectoryOnThreeNodes) {
  StandardLayout();
  NewOps();
  ASSERT_TRUE(ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"}));
  ExpectWhole(true);
  // The missing parent /b was created on n2 and n3 with n1's mode.
  struct stat st {};
  ASSERT_EQ(::stat(Local("n3", "/b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  EXPECT_EQ(JournalSize(), 0u);
  EXPECT_EQ(notes_, (std::vector<std::string>{"-/a:d@n1", "+/b:e@n1", "-/a:d@n2", "+/b:e@n2",
                                              "-/a:d@n3", "+/b:e@n3"}));
}

TEST_F(DirOpsTest, HoldersAreCompletedFromEveryLiveNode) {
  StandardLayout();
  NewOps();
  // The VD's holder list missed n3 and names n2 twice: n3 is renamed too.
  ASSERT_TRUE(ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n2", "n1", "n2"}));
  ExpectWhole(true);
}

TEST_F(DirOpsTest, NoReplace) {
  StandardLayout();
  MakeDir("n3", "/b/e");
  NewOps();
  auto s = ops_->RenameDir(kRoot, "/a/d", "/b/e", RENAME_NOREPLACE, {"n1", "n2", "n3"});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, EEXIST);
  for (const auto& n : kNodes) EXPECT_EQ(Tree(n, "/a/d"), before_[n]);
  EXPECT_TRUE(IsDir("n3", "/b/e"));
  EXPECT_FALSE(Exists("n1", "/b/e"));
  EXPECT_EQ(JournalSize(), 0u);
  // Without the flag an empty destination directory is replaced.
  ASSERT_TRUE(ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"}));
  ExpectWhole(true);
}

TEST_F(DirOpsTest, DestinationNotEmptyOnOneNode) {
  StandardLayout();
  MakeFile("n2", "/b/e/x");
  NewOps();
  auto s = ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ENOTEMPTY);
  for (const auto& n : kNodes) EXPECT_EQ(Tree(n, "/a/d"), before_[n]);
  EXPECT_FALSE(Exists("n1", "/b/e"));
  EXPECT_EQ(JournalSize(), 0u);
  EXPECT_TRUE(notes_.empty());
}

TEST_F(DirOpsTest, DestinationNotADirectory) {
  StandardLayout();
  MakeFile("n3", "/b/e");
  NewOps();
  EXPECT_EQ(ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1"}).error().code, ENOTDIR);
  for (const auto& n : kNodes) EXPECT_EQ(Tree(n, "/a/d"), before_[n]);
}

TEST_F(DirOpsTest, BadArguments) {
  StandardLayout();
  NewOps();
  EXPECT_EQ(ops_->RenameDir(kRoot, "/a/d", "/a/d/x", 0, {"n1"}).error().code, EINVAL);
  EXPECT_EQ(ops_->RenameDir(kRoot, "/a/d", "/a", 0, {"n1"}).error().code, ENOTEMPTY);
  EXPECT_EQ(ops_->RenameDir(kRoot, "/a/d", "/b/e", RENAME_EXCHANGE, {"n1"}).error().code, EINVAL);
  EXPECT_EQ(ops_->RenameDir(kRoot, "a/d", "/b/e", 0, {"n1"}).error().code, EINVAL);
  EXPECT_EQ(ops_->RenameDir(kRoot, "/a/../d", "/b/e", 0, {"n1"}).error().code, EINVAL);
  EXPECT_EQ(ops_->RenameDir(kRoot, "/nope", "/b/e", 0, {"n1"}).error().code, ENOENT);
  EXPECT_EQ(ops_->RenameDir(kRoot, "/b/e", "/nope/x", 0, {"n1"}).error().code, ENOENT);
  EXPECT_EQ(ops_->RenameDir(kRoot, "/a/d", "/zz/e", 0, {"n1"}).error().code, ENOENT);
  EXPECT_TRUE(ops_->RenameDir(kRoot, "/a/d", "/a/d", 0, {"n1"}));
  ExpectWhole(false);
  EXPECT_EQ(JournalSize(), 0u);
}

TEST_F(DirOpsTest, CallerPermissionsApply) {
  StandardLayout();
  NewOps();
  Cred user{.uid = 4242, .gid = 4242, .groups = {}, .umask = 022};
  // /a is root's 0755: the user may not remove entries from it.
  auto s = ops_->RenameDir(user, "/a/d", "/b/e", 0, {"n1", "n2", "n3"});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, EACCES);
  ExpectWhole(false);
  EXPECT_EQ(JournalSize(), 0u);
}

TEST_F(DirOpsTest, FailureOnSecondNodeIsUndone) {
  StandardLayout();
  MakeDir("n1", "/b/e", 0700);  // an empty destination the rename replaces on n1
  Node("n2").rename_from = "/a/d";
  Node("n2").fail_rename = ENOSPC;
  NewOps();
  auto s = ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ENOSPC);
  for (const auto& n : kNodes) EXPECT_EQ(Tree(n, "/a/d"), before_[n]);
  EXPECT_FALSE(Exists("n2", "/b/e"));
  EXPECT_FALSE(Exists("n3", "/b/e"));
  // n1's replaced empty destination is back, with its mode.
  struct stat st {};
  ASSERT_EQ(::stat(Local("n1", "/b/e").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_TRUE(Tree("n1", "/b/e").empty());
  EXPECT_EQ(JournalSize(), 0u);
  EXPECT_EQ(ops_->PendingCount(), 0u);
}

TEST_F(DirOpsTest, RefusedWhileANodeIsDead) {
  StandardLayout();
  NewOps();
  view_->dead["n4"] = "n4:1";
  EXPECT_EQ(ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1"}).error().code, EHOSTDOWN);
  EXPECT_EQ(ops_->RemoveDir(kRoot, "/b", {"n1"}).error().code, EHOSTDOWN);
  view_->dead.clear();
  view_->live.erase("n3");
  EXPECT_EQ(ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n3"}).error().code, EHOSTDOWN);
  ExpectWhole(false);
}

TEST_F(DirOpsTest, RemoveEmptyDirectoryEverywhere) {
  for (const auto& n : kNodes) MakeDir(n, "/r/x");
  NewOps();
  ASSERT_TRUE(ops_->RemoveDir(kRoot, "/r/x", {"n1", "n2", "n3"}));
  for (const auto& n : kNodes) {
    EXPECT_FALSE(Exists(n, "/r/x"));
    EXPECT_TRUE(IsDir(n, "/r"));
  }
  EXPECT_EQ(notes_, (std::vector<std::string>{"-/r:x@n1", "-/r:x@n2", "-/r:x@n3"}));
  EXPECT_EQ(JournalSize(), 0u);
}

TEST_F(DirOpsTest, RemoveNonEmptyOnOneNodeRemovesNothing) {
  for (const auto& n : kNodes) MakeDir(n, "/r/x");
  MakeFile("n3", "/r/x/keep");
  NewOps();
  auto s = ops_->RemoveDir(kRoot, "/r/x", {"n1", "n2"});  // the hint misses n3
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ENOTEMPTY);
  for (const auto& n : kNodes) EXPECT_TRUE(IsDir(n, "/r/x"));
  EXPECT_EQ(JournalSize(), 0u);
}

TEST_F(DirOpsTest, RemoveFailureRecreatesWithModeAndOwner) {
  for (const auto& n : kNodes) MakeDir(n, "/r/x", 0750);
  ASSERT_EQ(::chown(Local("n1", "/r/x").c_str(), 1234, 5678), 0);
  Node("n3").fail_rmdir = EACCES;
  NewOps();
  auto s = ops_->RemoveDir(kRoot, "/r/x", {"n1", "n2", "n3"});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, EACCES);
  for (const auto& n : kNodes) {
    struct stat st {};
    ASSERT_EQ(::stat(Local(n, "/r/x").c_str(), &st), 0) << n;
    EXPECT_EQ(st.st_mode & 07777, 0750u) << n;
  }
  struct stat st {};
  ASSERT_EQ(::stat(Local("n1", "/r/x").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 5678u);
  EXPECT_EQ(JournalSize(), 0u);
}

TEST_F(DirOpsTest, PendingRecoveryWaitsForNodeAndBlocksThePaths) {
  StandardLayout();
  // Crash after n1 was renamed; at restart n3 does not answer.
  NewOps({.at_step = [](std::string_view step) {
    if (step == "done:n1") throw SimulatedCrash{};
  }});
  EXPECT_THROW((void)ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"}),
               SimulatedCrash);
  Node("n3").down = true;
  CrashAndRestart();
  ASSERT_TRUE(ops_->Recover());
  EXPECT_EQ(ops_->PendingCount(), 1u);
  EXPECT_EQ(JournalSize(), 1u);
  EXPECT_EQ(ops_->RenameDir(kRoot, "/b/e", "/b/f", 0, {"n1"}).error().code, EBUSY);
  EXPECT_EQ(ops_->RemoveDir(kRoot, "/a", {"n1"}).error().code, EBUSY);
  Node("n3").down = false;
  EXPECT_EQ(ops_->RetryPendingNow(), 0u);
  ExpectWhole(true);
  EXPECT_EQ(JournalSize(), 0u);
  EXPECT_TRUE(ops_->RenameDir(kRoot, "/b/e", "/b/f", 0, {"n1", "n2", "n3"}));
}

TEST_F(DirOpsTest, BackgroundRetryFinishesPendingRecord) {
  StandardLayout();
  NewOps({.at_step = [](std::string_view step) {
    if (step == "renamed:n2") throw SimulatedCrash{};
  }});
  EXPECT_THROW((void)ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"}),
               SimulatedCrash);
  view_->live.erase("n3");  // n3 not yet back in the view at restart
  CrashAndRestart();
  ASSERT_TRUE(ops_->Recover());
  EXPECT_EQ(ops_->PendingCount(), 1u);
  view_->live["n3"] = "n3:1";  // (the view is read through the ViewFn each retry)
  // Retries run at most 100 ms apart; the bound (60 s) only stops a hang.
  for (int i = 0; i < 6000 && ops_->PendingCount() > 0; ++i) ::usleep(10000);
  EXPECT_EQ(ops_->PendingCount(), 0u);
  ExpectWhole(true);
}

// Every step name the scenario passes through, from a run that does not crash.
std::vector<std::string> StepsOf(const std::function<void(DirOpsHooks)>& run) {
  auto steps = std::make_shared<std::vector<std::string>>();
  run({.at_step = [steps](std::string_view s) { steps->emplace_back(s); }});
  return *steps;
}

class DirOpsCrashTest : public DirOpsTest {};

// Crash at each step of a successful rename, recover, check "whole".
TEST_F(DirOpsCrashTest, RenameCrashAtEveryStep) {
  std::vector<std::string> steps;
  {
    World probe;
    probe.StandardLayout();
    steps = StepsOf([&](DirOpsHooks h) {
      probe.NewOps(std::move(h));
      ASSERT_TRUE(probe.ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"}));
    });
  }
  ASSERT_GE(steps.size(), 10u);
  for (const auto& crash_at : steps) {
    SCOPED_TRACE("crash at " + crash_at);
    World t;
    t.StandardLayout();
    t.NewOps({.at_step = [crash_at](std::string_view s) {
      if (s == crash_at) throw SimulatedCrash{};
    }});
    EXPECT_THROW((void)t.ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"}),
                 SimulatedCrash);
    t.CrashAndRestart();
    ASSERT_TRUE(t.ops_->Recover());
    EXPECT_EQ(t.ops_->PendingCount(), 0u);
    EXPECT_EQ(t.JournalSize(), 0u);
    const bool renamed = t.JudgeRename();
    // Once a node was renamed, recovery rolls forward.
    if (crash_at.starts_with("renamed:") || crash_at.starts_with("done:") ||
        crash_at == "notified" || crash_at == "finished") {
      EXPECT_TRUE(renamed);
    }
    if (crash_at == "journaled" || crash_at == "validated") {
      EXPECT_FALSE(renamed);
    }
  }
}

// Crash at each step of a rename that fails on n3 and is being undone.
TEST_F(DirOpsCrashTest, UndoCrashAtEveryStep) {
  auto arrange = [](World& t) {
    t.StandardLayout();
    t.Node("n3").rename_from = "/a/d";
    t.Node("n3").fail_rename = EACCES;
  };
  std::vector<std::string> steps;
  {
    World probe;
    arrange(probe);
    steps = StepsOf([&](DirOpsHooks h) {
      probe.NewOps(std::move(h));
      EXPECT_EQ(probe.ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"}).error().code,
                EACCES);
    });
  }
  ASSERT_NE(std::find(steps.begin(), steps.end(), "undone:n1"), steps.end());
  for (const auto& crash_at : steps) {
    SCOPED_TRACE("crash at " + crash_at);
    World t;
    arrange(t);
    t.NewOps({.at_step = [crash_at](std::string_view s) {
      if (s == crash_at) throw SimulatedCrash{};
    }});
    EXPECT_THROW((void)t.ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"}),
                 SimulatedCrash);
    t.CrashAndRestart();
    ASSERT_TRUE(t.ops_->Recover());
    EXPECT_EQ(t.ops_->PendingCount(), 0u);
    EXPECT_EQ(t.JournalSize(), 0u);
    EXPECT_FALSE(t.JudgeRename());  // n3 refuses: it can only end "not renamed"
  }
}

// Crash at each step of an rmdir on three nodes.
TEST_F(DirOpsCrashTest, RemoveCrashAtEveryStep) {
  auto arrange = [](World& t) {
    for (const auto& n : t.kNodes) t.MakeDir(n, "/r/x", 0750);
  };
  std::vector<std::string> steps;
  {
    World probe;
    arrange(probe);
    steps = StepsOf([&](DirOpsHooks h) {
      probe.NewOps(std::move(h));
      ASSERT_TRUE(probe.ops_->RemoveDir(kRoot, "/r/x", {"n1", "n2", "n3"}));
    });
  }
  ASSERT_GE(steps.size(), 7u);
  for (const auto& crash_at : steps) {
    SCOPED_TRACE("crash at " + crash_at);
    World t;
    arrange(t);
    t.NewOps({.at_step = [crash_at](std::string_view s) {
      if (s == crash_at) throw SimulatedCrash{};
    }});
    EXPECT_THROW((void)t.ops_->RemoveDir(kRoot, "/r/x", {"n1", "n2", "n3"}), SimulatedCrash);
    t.CrashAndRestart();
    ASSERT_TRUE(t.ops_->Recover());
    EXPECT_EQ(t.JournalSize(), 0u);
    const bool removed = !t.Exists("n1", "/r/x");
    for (const auto& n : t.kNodes) EXPECT_EQ(t.Exists(n, "/r/x"), !removed) << n;
    if (crash_at != "journaled") {
      EXPECT_TRUE(removed);
    }
  }
}

// A crash during an rmdir whose last node refuses: recovery recreates.
TEST_F(DirOpsCrashTest, RemoveRollForwardFailureRollsBack) {
  for (const auto& n : kNodes) MakeDir(n, "/r/x", 0750);
  NewOps({.at_step = [](std::string_view s) {
    if (s == "done:n2") throw SimulatedCrash{};
  }});
  EXPECT_THROW((void)ops_->RemoveDir(kRoot, "/r/x", {"n1", "n2", "n3"}), SimulatedCrash);
  MakeFile("n3", "/r/x/new");  // created while the coordinator was down
  CrashAndRestart();
  ASSERT_TRUE(ops_->Recover());
  EXPECT_EQ(JournalSize(), 0u);
  for (const auto& n : kNodes) {
    struct stat st {};
    ASSERT_EQ(::stat(Local(n, "/r/x").c_str(), &st), 0) << n;
    EXPECT_EQ(st.st_mode & 07777, 0750u) << n;
  }
  EXPECT_TRUE(Exists("n3", "/r/x/new"));
}

TEST(DirOpsRecord, UnreadableRecordIsKeptAndNotActedUpon) {
  MemKv kv;
  ASSERT_TRUE(kv.Put(kvkeys::DirOpsJournalKey(7), "garbage", true));
  auto view = std::make_shared<ClusterView>();
  DirOps ops("n1", &kv, [](const std::string&) -> NodeFs* { return nullptr; },
             [view] { return std::shared_ptr<const ClusterView>(view); }, nullptr);
  ASSERT_TRUE(ops.Recover());
  EXPECT_EQ(ops.PendingCount(), 0u);
  EXPECT_EQ(kv.Get(kvkeys::DirOpsJournalKey(7)).value(), "garbage");
}

}  // namespace
}  // namespace fedfs::ns

namespace fedfs::ns {
namespace {

std::string Text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file renamed over a file on another node (DirOps::ReplaceFile), crashed
// at every step and recovered: exactly one of the two files is at the name.
TEST_F(DirOpsCrashTest, ReplaceFileCrashAtEveryStepLeavesOneFileAtTheName) {
  auto arrange = [](World& t) {
    t.MakeFile("n1", "/p/src");  // content "/p/src"
    t.MakeFile("n2", "/p/dst");  // content "/p/dst"
  };
  auto replace = [](World& t) {
    return t.ops_->ReplaceFile(kRoot, "/p/src", "n1", "/p/dst", "/p/dst", "n2");
  };
  std::vector<std::string> steps;
  {
    World probe;
    arrange(probe);
    steps = StepsOf([&](DirOpsHooks h) {
      probe.NewOps(std::move(h));
      ASSERT_TRUE(replace(probe));
    });
    EXPECT_FALSE(probe.Exists("n2", "/p/dst"));
    EXPECT_EQ(Text(probe.Local("n1", "/p/dst")), "/p/src");
  }
  ASSERT_EQ(steps, (std::vector<std::string>{"replace-journaled", "replace-renamed:n1",
                                             "replace-unlinked:n2", "replace-finished"}));
  for (const auto& crash_at : steps) {
    SCOPED_TRACE("crash at " + crash_at);
    World t;
    arrange(t);
    t.NewOps({.at_step = [crash_at](std::string_view s) {
      if (s == crash_at) throw SimulatedCrash{};
    }});
    EXPECT_THROW((void)replace(t), SimulatedCrash);
    t.CrashAndRestart();
    ASSERT_TRUE(t.ops_->Recover());
    EXPECT_EQ(t.ops_->PendingCount(), 0u);
    EXPECT_EQ(t.JournalSize(), 0u);
    const bool renamed = crash_at != "replace-journaled";
    // Never both, never neither.
    EXPECT_EQ(t.Exists("n1", "/p/dst"), renamed);
    EXPECT_EQ(t.Exists("n2", "/p/dst"), !renamed);
    EXPECT_EQ(t.Exists("n1", "/p/src"), !renamed);
    EXPECT_EQ(Text(t.Local(renamed ? "n1" : "n2", "/p/dst")), renamed ? "/p/src" : "/p/dst");
  }
}

// The old destination's node refuses the unlink: the rename is put back.
TEST_F(DirOpsTest, ReplaceFileWhoseUnlinkIsRefusedIsUndone) {
  MakeFile("n1", "/p/src");
  MakeFile("n2", "/p/dst");
  Node("n2").fail_unlink = EACCES;
  NewOps();
  auto s = ops_->ReplaceFile(kRoot, "/p/src", "n1", "/p/dst", "/p/dst", "n2");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, EACCES);
  EXPECT_TRUE(Exists("n1", "/p/src"));
  EXPECT_FALSE(Exists("n1", "/p/dst"));
  EXPECT_TRUE(Exists("n2", "/p/dst"));
  EXPECT_EQ(JournalSize(), 0u);
}

// A file that took the old destination's name meanwhile is not removed.
TEST_F(DirOpsCrashTest, ReplaceFileRecoveryLeavesAFileThatTookTheName) {
  MakeFile("n1", "/p/src");
  MakeFile("n2", "/p/dst");
  NewOps({.at_step = [](std::string_view s) {
    if (s == "replace-renamed:n1") throw SimulatedCrash{};
  }});
  EXPECT_THROW((void)ops_->ReplaceFile(kRoot, "/p/src", "n1", "/p/dst", "/p/dst", "n2"),
               SimulatedCrash);
  // A new file (made while the old one lives: another inode) takes the name.
  MakeFile("n2", "/p/new");
  ASSERT_EQ(::rename(Local("n2", "/p/new").c_str(), Local("n2", "/p/dst").c_str()), 0);
  CrashAndRestart();
  ASSERT_TRUE(ops_->Recover());
  EXPECT_EQ(JournalSize(), 0u);
  EXPECT_TRUE(Exists("n2", "/p/dst"));
}

}  // namespace
}  // namespace fedfs::ns
