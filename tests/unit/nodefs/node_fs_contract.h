// The NodeFs contract suite: one set of tests that every implementation of
// ns::NodeFs (nodefs/node_fs.h) must pass unchanged (LocalNodeFs,
// RemoteNodeFs). Each test runs a sequence of operations through the NodeFs
// and the same system calls on a native temporary directory, and compares
// return values, errno and stat fields (mode, nlink, uid, gid, size; never
// times or inode numbers). Tests that have no native counterpart (hostile
// paths, locks shared with local programs, paths longer than PATH_MAX) check
// the documented result directly.
//
// An implementation joins by providing a NodeFsEnv factory and instantiating
// the suite (and linking node_fs_contract_tests.cc and fedfs_ns_local, which
// provides ScopedCred for the native side):
//
//   INSTANTIATE_TEST_SUITE_P(Local, NodeFsContract,
//                            ::testing::Values(NodeFsEnvFactory{"local", &MakeLocalEnv}),
//                            NodeFsEnvName);
//
// Environment requirements: the test process runs as root (permission cases
// switch to uid/gid 65534 and gid 4242 with ScopedCred on the test thread;
// they skip when not root); the export root and the native directory are on
// file systems with user xattrs and O_DIRECT support or fallback (ext4, xfs,
// tmpfs). make() is called once per test; the env is destroyed after it.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "nodefs/node_fs.h"

namespace fedfs::ns::testing {

// One NodeFs under test and the export root it serves.
class NodeFsEnv {
 public:
  virtual ~NodeFsEnv() = default;  // stops the NodeFs and removes root()
  // The NodeFs under test; it serves the export root root(). It must stay
  // valid until the env is destroyed.
  virtual NodeFs& fs() = 0;
  // Absolute local path of that export root: an empty directory when make()
  // returns, on this machine (the suite plants files there directly, as a
  // local program would, and takes local-program locks on them). The suite
  // sets its mode to 0755.
  virtual std::string root() = 0;
  // False for a NodeFs that keeps its tree elsewhere than root() (MemNodeFs:
  // root() is then only an empty scratch directory). The tests that act as a
  // local program on root() (planting files, locks, statvfs) skip.
  virtual bool backed_by_root() const { return true; }
};

struct NodeFsEnvFactory {
  std::string name;
  std::function<std::unique_ptr<NodeFsEnv>()> make;
};

// gtest prints the factory by its name.
inline void PrintTo(const NodeFsEnvFactory& f, std::ostream* os) { *os << f.name; }

inline std::string NodeFsEnvName(const ::testing::TestParamInfo<NodeFsEnvFactory>& info) {
  return info.param.name;
}

// Removes a directory tree of any depth (paths longer than PATH_MAX too);
// ignores errors. For env destructors.
void RemoveTree(const std::string& path);
// A new empty directory under $TMPDIR (or /tmp), mode 0755.
std::string MakeTempDir(const std::string& prefix);

class NodeFsContract : public ::testing::TestWithParam<NodeFsEnvFactory> {
 protected:
  void SetUp() override;
  void TearDown() override;

  NodeFs& fs() { return env_->fs(); }
  std::string root() { return env_->root(); }
  // The native path of global path `p` in the comparison directory.
  std::string N(const std::string& p) { return native_ + p; }
  // The local path of global path `p` in the export root.
  std::string R(const std::string& p) { return root() + p; }

  std::unique_ptr<NodeFsEnv> env_;
  std::string native_;
  Cred root_cred_;  // uid 0, gid 0, umask 0
};

}  // namespace fedfs::ns::testing
