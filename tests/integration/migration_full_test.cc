// Room (docs/migration.md, "On a full disk") on three real daemons with FUSE
// mounts (label "integration"; needs root and /dev/fuse). n1's export root
// is a 24 MiB tmpfs; n2's and n3's have room:
//  * a file written through n1's mount past what n1 can store moves to
//    another node and the writer sees no error: every byte is there, through
//    every mount, and n1 holds nothing of it;
//  * a create through n1's mount while n1 is full (filled by a local
//    program) is made on another node;
//  * a write through n3's mount to a file on the full n1 moves that file and
//    lands whole;
//  * the counters of `fedfsctl migrations` say so.
// The tmpfs is detached whatever happens (before the Cluster stops the
// daemons, unmounts and removes its directory).
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

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

// What a failure prints of file contents: size and a hash, not the bytes.
std::string Digest(const std::string& s) {
  return std::to_string(s.size()) + " bytes, hash " + std::to_string(std::hash<std::string>{}(s));
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
    auto j = c_.Ctl(via, {"where", path});
    if (!j.is_object() || !j["holders"].is_array() || j["holders"].size() != 1) return "";
    return j["holders"][0].get<std::string>();
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

}  // namespace
}  // namespace fedfs::testing
