// Creates of files held on another node, on real daemons (label
// "integration"; needs root and /dev/fuse): three fedfsd processes, a
// placement rule putting every new file and directory on n2, used through
// n1's mount.
//
//  * A create and close costs the holder one request, and so does an
//    unlink: the close's release
//    travels with the next request to it (files/remote_node_fs.h,
//    "Releases"), and the directory's getattr the kernel sends before the
//    next create is answered from the attributes the create's reply carried
//    (vfs/vfs_impl.h, KeptDirAttr). The late releases all arrive.
//  * Those attributes are the holder's directory as the create left it; a
//    change through another node shows within the kernel's bound.
//
// Each test owns a Cluster, which stops the daemons by pid, unmounts and
// removes its temporary directory whatever happens.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

class RemoteCreate : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string e =
        c_.StartMounted(3, &ids_, "placement: {policy: local, rules: [{prefix: /, node: n2}]}");
    ASSERT_TRUE(e.empty()) << e;
  }
  std::string M(const std::string& id, const std::string& rel) const {
    return c_.Mountpoint(id) + rel;
  }
  int64_t Files(const std::string& id, const char* field) const {
    auto j = c_.Ctl(id, {"files"});
    EXPECT_TRUE(j.is_object()) << "fedfsctl files on " << id;
    return j.is_object() ? j[field].get<int64_t>() : -1;
  }
  static bool CreateAndClose(const std::string& path) {
    const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd < 0) return false;
    return ::close(fd) == 0;
  }

  Cluster c_;
  std::vector<std::string> ids_;
};

TEST_F(RemoteCreate, ACreateAndCloseCostsTheHolderOneRequest) {
  ASSERT_EQ(::mkdir(M("n1", "/d").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_TRUE(CreateAndClose(M("n1", "/d/first")));  // sessions, watches and the like
  struct stat st {};
  ASSERT_EQ(::stat((c_.ExportRoot("n2") + "/d/first").c_str(), &st), 0) << "not placed on n2";
  constexpr int kFiles = 200;
  const int64_t before = Files("n2", "served");
  for (int i = 0; i < kFiles; ++i) ASSERT_TRUE(CreateAndClose(M("n1", "/d/f" + std::to_string(i))));
  const int64_t after = Files("n2", "served");
  // Three per file before: the create, the directory's getattr, the release.
  EXPECT_GE(after - before, kFiles);
  EXPECT_LE(after - before, kFiles + kFiles / 10) << "requests at the holder for " << kFiles;
  // The last releases arrive on their own (20 ms after the first waiting).
  EXPECT_TRUE(WaitFor([&] { return Files("n2", "handles") == 0; }, std::chrono::seconds(10)))
      << Files("n2", "handles") << " handles still open at the holder";
  // An unlink: one request too (its reply carries the directory's
  // attributes for the getattr before the next one).
  const int64_t before_unlinks = Files("n2", "served");
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_EQ(::unlink(M("n1", "/d/f" + std::to_string(i)).c_str()), 0) << std::strerror(errno);
  }
  const int64_t after_unlinks = Files("n2", "served");
  EXPECT_GE(after_unlinks - before_unlinks, kFiles);
  EXPECT_LE(after_unlinks - before_unlinks, kFiles + kFiles / 10)
      << "requests at the holder for " << kFiles << " unlinks";
}

TEST_F(RemoteCreate, DirectoryAttributesAreTheHoldersAfterEachCreate) {
  ASSERT_EQ(::mkdir(M("n1", "/d").c_str(), 0755), 0) << std::strerror(errno);
  const std::string held = c_.ExportRoot("n2") + "/d";
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(CreateAndClose(M("n1", "/d/f" + std::to_string(i))));
    struct stat via {}, there {};
    ASSERT_EQ(::stat(M("n1", "/d").c_str(), &via), 0) << std::strerror(errno);
    ASSERT_EQ(::stat(held.c_str(), &there), 0) << std::strerror(errno);
    EXPECT_EQ(via.st_mtim.tv_sec, there.st_mtim.tv_sec) << i;
    EXPECT_EQ(via.st_mtim.tv_nsec, there.st_mtim.tv_nsec) << i;
    EXPECT_EQ(via.st_size, there.st_size) << i;
  }
  for (int i = 0; i < 20; i += 2) {
    ASSERT_EQ(::unlink(M("n1", "/d/f" + std::to_string(i)).c_str()), 0) << std::strerror(errno);
    struct stat via {}, there {};
    ASSERT_EQ(::stat(M("n1", "/d").c_str(), &via), 0) << std::strerror(errno);
    ASSERT_EQ(::stat(held.c_str(), &there), 0) << std::strerror(errno);
    EXPECT_EQ(via.st_mtim.tv_sec, there.st_mtim.tv_sec) << "unlink " << i;
    EXPECT_EQ(via.st_mtim.tv_nsec, there.st_mtim.tv_nsec) << "unlink " << i;
  }
  // A change through another node: seen through n1 within the kernel's
  // 1 s copy plus the node's 100 ms.
  struct stat old_st {};
  ASSERT_EQ(::stat(M("n1", "/d").c_str(), &old_st), 0);
  ASSERT_EQ(::chmod(M("n3", "/d").c_str(), 0700), 0) << std::strerror(errno);
  EXPECT_TRUE(WaitFor(
      [&] {
        struct stat now {};
        return ::stat(M("n1", "/d").c_str(), &now) == 0 && (now.st_mode & 07777) == 0700;
      },
      std::chrono::milliseconds(1500)));
}

}  // namespace
}  // namespace fedfs::testing
