// Applying a pending operation (dirops/pending_apply.h).
#include "dirops/pending_apply.h"

#include <linux/fs.h>
#include <sys/stat.h>

#include "common/logging.h"
#include "common/path.h"

namespace fedfs::ns {

namespace {

std::shared_ptr<spdlog::logger> Log() { return Logger("dirops"); }

const Cred& Daemon() {
  static const Cred kRoot{};
  return kRoot;
}

// Moves `path` of this export root to the orphans of `op_id`.
Status Orphan(NodeFs& fs, uint64_t op_id, const std::string& path) {
  const std::string dest = OrphanPath(op_id, path);
  if (auto s = fs.MkdirParents(dest, {}); !s) return s;
  if (auto s = fs.Rename(Daemon(), path, dest, RENAME_NOREPLACE); !s) return s;
  Log()->warn("op {}: {} could not be placed on this node: kept as {}", op_id, path, dest);
  return Ok();
}

// Moves every entry of `from` into the directory `to`; entries `to`
// already has go to the orphans.
Status MergeInto(NodeFs& fs, const PendingOp& op) {
  auto entries = fs.ListDir(Daemon(), op.from);
  if (!entries) return Err(entries.error());
  for (const auto& e : *entries) {
    const std::string src = JoinPath(op.from, e.name);
    const std::string dst = JoinPath(op.to, e.name);
    auto s = fs.Rename(Daemon(), src, dst, RENAME_NOREPLACE);
    if (!s && s.error().code == EEXIST) s = Orphan(fs, op.op_id, src);
    if (!s) return s;
  }
  return fs.Rmdir(Daemon(), op.from);
}

Status ApplyRename(NodeFs& fs, const PendingOp& op) {
  auto from = fs.Stat(Daemon(), op.from);
  if (!from) return from.error().code == ENOENT || from.error().code == ENOTDIR
                        ? Ok()
                        : Status(Err(from.error()));
  if (!S_ISDIR(from->st_mode)) return Ok();  // a file of that name: not the directory renamed
  auto to = fs.Stat(Daemon(), op.to);
  if (!to) {
    if (to.error().code != ENOENT) return Err(to.error());
    if (auto s = fs.MkdirParents(op.to, op.templates); !s) return s;
    return fs.Rename(Daemon(), op.from, op.to, RENAME_NOREPLACE);
  }
  if (!S_ISDIR(to->st_mode)) return Orphan(fs, op.op_id, op.from);
  auto list = fs.ListDir(Daemon(), op.to);
  if (!list) return Err(list.error());
  if (list->empty()) return fs.Rename(Daemon(), op.from, op.to, 0);
  return MergeInto(fs, op);
}

Status ApplyRmdir(NodeFs& fs, const PendingOp& op) {
  auto st = fs.Stat(Daemon(), op.from);
  if (!st) return st.error().code == ENOENT || st.error().code == ENOTDIR
                      ? Ok()
                      : Status(Err(st.error()));
  if (!S_ISDIR(st->st_mode)) return Ok();
  auto s = fs.Rmdir(Daemon(), op.from);
  if (s || s.error().code == ENOENT) return Ok();
  if (s.error().code != ENOTEMPTY && s.error().code != EEXIST) return s;
  return Orphan(fs, op.op_id, op.from);
}

}  // namespace

std::string OrphanPath(uint64_t op_id, const std::string& path) {
  return std::string(kOrphansDir) + "/" + std::to_string(op_id) + path;
}

Status ApplyPendingOp(NodeFs& local, const PendingOp& op) {
  Status s = op.kind == PendingOp::Kind::kRename ? ApplyRename(local, op) : ApplyRmdir(local, op);
  if (s) Log()->info("applied {}", op.Describe());
  return s;
}

}  // namespace fedfs::ns
