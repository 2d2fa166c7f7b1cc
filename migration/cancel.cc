// Cancelling a move in progress (Migration::Cancel; docs/migration.md, "By
// hand"): the asker's node forwards the cancel to the file's node L
// (kMigCancel naming the path), L marks the move, which fails with
// ECANCELED at its next step before the commit, and tells T (kMigCancel
// naming the move), whose copy stops within a chunk. A move's progress
// (Migration::ProgressOf) goes the same way: to L by path (kMigProgress),
// L asks T by the move's id how many bytes it copied.
#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <string>

#include "common/logging.h"
#include "common/rpc_methods.h"
#include "dirops/kv_keys.h"
#include "migration/migration.h"
#include "migration/migration_internal.h"

namespace fedfs::ns {
namespace {

std::shared_ptr<spdlog::logger> Log() { return Logger("migration"); }

}  // namespace

bool Migration::Cancelled(uint64_t id) const {
  std::lock_guard lock(mu_);
  return cancelled_.contains(id);
}

Status Migration::Cancel(const std::string& path) {
  Moving m;
  {
    std::lock_guard lock(mu_);
    auto it = moving_.find(path);
    if (it == moving_.end()) return Err(ENOENT, "no move of " + path + " in progress here");
    m = it->second;
    cancelled_.insert(m.id);
  }
  Log()->info("move {} of {} to {}: cancel asked", m.id, path, m.to);
  // T stops its copy now rather than at its end (best effort: L's next step
  // fails the move anyway, and undoes T's side).
  MoveMsg c;
  c.id = m.id;
  c.path = path;
  c.from = node_id_;
  if (auto s = Call(m.to, MethodId(RpcMethod::kMigCancel), EncodeMsg(c), options_.rpc_timeout);
      !s) {
    Log()->debug("move {} of {}: cancel at {}: {}", m.id, path, m.to, s.error().ToString());
  }
  return Ok();
}

Status Migration::CancelAt(const std::string& holder, const std::string& path) {
  if (holder == node_id_) return Cancel(path);
  MoveMsg c;
  c.path = path;
  c.from = node_id_;  // id 0: "the move of this path", to L
  auto s = Call(holder, MethodId(RpcMethod::kMigCancel), EncodeMsg(c), options_.rpc_timeout);
  if (!s) return Err(s.error());
  return Ok();
}

// A kMigCancel or kMigProgress: to L naming a path (id 0), or to T naming
// the move (id and sender); EPROTO answered (logged) for anything else.
std::optional<MoveMsg> Migration::DecodeAsked(const m2m::IncomingCall& call, m2m::Responder& r,
                                             const char* what) {
  auto m = DecodeMsg(call.payload);
  if (m && (m->path.empty() || m->from.empty())) m = Err(EPROTO, "no path or no sender");
  if (!m) {
    Log()->warn("refused {} from {}: {}", what, call.peer.remote_addr, m.error().ToString());
    r.Fail(Error{EPROTO, m.error().context});
    return std::nullopt;
  }
  return std::move(*m);
}

std::shared_ptr<Migration::Staged> Migration::StagedOf(const MoveMsg& m) {
  std::lock_guard lock(mu_);
  auto it = staged_.find(kvkeys::MigrationKey(false, m.from, m.id));
  return it != staged_.end() ? it->second : nullptr;
}

void Migration::OnCancel(m2m::IncomingCall call, m2m::Responder r) {
  auto m = DecodeAsked(call, r, "kMigCancel");
  if (!m) return;
  if (m->id != 0) {
    // T: the copy of that move from that node, if it is being received.
    auto staged = StagedOf(*m);
    if (staged == nullptr) return r.Fail(Error{ENOENT, "no copy of that move here"});
    staged->cancelled.store(true);
    return r.Reply(EncodeMsg(MoveMsg{}));
  }
  // L: Cancel calls T, so not on the transport's thread.
  auto shared = std::make_shared<m2m::Responder>(std::move(r));
  Spawn([this, path = m->path, shared] {
    if (auto s = Cancel(path); !s) return shared->Fail(s.error());
    shared->Reply(EncodeMsg(MoveMsg{}));
  });
}

Result<Migration::Progress> Migration::ProgressOf(const std::string& path) {
  Moving m;
  {
    std::lock_guard lock(mu_);
    auto it = moving_.find(path);
    if (it == moving_.end()) return Err(ENOENT, "no move of " + path + " in progress here");
    m = it->second;
  }
  Progress p{node_id_, m.to, m.size, m.size};
  if (m.copied) return p;
  MoveMsg q;
  q.id = m.id;
  q.path = path;
  q.from = node_id_;
  auto a = Call(m.to, MethodId(RpcMethod::kMigProgress), EncodeMsg(q), options_.rpc_timeout);
  if (!a) {
    if (a.error().code != ENOENT) return Err(a.error());
    p.copied = 0;  // T not receiving yet (or done since, L not told yet)
    return p;
  }
  auto d = DecodeMsg(*a);
  if (!d) return Err(d.error());
  p.copied = std::min(d->bytes, m.size);
  return p;
}

Result<Migration::Progress> Migration::ProgressAt(const std::string& holder,
                                                  const std::string& path) {
  if (holder == node_id_) return ProgressOf(path);
  MoveMsg q;
  q.path = path;
  q.from = node_id_;  // id 0: "the move of this path", to L
  auto a = Call(holder, MethodId(RpcMethod::kMigProgress), EncodeMsg(q), options_.rpc_timeout);
  if (!a) return Err(a.error());
  auto d = DecodeMsg(*a);
  if (!d) return Err(d.error());
  return Progress{holder, d->to, d->size, std::min(d->bytes, d->size)};
}

void Migration::OnProgress(m2m::IncomingCall call, m2m::Responder r) {
  auto m = DecodeAsked(call, r, "kMigProgress");
  if (!m) return;
  if (m->id != 0) {
    // T: the bytes of that move's copy written so far.
    auto staged = StagedOf(*m);
    if (staged == nullptr) return r.Fail(Error{ENOENT, "no copy of that move here"});
    MoveMsg a;
    a.bytes = staged->copied.load(std::memory_order_relaxed);
    return r.Reply(EncodeMsg(a));
  }
  // L: ProgressOf calls T, so not on the transport's thread.
  auto shared = std::make_shared<m2m::Responder>(std::move(r));
  Spawn([this, path = m->path, shared] {
    auto p = ProgressOf(path);
    if (!p) return shared->Fail(p.error());
    MoveMsg a;
    a.to = p->to;
    a.size = p->bytes;
    a.bytes = p->copied;
    shared->Reply(EncodeMsg(a));
  });
}

}  // namespace fedfs::ns
