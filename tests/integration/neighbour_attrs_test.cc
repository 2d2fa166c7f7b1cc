// Attributes of a remote directory's files fetched along with a lookup's
// (vfs/vfs_prefetch.cc; docs/namespace.md, "Neighbours' attributes"), on
// real daemons (label "integration"; needs root and /dev/fuse): two fedfsd
// processes, files made through n1's mount (held on n1), stat'ed one by one
// through n2's.
//
//  * A scan costs the holder a few requests, not one per file.
//  * Every stat shows what the holder has, also for files changed through
//    n1 after n2 fetched their attributes and before it stat'ed them: a
//    chmod, a truncate, and a file unlinked and made anew under its name.
//
// The Cluster stops the daemons by pid, unmounts and removes its temporary
// directory whatever happens.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

constexpr int kFiles = 200;

std::string Name(int i) {
  char b[16];
  std::snprintf(b, sizeof b, "/d/f%03d", i);
  return b;
}

bool Write(const std::string& path, size_t bytes, int flags) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | flags, 0644);
  if (fd < 0) return false;
  const std::string data(bytes, 'x');
  const bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  return ::close(fd) == 0 && ok;
}

class NeighbourAttrs : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string e = c_.StartMounted(2, &ids_);
    ASSERT_TRUE(e.empty()) << e;
  }
  int64_t Served(const std::string& id) const {
    auto j = c_.Ctl(id, {"files"});
    EXPECT_TRUE(j.is_object()) << "fedfsctl files on " << id;
    return j.is_object() ? j["served"].get<int64_t>() : -1;
  }
  // Through n2's mount, as n1's export root has it.
  void ExpectSame(int i) const {
    struct stat seen {}, held {};
    ASSERT_EQ(::stat((c_.Mountpoint("n2") + Name(i)).c_str(), &seen), 0) << Name(i) << ": " << std::strerror(errno);
    ASSERT_EQ(::lstat((c_.ExportRoot("n1") + Name(i)).c_str(), &held), 0) << Name(i);
    EXPECT_EQ(seen.st_mode, held.st_mode) << Name(i);
    EXPECT_EQ(seen.st_size, held.st_size) << Name(i);
    EXPECT_EQ(seen.st_nlink, held.st_nlink) << Name(i);
    EXPECT_EQ(seen.st_mtim.tv_sec, held.st_mtim.tv_sec) << Name(i);
    EXPECT_EQ(seen.st_mtim.tv_nsec, held.st_mtim.tv_nsec) << Name(i);
    EXPECT_EQ(seen.st_ctim.tv_nsec, held.st_ctim.tv_nsec) << Name(i);
  }

  Cluster c_;
  std::vector<std::string> ids_;
};

TEST_F(NeighbourAttrs, AScanOfARemoteDirectoryCostsItsNodeAFewRequestsAndEveryStatIsExact) {
  const std::string m1 = c_.Mountpoint("n1");
  ASSERT_EQ(::mkdir((m1 + "/d").c_str(), 0755), 0) << std::strerror(errno);
  for (int i = 0; i < kFiles; ++i) ASSERT_TRUE(Write(m1 + Name(i), static_cast<size_t>(i), O_CREAT | O_EXCL)) << Name(i);
  ASSERT_EQ(::access((c_.ExportRoot("n1") + Name(kFiles - 1)).c_str(), F_OK), 0) << "not held on n1";

  // Two lookups in a row ask n1: the second asks for the names after it.
  const int64_t before = Served("n1");
  ExpectSame(0);
  ExpectSame(1);

  // Changes through n1 of files whose attributes n2 has now.
  ASSERT_EQ(::chmod((m1 + Name(30)).c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(::truncate((m1 + Name(31)).c_str(), 7777), 0) << std::strerror(errno);
  ASSERT_EQ(::unlink((m1 + Name(32)).c_str()), 0) << std::strerror(errno);
  ASSERT_TRUE(Write(m1 + Name(32), 4242, O_CREAT | O_EXCL));

  for (int i = 2; i < kFiles; ++i) ExpectSame(i);
  const int64_t scan = Served("n1") - before;
  // Without the names along: a request per file (kFiles); with them, about
  // kFiles / 64 and the three changed files.
  EXPECT_LE(scan, kFiles / 5) << "requests n1 served for " << kFiles << " stats through n2";
  std::printf("n1 served %lld requests for %d stats through n2\n", static_cast<long long>(scan), kFiles);
}

}  // namespace
}  // namespace fedfs::testing
