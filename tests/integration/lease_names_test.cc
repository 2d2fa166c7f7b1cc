// The names a node's kernel got from a lent directory (docs/namespace.md,
// "Leases"), on real daemons (label "integration"; needs root and
// /dev/fuse): three fedfsd processes; n1 fills a directory that n3 manages,
// alone, so n3 lends it to n1.
//
//  * Another node reading the directory takes the lease back and changes
//    nothing: n1's kernel keeps the names it has (its next stats of them
//    reach no daemon). Before, every lease that went back dropped every
//    name n1's kernel had, in every directory.
//  * Another node's change of the directory afterwards is seen by n1's very
//    next system calls: n3 recorded n1 as a sharer whose kernel it tells.
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

class LeaseNames : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string e = c_.StartMounted(3, &ids_);
    ASSERT_TRUE(e.empty()) << e;
  }
  std::string M(const std::string& id, const std::string& rel) const {
    return c_.Mountpoint(id) + rel;
  }
  nlohmann::json Dt(const std::string& id) const {
    auto j = c_.Ctl(id, {"dt"});
    EXPECT_TRUE(j.is_object()) << "fedfsctl dt on " << id;
    return j;
  }
  int64_t DtValue(const std::string& id, const char* field) const {
    auto j = Dt(id);
    return j.is_object() ? j.value(field, int64_t{-1}) : -1;
  }
  // A fresh path "/lent<i>" that `manager` manages.
  std::string PathManagedBy(const std::string& manager) const {
    for (int i = 0; i < 60; ++i) {
      const std::string p = "/lent" + std::to_string(i);
      auto j = c_.Ctl("n1", {"ring", p});
      if (j.is_object() && j.value("manager", std::string()) == manager) return p;
    }
    return "";
  }

  Cluster c_;
  std::vector<std::string> ids_;
};

TEST_F(LeaseNames, AReaderTakingTheLeaseBackLeavesTheHoldersKernelItsNames) {
  const std::string dir = PathManagedBy("n3");
  ASSERT_FALSE(dir.empty()) << "no /lent<i> is managed by n3";
  ASSERT_EQ(::mkdir(M("n1", dir).c_str(), 0755), 0) << std::strerror(errno);
  constexpr int kFiles = 20;
  std::set<std::string> names;
  for (int i = 0; i < kFiles; ++i) {
    const std::string f = "f" + std::to_string(i);
    ASSERT_TRUE(CreateAndClose(M("n1", dir + "/" + f))) << f << ": " << std::strerror(errno);
    names.insert(f);
  }
  ASSERT_GE(DtValue("n1", "leases_held"), 1) << "n3 did not lend " << dir << " to n1: "
                                             << Dt("n1").dump();
  for (const auto& f : names) ASSERT_EQ(StatErr(M("n1", dir + "/" + f)), 0) << f;

  // n2 reads the directory: n3 takes the lease back first.
  const int64_t recalled = DtValue("n3", "leases_recalled");
  EXPECT_EQ(ListNames(M("n2", dir)), names);
  EXPECT_GT(DtValue("n3", "leases_recalled"), recalled);
  EXPECT_EQ(DtValue("n1", "leases_held"), 0);

  // n1's kernel still has the names: its stats reach no daemon's VDs.
  const int64_t lookups = DtValue("n1", "lookups");
  for (const auto& f : names) ASSERT_EQ(StatErr(M("n1", dir + "/" + f)), 0) << f;
  const int64_t more = DtValue("n1", "lookups") - lookups;
  std::printf("after the recall: %d stats on n1, %lld VD lookups in its daemon\n", kFiles,
              static_cast<long long>(more));
  // (The directory's own attributes may be asked for again, once a second.)
  EXPECT_LT(more, kFiles / 2) << "n1's kernel dropped the names of " << dir;

  // n2 changes the directory: n1's next system calls see it.
  ASSERT_EQ(::unlink(M("n2", dir + "/f0").c_str()), 0) << std::strerror(errno);
  ASSERT_TRUE(CreateAndClose(M("n2", dir + "/g"))) << std::strerror(errno);
  EXPECT_EQ(StatErr(M("n1", dir + "/f0")), ENOENT);
  EXPECT_EQ(StatErr(M("n1", dir + "/g")), 0);
  names.erase("f0");
  names.insert("g");
  EXPECT_EQ(ListNames(M("n1", dir)), names);
  ASSERT_EQ(::rename(M("n2", dir + "/f1").c_str(), M("n2", dir + "/h").c_str()), 0)
      << std::strerror(errno);
  EXPECT_EQ(StatErr(M("n1", dir + "/f1")), ENOENT);
  EXPECT_EQ(StatErr(M("n1", dir + "/h")), 0);
}

}  // namespace
}  // namespace fedfs::testing
