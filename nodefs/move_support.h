// MoveSupport: what a file's move between nodes (migration/,
// docs/migration.md) needs of a node's own file system, beyond NodeFs.
// LocalNodeFs implements it; migration/ uses it on the source node L (the
// gate) and on the target node T (the unnamed staging file).
//
// The gate of one file (dev, ino) at L:
//  * none (every file, normally): nothing waits; with no file gated the cost
//    of the gate is one shared lock per changing operation;
//  * Frozen (Freeze): operations that would change the file's bytes or
//    attributes wait: opens for writing or with O_TRUNC, writes, fallocate,
//    SetAttr, xattr changes, and lock changes. Opens for reading and reads pass. Freeze
//    waits for such operations already running to finish first, so after it
//    returns the file changes only through a local program (not FedFS);
//  * Held (Hold): the move is committed and the directory's manager not yet
//    told: every open and read of the file waits as well;
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

#include <cstddef>
#include <string>

#include "common/result.h"

namespace fedfs::ns {

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
  // The move is committed: opens and reads wait too (see above).
  virtual void Hold(dev_t dev, ino_t ino) = 0;
  // The file moved: ESTALE from now on (also without a Freeze first: a
  // restarted source re-arms the gate of a committed move).
  virtual void MarkMoved(dev_t dev, ino_t ino) = 0;
  // Drops the gate of (dev, ino) (nothing if there is none). A moved file
  // that still has handles open here keeps answering ESTALE through them:
  // its gate goes with the last of them (its inode number cannot be reused
  // before).
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
