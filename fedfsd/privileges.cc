#include "fedfsd/privileges.h"

#include <linux/capability.h>

#include <algorithm>

#include <cap-ng.h>

namespace fedfs::daemon {

std::vector<int> KeptCapabilities(const PrivilegeOptions& o) {
  std::vector<int> caps = {
      // Per-thread caller credentials: setfsuid, setfsgid, setgroups
      // (nodefs/cred.h).
      CAP_SETUID,
      CAP_SETGID,
      // What root callers may do on a local file system, and what running as
      // a caller's fsuid needs: chown; operations reserved to the owner
      // (chmod, utimes, O_NOATIME) on other users' files; keeping set-id bits
      // (chmod g+s outside the group); mknod of devices; permission checks
      // bypassed for root callers, and the export root's traversal.
      CAP_CHOWN,
      CAP_FOWNER,
      CAP_FSETID,
      CAP_MKNOD,
      CAP_DAC_OVERRIDE,
      CAP_DAC_READ_SEARCH,
      // File capabilities (security.capability): set or removed by root
      // callers, and removed by the kernel before the first write to a file
      // that has them, whoever writes (nodefs/local_node_fs.cc, xattrs).
      CAP_SETFCAP,
      // mount(2) of the FUSE file system at start, umount2 at SIGTERM.
      CAP_SYS_ADMIN,
      // Pinning registered memory for RDMA (ibv_reg_mr beyond RLIMIT_MEMLOCK).
      CAP_IPC_LOCK,
      // FUSE over io_uring: queue threads wait as SCHED_IDLE and are moved
      // back to SCHED_OTHER (fuse/uring_channel.cc, SetIdle).
      CAP_SYS_NICE,
  };
  if (o.bind_privileged_port) caps.push_back(CAP_NET_BIND_SERVICE);
  return caps;
}

Result<DropReport> DropCapabilities(const PrivilegeOptions& o) {
  if (capng_get_caps_process() != 0) {
    return Err(errno ? errno : EPERM, "cannot read this process's capabilities");
  }
  const std::vector<int> keep = KeptCapabilities(o);
  DropReport report;
  report.bounding_reduced = capng_have_capability(CAPNG_EFFECTIVE, CAP_SETPCAP) == 1;
  const auto all = static_cast<capng_type_t>(CAPNG_EFFECTIVE | CAPNG_PERMITTED |
                                             CAPNG_INHERITABLE | CAPNG_BOUNDING_SET);
  for (unsigned cap = 0; cap <= CAP_LAST_CAP; ++cap) {
    const bool had = capng_have_capability(CAPNG_PERMITTED, cap) == 1;
    if (std::find(keep.begin(), keep.end(), static_cast<int>(cap)) != keep.end()) {
      if (had) {
        const char* name = capng_capability_to_name(cap);
        report.kept.push_back(name ? name : std::to_string(cap));
      }
      continue;
    }
    if (capng_update(CAPNG_DROP, all, cap) != 0) {
      return Err(EINVAL, "cannot drop capability " + std::to_string(cap));
    }
    if (had) ++report.dropped;
  }
  // Bounding set first (it needs CAP_SETPCAP, which the capability sets
  // applied next drop), then effective/permitted/inheritable.
  const capng_select_t select = report.bounding_reduced ? CAPNG_SELECT_BOTH : CAPNG_SELECT_CAPS;
  if (const int rc = capng_apply(select); rc != 0) {
    return Err(EPERM, "cannot apply the reduced capability sets (capng_apply: " +
                          std::to_string(rc) + ")");
  }
  return report;
}

}  // namespace fedfs::daemon
