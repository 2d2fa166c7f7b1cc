#include "nodefs/cred.h"

#include <sched.h>
#include <sys/stat.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/logging.h"

namespace fedfs::ns {
namespace {

// Raw, per-thread system calls (see the header: never the glibc wrappers).
long RawSetFsuid(uid_t uid) { return syscall(SYS_setfsuid, uid); }
long RawSetFsgid(gid_t gid) { return syscall(SYS_setfsgid, gid); }
long RawSetGroups(const std::vector<gid_t>& g) {
  return syscall(SYS_setgroups, g.size(), g.empty() ? nullptr : g.data());
}

// True once this thread has its own fs_struct, so umask(2) is per thread.
bool ThreadOwnsUmask() {
  thread_local int state = 0;  // 0 unknown, 1 own, -1 failed
  if (state == 0) {
    if (unshare(CLONE_FS) == 0) {
      state = 1;
    } else {
      state = -1;
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        Logger("namespace")->warn(
            "unshare(CLONE_FS) failed ({}): umask applied by masking modes, the process umask "
            "applies as well",
            std::strerror(errno));
      }
    }
  }
  return state == 1;
}

[[noreturn]] void RestoreFailed(const char* what) {
  Logger("namespace")->critical("cannot restore thread credentials ({}): {}", what,
                                std::strerror(errno));
  std::abort();
}

// What this thread's fs credentials are, as ScopedCred last left them: read
// from the kernel once per thread, then kept up to date by Enter/Leave (the
// only code in fedfsd that changes a thread's fs credentials). It lets Enter
// skip the system calls when the caller's credentials are the ones the
// thread already has: for root callers, the common case, an operation then
// makes no credential system call at all.
struct ThreadCred {
  bool known = false;
  // CAP_SETUID and CAP_SETGID are in this thread's effective set: the kernel
  // then never refuses an fsuid or fsgid, and Enter need not read them back.
  bool can_switch = false;
  uid_t fsuid = 0;
  gid_t fsgid = 0;
  std::vector<gid_t> groups;
};

bool HasSetidCaps() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  const auto has = [&](int cap) { return (data[cap / 32].effective >> (cap % 32)) & 1u; };
  return has(CAP_SETUID) && has(CAP_SETGID);
}

// Changes this thread's fsuid (set = RawSetFsuid) or fsgid from `from`, what
// it is, to `to`; false if the kernel refused. setfsuid/setfsgid answer the
// previous value, never an error: that answer must be `from` (anything else
// means the thread is not what ScopedCred left: abort). With CAP_SETUID and
// CAP_SETGID the kernel cannot refuse; without them the value is read back.
bool SwitchId(long (*set)(unsigned), unsigned from, unsigned to, bool can_switch,
              const char* what) {
  if (from == to) return true;
  if (static_cast<unsigned>(set(to)) != from) RestoreFailed(what);
  return can_switch || static_cast<unsigned>(set(static_cast<unsigned>(-1))) == to;
}

ThreadCred& Current() {
  thread_local ThreadCred t;
  if (!t.known) {
    int n = static_cast<int>(syscall(SYS_getgroups, 0, nullptr));
    t.groups.assign(static_cast<size_t>(std::max(n, 0)), 0);
    if (n > 0 && syscall(SYS_getgroups, n, t.groups.data()) < 0) t.groups.clear();
    t.fsuid = static_cast<uid_t>(RawSetFsuid(static_cast<uid_t>(-1)));
    t.fsgid = static_cast<gid_t>(RawSetFsgid(static_cast<gid_t>(-1)));
    t.can_switch = HasSetidCaps();
    t.known = true;
  }
  return t;
}

// Supplementary groups decide nothing for an fsuid of 0 (the file-system
// capabilities are in effect again there and override group permission
// checks), so root callers never switch them and a thread back at fsuid 0
// keeps the groups of its last caller.
bool SameCred(const ThreadCred& t, uid_t uid, gid_t gid, const std::vector<gid_t>& groups) {
  if (t.fsuid != uid || t.fsgid != gid) return false;
  return uid == 0 || t.groups == groups;
}

}  // namespace

uid_t ScopedCred::CurrentFsuid() { return static_cast<uid_t>(RawSetFsuid(static_cast<uid_t>(-1))); }
gid_t ScopedCred::CurrentFsgid() { return static_cast<gid_t>(RawSetFsgid(static_cast<gid_t>(-1))); }

Status ScopedCred::Enter(const Cred& c) {
  if (entered_) return Err(EINVAL, "ScopedCred entered twice");
  if (c.groups.size() > 65536) return Err(EINVAL, "too many supplementary groups");
  ThreadCred& cur = Current();
  std::vector<gid_t> groups(c.groups.begin(), c.groups.end());

  if (!SameCred(cur, c.uid, c.gid, groups)) {
    // Save what we find, to restore it exactly.
    prev_uid_ = cur.fsuid;
    prev_gid_ = cur.fsgid;
    groups_set_ = c.uid != 0 && groups != cur.groups;
    // Groups and fsgid first, while fsuid is still root's (setgroups needs
    // CAP_SETGID, which a non-zero fsuid does not drop, but keep the order
    // obvious: least privilege last).
    if (groups_set_) {
      if (RawSetGroups(groups) != 0) return Err(errno, "setgroups");
      prev_groups_ = std::exchange(cur.groups, std::move(groups));
    }
    const auto undo_groups = [&] {
      if (!groups_set_) return;
      RawSetGroups(prev_groups_);
      cur.groups = std::move(prev_groups_);
      groups_set_ = false;
    };
    if (!SwitchId(RawSetFsgid, cur.fsgid, c.gid, cur.can_switch, "setfsgid")) {
      undo_groups();
      return Err(EPERM, "setfsgid " + std::to_string(c.gid) + " refused");
    }
    if (!SwitchId(RawSetFsuid, cur.fsuid, c.uid, cur.can_switch, "setfsuid")) {
      SwitchId(RawSetFsgid, c.gid, prev_gid_, cur.can_switch, "setfsgid");
      undo_groups();
      return Err(EPERM, "setfsuid " + std::to_string(c.uid) + " refused");
    }
    cur.fsuid = c.uid;
    cur.fsgid = c.gid;
    switched_ = true;
  }
  // The umask is set by NewMode, which only operations that make a new
  // object call: the others make no umask(2) call.
  umask_ = static_cast<mode_t>(c.umask & 07777);
  entered_ = true;
  return Ok();
}

void ScopedCred::Leave() {
  if (!entered_) return;
  entered_ = false;
  ThreadCred& cur = Current();
  if (umask_set_ && prev_umask_ != umask_) umask(prev_umask_);
  umask_set_ = false;
  if (!switched_) return;
  switched_ = false;
  if (!SwitchId(RawSetFsuid, cur.fsuid, prev_uid_, cur.can_switch, "setfsuid")) {
    RestoreFailed("setfsuid");
  }
  if (!SwitchId(RawSetFsgid, cur.fsgid, prev_gid_, cur.can_switch, "setfsgid")) {
    RestoreFailed("setfsgid");
  }
  cur.fsuid = prev_uid_;
  cur.fsgid = prev_gid_;
  // Back at fsuid 0 the groups decide nothing: the next caller with the same
  // groups then skips setgroups. Under another caller's scope they matter.
  if (groups_set_ && prev_uid_ != 0) {
    if (RawSetGroups(prev_groups_) != 0) RestoreFailed("setgroups");
    cur.groups = std::move(prev_groups_);
  }
  groups_set_ = false;
}

ScopedCred::~ScopedCred() { Leave(); }

mode_t ScopedCred::NewMode(mode_t mode) {
  if (!entered_ || umask_set_) return mode;
  if (!ThreadOwnsUmask()) return mode & ~umask_;
  // One system call: umask(2) returns the previous value, and Leave puts it
  // back only if it differs (the umask is not cached: tests and tools may set
  // it directly).
  prev_umask_ = umask(umask_);
  umask_set_ = true;
  return mode;
}

}  // namespace fedfs::ns
