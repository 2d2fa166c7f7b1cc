// ScopedCred: runs the current thread's file-system operations as a FedFS
// caller (namespace/node_fs.h Cred): fsuid, fsgid, supplementary groups and
// umask, then restores the daemon's own (root) fsuid, fsgid and umask.
//
// Per-thread only. Linux keeps credentials per task (thread). The glibc
// wrappers setgroups(3)/setuid(3)/... deliberately broadcast the change to
// EVERY thread of the process (POSIX says credentials are per process), so a
// FUSE worker serving user A would silently change the groups of the worker
// serving user B at the same moment: a privilege bug. ScopedCred therefore
// uses the raw system calls syscall(SYS_setfsuid/SYS_setfsgid/SYS_setgroups),
// which change the calling thread only. Never call the glibc wrappers of
// setgroups/setuid/setgid in fedfsd.
//
// umask: the thread unshares its fs_struct once (unshare(CLONE_FS), done
// lazily on the first NewMode of each thread) so that umask(2) becomes a
// per-thread setting; the caller's umask is then applied by the kernel exactly
// as for a local process (including "default ACL present => umask ignored").
// If unshare fails (a seccomp sandbox), NewMode() masks modes explicitly
// instead and a warning is logged once.
//
// Threads: a ScopedCred must be destroyed on the thread that entered it.
// Nesting is allowed (each level restores what it found).
//
// Cost: each thread remembers what its fs credentials are (read once, then
// kept by Enter/Leave), and Enter changes only what differs. A caller whose
// fsuid, fsgid and groups are the thread's own (root: groups are ignored for
// fsuid 0, where capabilities decide) makes no system call, and two umask(2)
// calls if it makes a new object. A non-root caller costs a setfsgid and a
// setfsuid each way, plus a setgroups when its groups are not the thread's:
// back at fsuid 0 a thread keeps its last caller's groups, which decide
// nothing there (the file-system capabilities are in effect again), so the
// next request of the same caller skips it. setfsuid/setfsgid answer the
// previous value and never fail: a thread with CAP_SETUID and CAP_SETGID
// (checked once per thread) cannot be refused, and each answer is checked
// against what the thread should have; a thread without them reads every
// change back (EPERM when refused).
// This relies on ScopedCred being the only code that changes a thread's fs
// credentials in fedfsd.
#pragma once

#include <sys/types.h>

#include <vector>

#include "common/result.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

class ScopedCred {
 public:
  ScopedCred() = default;
  ScopedCred(const ScopedCred&) = delete;
  ScopedCred& operator=(const ScopedCred&) = delete;
  // Restores the fsuid, fsgid and umask found by Enter(), and the groups too
  // unless the fsuid found was 0 (see "Cost"). A failure to restore aborts
  // the process: a worker thread must never keep serving with a user's
  // credentials.
  ~ScopedCred();

  // Switches this thread to `c`. Fails with the errno of the failing system
  // call (EPERM without CAP_SETUID/CAP_SETGID, EINVAL for more than
  // NGROUPS_MAX groups), or EPERM when the kernel silently refused the fsuid
  // or fsgid (setfsuid returns the previous value, so the result is checked
  // with a second call). After a failure nothing is changed.
  [[nodiscard]] Status Enter(const Cred& c);

  // Switches back now (the destructor then does nothing).
  void Leave();

  // The mode to pass to mkdirat/openat/mknodat for a new object of mode
  // `mode`, called just before that call: sets the thread's umask to the
  // caller's (until Leave) and returns `mode`, the kernel then applying the
  // umask; or returns mode & ~umask when the thread could not get its own.
  mode_t NewMode(mode_t mode);

  // This thread's current fsuid/fsgid (for tests and assertions).
  static uid_t CurrentFsuid();
  static gid_t CurrentFsgid();

 private:
  bool entered_ = false;
  bool switched_ = false;  // Enter changed fsuid/fsgid (Leave restores them)
  bool groups_set_ = false;  // Enter changed the groups (prev_groups_ has the old ones)
  bool umask_set_ = false;  // NewMode set the thread's umask (Leave restores it)
  uid_t prev_uid_ = 0;
  gid_t prev_gid_ = 0;
  mode_t prev_umask_ = 0;
  mode_t umask_ = 0;
  std::vector<gid_t> prev_groups_;
};

}  // namespace fedfs::ns
