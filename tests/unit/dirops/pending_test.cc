// Dead members' pending operations (dirops/pending.h, pending_apply.h) and
// DirOps going ahead while a member is dead (dirops/dir_ops.h, "Dead
// nodes"), in the three-node world of dir_ops_world.h with n3 dead.
#include "dirops/pending.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "tests/unit/dirops/dir_ops_world.h"
#include "dirops/pending_apply.h"
#include "dirops/pending_service.h"

namespace fedfs::ns::dirops_test {
namespace {

PendingOp SomeOp(const std::string& node = "n3", uint64_t seq = 7) {
  PendingOp op;
  op.seq = seq;
  op.op_id = seq;
  op.node = node;
  op.kind = PendingOp::Kind::kRename;
  op.from = "/a/d";
  op.to = "/b/e";
  op.templates = {{0711, 1, 2, 99}};
  op.coordinator = "n1";
  op.time_ms = 1234;
  return op;
}

TEST(PendingCodec, RoundTripsRecordsListsAndAsks) {
  const PendingOp op = SomeOp();
  EXPECT_EQ(DecodePendingOp(EncodePendingOp(op)).value(), op);
  PendingOp rm = SomeOp("n2", 9);
  rm.kind = PendingOp::Kind::kRmdir;
  rm.to.clear();
  rm.templates.clear();
  const std::vector<PendingOp> list{op, rm};
  EXPECT_EQ(DecodePendingList(EncodePendingList(list)).value(), list);
  EXPECT_EQ(DecodePendingList(EncodePendingList({})).value(), std::vector<PendingOp>{});
  const auto ask = DecodePendingAsk(EncodePendingAsk("n3", 42)).value();
  EXPECT_EQ(ask.first, "n3");
  EXPECT_EQ(ask.second, 42u);
}

TEST(PendingCodec, RefusesWhatItDidNotWrite) {
  auto refused = [](const PendingOp& op) {
    auto r = DecodePendingOp(EncodePendingOp(op));
    return !r && r.error().code == EPROTO;
  };
  const std::vector<std::function<void(PendingOp&)>> breaks = {
      [](PendingOp& o) { o.node = "bad/id"; },
      [](PendingOp& o) { o.node = ""; },
      [](PendingOp& o) { o.coordinator = ""; },
      [](PendingOp& o) { o.from = "/"; },
      [](PendingOp& o) { o.from = "a/../b"; },
      [](PendingOp& o) { o.to = "/a/d/in"; },  // beneath the source
      [](PendingOp& o) { o.kind = static_cast<PendingOp::Kind>(5); },
  };
  for (size_t i = 0; i < breaks.size(); ++i) {
    PendingOp op = SomeOp();
    breaks[i](op);
    EXPECT_TRUE(refused(op)) << i;
  }
  EXPECT_FALSE(DecodePendingAsk(EncodePendingAsk("..", 1)));
  // Truncations and random bytes: an error, never a crash.
  const std::string good = EncodePendingList({SomeOp(), SomeOp("n2", 8)});
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(DecodePendingList(std::string(good.substr(0, n)))) << n;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string b = good;
    b[rng() % b.size()] = static_cast<char>(rng());
    (void)DecodePendingList(b);
    (void)DecodePendingOp(b);
    (void)DecodePendingAsk(b);
  }
}

TEST(PendingStore, HoldsErasesAndReloads) {
  MemKv kv;
  PendingStore s(&kv);
  ASSERT_TRUE(s.Load());
  EXPECT_FALSE(s.Holds("n3"));
  ASSERT_TRUE(s.Put({SomeOp("n3", 5), SomeOp("n3", 9), SomeOp("n2", 7)}));
  EXPECT_TRUE(s.Holds("n3"));
  EXPECT_EQ(s.Fenced(), (std::set<std::string>{"n2", "n3"}));
  EXPECT_EQ(s.MaxSeq(), 9u);
  ASSERT_EQ(s.For("n3").size(), 2u);
  EXPECT_EQ(s.For("n3")[0].seq, 5u);  // by seq
  EXPECT_EQ(s.For("").size(), 3u);
  ASSERT_TRUE(s.Erase("n3", 5));
  ASSERT_EQ(s.For("n3").size(), 1u);
  PendingStore again(&kv);  // a restart reads what was stored
  ASSERT_TRUE(again.Load());
  EXPECT_EQ(again.For(""), s.For(""));
  ASSERT_TRUE(again.EraseOp(7));  // SomeOp's op id is its seq
  EXPECT_FALSE(again.Holds("n2"));
  ASSERT_TRUE(again.Erase("n3", UINT64_MAX));
  EXPECT_TRUE(again.Fenced().empty());
  PendingStore third(&kv);
  ASSERT_TRUE(third.Load());
  EXPECT_TRUE(third.Fenced().empty());
}

// A plain store for DirOps; Replicate notes what it was given.
class StoreSink final : public PendingSink {
 public:
  explicit StoreSink(Kv* kv) : store_(kv) { EXPECT_TRUE(store_.Load()); }
  PendingStore& store() override { return store_; }
  void Replicate(const std::vector<PendingOp>& ops) override { replicated.push_back(ops); }
  bool Returning(const std::string& node) const override {
    if (!returning || node != "n3") return false;
    return returning();
  }
  PendingStore store_;
  std::vector<std::vector<PendingOp>> replicated;
  std::function<bool()> returning;  // for n3
};

class DeadMemberTest : public DirOpsTest {
 protected:
  void KillN3() {
    view_->live.erase("n3");
    view_->dead["n3"] = "n3:1";
  }
  void WithSink() {
    sink_ = std::make_unique<StoreSink>(kv_.get());
    ops_->SetPending(sink_.get());
  }
  std::unique_ptr<StoreSink> sink_;
};

TEST_F(DeadMemberTest, WithoutRecordsTheyWaitForTheDeadMember) {
  StandardLayout();
  KillN3();
  NewOps();
  EXPECT_EQ(ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2"}).error().code, EHOSTDOWN);
  EXPECT_EQ(ops_->RemoveDir(kRoot, "/b", {"n1"}).error().code, EHOSTDOWN);
}

// In a partition only a strict majority goes ahead: one live member of
// three records nothing and waits, as without records.
TEST_F(DeadMemberTest, WithoutAMajorityTheyWait) {
  StandardLayout();
  KillN3();
  view_->live.erase("n2");
  view_->dead["n2"] = "n2:1";
  NewOps();
  WithSink();
  EXPECT_EQ(ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1"}).error().code, EHOSTDOWN);
  EXPECT_EQ(ops_->RemoveDir(kRoot, "/b", {"n1"}).error().code, EHOSTDOWN);
  EXPECT_TRUE(sink_->store().For("").empty());
  EXPECT_TRUE(IsDir("n1", "/a/d"));
}

TEST_F(DeadMemberTest, RenameGoesAheadAndTheDeadMemberAppliesItsRecordLater) {
  StandardLayout();
  KillN3();
  NewOps();
  WithSink();
  ASSERT_TRUE(ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2"}));
  for (const char* n : {"n1", "n2"}) {
    EXPECT_FALSE(Exists(n, "/a/d")) << n;
    EXPECT_EQ(Tree(n, "/b/e"), before_[n]) << n;
  }
  EXPECT_EQ(Tree("n3", "/a/d"), before_["n3"]);  // untouched while dead
  const auto held = sink_->store().For("n3");
  ASSERT_EQ(held.size(), 1u);
  const PendingOp& op = held[0];
  EXPECT_EQ(op.kind, PendingOp::Kind::kRename);
  EXPECT_EQ(op.from, "/a/d");
  EXPECT_EQ(op.to, "/b/e");
  EXPECT_EQ(op.coordinator, "n1");
  ASSERT_EQ(op.templates.size(), 1u);  // /b, made on n3 as it is on n1
  EXPECT_EQ(op.templates[0].mode & 07777, 0711u);
  ASSERT_EQ(sink_->replicated.size(), 1u);  // copied before it answered
  EXPECT_EQ(sink_->replicated[0], held);
  EXPECT_EQ(JournalSize(), 0u);

  // n3 returns and applies it (twice: a crash while applying starts over).
  ASSERT_TRUE(ApplyPendingOp(Node("n3"), op));
  ASSERT_TRUE(ApplyPendingOp(Node("n3"), op));
  EXPECT_FALSE(Exists("n3", "/a/d"));
  EXPECT_EQ(Tree("n3", "/b/e"), before_["n3"]);
  struct stat st {};
  ASSERT_EQ(::stat(Local("n3", "/b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);

  // A later operation's seq is larger than every record held.
  ASSERT_TRUE(ops_->RenameDir(kRoot, "/b/e", "/b/f", 0, {"n1", "n2"}));
  const auto both = sink_->store().For("n3");
  ASSERT_EQ(both.size(), 2u);
  EXPECT_GT(both[1].seq, both[0].seq);
}

// A dead member that is back and applying its records (in contact, still
// held): the coordinator waits for it to be alive, and records nothing more.
TEST_F(DeadMemberTest, ACoordinatorWaitsForAMemberThatIsBackRatherThanRecordMore) {
  StandardLayout();
  KillN3();
  NewOps();
  WithSink();
  int asked = 0;
  sink_->returning = [&] {
    if (++asked < 5) return true;
    auto v = std::make_shared<ClusterView>(*view_);  // it applied: alive again
    v->dead.erase("n3");
    v->live["n3"] = "n3:1";
    view_ = v;  // (a new view: the coordinator still walks the old one)
    return false;
  };
  auto done = ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2", "n3"});
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(asked, 5);
  EXPECT_TRUE(sink_->store().For("").empty());
  ExpectWhole(true);
}

TEST_F(DeadMemberTest, RmdirGoesAheadAndWhatTheDeadMemberHeldGoesToTheOrphans) {
  MakeDir("n1", "/x");
  MakeFile("n3", "/x/only-on-n3");
  KillN3();
  NewOps();
  WithSink();
  ASSERT_TRUE(ops_->RemoveDir(kRoot, "/x", {"n1"}));
  EXPECT_FALSE(Exists("n1", "/x"));
  const auto held = sink_->store().For("n3");
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].kind, PendingOp::Kind::kRmdir);
  ASSERT_TRUE(ApplyPendingOp(Node("n3"), held[0]));
  EXPECT_FALSE(Exists("n3", "/x"));
  EXPECT_TRUE(Exists("n3", OrphanPath(held[0].op_id, "/x/only-on-n3")));
  ASSERT_TRUE(ApplyPendingOp(Node("n3"), held[0]));  // idempotent
}

TEST_F(DeadMemberTest, AFailedOperationLeavesNoRecord) {
  StandardLayout();
  KillN3();
  NewOps();
  WithSink();
  Node("n2").rename_from = "/a/d";
  Node("n2").fail_rename = EACCES;
  EXPECT_EQ(ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2"}).error().code, EACCES);
  EXPECT_TRUE(sink_->store().For("").empty());
  EXPECT_TRUE(sink_->replicated.empty());
  EXPECT_TRUE(kv_->Scan(kvkeys::kPendingPrefix).value().empty());
  EXPECT_EQ(JournalSize(), 0u);
}

// The records are written with state Acting, in one batch: a crash before any
// holder changed drops them with the operation; after, they stay (rolled
// forward) for the service to copy again.
class DeadMemberCrashTest : public DeadMemberTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(DeadMemberCrashTest, TheRecordsStayExactlyWhenTheOperationRollsForward) {
  const std::string crash_at = GetParam();
  StandardLayout();
  KillN3();
  NewOps({.at_step = [crash_at](std::string_view s) {
    if (s == crash_at) throw SimulatedCrash{};
  }});
  WithSink();
  EXPECT_THROW((void)ops_->RenameDir(kRoot, "/a/d", "/b/e", 0, {"n1", "n2"}), SimulatedCrash);
  sink_.reset();
  CrashAndRestart();
  WithSink();
  ASSERT_TRUE(ops_->Recover());
  const bool forward = crash_at == "done:n1";
  EXPECT_EQ(sink_->store().For("n3").size(), forward ? 1u : 0u);
  for (const char* n : {"n1", "n2"}) EXPECT_EQ(Exists(n, "/b/e"), forward) << n;
  EXPECT_EQ(JournalSize(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Steps, DeadMemberCrashTest, ::testing::Values("validated", "done:n1"));

TEST_F(DeadMemberTest, ARenameOntoANonEmptyDirectoryMergesAndKeepsClashesAsOrphans) {
  MakeFile("n3", "/x/k");
  MakeFile("n3", "/x/new");
  MakeFile("n3", "/y/k");
  MakeFile("n3", "/y/other");
  PendingOp op = SomeOp();
  op.from = "/x";
  op.to = "/y";
  op.templates.clear();
  ASSERT_TRUE(ApplyPendingOp(Node("n3"), op));
  EXPECT_FALSE(Exists("n3", "/x"));
  EXPECT_EQ(Tree("n3", "/y"), (std::set<std::string>{"k", "new", "other"}));
  EXPECT_TRUE(Exists("n3", OrphanPath(op.op_id, "/x/k")));
  // `to` not a directory: `from` is kept as an orphan.
  MakeFile("n3", "/p/q");
  MakeFile("n3", "/file");
  op.op_id = 8;
  op.from = "/p";
  op.to = "/file";
  ASSERT_TRUE(ApplyPendingOp(Node("n3"), op));
  EXPECT_TRUE(Exists("n3", OrphanPath(8, "/p/q")));
  EXPECT_TRUE(Exists("n3", "/file"));
}

}  // namespace
}  // namespace fedfs::ns::dirops_test
