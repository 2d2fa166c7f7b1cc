// FedFS mount targets for the mount-level tests (targets.h): a federation
// of 3 fedfsd daemons started by the integration harness
// (tests/tools/cluster.h), each mounting the namespace; view(i) is node i's
// mountpoint.
//
//   kLocal:  default placement (local): files live on the creating node.
//   kRemote: every node has the rule `placement: {policy: local, rules:
//            [{prefix: /, node: n1}]}`, so what tests create through node
//            n0's mount (view 0) lives on n1: every data operation is remote.
//
// Built only when the harness can mount (CMake checks cluster.h for
// Cluster::Mountpoint). Main thread only.
#pragma once

#include <memory>
#include <string>

#include "tests/posix/mount_target.h"

namespace fedfs::testing {

enum class FedfsPlacement { kLocal, kRemote };

// Starts the federation and waits until all 3 mounts are live and every
// node sees all 3 members. Null with *why on failure (the daemons' last log
// lines included).
std::unique_ptr<MountTarget> MakeFedfsTarget(FedfsPlacement placement, std::string* why);

}  // namespace fedfs::testing
