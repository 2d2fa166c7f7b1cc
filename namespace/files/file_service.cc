#include "namespace/files/file_service.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "common/logging.h"
#include "common/rpc_methods.h"
#include "common/wait.h"
#include "namespace/files/fs_wire.h"
#include "namespace/path.h"

namespace fedfs::ns {

namespace fb = fswire::fb;
using Clock = std::chrono::steady_clock;

namespace {

// The server's registered slots. Acquire waits (bounded by a deadline) for a
// free slot; any thread but the progress context.
class SlotPool {
 public:
  Status Init(m2m::Transport* t, size_t slot_size, size_t count) {
    auto r = t->Allocate(slot_size * count);
    if (!r) return Err(r.error());
    region_ = std::move(*r);
    slot_size_ = slot_size;
    for (size_t i = 0; i < count; ++i) free_.push_back(static_cast<int>(i));
    return Ok();
  }
  int Acquire(Clock::time_point deadline) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return !free_.empty(); })) return -1;
    int s = free_.back();
    free_.pop_back();
    return s;
  }
  void Release(int s) {
    {
      std::lock_guard lock(mu_);
      free_.push_back(s);
    }
    cv_.notify_one();
  }
  std::byte* slot(int s) { return region_->data() + static_cast<size_t>(s) * slot_size_; }
  size_t slot_size() const { return slot_size_; }

 private:
  std::unique_ptr<m2m::LocalRegion> region_;
  size_t slot_size_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> free_;  // guarded by mu_
};

// RAII slot holder.
struct SlotRef {
  SlotPool* pool;
  int slot;
  ~SlotRef() {
    if (slot >= 0) pool->Release(slot);
  }
};

std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

}  // namespace

namespace {

// The session whose request this thread is serving (0: none). Its own
// changes are not told back to it: its kernel saw them happen.
thread_local uint64_t t_serving_session = 0;

using FileKey = std::pair<dev_t, ino_t>;

}  // namespace

struct Session {
  uint64_t id = 0;
  uint64_t incarnation = 0;
  std::string node;
  std::string addr;
  std::set<uint64_t> conns;
  std::shared_ptr<m2m::Endpoint> ep;        // to the client's listen address
  std::shared_ptr<m2m::RemoteRegion> pool;  // the client's slots (null: inline only)
  uint64_t slot_size = 0;
  uint32_t slot_count = 0;
  std::unordered_map<uint64_t, Handle> handles;  // remote handle -> local
  std::unordered_map<uint64_t, std::string> paths;  // remote handle -> path opened
  bool callbacks = false;  // takes FsAttrChanged (said so in Hello, reachable at addr)
  // Remote handle or watch -> file, for what is told of changes.
  std::unordered_map<uint64_t, FileKey> keys;
  // Files watched for this session (Stat with `watch`): file -> its watch id
  // (from the handle counter), when it was made (FileService::Impl's
  // watch_gen_) and its place in watch_order (oldest first).
  struct Watch {
    uint64_t id = 0;
    uint64_t made = 0;
    std::list<FileKey>::iterator order;
  };
  std::map<FileKey, Watch> watches;
  std::list<FileKey> watch_order;
};

class FileService::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(FileServiceOptions o, m2m::Transport* t, NodeFs* local, Executor* blocking)
      : opts_(o), transport_(t), local_(local), blocking_(blocking), log_(Logger("fs")) {}

  // The FileService is going away (the Impl may live on inside the
  // transport's handlers): refuse everything from now on and release every
  // handle while local_ is still alive.
  void Stop() {
    stopped_.store(true);
    std::vector<Handle> all;
    {
      std::lock_guard lock(mu_);
      for (auto& [id, s] : sessions_) {
        for (auto& [rh, h] : s.handles) all.push_back(h);
        ForgetKeysLocked(s);
      }
      sessions_.clear();
    }
    for (Handle h : all) (void)local_->Release(h);
  }

  m2m::Transport* transport() const { return transport_; }
  NodeFs* local() const { return local_; }

  Status Init() { return slots_.Init(transport_, opts_.slot_size, opts_.slot_count); }

  // Progress context: verify, validate, post.
  void OnCall(m2m::IncomingCall call, m2m::Responder r) {
    const Clock::time_point arrival = Clock::now();
    if (stopped_.load()) {
      r.Fail(Error{ESHUTDOWN, "file service stopped"});
      return;
    }
    if (call.method == MethodId(RpcMethod::kFsHello)) {
      const auto* h = fswire::Verify<fb::FsHello>(call.payload);
      if (h == nullptr) return Refuse(call, r, Error{EPROTO, "malformed FsHello"});
      if (h->version() != fswire::kVersion) {
        return Refuse(call, r, Error{EPROTO, "unsupported fs wire version"});
      }
      blocking_->Post([self = shared_from_this(), call = std::move(call),
                       r = std::move(r)]() mutable { self->DoHello(std::move(call), r); });
      return;
    }
    const auto* req = fswire::Verify<fb::FsRequest>(call.payload);
    if (req == nullptr) return Refuse(call, r, Error{EPROTO, "malformed FsRequest"});
    if (auto st = fswire::CheckRequest(req); !st) return Refuse(call, r, st.error());
    blocking_->Post([self = shared_from_this(), call = std::move(call), r = std::move(r),
                     arrival]() mutable {
      const auto* req = flatbuffers::GetRoot<fb::FsRequest>(call.payload.data());
      if (self->stopped_.load()) {
        r.Fail(Error{ESHUTDOWN, "file service stopped"});
        return;
      }
      auto reply = self->Run(call.peer, req, arrival);
      self->served_.fetch_add(1, std::memory_order_relaxed);
      if (reply) {
        r.Reply(std::move(*reply));
      } else {
        if (reply.error().code == ENOENT) {
          self->log_->debug("{} from {}: {}", fb::EnumNameOp(req->op()), call.peer.remote_addr,
                            reply.error().ToString());
        }
        r.Fail(std::move(reply.error()));
      }
    });
  }

  void DropPeer(const std::string& node) {
    std::vector<Handle> release;
    {
      std::lock_guard lock(mu_);
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        if (it->second.node == node) {
          for (auto& [rh, h] : it->second.handles) release.push_back(h);
          ForgetKeysLocked(it->second);
          it = sessions_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (!release.empty()) log_->info("peer {}: released {} handles", node, release.size());
    for (Handle h : release) (void)local_->Release(h);
  }

  FileService::Stats stats() const {
    FileService::Stats s;
    std::lock_guard lock(mu_);
    s.sessions = sessions_.size();
    for (auto& [id, ss] : sessions_) {
      s.handles += ss.handles.size();
      s.watches += ss.watches.size();
    }
    s.refused = refused_.load();
    s.served = served_.load();
    s.callbacks_sent = callbacks_sent_.load();
    s.callbacks_failed = callbacks_failed_.load();
    s.inline_bytes = inline_bytes_.load();
    s.one_sided_bytes = one_sided_bytes_.load();
    return s;
  }

 private:
  void Refuse(const m2m::IncomingCall& call, m2m::Responder& r, Error e) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    log_->warn("refused request (method {}) from {} (conn {}): {}", call.method,
               call.peer.remote_addr, call.peer.conn_id, e.ToString());
    r.Fail(std::move(e));
  }

  void DoHello(m2m::IncomingCall call, m2m::Responder& r) {
    if (stopped_.load()) {
      r.Fail(Error{ESHUTDOWN, "file service stopped"});
      return;
    }
    const auto* h = flatbuffers::GetRoot<fb::FsHello>(call.payload.data());
    const std::string node = Str(h->client_node());
    const std::string addr = Str(h->client_addr());
    if (h->bye()) {
      std::vector<Handle> release;
      {
        std::lock_guard lock(mu_);
        auto it = sessions_.find(h->session());
        if (it != sessions_.end() && it->second.conns.count(call.peer.conn_id)) {
          for (auto& [rh, lh] : it->second.handles) release.push_back(lh);
          ForgetKeysLocked(it->second);
          sessions_.erase(it);
        }
      }
      for (Handle lh : release) (void)local_->Release(lh);
      r.Reply(HelloReply());
      return;
    }
    if (node.size() > 1024 || addr.size() > 1024) {
      return Refuse(call, r, Error{EINVAL, "oversized node id or address in FsHello"});
    }
    std::shared_ptr<m2m::Endpoint> ep;
    std::shared_ptr<m2m::RemoteRegion> pool;
    if (!addr.empty() && h->slot_count() > 0) {
      const uint64_t need = h->slot_size() * uint64_t{h->slot_count()};
      if (h->slot_size() == 0 || h->slot_size() > (1u << 30) || h->slot_count() > 4096 ||
          need > h->pool_length() || h->pool_rkey() == nullptr) {
        return Refuse(call, r, Error{EINVAL, "bad buffer pool in FsHello"});
      }
      ep = transport_->GetEndpoint(addr);
      m2m::RegionDesc d;
      d.addr = h->pool_addr();
      d.length = h->pool_length();
      const auto* k = reinterpret_cast<const std::byte*>(h->pool_rkey()->data());
      d.rkey.assign(k, k + h->pool_rkey()->size());
      auto imported = ep->Import(d);
      if (!imported) {
        log_->warn("hello from {} ({}): cannot import its pool: {}", node, call.peer.remote_addr,
                   imported.error().ToString());
        r.Fail(imported.error());
        return;
      }
      pool = std::move(*imported);
    } else if (!addr.empty() && h->attr_callbacks()) {
      ep = transport_->GetEndpoint(addr);
    }
    std::vector<Handle> release;
    {
      std::lock_guard lock(mu_);
      // A session of the same client node from another process incarnation:
      // that process is gone (restarted); release what it held.
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        if (it->second.node == node && it->second.incarnation != h->incarnation()) {
          for (auto& [rh, lh] : it->second.handles) release.push_back(lh);
          ForgetKeysLocked(it->second);
          it = sessions_.erase(it);
        } else {
          ++it;
        }
      }
      auto it = sessions_.find(h->session());
      if (it == sessions_.end()) {
        if (sessions_.size() >= opts_.max_sessions) {
          r.Fail(Error{EAGAIN, "too many file service sessions"});
          return;
        }
        it = sessions_.emplace(h->session(), Session{}).first;
        it->second.id = h->session();
      } else if (it->second.incarnation != h->incarnation() || it->second.node != node) {
        r.Fail(Error{EPERM, "session id belongs to another client"});
        return;
      }
      Session& s = it->second;
      s.incarnation = h->incarnation();
      s.node = node;
      s.addr = addr;
      s.conns.insert(call.peer.conn_id);
      s.callbacks = h->attr_callbacks() && ep != nullptr;
      s.ep = std::move(ep);
      s.pool = std::move(pool);
      s.slot_size = s.pool ? h->slot_size() : 0;
      s.slot_count = s.pool ? h->slot_count() : 0;
    }
    if (!release.empty()) {
      log_->info("client {} restarted: released {} handles of its old sessions", node,
                 release.size());
    }
    for (Handle lh : release) (void)local_->Release(lh);
    log_->debug("session {:x} of {} bound to conn {} ({})", h->session(), node,
                call.peer.conn_id, call.peer.remote_addr);
    r.Reply(HelloReply());
  }

  m2m::Bytes HelloReply() {
    flatbuffers::FlatBufferBuilder b(64);
    fb::FsHelloReplyBuilder hb(b);
    hb.add_version(fswire::kVersion);
    hb.add_max_io(std::min(opts_.slot_size, opts_.max_inline));
    b.Finish(hb.Finish());
    return fswire::Finish(b);
  }

  // What a data request needs from its session, copied under the lock.
  struct SessionView {
    std::shared_ptr<m2m::Endpoint> ep;
    std::shared_ptr<m2m::RemoteRegion> pool;
    uint64_t slot_size = 0;
    uint32_t slot_count = 0;
  };

  Result<SessionView> Bound(const m2m::PeerInfo& peer, uint64_t session) {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session);
    if (it == sessions_.end() || it->second.conns.count(peer.conn_id) == 0) {
      return Err(fswire::kErrSessionUnknown, "unknown file service session");
    }
    return SessionView{it->second.ep, it->second.pool, it->second.slot_size,
                       it->second.slot_count};
  }

  Result<Handle> Local(uint64_t session, uint64_t rh) {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session);
    if (it == sessions_.end()) return Err(EBADF, "no such handle");
    auto h = it->second.handles.find(rh);
    if (h == it->second.handles.end()) return Err(EBADF, "no such handle");
    return h->second;
  }

  // Records a newly opened local handle of the file `st` describes; releases
  // it again when the session vanished meanwhile or holds too many. The
  // session is told of the file's changes when it takes callbacks and the
  // file is a regular one (*callbacks).
  Result<uint64_t> AddHandle(uint64_t session, Handle lh, const std::string& path,
                             const struct stat& st, bool* callbacks) {
    {
      std::lock_guard lock(mu_);
      auto it = sessions_.find(session);
      if (it != sessions_.end() && it->second.handles.size() < opts_.max_handles_per_session) {
        Session& s = it->second;
        const uint64_t rh = ++next_handle_;
        s.handles.emplace(rh, lh);
        if (opts_.on_change) s.paths.emplace(rh, path);
        *callbacks = s.callbacks && S_ISREG(st.st_mode);
        if (*callbacks) {
          const FileKey key{st.st_dev, st.st_ino};
          s.keys.emplace(rh, key);
          openers_[key].emplace(session, rh);
          open_watched_.fetch_add(1, std::memory_order_relaxed);
        }
        return rh;
      }
    }
    (void)local_->Release(lh);
    return Err(EMFILE, "too many open handles for this session");
  }

  Result<Handle> TakeHandle(uint64_t session, uint64_t rh) {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session);
    if (it == sessions_.end()) return Err(EBADF, "no such handle");
    auto h = it->second.handles.find(rh);
    if (h == it->second.handles.end()) return Err(EBADF, "no such handle");
    Handle lh = h->second;
    it->second.handles.erase(h);
    it->second.paths.erase(rh);
    if (auto k = it->second.keys.find(rh); k != it->second.keys.end()) {
      ForgetOpenerLocked(k->second, session, rh);
      it->second.keys.erase(k);
    }
    return lh;
  }

  void ForgetOpenerLocked(const FileKey& key, uint64_t session, uint64_t rh) {
    auto o = openers_.find(key);
    if (o == openers_.end()) return;
    if (o->second.erase({session, rh}) > 0) open_watched_.fetch_sub(1, std::memory_order_relaxed);
    if (o->second.empty()) openers_.erase(o);
  }
  void ForgetKeysLocked(Session& s) {
    for (const auto& [rh, key] : s.keys) ForgetOpenerLocked(key, s.id, rh);
    s.keys.clear();
    s.watches.clear();
    s.watch_order.clear();
  }

  // Watches file `key` for `session` (it takes callbacks); nullopt if it
  // does not (or is gone). *fresh: the watch was made at or after `since`
  // (watch_gen_ + 1 when the request's stat began), so that stat may
  // predate it. *evicted: watches ended to stay within
  // max_watches_per_session, to be told (TellEnded).
  std::optional<uint64_t> WatchLocked(uint64_t session, const FileKey& key, uint64_t since,
                                      bool* fresh, std::vector<uint64_t>* evicted) {
    auto it = sessions_.find(session);
    if (it == sessions_.end() || !it->second.callbacks) return std::nullopt;
    Session& s = it->second;
    if (auto w = s.watches.find(key); w != s.watches.end()) {
      s.watch_order.splice(s.watch_order.end(), s.watch_order, w->second.order);
      *fresh = w->second.made >= since;
      return w->second.id;
    }
    if (s.watches.size() >= opts_.max_watches_per_session) {
      const size_t batch = std::max<size_t>(1, opts_.max_watches_per_session / 8);
      while (!s.watch_order.empty() &&
             s.watches.size() + batch > opts_.max_watches_per_session) {
        const FileKey old = s.watch_order.front();
        evicted->push_back(s.watches.at(old).id);
        UnwatchLocked(s, old);
      }
    }
    if (opts_.max_watches_per_session == 0) return std::nullopt;
    const uint64_t id = ++next_handle_;
    s.watch_order.push_back(key);
    s.watches.emplace(key, Session::Watch{id, watch_gen_.fetch_add(1) + 1,
                                          std::prev(s.watch_order.end())});
    s.keys.emplace(id, key);
    openers_[key].emplace(session, id);
    open_watched_.fetch_add(1, std::memory_order_relaxed);
    *fresh = true;
    return id;
  }
  void UnwatchLocked(Session& s, const FileKey& key) {
    auto w = s.watches.find(key);
    if (w == s.watches.end()) return;
    const uint64_t id = w->second.id;
    s.watch_order.erase(w->second.order);
    s.watches.erase(w);
    s.keys.erase(id);
    ForgetOpenerLocked(key, s.id, id);
  }

  // Stat with `watch` (see fs.fbs): the file is watched before the stat
  // whose answer is sent, so every change after that stat is told.
  Result<m2m::Bytes> WatchedStat(uint64_t session, const Cred& cred, const std::string& path) {
    const uint64_t since = watch_gen_.load() + 1;
    auto st = local_->Stat(cred, path);
    if (!st || !S_ISREG(st->st_mode) || st->st_nlink != 1) return StatOrErr(st);
    const FileKey key{st->st_dev, st->st_ino};
    bool fresh = false;
    std::vector<uint64_t> evicted;
    std::optional<uint64_t> id;
    {
      std::lock_guard lock(mu_);
      id = WatchLocked(session, key, since, &fresh, &evicted);
    }
    if (!evicted.empty()) TellEnded(session, std::move(evicted));
    if (!id) return StatOrErr(st);
    if (fresh) {
      // A change between the first stat and the watch (made by this request
      // or a concurrent one) was not told: stat again. Another file under
      // the name now: not watched.
      auto again = local_->Stat(cred, path);
      if (!again || again->st_dev != key.first || again->st_ino != key.second) {
        std::lock_guard lock(mu_);
        if (auto it = sessions_.find(session); it != sessions_.end()) {
          UnwatchLocked(it->second, key);
        }
        return StatOrErr(again);
      }
      st = again;
    }
    return OpenedReply(*id, *st, true);  // the watch is named like an open handle
  }

  // Tells `session` that watches `ids` ended (evicted), and waits for its
  // answer as AttrsChanged does.
  void TellEnded(uint64_t session, std::vector<uint64_t> ids) {
    std::vector<Target> targets;
    {
      std::lock_guard lock(mu_);
      auto s = sessions_.find(session);
      if (s == sessions_.end() || s->second.ep == nullptr) return;
      targets.push_back({session, s->second.ep, AttrChangedMessage(session, ids), s->second.node});
    }
    Tell(std::move(targets));
  }

 public:
  bool Interested() const { return open_watched_.load(std::memory_order_relaxed) > 0; }

  // Tells every other session that has file (dev, ino) open and takes
  // callbacks (one FsAttrChanged per session, in parallel), and waits for
  // their answers, each for at most callback_timeout. A session that does
  // not answer in time is logged and told nothing more (its later opens say
  // so): its node caches what it has for at most the client's bound
  // (docs/namespace.md), and a writer waits for it once, not per change.
  void AttrsChanged(dev_t dev, ino_t ino) {
    std::vector<Target> targets;
    {
      std::lock_guard lock(mu_);
      auto it = openers_.find({dev, ino});
      if (it == openers_.end()) return;
      std::map<uint64_t, std::vector<uint64_t>> by_session;
      for (const auto& [session, rh] : it->second) {
        if (session != t_serving_session) by_session[session].push_back(rh);
      }
      for (const auto& [session, rhs] : by_session) {
        auto s = sessions_.find(session);
        if (s == sessions_.end() || s->second.ep == nullptr) continue;
        targets.push_back(
            {session, s->second.ep, AttrChangedMessage(session, rhs), s->second.node});
      }
    }
    Tell(std::move(targets));
  }

 private:
  struct Target {
    uint64_t session = 0;
    std::shared_ptr<m2m::Endpoint> ep;
    m2m::Bytes msg;
    std::string node;
  };

  // Sends each target its FsAttrChanged (in parallel) and waits for the
  // answers, each for at most callback_timeout. A session that does not
  // answer in time is logged and told nothing more.
  void Tell(std::vector<Target> targets) {
    if (targets.empty()) return;
    callbacks_sent_.fetch_add(targets.size(), std::memory_order_relaxed);
    const auto answers = WaitForAll<Result<m2m::Bytes>>(
        targets.size(), [&](size_t i, m2m::Callback<m2m::Bytes> done) {
          targets[i].ep->Call(MethodId(RpcMethod::kFsAttrChanged), std::move(targets[i].msg),
                              opts_.callback_timeout, std::move(done));
        });
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < targets.size(); ++i) {
      if (answers[i]) continue;
      callbacks_failed_.fetch_add(1, std::memory_order_relaxed);
      log_->warn("telling {} of a file's change: {}; it is told no more", targets[i].node,
                 answers[i].error().ToString());
      if (auto s = sessions_.find(targets[i].session); s != sessions_.end()) {
        s->second.callbacks = false;
        ForgetKeysLocked(s->second);
      }
    }
  }

 private:
  static m2m::Bytes AttrChangedMessage(uint64_t session, const std::vector<uint64_t>& rhs) {
    flatbuffers::FlatBufferBuilder b(64 + 8 * rhs.size());
    auto v = b.CreateVector(rhs);
    fb::FsAttrChangedBuilder ab(b);
    ab.add_version(fswire::kVersion);
    ab.add_session(session);
    ab.add_handles(v);
    b.Finish(ab.Finish());
    return fswire::Finish(b);
  }

  static Result<m2m::Bytes> StatOrErr(const Result<struct stat>& r) {
    if (!r) return Err(r.error());
    return StatReply(*r);
  }
  static m2m::Bytes StatReply(const struct stat& st) {
    flatbuffers::FlatBufferBuilder b(256);
    auto w = fswire::ToWire(st);
    fb::FsReplyBuilder rb(b);
    rb.add_version(fswire::kVersion);
    rb.add_stat(&w);
    b.Finish(rb.Finish());
    return fswire::Finish(b);
  }
  static m2m::Bytes EmptyReply() {
    flatbuffers::FlatBufferBuilder b(32);
    fb::FsReplyBuilder rb(b);
    rb.add_version(fswire::kVersion);
    b.Finish(rb.Finish());
    return fswire::Finish(b);
  }
  static m2m::Bytes DataReply(std::span<const std::byte> data, uint64_t n) {
    flatbuffers::FlatBufferBuilder b(64 + data.size());
    auto d = b.CreateVector(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    fb::FsReplyBuilder rb(b);
    rb.add_version(fswire::kVersion);
    rb.add_data(d);
    rb.add_n(n);
    b.Finish(rb.Finish());
    return fswire::Finish(b);
  }
  static m2m::Bytes CountReply(uint64_t n) {
    flatbuffers::FlatBufferBuilder b(32);
    fb::FsReplyBuilder rb(b);
    rb.add_version(fswire::kVersion);
    rb.add_n(n);
    b.Finish(rb.Finish());
    return fswire::Finish(b);
  }
  static m2m::Bytes OpenedReply(uint64_t rh, const struct stat& st, bool callbacks) {
    flatbuffers::FlatBufferBuilder b(256);
    auto w = fswire::ToWire(st);
    fb::FsReplyBuilder rb(b);
    rb.add_version(fswire::kVersion);
    rb.add_stat(&w);
    rb.add_handle(rh);
    rb.add_attr_callbacks(callbacks);
    b.Finish(rb.Finish());
    return fswire::Finish(b);
  }

  // The path opened as remote handle `rh` of `session` ("" if unknown).
  std::string HandlePath(uint64_t session, uint64_t rh) {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session);
    if (it == sessions_.end()) return {};
    auto p = it->second.paths.find(rh);
    return p == it->second.paths.end() ? std::string() : p->second;
  }

  // Runs `req`, then tells on_change about what a successful request may
  // have changed the attributes of (docs/namespace.md, "Kernel caches").
  Result<m2m::Bytes> Run(const m2m::PeerInfo& peer, const fb::FsRequest* req,
                         Clock::time_point arrival) {
    t_serving_session = req->session();
    Result<m2m::Bytes> r = RunOp(peer, req, arrival);
    t_serving_session = 0;
    if (!r || !opts_.on_change) return r;
    switch (req->op()) {
      case fb::Op::kSetAttr:
      case fb::Op::kSetXattr:
      case fb::Op::kRemoveXattr:
      case fb::Op::kLink:
        opts_.on_change(Str(req->path()));
        break;
      case fb::Op::kOpen:
      case fb::Op::kCreate:
        if (req->flags() & O_TRUNC) opts_.on_change(Str(req->path()));
        break;
      case fb::Op::kWrite:
      case fb::Op::kFallocate:
        if (std::string p = HandlePath(req->session(), req->handle()); !p.empty()) {
          opts_.on_change(p);
        }
        break;
      default:
        break;
    }
    return r;
  }

  Result<m2m::Bytes> RunOp(const m2m::PeerInfo& peer, const fb::FsRequest* req,
                           Clock::time_point arrival) {
    const uint64_t session = req->session();
    auto view = Bound(peer, session);
    if (!view) return Err(view.error());
    const Cred asked = fswire::FromWire(req->cred());
    const Cred cred = SquashCred(opts_, asked);
    const std::string path = Str(req->path());
    auto budget = std::chrono::microseconds(
        std::min<uint64_t>(req->budget_us(), 600'000'000ull));
    if (budget.count() == 0) budget = opts_.transfer_timeout;
    const Clock::time_point deadline = arrival + budget;

    auto status_or = [](Status s) -> Result<m2m::Bytes> {
      if (!s) return Err(s.error());
      return EmptyReply();
    };
    auto handle = [&]() { return Local(session, req->handle()); };

    switch (req->op()) {
      case fb::Op::kStat:
        if (req->watch()) return WatchedStat(session, cred, path);
        return StatOrErr(local_->Stat(cred, path));
      case fb::Op::kAccess:
        return status_or(local_->Access(cred, path, req->flags()));
      case fb::Op::kListDir: {
        auto r = local_->ListDir(cred, path);
        if (!r) return Err(r.error());
        flatbuffers::FlatBufferBuilder b(64 + r->size() * 48);
        std::vector<flatbuffers::Offset<fb::DirEntry>> es;
        es.reserve(r->size());
        for (const DirEntry& e : *r) {
          es.push_back(fb::CreateDirEntry(b, b.CreateString(e.name), e.type, e.ino));
        }
        auto v = b.CreateVector(es);
        fb::FsReplyBuilder rb(b);
        rb.add_version(fswire::kVersion);
        rb.add_entries(v);
        b.Finish(rb.Finish());
        return fswire::Finish(b);
      }
      case fb::Op::kMkdir:
        return StatOrErr(local_->Mkdir(cred, path, req->mode()));
      case fb::Op::kMkdirParents: {
        std::vector<NodeFs::DirTemplate> t;
        if (req->templates()) {
          for (const fb::DirTemplate* d : *req->templates()) {
            t.push_back({static_cast<mode_t>(d->mode()), d->uid(), d->gid()});
          }
        }
        return status_or(local_->MkdirParents(path, t));
      }
      case fb::Op::kRmdir:
        return status_or(local_->Rmdir(cred, path));
      case fb::Op::kMknod:
        return StatOrErr(local_->Mknod(cred, path, req->mode(), req->rdev()));
      case fb::Op::kSymlink:
        return StatOrErr(local_->Symlink(cred, Str(req->target()), path));
      case fb::Op::kReadlink: {
        auto r = local_->Readlink(cred, path);
        if (!r) return Err(r.error());
        return DataReply(std::as_bytes(std::span(*r)), r->size());
      }
      case fb::Op::kUnlink:
        return status_or(local_->Unlink(cred, path));
      case fb::Op::kRename:
        return status_or(local_->Rename(cred, path, Str(req->path2()), req->flags()));
      case fb::Op::kLink:
        return StatOrErr(local_->Link(cred, path, Str(req->path2())));
      case fb::Op::kSetAttr: {
        std::optional<Handle> h;
        if (req->has_handle()) {
          auto lh = handle();
          if (!lh) return Err(lh.error());
          h = *lh;
        }
        SetAttrRequest sa;
        const uint32_t m = req->setattr_mask();
        if (m & fswire::kSaMode) sa.mode = req->sa_mode();
        if (m & fswire::kSaUid) sa.uid = req->sa_uid();
        if (m & fswire::kSaGid) sa.gid = req->sa_gid();
        if (m & fswire::kSaSize) sa.size = req->sa_size();
        if (m & fswire::kSaAtime) sa.atime = timespec{req->sa_atime_sec(), req->sa_atime_nsec()};
        if (m & fswire::kSaMtime) sa.mtime = timespec{req->sa_mtime_sec(), req->sa_mtime_nsec()};
        return StatOrErr(local_->SetAttr(cred, path, h, sa));
      }
      case fb::Op::kStatFs: {
        auto r = local_->StatFs();
        if (!r) return Err(r.error());
        flatbuffers::FlatBufferBuilder b(128);
        auto w = fswire::ToWire(*r);
        fb::FsReplyBuilder rb(b);
        rb.add_version(fswire::kVersion);
        rb.add_statvfs(&w);
        b.Finish(rb.Finish());
        return fswire::Finish(b);
      }
      case fb::Op::kGetXattr:
      case fb::Op::kListXattr: {
        size_t needed = 0;
        const size_t size = std::min<uint64_t>(req->length(), 1u << 20);
        auto r = req->op() == fb::Op::kGetXattr
                     ? local_->GetXattr(cred, path, Str(req->target()), size, &needed)
                     : local_->ListXattr(cred, path, size, &needed);
        if (!r) return Err(r.error());
        return DataReply(std::as_bytes(std::span(*r)), needed);
      }
      case fb::Op::kSetXattr: {
        std::span<const std::byte> v;
        if (req->data()) v = std::as_bytes(std::span(req->data()->data(), req->data()->size()));
        return status_or(local_->SetXattr(cred, path, Str(req->target()), v, req->flags()));
      }
      case fb::Op::kRemoveXattr:
        return status_or(local_->RemoveXattr(cred, path, Str(req->target())));
      case fb::Op::kOpen:
      case fb::Op::kCreate: {
        auto r = req->op() == fb::Op::kOpen ? local_->Open(cred, path, req->flags())
                                            : local_->Create(cred, path, req->flags(), req->mode());
        if (!r) return Err(r.error());
        bool callbacks = false;
        auto rh = AddHandle(session, r->handle, path, r->st, &callbacks);
        if (!rh) return Err(rh.error());
        return OpenedReply(*rh, r->st, callbacks);
      }
      case fb::Op::kRead:
        return DoRead(*view, req, deadline, session);
      case fb::Op::kWrite:
        // A squashed root has no CAP_FSETID here (the squash uid's rights).
        return DoWrite(*view, req, deadline, session,
                       Writer{req->kill_setid() || (asked.uid == 0 && cred.uid != 0), cred});
      case fb::Op::kFlush: {
        auto h = handle();
        if (!h) return Err(h.error());
        return status_or(local_->Flush(*h, req->owner()));
      }
      case fb::Op::kFsync: {
        auto h = handle();
        if (!h) return Err(h.error());
        return status_or(local_->Fsync(*h, req->flags() != 0));
      }
      case fb::Op::kFallocate: {
        auto h = handle();
        if (!h) return Err(h.error());
        return status_or(local_->Fallocate(*h, req->flags(), req->offset(), req->length()));
      }
      case fb::Op::kRelease: {
        auto h = TakeHandle(session, req->handle());
        if (!h) return Err(h.error());
        return status_or(local_->Release(*h));
      }
      case fb::Op::kGetLk:
      case fb::Op::kSetLk: {
        auto h = handle();
        if (!h) return Err(h.error());
        LockRange want{req->lock_type(), req->lock_start(), req->lock_len(), req->lock_pid()};
        if (req->op() == fb::Op::kSetLk) return status_or(local_->SetLk(*h, req->owner(), want));
        auto r = local_->GetLk(*h, req->owner(), want);
        if (!r) return Err(r.error());
        flatbuffers::FlatBufferBuilder b(64);
        fb::FsReplyBuilder rb(b);
        rb.add_version(fswire::kVersion);
        rb.add_lock_type(r->type);
        rb.add_lock_start(r->start);
        rb.add_lock_len(r->len);
        rb.add_lock_pid(r->pid);
        b.Finish(rb.Finish());
        return fswire::Finish(b);
      }
      case fb::Op::kFlock: {
        auto h = handle();
        if (!h) return Err(h.error());
        return status_or(local_->Flock(*h, req->owner(), req->flags()));
      }
      default:
        return Err(EPROTO, "unknown op");
    }
  }

  // Checks a slot request against the session's pool and the server's slots.
  Status CheckSlot(const SessionView& v, const fb::FsRequest* req) {
    if (!v.pool) return Err(EINVAL, "slot named but the session has no buffer pool");
    if (req->slot() >= static_cast<int64_t>(v.slot_count)) return Err(EINVAL, "bad slot");
    if (req->length() > v.slot_size || req->length() > opts_.slot_size) {
      return Err(EINVAL, "length over the slot size");
    }
    return Ok();
  }

  std::chrono::nanoseconds Remaining(Clock::time_point deadline) {
    return std::min<std::chrono::nanoseconds>(deadline - Clock::now(), opts_.transfer_timeout);
  }

  Result<m2m::Bytes> DoRead(const SessionView& v, const fb::FsRequest* req,
                            Clock::time_point deadline, uint64_t session) {
    auto h = Local(session, req->handle());
    if (!h) return Err(h.error());
    if (req->slot() < 0) {
      if (req->length() > opts_.max_inline) return Err(EINVAL, "inline read over the limit");
      std::vector<std::byte> buf(req->length());
      auto n = local_->Read(*h, req->offset(), buf);
      if (!n) return Err(n.error());
      inline_bytes_.fetch_add(*n, std::memory_order_relaxed);
      return DataReply(std::span(buf.data(), *n), *n);
    }
    if (auto st = CheckSlot(v, req); !st) return Err(st.error());
    SlotRef mine{&slots_, slots_.Acquire(deadline)};
    if (mine.slot < 0) return Err(ETIMEDOUT, "no free server slot before the deadline");
    std::byte* buf = slots_.slot(mine.slot);
    auto n = local_->Read(*h, req->offset(), std::span(buf, req->length()));
    if (!n) return Err(n.error());
    if (*n > 0) {
      if (Clock::now() >= deadline) return Err(ETIMEDOUT, "read: the client's deadline passed");
      auto st = m2m::PutSync(*v.ep, buf, *n, *v.pool, uint64_t(req->slot()) * v.slot_size,
                             Remaining(deadline));
      if (!st) return Err(st.error());
      one_sided_bytes_.fetch_add(*n, std::memory_order_relaxed);
    }
    return CountReply(*n);
  }

  Result<m2m::Bytes> DoWrite(const SessionView& v, const fb::FsRequest* req,
                             Clock::time_point deadline, uint64_t session, const Writer& by) {
    auto h = Local(session, req->handle());
    if (!h) return Err(h.error());
    if (req->slot() < 0) {
      std::span<const std::byte> d;
      if (req->data()) d = std::as_bytes(std::span(req->data()->data(), req->data()->size()));
      inline_bytes_.fetch_add(d.size(), std::memory_order_relaxed);
      auto n = local_->Write(*h, req->offset(), d, by);
      if (!n) return Err(n.error());
      return CountReply(*n);
    }
    if (auto st = CheckSlot(v, req); !st) return Err(st.error());
    SlotRef mine{&slots_, slots_.Acquire(deadline)};
    if (mine.slot < 0) return Err(ETIMEDOUT, "no free server slot before the deadline");
    std::byte* buf = slots_.slot(mine.slot);
    const size_t len = req->length();
    if (len > 0) {
      auto st = m2m::GetSync(*v.ep, buf, len, *v.pool, uint64_t(req->slot()) * v.slot_size,
                             Remaining(deadline));
      if (!st) return Err(st.error());
      one_sided_bytes_.fetch_add(len, std::memory_order_relaxed);
    }
    // Past the deadline the client may already reuse its slot: the bytes we
    // fetched are then not known to be the ones it meant. Never write them.
    if (Clock::now() >= deadline) return Err(ETIMEDOUT, "write: the client's deadline passed");
    auto n = local_->Write(*h, req->offset(), std::span<const std::byte>(buf, len), by);
    if (!n) return Err(n.error());
    return CountReply(*n);
  }

  const FileServiceOptions opts_;
  m2m::Transport* const transport_;
  NodeFs* const local_;
  Executor* const blocking_;
  std::shared_ptr<spdlog::logger> log_;
  SlotPool slots_;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> served_{0};
  std::atomic<uint64_t> callbacks_sent_{0};
  std::atomic<uint64_t> callbacks_failed_{0};
  std::atomic<uint64_t> inline_bytes_{0};
  std::atomic<uint64_t> one_sided_bytes_{0};

  mutable std::mutex mu_;  // leaf lock: never held across a call into local_ or the transport
  std::unordered_map<uint64_t, Session> sessions_;  // guarded by mu_
  uint64_t next_handle_ = 0;                        // guarded by mu_
  // Who has each file open and is told of its changes: (session, handle).
  std::map<FileKey, std::set<std::pair<uint64_t, uint64_t>>> openers_;  // guarded by mu_
  std::atomic<size_t> open_watched_{0};  // entries in openers_
  std::atomic<uint64_t> watch_gen_{0};    // watches made so far (Session::Watch::made)
};

Cred SquashCred(const FileServiceOptions& o, Cred c) {
  if (!o.root_squash) return c;
  if (c.uid == 0) c.uid = o.squash_uid;
  if (c.gid == 0) c.gid = o.squash_gid;
  std::erase(c.groups, 0u);
  return c;
}

FileService::FileService(FileServiceOptions options, m2m::Transport* transport, NodeFs* local,
                         Executor* blocking)
    : impl_(std::make_shared<Impl>(options, transport, local, blocking)) {}

FileService::~FileService() { impl_->Stop(); }

Status FileService::RegisterHandlers() {
  if (auto st = impl_->Init(); !st) return st;
  // The handlers hold the Impl alive for as long as the transport keeps them.
  for (RpcMethod m : {RpcMethod::kFsHello, RpcMethod::kFsMeta, RpcMethod::kFsData}) {
    impl_->transport()->Handle(MethodId(m), [impl = impl_](m2m::IncomingCall c, m2m::Responder r) {
      impl->OnCall(std::move(c), std::move(r));
    });
  }
  return Ok();
}

void FileService::DropPeer(const std::string& client_node) { impl_->DropPeer(client_node); }

bool FileService::Interested() const { return impl_->Interested(); }

void FileService::AttrsChanged(dev_t dev, ino_t ino) { impl_->AttrsChanged(dev, ino); }

void FileService::PathChanged(const std::string& path) {
  if (!impl_->Interested()) return;
  if (auto st = impl_->local()->Stat(Cred{}, path); st && S_ISREG(st->st_mode)) {
    impl_->AttrsChanged(st->st_dev, st->st_ino);
  }
}

FileService::Stats FileService::stats() const { return impl_->stats(); }

}  // namespace fedfs::ns
