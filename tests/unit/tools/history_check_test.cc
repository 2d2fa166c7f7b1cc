// The namespace linearizability checker (tests/tools/history_check.h) on
// hand-written histories: ones that some real-time-respecting order explains
// and ones that none does. Times are microseconds from an arbitrary origin.
#include "tests/tools/history_check.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace fedfs::testing {
namespace {

const HistoryClock::time_point kT0{};

NsOp Op(int process, NsOpKind kind, std::string a, int err, int invoke_us, int response_us) {
  NsOp op;
  op.process = process;
  op.kind = kind;
  op.a = std::move(a);
  op.err = err;
  op.invoke = kT0 + std::chrono::microseconds(invoke_us);
  op.response = kT0 + std::chrono::microseconds(response_us);
  return op;
}
NsOp Rename(int process, std::string a, std::string b, int err, int invoke_us, int response_us,
            bool noreplace = false) {
  NsOp op = Op(process, noreplace ? NsOpKind::kRenameNoReplace : NsOpKind::kRename, std::move(a),
               err, invoke_us, response_us);
  op.b = std::move(b);
  return op;
}
NsOp Stat(int process, std::string a, int err, int invoke_us, int response_us) {
  NsOp op = Op(process, NsOpKind::kStat, std::move(a), err, invoke_us, response_us);
  if (err == 0) op.type = NsType::kFile;
  return op;
}
NsOp Readdir(int process, std::string dir, std::set<std::string> names, int invoke_us,
             int response_us) {
  NsOp op = Op(process, NsOpKind::kReaddir, std::move(dir), 0, invoke_us, response_us);
  op.names = std::move(names);
  return op;
}

using K = NsOpKind;

void ExpectLinearizable(const std::vector<NsOp>& h, const std::map<std::string, NsType>& init = {}) {
  const auto v = CheckLinearizable(h, init);
  EXPECT_TRUE(v.linearizable) << v.explanation << FormatHistory(h);
}
void ExpectNotLinearizable(const std::vector<NsOp>& h,
                           const std::map<std::string, NsType>& init = {}) {
  const auto v = CheckLinearizable(h, init);
  EXPECT_FALSE(v.linearizable) << FormatHistory(h);
  EXPECT_NE(v.explanation.find("not linearizable"), std::string::npos) << v.explanation;
}

TEST(HistoryCheck, EmptyAndSequentialHistories) {
  ExpectLinearizable({});
  ExpectLinearizable({
      Op(0, K::kCreate, "a", 0, 0, 10),
      Stat(0, "a", 0, 20, 30),
      Rename(0, "a", "b", 0, 40, 50),
      Stat(0, "a", ENOENT, 60, 70),
      Readdir(0, "", {"b"}, 80, 90),
      Op(0, K::kUnlink, "b", 0, 100, 110),
      Op(0, K::kUnlink, "b", ENOENT, 120, 130),
  });
}

TEST(HistoryCheck, ConcurrentCreatesOneWinsOneSeesEexist) {
  // The EEXIST one may even return first: both overlap.
  ExpectLinearizable({
      Op(0, K::kCreate, "a", 0, 0, 100),
      Op(1, K::kCreate, "a", EEXIST, 10, 50),
  });
}

// A lost message (unknown_outcomes): an operation that failed with
// ETIMEDOUT may have taken effect, at any time after its call, or not at all;
// the results of the others must still agree with one of the two.
TEST(HistoryCheck, AnOperationWhoseOutcomeIsUnknownMayOrMayNotHaveHappened) {
  auto check = [](const std::vector<NsOp>& h) { return CheckLinearizable(h, {}, true); };
  // It happened: a later stat sees the file, even long after the error.
  const std::vector<NsOp> happened{
      Op(0, K::kCreate, "a", ETIMEDOUT, 0, 10),
      Stat(1, "a", 0, 500, 510),
  };
  EXPECT_TRUE(check(happened).linearizable);
  EXPECT_FALSE(CheckLinearizable(happened).linearizable) << "without it, ETIMEDOUT is wrong";
  // It did not happen.
  EXPECT_TRUE(check({Op(0, K::kCreate, "a", ETIMEDOUT, 0, 10), Stat(1, "a", ENOENT, 20, 30)})
                  .linearizable);
  // Either way, the others' answers must fit one history: the file seen, then
  // not seen, with nothing else removing it, is still wrong.
  EXPECT_FALSE(check({Op(0, K::kCreate, "a", ETIMEDOUT, 0, 10), Stat(1, "a", 0, 20, 30),
                      Stat(1, "a", ENOENT, 40, 50)})
                   .linearizable);
}

TEST(HistoryCheck, TwoCreatesBothOkIsNotLinearizable) {
  ExpectNotLinearizable({
      Op(0, K::kCreate, "a", 0, 0, 100),
      Op(1, K::kCreate, "a", 0, 10, 50),
  });
  // Also when they do not overlap.
  ExpectNotLinearizable({
      Op(0, K::kCreate, "a", 0, 0, 10),
      Op(1, K::kCreate, "a", 0, 20, 30),
  });
}

TEST(HistoryCheck, OverlappingRenameAndStatMayGoEitherWay) {
  const std::map<std::string, NsType> init{{"a", NsType::kFile}};
  // stat(a) overlaps rename(a, b): it may see a (before) or not (after).
  ExpectLinearizable({Rename(0, "a", "b", 0, 0, 100), Stat(1, "a", 0, 10, 20)}, init);
  ExpectLinearizable({Rename(0, "a", "b", 0, 0, 100), Stat(1, "a", ENOENT, 10, 20)}, init);
  // Two stats during the rename: a seen after it was gone is not possible...
  ExpectNotLinearizable({Rename(0, "a", "b", 0, 0, 100), Stat(1, "a", ENOENT, 10, 20),
                         Stat(1, "a", 0, 30, 40)},
                        init);
  // ... and b missing after a was seen gone is not possible either.
  ExpectNotLinearizable({Rename(0, "a", "b", 0, 0, 100), Stat(1, "a", ENOENT, 30, 40),
                         Stat(2, "b", ENOENT, 45, 50)},
                        init);
  // (While p2's stat of b began before a was seen gone, it may precede the
  // rename.)
  ExpectLinearizable({Rename(0, "a", "b", 0, 0, 100), Stat(1, "b", ENOENT, 10, 20),
                      Stat(1, "a", ENOENT, 30, 40), Stat(2, "b", ENOENT, 10, 50)},
                     init);
  ExpectLinearizable({Rename(0, "a", "b", 0, 0, 100), Stat(1, "a", 0, 10, 20),
                      Stat(1, "b", ENOENT, 30, 40), Stat(2, "b", 0, 45, 50),
                      Stat(2, "a", ENOENT, 60, 70)},
                     init);
}

TEST(HistoryCheck, StatEnoentAfterACompletedCreateIsNotLinearizable) {
  ExpectNotLinearizable({
      Op(0, K::kCreate, "a", 0, 0, 10),
      Stat(1, "a", ENOENT, 20, 30),
  });
  // Overlapping, it is fine.
  ExpectLinearizable({
      Op(0, K::kCreate, "a", 0, 0, 25),
      Stat(1, "a", ENOENT, 20, 30),
  });
}

TEST(HistoryCheck, ReaddirMissingANameCreatedBeforeItBeganIsNotLinearizable) {
  ExpectNotLinearizable({
      Op(0, K::kCreate, "a", 0, 0, 10),
      Op(1, K::kCreate, "b", 0, 0, 10),
      Readdir(2, "", {"b"}, 20, 30),
  });
  ExpectLinearizable({
      Op(0, K::kCreate, "a", 0, 0, 10),
      Op(1, K::kCreate, "b", 0, 0, 25),
      Readdir(2, "", {"a"}, 20, 30),
  });
  // A name the model never heard of (e.g. a conflict alias) fails too.
  ExpectNotLinearizable({
      Op(0, K::kCreate, "a", 0, 0, 10),
      Readdir(2, "", {"a", "a@n2"}, 20, 30),
  });
}

TEST(HistoryCheck, RenameReplaceAndNoReplace) {
  const std::map<std::string, NsType> init{{"a", NsType::kFile}, {"b", NsType::kFile}};
  ExpectLinearizable({Rename(0, "a", "b", 0, 0, 10), Readdir(0, "", {"b"}, 20, 30)}, init);
  ExpectLinearizable({Rename(0, "a", "b", EEXIST, 0, 10, true), Readdir(0, "", {"a", "b"}, 20, 30)},
                     init);
  ExpectNotLinearizable({Rename(0, "a", "b", 0, 0, 10, true)}, init);
  ExpectNotLinearizable({Rename(0, "a", "b", EEXIST, 0, 10)}, init);
  ExpectLinearizable({Rename(0, "c", "b", ENOENT, 0, 10, true)}, init);
  // Rename onto itself: a no-op, or EEXIST with NOREPLACE.
  ExpectLinearizable({Rename(0, "a", "a", 0, 0, 10), Rename(0, "a", "a", EEXIST, 20, 30, true),
                      Readdir(0, "", {"a", "b"}, 40, 50)},
                     init);
}

// The kernel answers RENAME_NOREPLACE's EEXIST from two lookups, a then b,
// which another node's changes can fall between (history_check.h).
TEST(HistoryCheck, NoReplaceEexistIsTwoLookupsInOrder) {
  auto create = [](int p, const std::string& x, int t0, int t1) { return Op(p, K::kCreate, x, 0, t0, t1); };
  auto unlink = [](int p, const std::string& x, int t0, int t1) { return Op(p, K::kUnlink, x, 0, t0, t1); };
  // a exists, then goes; b appears only after: no single moment had both,
  // but a lookup of a and a later lookup of b explain it.
  ExpectLinearizable({Rename(0, "a", "b", EEXIST, 0, 100, true), unlink(1, "a", 10, 20),
                      create(1, "b", 30, 40), Readdir(1, "", {"b"}, 50, 60)},
                     {{"a", NsType::kFile}});
  // The other order (b first, a later) is not how the kernel looks.
  ExpectNotLinearizable({Rename(0, "a", "b", EEXIST, 0, 100, true), unlink(1, "b", 10, 20),
                         create(1, "a", 30, 40), Readdir(1, "", {"a"}, 50, 60)},
                        {{"b", NsType::kFile}});
  // Each lookup still lies within the call: b created after it returned.
  ExpectNotLinearizable({Rename(0, "a", "b", EEXIST, 0, 100, true), create(1, "b", 110, 120)},
                        {{"a", NsType::kFile}});
  // A source that never existed: ENOENT, never EEXIST.
  ExpectNotLinearizable({Rename(0, "c", "b", EEXIST, 0, 10, true)},
                        {{"a", NsType::kFile}, {"b", NsType::kFile}});
}

TEST(HistoryCheck, DirectoriesAndNestedPaths) {
  ExpectLinearizable({
      Op(0, K::kMkdir, "d", 0, 0, 10),
      Op(0, K::kCreate, "d/x", 0, 20, 30),
      Op(1, K::kRmdir, "d", ENOTEMPTY, 40, 50),
      Rename(1, "d", "e", 0, 60, 70),
      Stat(1, "e/x", 0, 80, 90),
      Op(0, K::kReaddir, "d", ENOENT, 100, 110),
      Readdir(0, "e", {"x"}, 120, 130),
      Op(0, K::kUnlink, "e", EISDIR, 140, 150),
      Op(0, K::kCreate, "e/x/y", ENOTDIR, 160, 170),
  });
  ExpectNotLinearizable({
      Op(0, K::kMkdir, "d", 0, 0, 10),
      Op(0, K::kCreate, "d/x", 0, 20, 30),
      Op(1, K::kRmdir, "d", 0, 40, 50),
  });
}

TEST(HistoryCheck, UnexpectedErrnoIsNotLinearizable) {
  ExpectNotLinearizable({Op(0, K::kCreate, "a", EIO, 0, 10)});
}

TEST(HistoryCheck, ExplanationNamesTheOffendingOperation) {
  const std::vector<NsOp> h{
      Op(0, K::kCreate, "a", 0, 0, 10),
      Op(1, K::kCreate, "b", 0, 0, 10),
      Stat(1, "a", ENOENT, 20, 30),
  };
  const auto v = CheckLinearizable(h);
  ASSERT_FALSE(v.linearizable);
  EXPECT_NE(v.explanation.find("p1 stat(a) -> ENOENT   model says: file"), std::string::npos)
      << v.explanation;
  EXPECT_NE(v.explanation.find("model state after it: {a, b}"), std::string::npos) << v.explanation;
}

// Many concurrent, linearizable operations: the memo keeps the search
// small. (Generated by a sequential run, then every interval is widened so
// that each operation overlaps its neighbours.)
TEST(HistoryCheck, LargeConcurrentHistoryChecksQuickly) {
  const std::vector<std::string> pool{"a", "b", "c", "d", "e", "f", "g", "h"};
  std::map<std::string, NsType> truth;
  std::vector<NsOp> h;
  uint64_t x = 12345;
  auto rnd = [&](uint64_t m) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (x >> 33) % m;
  };
  for (int i = 0; i < 240; ++i) {
    const std::string a = pool[rnd(pool.size())], b = pool[rnd(pool.size())];
    NsOp op;
    op.process = i % 6;
    switch (rnd(5)) {
      case 0:
        op.kind = K::kCreate;
        op.err = truth.contains(a) ? EEXIST : 0;
        truth[a] = NsType::kFile;
        break;
      case 1:
        op.kind = K::kUnlink;
        op.err = truth.erase(a) == 1 ? 0 : ENOENT;
        break;
      case 2:
        op.kind = K::kRename;
        op.b = b;
        op.err = truth.contains(a) ? 0 : ENOENT;
        if (op.err == 0 && a != b) truth.erase(a), truth[b] = NsType::kFile;
        break;
      case 3:
        op.kind = K::kStat;
        op.err = truth.contains(a) ? 0 : ENOENT;
        op.type = op.err == 0 ? NsType::kFile : NsType::kNone;
        break;
      default:
        op.kind = K::kReaddir;
        for (const auto& [n, t] : truth) op.names.insert(n);
        break;
    }
    op.a = op.kind == K::kReaddir ? "" : a;
    // Sequential point at 100*i; the interval spans 3 neighbours each side.
    op.invoke = kT0 + std::chrono::microseconds(100 * i - 250);
    op.response = kT0 + std::chrono::microseconds(100 * i + 250);
    h.push_back(std::move(op));
  }
  const auto v = CheckLinearizable(h);
  EXPECT_TRUE(v.linearizable) << v.explanation;
  // Corrupt one readdir in the middle: now it must fail.
  for (size_t i = 120; i < h.size(); ++i) {
    if (h[i].kind == K::kReaddir) {
      h[i].names.insert("zz");
      break;
    }
  }
  const auto bad = CheckLinearizable(h);
  EXPECT_FALSE(bad.linearizable);
}

}  // namespace
}  // namespace fedfs::testing
