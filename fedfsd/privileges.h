// Capability reduction of the daemon (docs/design.md, "Privileges").
//
// fedfsd runs as root because it serves every user's files with their own
// credentials (nodefs/cred.h: per-thread setfsuid/setfsgid/setgroups) and
// mounts FUSE. It needs a handful of capabilities for that and none of the
// others (loading modules, raw I/O, ptrace, network administration, reboot,
// ...), so DropCapabilities removes every capability outside KeptCapabilities()
// from the effective, permitted, inheritable and bounding sets (and with the
// permitted set, the ambient one), through libcap-ng.
//
// Threads. Linux keeps capabilities per thread, and a new thread inherits the
// sets of the thread that creates it. DropCapabilities changes the calling
// thread only, so it must run on the main thread BEFORE any other thread
// exists (fedfsd calls it at the top of Daemon::Start, before the transport,
// membership, pools and FUSE start their threads); every later thread then
// inherits the reduced sets. The kept set therefore also covers what starting
// needs (mount(2) is CAP_SYS_ADMIN, which unmounting needs anyway).
// libcap-ng stays inside privileges.cc.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace fedfs::daemon {

struct PrivilegeOptions {
  // Keep CAP_NET_BIND_SERVICE (the listen port is below 1024).
  bool bind_privileged_port = false;
};

// The capabilities (CAP_* numbers) fedfsd keeps, and why (privileges.cc).
std::vector<int> KeptCapabilities(const PrivilegeOptions& o);

struct DropReport {
  std::vector<std::string> kept;     // names of the kept capabilities the process had
  size_t dropped = 0;                // capabilities removed from the permitted set
  bool bounding_reduced = false;     // false without CAP_SETPCAP (not root)
};

// Drops every capability outside KeptCapabilities(o) from this thread (see
// the header comment: call before any thread starts). Never adds one. Without
// CAP_SETPCAP the bounding set cannot be reduced: the other sets still are,
// and the report says so. EPERM/EINVAL with context if libcap-ng fails.
Result<DropReport> DropCapabilities(const PrivilegeOptions& o);

}  // namespace fedfs::daemon
