// A symlink on one node where other nodes have a directory of that name,
// through real mounts (label "integration"; needs root and /dev/fuse): three
// fedfsd processes, files placed on the node that creates them. The symlink
// is a name conflict (docs/namespace.md, "Name conflicts"), not a silent
// member: the directory keeps its plain name, the symlink shows as
// `name@node`, `fedfsctl conflicts` names it, creates in the directory go on
// (a copy made on a third node takes the directory's mode, not the
// symlink's 0777), and the holder of the symlink does not log about it on
// every request.
//
// The Cluster stops the daemons by pid, unmounts and removes its temporary
// directory whatever happens.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

size_t Lines(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

TEST(Conflict, ASymlinkWhereOtherNodesHaveADirectoryIsAConflictAndCreatesGoOn) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c;
  std::vector<std::string> ids;
  const std::string e = c.StartMounted(3, &ids);
  ASSERT_TRUE(e.empty()) << e;
  auto M = [&](const std::string& id, const std::string& rel) { return c.Mountpoint(id) + rel; };

  // n1 has the directory /x (0750, with a file); n2 has /x as a symlink to a
  // directory outside its export root, and /y, a symlink to a directory
  // inside it.
  ASSERT_EQ(::mkdir((c.ExportRoot("n1") + "/x").c_str(), 0750), 0);
  ASSERT_EQ(::chmod((c.ExportRoot("n1") + "/x").c_str(), 0750), 0);
  std::ofstream(c.ExportRoot("n1") + "/x/a") << "a";
  ASSERT_EQ(::mkdir((c.ExportRoot("n1") + "/y").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((c.ExportRoot("n2") + "/inside").c_str(), 0755), 0);
  std::ofstream(c.ExportRoot("n2") + "/inside/hidden") << "h";
  ASSERT_EQ(::symlink(c.dir().c_str(), (c.ExportRoot("n2") + "/x").c_str()), 0);
  ASSERT_EQ(::symlink("inside", (c.ExportRoot("n2") + "/y").c_str()), 0);
  const size_t logged_before = Lines(c.Log("n2"), "/x");

  // Every mount: /x is n1's directory, x@n2 the symlink.
  for (const auto& id : ids) {
    ASSERT_TRUE(WaitFor([&] { return fs::exists(M(id, "/x@n2")); }, kNoHang)) << id;
    struct stat st {};
    ASSERT_EQ(::lstat(M(id, "/x").c_str(), &st), 0) << id << ": " << std::strerror(errno);
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << id;
    ASSERT_EQ(::lstat(M(id, "/x@n2").c_str(), &st), 0) << id;
    EXPECT_TRUE(S_ISLNK(st.st_mode)) << id;
    EXPECT_EQ(ListNames(M(id, "/x")), (std::set<std::string>{"a"})) << id;
    // /y is n1's directory alone: n2's symlink into its own /inside does not
    // add /inside's names to it.
    EXPECT_EQ(ListNames(M(id, "/y")), (std::set<std::string>{})) << id;
  }
  auto conflicts = c.Ctl("n3", {"conflicts", "/"});
  ASSERT_TRUE(conflicts.is_object()) << conflicts.dump();
  bool named = false;
  for (const auto& row : conflicts["conflicts"]) named |= row["name"] == "x";
  EXPECT_TRUE(named) << conflicts.dump();

  // Creates in /x through every mount go on; n3's copy of /x is made from
  // n1's directory: mode 0750, not the symlink's 0777.
  for (const auto& id : ids) {
    const std::string f = M(id, "/x/from-" + id);
    ASSERT_TRUE(std::ofstream(f).good()) << f << ": " << std::strerror(errno);
  }
  struct stat copy {};
  ASSERT_EQ(::lstat((c.ExportRoot("n3") + "/x").c_str(), &copy), 0);
  EXPECT_TRUE(S_ISDIR(copy.st_mode));
  EXPECT_EQ(copy.st_mode & 07777, 0750u);
  EXPECT_EQ(ListNames(M("n2", "/x")),
            (std::set<std::string>{"a", "from-n1", "from-n2", "from-n3"}));
  // n2 keeps its symlink; its own create went to a copy it could not make
  // (the symlink has the name), or to another node: either way the file is in
  // the directory above, and the symlink is left as it was.
  struct stat link {};
  ASSERT_EQ(::lstat((c.ExportRoot("n2") + "/x").c_str(), &link), 0);
  EXPECT_TRUE(S_ISLNK(link.st_mode));

  // A few lines at most about /x, not one per request.
  EXPECT_LE(Lines(c.Log("n2"), "/x") - logged_before, 5u) << c.Log("n2");
}

}  // namespace
}  // namespace fedfs::testing
