// Applying a pending operation to a returning member's export root
// (dirops/pending.h; docs/faults.md, "Directory operations with dead
// members").
//
// ApplyPendingOp runs on the member the record names, against its own
// LocalNodeFs, as the daemon. It is idempotent (a crash while applying
// starts over with the same records) and never deletes anything that is
// not empty. What cannot be put where the operation says goes to
// `/.fedfs-orphans/<op id>/<path>` of this export root, an ordinary
// directory that every mount lists, so nothing is lost:
//   * rename `from` -> `to`: `from` not a directory here (or gone): nothing
//     to do. `to` absent, or an empty directory: `from` is renamed (missing
//     ancestors of `to` made from the record's templates). `to` a non-empty
//     directory (a local program made it meanwhile): `from`'s entries move
//     into it one by one, an entry whose name `to` already has goes to the
//     orphans; then `from` is removed. `to` not a directory: `from` goes to
//     the orphans;
//   * rmdir `path`: removed if empty here; otherwise (this member held
//     files beneath it that no live member could see when the union was
//     found empty) it goes to the orphans.
// Errors: those of the local file system (the caller keeps the record and
// tries again later).
#pragma once

#include <string>

#include "common/result.h"
#include "dirops/pending.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

inline constexpr const char* kOrphansDir = "/.fedfs-orphans";

// Where `path` goes when operation `op_id` cannot place it.
std::string OrphanPath(uint64_t op_id, const std::string& path);

[[nodiscard]] Status ApplyPendingOp(NodeFs& local, const PendingOp& op);

}  // namespace fedfs::ns
