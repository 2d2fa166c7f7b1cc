// A directory's inode number through real mounts (label "integration"; needs
// root and /dev/fuse): three fedfsd processes, files placed on the node that
// creates them. POSIX keeps st_ino across rename(2), and FedFS gives it the
// same in every mount (nodefs/dir_id.h, docs/namespace.md "Inode numbers"):
//
//  * a directory made through one mount, then copied to the other nodes by
//    creates there, keeps one number through every mount, across a rename
//    of all three copies, a rename into another directory, and a restart of
//    every daemon (every VD rebuilt by dirmerge from the export roots);
//  * so does one a local program made, and one a non-root owner renames in
//    a sticky directory;
//  * FedFS' own extended attribute is stored on the copies it made and never
//    shown through the mount.
//
// The Cluster stops the daemons by pid, unmounts and removes its temporary
// directory whatever happens.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

class DirIno : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
    const std::string e = c_.StartMounted(3, &ids_);
    ASSERT_TRUE(e.empty()) << e;
  }
  std::string M(const std::string& id, const std::string& rel) const {
    return c_.Mountpoint(id) + rel;
  }
  // st_ino of `rel` through `id`'s mount (0 if it cannot be stat'ed).
  uint64_t Ino(const std::string& id, const std::string& rel) const {
    struct stat st {};
    if (::stat(M(id, rel).c_str(), &st) != 0) return 0;
    return st.st_ino;
  }
  // d_ino of `name` in a listing of `dir` through `id`'s mount (0 if absent).
  uint64_t ListedIno(const std::string& id, const std::string& dir, const std::string& name) const {
    DIR* d = ::opendir(M(id, dir).c_str());
    if (d == nullptr) return 0;
    uint64_t ino = 0;
    while (struct dirent* de = ::readdir(d)) {
      if (name == de->d_name) ino = de->d_ino;
    }
    ::closedir(d);
    return ino;
  }
  // The same number through every mount, by stat and in its parent's listing.
  void ExpectEverywhere(const std::string& rel, uint64_t ino) const {
    const std::string dir = rel.substr(0, rel.rfind('/'));
    const std::string name = rel.substr(rel.rfind('/') + 1);
    for (const auto& id : ids_) {
      EXPECT_EQ(Ino(id, rel), ino) << rel << " through " << id;
      EXPECT_EQ(ListedIno(id, dir.empty() ? "/" : dir, name), ino)
          << rel << " listed through " << id;
    }
  }
  void Restart() {
    for (const auto& id : ids_) ASSERT_EQ(c_.Stop(id), 0) << c_.Log(id);
    for (const auto& id : ids_) c_.Start(id, c_.dir() + "/" + id + ".yaml");
    ASSERT_TRUE(WaitFor(
        [&] {
          for (const auto& id : ids_) {
            if (!IsMounted(c_.Mountpoint(id)) || !c_.SeesAlive(id, ids_)) return false;
          }
          return true;
        },
        kNoHang));
  }
  static bool Touch(const std::string& path) { return std::ofstream(path).good(); }

  Cluster c_;
  std::vector<std::string> ids_;
};

TEST_F(DirIno, ADirectoryKeepsItsNumberEverywhereAcrossRenamesAndRestarts) {
  ASSERT_EQ(::mkdir(M("n1", "/d").c_str(), 0755), 0) << std::strerror(errno);
  const uint64_t ino = Ino("n1", "/d");
  ASSERT_NE(ino, 0u);
  ExpectEverywhere("/d", ino);

  // Creates through n2 and n3 copy /d to their export roots; the copies
  // carry its identity, so the number does not change.
  ASSERT_TRUE(Touch(M("n2", "/d/f2")));
  ASSERT_TRUE(Touch(M("n3", "/d/f3")));
  for (const char* id : {"n2", "n3"}) {
    const std::string copy = c_.ExportRoot(id) + "/d";
    struct stat st {};
    ASSERT_TRUE(::lstat(copy.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) << "no copy of /d on " << id;
    char v[64];
    EXPECT_EQ(::lgetxattr(copy.c_str(), "trusted.fedfs.id", v, sizeof v), 16)
        << "the copy on " << id << " stores no id: " << std::strerror(errno);
  }
  ExpectEverywhere("/d", ino);

  // FedFS' own attribute is not the user's.
  char v[64];
  EXPECT_EQ(::getxattr(M("n1", "/d").c_str(), "trusted.fedfs.id", v, sizeof v), -1);
  EXPECT_EQ(errno, ENODATA);
  EXPECT_EQ(::setxattr(M("n1", "/d").c_str(), "trusted.fedfs.id", "x", 1, 0), -1);
  EXPECT_EQ(errno, EPERM);
  char names[4096];
  const ssize_t n = ::listxattr(M("n2", "/d").c_str(), names, sizeof names);
  ASSERT_GE(n, 0) << std::strerror(errno);
  EXPECT_EQ(std::string(names, static_cast<size_t>(n)).find("trusted.fedfs"), std::string::npos);

  // A rename of the three copies (the journaled multi-node rename).
  ASSERT_EQ(::rename(M("n1", "/d").c_str(), M("n1", "/e").c_str()), 0) << std::strerror(errno);
  ExpectEverywhere("/e", ino);
  EXPECT_EQ(Ino("n2", "/d"), 0u);

  // Into another directory, through another mount.
  ASSERT_EQ(::mkdir(M("n2", "/p").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::rename(M("n3", "/e").c_str(), M("n3", "/p/e").c_str()), 0) << std::strerror(errno);
  ExpectEverywhere("/p/e", ino);

  // Every VD rebuilt from the export roots.
  const uint64_t p_ino = Ino("n1", "/p");
  Restart();
  ExpectEverywhere("/p/e", ino);
  ExpectEverywhere("/p", p_ino);
}

TEST_F(DirIno, ALocalProgramsDirectoryAndAnOwnersRenameInAStickyDirectoryKeepTheirNumbers) {
  // Made behind FedFS' back on n3, renamed through n1's mount.
  ASSERT_EQ(::mkdir((c_.ExportRoot("n3") + "/loc").c_str(), 0755), 0);
  ASSERT_TRUE(WaitFor([&] { return Ino("n1", "/loc") != 0; }, kNoHang));
  const uint64_t loc = Ino("n1", "/loc");
  ExpectEverywhere("/loc", loc);
  ASSERT_EQ(::rename(M("n1", "/loc").c_str(), M("n1", "/loc2").c_str()), 0)
      << std::strerror(errno);
  ExpectEverywhere("/loc2", loc);

  // A sticky, world-writable directory; its user renames their own directory
  // (the cluster's own temporary directory opened to reach the mount).
  ASSERT_EQ(::chmod(c_.dir().c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(M("n1", "/s").c_str(), 0755), 0);
  ASSERT_EQ(::chmod(M("n1", "/s").c_str(), 01777), 0);
  const std::string s = M("n2", "/s");
  auto r = RunCommand({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c",
                       "mkdir " + s + "/u && stat -c %i " + s + "/u && mv " + s + "/u " + s +
                           "/v && stat -c %i " + s + "/v"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t nl = r.out.find('\n');
  ASSERT_NE(nl, std::string::npos) << r.out;
  const std::string before = r.out.substr(0, nl);
  const std::string after = r.out.substr(nl + 1, r.out.find('\n', nl + 1) - nl - 1);
  EXPECT_EQ(before, after) << r.out;
  ExpectEverywhere("/s/v", std::stoull(after));
}

}  // namespace
}  // namespace fedfs::testing
