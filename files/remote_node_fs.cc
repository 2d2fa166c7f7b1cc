#include "files/remote_node_fs.h"
#include "nodefs/move_support.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>

#include "common/path.h"
#include "common/logging.h"
#include "common/rpc_methods.h"
#include "common/wait.h"
#include "files/fs_wire.h"
#include "files/remote_node_fs_internal.h"
#include "m2m/reply_cache.h"

namespace fedfs::ns {

namespace fb = fswire::fb;
using namespace remote_detail;

namespace remote_detail {

// Whether a request whose message may have been lost is sent again: never,
// as it is (it reads), or with a request id (it changes).
enum class Resend { kNo, kSafe, kOnce };
Resend ResendOf(fb::Op op) {
  switch (op) {
    case fb::Op::kStat:
    case fb::Op::kListDir:
    case fb::Op::kReadlink:
    case fb::Op::kStatFs:
    case fb::Op::kGetXattr:
    case fb::Op::kListXattr:
    case fb::Op::kGetLk:
    case fb::Op::kAccess:
    case fb::Op::kFlush:
    case fb::Op::kFsync:
      return Resend::kSafe;  // the same answer however often it runs
    case fb::Op::kRead:
    case fb::Op::kWrite:
    case fb::Op::kCoopEvict:
    case fb::Op::kCoopStore:
    case fb::Op::kCoopMoved:
      return Resend::kNo;  // data: its own callers retry (or fail)
    default:
      return Resend::kOnce;
  }
}

m2m::Bytes Encode(const RemoteNodeFs::Req& q, uint64_t session, uint64_t budget_us,
                  const std::vector<uint64_t>& releases, uint64_t request_id) {
  flatbuffers::FlatBufferBuilder b(256 + q.data.size() + q.path.size() + q.path2.size() +
                                   releases.size() * 8);
  auto str = [&](std::string_view s) {
    return s.empty() ? flatbuffers::Offset<flatbuffers::String>()
                     : b.CreateString(s.data(), s.size());
  };
  auto path = str(q.path), path2 = str(q.path2), target = str(q.target),
       for_node = str(q.for_node);
  auto data = q.data.empty() ? flatbuffers::Offset<flatbuffers::Vector<uint8_t>>()
                             : b.CreateVector(reinterpret_cast<const uint8_t*>(q.data.data()),
                                              q.data.size());
  auto cred = q.cred ? fswire::ToWire(b, *q.cred) : flatbuffers::Offset<fb::Cred>();
  flatbuffers::Offset<flatbuffers::Vector<const fb::DirTemplate*>> templates;
  if (q.templates) {
    std::vector<fb::DirTemplate> t;
    for (const auto& d : *q.templates) t.emplace_back(d.mode, d.uid, d.gid, d.id);
    templates = b.CreateVectorOfStructs(t);
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> names;
  if (q.names) names = b.CreateVectorOfStrings(*q.names);
  auto rel = releases.empty() ? flatbuffers::Offset<flatbuffers::Vector<uint64_t>>()
                              : b.CreateVector(releases);
  flatbuffers::Offset<flatbuffers::Vector<const fb::CoopFrame*>> coop_frames;
  if (q.coop) {
    std::vector<fb::CoopFrame> f;
    f.reserve(q.coop->frames.size());
    for (const auto& [frame, tag] : q.coop->frames) f.emplace_back(frame, tag);
    coop_frames = b.CreateVectorOfStructs(f);
  }
  flatbuffers::Offset<flatbuffers::String> coop_node;
  if (q.fwd) {
    const fb::CoopFrame f(q.fwd->frame, q.fwd->tag);
    coop_frames = b.CreateVectorOfStructs(&f, 1);
    if (!q.fwd->node.empty()) coop_node = b.CreateString(q.fwd->node);
  }
  fb::FsRequestBuilder rb(b);
  rb.add_version(fswire::kVersion);
  rb.add_session(session);
  rb.add_op(q.op);
  if (!cred.IsNull()) rb.add_cred(cred);
  if (!path.IsNull()) rb.add_path(path);
  if (!path2.IsNull()) rb.add_path2(path2);
  if (!target.IsNull()) rb.add_target(target);
  if (!for_node.IsNull()) rb.add_for_node(for_node);
  if (q.expect_ino) {
    rb.add_expect_ino(*q.expect_ino);
    rb.add_has_expect(true);
    rb.add_expect_watch(q.expect_watch);
  }
  if (!data.IsNull()) rb.add_data(data);
  if (!templates.IsNull()) rb.add_templates(templates);
  if (!names.IsNull()) rb.add_names(names);
  if (!rel.IsNull()) rb.add_releases(rel);
  rb.add_flags(q.flags);
  rb.add_mode(q.mode);
  rb.add_rdev(q.rdev);
  if (q.handle) {
    rb.add_handle(*q.handle);
    rb.add_has_handle(true);
  }
  rb.add_offset(q.offset);
  rb.add_length(q.length);
  rb.add_slot(q.slot);
  rb.add_budget_us(budget_us);
  if (request_id != 0) rb.add_request_id(request_id);
  rb.add_owner(q.owner);
  if (q.watch) rb.add_watch(true);
  if (q.kill_setid) rb.add_kill_setid(true);
  if (q.parent_attr) rb.add_parent_attr(true);
  if (q.coop) {
    rb.add_coop_block(q.coop->block);
    rb.add_coop_frames(coop_frames);
    if (q.coop->replace) rb.add_coop_replace(true);
  }
  if (q.fwd) {
    rb.add_coop_block(q.fwd->block);
    rb.add_coop_frames(coop_frames);
    rb.add_coop_dev(q.fwd->dev);
    rb.add_coop_ino(q.fwd->ino);
    rb.add_coop_index(q.fwd->index);
    rb.add_coop_recirc(q.fwd->recirc);
    rb.add_coop_version(q.fwd->version);
    if (!coop_node.IsNull()) rb.add_coop_node(coop_node);
  }
  if (q.lock) {
    rb.add_lock_type(q.lock->type);
    rb.add_lock_start(q.lock->start);
    rb.add_lock_len(q.lock->len);
    rb.add_lock_pid(q.lock->pid);
  }
  if (q.sa) {
    uint32_t m = 0;
    if (q.sa->mode) m |= fswire::kSaMode, rb.add_sa_mode(*q.sa->mode);
    if (q.sa->uid) m |= fswire::kSaUid, rb.add_sa_uid(*q.sa->uid);
    if (q.sa->gid) m |= fswire::kSaGid, rb.add_sa_gid(*q.sa->gid);
    if (q.sa->size) m |= fswire::kSaSize, rb.add_sa_size(*q.sa->size);
    if (q.sa->atime) {
      m |= fswire::kSaAtime;
      rb.add_sa_atime_sec(q.sa->atime->tv_sec);
      rb.add_sa_atime_nsec(q.sa->atime->tv_nsec);
    }
    if (q.sa->mtime) {
      m |= fswire::kSaMtime;
      rb.add_sa_mtime_sec(q.sa->mtime->tv_sec);
      rb.add_sa_mtime_nsec(q.sa->mtime->tv_nsec);
    }
    rb.add_setattr_mask(m);
  }
  b.Finish(rb.Finish());
  return fswire::Finish(b);
}

}  // namespace remote_detail

namespace {

uint64_t Random64() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

// Random per process: a server that sees a new incarnation of a client node
// knows the old process is gone and releases its sessions.
uint64_t ProcessIncarnation() {
  static const uint64_t v = Random64();
  return v;
}

}  // namespace




RemoteNodeFs::RemoteNodeFs(std::string node_id, std::shared_ptr<m2m::Endpoint> endpoint,
                           m2m::Transport* transport, RemoteNodeFsOptions options)
    : node_id_(std::move(node_id)),
      ep_(std::move(endpoint)),
      transport_(transport),
      opts_(std::move(options)),
      session_(Random64()) {
  if (opts_.local_address.empty()) opts_.callbacks = nullptr;
  if (opts_.callbacks != nullptr) opts_.callbacks->Add(session_, node_id_);
  if (!opts_.local_address.empty() && opts_.slot_count > 0 && opts_.slot_size > 0) {
    auto r = transport_->Allocate(opts_.slot_size * opts_.slot_count);
    if (r) {
      slots_ = std::make_unique<Slots>();
      slots_->region = std::move(*r);
      slots_->slot_size = opts_.slot_size;
      slots_->busy.assign(opts_.slot_count, false);
      slots_->usable_after.assign(opts_.slot_count, Clock::time_point{});
    } else {
      Logger("fs")->warn("remote fs {}: cannot register a buffer pool ({}); data goes inline",
                         node_id_, r.error().ToString());
    }
  }
}

RemoteNodeFs::~RemoteNodeFs() {
  if (opts_.callbacks != nullptr) opts_.callbacks->Remove(session_);
  if (helloed_.load()) {
    flatbuffers::FlatBufferBuilder b(64);
    fb::FsHelloBuilder hb(b);
    hb.add_version(fswire::kVersion);
    hb.add_session(session_);
    hb.add_incarnation(ProcessIncarnation());
    hb.add_bye(true);
    b.Finish(hb.Finish());
    // Best effort: a server that misses the goodbye keeps the session until
    // this node restarts or is declared dead (file_service.h, "Cleanup").
    m2m::CallSync(*ep_, MethodId(RpcMethod::kFsHello), fswire::Finish(b),
                  std::min<m2m::Timeout>(opts_.rpc_timeout, std::chrono::seconds(1)))
        .IgnoreError();
  }
  if (slots_) {
    Clock::time_point until{};
    {
      std::lock_guard lock(slots_->mu);
      for (auto t : slots_->usable_after) until = std::max(until, t);
    }
    if (until > Clock::now()) std::this_thread::sleep_until(until);
  }
}

Status RemoteNodeFs::Hello(Clock::time_point deadline, bool renew) {
  std::lock_guard lock(hello_mu_);
  if (helloed_.load() && !renew) return Ok();
  flatbuffers::FlatBufferBuilder b(256);
  auto node = b.CreateString(opts_.local_node);
  const bool callbacks = opts_.callbacks != nullptr;
  auto addr = b.CreateString(slots_ || callbacks ? opts_.local_address : std::string());
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> rkey;
  m2m::RegionDesc d;
  if (slots_) {
    d = slots_->region->Export();
    rkey = b.CreateVector(reinterpret_cast<const uint8_t*>(d.rkey.data()), d.rkey.size());
  }
  const auto& coop = opts_.coop;
  const bool with_cache = coop.block > 0 && !opts_.local_address.empty();
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> cache_rkey, tags_rkey;
  if (with_cache) {
    cache_rkey = b.CreateVector(reinterpret_cast<const uint8_t*>(coop.data.rkey.data()),
                                coop.data.rkey.size());
    tags_rkey = b.CreateVector(reinterpret_cast<const uint8_t*>(coop.tags.rkey.data()),
                               coop.tags.rkey.size());
  }
  fb::FsHelloBuilder hb(b);
  if (with_cache) {
    hb.add_cache_block(coop.block);
    hb.add_cache_addr(coop.data.addr);
    hb.add_cache_length(coop.data.length);
    hb.add_cache_rkey(cache_rkey);
    hb.add_tags_addr(coop.tags.addr);
    hb.add_tags_length(coop.tags.length);
    hb.add_tags_rkey(tags_rkey);
  }
  hb.add_version(fswire::kVersion);
  hb.add_session(session_);
  hb.add_incarnation(ProcessIncarnation());
  hb.add_client_node(node);
  hb.add_client_addr(addr);
  hb.add_attr_callbacks(callbacks);
  if (slots_) {
    hb.add_pool_addr(d.addr);
    hb.add_pool_length(d.length);
    hb.add_pool_rkey(rkey);
    hb.add_slot_size(slots_->slot_size);
    hb.add_slot_count(static_cast<uint32_t>(slots_->busy.size()));
  }
  b.Finish(hb.Finish());
  const Clock::time_point sent = Clock::now();
  auto r = m2m::CallSync(*ep_, MethodId(RpcMethod::kFsHello), fswire::Finish(b), Until(deadline));
  if (!r) return Err(r.error());
  const auto* h = fswire::Verify<fb::FsHelloReply>(*r);
  if (h == nullptr || h->version() != fswire::kVersion) {
    return Err(EPROTO, "malformed FsHelloReply from " + node_id_);
  }
  max_io_.store(std::max<uint64_t>(h->max_io(), 4096));
  server_releases_.store(h->releases());
  lease_ms_.store(static_cast<int64_t>(h->session_lease_ms()));
  cache_lease_ms_.store(static_cast<int64_t>(h->cache_lease_ms()));
  // A renewal of a session the server kept telling of its changes leaves
  // what this node caches from it valid; any other Hello starts anew, and
  // what was cached under the session before (handles still told, watches)
  // goes: the server no longer tells of its changes.
  lapsed_.store(false);
  if (!h->continued()) {
    const uint64_t before = hellos_.fetch_add(1, std::memory_order_acq_rel);
    if (before > 0 && opts_.callbacks != nullptr) opts_.callbacks->Lost(node_id_, true);
  }
  Heard(sent);
  helloed_.store(true);
  last_call_.store(Clock::now().time_since_epoch().count());
  ScheduleRenewal();
  return Ok();
}

void RemoteNodeFs::Heard(Clock::time_point sent) {
  const int64_t t = sent.time_since_epoch().count();
  int64_t was = heard_.load(std::memory_order_relaxed);
  while (was < t && !heard_.compare_exchange_weak(was, t, std::memory_order_relaxed)) {
  }
}

void RemoteNodeFs::Lapse(const char* why) {
  if (lapsed_.exchange(true)) return;
  hellos_.fetch_add(1, std::memory_order_acq_rel);
  Logger("fs")->warn("session with {}: {}; what this node caches of its files is dropped", node_id_,
                     why);
  if (opts_.callbacks != nullptr) opts_.callbacks->Lost(node_id_, false);
}

RemoteNodeFs::Clock::duration RemoteNodeFs::ChangeSlack() const {
  const auto cache = std::chrono::milliseconds(cache_lease_ms_.load());
  if (cache.count() <= 0) return Clock::duration::zero();
  return cache + std::chrono::milliseconds(1500);
}

RemoteNodeFs::Clock::duration RemoteNodeFs::RenewalPeriod() const {
  Clock::duration p = Clock::duration::max();
  if (const auto lease = std::chrono::milliseconds(lease_ms_.load()); lease.count() > 0) {
    p = lease / 3;
  }
  if (const auto cache = std::chrono::milliseconds(cache_lease_ms_.load());
      cache.count() > 0 && opts_.callbacks != nullptr) {
    p = std::min<Clock::duration>(p, cache / 5);
  }
  return p;
}

void RemoteNodeFs::ScheduleRenewal() {
  const Clock::duration period = RenewalPeriod();
  if (period == Clock::duration::max() || opts_.timers == nullptr) return;
  std::weak_ptr<RemoteNodeFs> self = weak_from_this();
  if (self.expired() || renewal_due_.exchange(true)) return;  // not shared, or one already due
  opts_.timers->After(std::chrono::duration_cast<std::chrono::milliseconds>(period), [self] {
    if (auto s = self.lock()) s->Renew();
  });
}

void RemoteNodeFs::Renew() {
  renewal_due_.store(false);
  const Clock::duration period = RenewalPeriod();
  const auto since = [](const std::atomic<int64_t>& t) {
    return Clock::now() - Clock::time_point(Clock::duration(t.load()));
  };
  const auto cache = std::chrono::milliseconds(cache_lease_ms_.load());
  const bool leased = cache.count() > 0 && opts_.callbacks != nullptr;
  if (helloed_.load() && (since(last_call_) >= period || (leased && since(heard_) >= period))) {
    // An idle session: said again, so that its handles and locks stay (and
    // what this node caches of the server's files).
    if (auto s = Hello(Clock::now() + std::min<Clock::duration>(opts_.rpc_timeout, period), true);
        !s) {
      Logger("fs")->debug("renewal of the session with {}: {}", node_id_, s.error().ToString());
    }
  }
  if (leased && helloed_.load() && since(heard_) >= cache * 3 / 5) {
    Lapse("no answer within three fifths of the cache lease");
  }
  ScheduleRenewal();
}

size_t RemoteNodeFs::MaxIo() const {
  size_t m = max_io_.load();
  if (slots_) m = std::min(m, slots_->slot_size);
  return std::max<size_t>(m, 4096);
}

Result<m2m::Bytes> RemoteNodeFs::Call(const Req& req, Clock::time_point deadline) {
  // A file being moved at the server: its gate answered kErrMoveWait before
  // this call's deadline, nothing done; asked again with the same budget, for
  // as long as the move holds the file (bounded: kMoveWaitMax).
  Clock::duration budget0 = deadline - Clock::now();
  const Clock::time_point give_up = Clock::now() + kMoveWaitMax;
  // A request or reply lost with a broken connection: sent again while time
  // is left, with the same id where it must not run twice.
  const Resend how = ResendOf(req.op);
  const uint64_t id = how == Resend::kOnce ? request_ids_.fetch_add(1) : 0;
  int resends = 0;
  bool slack = how != Resend::kOnce;  // a change's answer may wait (ChangeSlack)
  for (int attempt = 0;; ++attempt) {
    if (!helloed_.load()) {
      if (auto st = Hello(deadline); !st) return Err(st.error());
    } else if (lapsed_.load()) {
      // Nothing is asked before the server says whether it kept telling
      // this node of changes (else what this node caches meanwhile goes).
      if (auto st = Hello(deadline, /*renew=*/true); !st) return Err(st.error());
    }
    if (!slack) {
      slack = true;
      deadline += ChangeSlack();
      budget0 += ChangeSlack();
    }
    const auto budget = Until(deadline);
    const Clock::time_point sent = Clock::now();
    last_call_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    std::vector<uint64_t> releases;
    if (server_releases_.load(std::memory_order_relaxed)) {
      std::lock_guard lock(releases_mu_);
      const size_t n = std::min(releases_.size(), fswire::kMaxReleases);
      releases.assign(releases_.end() - static_cast<ptrdiff_t>(n), releases_.end());
      releases_.resize(releases_.size() - n);
    }
    auto r = m2m::CallSync(
        *ep_, MethodOf(req.op),
        Encode(req, session_,
               std::chrono::duration_cast<std::chrono::microseconds>(budget).count(), releases,
               id),
        budget);
    if (!r && !releases.empty()) {
      // Maybe not released: sent again with the next request (a handle the
      // server no longer knows is ignored; handles are never reused).
      std::lock_guard lock(releases_mu_);
      if (releases_.size() < 16 * fswire::kMaxReleases) {  // else the node is long gone
        releases_.insert(releases_.end(), releases.begin(), releases.end());
      }
    }
    if (!r && r.error().code == fswire::kErrSessionUnknown && attempt == 0) {
      helloed_.store(false);  // new connection or restarted server: Hello again
      continue;
    }
    if (!r && how != Resend::kNo && m2m::ConnectionBroken(r.error().code) && resends < m2m::kMaxResends &&
        Until(deadline) > Clock::duration::zero()) {
      ++resends;
      resends_.fetch_add(1, std::memory_order_relaxed);
      --attempt;  // not a failed attempt
      continue;
    }
    if (!r && r.error().code == kErrMoveWait) {
      if (Clock::now() >= give_up) {
        return Err(ETIMEDOUT, "the file has been held by a move for too long");
      }
      deadline = Clock::now() + budget0;
      --attempt;  // not a failed attempt
      continue;
    }
    if (!r) return Err(r.error());
    Heard(sent);
    if (auto p = Parse(*r); !p) return Err(p.error());
    return r;
  }
}

namespace {
Result<struct stat> StatOf(Result<m2m::Bytes> r) {
  if (!r) return Err(r.error());
  const auto* s = Root(*r)->stat();
  if (s == nullptr) return Err(EPROTO, "reply without stat");
  return fswire::FromWire(*s);
}
Status StatusOf(Result<m2m::Bytes> r) {
  if (!r) return Err(r.error());
  return Ok();
}
std::string DataOf(const fb::FsReply* r) {
  if (r->data() == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(r->data()->data()), r->data()->size());
}
}  // namespace

Result<struct stat> RemoteNodeFs::Stat(const Cred& c, const std::string& path) {
  return StatOf(Call({.op = fb::Op::kStat, .cred = &c, .path = path}, FEDFS_DEADLINE));
}

Result<WatchedStat> RemoteNodeFs::StatWatched(const Cred& c, const std::string& path) {
  const bool watch = opts_.callbacks != nullptr;
  auto r = Call({.op = fb::Op::kStat, .cred = &c, .path = path, .watch = watch}, FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  const auto* rep = Root(*r);
  if (rep->stat() == nullptr) return Err(EPROTO, "reply without stat");
  WatchedStat out{fswire::FromWire(*rep->stat()), std::nullopt};
  if (rep->attr_callbacks() && opts_.callbacks != nullptr) out.watch = rep->handle();
  return out;
}

Result<std::vector<NodeFs::NamedWatchedStat>> RemoteNodeFs::StatWatchedAlong(
    const Cred& c, const std::string& dir, const std::string& name, size_t along) {
  const bool watch = opts_.callbacks != nullptr;
  const std::vector<std::string> names{name};
  auto r = Call({.op = fb::Op::kStatMany, .cred = &c, .path = dir,
                 .length = std::min(along, fswire::kMaxStatMany), .names = &names, .watch = watch},
                FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  const auto* stats = Root(*r)->stats();
  if (stats == nullptr || stats->size() == 0 || stats->Get(0)->name() == nullptr ||
      stats->Get(0)->name()->string_view() != name) {
    return Err(EPROTO, "a kStatMany reply without the name asked for first");
  }
  std::vector<NamedWatchedStat> out;
  out.reserve(stats->size());
  for (const fb::NamedStat* n : *stats) {
    if (n->name() == nullptr || !ValidateName(n->name()->string_view())) {
      return Err(EPROTO, "a kStatMany answer without a valid name");
    }
    if (n->err() != 0) {
      out.emplace_back(n->name()->str(), Err(n->err(), "stat"));
    } else if (n->stat() == nullptr) {
      out.emplace_back(n->name()->str(), Err(EPROTO, "kStatMany answer without stat"));
    } else {
      WatchedStat w{fswire::FromWire(*n->stat()), std::nullopt};
      if (n->attr_callbacks() && watch) w.watch = n->watch();
      out.emplace_back(n->name()->str(), std::move(w));
    }
  }
  return out;
}

Status RemoteNodeFs::Access(const Cred& c, const std::string& path, int mode) {
  return StatusOf(
      Call({.op = fb::Op::kAccess, .cred = &c, .path = path, .flags = mode}, FEDFS_DEADLINE));
}

Result<std::vector<DirEntry>> RemoteNodeFs::ListDir(const Cred& c, const std::string& path) {
  auto r = Call({.op = fb::Op::kListDir, .cred = &c, .path = path}, FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  std::vector<DirEntry> out;
  if (const auto* es = Root(*r)->entries()) {
    out.reserve(es->size());
    for (const fb::DirEntry* e : *es) {
      if (e->name() == nullptr) return Err(EPROTO, "directory entry without a name");
      DirEntry d{e->name()->str(), e->type(), e->ino()};
      d.id = e->id();
      out.push_back(std::move(d));
    }
  }
  return out;
}

Result<struct stat> RemoteNodeFs::Mkdir(const Cred& c, const std::string& path, mode_t mode) {
  return StatOf(
      Call({.op = fb::Op::kMkdir, .cred = &c, .path = path, .mode = mode}, FEDFS_DEADLINE));
}

Status RemoteNodeFs::MkdirParents(const std::string& path,
                                  const std::vector<DirTemplate>& templates) {
  return StatusOf(Call({.op = fb::Op::kMkdirParents, .path = path, .templates = &templates},
                       FEDFS_DEADLINE));
}

Status RemoteNodeFs::Rmdir(const Cred& c, const std::string& path) {
  return StatusOf(Call({.op = fb::Op::kRmdir, .cred = &c, .path = path}, FEDFS_DEADLINE));
}

Result<struct stat> RemoteNodeFs::Mknod(const Cred& c, const std::string& path, mode_t mode,
                                        dev_t rdev) {
  return StatOf(Call({.op = fb::Op::kMknod, .cred = &c, .path = path, .mode = mode, .rdev = rdev},
                     FEDFS_DEADLINE));
}

Result<struct stat> RemoteNodeFs::Symlink(const Cred& c, const std::string& target,
                                          const std::string& path) {
  return StatOf(Call({.op = fb::Op::kSymlink, .cred = &c, .path = path, .target = target},
                     FEDFS_DEADLINE));
}

Result<std::string> RemoteNodeFs::Readlink(const Cred& c, const std::string& path) {
  auto r = Call({.op = fb::Op::kReadlink, .cred = &c, .path = path}, FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  return DataOf(Root(*r));
}

Status RemoteNodeFs::Unlink(const Cred& c, const std::string& path) {
  return StatusOf(Call({.op = fb::Op::kUnlink, .cred = &c, .path = path}, FEDFS_DEADLINE));
}

Result<std::optional<struct stat>> RemoteNodeFs::UnlinkSeeingParent(const Cred& c,
                                                                    const std::string& path) {
  return UnlinkFor(c, path, {});
}

Result<std::optional<struct stat>> RemoteNodeFs::UnlinkFor(const Cred& c, const std::string& path,
                                                           const std::string& for_node) {
  auto r = Call({.op = fb::Op::kUnlink,
                 .cred = &c,
                 .path = path,
                 .parent_attr = true,
                 .for_node = for_node},
                FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  const auto* rep = Root(*r);
  if (rep->parent() == nullptr) return std::optional<struct stat>();
  return std::optional<struct stat>(fswire::FromWire(*rep->parent()));
}

Status RemoteNodeFs::Rename(const Cred& c, const std::string& from, const std::string& to,
                            unsigned flags) {
  return RenameFor(c, from, to, flags, {});
}

Status RemoteNodeFs::RenameFor(const Cred& c, const std::string& from, const std::string& to,
                               unsigned flags, const std::string& for_node) {
  return StatusOf(Call({.op = fb::Op::kRename,
                        .cred = &c,
                        .path = from,
                        .path2 = to,
                        .flags = static_cast<int32_t>(flags),
                        .for_node = for_node},
                       FEDFS_DEADLINE));
}

Result<struct stat> RemoteNodeFs::Link(const Cred& c, const std::string& existing,
                                       const std::string& newpath) {
  return StatOf(Call({.op = fb::Op::kLink, .cred = &c, .path = existing, .path2 = newpath},
                     FEDFS_DEADLINE));
}

Result<struct stat> RemoteNodeFs::SetAttr(const Cred& c, const std::string& path,
                                          std::optional<Handle> handle,
                                          const SetAttrRequest& req) {
  return StatOf(Call(
      {.op = fb::Op::kSetAttr, .cred = &c, .path = path, .handle = handle, .sa = &req},
      FEDFS_DEADLINE));
}

Result<struct statvfs> RemoteNodeFs::StatFs() {
  auto r = Call({.op = fb::Op::kStatFs}, FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  const auto* s = Root(*r)->statvfs();
  if (s == nullptr) return Err(EPROTO, "reply without statvfs");
  return fswire::FromWire(*s);
}

Result<std::string> RemoteNodeFs::GetXattr(const Cred& c, const std::string& path,
                                           const std::string& name, size_t size,
                                           size_t* needed) {
  auto r = Call(
      {.op = fb::Op::kGetXattr, .cred = &c, .path = path, .target = name, .length = size},
      FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  if (needed) *needed = Root(*r)->n();
  return DataOf(Root(*r));
}

Status RemoteNodeFs::SetXattr(const Cred& c, const std::string& path, const std::string& name,
                              std::span<const std::byte> value, int flags) {
  return StatusOf(Call({.op = fb::Op::kSetXattr,
                        .cred = &c,
                        .path = path,
                        .target = name,
                        .data = value,
                        .flags = flags},
                       FEDFS_DEADLINE));
}

Result<std::string> RemoteNodeFs::ListXattr(const Cred& c, const std::string& path, size_t size,
                                            size_t* needed) {
  auto r = Call({.op = fb::Op::kListXattr, .cred = &c, .path = path, .length = size},
                FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  if (needed) *needed = Root(*r)->n();
  return DataOf(Root(*r));
}

Status RemoteNodeFs::RemoveXattr(const Cred& c, const std::string& path,
                                 const std::string& name) {
  return StatusOf(
      Call({.op = fb::Op::kRemoveXattr, .cred = &c, .path = path, .target = name},
           FEDFS_DEADLINE));
}

Result<Opened> RemoteNodeFs::Open(const Cred& c, const std::string& path, int flags) {
  return OpenAsked({.op = fb::Op::kOpen, .cred = &c, .path = path, .flags = flags});
}

Result<Opened> RemoteNodeFs::OpenExpecting(const Cred& c, const std::string& path, int flags,
                                           uint64_t ino48, Handle watch) {
  return OpenAsked({.op = fb::Op::kOpen, .cred = &c, .path = path, .flags = flags,
                    .expect_ino = ino48 & kIno48Mask, .expect_watch = watch});
}

Result<Opened> RemoteNodeFs::OpenAsked(const Req& req) {
  auto r = Call(req, FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  const auto* rep = Root(*r);
  if (rep->stat() == nullptr) return Err(EPROTO, "open reply without stat");
  return Opened{rep->handle(), fswire::FromWire(*rep->stat()),
                rep->attr_callbacks() && opts_.callbacks != nullptr};
}

Result<Opened> RemoteNodeFs::Create(const Cred& c, const std::string& path, int flags,
                                    mode_t mode) {
  const bool watch = opts_.callbacks != nullptr;
  auto r = Call({.op = fb::Op::kCreate, .cred = &c, .path = path, .flags = flags, .mode = mode,
                 .watch = watch, .parent_attr = true},
                FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  const auto* rep = Root(*r);
  if (rep->stat() == nullptr) return Err(EPROTO, "create reply without stat");
  Opened out{rep->handle(), fswire::FromWire(*rep->stat()),
             rep->attr_callbacks() && opts_.callbacks != nullptr};
  if (watch && out.attr_callbacks && rep->watch() != 0) out.watch = rep->watch();
  if (rep->parent() != nullptr) out.parent = fswire::FromWire(*rep->parent());
  return out;
}

Status RemoteNodeFs::Flush(Handle h, uint64_t lock_owner) {
  return StatusOf(Call({.op = fb::Op::kFlush, .handle = h, .owner = lock_owner}, FEDFS_DEADLINE));
}

Status RemoteNodeFs::Fsync(Handle h, bool datasync) {
  return StatusOf(
      Call({.op = fb::Op::kFsync, .flags = datasync ? 1 : 0, .handle = h}, FEDFS_DEADLINE));
}

Status RemoteNodeFs::Fallocate(Handle h, int mode, uint64_t offset, uint64_t len) {
  return StatusOf(Call(
      {.op = fb::Op::kFallocate, .flags = mode, .handle = h, .offset = offset, .length = len},
      FEDFS_DEADLINE));
}

Status RemoteNodeFs::Release(Handle h) {
  return StatusOf(Call({.op = fb::Op::kRelease, .handle = h}, FEDFS_DEADLINE));
}

Status RemoteNodeFs::ReleaseLater(Handle h) {
  std::weak_ptr<RemoteNodeFs> self = weak_from_this();
  if (opts_.timers == nullptr || self.expired() || !server_releases_.load()) return Release(h);
  bool arm = false, now = false;
  {
    std::lock_guard lock(releases_mu_);
    releases_.push_back(h);
    now = releases_.size() >= std::min(opts_.release_batch, fswire::kMaxReleases);
    arm = !now && !releases_armed_;
    if (arm) releases_armed_ = true;
  }
  if (now) {
    SendReleases();
  } else if (arm) {
    opts_.timers->After(opts_.release_delay, [self] {
      if (auto fs = self.lock()) {
        {
          std::lock_guard lock(fs->releases_mu_);
          fs->releases_armed_ = false;
        }
        fs->SendReleases();
      }
    });
  }
  return Ok();
}

// A release of the first waiting handle, carrying the others: sent on the
// releasing thread (a FUSE worker's, or the Timers'), bounded by rpc_timeout.
void RemoteNodeFs::SendReleases() {
  Handle first;
  {
    std::lock_guard lock(releases_mu_);
    if (releases_.empty()) return;
    first = releases_.back();
    releases_.pop_back();
  }
  Release(first).IgnoreError();
}

Result<LockRange> RemoteNodeFs::GetLk(Handle h, uint64_t owner, const LockRange& want) {
  auto r = Call({.op = fb::Op::kGetLk, .handle = h, .owner = owner, .lock = &want},
                FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  const auto* rep = Root(*r);
  return LockRange{rep->lock_type(), rep->lock_start(), rep->lock_len(), rep->lock_pid()};
}

Status RemoteNodeFs::SetLk(Handle h, uint64_t owner, const LockRange& want) {
  return StatusOf(Call({.op = fb::Op::kSetLk, .handle = h, .owner = owner, .lock = &want},
                       FEDFS_DEADLINE));
}

Status RemoteNodeFs::Flock(Handle h, uint64_t owner, int op) {
  return StatusOf(
      Call({.op = fb::Op::kFlock, .flags = op, .handle = h, .owner = owner}, FEDFS_DEADLINE));
}

}  // namespace fedfs::ns
