// Migration (migration.h): the target's side of a move (kMigPrepare,
// kMigPlace, kMigCommit, kMigAbort) and the source's answers to kMigStart
// and kMigOutcome.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/logging.h"
#include "common/path.h"
#include "common/rpc_methods.h"
#include "dirops/kv_keys.h"
#include "migration/copy_ahead.h"
#include "migration/migration.h"
#include "migration/migration_internal.h"

namespace fedfs::ns {

namespace {

std::shared_ptr<spdlog::logger> Log() { return Logger("migration"); }

struct timespec FromNs(int64_t ns) {
  return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

Status SysFail(const char* what) { return Err(errno, what); }

}  // namespace

void Migration::RegisterHandlers() {
  auto on = [this](RpcMethod m, void (Migration::*fn)(m2m::IncomingCall, m2m::Responder)) {
    transport_->Handle(MethodId(m), [alive = alive_, fn](m2m::IncomingCall call,
                                                          m2m::Responder r) {
      std::shared_lock lock(alive->mu);
      if (alive->m == nullptr) return r.Fail(Error{ESHUTDOWN, "migration stopped"});
      (alive->m->*fn)(std::move(call), std::move(r));
    });
  };
  on(RpcMethod::kMigStart, &Migration::OnStart);
  on(RpcMethod::kMigPrepare, &Migration::OnPrepare);
  on(RpcMethod::kMigPlace, &Migration::OnPlace);
  on(RpcMethod::kMigCommit, &Migration::OnCommit);
  on(RpcMethod::kMigAbort, &Migration::OnAbort);
  on(RpcMethod::kMigOutcome, &Migration::OnOutcome);
  on(RpcMethod::kMigLargest, &Migration::OnLargest);
  on(RpcMethod::kMigDelta, &Migration::OnDelta);
  on(RpcMethod::kMigCancel, &Migration::OnCancel);
  on(RpcMethod::kMigProgress, &Migration::OnProgress);
}

namespace {

// Decodes a request or answers EPROTO (logged) and returns nullopt.
std::optional<MoveMsg> Decoded(const m2m::IncomingCall& call, m2m::Responder& r,
                               const char* what, bool need_path) {
  auto m = DecodeMsg(call.payload);
  if (m && need_path && m->path.empty()) m = Err(EPROTO, "no path");
  if (m && m->from.empty()) m = Err(EPROTO, "no sender");
  if (!m) {
    Log()->warn("refused {} from {}: {}", what, call.peer.remote_addr, m.error().ToString());
    r.Fail(Error{EPROTO, m.error().context});
    return std::nullopt;
  }
  return std::move(*m);
}

}  // namespace

void Migration::OnStart(m2m::IncomingCall call, m2m::Responder r) {
  auto m = Decoded(call, r, "kMigStart", true);
  if (!m) return;
  auto shared = std::make_shared<m2m::Responder>(std::move(r));
  Spawn([this, m = std::move(*m), shared] {
    auto o = m.dry_run ? DryRun(m.path, m.to)
                       : Move(m.path, m.to, static_cast<MoveTrigger>(m.trigger), m.max_rate);
    if (!o) return shared->Fail(o.error());
    MoveMsg a;
    a.from = node_id_;
    a.bytes = o->bytes;
    shared->Reply(EncodeMsg(a));
  });
}

void Migration::OnOutcome(m2m::IncomingCall call, m2m::Responder r) {
  auto m = Decoded(call, r, "kMigOutcome", false);
  if (!m) return;
  MoveMsg a;
  a.from = node_id_;
  {
    std::lock_guard lock(mu_);
    auto it = records_.find(kvkeys::MigrationKey(true, "", m->id));
    a.state = it != records_.end() && it->second->state == Rec::kCommitted ? 1 : 0;
  }
  r.Reply(EncodeMsg(a));
}

void Migration::OnPrepare(m2m::IncomingCall call, m2m::Responder r) {
  auto m = Decoded(call, r, "kMigPrepare", true);
  if (!m) return;
  auto shared = std::make_shared<m2m::Responder>(std::move(r));
  Spawn([this, p = Prep{std::move(*m)}, shared] {
    Rec probe;
    probe.id = p.m.id;
    probe.state = Rec::kReceiving;
    probe.peer = p.m.from;
    auto bytes = Receive(probe.Key(), p);
    if (!bytes) return shared->Fail(bytes.error());
    MoveMsg a;
    a.from = node_id_;
    a.bytes = *bytes;
    shared->Reply(EncodeMsg(a));
  });
}

Result<uint64_t> Migration::Receive(const std::string& key, const Prep& p) {
  const MoveMsg& m = p.m;
  Rec r;
  r.id = m.id;
  r.state = Rec::kReceiving;
  r.path = m.path;
  r.peer = m.from;
  r.type = DT_REG;
  {
    std::lock_guard lock(mu_);
    if (records_.count(key) != 0 || !busy_.insert(m.path).second) {
      return Err(EBUSY, "a move of " + m.path + " is in progress here");
    }
  }
  if (auto s = Save(r); !s) {
    std::lock_guard lock(mu_);
    busy_.erase(m.path);
    return Err(s.error());
  }
  auto fail = [&](Error e) -> Result<uint64_t> {
    {
      std::lock_guard lock(mu_);
      staged_.erase(key);
    }
    (void)Erase(r);
    Log()->info("move {} of {} from {}: not received: {}", m.id, m.path, m.from, e.ToString());
    return Err(std::move(e));
  };
  auto at = [](const char* what, Error e) {
    e.context = std::string(what) + ": " + e.context;
    return e;
  };
  if (auto s = local_->MkdirParents(m.path, m.parents); !s) return fail(at("parents", s.error()));
  auto fd = move_->CreateUnnamed(std::string(ParentPath(m.path)));
  if (!fd) return fail(at("staging file", fd.error()));
  auto staged = std::make_shared<Staged>(*fd);
  {
    std::lock_guard lock(mu_);
    staged_[key] = staged;
  }
  NodeFs* src = fs_for_ ? fs_for_(m.from) : nullptr;
  if (src == nullptr) return fail(Error{EHOSTDOWN, "no way to reach " + m.from});
  auto h = src->Open(Cred{}, m.path, O_RDONLY);
  if (!h) return fail(at("open at the source", h.error()));
  uint64_t off = 0;
  Error why{0, {}};
  {
    // The next chunks are read while this one is hashed and written
    // (copy_ahead.h).
    const uint64_t rate = m.max_rate;
    CopyAhead ahead(src, h->handle, options_.chunk, rate > 0 ? 1 : options_.copy_streams);
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      if (staged->cancelled.load()) {
        why = Error{ECANCELED, "the move was cancelled"};
        break;
      }
      auto got = ahead.Next();
      if (!got) {
        why = at("read from the source", got.error());
        break;
      }
      const std::span<const std::byte> buf = *got;
      const size_t n = buf.size();
      if (n == 0) break;
      // The hash of each block, for a later delta (delta.cc): valid while
      // every read but the last returned a whole chunk (a multiple of
      // blocks).
      if (staged->aligned) {
        const size_t block = static_cast<size_t>(options_.delta_block);
        for (size_t b = 0; b < n; b += block) {
          staged->hashes.push_back(ChunkHash(buf.data() + b, std::min(block, n - b)));
        }
        staged->aligned = n == options_.chunk && options_.chunk % block == 0;
      }
      // Zeros are left unwritten: holes stay holes (and runs of zeros
      // become holes, which read the same).
      if (!AllZero(buf.data(), n)) {
        size_t done = 0;
        while (done < n) {
          ssize_t w = pwrite(staged->fd, buf.data() + done, n - done, static_cast<off_t>(off + done));
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) {
            why = Error{w < 0 ? errno : EIO, "write of the copy"};
            break;
          }
          done += static_cast<size_t>(w);
        }
        if (why.code != 0) break;
      }
      off += n;
      staged->copied.store(off, std::memory_order_relaxed);
      if (n < options_.chunk) break;  // the end of the file (CopyAhead reads no further)
      if (rate > 0) {
        // --max-rate: the next read waits until the bytes so far took
        // their share of time.
        const auto due = t0 + std::chrono::microseconds(
                                  static_cast<int64_t>(static_cast<double>(off) * 1e6 /
                                                       static_cast<double>(rate)));
        // In slices, so that a cancel is seen within 100 ms.
        while (!staged->cancelled.load() && std::chrono::steady_clock::now() < due) {
          std::this_thread::sleep_until(
              std::min(due, std::chrono::steady_clock::now() + std::chrono::milliseconds(100)));
        }
      }
    }
  }
  (void)src->Release(h->handle);
  if (why.code != 0) return fail(std::move(why));
  if (ftruncate(staged->fd, static_cast<off_t>(off)) != 0) return fail(SysFail("truncate").error());
  if (auto s = ApplyMeta(staged->fd, src, m); !s) return fail(s.error());
  Step("mig:t-copied");
  return off;
}

Status Migration::ApplyMeta(int fd, NodeFs* src, const MoveMsg& m) {
  std::string names;
  size_t needed = 0;
  auto l = src->ListXattr(Cred{}, m.path, 1 << 16, &needed);
  if (l) {
    names = std::move(*l);
  } else if (l.error().code != ENOTSUP) {
    return Err(l.error().code, "xattr names at the source: " + l.error().context);
  }
  // Owner first (set-ID bits and capabilities survive), then xattrs, mode,
  // times last.
  if (fchown(fd, m.uid, m.gid) != 0) return SysFail("chown");
  for (size_t i = 0; i < names.size();) {
    const std::string name(names.c_str() + i);
    i += name.size() + 1;
    if (name.empty()) continue;
    auto v = src->GetXattr(Cred{}, m.path, name, 1 << 16, &needed);
    if (!v) {
      if (v.error().code == ENODATA) continue;
      return Err(v.error().code, "xattr at the source: " + v.error().context);
    }
    if (fsetxattr(fd, name.c_str(), v->data(), v->size(), 0) != 0) {
      return Err(errno, "xattr " + name + " at the target");
    }
  }
  if (fchmod(fd, m.mode & 07777) != 0) return SysFail("chmod");
  const struct timespec ts[2] = {FromNs(m.atime_ns), FromNs(m.mtime_ns)};
  if (futimens(fd, ts) != 0) return SysFail("utimens");
  if (fsync(fd) != 0) return SysFail("fsync");
  return Ok();
}

std::pair<std::shared_ptr<Migration::Rec>, std::shared_ptr<Migration::Staged>>
Migration::Receiving(const MoveMsg& m) {
  const std::string key = kvkeys::MigrationKey(false, m.from, m.id);
  std::lock_guard lock(mu_);
  auto r = records_.find(key);
  auto s = staged_.find(key);
  if (r == records_.end() || s == staged_.end() || r->second->state != Rec::kReceiving ||
      r->second->path != m.path) {
    return {};
  }
  return {r->second, s->second};
}

void Migration::OnPlace(m2m::IncomingCall call, m2m::Responder r) {
  auto m = Decoded(call, r, "kMigPlace", true);
  if (!m) return;
  auto shared = std::make_shared<m2m::Responder>(std::move(r));
  Spawn([this, m = std::move(*m), shared] {
    const std::string key = kvkeys::MigrationKey(false, m.from, m.id);
    auto [rec, staged] = Receiving(m);
    if (rec == nullptr) return shared->Fail(Error{ENOENT, "no copy of that move here"});
    struct stat st {};
    if (fstat(staged->fd, &st) != 0) return shared->Fail(Error{errno, "fstat of the copy"});
    Rec r = *rec;
    r.state = Rec::kPlaced;
    r.dev = st.st_dev;
    r.ino = st.st_ino;
    if (auto s = Save(r); !s) return shared->Fail(s.error());
    auto linked = move_->LinkUnnamed(staged->fd, r.path);
    {
      std::lock_guard lock(mu_);
      staged_.erase(key);
    }
    if (!linked) {
      (void)Erase(r);
      return shared->Fail(linked.error());
    }
    // Writes wait until L has had every cache drop the file (kMigCommit);
    // reads pass (migration.h, steps 7 and 8).
    if (auto f = move_->Freeze(static_cast<dev_t>(r.dev), static_cast<ino_t>(r.ino)); !f) {
      Log()->warn("move {} of {}: freezing the copy here: {}", r.id, r.path, f.error().ToString());
    }
    Step("mig:t-placed");
    MoveMsg a;
    a.from = node_id_;
    shared->Reply(EncodeMsg(a));
  });
}

void Migration::OnCommit(m2m::IncomingCall call, m2m::Responder r) {
  auto m = Decoded(call, r, "kMigCommit", false);
  if (!m) return;
  auto shared = std::make_shared<m2m::Responder>(std::move(r));
  Spawn([this, m = std::move(*m), shared] {
    const std::string key = kvkeys::MigrationKey(false, m.from, m.id);
    std::shared_ptr<Rec> rec;
    {
      std::lock_guard lock(mu_);
      if (auto it = records_.find(key); it != records_.end()) rec = it->second;
    }
    if (rec != nullptr) {
      if (rec->state != Rec::kPlaced) return shared->Fail(Error{EPROTO, "commit before place"});
      if (auto s = Erase(*rec); !s) return shared->Fail(s.error());
      move_->Thaw(static_cast<dev_t>(rec->dev), static_cast<ino_t>(rec->ino));
      {
        std::lock_guard lock(mu_);
        stats_.received++;
      }
      if (options_.arrived) options_.arrived(rec->path, m.from);
    }
    Step("mig:t-committed");
    MoveMsg a;
    a.from = node_id_;
    shared->Reply(EncodeMsg(a));
  });
}

void Migration::OnAbort(m2m::IncomingCall call, m2m::Responder r) {
  auto m = Decoded(call, r, "kMigAbort", false);
  if (!m) return;
  auto shared = std::make_shared<m2m::Responder>(std::move(r));
  Spawn([this, m = std::move(*m), shared] {
    const std::string key = kvkeys::MigrationKey(false, m.from, m.id);
    std::shared_ptr<Rec> rec;
    {
      std::lock_guard lock(mu_);
      if (auto it = records_.find(key); it != records_.end()) rec = it->second;
      staged_.erase(key);
    }
    if (rec != nullptr) {
      if (rec->state == Rec::kPlaced) {
        move_->Thaw(static_cast<dev_t>(rec->dev), static_cast<ino_t>(rec->ino));
        auto st = local_->Stat(Cred{}, rec->path);
        if (st && st->st_dev == rec->dev && st->st_ino == rec->ino) {
          if (auto s = local_->Unlink(Cred{}, rec->path); !s && s.error().code != ENOENT) {
            return shared->Fail(s.error());
          }
        }
      }
      if (auto s = Erase(*rec); !s) return shared->Fail(s.error());
    }
    MoveMsg a;
    a.from = node_id_;
    shared->Reply(EncodeMsg(a));
  });
}

}  // namespace fedfs::ns
