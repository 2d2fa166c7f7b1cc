// The access trigger of file moves (docs/migration.md, "By access";
// migration/access.h), with real daemons and mounts: a file read again and
// again through one other node's mount moves there, by itself, and is
// counted; a file read as much through its own node's mount stays; a file
// that arrived waits out the cooldown before it moves again.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/migration_util.h"
#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Windows of 400 ms, two in a row with 80 % of a file's bytes through one
// node and at least 1 MiB; a file that arrived stays 60 s.
constexpr const char* kYaml =
    "migration:\n"
    "  on_access: {enabled: true, share: 0.8, min_bytes: 1M, window_ms: 400, windows: 2,\n"
    "              cooldown_ms: 60000}\n";

// Reads `path` whole, then drops its pages from this kernel (so the next
// read asks the daemon again). False on an error.
bool ReadAndDrop(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::vector<char> buf(1 << 20);
  ssize_t n = 0;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) {
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return n == 0;
}

class MigrationAccess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
    ASSERT_EQ(c_.StartMounted(3, &ids_, kYaml), "");
    fs::create_directories(c_.ExportRoot("n1") + "/d");
  }
  void Write(const std::string& node, const std::string& path, size_t size) {
    std::ofstream(c_.ExportRoot(node) + path, std::ios::binary) << std::string(size, 'a');
  }
  // Reads `path` through the mounts of `via` in turn for `how_long`.
  void ReadThrough(const std::vector<std::string>& via, const std::string& path,
                   std::chrono::milliseconds how_long) {
    const auto end = std::chrono::steady_clock::now() + how_long;
    while (std::chrono::steady_clock::now() < end) {
      for (const auto& id : via) ASSERT_TRUE(ReadAndDrop(c_.Mountpoint(id) + path)) << id;
    }
  }
  Cluster c_;
  std::vector<std::string> ids_;
};

TEST_F(MigrationAccess, AFileReadThroughAnotherNodeMovesThereAndStaysForTheCooldown) {
  Write("n1", "/d/f", 4u << 20);
  ASSERT_EQ(Holder(c_, "n2", "/d/f"), "n1");
  // Read through n2 until it moved (at most 20 windows).
  const auto end = std::chrono::steady_clock::now() + 8s;
  while (Holder(c_, "n2", "/d/f") != "n2" && std::chrono::steady_clock::now() < end) {
    ReadThrough({"n2"}, "/d/f", 200ms);
  }
  ASSERT_EQ(Holder(c_, "n2", "/d/f"), "n2") << c_.Log("n1");
  EXPECT_TRUE(fs::exists(c_.ExportRoot("n2") + "/d/f"));
  EXPECT_FALSE(fs::exists(c_.ExportRoot("n1") + "/d/f"));
  const auto m = c_.Ctl("n1", {"migrations"});
  EXPECT_EQ(m["access_done"], 1) << m.dump();
  EXPECT_EQ(m["access_failed"], 0) << m.dump() << c_.Log("n1");
  // Now read mostly through n3: the file arrived at n2 less than the
  // cooldown ago, so it stays.
  ReadThrough({"n3"}, "/d/f", 2s);
  EXPECT_EQ(Holder(c_, "n3", "/d/f"), "n2");
  EXPECT_EQ(c_.Ctl("n2", {"migrations"})["access_asked"], 0);
}

TEST_F(MigrationAccess, AFileReadAsMuchThroughItsOwnNodeStays) {
  Write("n1", "/d/g", 2u << 20);
  ReadThrough({"n1", "n2"}, "/d/g", 3s);  // half of the bytes each: under the share
  EXPECT_EQ(Holder(c_, "n2", "/d/g"), "n1");
  EXPECT_EQ(c_.Ctl("n1", {"migrations"})["access_asked"], 0);
}

}  // namespace
}  // namespace fedfs::testing
