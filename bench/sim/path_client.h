// PathClient: what a process's system calls become at one node's facade
// (ns::Vfs), as the kernel's FUSE client sends them with no dentry or
// attribute cache (entry and attribute timeouts 0, the daemon's default):
// a path is resolved by a Lookup of each component from the root, then the
// operation is called on the parent's inode (create, mkdir, unlink, rmdir,
// rename) or on the entry's (stat = LOOKUP + GETATTR, a listing = OPENDIR +
// READDIR until empty + RELEASEDIR); every lookup is forgotten afterwards.
// No namespace logic here: each step is one facade call.
//
// The simulator's workloads run it in their client fibers; the equivalence
// test (tests/unit/bench/sim_equivalence_test.cc) runs the same sequence on
// the simulator's nodes and on daemon-wired nodes and compares the answers.
//
// Threads: the caller's (the facade's calls block).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "nodefs/node_fs.h"
#include "vfs/vfs.h"

namespace fedfs::bench {

// One operation by path: mkdir | create | stat | lookup | readdir |
// rename (path -> path2) | unlink | rmdir.
struct PathOp {
  std::string kind;
  std::string path;
  std::string path2;
};

// What the caller saw: an errno (0: success), the type of the entry
// (S_IFMT bits, mkdir/create/stat/lookup), the listing ("name/" for
// directories, "name" otherwise, in the facade's order; readdir).
struct PathAnswer {
  int err = 0;
  mode_t type = 0;
  std::vector<std::string> listing;
  bool ok() const { return err == 0; }
  bool operator==(const PathAnswer&) const = default;
  std::string ToString() const;
};

class PathClient {
 public:
  // `vfs` outlives the client. Operations run as `cred`.
  PathClient(ns::Vfs* vfs, ns::Cred cred) : vfs_(vfs), cred_(std::move(cred)) {}

  // Resolves `op.path` (and path2) by walking, runs it, forgets the lookups.
  PathAnswer Run(const PathOp& op);

  // The inode of `path` by a Lookup of each component from the root; each
  // lookup taken is appended to *held (give them back with Forget).
  Result<uint64_t> Walk(const std::string& path, std::vector<uint64_t>* held);
  void Forget(std::vector<uint64_t>* held);

  // One operation on entry `name` of the directory inode `parent`.
  PathAnswer Create(uint64_t parent, const std::string& name);
  PathAnswer Mkdir(uint64_t parent, const std::string& name);
  PathAnswer Stat(uint64_t parent, const std::string& name);
  PathAnswer Lookup(uint64_t parent, const std::string& name);
  PathAnswer Unlink(uint64_t parent, const std::string& name);
  PathAnswer Rmdir(uint64_t parent, const std::string& name);
  PathAnswer ReadDir(uint64_t dir);

 private:
  static PathAnswer Failed(const Error& e);
  ns::Vfs* vfs_;
  const ns::Cred cred_;
};

}  // namespace fedfs::bench
