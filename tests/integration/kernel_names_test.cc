// The kernel's names and the drops of them for one directory, on real
// daemons (label "integration"; needs root and /dev/fuse): three fedfsd
// processes. The kernel's names can only be dropped all at once
// (FUSE_NOTIFY_INC_EPOCH), so a node drops them for a directory only if it
// handed its kernel names of that directory since the last drop
// (vd/kernel_cache.h, KernelNameMarks):
//
//  * A change of a directory that n1 only listed (a copy in its directory
//    table, no name to its kernel) costs n1's kernel none of its names
//    elsewhere, and n1 sees the change at once.
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
#include <set>
#include <string>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

int StatErr(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? 0 : errno;
}

bool CreateAndClose(const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  return fd >= 0 && ::close(fd) == 0;
}

class KernelNames : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string e = c_.StartMounted(3, &ids_);
    ASSERT_TRUE(e.empty()) << e;
  }
  std::string M(const std::string& id, const std::string& rel) const {
    return c_.Mountpoint(id) + rel;
  }
  int64_t DtValue(const std::string& id, const char* field) const {
    auto j = c_.Ctl(id, {"dt"});
    EXPECT_TRUE(j.is_object()) << "fedfsctl dt on " << id;
    return j.is_object() ? j.value(field, int64_t{-1}) : -1;
  }
  // A fresh path "/p<i>" that `manager` manages.
  std::string PathManagedBy(const std::string& manager) const {
    for (int i = 0; i < 60; ++i) {
      const std::string p = "/p" + std::to_string(i);
      auto j = c_.Ctl("n1", {"ring", p});
      if (j.is_object() && j.value("manager", std::string()) == manager) return p;
    }
    return "";
  }

  Cluster c_;
  std::vector<std::string> ids_;
};

TEST_F(KernelNames, AChangeOfADirectoryOnlyListedHereLeavesTheKernelItsOtherNames) {
  const std::string p = PathManagedBy("n3");
  ASSERT_FALSE(p.empty()) << "no /p<i> is managed by n3";
  ASSERT_EQ(::mkdir(M("n2", p).c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_TRUE(CreateAndClose(M("n2", p + "/a"))) << std::strerror(errno);
  // n1's kernel holds names of /q.
  ASSERT_EQ(::mkdir(M("n1", "/q").c_str(), 0755), 0) << std::strerror(errno);
  constexpr int kFiles = 20;
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_TRUE(CreateAndClose(M("n1", "/q/f" + std::to_string(i)))) << std::strerror(errno);
  }
  for (int i = 0; i < kFiles; ++i) ASSERT_EQ(StatErr(M("n1", "/q/f" + std::to_string(i))), 0);
  // n1 lists P (a copy in its directory table, no name to its kernel).
  EXPECT_EQ(ListNames(M("n1", p)), std::set<std::string>{"a"});
  const int64_t told = DtValue("n1", "dt_invals_received");
  const int64_t lookups = DtValue("n1", "lookups");
  ASSERT_TRUE(CreateAndClose(M("n2", p + "/b"))) << std::strerror(errno);
  EXPECT_GT(DtValue("n1", "dt_invals_received"), told)
      << "n3 did not tell n1 of the change (the premise of this test)";
  for (int i = 0; i < kFiles; ++i) ASSERT_EQ(StatErr(M("n1", "/q/f" + std::to_string(i))), 0);
  const int64_t more = DtValue("n1", "lookups") - lookups;
  std::printf("after a change of a directory n1 only listed: %d stats of /q on n1, %lld VD "
              "lookups in its daemon\n",
              kFiles, static_cast<long long>(more));
  EXPECT_LT(more, kFiles / 2) << "n1's kernel dropped its names of /q";
  // And n1 sees the change.
  EXPECT_EQ(ListNames(M("n1", p)), (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(StatErr(M("n1", p + "/b")), 0);
}

}  // namespace
}  // namespace fedfs::testing
