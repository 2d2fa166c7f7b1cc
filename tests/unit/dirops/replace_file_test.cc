// DirOps (dirops/dir_ops.h): a file renamed over a file on another node
// (ReplaceFile), crashed at every step; and the name locks by which two
// coordinators' overlapping operations wait for each other. The world of
// dir_ops_world.h.
#include "dirops/dir_ops.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/dirops/dir_ops_world.h"

namespace fedfs::ns {
namespace {

using namespace dirops_test;

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


// Two coordinators on overlapping paths: the second waits for the first's
// name locks (here past its deadline: EBUSY, nothing done), then runs.
TEST_F(DirOpsTest, OverlappingOperationsOfTwoCoordinatorsWaitForEachOther) {
  StandardLayout();
  std::promise<void> paused;
  std::promise<void> go;
  std::shared_future<void> go_f = go.get_future().share();
  NewOps({.at_step = [&](std::string_view s) {
    if (s == "validated") {
      paused.set_value();
      go_f.wait();
    }
  }});
  std::thread first(
      [&] { EXPECT_TRUE(ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"})); });
  paused.get_future().wait();
  MemKv kv2;
  auto second = MakeOps("n2", &kv2, {}, std::chrono::milliseconds(300));
  auto s = second->RenameDir(kRoot, "/a", "/z", 0, {"n1", "n2", "n3"});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, EBUSY) << s.error().ToString();
  auto rm = second->RemoveDir(kRoot, "/b", {"n1", "n2", "n3"});
  ASSERT_FALSE(rm);
  EXPECT_EQ(rm.error().code, EBUSY) << rm.error().ToString();
  for (const auto& n : kNodes) EXPECT_TRUE(Exists(n, "/a")) << n;
  go.set_value();
  first.join();
  ExpectWhole(true);
  // The first one ended: its locks are gone, the second one runs.
  EXPECT_TRUE(second->RenameDir(kRoot, "/a", "/z", 0, {"n1", "n2", "n3"}));
  for (const auto& n : kNodes) EXPECT_TRUE(Exists(n, "/z")) << n;
  std::lock_guard lock(locks_mu_);
  EXPECT_TRUE(locks_.empty());
}

TEST(DirOpsNameLocks, EveryComponentOfEveryPath) {
  using L = DirOps::NameLock;
  EXPECT_EQ(DirOps::NameLocksOf({"/a/d", "/b/e"}),
            (std::vector<L>{{"/", "a"}, {"/", "b"}, {"/a", "d"}, {"/b", "e"}}));
  EXPECT_EQ(DirOps::NameLocksOf({"/a"}), (std::vector<L>{{"/", "a"}}));
}

}  // namespace
}  // namespace fedfs::ns
