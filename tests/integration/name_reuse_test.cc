// A name reused right after its directory was renamed away, seen through
// another node's mount (needs root and /dev/fuse): three daemons with
// mounts, the parent directory in every export root before they start.
// Through n2: mkdir a, rename a to c (RENAME_NOREPLACE), mkdir a; through
// n1: create a/h. n1's first try looks at its stale copy of VD(a), whose
// holders are the old a's (n1 among them): the create there answered
// ENOENT (40 of 50 rounds) until a create that a stale copy sent astray
// was tried again with a fresh one (VfsImpl::CreateOnce, MakeEntry).
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

int Create(const std::string& p) {
  const int fd = ::open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

// Three daemons with mounts, and /ns made in every export root.
class NameReuse : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
    const std::string e = c.StartMounted(3, &ids);
    ASSERT_TRUE(e.empty()) << e;
    for (const auto& id : ids) fs::create_directories(c.ExportRoot(id) + "/ns");
  }
  std::string M(const std::string& id, const std::string& rel) const { return c.Mountpoint(id) + rel; }
  Cluster c;
  std::vector<std::string> ids;
};

TEST_F(NameReuse, ACreateInADirectoryMadeWhereOneWasRenamedAwayFindsIt) {
  int failures = 0;
  std::string first;
  for (int round = 0; round < 50; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // a made and used through n2 and seen through n1.
    ASSERT_EQ(::mkdir(M("n2", "/ns/a").c_str(), 0755), 0) << std::strerror(errno);
    ASSERT_EQ(Create(M("n1", "/ns/a/f")), 0);
    ASSERT_EQ(Create(M("n2", "/ns/a/g")), 0);
    // Renamed away, and the name made again, through n2.
    struct stat st {};
    ASSERT_EQ(::stat(M("n1", "/ns/a").c_str(), &st), 0);
    ASSERT_EQ(::renameat2(AT_FDCWD, M("n2", "/ns/a").c_str(), AT_FDCWD, M("n2", "/ns/c").c_str(),
                          RENAME_NOREPLACE),
              0)
        << std::strerror(errno);
    ASSERT_EQ(::mkdir(M("n2", "/ns/a").c_str(), 0755), 0) << std::strerror(errno);
    // Through n1: the new a, a directory of its own (c keeps the old one's
    // number, a has another).
    if (const int rc = Create(M("n1", "/ns/a/h")); rc != 0) {
      if (failures++ == 0) first = "round " + std::to_string(round) + ": " + std::strerror(rc);
    }
    struct stat sa {}, sc {};
    ASSERT_EQ(::stat(M("n1", "/ns/a").c_str(), &sa), 0) << std::strerror(errno);
    ASSERT_EQ(::stat(M("n1", "/ns/c").c_str(), &sc), 0) << std::strerror(errno);
    EXPECT_EQ(sc.st_ino, st.st_ino) << "the renamed directory keeps its number";
    EXPECT_NE(sa.st_ino, st.st_ino) << "the new directory has a number of its own";
    std::error_code ec;
    fs::remove_all(M("n2", "/ns/a"), ec);
    fs::remove_all(M("n2", "/ns/c"), ec);
  }
  EXPECT_EQ(failures, 0) << "first: " << first;
}

// A directory removed through one node and made again through another, whose
// kernel had looked up a file in it: the new directory may get the old one's
// number (ext4 hands a freed inode number to the next directory made), and
// the file's name must not be found in it. Through n3: mkdir p, create p/f,
// stat p/f; through n1: unlink p/f, rmdir p; through n3: mkdir p, then
// create p/f with O_EXCL succeeds and stat p/g fails with ENOENT.
TEST_F(NameReuse, ADirectoryMadeAgainHoldsNoneOfTheOldOnesNames) {
  int same_number = 0;
  for (int round = 0; round < 50; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    ASSERT_EQ(::mkdir(M("n3", "/ns/p").c_str(), 0755), 0) << std::strerror(errno);
    struct stat was {}, st {};
    ASSERT_EQ(::stat(M("n3", "/ns/p").c_str(), &was), 0);
    ASSERT_EQ(Create(M("n3", "/ns/p/f")), 0);
    ASSERT_EQ(Create(M("n3", "/ns/p/g")), 0);
    ASSERT_EQ(::stat(M("n3", "/ns/p/f").c_str(), &st), 0);
    ASSERT_EQ(::stat(M("n3", "/ns/p/g").c_str(), &st), 0);
    ASSERT_EQ(::unlink(M("n1", "/ns/p/f").c_str()), 0) << std::strerror(errno);
    ASSERT_EQ(::unlink(M("n1", "/ns/p/g").c_str()), 0) << std::strerror(errno);
    ASSERT_EQ(::rmdir(M("n1", "/ns/p").c_str()), 0) << std::strerror(errno);
    ASSERT_EQ(::mkdir(M("n3", "/ns/p").c_str(), 0755), 0) << std::strerror(errno);
    struct stat now {};
    ASSERT_EQ(::stat(M("n3", "/ns/p").c_str(), &now), 0);
    if (now.st_ino == was.st_ino) ++same_number;
    const int fd = ::open(M("n3", "/ns/p/f").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    if (fd >= 0) ::close(fd);
    EXPECT_NE(::stat(M("n3", "/ns/p/g").c_str(), &st), 0);
    std::error_code ec;
    fs::remove_all(M("n3", "/ns/p"), ec);
  }
  std::printf("the new directory had the old one's number in %d of 50 rounds\n", same_number);
}

}  // namespace
}  // namespace fedfs::testing
