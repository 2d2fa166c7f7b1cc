// FileService (files/file_service.h): sessions, handles, watches and callbacks; the
// Impl's declaration is in file_service_impl.h.
#include "files/file_service_impl.h"

#include <dirent.h>

#include <algorithm>

namespace fedfs::ns {

using namespace files_detail;

namespace {
// Closes the local handles of sessions that end. LocalNodeFs::Release fails
// only for a handle it does not know, and these come from the session
// table: there is nothing to undo and no one to tell.
void ReleaseAll(NodeFs& local, const std::vector<Handle>& handles) {
  for (Handle h : handles) local.Release(h).IgnoreError();
}
}  // namespace

void FileService::Impl::Stop() {
  {
    std::lock_guard lock(sweep_mu_);
    stopped_.store(true);
  }
  sweep_cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
  std::vector<Handle> all;
  {
    MutexLock lock(mu_);
    for (auto& [id, s] : sessions_) {
      for (auto& [rh, h] : s.handles) all.push_back(h);
      ForgetKeysLocked(s);
    }
    sessions_.clear();
  }
  ReleaseAll(*local_, all);
}

void FileService::Impl::OnCall(m2m::IncomingCall call, m2m::Responder r) {
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
  blocking_->Post(
      [self = shared_from_this(), call = std::move(call), r = std::move(r), arrival]() mutable {
        const auto* req = flatbuffers::GetRoot<fb::FsRequest>(call.payload.data());
        if (self->stopped_.load()) {
          r.Fail(Error{ESHUTDOWN, "file service stopped"});
          return;
        }
        auto serve = [&](m2m::Callback<m2m::Bytes> answer) {
          auto reply = self->Run(call.peer, req, arrival);
          self->served_.fetch_add(1, std::memory_order_relaxed);
          if (!reply && reply.error().code == ENOENT) {
            self->log_->debug("{} from {}: {}", fb::EnumNameOp(req->op()), call.peer.remote_addr,
                              reply.error().ToString());
          }
          answer(std::move(reply));
        };
        if (req->request_id() == 0) {
          return serve([&r](Result<m2m::Bytes> reply) {
            if (!reply) return r.Fail(std::move(reply.error()));
            r.Reply(std::move(*reply));
          });
        }
        // A resend after a lost message is answered the first answer.
        self->answered_.ServeOnce(std::to_string(req->session()), req->request_id(),
                                  std::move(r), std::move(serve));
      });
}

void FileService::Impl::StartSweeper() {
  if (opts_.session_lease.count() <= 0) return;
  sweeper_ = std::thread([this] {
    const auto period = std::max(opts_.session_lease / 4, std::chrono::milliseconds(10));
    std::unique_lock lock(sweep_mu_);
    while (!stopped_.load()) {
      sweep_cv_.wait_for(lock, period, [&] { return stopped_.load(); });
      if (stopped_.load()) break;
      lock.unlock();
      ExpireSessions(Clock::now());
      lock.lock();
    }
  });
}

size_t FileService::Impl::ExpireSessions(Clock::time_point now) {
  std::vector<Handle> release;
  std::vector<std::shared_ptr<m2m::Endpoint>> back;
  std::vector<std::pair<std::string, size_t>> ended;  // (node, handles)
  {
    MutexLock lock(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (now - it->second.seen <= opts_.session_lease) {
        ++it;
        continue;
      }
      Session& s = it->second;
      ended.emplace_back(s.node, s.handles.size());
      for (auto& [rh, h] : s.handles) release.push_back(h);
      ForgetKeysLocked(s);
      dir_.DropSession(s.id);
      if (s.ep) back.push_back(std::move(s.ep));
      it = sessions_.erase(it);
    }
  }
  for (const auto& [node, handles] : ended) {
    log_->info("session of {} not renewed for {} ms: ended, {} handles released", node,
               opts_.session_lease.count(), handles);
  }
  ReleaseAll(*local_, release);
  // The connection back to the client (callbacks, one-sided transfers): its
  // next use connects again.
  for (auto& ep : back) ep->Disconnect();
  sessions_expired_.fetch_add(ended.size(), std::memory_order_relaxed);
  return ended.size();
}

void FileService::Impl::DropPeer(const std::string& node) {
  std::vector<Handle> release;
  {
    MutexLock lock(mu_);
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
  ReleaseAll(*local_, release);
}

auto FileService::Impl::stats() const -> FileService::Stats {
  FileService::Stats s;
  MutexLock lock(mu_);
  s.sessions = sessions_.size();
  for (auto& [id, ss] : sessions_) {
    s.handles += ss.handles.size();
    s.watches += ss.watches.size();
  }
  s.refused = refused_.load();
  s.served = served_.load();
  s.callbacks_sent = callbacks_sent_.load();
  s.callbacks_failed = callbacks_failed_.load();
  s.pinned = pins_made_.load();
  s.lease_waits = lease_waits_.load();
  s.inline_bytes = inline_bytes_.load();
  s.one_sided_bytes = one_sided_bytes_.load();
  s.coop_redirects = coop_redirects_.load();
  const coop::HolderDirectory::Stats d = dir_.stats();
  s.coop_files = d.files;
  s.coop_copies = d.copies;
  s.coop_forward_asked = coop_forward_asked_.load();
  s.coop_stored = coop_stored_.load();
  s.sessions_expired = sessions_expired_.load();
  return s;
}

void FileService::Impl::Refuse(const m2m::IncomingCall& call, m2m::Responder& r, Error e) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  log_->warn("refused request (method {}) from {} (conn {}): {}", call.method,
             call.peer.remote_addr, call.peer.conn_id, e.ToString());
  r.Fail(std::move(e));
}

void FileService::Impl::DoHello(m2m::IncomingCall call, m2m::Responder& r) {
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
      MutexLock lock(mu_);
      auto it = sessions_.find(h->session());
      if (it != sessions_.end() && it->second.conns.count(call.peer.conn_id)) {
        for (auto& [rh, lh] : it->second.handles) release.push_back(lh);
        ForgetKeysLocked(it->second);
        sessions_.erase(it);
      }
    }
    ReleaseAll(*local_, release);
    r.Reply(HelloReply());
    return;
  }
  if (node.size() > 1024 || addr.size() > 1024) {
    return Refuse(call, r, Error{EINVAL, "oversized node id or address in FsHello"});
  }
  if (h->session() == kSelfSession) {
    return Refuse(call, r, Error{EINVAL, "session 0 is this node's own (FsHello)"});
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
  // The client's cache, for other clients to read one-sidedly.
  uint64_t cache_block = 0;
  m2m::RegionDesc cache_data, cache_tags;
  if (ep != nullptr && h->cache_block() > 0 && h->cache_rkey() != nullptr &&
      h->tags_rkey() != nullptr) {
    if ((h->cache_block() & (h->cache_block() - 1)) != 0 || h->cache_block() > (1u << 26) ||
        h->cache_rkey()->size() > 4096 || h->tags_rkey()->size() > 4096) {
      return Refuse(call, r, Error{EINVAL, "bad cache region in FsHello"});
    }
    cache_block = h->cache_block();
    cache_data.addr = h->cache_addr();
    cache_data.length = h->cache_length();
    const auto* k = reinterpret_cast<const std::byte*>(h->cache_rkey()->data());
    cache_data.rkey.assign(k, k + h->cache_rkey()->size());
    cache_tags.addr = h->tags_addr();
    cache_tags.length = h->tags_length();
    const auto* t = reinterpret_cast<const std::byte*>(h->tags_rkey()->data());
    cache_tags.rkey.assign(t, t + h->tags_rkey()->size());
  }
  std::vector<Handle> release;
  bool continued = false;
  {
    MutexLock lock(mu_);
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
    // Continued: the same session, told of every change it asks for (a
    // failed callback turned its callbacks off: then not).
    continued = it != sessions_.end() && it->second.incarnation == h->incarnation() &&
                it->second.node == node &&
                it->second.callbacks == (h->attr_callbacks() && ep != nullptr);
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
    s.seen = Clock::now();
    s.incarnation = h->incarnation();
    s.node = node;
    s.addr = addr;
    s.conns.insert(call.peer.conn_id);
    s.callbacks = h->attr_callbacks() && ep != nullptr;
    s.untold = false;
    s.ep = std::move(ep);
    s.pool = std::move(pool);
    s.slot_size = s.pool ? h->slot_size() : 0;
    s.slot_count = s.pool ? h->slot_count() : 0;
    if (s.cache_block != cache_block || s.cache_data.rkey != cache_data.rkey) {
      dir_.DropSession(s.id);  // copies named in the regions it had before
    }
    s.cache_block = cache_block;
    s.cache_data = std::move(cache_data);
    s.cache_tags = std::move(cache_tags);
  }
  if (!release.empty()) {
    log_->info("client {} restarted: released {} handles of its old sessions", node,
               release.size());
  }
  ReleaseAll(*local_, release);
  log_->debug("session {:x} of {} bound to conn {} ({})", h->session(), node, call.peer.conn_id,
              call.peer.remote_addr);
  r.Reply(HelloReply(continued));
}

auto FileService::Impl::HelloReply(bool continued) -> m2m::Bytes {
  flatbuffers::FlatBufferBuilder b(64);
  fb::FsHelloReplyBuilder hb(b);
  hb.add_version(fswire::kVersion);
  hb.add_continued(continued);
  hb.add_max_io(std::min(opts_.slot_size, opts_.max_inline));
  hb.add_releases(true);
  hb.add_session_lease_ms(static_cast<uint64_t>(opts_.session_lease.count()));
  hb.add_cache_lease_ms(static_cast<uint64_t>(opts_.cache_lease.count()));
  b.Finish(hb.Finish());
  return fswire::Finish(b);
}

auto FileService::Impl::Bound(const m2m::PeerInfo& peer, uint64_t session) -> Result<SessionView> {
  MutexLock lock(mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end() || it->second.conns.count(peer.conn_id) == 0) {
    return Err(fswire::kErrSessionUnknown, "unknown file service session");
  }
  if (it->second.untold) {
    return Err(fswire::kErrSessionUnknown, "session told no more of changes: say Hello again");
  }
  it->second.seen = Clock::now();  // renewed
  return SessionView{it->second.cache_block, it->second.ep, it->second.pool, it->second.slot_size,
                     it->second.slot_count};
}

auto FileService::Impl::Local(uint64_t session, uint64_t rh) -> Result<Handle> {
  MutexLock lock(mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return Err(EBADF, "no such handle");
  auto h = it->second.handles.find(rh);
  if (h == it->second.handles.end()) return Err(EBADF, "no such handle");
  return h->second;
}

auto FileService::Impl::AddHandle(uint64_t session, Handle lh, const std::string& path,
                                  const struct stat& st, bool* callbacks) -> Result<uint64_t> {
  {
    MutexLock lock(mu_);
    auto it = sessions_.find(session);
    if (it != sessions_.end() && it->second.handles.size() < opts_.max_handles_per_session) {
      Session& s = it->second;
      const uint64_t rh = ++next_handle_;
      s.handles.emplace(rh, lh);
      if (opts_.on_change || opts_.on_access) s.paths.emplace(rh, path);
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
  local_->Release(lh).IgnoreError();  // just opened here: LocalNodeFs knows it, cannot refuse
  return Err(EMFILE, "too many open handles for this session");
}

auto FileService::Impl::TakeHandle(uint64_t session, uint64_t rh) -> Result<Handle> {
  MutexLock lock(mu_);
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

void FileService::Impl::ForgetOpenerLocked(const FileKey& key, uint64_t session, uint64_t rh) {
  auto o = openers_.find(key);
  if (o == openers_.end()) return;
  if (o->second.erase({session, rh}) > 0) open_watched_.fetch_sub(1, std::memory_order_relaxed);
  if (o->second.empty()) openers_.erase(o);
}

void FileService::Impl::ForgetKeysLocked(Session& s) {
  dir_.DropSession(s.id);  // called wherever a session ends
  for (const auto& [rh, key] : s.keys) ForgetOpenerLocked(key, s.id, rh);
  s.keys.clear();
  s.watches.clear();
  s.watch_order.clear();
}

auto FileService::Impl::WatchLocked(uint64_t session, const FileKey& key, uint64_t since,
                                    bool* fresh, std::vector<uint64_t>* evicted)
    -> std::optional<uint64_t> {
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
    while (!s.watch_order.empty() && s.watches.size() + batch > opts_.max_watches_per_session) {
      const FileKey old = s.watch_order.front();
      evicted->push_back(s.watches.at(old).id);
      UnwatchLocked(s, old);
    }
  }
  if (opts_.max_watches_per_session == 0) return std::nullopt;
  const uint64_t id = ++next_handle_;
  s.watch_order.push_back(key);
  s.watches.emplace(
      key, Session::Watch{id, watch_gen_.fetch_add(1) + 1, std::prev(s.watch_order.end())});
  s.keys.emplace(id, key);
  openers_[key].emplace(session, id);
  open_watched_.fetch_add(1, std::memory_order_relaxed);
  *fresh = true;
  return id;
}

void FileService::Impl::UnwatchLocked(Session& s, const FileKey& key) {
  auto w = s.watches.find(key);
  if (w == s.watches.end()) return;
  const uint64_t id = w->second.id;
  s.watch_order.erase(w->second.order);
  s.watches.erase(w);
  s.keys.erase(id);
  ForgetOpenerLocked(key, s.id, id);
}

auto FileService::Impl::StatAndWatch(uint64_t session, const Cred& cred, const std::string& path)
    -> Result<Watched> {
  const uint64_t since = watch_gen_.load() + 1;
  auto st = local_->Stat(cred, path);
  if (!st) return Err(st.error());
  if (!S_ISREG(st->st_mode) || st->st_nlink != 1) return Watched{*st, std::nullopt};
  const FileKey key{st->st_dev, st->st_ino};
  bool fresh = false;
  std::vector<uint64_t> evicted;
  std::optional<uint64_t> id;
  {
    MutexLock lock(mu_);
    id = WatchLocked(session, key, since, &fresh, &evicted);
  }
  if (!evicted.empty()) TellEnded(session, std::move(evicted));
  if (!id) return Watched{*st, std::nullopt};
  if (fresh) {
    // A change between the first stat and the watch (made by this request
    // or a concurrent one) was not told: stat again. Another file under
    // the name now: not watched.
    auto again = local_->Stat(cred, path);
    if (!again || again->st_dev != key.first || again->st_ino != key.second) {
      MutexLock lock(mu_);
      if (auto it = sessions_.find(session); it != sessions_.end()) {
        UnwatchLocked(it->second, key);
      }
      if (!again) return Err(again.error());
      return Watched{*again, std::nullopt};
    }
    st = again;
    KeepFileHandle(session, key, *id, path);
  }
  return Watched{*st, id};
}

void FileService::Impl::KeepFileHandle(uint64_t session, const FileKey& key, uint64_t watch,
                                       const std::string& path) {
  auto fh = local_->FileHandleOf(path);
  if (!fh) return;
  MutexLock lock(mu_);
  if (auto it = sessions_.find(session); it != sessions_.end()) {
    if (auto w = it->second.watches.find(key); w != it->second.watches.end() && w->second.id == watch) {
      w->second.file_handle = std::move(*fh);
    }
  }
}

auto FileService::Impl::WatchedStat(uint64_t session, const Cred& cred, const std::string& path)
    -> Result<m2m::Bytes> {
  auto w = StatAndWatch(session, cred, path);
  if (!w) return Err(w.error());
  if (!w->id) return StatOrErr(w->st);
  return OpenedReply(*w->id, w->st, true);  // the watch is named like an open handle
}

auto FileService::Impl::StatMany(uint64_t session, const Cred& cred, const std::string& dir,
                                 const std::string& first, size_t along) -> Result<m2m::Bytes> {
  std::vector<std::string> names{first};
  // The regular files after `first` (files/name_windows.h), if the caller
  // may list the directory (none otherwise).
  if (along > 0 && local_->Access(cred, dir, R_OK)) {
    auto after = windows_.After(dir, first, along, [&] { return local_->ListDir(cred, dir); });
    names.insert(names.end(), std::make_move_iterator(after.begin()),
                 std::make_move_iterator(after.end()));
  }
  flatbuffers::FlatBufferBuilder b(64 + names.size() * 200);
  std::vector<flatbuffers::Offset<fb::NamedStat>> out;
  out.reserve(names.size());
  for (const std::string& n : names) {
    auto w = StatAndWatch(session, cred, JoinPath(dir, n));
    if (!w && n != first) continue;  // gone meanwhile
    const auto name = b.CreateString(n);
    fb::NamedStatBuilder nb(b);
    nb.add_name(name);
    if (!w) {
      nb.add_err(w.error().code);
    } else {
      const fb::Stat st = fswire::ToWire(w->st);
      nb.add_stat(&st);
      if (w->id) {
        nb.add_attr_callbacks(true);
        nb.add_watch(*w->id);
      }
    }
    out.push_back(nb.Finish());
  }
  auto v = b.CreateVector(out);
  fb::FsReplyBuilder rb(b);
  rb.add_version(fswire::kVersion);
  rb.add_stats(v);
  b.Finish(rb.Finish());
  return fswire::Finish(b);
}

void FileService::Impl::TellEnded(uint64_t session, std::vector<uint64_t> ids) {
  std::vector<Target> targets;
  {
    MutexLock lock(mu_);
    auto s = sessions_.find(session);
    if (s == sessions_.end() || s->second.ep == nullptr) return;
    targets.push_back(
        {session, s->second.ep, AttrChangedMessage(session, ids, DataRange{}, true), s->second.node});
  }
  Tell(std::move(targets));
}

void FileService::Impl::AttrsChanged(dev_t dev, ino_t ino, DataRange data) {
  // No reader is sent to a copy of the file's blocks from before the change.
  if (!data.empty()) {
    dir_.DropRange(coop::FileId{static_cast<uint64_t>(dev), static_cast<uint64_t>(ino)},
                   data.offset, data.length);
  }
  std::vector<Target> targets;
  std::vector<std::pair<uint64_t, uint64_t>> unsent;  // pins of sessions not told: released
  {
    MutexLock lock(mu_);
    const FileKey key{dev, ino};
    // Handles opened by NameGoing for this file, by session.
    std::map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> pinned;
    for (auto p = pins_.lower_bound({key, 0}); p != pins_.end() && p->first.first == key;) {
      pinned[p->first.second].push_back(p->second);
      p = pins_.erase(p);
    }
    auto it = openers_.find(key);
    std::map<uint64_t, std::vector<uint64_t>> by_session;
    if (it != openers_.end()) {
      for (const auto& [session, rh] : it->second) {
        if (session != Serving().session) by_session[session].push_back(rh);
      }
    }
    for (const auto& [session, rhs] : by_session) {
      auto s = sessions_.find(session);
      if (s == sessions_.end() || s->second.ep == nullptr) continue;
      if (!Serving().for_node.empty() && s->second.node == Serving().for_node) continue;
      auto p = pinned.find(session);
      targets.push_back({session, s->second.ep,
                         AttrChangedMessage(session, rhs, data, false,
                                            p == pinned.end() ? std::vector<std::pair<uint64_t, uint64_t>>{}
                                                              : p->second),
                         s->second.node});
      if (p != pinned.end()) pinned.erase(p);
    }
    for (const auto& [session, pins] : pinned) {
      for (const auto& [watch, rh] : pins) unsent.emplace_back(session, rh);
    }
  }
  for (const auto& [session, rh] : unsent) {
    if (auto h = TakeHandle(session, rh); h) (void)local_->Release(*h);
  }
  Tell(std::move(targets));
}

// Whether the mode bits of `st` let `c` open it with `flags` (as
// generic_permission does without ACLs or capabilities; root as root may).
static bool ModeLets(const Cred& c, const struct stat& st, int flags) {
  if (c.uid == 0) return true;
  const int acc = flags & O_ACCMODE;
  const mode_t need = acc == O_RDONLY ? 4 : acc == O_WRONLY ? 2 : 6;
  mode_t bits = st.st_mode & 7;
  if (st.st_uid == c.uid) {
    bits = (st.st_mode >> 6) & 7;
  } else if (st.st_gid == c.gid ||
             std::find(c.groups.begin(), c.groups.end(), st.st_gid) != c.groups.end()) {
    bits = (st.st_mode >> 3) & 7;
  }
  return (bits & need) == need;
}

auto FileService::Impl::OpenWatched(uint64_t session, const Cred& cred, uint64_t watch,
                                    uint64_t ino48, int flags) -> Result<Opened> {
  const Error stale{ESTALE, "the file opened is gone"};
  std::string handle;
  FileKey key;
  {
    MutexLock lock(mu_);
    auto s = sessions_.find(session);
    if (s == sessions_.end()) return Err(stale);
    auto k = s->second.keys.find(watch);
    if (k == s->second.keys.end()) return Err(stale);
    auto w = s->second.watches.find(k->second);
    if (w == s->second.watches.end() || w->second.id != watch || w->second.file_handle.empty()) {
      return Err(stale);
    }
    key = k->second;
    handle = w->second.file_handle;
  }
  if ((static_cast<uint64_t>(key.second) & NodeFs::kIno48Mask) != (ino48 & NodeFs::kIno48Mask)) {
    return Err(stale);
  }
  auto r = local_->OpenByFileHandle(handle, flags & ~(O_CREAT | O_EXCL | O_TRUNC));
  if (!r) return Err(stale);
  size_t needed = 0;
  const bool acl =
      cred.uid != 0 && local_->GetXattrOf(Cred{}, r->handle, "system.posix_acl_access", 0, &needed).has_value();
  if (r->st.st_dev != key.first || r->st.st_ino != key.second || acl || !ModeLets(cred, r->st, flags)) {
    (void)local_->Release(r->handle);
    return Err(stale);
  }
  return r;
}

bool FileService::Impl::NameGoing(dev_t dev, ino_t ino, const std::string& path) {
  const FileKey key{dev, ino};
  std::vector<std::pair<uint64_t, uint64_t>> want;  // (session, watch)
  {
    MutexLock lock(mu_);
    auto o = openers_.find(key);
    if (o == openers_.end()) return false;
    for (const auto& [session, id] : o->second) {
      if (session == Serving().session) continue;
      auto s = sessions_.find(session);
      if (s == sessions_.end() || !s->second.callbacks || s->second.ep == nullptr) continue;
      if (!Serving().for_node.empty() && s->second.node == Serving().for_node) continue;
      auto w = s->second.watches.find(key);
      if (w == s->second.watches.end() || w->second.id != id) continue;  // a handle
      if (pins_.contains({key, session})) continue;  // one opened already waits for the callback
      want.emplace_back(session, id);
    }
  }
  bool any = false;
  for (const auto& [session, watch] : want) {
    auto r = local_->Open(Cred{}, path, O_RDONLY | O_NOFOLLOW);
    if (!r) {
      log_->debug("{}: not kept open for a deferred open: {}", path, r.error().ToString());
      break;
    }
    if (r->st.st_dev != dev || r->st.st_ino != ino) {  // changed meanwhile
      (void)local_->Release(r->handle);
      break;
    }
    bool callbacks = false;
    auto rh = AddHandle(session, r->handle, path, r->st, &callbacks);
    if (!rh) continue;
    MutexLock lock(mu_);
    pins_[{key, session}] = {watch, *rh};
    pins_made_.fetch_add(1, std::memory_order_relaxed);
    any = true;
  }
  return any;
}

FileService::ServingFor::ServingFor(const std::string& node) { Serving().for_node = node; }
FileService::ServingFor::~ServingFor() { Serving().for_node.clear(); }

Cred SquashCred(const FileServiceOptions& o, Cred c) {
  if (!o.root_squash) return c;
  if (c.uid == 0) c.uid = o.squash_uid;
  if (c.gid == 0) c.gid = o.squash_gid;
  std::erase(c.groups, 0u);
  return c;
}

FileService::FileService(FileServiceOptions options, m2m::Transport* transport, NodeFs* local,
                         Executor* blocking)
    : impl_(std::make_shared<Impl>(options, transport, local, blocking)),
      grace_until_(std::chrono::steady_clock::now() + options.grace) {
  impl_->StartSweeper();
}

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

bool FileService::Interested() const {
  return impl_->Interested() || std::chrono::steady_clock::now() < grace_until_;
}

void FileService::AttrsChanged(dev_t dev, ino_t ino, DataRange data) {
  if (std::chrono::steady_clock::now() < grace_until_) std::this_thread::sleep_until(grace_until_);
  impl_->AttrsChanged(dev, ino, data);
}

bool FileService::NameGoing(dev_t dev, ino_t ino, const std::string& path) {
  return impl_->NameGoing(dev, ino, path);
}

void FileService::PathChanged(const std::string& path) {
  if (!impl_->Interested()) return;
  if (auto st = impl_->local()->Stat(Cred{}, path); st && S_ISREG(st->st_mode)) {
    impl_->AttrsChanged(st->st_dev, st->st_ino, DataRange{});
  }
}

FileService::Stats FileService::stats() const { return impl_->stats(); }

}  // namespace fedfs::ns
