// The shared registry of mount targets for one test binary: a target is
// created on first use (mounting takes a moment) and kept for the rest of the
// binary; a gtest Environment (registered by targets.cc) tears every target
// down at the end, unmounting and stopping processes by pid.
//
// Names: "native", "native-ref" (the reference side of parity tests),
// "passthrough_ll", "fedfs-local" (files on the node that creates them) and "fedfs-remote"
// (3 nodes; a placement rule forces every file onto another node); both
// FedFS targets run with the file-data cache on.
// Main thread only.
#pragma once

#include <string>

#include "tests/posix/mount_target.h"

namespace fedfs::testing {

// The target `name`, or null with *why set when it cannot be created (the
// failure is remembered: the next call does not retry).
MountTarget* GetTarget(const std::string& name, std::string* why);

}  // namespace fedfs::testing
