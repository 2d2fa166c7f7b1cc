// DirOps (dirops/dir_ops.h): journaled multi-node rename and rmdir of
// directories. Three nodes in one process: three LocalNodeFs over temporary
// export roots, each behind a fault-injecting wrapper; the journal in a
// RocksDbKv in the same temporary directory, closed and reopened to simulate
// a crash of the coordinator. The crash tests stop the operation at EVERY
// step (a hook that throws), then recover with a new DirOps over the reopened
// journal and check that the directory is wholly renamed (or removed) or
// wholly not, on every node.
#include "dirops/dir_ops.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/dirops/dir_ops_world.h"

namespace fedfs::ns {
namespace {

using namespace dirops_test;

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

// A node declared dead while the operation runs has no NodeFs any more: a
// coordinator that looked it up again mid-validation got a null pointer and
// crashed (a daemon of the chaos run). Now it answers, and once the node is
// back the directory is wholly renamed or wholly not.
TEST_F(DirOpsTest, ANodeDeclaredDeadMidOperationNeverCrashesTheCoordinator) {
  StandardLayout();
  NewOps();
  {
    std::lock_guard lock(locks_mu_);
    lookups_left_["n3"] = 1;
  }
  const Status s = ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"});
  {
    std::lock_guard lock(locks_mu_);
    lookups_left_.clear();
  }
  EXPECT_EQ(ops_->RetryPendingNow(), 0u);
  EXPECT_EQ(JournalSize(), 0u);
  ExpectWhole(s.has_value());
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
