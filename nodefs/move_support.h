// MoveSupport: what a file's move between nodes (migration/,
// docs/migration.md) needs of a node's own file system, beyond NodeFs.
// LocalNodeFs implements it; migration/ uses it on the source node L (the
// gate) and on the target node T (the unnamed staging file).
//
// The gate of one file (dev, ino) at L:
//  * none (every file, normally): nothing waits; with no file gated the cost
//    of the gate is one shared lock per changing operation;
//  * Frozen (Freeze): operations that would change the file's bytes or
//    attributes wait: opens with O_TRUNC, writes, fallocate, SetAttr, xattr
//    changes, and lock changes. Other opens (for writing too) and reads
//    pass. Freeze waits for such operations already running to finish
//    first, so after it returns the file changes only through a local
//    program (not FedFS);
//  * Held (Hold): the move is committed and the directory's manager not yet
//    told: as Frozen (opens and reads pass: the bytes here are the new
//    copy's, which takes no write before every node dropped what it cached
//    of the file);
//  * Moved (MarkMoved): the file now lives elsewhere: waiters and every later
//    open, read, write... of it answer ESTALE (the kernel then looks the name
//    up again, and finds the new copy);
//  * Thaw drops the gate (after an undo, or after the moved copy is gone):
//    waiters run here.
// Names (unlink, rename, link) are not gated: the move holds the name's lock
// at the directory's manager (vd/vd_service.h, kLock) instead.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "common/result.h"

namespace fedfs::ns {

// How long an operation on this thread may wait at a file's gate. A server
// answering another node's request sets it for the call (files/, from the
// caller's budget): past it the operation fails with kErrMoveWait, nothing
// done, and the other node asks again (RemoteNodeFs), so that no caller's
// call times out while a move holds the file. Unset (this node's own mount,
// the move itself): an operation waits as long as the gate stands.
inline constexpr int kErrMoveWait = EINPROGRESS;
inline std::optional<std::chrono::steady_clock::time_point>& GateDeadline() {
  thread_local std::optional<std::chrono::steady_clock::time_point> deadline;
  return deadline;
}
class ScopedGateDeadline {
 public:
  explicit ScopedGateDeadline(std::chrono::steady_clock::time_point d) : prev_(GateDeadline()) {
    GateDeadline() = d;
  }
  ~ScopedGateDeadline() { GateDeadline() = prev_; }
  ScopedGateDeadline(const ScopedGateDeadline&) = delete;
  ScopedGateDeadline& operator=(const ScopedGateDeadline&) = delete;

 private:
  std::optional<std::chrono::steady_clock::time_point> prev_;
};

class MoveSupport {
 public:
  virtual ~MoveSupport() = default;

  struct Frozen {
    size_t handles = 0;      // open handles of the file here
    size_t lock_owners = 0;  // owners holding locks on it here
  };
  // Freezes (dev, ino) (see above; lock changes wait too) and says who has
  // it open or locked now. EBUSY if it is gated.
  [[nodiscard]] virtual Result<Frozen> Freeze(dev_t dev, ino_t ino) = 0;
  // The move is committed (see above).
  virtual void Hold(dev_t dev, ino_t ino) = 0;
  // The file moved: ESTALE from now on (also without a Freeze first: a
  // restarted source re-arms the gate of a committed move).
  virtual void MarkMoved(dev_t dev, ino_t ino) = 0;
  // Drops the gate of (dev, ino) (nothing if there is none). A moved file
  // that still has handles open here keeps answering ESTALE through them:
  // its gate goes with the last of them (its inode number cannot be reused
  // before). Until Thaw the gate stands whatever handles come and go: the
  // move's own steps after MarkMoved (the unlink of the name) rely on it.
  virtual void Thaw(dev_t dev, ino_t ino) = 0;

  // An unnamed regular file (O_TMPFILE, mode 0600, owned by the daemon) in
  // the existing directory `dir` (global path), opened read-write; the
  // caller owns the descriptor. It disappears if never linked.
  [[nodiscard]] virtual Result<int> CreateUnnamed(const std::string& dir) = 0;
  // Links the unnamed file `fd` at global path `path` as the daemon (EEXIST
  // if the name exists: never replaces), tells the change hook first (no
  // echo from the watcher), then fsyncs the directory. Its stat.
  [[nodiscard]] virtual Result<struct stat> LinkUnnamed(int fd, const std::string& path) = 0;
};

}  // namespace fedfs::ns
