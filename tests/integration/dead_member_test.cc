// Directory operations while a member of the federation is dead (docs/
// namespace.md, "Dead nodes"; needs root and /dev/fuse): three daemons with
// mounts; /d is on n1 and on n3, which holds the file d/x; n3 is killed.
// While n1 knows it dead, no VD shows n3's part of /d (n1 alone holds it,
// empty, as far as any live node can tell): rmdir and rename of /d answer
// EHOSTDOWN (an rmdir used to succeed, and /d came back with x when n3
// returned), and so do those of a directory only n1 ever held (n3 might
// hold a part of any directory). Once n3 is back, /d lists x again and
// rmdir answers ENOTEMPTY.
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

int Errno(int rc) { return rc == 0 ? 0 : errno; }

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.insert(e.path().filename().string());
  return out;
}

TEST(DeadMember, DirectoryRmdirAndRenameWaitForADeadNodeThatMayHoldAPart) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c;
  std::vector<std::string> ids;
  const std::string e = c.StartMounted(3, &ids);
  ASSERT_TRUE(e.empty()) << e;
  const std::string m1 = c.Mountpoint("n1");
  ASSERT_EQ(::mkdir((m1 + "/d").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir((m1 + "/s").c_str(), 0755), 0) << std::strerror(errno);
  { std::ofstream(c.Mountpoint("n3") + "/d/x") << "x"; }
  ASSERT_TRUE(fs::exists(c.ExportRoot("n3") + "/d/x"));
  ASSERT_EQ(Names(m1 + "/d"), std::set<std::string>{"x"});

  c.Stop("n3", SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return c.SeesAlive("n1", {"n1", "n2"}); }, kNoHang)) << c.Log("n1");
  EXPECT_EQ(Names(m1 + "/d"), std::set<std::string>{});  // n3's part is out of sight
  EXPECT_EQ(Errno(::rmdir((m1 + "/d").c_str())), EHOSTDOWN);
  EXPECT_EQ(Errno(::rename((m1 + "/d").c_str(), (m1 + "/e").c_str())), EHOSTDOWN);
  EXPECT_EQ(Errno(::rmdir((m1 + "/s").c_str())), EHOSTDOWN);
  EXPECT_EQ(Errno(::rename((m1 + "/s").c_str(), (m1 + "/t").c_str())), EHOSTDOWN);
  EXPECT_TRUE(fs::is_directory(c.ExportRoot("n1") + "/d"));
  EXPECT_TRUE(fs::is_directory(c.ExportRoot("n1") + "/s"));

  c.Start("n3", c.dir() + "/n3.yaml");
  for (const auto& id : ids) {
    ASSERT_TRUE(WaitFor([&] { return c.SeesAlive(id, ids); }, kNoHang)) << id << "\n" << c.Log(id);
  }
  EXPECT_EQ(Names(m1 + "/d"), std::set<std::string>{"x"});
  EXPECT_EQ(Errno(::rmdir((m1 + "/d").c_str())), ENOTEMPTY);
  EXPECT_EQ(Errno(::rename((m1 + "/s").c_str(), (m1 + "/t").c_str())), 0);
  EXPECT_EQ(Errno(::rmdir((m1 + "/t").c_str())), 0);
}

}  // namespace
}  // namespace fedfs::testing
