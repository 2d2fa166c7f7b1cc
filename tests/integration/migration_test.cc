// File moves between nodes (migration/migration.h, docs/migration.md) on
// three real daemons with FUSE mounts (label "integration"; needs root and
// /dev/fuse):
//  * `fedfsctl migrate` through a third node moves a file from its node to
//    another: afterwards it is in the target's export root only, with the
//    same bytes (holes kept), mode, owner, times and xattrs; every mount
//    lists it once and reads the same bytes; a write after the move lands at
//    the target and is read through the other mounts;
//  * a file open through every mount moves, and each handle reads and
//    writes the moved file (opened again at the target); a locked file is
//    refused (moving locks is not built);
//  * fio's crc32c verification passes while the file it writes moves back
//    and forth five times;
//  * a remote write held at the file's gate longer than a remote call may
//    take completes where the file moved;
//  * bad requests (a directory, an unknown node, the node it is on) are
//    refused with their reason and change nothing, by a dry run too; a
//    dry run of a move that can be made says so and moves nothing.
//
// Each test owns a Cluster, which stops the daemons by pid, unmounts and
// removes its temporary directory whatever happens.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/migration_util.h"
#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

// Content with a hole: 1 MiB of random bytes, 2 MiB unwritten, 300 KiB more.
std::string MakeContent() {
  std::mt19937_64 rng(42);
  std::string s((3u << 20) + 300 * 1024, '\0');
  for (size_t i = 0; i < (1u << 20); ++i) s[i] = static_cast<char>(rng());
  for (size_t i = 3u << 20; i < s.size(); ++i) s[i] = static_cast<char>(rng());
  return s;
}

void WriteSparse(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, content.data(), 1u << 20, 0), 1 << 20);
  const size_t tail = content.size() - (3u << 20);
  ASSERT_EQ(::pwrite(fd, content.data() + (3u << 20), tail, 3 << 20),
            static_cast<ssize_t>(tail));
  ::close(fd);
}

class Migration : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
    const std::string e = c_.StartMounted(3, &ids_);
    ASSERT_EQ(e, "");
  }
  std::string Root(const std::string& id) const { return c_.ExportRoot(id); }
  std::string Mnt(const std::string& id) const { return c_.Mountpoint(id); }

  Cluster c_;
  std::vector<std::string> ids_;
};

TEST_F(Migration, MovesAFileKeepingPathBytesAndAttributes) {
  // The file lives on n1 (written into its export root, as a local program
  // would); n3 asks for the move to n2.
  fs::create_directories(Root("n1") + "/data");
  const std::string content = MakeContent();
  const std::string local = Root("n1") + "/data/f";
  WriteSparse(local, content);
  ASSERT_EQ(::chmod(local.c_str(), 0640), 0);
  ASSERT_EQ(::chown(local.c_str(), 1234, 2345), 0);
  ASSERT_EQ(::setxattr(local.c_str(), "user.color", "blue", 4, 0), 0);
  const struct timespec times[2] = {{1000000000, 5}, {1200000000, 7}};
  ASSERT_EQ(::utimensat(AT_FDCWD, local.c_str(), times, 0), 0);
  ASSERT_EQ(Digest(ReadFileText(Mnt("n3") + "/data/f")), Digest(content));  // seen before the move
  ASSERT_EQ(Holder(c_, "n3", "/data/f"), "n1");
  struct stat before {};  // the read above may have set the access time
  ASSERT_EQ(::stat(local.c_str(), &before), 0);

  const CommandResult r = Migrate(c_, "n3", "/data/f", "n2");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << c_.Log("n1") << c_.Log("n2");
  EXPECT_NE(r.out.find("moved /data/f from n1 to n2"), std::string::npos) << r.out;

  EXPECT_FALSE(fs::exists(local));
  const std::string moved = Root("n2") + "/data/f";
  ASSERT_TRUE(fs::exists(moved));
  struct stat st {};  // before any read sets the access time
  ASSERT_EQ(::stat(moved.c_str(), &st), 0);
  EXPECT_EQ(Digest(ReadFileText(moved)), Digest(content));
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 2345u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1200000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 7);
  EXPECT_EQ(st.st_atim.tv_sec, before.st_atim.tv_sec);
  EXPECT_EQ(st.st_atim.tv_nsec, before.st_atim.tv_nsec);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, content.size() - (1u << 20))
      << "the hole was filled";
  char xv[16] = {};
  ASSERT_EQ(::getxattr(moved.c_str(), "user.color", xv, sizeof xv), 4);
  EXPECT_EQ(std::string(xv, 4), "blue");

  for (const std::string& id : ids_) {
    SCOPED_TRACE(id);
    EXPECT_EQ(ListNames(Mnt(id) + "/data"), std::set<std::string>{"f"});
    EXPECT_EQ(Digest(ReadFileText(Mnt(id) + "/data/f")), Digest(content));
    EXPECT_EQ(Holder(c_, id, "/data/f"), "n2");
  }
  auto stats = c_.Ctl("n1", {"migrations"});
  ASSERT_TRUE(stats.is_object());
  EXPECT_EQ(stats["done"], 1);
  EXPECT_EQ(stats["pending"], 0);
  EXPECT_EQ(c_.Ctl("n2", {"migrations"})["received"], 1);

  // A write through n1's mount lands at n2 and is read through n3's.
  {
    const int fd = ::open((Mnt("n1") + "/data/f").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::pwrite(fd, "HELLO", 5, 10), 5);
    ::close(fd);
  }
  std::string changed = content;
  changed.replace(10, 5, "HELLO");
  EXPECT_EQ(Digest(ReadFileText(moved)), Digest(changed));
  EXPECT_EQ(Digest(ReadFileText(Mnt("n3") + "/data/f")), Digest(changed));
  EXPECT_FALSE(fs::exists(local));

  // And back, through the file's new node itself.
  const CommandResult back = Migrate(c_, "n2", "/data/f", "n1");
  ASSERT_EQ(back.exit_code, 0) << back.out << back.err;
  EXPECT_EQ(Digest(ReadFileText(local)), Digest(changed));
  EXPECT_FALSE(fs::exists(moved));
  for (const std::string& id : ids_) {
    EXPECT_EQ(Digest(ReadFileText(Mnt(id) + "/data/f")), Digest(changed)) << id;
  }
}

TEST_F(Migration, OpenHandlesFollowTheFileAndLockedFilesAreRefused) {
  fs::create_directories(Root("n1") + "/d");
  const std::string local = Root("n1") + "/d/open";
  { std::ofstream(local) << std::string(100, '.'); }
  // A handle through each node's mount: n1 holds the file (its own handle
  // is local), n2 and n3 reach it through n1's file service.
  std::map<std::string, int> fds;
  for (const std::string& id : ids_) {
    fds[id] = ::open((Mnt(id) + "/d/open").c_str(), O_RDWR);
    ASSERT_GE(fds[id], 0) << id << ": " << std::strerror(errno);
  }
  // A lock refuses the move (moving locks is not built); nothing changes.
  ASSERT_EQ(::flock(fds["n2"], LOCK_EX | LOCK_NB), 0) << std::strerror(errno);
  const CommandResult locked = Migrate(c_, "n2", "/d/open", "n3");
  EXPECT_NE(locked.exit_code, 0);
  EXPECT_NE((locked.out + locked.err).find("locked"), std::string::npos)
      << locked.out << locked.err;
  EXPECT_TRUE(fs::exists(local));
  ASSERT_EQ(::flock(fds["n2"], LOCK_UN), 0);

  const CommandResult r = Migrate(c_, "n2", "/d/open", "n3");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << c_.Log("n1") << c_.Log("n3");
  EXPECT_FALSE(fs::exists(local));
  const std::string moved = Root("n3") + "/d/open";
  ASSERT_TRUE(fs::exists(moved));
  // Every handle still reads and writes the one file, now at n3.
  size_t at = 0;
  for (const std::string& id : ids_) {
    SCOPED_TRACE(id);
    const std::string mark = "<" + id + ">";
    ASSERT_EQ(::pwrite(fds[id], mark.data(), mark.size(), static_cast<off_t>(at)),
              static_cast<ssize_t>(mark.size()))
        << std::strerror(errno);
    ASSERT_EQ(::fsync(fds[id]), 0) << std::strerror(errno);
    at += 10;
  }
  std::string want(100, '.');
  want.replace(0, 4, "<n1>");
  want.replace(10, 4, "<n2>");
  want.replace(20, 4, "<n3>");
  EXPECT_EQ(ReadFileText(moved), want);
  for (const std::string& id : ids_) {
    SCOPED_TRACE(id);
    char buf[100];
    ASSERT_EQ(::pread(fds[id], buf, sizeof buf, 0), 100) << std::strerror(errno);
    EXPECT_EQ(std::string(buf, 100), want);
    struct stat st {};
    ASSERT_EQ(::fstat(fds[id], &st), 0) << std::strerror(errno);
    EXPECT_EQ(st.st_size, 100);
    ::close(fds[id]);
    EXPECT_EQ(ReadFileText(Mnt(id) + "/d/open"), want);
  }
  EXPECT_FALSE(fs::exists(local));
}

// fio writes and verifies (crc32c, a backlog checked as it runs) a file
// through n2's mount while the file moves n1 -> n3 -> n1 ... five times.
TEST_F(Migration, FioVerifyPassesWhileTheFileMovesBackAndForthFiveTimes) {
  if (::system("command -v fio >/dev/null 2>&1") != 0) GTEST_SKIP() << "fio is not installed";
  fs::create_directories(Root("n1") + "/fio");
  { std::ofstream(Root("n1") + "/fio/f") << ""; }
  ASSERT_EQ(Holder(c_, "n2", "/fio/f"), "n1");
  // Laid out first (so that the moves start on the whole file), then
  // written at random for 12 s with every 64 writes read back and checked.
  CommandResult fio;
  std::thread writer([&] {
    fio = RunCommand({"fio", "--name=moving", "--filename=" + Mnt("n2") + "/fio/f",
                      "--size=8M", "--bs=4k", "--ioengine=psync", "--rw=randwrite",
                      "--verify=crc32c", "--verify_fatal=1", "--verify_backlog=64",
                      "--do_verify=1", "--time_based", "--runtime=12", "--randrepeat=1",
                      "--verify_state_save=0",
                      "--output-format=normal"},
                     std::chrono::seconds(120));
  });
  // The moves: each waits for fio's writes to be under way.
  int moved = 0;
  std::string errors;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (int i = 0; i < 5; ++i) {
    const std::string to = i % 2 == 0 ? "n3" : "n1";
    CommandResult r;
    // A move of a file written meanwhile may answer EAGAIN or EBUSY (it
    // changed during the copy twice, or a lock of its name): asked again.
    for (int tries = 0; tries < 20; ++tries) {
      r = Migrate(c_, "n2", "/fio/f", to);
      if (r.exit_code == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (r.exit_code == 0) {
      ++moved;
    } else {
      errors += r.out + r.err;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
  }
  writer.join();
  EXPECT_EQ(moved, 5) << errors << c_.Log("n1") << c_.Log("n3");
  EXPECT_EQ(fio.exit_code, 0) << fio.out << fio.err;
  EXPECT_NE(fio.out.find("WRITE: bw="), std::string::npos) << fio.out;
  EXPECT_EQ(fio.out.find("verify:"), std::string::npos) << fio.out;
  EXPECT_EQ(Holder(c_, "n1", "/fio/f"), "n3");  // five moves: n1 -> n3 ... -> n3
  // Written during the copies: some moves copied the changed chunks again.
  const uint64_t deltas = c_.Ctl("n1", {"migrations"})["deltas"].get<uint64_t>() +
                          c_.Ctl("n3", {"migrations"})["deltas"].get<uint64_t>();
  EXPECT_GE(deltas, 1u);
  EXPECT_FALSE(fs::exists(Root("n1") + "/fio/f"));
  for (const std::string& id : ids_) EXPECT_EQ(ListNames(Mnt(id) + "/fio"), std::set<std::string>{"f"}) << id;
}

TEST_F(Migration, BadRequestsAreRefusedWithTheirReason) {
  fs::create_directories(Root("n1") + "/d");
  { std::ofstream(Root("n1") + "/d/f") << "x"; }
  // A file with two names: its names do not move together (not built), so
  // its move is refused, saying why (docs/migration.md).
  { std::ofstream(Root("n1") + "/d/h") << "y"; }
  fs::create_hard_link(Root("n1") + "/d/h", Root("n1") + "/d/h2");
  ASSERT_EQ(ReadFileText(Mnt("n2") + "/d/f"), "x");
  ASSERT_EQ(ReadFileText(Mnt("n2") + "/d/h2"), "y");
  struct Case {
    std::string path, to, says;
  };
  for (const Case& k : {Case{"/d/f", "n9", "not alive"}, Case{"/d/f", "n1", "already"},
                        Case{"/d/none", "n2", "No such"}, Case{"/d/h", "n2", "has 2 hard links"}}) {
    SCOPED_TRACE(k.path + " -> " + k.to);
    const CommandResult r = Migrate(c_, "n3", k.path, k.to);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE((r.out + r.err).find(k.says), std::string::npos) << r.out << r.err;
    // A dry run refuses it with the same reason.
    const CommandResult d = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n3"),
                                        "migrate", k.path, "--to", k.to, "--dry-run"},
                                       kNoHang);
    EXPECT_NE(d.exit_code, 0);
    EXPECT_NE((d.out + d.err).find(k.says), std::string::npos) << d.out << d.err;
  }
  // A dry run of a move that can be made says so, and moves nothing.
  const CommandResult ok = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n3"),
                                       "migrate", "/d/f", "--to", "n2", "--dry-run"},
                                      kNoHang);
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("would move /d/f from n1 to n2 (1 bytes)"), std::string::npos) << ok.out;
  EXPECT_EQ(ReadFileText(Root("n1") + "/d/f"), "x");
  EXPECT_EQ(ListNames(Root("n2")), std::set<std::string>{});
  EXPECT_EQ(c_.Ctl("n1", {"migrations"})["pending"], 0);
  EXPECT_EQ(c_.Ctl("n1", {"migrations"})["done"], 0);
}

// fedfsctl migrate PATH... walks the directories among its paths and moves
// every regular file below them that is not on the target yet, one at a
// time, with a line per file (--json: an object per line and a summary);
// --dry-run moves nothing; a ^C (SIGINT) cancels the move in progress and
// stops.
TEST_F(Migration, MovesSubtreesAndSeveralPathsOneFileAtATime) {
  for (const char* d : {"/t/sub/deeper"}) fs::create_directories(Root("n1") + d);
  fs::create_directories(Root("n2") + "/t/sub");
  fs::create_directories(Root("n3") + "/t");
  std::map<std::string, std::string> want;  // path -> content
  for (const auto& [node, path] : std::multimap<std::string, std::string>{
           {"n1", "/t/a"}, {"n1", "/t/sub/b"}, {"n1", "/t/sub/deeper/c"}, {"n2", "/t/sub/d"},
           {"n3", "/t/e"}, {"n3", "/x"}}) {
    want[path] = "content of " + path;
    std::ofstream(Root(node) + path) << want[path];
  }
  ASSERT_EQ(::symlink("a", (Root("n1") + "/t/link").c_str()), 0);
  ASSERT_EQ(ListNames(Mnt("n3") + "/t"), (std::set<std::string>{"a", "e", "link", "sub"}));

  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n3"), "migrate",
                                     "/t", "/x", "--to", "n2", "--json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv, kNoHang);
  };
  auto lines = [](const std::string& out) {
    std::vector<nlohmann::json> v;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) v.push_back(nlohmann::json::parse(l));
    return v;
  };
  const CommandResult plan = run({"--dry-run"});
  ASSERT_EQ(plan.exit_code, 0) << plan.out << plan.err;
  auto p = lines(plan.out);
  ASSERT_EQ(p.size(), 6u) << plan.out;  // five files and the summary
  EXPECT_EQ(p.back()["files"], 5);
  EXPECT_EQ(p.back()["skipped_there"], 1);  // /t/sub/d
  EXPECT_EQ(p.back()["skipped_other"], 1);  // the symlink
  EXPECT_EQ(c_.Ctl("n1", {"migrations"})["done"], 0);
  EXPECT_TRUE(fs::exists(Root("n1") + "/t/a"));

  const CommandResult moved = run({});
  ASSERT_EQ(moved.exit_code, 0) << moved.out << moved.err << c_.Log("n3");
  auto m = lines(moved.out);
  ASSERT_EQ(m.size(), 6u) << moved.out;
  std::set<std::string> paths;
  for (size_t i = 0; i + 1 < m.size(); ++i) {
    EXPECT_FALSE(m[i].contains("error")) << m[i].dump();
    EXPECT_EQ(m[i]["to"], "n2");
    EXPECT_EQ(m[i]["done"], i + 1);
    paths.insert(m[i]["path"].get<std::string>());
  }
  EXPECT_EQ(paths, (std::set<std::string>{"/t/a", "/t/sub/b", "/t/sub/deeper/c", "/t/e", "/x"}));
  EXPECT_EQ(m.back()["done"], 5);
  EXPECT_EQ(m.back()["failed"], 0);
  for (const auto& [path, content] : want) {
    EXPECT_EQ(ReadFileText(Root("n2") + path), content) << path;
    for (const std::string& id : ids_) EXPECT_EQ(ReadFileText(Mnt(id) + path), content) << id << path;
  }
  EXPECT_TRUE(fs::is_symlink(Root("n1") + "/t/link"));
  // Nothing left to move below /t: said, and not an error (a file named
  // that is there already is one: /x above).
  const CommandResult again = RunCommand(
      {FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n3"), "migrate", "/t", "--to", "n2"}, kNoHang);
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.err.find("no file to move"), std::string::npos) << again.err;

  // ^C during the first of three slow moves: it is cancelled (undone), the
  // others are not made.
  fs::create_directories(Root("n1") + "/slow");
  for (const char* f : {"/slow/1", "/slow/2", "/slow/3"}) {
    std::ofstream(Root("n1") + f, std::ios::binary) << std::string(3u << 20, 'x');
  }
  // Made by a local program: n3's copy of / (kept valid by deltas) shows
  // it once n1's watcher reported it (docs/namespace.md, "Autonomy").
  ASSERT_TRUE(WaitFor(
      [&] { return ListNames(Mnt("n3") + "/slow") == std::set<std::string>{"1", "2", "3"}; },
      kNoHang));
  const CommandResult cut = RunCommand(
      {"sh", "-c",
       std::string(FEDFS_FEDFSCTL_PATH) + " --socket " + c_.Socket("n3") +
           " migrate /slow --to n2 --max-rate 1M & p=$!; sleep 1; kill -INT $p; wait $p"},
      kNoHang);
  EXPECT_EQ(cut.exit_code, 1) << cut.out << cut.err;
  EXPECT_NE(cut.err.find("interrupted: 2 file(s) not moved"), std::string::npos) << cut.err;
  EXPECT_NE((cut.out + cut.err).find("/slow/1: the move was cancelled"), std::string::npos)
      << cut.out << cut.err;
  EXPECT_TRUE(fs::exists(Root("n1") + "/slow/1"));
  EXPECT_FALSE(fs::exists(Root("n2") + "/slow/1"));
  EXPECT_TRUE(fs::exists(Root("n1") + "/slow/2"));
  EXPECT_TRUE(fs::exists(Root("n1") + "/slow/3"));
}

// `--max-rate` bounds the copy's reads at T: 6 MiB at 2 MiB/s cannot take
// less than 3 s (each read of a 1 MiB chunk waits until the bytes before it
// took their share of time; without the bound the move takes a fraction of
// a second here), and arrives whole. A rate fedfsctl cannot read is refused
// before anything is asked. Meanwhile `migrate_progress`, asked through a
// third node, shows the copy part done (what fedfsctl migrate's bar draws),
// and once the move is over there is none.
TEST_F(Migration, MaxRateBoundsTheCopy) {
  fs::create_directories(Root("n1") + "/d");
  std::string content(6u << 20, '\0');
  std::mt19937_64 rng(7);
  for (char& ch : content) ch = static_cast<char>('a' + rng() % 26);
  { std::ofstream(Root("n1") + "/d/big", std::ios::binary) << content; }
  ASSERT_EQ(Holder(c_, "n3", "/d/big"), "n1");
  for (const char* bad : {"fast", "0", "1.5M", "5PB"}) {
    const CommandResult r = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n3"), "migrate",
                                        "/d/big", "--to", "n2", "--max-rate", bad},
                                       kNoHang);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("--max-rate"), std::string::npos) << r.err;
  }
  EXPECT_EQ(c_.Ctl("n1", {"migrations"})["done"], 0);
  const CommandResult none = RunCommand(
      {FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n3"), "migrate_progress", "/d/big"}, kNoHang);
  EXPECT_EQ(none.exit_code, 1) << none.out << none.err;
  EXPECT_NE(none.err.find("no move of /d/big in progress"), std::string::npos) << none.err;
  const auto t0 = std::chrono::steady_clock::now();
  CommandResult r;
  std::atomic<bool> over{false};
  std::thread move([&] {
    r = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n3"), "migrate", "/d/big", "--to",
                    "n2", "--max-rate", "2M"},
                   kNoHang);
    over = true;
  });
  // Part of the copy seen: more than nothing, less than all, never more
  // than the file, and never less than seen before.
  bool partly = false;
  uint64_t last = 0;
  while (!over) {
    const auto p = c_.Ctl("n2", {"migrate_progress", "/d/big"});
    if (p.is_object()) {
      const auto copied = p.value("copied", uint64_t{0});
      EXPECT_EQ(p.value("bytes", uint64_t{0}), content.size()) << p.dump();
      EXPECT_EQ(p.value("from", ""), "n1") << p.dump();
      EXPECT_EQ(p.value("to", ""), "n2") << p.dump();
      EXPECT_LE(copied, content.size()) << p.dump();
      EXPECT_GE(copied, last) << p.dump();
      last = copied;
      partly = partly || (copied > 0 && copied < content.size());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  move.join();
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << c_.Log("n1") << c_.Log("n2");
  EXPECT_TRUE(partly) << "the copy's progress was never seen part done";
  EXPECT_TRUE(c_.Ctl("n3", {"migrate_progress", "/d/big"}).is_null());
  EXPECT_GE(took, std::chrono::seconds(3)) << "the copy was not bounded";
  EXPECT_EQ(Holder(c_, "n3", "/d/big"), "n2");
  EXPECT_EQ(Digest(ReadFileText(Root("n2") + "/d/big")), Digest(content));
  EXPECT_EQ(Digest(ReadFileText(Mnt("n1") + "/d/big")), Digest(content));
}

// A move in progress is cancelled by ^C of the fedfsctl that asked for it,
// or by `fedfsctl cancel PATH` through any node: it fails with ECANCELED,
// undone at both ends (the file stays at its node, whole, listed once), and
// the next move of the file goes through. A cancel of no move says so.
TEST_F(Migration, ACancelStopsAMoveInProgressAndUndoesIt) {
  fs::create_directories(Root("n1") + "/d");
  std::string content(16u << 20, '\0');
  std::mt19937_64 rng(5);
  for (char& ch : content) ch = static_cast<char>(rng());
  { std::ofstream(Root("n1") + "/d/big", std::ios::binary) << content; }
  ASSERT_EQ(Holder(c_, "n3", "/d/big"), "n1");
  const CommandResult none =
      RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n3"), "cancel", "/d/big"}, kNoHang);
  EXPECT_EQ(none.exit_code, 1) << none.out << none.err;
  EXPECT_NE(none.err.find("no move of /d/big in progress"), std::string::npos) << none.err;

  // A move copying at 2 MiB/s (8 s) is in progress once n1 counts it.
  auto started = [&](uint64_t n) {
    return WaitFor([&] { return c_.Ctl("n1", {"migrations"}).value("started", uint64_t{0}) >= n; },
                   kNoHang);
  };
  const std::vector<std::string> migrate{FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n3"),
                                         "migrate", "/d/big", "--to", "n2", "--max-rate", "2M"};
  // 1. ^C of fedfsctl migrate.
  const std::string out = c_.dir() + "/migrate.out";
  std::vector<char*> argv;
  for (const std::string& a : migrate) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(127);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  bool exited = false;
  const bool in_progress = started(1);
  if (in_progress) ::kill(pid, SIGINT);
  exited = WaitFor([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, kNoHang);
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(in_progress) << c_.Log("n1");
  ASSERT_TRUE(exited) << "fedfsctl migrate did not end after ^C";
  const std::string said = ReadFileText(out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << ": " << said;
  EXPECT_NE(said.find("cancelled"), std::string::npos) << said;

  // 2. fedfsctl cancel, through another node than the one asked.
  CommandResult moved;
  std::thread ask([&] { moved = RunCommand(migrate, kNoHang); });
  const bool second = started(2);
  const CommandResult cancel =
      RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n2"), "cancel", "/d/big"}, kNoHang);
  ask.join();
  ASSERT_TRUE(second) << c_.Log("n1");
  EXPECT_EQ(cancel.exit_code, 0) << cancel.out << cancel.err;
  EXPECT_EQ(cancel.out, "cancelled the move of /d/big (at n1)\n");
  EXPECT_EQ(moved.exit_code, 1) << moved.out << moved.err;
  EXPECT_NE((moved.out + moved.err).find("cancelled"), std::string::npos) << moved.out << moved.err;

  // Undone at both ends: the file at n1 only, whole, listed once.
  auto pending = [&](const std::string& id) {
    return c_.Ctl(id, {"migrations"}).value("pending", uint64_t{99});
  };
  EXPECT_TRUE(WaitFor([&] { return pending("n1") == 0 && pending("n2") == 0; }, kNoHang));
  EXPECT_EQ(c_.Ctl("n1", {"migrations"}).value("undone", uint64_t{0}), 2u);
  EXPECT_FALSE(fs::exists(Root("n2") + "/d/big"));
  EXPECT_EQ(Digest(ReadFileText(Root("n1") + "/d/big")), Digest(content));
  for (const std::string& id : ids_) {
    EXPECT_EQ(ListNames(Mnt(id) + "/d"), std::set<std::string>{"big"}) << id;
  }
  // The next move goes through.
  const CommandResult again = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n3"),
                                          "migrate", "/d/big", "--to", "n2"},
                                         kNoHang);
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_EQ(Holder(c_, "n3", "/d/big"), "n2");
  EXPECT_EQ(Digest(ReadFileText(Mnt("n1") + "/d/big")), Digest(content));
}

// A write through another node's mount that waits at the file's gate for
// longer than a remote call may take (the move paused 3 s after its freeze,
// FEDFS_TEST_PAUSE_AT=mig:frozen+3000; timeouts.rpc_ms is 2000) is asked
// again while it waits (kErrMoveWait) and lands where the file moved: no
// error, nothing lost.
TEST(MigrationHeld, ARemoteWriteWaitsOutALongFreezeWithoutAnError) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c;
  std::vector<std::string> ids;
  ::setenv("FEDFS_TEST_PAUSE_AT", "mig:frozen+3000", 1);
  const std::string started = c.StartMounted(3, &ids);
  ::unsetenv("FEDFS_TEST_PAUSE_AT");
  ASSERT_EQ(started, "");
  fs::create_directories(c.ExportRoot("n1") + "/d");
  const std::string content(1 << 20, 'x');
  { std::ofstream(c.ExportRoot("n1") + "/d/f", std::ios::binary) << content; }
  const int fd = ::open((c.Mountpoint("n2") + "/d/f").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  CommandResult moved;
  std::thread mover([&] { moved = Migrate(c, "n2", "/d/f", "n3"); });
  const bool paused = WaitFor(
      [&] { return c.Log("n1").find("paused at mig:frozen") != std::string::npos; }, kNoHang);
  const bool resumed_before = c.Log("n1").find("resumed at mig:frozen") != std::string::npos;
  const ssize_t w = ::pwrite(fd, "HELLO", 5, 100);
  const int werr = errno;
  const bool resumed_after = c.Log("n1").find("resumed at mig:frozen") != std::string::npos;
  mover.join();
  ::close(fd);
  ASSERT_TRUE(paused) << c.Log("n1");
  EXPECT_FALSE(resumed_before) << "the write was not made while the file was frozen";
  EXPECT_TRUE(resumed_after) << "the write returned before the freeze ended";
  EXPECT_EQ(w, 5) << std::strerror(werr);
  ASSERT_EQ(moved.exit_code, 0) << moved.out << moved.err;
  std::string want = content;
  want.replace(100, 5, "HELLO");
  EXPECT_FALSE(fs::exists(c.ExportRoot("n1") + "/d/f"));
  EXPECT_EQ(ReadFileText(c.ExportRoot("n3") + "/d/f") == want, true);
  for (const std::string& id : ids) {
    EXPECT_EQ(ReadFileText(c.Mountpoint(id) + "/d/f") == want, true) << id;
  }
}

}  // namespace
}  // namespace fedfs::testing
