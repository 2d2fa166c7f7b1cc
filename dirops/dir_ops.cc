// DirOps (dirops/dir_ops.h): journaled multi-node rename and rmdir of
// directories.
#include "dirops/dir_ops.h"

#include <dirent.h>
#include <linux/fs.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <cstdlib>
#include <ctime>
#include <map>
#include <string>
#include <string_view>

#include "common/cooperative.h"
#include "common/logging.h"
#include "nodefs/dir_id.h"
#include "common/thread_name.h"
#include "dirops/dir_ops_record.h"
#include "dirops/kv_keys.h"
#include "dirops/pending_service.h"
#include "common/path.h"

namespace fedfs::ns {

namespace {

std::shared_ptr<spdlog::logger> Log() { return Logger("dirops"); }

// Ancestors of `path`, excluding "/" and `path`: "/a/b/c" -> {"/a", "/a/b"}.
std::vector<std::string> Ancestors(const std::string& path) {
  std::vector<std::string> out;
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    out.push_back(path.substr(0, pos));
  }
  return out;
}

// Removes `paths` from the multiset once each.
void EraseOnce(std::multiset<std::string>& set, const std::vector<std::string>& paths) {
  for (const auto& p : paths) {
    auto it = set.find(p);
    if (it != set.end()) set.erase(it);
  }
}

}  // namespace

DirOpsHooks PauseHooksFromEnv() {
  const char* env = std::getenv("FEDFS_TEST_PAUSE_AT");
  if (env == nullptr || *env == '\0') return {};
  // "<step>[+<ms>]", several separated by commas.
  std::map<std::string, long, std::less<>> pauses;  // step -> ms (-1: forever)
  std::string_view rest = env;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string one(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (one.empty()) continue;
    long delay_ms = -1;  // forever
    if (const size_t plus = one.find('+'); plus != std::string::npos) {
      delay_ms = std::strtol(one.c_str() + plus + 1, nullptr, 10);
      one.resize(plus);
    }
    Log()->warn("test hook: operations pause at step \"{}\" (FEDFS_TEST_PAUSE_AT{})", one,
                delay_ms < 0 ? "" : ", for " + std::to_string(delay_ms) + " ms");
    pauses[std::move(one)] = delay_ms;
  }
  if (pauses.empty()) return {};
  DirOpsHooks h;
  h.at_step = [pauses = std::move(pauses)](std::string_view step) {
    auto it = pauses.find(step);
    if (it == pauses.end()) return;
    Log()->warn("paused at {}", step);
    Log()->flush();
    if (it->second >= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(it->second));
      Log()->warn("resumed at {}", step);
      return;
    }
    for (;;) ::pause();
  };
  return h;
}

DirOps::DirOps(std::string node_id, Kv* kv, FsForFn fs_for, ViewFn view, NotifyFn notify,
               DirOpsOptions options, DirOpsHooks hooks)
    : node_id_(std::move(node_id)),
      kv_(kv),
      fs_for_(std::move(fs_for)),
      view_(std::move(view)),
      notify_(std::move(notify)),
      options_(options),
      hooks_(std::move(hooks)) {}

DirOps::~DirOps() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (retry_thread_.joinable()) retry_thread_.join();
}

void DirOps::Step(std::string_view step) {
  if (hooks_.at_step) hooks_.at_step(step);
}

NodeFs* DirOps::Fs(const std::string& node) const { return fs_for_ ? fs_for_(node) : nullptr; }

Status DirOps::CheckCluster(const std::vector<std::string>& holders) const {
  auto view = view_();
  if (!view) return Err(EHOSTDOWN, "no cluster view");
  // A dead member that is back and applying its records: wait for it (up to
  // the deadline) rather than record more for it, which would hold it dead
  // for as long as operations keep coming.
  const auto start = SteadyNow();
  while (dead_sink_ != nullptr && SteadyNow() - start < options_.deadline) {
    bool returning = false;
    for (const auto& [n, addr] : view->dead) returning = returning || dead_sink_->Returning(n);
    if (!returning) break;
    SleepFor(std::chrono::milliseconds(20));
    view = view_();
    if (!view) return Err(EHOSTDOWN, "no cluster view");
  }
  if (dead_sink_ != nullptr) {
    view = view_();
    if (!view) return Err(EHOSTDOWN, "no cluster view");
  }
  if (!view->dead.empty() && dead_sink_ == nullptr) {
    return Err(EHOSTDOWN, "node " + view->dead.begin()->first +
                              " is dead: multi-node directory operations wait for it");
  }
  // Records for dead members only from a strict majority of the members
  // ("Dead nodes"): in a partition, only one side goes ahead.
  if (!view->dead.empty() && 2 * view->live.size() <= view->live.size() + view->dead.size()) {
    return Err(EHOSTDOWN, std::to_string(view->dead.size()) + " of " +
                              std::to_string(view->live.size() + view->dead.size()) +
                              " members are dead: directory operations wait for a majority");
  }
  for (const auto& h : holders) {
    if (!view->IsAlive(h)) return Err(EHOSTDOWN, "holder " + h + " is not alive");
  }
  return Ok();
}

Status DirOps::Acquire(const std::vector<std::string>& paths) {
  std::lock_guard lock(mu_);
  for (const auto& p : paths) {
    for (const auto& b : busy_) {
      if (PathWithin(p, b) || PathWithin(b, p)) {
        return Err(EBUSY, p + " overlaps a directory operation in progress on " + b);
      }
    }
  }
  for (const auto& p : paths) busy_.insert(p);
  return Ok();
}

void DirOps::Release(const std::vector<std::string>& paths) {
  std::lock_guard lock(mu_);
  EraseOnce(busy_, paths);
}

uint64_t DirOps::NextId() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  const uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
  // Larger than every pending record's seq this node holds (dirops/
  // pending.h, "Order").
  const uint64_t held = dead_sink_ != nullptr ? dead_sink_->store().MaxSeq() : 0;
  std::lock_guard lock(mu_);
  last_id_ = std::max({last_id_ + 1, now, held + 1});
  return last_id_;
}

Status DirOps::Save(const Record& r) {
  auto s = kv_->Put(kvkeys::DirOpsJournalKey(r.id), EncodeRecord(r), /*sync=*/true);
  if (!s) Log()->error("journal write of {}: {}", r.Describe(), s.error().ToString());
  return s;
}

Status DirOps::Erase(const Record& r) {
  auto s = kv_->Delete(kvkeys::DirOpsJournalKey(r.id), /*sync=*/true);
  if (!s) Log()->error("journal delete of {}: {}", r.Describe(), s.error().ToString());
  return s;
}

namespace {

// Whether the operation of `r` has been applied on the node of `fs`
// (rename: `from` gone; rmdir: the directory gone). Stat as the daemon.
Result<bool> Probe(NodeFs* fs, const DirOps::Record& r) {
  auto st = fs->Stat(RootCred(), r.from);
  if (st) return false;
  if (st.error().code != ENOENT) return Err(st.error());
  if (r.kind == DirOps::Record::Kind::kRename) {
    auto st_to = fs->Stat(RootCred(), r.to);
    if (!st_to && st_to.error().code != ENOENT) return Err(st_to.error());
    if (!st_to) {
      Log()->warn("{}: neither {} nor {} exists on {} (removed behind FedFS' back?)",
                  r.Describe(), r.from, r.to, fs->node_id());
    }
  }
  return true;
}

// mkdir + chown/chmod as the daemon: restores a directory as it was.
Status Recreate(NodeFs* fs, const std::string& path, const DirOps::Record::Saved& s) {
  auto st = fs->Mkdir(RootCred(), path, s.mode & 07777);
  if (!st && st.error().code != EEXIST) return Err(st.error());
  SetAttrRequest req;
  req.mode = s.mode & 07777;
  req.uid = s.uid;
  req.gid = s.gid;
  auto r = fs->SetAttr(RootCred(), path, std::nullopt, req);
  if (!r) return Err(r.error());
  return Ok();
}

}  // namespace

Status DirOps::ValidateRename(const Cred& cred, Record& r, const ClusterView& view) {
  const auto start = SteadyNow();
  auto expired = [&] { return SteadyNow() - start > options_.deadline; };

  std::vector<std::string> nodes;
  for (const auto& [n, addr] : view.live) nodes.push_back(n);
  for (const auto& h : r.holders) {
    if (!view.IsAlive(h)) nodes.push_back(h);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());

  // `from` on every node: the holders are the nodes where it is a directory
  // (the VD's holder list is a hint; a node that gained it since is included).
  std::set<std::string> holders(r.holders.begin(), r.holders.end());
  r.dir_id = 0;
  // Each node's NodeFs is looked up once: a node declared dead meanwhile has
  // none any more (a later lookup gave a null pointer, which crashed a
  // daemon of the chaos run whose view lost two members mid-validation).
  std::map<std::string, NodeFs*> fs_of;
  for (const auto& n : nodes) {
    NodeFs* fs = Fs(n);
    if (fs == nullptr) return Err(EHOSTDOWN, "no route to node " + n);
    fs_of[n] = fs;
  }
  for (const auto& n : nodes) {
    if (expired()) return Err(ETIMEDOUT, "rename " + r.from + ": validation deadline");
    NodeFs* fs = fs_of.at(n);
    auto st = fs->Stat(cred, r.from);
    if (st && S_ISDIR(st->st_mode)) {
      holders.insert(n);
      auto id = CopyDirIdOn(*fs, n, r.from, *st);
      if (!id) return Err(id.error());
      r.dir_id = MergeDirId(r.dir_id, *id);
    } else if (holders.count(n)) {
      if (st) return Err(ENOTDIR, r.from + " is not a directory on " + n);
      if (st.error().code == ENOENT) {
        holders.erase(n);  // stale hint
      } else {
        return Err(st.error());
      }
    } else if (!st && st.error().code != ENOENT && st.error().code != ENOTDIR) {
      return Err(st.error());
    }
  }
  if (holders.empty()) return Err(ENOENT, r.from + ": no such directory on any node");
  r.holders.assign(holders.begin(), holders.end());

  // `to` on every node.
  for (const auto& n : nodes) {
    if (expired()) return Err(ETIMEDOUT, "rename " + r.from + ": validation deadline");
    NodeFs* fs = fs_of.at(n);
    auto st = fs->Stat(cred, r.to);
    if (!st) {
      if (st.error().code == ENOENT) continue;
      return Err(st.error());
    }
    if (r.flags & RENAME_NOREPLACE) return Err(EEXIST, r.to + " exists on " + n);
    if (!S_ISDIR(st->st_mode)) return Err(ENOTDIR, r.to + " is not a directory on " + n);
    auto list = fs->ListDir(cred, r.to);
    if (!list) return Err(list.error());
    if (!list->empty()) return Err(ENOTEMPTY, r.to + " is not empty on " + n);
    if (holders.count(n)) {
      r.saved[n] = {static_cast<uint32_t>(st->st_mode & 07777), st->st_uid, st->st_gid};
    }
  }

  // Templates for the ancestors of `to` that a holder may lack.
  r.templates.clear();
  for (const auto& anc : Ancestors(r.to)) {
    bool found = false;
    for (const auto& n : nodes) {
      if (expired()) return Err(ETIMEDOUT, "rename " + r.from + ": validation deadline");
      auto st = fs_of.at(n)->Stat(RootCred(), anc);
      if (!st) {
        if (st.error().code == ENOENT) continue;
        return Err(st.error());
      }
      if (!S_ISDIR(st->st_mode)) return Err(ENOTDIR, anc + " is not a directory on " + n);
      auto id = CopyDirIdOn(*fs_of.at(n), n, anc, *st);
      if (!id) return Err(id.error());
      r.templates.push_back(
          {static_cast<mode_t>(st->st_mode & 07777), st->st_uid, st->st_gid, *id});
      found = true;
      break;
    }
    if (!found) return Err(ENOENT, anc + ": no such directory on any node");
  }
  return Ok();
}

DirOps::Outcome DirOps::Forward(Record& r, const Cred& cred, Error* err) {
  const bool rename = r.kind == Record::Kind::kRename;
  for (const auto& node : r.holders) {
    if (r.done.count(node)) continue;
    NodeFs* fs = Fs(node);
    if (fs == nullptr) {
      *err = Error{EHOSTDOWN, "no route to node " + node};
      return Outcome::kRetry;
    }
    auto fail = [&](const Error& e) {
      *err = e;
      return IsTransient(e.code) ? Outcome::kRetry : Outcome::kFailed;
    };
    auto changed = Probe(fs, r);
    if (!changed) return fail(changed.error());
    if (!*changed) {
      if (rename) {
        if (auto s = fs->MkdirParents(r.to, r.templates); !s) return fail(s.error());
        if (auto s = fs->Rename(cred, r.from, r.to, r.flags & RENAME_NOREPLACE); !s) {
          return fail(s.error());
        }
        Step("renamed:" + node);
      } else {
        if (auto s = fs->Rmdir(cred, r.from); !s) return fail(s.error());
        Step("removed:" + node);
      }
    }
    r.done.insert(node);
    if (auto s = Save(r); !s) return fail(s.error());
    Step("done:" + node);
  }
  return Outcome::kOk;
}

DirOps::Outcome DirOps::Backward(Record& r, Error* err) {
  const bool rename = r.kind == Record::Kind::kRename;
  for (auto it = r.holders.rbegin(); it != r.holders.rend(); ++it) {
    const std::string& node = *it;
    NodeFs* fs = Fs(node);
    if (fs == nullptr) {
      *err = Error{EHOSTDOWN, "no route to node " + node};
      return Outcome::kRetry;
    }
    auto fail = [&](const Error& e) {
      *err = e;
      return IsTransient(e.code) ? Outcome::kRetry : Outcome::kFailed;
    };
    auto changed = Probe(fs, r);
    if (!changed) return fail(changed.error());
    if (*changed) {
      auto saved = r.saved.find(node);
      if (rename) {
        auto st_to = fs->Stat(RootCred(), r.to);
        if (st_to) {
          if (auto s = fs->Rename(RootCred(), r.to, r.from, RENAME_NOREPLACE); !s) {
            return fail(s.error());
          }
          if (saved != r.saved.end()) {
            if (auto s = Recreate(fs, r.to, saved->second); !s) return fail(s.error());
          }
        } else if (st_to.error().code != ENOENT) {
          return fail(st_to.error());
        }
      } else {
        Record::Saved s = saved != r.saved.end() ? saved->second : Record::Saved{};
        if (auto st = Recreate(fs, r.from, s); !st) return fail(st.error());
      }
      Step("undone:" + node);
    }
    r.done.erase(node);
  }
  return Outcome::kOk;
}

void DirOps::Tell(const Record& r, const std::string& path, VdChange::Kind kind,
                  const std::string& node, uint8_t type, uint64_t id) {
  if (!notify_) return;
  const std::string dir(ParentPath(path));
  if (auto s = notify_(dir, VdChange{kind, std::string(BaseName(path)), type, node, id}); !s) {
    Log()->warn("{}: VD update of {} failed: {} (the manager rebuilds it)", r.Describe(), dir,
                s.error().ToString());
  }
}

void DirOps::Notify(const Record& r, bool forward) {
  if (!notify_) return;
  auto send = [&](const std::string& path, VdChange::Kind kind, const std::string& node) {
    const bool renamed_add = kind == VdChange::Kind::kAdd && r.kind == Record::Kind::kRename;
    Tell(r, path, kind, node, DT_DIR, renamed_add ? r.dir_id : 0);
  };
  const auto add = VdChange::Kind::kAdd;
  const auto remove = VdChange::Kind::kRemove;
  for (const auto& node : r.holders) {
    if (r.kind == Record::Kind::kRename) {
      send(r.from, forward ? remove : add, node);
      send(r.to, forward ? add : remove, node);
    } else {
      send(r.from, forward ? remove : add, node);
    }
  }
}

void DirOps::KeepPending(uint64_t id, const std::vector<std::string>& paths) {
  std::lock_guard lock(mu_);
  if (pending_.insert(id).second) {
    pending_paths_[id] = paths;
    for (const auto& p : paths) busy_.insert(p);
  }
  if (!retry_thread_.joinable() && !stopping_) {
    retry_thread_ = std::thread([this] { RetryLoop(); });
    NameThread(retry_thread_, "dirops-retry");
  }
  cv_.notify_all();
}

void DirOps::UndoAfterFailure(Record& r) {
  r.state = Record::State::kUndoing;
  if (auto s = Save(r); !s) {
    KeepPending(r.id, r.Paths());
    return;
  }
  Step("undoing");
  Error err;
  if (Backward(r, &err) != Outcome::kOk) {
    Log()->warn("{}: undo pending ({}); retrying in the background", r.Describe(),
                err.ToString());
    KeepPending(r.id, r.Paths());
    return;
  }
  Notify(r, /*forward=*/false);
  if (!Erase(r)) KeepPending(r.id, r.Paths());
}

namespace {
std::vector<std::string> SortedUnique(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}
}  // namespace

Status DirOps::RenameDir(const Cred& cred, const std::string& from, const std::string& to,
                         unsigned flags, std::vector<std::string> holders) {
  if (auto s = ValidateGlobalPath(from); !s) return s;
  if (auto s = ValidateGlobalPath(to); !s) return s;
  if (flags & ~static_cast<unsigned>(RENAME_NOREPLACE)) {
    return Err(EINVAL, "rename of a multi-node directory: unsupported flags");
  }
  if (from == "/" || to == "/") return Err(EBUSY, "rename of the root");
  if (from == to) return Ok();
  if (PathWithin(to, from)) return Err(EINVAL, to + " is beneath " + from);
  if (PathWithin(from, to)) return Err(ENOTEMPTY, to + " is an ancestor of " + from);
  holders = SortedUnique(std::move(holders));
  if (auto s = CheckCluster(holders); !s) return s;
  auto view = view_();
  const std::vector<std::string> paths{from, to};
  if (auto s = Acquire(paths); !s) return s;
  BusyGuard guard([&] { Release(paths); });
  const std::vector<NameLock> locks = NameLocksOf(paths);
  if (auto s = TakeNameLocks(locks); !s) return s;
  BusyGuard unlock([&] { ReleaseNameLocks(locks); });

  Record r;
  r.id = NextId();
  r.kind = Record::Kind::kRename;
  r.state = Record::State::kValidating;
  r.from = from;
  r.to = to;
  r.flags = flags;
  r.cred = cred;
  r.holders = holders;
  if (auto s = Save(r); !s) return s;
  Step("journaled");

  if (auto s = ValidateRename(cred, r, *view); !s) {
    if (s.error().code == ENOENT) {
      Log()->debug("{}: {}", r.Describe(), s.error().ToString());
    } else {
      Log()->info("{} refused: {}", r.Describe(), s.error().ToString());
    }
    if (!Erase(r)) KeepPending(r.id, r.Paths());
    return s;
  }
  r.state = Record::State::kActing;
  const std::vector<PendingOp> ops = PendingOpsFor(r, *view);
  if (auto s = SaveActing(r, ops); !s) {
    if (!Erase(r)) KeepPending(r.id, r.Paths());
    return s;
  }
  Step("validated");

  return ActAndFinish(r, cred, ops);
}

Status DirOps::ActAndFinish(Record& r, const Cred& cred, const std::vector<PendingOp>& ops) {
  Error err;
  if (Forward(r, cred, &err) != Outcome::kOk) {
    Log()->info("{} failed: {}; undoing", r.Describe(), err.ToString());
    DropPending(r);  // before the undo: no member may apply what is undone
    UndoAfterFailure(r);
    return Err(err);
  }
  Notify(r, /*forward=*/true);
  Step("notified");
  if (dead_sink_ != nullptr && !ops.empty()) {
    dead_sink_->store().Added(ops);
    dead_sink_->Replicate(ops);
    Step("replicated");
  }
  if (!Erase(r)) KeepPending(r.id, r.Paths());
  Step("finished");
  return Ok();
}

Status DirOps::RemoveDir(const Cred& cred, const std::string& path,
                         std::vector<std::string> holders) {
  if (auto s = ValidateGlobalPath(path); !s) return s;
  if (path == "/") return Err(EBUSY, "rmdir of the root");
  holders = SortedUnique(std::move(holders));
  if (auto s = CheckCluster(holders); !s) return s;
  auto view = view_();
  const std::vector<std::string> paths{path};
  if (auto s = Acquire(paths); !s) return s;
  BusyGuard guard([&] { Release(paths); });
  const std::vector<NameLock> locks = NameLocksOf(paths);
  if (auto s = TakeNameLocks(locks); !s) return s;
  BusyGuard unlock([&] { ReleaseNameLocks(locks); });

  Record r;
  r.id = NextId();
  r.kind = Record::Kind::kRmdir;
  r.state = Record::State::kActing;
  r.from = path;
  r.cred = cred;

  // The union must be empty: check every live node (the VD's holders are a
  // hint) and remember each directory's mode and owner for an undo.
  std::set<std::string> nodes(holders.begin(), holders.end());
  for (const auto& [n, addr] : view->live) nodes.insert(n);
  const auto start = SteadyNow();
  for (const auto& n : nodes) {
    if (SteadyNow() - start > options_.deadline) {
      return Err(ETIMEDOUT, "rmdir " + path + ": validation deadline");
    }
    NodeFs* fs = Fs(n);
    if (fs == nullptr) return Err(EHOSTDOWN, "no route to node " + n);
    const bool hinted = std::binary_search(holders.begin(), holders.end(), n);
    auto st = fs->Stat(cred, path);
    if (!st) {
      if (st.error().code == ENOENT || (!hinted && st.error().code == ENOTDIR)) continue;
      return Err(st.error());
    }
    if (!S_ISDIR(st->st_mode)) {
      if (hinted) return Err(ENOTDIR, path + " is not a directory on " + n);
      continue;
    }
    auto list = fs->ListDir(cred, path);
    if (!list) return Err(list.error());
    if (!list->empty()) return Err(ENOTEMPTY, path + " is not empty on " + n);
    r.holders.push_back(n);
    r.saved[n] = {static_cast<uint32_t>(st->st_mode & 07777), st->st_uid, st->st_gid};
  }
  if (r.holders.empty()) return Err(ENOENT, path + ": no such directory on any node");

  const std::vector<PendingOp> ops = PendingOpsFor(r, *view);
  if (auto s = SaveActing(r, ops); !s) return s;
  Step("journaled");
  return ActAndFinish(r, cred, ops);
}

DirOps::Outcome DirOps::Resolve(Record& r) {
  if (r.kind == Record::Kind::kReplace) return ResolveReplace(r);
  auto view = view_();
  auto all_alive = [&]() -> bool {
    for (const auto& h : r.holders) {
      if (!view || !view->IsAlive(h) || Fs(h) == nullptr) {
        Log()->warn("{} pending: waiting for node {}", r.Describe(), h);
        return false;
      }
    }
    return true;
  };
  Error err;
  switch (r.state) {
    case Record::State::kValidating:
      Log()->info("{}: crashed before validation ended: nothing changed, dropped", r.Describe());
      return Erase(r) ? Outcome::kOk : Outcome::kRetry;
    case Record::State::kActing: {
      if (!all_alive()) return Outcome::kRetry;
      bool any = false;
      for (const auto& h : r.holders) {
        NodeFs* fs = Fs(h);  // gone since all_alive if declared dead meanwhile
        if (fs == nullptr) return Outcome::kRetry;
        auto changed = Probe(fs, r);
        if (!changed) {
          Log()->warn("{} pending: probing {}: {}", r.Describe(), h, changed.error().ToString());
          return Outcome::kRetry;
        }
        any = any || *changed;
      }
      if (!any) {
        Log()->info("{}: crashed before any node changed: dropped", r.Describe());
        DropPending(r);
        return Erase(r) ? Outcome::kOk : Outcome::kRetry;
      }
      Outcome o = Forward(r, r.cred, &err);
      if (o == Outcome::kRetry) {
        Log()->warn("{} pending (rolling forward): {}", r.Describe(), err.ToString());
        return o;
      }
      if (o == Outcome::kOk) {
        Log()->info("{}: rolled forward", r.Describe());
        Notify(r, /*forward=*/true);
        return Erase(r) ? Outcome::kOk : Outcome::kRetry;
      }
      Log()->warn("{}: rolling forward failed ({}); rolling back", r.Describe(),
                  err.ToString());
      r.state = Record::State::kUndoing;
      if (!Save(r)) return Outcome::kRetry;
      [[fallthrough]];
    }
    case Record::State::kUndoing: {
      DropPending(r);
      if (!all_alive()) return Outcome::kRetry;
      if (Backward(r, &err) != Outcome::kOk) {
        Log()->warn("{} pending (rolling back): {}", r.Describe(), err.ToString());
        return Outcome::kRetry;
      }
      Log()->info("{}: rolled back", r.Describe());
      Notify(r, /*forward=*/false);
      return Erase(r) ? Outcome::kOk : Outcome::kRetry;
    }
  }
  return Outcome::kRetry;
}

size_t DirOps::RetryPendingNow() {
  std::lock_guard resolving(resolve_mu_);
  std::set<uint64_t> ids;
  {
    std::lock_guard lock(mu_);
    ids = pending_;
  }
  for (uint64_t id : ids) {
    bool resolved = false;
    auto bytes = kv_->Get(kvkeys::DirOpsJournalKey(id));
    if (!bytes) {
      resolved = bytes.error().code == ENOENT;
      if (!resolved) Log()->warn("journal read of op {}: {}", id, bytes.error().ToString());
    } else if (auto rec = DecodeRecord(*bytes); !rec) {
      // Never act on a record we cannot read; keep it for a human.
      Log()->error("journal record {} unreadable ({}): left in place, not acted upon", id,
                   rec.error().ToString());
      resolved = true;  // not retried; its paths are released
    } else {
      resolved = Resolve(*rec) == Outcome::kOk;
    }
    if (resolved) {
      std::lock_guard lock(mu_);
      pending_.erase(id);
      EraseOnce(busy_, pending_paths_[id]);
      pending_paths_.erase(id);
    }
  }
  std::lock_guard lock(mu_);
  return pending_.size();
}

size_t DirOps::PendingCount() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

Status DirOps::Recover() {
  auto records = kv_->Scan(kvkeys::kDirOpsJournalPrefix);
  if (!records) return Err(records.error());
  for (const auto& [key, value] : *records) {
    auto id = kvkeys::ParseDirOpsJournalKey(key);
    if (!id) {
      Log()->error("journal key {:?} malformed: ignored", key);
      continue;
    }
    std::vector<std::string> paths;
    if (auto rec = DecodeRecord(value); rec) paths = rec->Paths();
    {
      std::lock_guard lock(mu_);
      last_id_ = std::max(last_id_, *id);
      if (pending_.insert(*id).second) {
        pending_paths_[*id] = paths;
        for (const auto& p : paths) busy_.insert(p);
      }
    }
  }
  if (records->empty()) return Ok();
  recovered_.fetch_add(records->size(), std::memory_order_relaxed);
  Log()->info("recovering {} journaled directory operation(s)", records->size());
  const size_t left = RetryPendingNow();
  if (left > 0) {
    Log()->warn("{} directory operation(s) pending; retrying in the background", left);
    std::lock_guard lock(mu_);
    if (!retry_thread_.joinable() && !stopping_) {
      retry_thread_ = std::thread([this] { RetryLoop(); });
    NameThread(retry_thread_, "dirops-retry");
    }
  }
  return Ok();
}

void DirOps::RetryLoop() {
  auto delay = options_.retry_initial;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (pending_.empty()) {
      cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      delay = options_.retry_initial;
      continue;
    }
    cv_.wait_for(lock, delay, [&] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    const size_t left = RetryPendingNow();
    lock.lock();
    delay = left > 0 ? std::min(delay * 2, options_.retry_max) : options_.retry_initial;
  }
}

}  // namespace fedfs::ns
