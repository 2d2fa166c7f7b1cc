// Migration (migration.h): the source's coordinator, recovery and retries.
// The target's side is in target.cc.
#include "migration/migration.h"

#include <dirent.h>

#include <algorithm>
#include <future>

#include "common/logging.h"
#include "common/path.h"
#include "common/rpc_methods.h"
#include "dirops/kv_keys.h"
#include "migration/migration_internal.h"

namespace fedfs::ns {

namespace {

std::shared_ptr<spdlog::logger> Log() { return Logger("migration"); }

bool Transient(int e) {
  return e == EHOSTDOWN || e == ETIMEDOUT || e == ECONNREFUSED || e == ECONNRESET ||
         e == ENOTCONN || e == EAGAIN || e == ESHUTDOWN || e == EIO || e == EHOSTUNREACH;
}

bool SameVersion(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec &&
         a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
}

}  // namespace

Migration::Migration(std::string node_id, Kv* kv, m2m::Transport* transport, NodeFs* local,
                     MoveSupport* move, FsForFn fs_for, ViewFn view, UpdateFn update,
                     MovedFn moved, Executor* pool, MigrationOptions options, DirOpsHooks hooks)
    : node_id_(std::move(node_id)),
      kv_(kv),
      transport_(transport),
      local_(local),
      move_(move),
      fs_for_(std::move(fs_for)),
      view_(std::move(view)),
      update_(std::move(update)),
      moved_(std::move(moved)),
      pool_(pool),
      options_(options),
      hooks_(std::move(hooks)),
      alive_(std::make_shared<Alive>()) {
  alive_->m = this;
}

Migration::~Migration() { Stop(); }

void Migration::Stop() {
  {
    std::unique_lock lock(alive_->mu);
    alive_->m = nullptr;
  }
  std::unique_lock lock(mu_);
  stopping_ = true;
  cv_.notify_all();
  cv_.wait(lock, [this] { return workers_ == 0; });
  lock.unlock();
  if (retry_thread_.joinable()) retry_thread_.join();
}

void Migration::Spawn(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  if (stopping_) return;  // fn dropped: its responder fails the call
  ++workers_;
  std::thread([this, fn = std::move(fn)] {
    fn();
    std::lock_guard l(mu_);
    --workers_;
    cv_.notify_all();
  }).detach();
}

void Migration::Step(std::string_view step) const {
  if (hooks_.at_step) hooks_.at_step(step);
}

Migration::Stats Migration::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

Status Migration::Save(const Rec& r) {
  m2m::Bytes b = EncodeMoveRecord(r);
  if (auto s = kv_->Put(r.Key(), std::string_view(reinterpret_cast<const char*>(b.data()),
                                                  b.size()),
                        true);
      !s) {
    return s;
  }
  std::lock_guard lock(mu_);
  records_[r.Key()] = std::make_shared<Rec>(r);
  return Ok();
}

Status Migration::Erase(const Rec& r) {
  if (auto s = kv_->Delete(r.Key(), true); !s) return s;
  std::lock_guard lock(mu_);
  records_.erase(r.Key());
  pending_.erase(r.Key());
  busy_.erase(r.path);
  return Ok();
}

Result<m2m::Bytes> Migration::Call(const std::string& node, uint16_t method, m2m::Bytes payload,
                                   std::chrono::milliseconds timeout) {
  auto view = view_();
  auto it = view->live.find(node);
  if (it == view->live.end()) return Err(EHOSTDOWN, "node " + node + " is not alive");
  auto ep = transport_->GetEndpoint(it->second);
  std::promise<Result<m2m::Bytes>> p;
  auto f = p.get_future();
  ep->Call(method, std::move(payload), timeout,
           [&p](Result<m2m::Bytes> r) { p.set_value(std::move(r)); });
  return f.get();
}

void Migration::Annotate(const std::string& dir, std::vector<DirEntry>* entries) const {
  std::lock_guard lock(mu_);
  if (records_.empty()) return;
  for (const auto& [key, r] : records_) {
    uint8_t role = DirEntry::kNotMoving;
    if (r->state == Rec::kCommitted) role = DirEntry::kOutgoing;
    if (r->state == Rec::kPlaced) role = DirEntry::kIncoming;
    if (role == DirEntry::kNotMoving || ParentPath(r->path) != dir) continue;
    const std::string_view name = BaseName(r->path);
    for (DirEntry& e : *entries) {
      if (e.name != name) continue;
      e.move_id = r->id;
      e.move_role = role;
    }
  }
}

Result<MoveOutcome> Migration::MoveAt(const std::string& holder, const std::string& path,
                                      const std::string& to, MoveTrigger why, bool dry_run,
                                      uint64_t max_rate) {
  if (holder == node_id_) return dry_run ? DryRun(path, to) : Move(path, to, why, max_rate);
  MoveMsg m;
  m.path = path;
  m.from = node_id_;
  m.to = to;
  m.trigger = static_cast<uint8_t>(why);
  m.dry_run = dry_run;
  m.max_rate = max_rate;
  auto r = Call(holder, MethodId(RpcMethod::kMigStart), EncodeMsg(m), options_.copy_timeout);
  if (!r) return Err(r.error());
  auto a = DecodeMsg(*r);
  if (!a) return Err(a.error());
  return MoveOutcome{holder, to, a->bytes};
}

Result<MoveOutcome> Migration::Move(const std::string& path, const std::string& to,
                                    MoveTrigger why, uint64_t max_rate) {
  const auto t = static_cast<size_t>(why);
  {
    std::lock_guard lock(mu_);
    stats_.by_trigger[t].asked++;
  }
  auto o = Attempt(path, to, max_rate);
  std::lock_guard lock(mu_);
  (o ? stats_.by_trigger[t].done : stats_.by_trigger[t].failed)++;
  if (auto it = moving_.find(path); it != moving_.end()) {
    cancelled_.erase(it->second.id);
    moving_.erase(it);
  }
  return o;
}

Result<struct stat> Migration::Check(const std::string& path, const std::string& to) {
  if (auto s = ValidateGlobalPath(path); !s || path == "/") return Err(EINVAL, "bad path");
  if (to == node_id_) return Err(EINVAL, "the file is on " + to + " already");
  if (!view_()->IsAlive(to)) return Err(EHOSTDOWN, "node " + to + " is not alive");
  auto st = local_->Stat(Cred{}, path);
  if (!st) return Err(st.error());
  if (S_ISDIR(st->st_mode)) return Err(EISDIR, "directories are not moved (they are unions)");
  if (!S_ISREG(st->st_mode)) return Err(EINVAL, "only regular files are moved");
  if (st->st_nlink != 1) {
    return Err(EMLINK, "the file has " + std::to_string(st->st_nlink) +
                           " hard links: moves of hard-linked files are not built");
  }
  return st;
}

Result<MoveOutcome> Migration::DryRun(const std::string& path, const std::string& to) {
  auto st = Check(path, to);
  if (!st) return Err(st.error());
  {
    std::lock_guard lock(mu_);
    if (busy_.contains(path)) return Err(EBUSY, "a move of " + path + " is in progress");
  }
  if (NodeFs* t = fs_for_ ? fs_for_(to) : nullptr) {
    if (auto there = t->Stat(Cred{}, path); there) {
      return Err(EEXIST, "node " + to + " has a file of that name (a name conflict)");
    }
  }
  return MoveOutcome{node_id_, to, static_cast<uint64_t>(st->st_size)};
}

Result<MoveOutcome> Migration::Attempt(const std::string& path, const std::string& to,
                                       uint64_t max_rate) {
  auto st0 = Check(path, to);
  if (!st0) return Err(st0.error());
  Rec r;
  {
    std::lock_guard lock(mu_);
    if (!busy_.insert(path).second) return Err(EBUSY, "a move of " + path + " is in progress");
    stats_.started++;
    const uint64_t now = static_cast<uint64_t>(
        std::chrono::system_clock::now().time_since_epoch() / std::chrono::nanoseconds(1));
    last_id_ = std::max(last_id_ + 1, now);
    r.id = last_id_;
    moving_[path] = Moving{r.id, to, static_cast<uint64_t>(st0->st_size)};  // until Move returns
  }
  r.state = Rec::kCopying;
  r.path = path;
  r.peer = to;
  r.dev = st0->st_dev;
  r.ino = st0->st_ino;
  r.type = DT_REG;
  const dev_t dev = st0->st_dev;
  const ino_t ino = st0->st_ino;
  bool frozen = false, locked = false;
  const std::string dir(ParentPath(path));
  const std::string name(BaseName(path));
  // Undoes what was done (the gate, the name's lock, T's copy, the record)
  // and answers `e`.
  auto fail = [&](Error e) -> Result<MoveOutcome> {
    if (frozen) move_->Thaw(dev, ino);
    if (locked) (void)update_(dir, {VdChange{VdChange::Kind::kRelease, name, 0, node_id_}});
    (void)Undo(r);
    {
      std::lock_guard lock(mu_);
      stats_.failed++;
    }
    Log()->info("move {} of {} to {}: {}", r.id, r.path, r.peer, e.ToString());
    return Err(std::move(e));
  };
  // Freezes the file: locks refuse the move (moving them is not built).
  auto freeze = [&]() -> Status {
    auto f = move_->Freeze(dev, ino);
    if (!f) return Err(f.error());
    frozen = true;
    if (f->lock_owners != 0) {
      return Err(EBUSY, "the file is locked (" + std::to_string(f->lock_owners) +
                            " owners): moves of locked files are not built");
    }
    return Ok();
  };
  if (auto s = Save(r); !s) {
    std::lock_guard lock(mu_);
    busy_.erase(path);
    return Err(s.error());
  }
  Step("mig:journaled");

  // 2. The copy, pulled by T.
  MoveMsg p;
  p.id = r.id;
  p.path = path;
  p.from = node_id_;
  p.max_rate = max_rate;
  p.size = static_cast<uint64_t>(st0->st_size);
  p.mode = st0->st_mode & 07777;
  p.uid = st0->st_uid;
  p.gid = st0->st_gid;
  p.atime_ns = Ns(st0->st_atim);
  p.mtime_ns = Ns(st0->st_mtim);
  for (std::string_view a = ParentPath(path); a != "/"; a = ParentPath(a)) {
    auto ds = local_->Stat(Cred{}, std::string(a));
    if (!ds) break;
    p.parents.insert(p.parents.begin(),
                     NodeFs::DirTemplate{ds->st_mode & 07777, ds->st_uid, ds->st_gid});
  }
  auto copied = Call(to, MethodId(RpcMethod::kMigPrepare), EncodeMsg(p), options_.copy_timeout);
  if (!copied) return fail(copied.error());
  auto answer = DecodeMsg(*copied);
  if (!answer) return fail(answer.error());
  uint64_t bytes = answer->bytes;
  {
    std::lock_guard lock(mu_);
    if (auto it = moving_.find(path); it != moving_.end()) it->second.copied = true;
  }
  Step("mig:copied");
  // Cancel: checked before each step up to the commit.
  auto cancelled = [&] { return Cancelled(r.id); };
  const Error kCancelled{ECANCELED, "the move was cancelled"};
  if (cancelled()) return fail(kCancelled);
  // Written during the copy: passes of deltas while writers go on, until
  // one copies little (the frozen delta below is then short).
  for (int pass = 0; pass < options_.delta_passes; ++pass) {
    if (cancelled()) return fail(kCancelled);
    auto now = local_->Stat(Cred{}, path);
    if (!now) return fail(now.error());
    if (SameVersion(*st0, *now)) break;
    auto again = SendDelta(r, *now);
    if (!again) return fail(again.error());
    bytes += *again;
    st0 = now;
    if (*again < options_.freeze_bytes) break;
  }

  // 3. Lock the name, freeze, check.
  if (cancelled()) return fail(kCancelled);
  Error why{0, {}};
  for (int i = 0; i < 50 && !locked; ++i) {
    Status s = update_(dir, {VdChange{VdChange::Kind::kLock, name, 0, node_id_}});
    if (s) {
      locked = true;
    } else if (s.error().code == EAGAIN) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } else {
      why = s.error();
      break;
    }
  }
  if (!locked) {
    if (why.code == 0) why = Error{EBUSY, "the name is locked by another operation"};
    return fail(std::move(why));
  }
  if (auto s = freeze(); !s) return fail(s.error());
  auto st1 = local_->Stat(Cred{}, path);
  if (!st1) return fail(st1.error());
  if (st1->st_dev != dev || st1->st_ino != ino) {
    return fail(Error{EAGAIN, "the name is another file now"});
  }
  if (!SameVersion(*st0, *st1)) {
    // Written during the copy: T copies again what differs, frozen.
    auto again = SendDelta(r, *st1);
    if (!again) return fail(again.error());
    bytes += *again;
    Step("mig:delta");
  }
  Step("mig:frozen");
  if (cancelled()) return fail(kCancelled);

  // 4. T links its copy (hidden until the commit).
  MoveMsg place;
  place.id = r.id;
  place.path = path;
  place.from = node_id_;
  if (auto s = Call(to, MethodId(RpcMethod::kMigPlace), EncodeMsg(place), options_.rpc_timeout);
      !s) {
    return fail(s.error());
  }
  Step("mig:placed");
  // A local program's write since the freeze (FedFS's wait at the gate):
  // T's copy would miss it.
  auto st2 = local_->Stat(Cred{}, path);
  if (!st2 || !SameVersion(*st1, *st2)) {
    return fail(Error{EAGAIN, "the file was changed at its node during the move (a local program)"});
  }

  // 5. The commit point.
  if (cancelled()) return fail(kCancelled);
  r.state = Rec::kCommitted;
  if (auto s = Save(r); !s) {
    r.state = Rec::kCopying;
    return fail(s.error());
  }
  Step("mig:committed");
  {
    std::lock_guard lock(mu_);
    stats_.bytes += bytes;
  }
  if (auto s = Finish(r); !s) {
    Log()->warn("move {} of {} to {}: committed; finishing is pending: {}", r.id, path, to,
                s.error().ToString());
    KeepPending(r);
  }
  return MoveOutcome{node_id_, to, bytes};
}

Status Migration::Undo(Rec& r) {
  MoveMsg m;
  m.id = r.id;
  m.path = r.path;
  m.from = node_id_;
  auto s = Call(r.peer, MethodId(RpcMethod::kMigAbort), EncodeMsg(m), options_.rpc_timeout);
  if (!s) {
    Log()->warn("move {} of {}: undo at {} is pending: {}", r.id, r.path, r.peer,
                s.error().ToString());
    KeepPending(r);
    return Err(s.error());
  }
  Step("mig:undone");
  {
    std::lock_guard lock(mu_);
    stats_.undone++;
  }
  return Erase(r);
}

Status Migration::Finish(Rec& r) {
  const dev_t dev = static_cast<dev_t>(r.dev);
  const ino_t ino = static_cast<ino_t>(r.ino);
  // 6. Held: changes wait here; reads pass (these bytes are T's copy's,
  // which takes no write before step 8).
  move_->Hold(dev, ino);
  Step("mig:held");
  // 7. The switch (ends the name's lock): lookups find T's copy from now on.
  const std::string dir(ParentPath(r.path));
  const std::string name(BaseName(r.path));
  if (auto s = update_(dir, {VdChange{VdChange::Kind::kAdd, name, r.type, r.peer},
                             VdChange{VdChange::Kind::kRemove, name, 0, node_id_}});
      !s) {
    // The manager rebuilds the VD from the listings (L's tombstone, T's
    // name) when it cannot apply a change; only an unreachable one is retried.
    if (Transient(s.error().code)) return s;
    Log()->warn("move {} of {}: switch at the manager: {}", r.id, r.path, s.error().ToString());
  }
  // Handles here answer ESTALE (each node's Vfs opens them again at T), and
  // whoever caches the file drops it: no read waits for anything meanwhile
  // (reads at T pass, writes there wait), so no drop waits for a read that
  // waits for the move.
  move_->MarkMoved(dev, ino);
  Step("mig:marked");
  if (moved_) {
    moved_(dev, ino, r.path, false);
    moved_(dev, ino, r.path, true);
  }
  Step("mig:switched");
  // 8. T owns the name and takes writes.
  MoveMsg m;
  m.id = r.id;
  m.path = r.path;
  m.from = node_id_;
  if (auto s = Call(r.peer, MethodId(RpcMethod::kMigCommit), EncodeMsg(m), options_.rpc_timeout); !s) {
    return Err(s.error());
  }
  Step("mig:target-told");
  // 9. L's copy goes.
  auto st = local_->Stat(Cred{}, r.path);
  if (st && st->st_dev == dev && st->st_ino == ino) {
    if (auto s = local_->Unlink(Cred{}, r.path); !s && s.error().code != ENOENT) return s;
  }
  if (auto s = Erase(r); !s) return s;
  move_->Thaw(dev, ino);
  {
    std::lock_guard lock(mu_);
    stats_.done++;
  }
  Step("mig:deleted");
  Log()->info("moved {} to {} (move {})", r.path, r.peer, r.id);
  return Ok();
}

void Migration::KeepPending(const Rec& r) {
  {
    std::lock_guard lock(mu_);
    pending_.insert(r.Key());
    busy_.insert(r.path);
  }
  cv_.notify_all();
}

Status Migration::ResolveOut(Rec& r) {
  if (r.state == Rec::kCopying) return Undo(r);
  move_->Hold(static_cast<dev_t>(r.dev), static_cast<ino_t>(r.ino));
  return Finish(r);
}

Status Migration::ResolveIn(Rec& r) {
  if (r.state == Rec::kReceiving) {
    {
      std::lock_guard lock(mu_);
      staged_.erase(r.Key());
    }
    return Erase(r);
  }
  MoveMsg m;
  m.id = r.id;
  m.path = r.path;
  m.from = node_id_;
  auto a = Call(r.peer, MethodId(RpcMethod::kMigOutcome), EncodeMsg(m), options_.rpc_timeout);
  if (!a) return Err(a.error());
  auto o = DecodeMsg(*a);
  if (!o) return Err(o.error());
  // Committed at L: the copy stays frozen (reads pass, writes wait) until
  // L's kMigCommit, which L sends once every cache dropped the old bytes
  // (L's record lasts until T answered it).
  if (o->state == 1) return Err(EAGAIN, "committed at " + r.peer + ": waiting for its commit");
  // Undone there: the copy goes.
  move_->Thaw(static_cast<dev_t>(r.dev), static_cast<ino_t>(r.ino));
  auto st = local_->Stat(Cred{}, r.path);
  if (st && st->st_dev == r.dev && st->st_ino == r.ino) {
    if (auto s = local_->Unlink(Cred{}, r.path); !s && s.error().code != ENOENT) return s;
  }
  return Erase(r);
}

Status Migration::Recover() {
  auto all = kv_->Scan(kvkeys::kMigrationPrefix);
  if (!all) return Err(all.error());
  std::vector<Rec> found;
  for (const auto& [key, value] : *all) {
    auto r = DecodeMoveRecord(value);
    if (!r || r->Key() != key) {
      Log()->error("migration journal: record {} unreadable; left alone", key);
      continue;
    }
    found.push_back(*r);
    std::lock_guard lock(mu_);
    records_[key] = std::make_shared<Rec>(*r);
    busy_.insert(r->path);
    last_id_ = std::max(last_id_, r->out() ? r->id : 0);
  }
  {
    std::lock_guard lock(mu_);
    for (const Rec& r : found) pending_.insert(r.Key());
  }
  // Hold committed files, and freeze copies placed here, before anything is
  // served.
  for (const Rec& r : found) {
    const auto dev = static_cast<dev_t>(r.dev);
    const auto ino = static_cast<ino_t>(r.ino);
    if (r.out() && r.state == Rec::kCommitted) move_->Hold(dev, ino);
    if (!r.out() && r.state == Rec::kPlaced) (void)move_->Freeze(dev, ino);
  }
  if (!found.empty()) Log()->warn("migration: {} moves to resolve", found.size());
  retry_thread_ = std::thread([this] { RetryLoop(); });
  return Ok();
}

size_t Migration::PendingCount() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

size_t Migration::RetryPendingNow() {
  std::lock_guard resolve(resolve_mu_);
  std::vector<std::shared_ptr<Rec>> todo;
  {
    std::lock_guard lock(mu_);
    for (const std::string& k : pending_) {
      if (auto it = records_.find(k); it != records_.end()) todo.push_back(it->second);
    }
  }
  for (const auto& rp : todo) {
    Rec r = *rp;
    Status s = r.out() ? ResolveOut(r) : ResolveIn(r);
    if (!s) {
      Log()->debug("move {} of {}: still pending: {}", r.id, r.path, s.error().ToString());
    }
  }
  return PendingCount();
}

void Migration::RetryLoop() {
  auto delay = options_.retry_initial;
  // The first round runs at once: a restarted node resolves its moves.
  bool first = true;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (!first) {
        cv_.wait_for(lock, delay, [this] { return stopping_; });
      }
      cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
    }
    first = false;
    if (!first && stopping_) return;
    const size_t left = RetryPendingNow();
    delay = left == 0 ? options_.retry_initial : std::min(delay * 2, options_.retry_max);
  }
}

}  // namespace fedfs::ns
