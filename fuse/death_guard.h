// Ends a dead daemon's FUSE connection from outside the daemon's process.
//
// Why: a daemon killed (SIGKILL, the OOM killer) while one of its threads
// waits uninterruptibly on its own mount never ends. The case met: a reverse
// invalidation of a file's pages (fuse_lowlevel_notify_inval_inode) waits for
// a page lock that a write through the mount holds while that write waits for
// the daemon's answer. Killed, no thread is left to answer and the waiting
// thread cannot exit, so /dev/fuse is never closed, the kernel never ends the
// connection, and every caller of the mount waits forever (docs/faults.md,
// "Chaos run"). Nothing inside the process can help.
//
// What: Start forks a small child of the calling thread. The child waits for
// that thread to die (PR_SET_PDEATHSIG) and then aborts the armed connection
// through fusectl (/sys/fs/fuse/connections/<id>/abort; when the system has
// not mounted fusectl, the child mounts it in a private mount namespace of its
// own, which changes nothing outside it, or, where new namespaces are
// refused, where the system would). The write then fails with ECONNABORTED,
// frees its pages, and the stuck thread and the process end.
//
// Contract:
//  * Call Start from the thread that lives as long as the mount (the daemon's
//    main thread): the death of *that thread* triggers the child. Start
//    before other threads exist where possible; the child uses only system
//    calls either way and closes every descriptor it inherits but its socket.
//  * Arm(id) once the mount is up (FuseMount::connection_id()); Disarm once
//    the mount is gone; the destructor disarms, tells the child to exit and
//    reaps it. A clean stop never aborts anything.
//  * The child ignores SIGTERM and SIGINT (a terminal's ^C or a service
//    manager's stop reaches the whole group; the daemon stops, then lets the
//    child go). Aborting needs the rights that writing fusectl's abort file
//    needs: root, or the mount's owner where fusectl is already mounted.
//  * Aborting is logged on stderr in one line; a connection already gone
//    (the daemon's descriptors were closed) is left alone, silently.
// Not thread-safe: one owner thread calls every method.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/result.h"

namespace fedfs::fuse {

class DeathGuard {
 public:
  // Forks the child. Errors: the socket pair or fork failed (one line).
  static Result<std::unique_ptr<DeathGuard>> Start();
  ~DeathGuard();
  DeathGuard(const DeathGuard&) = delete;
  DeathGuard& operator=(const DeathGuard&) = delete;

  // The connection (fusectl's directory name, decimal digits) to abort if
  // the owner thread dies. EINVAL for anything but 1-10 digits; EPIPE if the
  // child is gone.
  Status Arm(const std::string& connection_id);
  Status Disarm();

  pid_t pid() const { return pid_; }

 private:
  DeathGuard(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  Status Send(const std::string& line);

  pid_t pid_;
  int fd_;  // our end of the socket pair
};

}  // namespace fedfs::fuse
