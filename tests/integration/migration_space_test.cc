// Moves for space (docs/migration.md, "On a full disk" and "Rebalance") on
// three real daemons with FUSE mounts (label "integration"; needs root and
// /dev/fuse).
//
// MigrationFull: n1's export root is a 24 MiB tmpfs; n2's and n3's have room:
//  * a file written through n1's mount past what n1 can store moves to
//    another node and the writer sees no error: every byte is there, through
//    every mount, and n1 holds nothing of it;
//  * a create through n1's mount while n1 is full (filled by a local
//    program) is made on another node;
//  * a write through n3's mount to a file on the full n1 moves that file and
//    lands whole;
//  * the counters of `fedfsctl migrations` say so.
// MigrationRebalance: each export root is a 64 MiB tmpfs, n1's with 24 MiB
// of files written by a local program, the others empty:
//  * `fedfsctl rebalance --dry-run` plans moves and moves nothing;
//  * `fedfsctl rebalance` makes them: every node's share in use is then
//    within the threshold of the mean, a dry run plans nothing more, and
//    every file reads the same through every mount.
// The tmpfs are detached whatever happens (before the Cluster stops the
// daemons, unmounts and removes its directory).
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <random>
#include <string>
#include <vector>

#include "tests/integration/migration_util.h"
#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

// A tmpfs on `dir` for the life of this object (detached at the end, so a
// daemon that still has it open does not keep it mounted).
class Tmpfs {
 public:
  Tmpfs(const std::string& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    const std::string opts = "size=" + size + ",mode=0755";
    if (::mount("fedfs-test", dir.c_str(), "tmpfs", 0, opts.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string error_;
};

std::string Pattern(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& ch : s) ch = static_cast<char>(rng());
  return s;
}

// Writes all of `data` at `off` through `fd` in writes of at most 1 MiB, as
// a program does (a short write is continued); "" or the error.
std::string WriteAll(int fd, const std::string& data, off_t off) {
  size_t done = 0;
  while (done < data.size()) {
    const size_t n = std::min<size_t>(data.size() - done, 1u << 20);
    const ssize_t w = ::pwrite(fd, data.data() + done, n, off + static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return "write at " + std::to_string(done) + ": " + std::strerror(errno);
    done += static_cast<size_t>(w);
  }
  return "";
}

// Fills the file system of `dir` with a file written as a local program
// would, until it has no room; its size.
size_t Fill(const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0) return 0;
  const std::string chunk(1 << 16, 'F');
  size_t total = 0;
  for (;;) {
    const ssize_t w = ::write(fd, chunk.data(), chunk.size());
    if (w <= 0) break;
    total += static_cast<size_t>(w);
  }
  ::close(fd);
  return total;
}

class MigrationFull : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts and tmpfs";
    tmpfs_ = std::make_unique<Tmpfs>(c_.ExportRoot("n1"), "24m");
    ASSERT_TRUE(tmpfs_->mounted()) << "tmpfs: " << tmpfs_->error();
    const std::string e =
        c_.StartMounted(3, &ids_, "migration:\n  on_full:\n    min_free: 4MiB\n");
    ASSERT_EQ(e, "");
  }
  std::string Root(const std::string& id) const { return c_.ExportRoot(id); }
  std::string Mnt(const std::string& id) const { return c_.Mountpoint(id); }
  std::string Holder(const std::string& via, const std::string& path) const {
    return testing::Holder(c_, via, path);
  }
  uint64_t Count(const std::string& id, const std::string& field) const {
    auto j = c_.Ctl(id, {"migrations"});
    if (!j.is_object() || !j[field].is_number()) return 0;
    return j[field].get<uint64_t>();
  }

  Cluster c_;
  std::unique_ptr<Tmpfs> tmpfs_;  // destroyed before c_
  std::vector<std::string> ids_;
};

TEST_F(MigrationFull, WritesAndCreatesWithoutRoomLandOnAnotherNode) {
  // A file on n1, written through n1's mount (placed where it is made).
  const std::string big = Pattern(6u << 20, 1);
  {
    const int fd = ::open((Mnt("n1") + "/big").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(WriteAll(fd, big, 0), "");
    ASSERT_EQ(::close(fd), 0);
  }
  ASSERT_EQ(Holder("n1", "/big"), "n1");

  // 1. A file that grows past n1's room: the writer sees no error.
  const std::string grow = Pattern(20u << 20, 2);
  {
    const int fd = ::open((Mnt("n1") + "/grow").c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(WriteAll(fd, grow, 0), "") << c_.Log("n1");
    ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);
    ASSERT_EQ(::close(fd), 0) << std::strerror(errno);
  }
  const std::string at = Holder("n1", "/grow");
  EXPECT_TRUE(at == "n2" || at == "n3") << at << c_.Log("n1");
  EXPECT_FALSE(fs::exists(Root("n1") + "/grow"));
  EXPECT_EQ(Digest(ReadFileText(Root(at) + "/grow")), Digest(grow));
  for (const std::string& id : ids_) {
    EXPECT_EQ(Digest(ReadFileText(Mnt(id) + "/grow")), Digest(grow)) << id;
  }
  EXPECT_GE(Count("n1", "full_asked"), 1u);
  EXPECT_GE(Count("n1", "full_done"), 1u);
  EXPECT_GE(Count("n1", "full_writes"), 1u);
  EXPECT_EQ(Count("n1", "pending"), 0u);

  // 2. n1 filled by a local program: a create through its mount goes elsewhere.
  ASSERT_GT(Fill(Root("n1") + "/filler"), 0u);
  {
    const int fd = ::open((Mnt("n1") + "/new").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(WriteAll(fd, "made elsewhere", 0), "");
    ASSERT_EQ(::close(fd), 0);
  }
  const std::string made = Holder("n1", "/new");
  EXPECT_TRUE(made == "n2" || made == "n3") << made;
  EXPECT_EQ(ReadFileText(Mnt("n2") + "/new"), "made elsewhere");
  EXPECT_GE(Count("n1", "full_creates"), 1u);

  // 3. Another node's write to a file on the full n1: the file moves, the
  // write lands, nothing of it is lost.
  const std::string more = Pattern(2u << 20, 3);
  {
    const int fd = ::open((Mnt("n3") + "/big").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(WriteAll(fd, more, static_cast<off_t>(big.size())), "") << c_.Log("n1");
    ASSERT_EQ(::close(fd), 0) << std::strerror(errno);
  }
  const std::string big_at = Holder("n2", "/big");
  EXPECT_TRUE(big_at == "n2" || big_at == "n3") << big_at;
  EXPECT_FALSE(fs::exists(Root("n1") + "/big"));
  for (const std::string& id : ids_) {
    EXPECT_EQ(Digest(ReadFileText(Mnt(id) + "/big")), Digest(big + more)) << id;
  }
  EXPECT_GE(Count("n1", "full_asked"), 2u);
  EXPECT_GE(Count("n3", "full_writes"), 1u);
  // Every name once in every mount.
  for (const std::string& id : ids_) {
    EXPECT_EQ(ListNames(Mnt(id)), (std::set<std::string>{"big", "filler", "grow", "new"})) << id;
  }
}

class MigrationRebalance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts and tmpfs";
    for (const char* id : {"n1", "n2", "n3"}) {
      tmpfs_.push_back(std::make_unique<Tmpfs>(c_.ExportRoot(id), "64m"));
      ASSERT_TRUE(tmpfs_.back()->mounted()) << "tmpfs: " << tmpfs_.back()->error();
    }
    ASSERT_EQ(c_.StartMounted(3, &ids_, "migration:\n  rebalance:\n    threshold: 0.05\n"), "");
  }
  CommandResult Rebalance(bool dry_run) const {
    std::vector<std::string> argv{FEDFS_FEDFSCTL_PATH, "--socket", c_.Socket("n2"), "rebalance",
                                  "--json"};
    if (dry_run) argv.push_back("--dry-run");
    return RunCommand(argv, kNoHang);
  }

  Cluster c_;
  std::vector<std::unique_ptr<Tmpfs>> tmpfs_;  // destroyed before c_
  std::vector<std::string> ids_;
};

TEST_F(MigrationRebalance, ASkewedFederationEndsWithinTheThreshold) {
  std::map<std::string, std::string> files;  // name -> content
  fs::create_directories(c_.ExportRoot("n1") + "/data");
  uint64_t seed = 10;
  for (size_t mib : {8, 6, 4, 3, 2, 1}) {
    const std::string name = "f" + std::to_string(mib);
    files[name] = Pattern(mib << 20, seed++);
    const int fd = ::open((c_.ExportRoot("n1") + "/data/" + name).c_str(),
                          O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(WriteAll(fd, files[name], 0), "");
    ::close(fd);
  }
  auto in_n1 = [&] { return ListNames(c_.ExportRoot("n1") + "/data").size(); };
  ASSERT_EQ(in_n1(), files.size());

  // The dry run: a plan, nothing moved.
  const CommandResult plan = Rebalance(true);
  ASSERT_EQ(plan.exit_code, 0) << plan.out << plan.err;
  const auto p = nlohmann::json::parse(plan.out, nullptr, false);
  ASSERT_TRUE(p.is_object()) << plan.out;
  EXPECT_EQ(p["dry_run"], true);
  ASSERT_TRUE(p["moves"].is_array());
  EXPECT_GE(p["moves"].size(), 1u) << plan.out;
  for (const auto& m : p["moves"]) {
    EXPECT_EQ(m["from"], "n1") << plan.out;
    EXPECT_EQ(m["done"], false);
  }
  EXPECT_EQ(in_n1(), files.size()) << "the dry run moved something";
  EXPECT_EQ(c_.Ctl("n1", {"migrations"})["started"], 0);

  // The rebalance.
  const CommandResult run = Rebalance(false);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err << c_.Log("n1");
  const auto r = nlohmann::json::parse(run.out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << run.out;
  EXPECT_EQ(r["failed"], 0) << run.out;
  EXPECT_EQ(r["moved"], p["moves"].size()) << run.out;
  EXPECT_LT(in_n1(), files.size());

  // Within the threshold now: measured again by a dry run, which plans nothing.
  const CommandResult again = Rebalance(true);
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  const auto a = nlohmann::json::parse(again.out, nullptr, false);
  ASSERT_TRUE(a.is_object()) << again.out;
  EXPECT_EQ(a["moves"].size(), 0u) << again.out;
  const double mean = a["mean"].get<double>(), threshold = a["threshold"].get<double>();
  for (const auto& n : a["nodes"]) {
    EXPECT_LE(std::abs(n["share"].get<double>() - mean), threshold) << again.out;
  }
  EXPECT_EQ(c_.Ctl("n1", {"migrations"})["done"], r["moved"]);

  // Every file once, whole, through every mount.
  for (const std::string& id : ids_) {
    SCOPED_TRACE(id);
    std::set<std::string> names;
    for (const auto& [name, content] : files) {
      names.insert(name);
      EXPECT_EQ(Digest(ReadFileText(c_.Mountpoint(id) + "/data/" + name)), Digest(content))
          << name;
    }
    EXPECT_EQ(ListNames(c_.Mountpoint(id) + "/data"), names);
  }
}

}  // namespace
}  // namespace fedfs::testing
