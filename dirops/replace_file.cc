// DirOps::ReplaceFile: a file renamed over a file of the same name held by
// another node, journaled (dirops/dir_ops.h). The record keeps both files'
// local inode numbers: after a crash, `to` on the source's node being the
// recorded source says the rename happened (so the old destination must go),
// and only the recorded old destination is ever unlinked.
#include <sys/stat.h>

#include <dirent.h>

#include "common/logging.h"
#include "common/path.h"
#include "dirops/dir_ops.h"
#include "dirops/dir_ops_record.h"
#include "dirops/kv_keys.h"

namespace fedfs::ns {

namespace {

std::shared_ptr<spdlog::logger> Log() { return Logger("dirops"); }

}  // namespace

Status DirOps::ReplaceFile(const Cred& cred, const std::string& from,
                           const std::string& from_node, const std::string& to,
                           const std::string& replaced, const std::string& to_node) {
  for (const std::string* p : {&from, &to, &replaced}) {
    if (auto s = ValidateGlobalPath(*p); !s) return s;
  }
  if (from_node == to_node) return Err(EINVAL, "replace within one node: " + from_node);
  NodeFs* src = Fs(from_node);
  NodeFs* dst = Fs(to_node);
  if (src == nullptr) return Err(EHOSTDOWN, "no route to node " + from_node);
  if (dst == nullptr) return Err(EHOSTDOWN, "no route to node " + to_node);
  const std::vector<std::string> paths{from, to};
  if (auto s = Acquire(paths); !s) return s;
  BusyGuard guard([&] { Release(paths); });

  auto src_st = src->Stat(cred, from);
  if (!src_st) return Err(src_st.error());
  auto dst_st = dst->Stat(cred, replaced);
  if (!dst_st) return Err(dst_st.error());
  if (S_ISDIR(src_st->st_mode) || S_ISDIR(dst_st->st_mode)) {
    return Err(EISDIR, "replace of a directory: " + from + " over " + replaced);
  }

  Record r;
  r.id = NextId();
  r.kind = Record::Kind::kReplace;
  r.state = Record::State::kActing;
  r.from = from;
  r.to = to;
  r.cred = cred;
  r.from_node = from_node;
  r.to_node = to_node;
  r.replaced = replaced;
  r.src_ino = src_st->st_ino;
  r.dst_ino = dst_st->st_ino;
  if (auto s = Save(r); !s) return s;
  Step("replace-journaled");

  if (auto s = src->Rename(cred, from, to, 0); !s) {
    if (!Erase(r)) KeepPending(r.id, r.Paths());
    return s;
  }
  Step("replace-renamed:" + from_node);

  Error err;
  switch (UnlinkReplaced(r, cred, &err)) {
    case Outcome::kOk:
      break;
    case Outcome::kRetry:
      // The rename stands; the old copy is removed when to_node answers.
      Log()->warn("{}: the old destination is removed later: {}", r.Describe(), err.ToString());
      KeepPending(r.id, r.Paths());
      return Ok();
    case Outcome::kFailed: {
      // Put the source back: the name keeps its old file.
      auto back = src->Rename(RootCred(), to, from, RENAME_NOREPLACE);
      if (!back) {
        Log()->error("{}: unlink failed ({}) and the rename back failed too ({}): both files "
                     "stay, {} shows as a conflict",
                     r.Describe(), err.ToString(), back.error().ToString(), to);
      }
      if (!Erase(r)) KeepPending(r.id, r.Paths());
      return Err(err);
    }
  }
  Step("replace-unlinked:" + to_node);
  if (!Erase(r)) KeepPending(r.id, r.Paths());
  Step("replace-finished");
  return Ok();
}

DirOps::Outcome DirOps::UnlinkReplaced(const Record& r, const Cred& cred, Error* err) {
  NodeFs* dst = Fs(r.to_node);
  if (dst == nullptr) {
    *err = Error{EHOSTDOWN, "no route to node " + r.to_node};
    return Outcome::kRetry;
  }
  auto st = dst->Stat(RootCred(), r.replaced);
  if (!st) {
    if (st.error().code == ENOENT) return Outcome::kOk;  // gone already
    *err = st.error();
    return IsTransient(st.error().code) ? Outcome::kRetry : Outcome::kFailed;
  }
  if (st->st_ino != r.dst_ino) return Outcome::kOk;  // another file took the name: not ours
  auto gone = dst->Unlink(cred, r.replaced);
  if (gone || gone.error().code == ENOENT) return Outcome::kOk;
  *err = gone.error();
  return IsTransient(gone.error().code) ? Outcome::kRetry : Outcome::kFailed;
}

DirOps::Outcome DirOps::ResolveReplace(Record& r) {
  auto view = view_();
  for (const std::string* n : {&r.from_node, &r.to_node}) {
    if (!view || !view->IsAlive(*n) || Fs(*n) == nullptr) {
      Log()->warn("{} pending: waiting for node {}", r.Describe(), *n);
      return Outcome::kRetry;
    }
  }
  NodeFs* from_fs = Fs(r.from_node);  // null if declared dead since the check
  if (from_fs == nullptr) return Outcome::kRetry;
  auto st = from_fs->Stat(RootCred(), r.to);
  if (!st && st.error().code != ENOENT) {
    Log()->warn("{} pending: probing {}: {}", r.Describe(), r.from_node, st.error().ToString());
    return Outcome::kRetry;
  }
  if (!st || st->st_ino != r.src_ino) {
    Log()->info("{}: crashed before the rename: nothing changed, dropped", r.Describe());
    return Erase(r) ? Outcome::kOk : Outcome::kRetry;
  }
  Error err;
  // As the daemon: the caller's rename was already done, only its old
  // destination is left (a replaced name may not be kept beside it).
  const Outcome o = UnlinkReplaced(r, RootCred(), &err);
  if (o != Outcome::kOk) {
    Log()->warn("{} pending (removing the old destination): {}", r.Describe(), err.ToString());
    return Outcome::kRetry;
  }
  Log()->info("{}: rolled forward", r.Describe());
  NotifyReplace(r);
  return Erase(r) ? Outcome::kOk : Outcome::kRetry;
}

void DirOps::NotifyReplace(const Record& r) {
  uint8_t type = DT_REG;
  if (NodeFs* fs = Fs(r.from_node); fs != nullptr) {
    if (auto st = fs->Stat(RootCred(), r.to); st) type = IFTODT(st->st_mode);
  }
  Tell(r, r.replaced, VdChange::Kind::kRemove, r.to_node, 0);
  Tell(r, r.to, VdChange::Kind::kAdd, r.from_node, type);
  Tell(r, r.from, VdChange::Kind::kRemove, r.from_node, 0);
}

}  // namespace fedfs::ns
