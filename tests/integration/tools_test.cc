// Third-party tools from Debian on a mount: fio with crc32c verification,
// stress-ng file-system stressors with verification, sqlite3 written in turns
// (and concurrently) through two nodes' mounts, tar in through one node and
// sha256sum -c through another, git init/add/commit/fsck.
//
// Parameterized over the targets of tests/posix/targets.h: the native and
// passthrough_ll targets check the tests themselves; the FedFS targets
// (files local, files remote) are the point. "Another node" is view(1) /
// view(2) of the target (the same directory on one-view targets). A missing
// tool or a target that cannot be created fails the test, with the reason;
// every test checks that the tool really did work (exit code and its own
// verification output), never only that it ran.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "tests/posix/mount_target.h"
#include "tests/posix/targets.h"

namespace fedfs::testing {
namespace {

class ToolsOnMount : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    target_ = GetTarget(GetParam(), &why);
    // A target that cannot start (passthrough_ll not built included) is a
    // failure, never a skip.
    if (target_ == nullptr) FAIL() << "target " << GetParam() << " failed: " << why;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    case_ = std::string("tools-") + info->name();
    for (char& c : case_) {
      if (c == '/') c = '_';
    }
    dir0_ = Dir(0);
    RemoveTree(dir0_);
    ASSERT_EQ(::mkdir(dir0_.c_str(), 0755), 0) << dir0_ << ": " << std::strerror(errno);
  }
  void TearDown() override {
    if (!dir0_.empty()) {
      EXPECT_TRUE(RemoveTree(dir0_)) << "could not clean " << dir0_;
    }
  }

  void NeedTool(const std::string& tool) {
    if (!HaveProgram(tool)) FAIL() << tool << " is not installed (scripts/install-deps.sh installs it)";
  }
  // The case directory through view i ("node" i).
  std::string Dir(size_t i) const { return target_->view(i) + "/" + case_; }

  MountTarget* target_ = nullptr;
  std::string case_, dir0_;
};

// ---- fio ---------------------------------------------------------------------

struct FioCase {
  const char* name;
  const char* rw;
  bool direct;
};

TEST_P(ToolsOnMount, FioVerifyCrc32c) {
  NeedTool("fio");
  for (const FioCase& c : {FioCase{"seq-buffered", "write", false}, FioCase{"rand-buffered", "randwrite", false},
                           FioCase{"seq-direct", "write", true}, FioCase{"rand-direct", "randwrite", true}}) {
    if (c.direct && target_->Has(Quirk::kODirectPassthrough)) {
      std::printf("note: %s skipped on %s (reference quirk: O_DIRECT passed through)\n", c.name,
                  target_->name().c_str());
      continue;
    }
    SCOPED_TRACE(c.name);
    // Write 16 MiB with crc32c headers in every block, then read it all back
    // and verify (do_verify after the write phase); the read side goes
    // through view 1 when the target has one: another node reading.
    const std::string file = std::string("fio-") + c.name;
    const std::vector<std::string> common = {
        "fio", "--name=" + std::string(c.name), "--filename=" + file, "--size=16M", "--bs=4k",
        "--ioengine=psync", "--verify=crc32c", "--verify_fatal=1", "--output-format=normal",
        std::string("--direct=") + (c.direct ? "1" : "0")};
    std::vector<std::string> write = common;
    write.push_back(std::string("--rw=") + c.rw);
    write.push_back("--do_verify=1");
    write.push_back("--randrepeat=1");
    ProcResult w = testing::Run(write, 300s, Dir(0));
    ASSERT_EQ(w.exit_code, 0) << w.output;
    EXPECT_NE(w.output.find("WRITE: bw="), std::string::npos) << w.output;
    EXPECT_EQ(w.output.find("verify:"), std::string::npos) << w.output;
    // Verify-only pass from the other view (fio --verify_only replays the
    // same seeded job and checks every block's header and crc).
    std::vector<std::string> verify = common;
    verify.push_back(std::string("--rw=") + c.rw);
    verify.push_back("--verify_only=1");
    verify.push_back("--randrepeat=1");
    ProcResult v = testing::Run(verify, 300s, Dir(1));
    ASSERT_EQ(v.exit_code, 0) << v.output;
    EXPECT_NE(v.output.find("READ: bw="), std::string::npos) << v.output;
    // Corruption must be caught: flip one byte in the middle and expect the
    // verify pass to fail (proves the check is real).
    if (std::string(c.name) == "seq-buffered") {
      const std::string path = Dir(0) + "/" + file;
      ProcResult flip = Sh("printf 'X' | dd of=" + ShQuote(path) +
                           " bs=1 seek=8388700 conv=notrunc status=none");
      ASSERT_EQ(flip.exit_code, 0) << flip.output;
      ProcResult bad = testing::Run(verify, 300s, Dir(1));
      EXPECT_NE(bad.exit_code, 0) << "fio did not detect a corrupted block:\n" << bad.output;
    }
    ::unlink((Dir(0) + "/" + file).c_str());
  }
}

// ---- stress-ng -----------------------------------------------------------------

TEST_P(ToolsOnMount, StressNgFilesystemStressors) {
  NeedTool("stress-ng");
  ProcResult r = testing::Run({"stress-ng", "--temp-path", Dir(0), "--hdd", "1", "--hdd-opts", "wr-seq,rd-seq",
                      "--hdd-bytes", "16M", "--link", "1", "--symlink", "1", "--rename", "1", "--dir", "1",
                      "--verify", "--timeout", "5s", "--metrics-brief"},
                     // stress-ng's cleanup of thousands of files through the
                     // mount outlasts its 5 s of load (about a minute in the
                     // release build, over two under ASan).
                     400s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("successful run completed"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("fail"), std::string::npos) << r.output;
  // Every stressor did work (bogo ops > 0) -- not a vacuous pass.
  for (const char* s : {"hdd", "link", "symlink", "rename", "dir"}) {
    std::smatch m;
    const std::regex re(std::string("metrc: \\[\\d+\\] ") + s + "\\s+(\\d+)");
    ASSERT_TRUE(std::regex_search(r.output, m, re)) << s << " missing from:\n" << r.output;
    EXPECT_GT(std::stoll(m[1].str()), 0) << s << " did no work:\n" << r.output;
  }
}

// ---- sqlite3 -------------------------------------------------------------------

TEST_P(ToolsOnMount, Sqlite3TwoNodesTakeTurns) {
  NeedTool("sqlite3");
  const std::string db0 = Dir(0) + "/t.db", db1 = Dir(1) + "/t.db";
  ProcResult r = testing::Run({"sqlite3", db0, "CREATE TABLE t(id INTEGER PRIMARY KEY, node INT, v TEXT);"}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Strict turns: each write is read back by the other node before its own
  // write, so every turn checks coherence of data and metadata.
  for (int i = 0; i < 20; ++i) {
    const std::string& mine = i % 2 ? db1 : db0;
    r = testing::Run({"sqlite3", "-cmd", ".timeout 10000", mine,
             "BEGIN IMMEDIATE; INSERT INTO t(node, v) VALUES(" + std::to_string(i % 2) +
                 ", hex(randomblob(300))); COMMIT; SELECT count(*) FROM t;"},
            60s);
    ASSERT_EQ(r.exit_code, 0) << "turn " << i << ": " << r.output;
    EXPECT_EQ(r.output, std::to_string(i + 1) + "\n") << "turn " << i;
  }
  // Then both nodes at once: locking must serialize them.
  std::string script = ".timeout 30000\n";
  for (int i = 0; i < 40; ++i) script += "INSERT INTO t(node, v) VALUES(9, hex(randomblob(2000)));\n";
  const std::string sql = Dir(0) + "/inserts.sql";
  { std::ofstream(sql) << script; }
  r = Sh("sqlite3 " + ShQuote(db0) + " < " + ShQuote(sql) + " & a=$!; sqlite3 " + ShQuote(db1) + " < " +
             ShQuote(Dir(1) + "/inserts.sql") + " & b=$!; wait $a; ra=$?; wait $b; rb=$?; exit $((ra + rb))",
         180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::Run({"sqlite3", db1, "PRAGMA integrity_check; SELECT count(*) FROM t;"}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "ok\n100\n");
  r = testing::Run({"sqlite3", db0, "SELECT count(*), sum(length(v)) FROM t;"}, 60s);
  EXPECT_EQ(r.output, "100|332000\n");  // 20 x 600 + 80 x 4000 hex digits
}

// ---- tar + sha256sum -------------------------------------------------------------

TEST_P(ToolsOnMount, TarInThroughNode0ShaCheckThroughNode2) {
  NeedTool("tar");
  NeedTool("sha256sum");
  const std::string src = MakeTempDir("fedfs-tar-src");
  // A tree with nesting, empty and large files, a symlink, a hard link.
  ProcResult r = Sh("set -e; cd " + ShQuote(src) +
                    "; mkdir -p a/b/c d/e empty-dir; "
                    "for i in $(seq 1 40); do head -c $((i * 997)) /dev/urandom > a/f$i; done; "
                    "head -c 3000000 /dev/urandom > a/b/c/big; : > d/e/empty; "
                    "printf 'hello\\n' > 'd/name with spaces'; ln -s ../a/f1 d/link; ln a/f2 a/b/hard; "
                    "find . -type f -print0 | sort -z | xargs -0 sha256sum > ../sums-$$; mv ../sums-$$ SHA256SUMS",
                    60s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Sh("tar -C " + ShQuote(src) + " -cf - . | tar -C " + ShQuote(Dir(0)) + " -xf -", 120s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  RemoveTree(src);
  r = Sh("cd " + ShQuote(Dir(2)) + " && sha256sum -c --strict SHA256SUMS", 120s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 44) << r.output;  // every file checked
  EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
  char buf[64] = {};
  EXPECT_EQ(::readlink((Dir(2) + "/d/link").c_str(), buf, sizeof buf - 1), 7);
  EXPECT_STREQ(buf, "../a/f1");
  struct stat st;
  ASSERT_EQ(::stat((Dir(2) + "/a/b/hard").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);
  // And tar back out through node 2 lists the same tree.
  r = Sh("tar -C " + ShQuote(Dir(2)) + " -cf - . | tar -tf - | wc -l", 60s);
  EXPECT_EQ(r.output, "53\n") << r.output;  // 44 files, 7 directories, 1 symlink, "./"
}

// ---- git -------------------------------------------------------------------------

TEST_P(ToolsOnMount, GitInitAddCommitFsck) {
  NeedTool("git");
  const std::string repo = Dir(0) + "/repo";
  const std::string git = "git -c user.name=t -c user.email=t@example.com -c init.defaultBranch=main ";
  ProcResult r = Sh("set -e; mkdir " + ShQuote(repo) + "; cd " + ShQuote(repo) + "; " + git +
                        "init -q; for i in $(seq 1 30); do mkdir -p d$((i % 5)); seq $i $((i * 100)) > d$((i % 5))/f$i; done; " +
                        git + "add -A; " + git + "commit -q -m one; " +
                        "sed -i s/1/one/ d1/f1; git mv d2 moved; " + git + "commit -qam two; " + git +
                        "gc -q; " + git + "fsck --full --strict",
                    180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Another node sees a clean, consistent repository.
  const std::string repo1 = Dir(1) + "/repo";
  r = Sh("cd " + ShQuote(repo1) + " && git -c safe.directory='*' fsck --full --strict && git -c safe.directory='*' "
         "status --porcelain && git -c safe.directory='*' rev-list --count HEAD",
         120s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "2\n") << r.output;
}

INSTANTIATE_TEST_SUITE_P(Native, ToolsOnMount, ::testing::Values("native"));
INSTANTIATE_TEST_SUITE_P(PassthroughLl, ToolsOnMount, ::testing::Values("passthrough_ll"));
INSTANTIATE_TEST_SUITE_P(FedfsLocal, ToolsOnMount, ::testing::Values("fedfs-local"));
INSTANTIATE_TEST_SUITE_P(FedfsRemote, ToolsOnMount, ::testing::Values("fedfs-remote"));

}  // namespace
}  // namespace fedfs::testing
