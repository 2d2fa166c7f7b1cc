// FileService: serving one request (files/file_service_impl.h).
#include "files/file_service_impl.h"
#include "nodefs/move_support.h"

#include "coopcache/block_cache.h"

namespace fedfs::ns {

using namespace files_detail;

void FileService::Impl::Tell(std::vector<Target> targets) {
  if (targets.empty()) return;
  callbacks_sent_.fetch_add(targets.size(), std::memory_order_relaxed);
  // A message whose connection broke is sent again (an
  // invalidation: the same however often it arrives), up to kMaxResends
  // and within callback_timeout in all (a dead client costs no more).
  const auto start = Clock::now();
  std::vector<Result<m2m::Bytes>> answers(targets.size(), Err(EIO, "unsent"));
  std::vector<size_t> pending(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) pending[i] = i;
  for (int round = 0; !pending.empty(); ++round) {
    const auto got = WaitForAll<Result<m2m::Bytes>>(
        pending.size(), [&](size_t k, m2m::Callback<m2m::Bytes> done) {
          const Target& t = targets[pending[k]];
          t.ep->Call(MethodId(RpcMethod::kFsAttrChanged), t.msg, opts_.callback_timeout,
                     std::move(done));
        });
    std::vector<size_t> again;
    for (size_t k = 0; k < pending.size(); ++k) {
      answers[pending[k]] = got[k];
      if (!got[k] && m2m::ConnectionBroken(got[k].error().code) && round < m2m::kMaxResends &&
          Clock::now() - start < opts_.callback_timeout) {
        again.push_back(pending[k]);
      }
    }
    pending = std::move(again);
  }
  Clock::time_point until{};  // the cache lease of the sessions not told
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < targets.size(); ++i) {
      if (answers[i]) continue;
      callbacks_failed_.fetch_add(1, std::memory_order_relaxed);
      log_->warn("telling {} of a file's change: {}; it is told no more", targets[i].node,
                 answers[i].error().ToString());
      if (auto s = sessions_.find(targets[i].session); s != sessions_.end()) {
        if (s->second.callbacks) s->second.untold = true;
        s->second.callbacks = false;
        ForgetKeysLocked(s->second);
        until = std::max(until, s->second.seen + opts_.cache_lease + kLeaseMargin);
      }
    }
  }
  if (opts_.cache_lease.count() > 0 && until > Clock::now()) {
    // Bounded: `seen` is never later than now.
    lease_waits_.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_until(until);
  }
}

auto FileService::Impl::AttrChangedMessage(
    uint64_t session, const std::vector<uint64_t>& rhs, DataRange data, bool ended,
    const std::vector<std::pair<uint64_t, uint64_t>>& pinned) -> m2m::Bytes {
  flatbuffers::FlatBufferBuilder b(80 + 8 * rhs.size() + 16 * pinned.size());
  auto v = b.CreateVector(rhs);
  flatbuffers::Offset<flatbuffers::Vector<uint64_t>> pw, ph;
  if (!pinned.empty()) {
    std::vector<uint64_t> w, h;
    for (const auto& [watch, rh] : pinned) {
      w.push_back(watch);
      h.push_back(rh);
    }
    pw = b.CreateVector(w);
    ph = b.CreateVector(h);
  }
  fb::FsAttrChangedBuilder ab(b);
  if (!pinned.empty()) {
    ab.add_pinned_watches(pw);
    ab.add_pinned_handles(ph);
  }
  ab.add_version(fswire::kVersion);
  ab.add_session(session);
  ab.add_handles(v);
  ab.add_data_offset(data.offset);  // defaults (every byte) are left out
  ab.add_data_length(data.length);
  ab.add_ended(ended);
  b.Finish(ab.Finish());
  return fswire::Finish(b);
}

auto FileService::Impl::StatReply(const struct stat& st) -> m2m::Bytes {
  flatbuffers::FlatBufferBuilder b(256);
  auto w = fswire::ToWire(st);
  fb::FsReplyBuilder rb(b);
  rb.add_version(fswire::kVersion);
  rb.add_stat(&w);
  b.Finish(rb.Finish());
  return fswire::Finish(b);
}

auto FileService::Impl::EmptyReply() -> m2m::Bytes {
  flatbuffers::FlatBufferBuilder b(32);
  fb::FsReplyBuilder rb(b);
  rb.add_version(fswire::kVersion);
  b.Finish(rb.Finish());
  return fswire::Finish(b);
}

auto FileService::Impl::DataReply(std::span<const std::byte> data, uint64_t n,
                                  const coop::FileId* id) -> m2m::Bytes {
  flatbuffers::FlatBufferBuilder b(64 + data.size());
  auto d = b.CreateVector(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  fb::FsReplyBuilder rb(b);
  rb.add_version(fswire::kVersion);
  rb.add_data(d);
  rb.add_n(n);
  if (id != nullptr) {
    rb.add_coop_dev(id->dev);
    rb.add_coop_ino(id->ino);
  }
  b.Finish(rb.Finish());
  return fswire::Finish(b);
}

auto FileService::Impl::CountReply(uint64_t n, const coop::FileId* id) -> m2m::Bytes {
  flatbuffers::FlatBufferBuilder b(48);
  fb::FsReplyBuilder rb(b);
  rb.add_version(fswire::kVersion);
  rb.add_n(n);
  if (id != nullptr) {
    rb.add_coop_dev(id->dev);
    rb.add_coop_ino(id->ino);
  }
  b.Finish(rb.Finish());
  return fswire::Finish(b);
}

auto FileService::Impl::OpenedReply(uint64_t rh, const struct stat& st, bool callbacks,
                                    uint64_t watch, const struct stat* parent) -> m2m::Bytes {
  flatbuffers::FlatBufferBuilder b(256);
  auto w = fswire::ToWire(st);
  fb::Stat pw;
  if (parent != nullptr) pw = fswire::ToWire(*parent);
  fb::FsReplyBuilder rb(b);
  rb.add_version(fswire::kVersion);
  rb.add_stat(&w);
  if (parent != nullptr) rb.add_parent(&pw);
  rb.add_handle(rh);
  rb.add_attr_callbacks(callbacks);
  if (watch != 0) rb.add_watch(watch);
  b.Finish(rb.Finish());
  return fswire::Finish(b);
}

void FileService::Impl::Accessed(uint64_t session, uint64_t rh, uint64_t bytes) {
  std::string node;
  if (const std::string path = HandlePath(session, rh, &node); !path.empty()) {
    opts_.on_access(path, node, bytes);
  }
}

auto FileService::Impl::HandlePath(uint64_t session, uint64_t rh, std::string* node)
    -> std::string {
  MutexLock lock(mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return {};
  auto p = it->second.paths.find(rh);
  if (p == it->second.paths.end()) return {};
  if (node != nullptr) *node = it->second.node;
  return p->second;
}

auto FileService::Impl::Run(const m2m::PeerInfo& peer, const fb::FsRequest* req,
                            Clock::time_point arrival) -> Result<m2m::Bytes> {
  Serving().session = req->session();
  if ((req->op() == fb::Op::kUnlink || req->op() == fb::Op::kRename) &&
      req->for_node() != nullptr) {
    Serving().for_node = req->for_node()->str();
  }
  Result<m2m::Bytes> r = RunOp(peer, req, arrival);
  Serving() = {};
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

auto FileService::Impl::RunOp(const m2m::PeerInfo& peer, const fb::FsRequest* req,
                              Clock::time_point arrival) -> Result<m2m::Bytes> {
  const uint64_t session = req->session();
  auto view = Bound(peer, session);
  if (!view) return Err(view.error());
  if (req->releases() != nullptr) {
    for (uint64_t rh : *req->releases()) {
      if (auto h = TakeHandle(session, rh); h) (void)local_->Release(*h);  // unknown: ignored
    }
  }
  const Cred asked = fswire::FromWire(req->cred());
  const Cred cred = SquashCred(opts_, asked);
  const std::string path = Str(req->path());
  auto budget = std::chrono::microseconds(std::min<uint64_t>(req->budget_us(), 600'000'000ull));
  if (budget.count() == 0) budget = opts_.transfer_timeout;
  const Clock::time_point deadline = arrival + budget;
  // Waits at a moving file's gate end well before the caller gives up: it
  // asks again (nodefs/move_support.h).
  const ScopedGateDeadline gate_wait(
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>((deadline - Clock::now()) *
                                                                      3 / 4));

  auto status_or = [](Status s) -> Result<m2m::Bytes> {
    if (!s) return Err(s.error());
    return EmptyReply();
  };
  auto handle = [&]() { return Local(session, req->handle()); };

  switch (req->op()) {
    case fb::Op::kStat:
      if (req->watch()) return WatchedStat(session, cred, path);
      return StatOrErr(local_->Stat(cred, path));
    case fb::Op::kStatMany:
      // One name, `length` checked (CheckRequest).
      return StatMany(session, cred, path, req->names()->Get(0)->str(), req->length());
    case fb::Op::kAccess:
      return status_or(local_->Access(cred, path, req->flags()));
    case fb::Op::kListDir: {
      auto r = local_->ListDir(cred, path);
      if (!r) return Err(r.error());
      flatbuffers::FlatBufferBuilder b(64 + r->size() * 48);
      std::vector<flatbuffers::Offset<fb::DirEntry>> es;
      es.reserve(r->size());
      for (const DirEntry& e : *r) {
        es.push_back(fb::CreateDirEntry(b, b.CreateString(e.name), e.type, e.ino, e.id));
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
          t.push_back({static_cast<mode_t>(d->mode()), d->uid(), d->gid(), d->id()});
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
    case fb::Op::kUnlink: {
      if (auto s = local_->Unlink(cred, path); !s) return Err(s.error());
      if (!req->parent_attr()) return EmptyReply();
      auto p = local_->Stat(cred, std::string(ParentPath(path)));
      flatbuffers::FlatBufferBuilder b(160);
      fb::Stat pw;
      if (p) pw = fswire::ToWire(*p);
      fb::FsReplyBuilder rb(b);
      rb.add_version(fswire::kVersion);
      if (p) rb.add_parent(&pw);
      b.Finish(rb.Finish());
      return fswire::Finish(b);
    }
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
      auto r = req->op() == fb::Op::kCreate
                   ? local_->Create(cred, path, req->flags(), req->mode())
               : req->has_expect()
                   ? local_->OpenExpecting(cred, path, req->flags(), req->expect_ino(), 0)
                   : local_->Open(cred, path, req->flags());
      if (!r && r.error().code == ESTALE && req->has_expect() && req->expect_watch() != 0) {
        r = OpenWatched(session, cred, req->expect_watch(), req->expect_ino(), req->flags());
      }
      if (!r) return Err(r.error());
      bool callbacks = false;
      auto rh = AddHandle(session, r->handle, path, r->st, &callbacks);
      if (!rh) return Err(rh.error());
      // A new file watched too (its changes told after the release as well),
      // registered while the handle, which is told already, is open.
      std::optional<uint64_t> watch;
      if (req->op() == fb::Op::kCreate && req->watch() && callbacks && r->st.st_nlink == 1) {
        bool fresh = false;
        std::vector<uint64_t> evicted;
        {
          MutexLock lock(mu_);
          watch = WatchLocked(session, FileKey{r->st.st_dev, r->st.st_ino}, 0, &fresh, &evicted);
        }
        if (!evicted.empty()) TellEnded(session, std::move(evicted));
        if (watch && fresh) KeepFileHandle(session, FileKey{r->st.st_dev, r->st.st_ino}, *watch, path);
      }
      // The directory as the create left it (the asker's kernel asks for it
      // next, before its next change there).
      std::optional<struct stat> parent;
      if (req->op() == fb::Op::kCreate && req->parent_attr()) {
        if (auto p = local_->Stat(cred, std::string(ParentPath(path))); p) parent = *p;
      }
      return OpenedReply(*rh, r->st, callbacks, watch.value_or(0),
                         parent ? &*parent : nullptr);
    }
    case fb::Op::kRead: {
      auto r = DoRead(*view, req, deadline, session);
      if (r && opts_.on_access) Accessed(session, req->handle(), req->length());
      return r;
    }
    case fb::Op::kCoopEvict:
      return DoCoopEvict(req, session);
    case fb::Op::kCoopStore:
      return DoCoopStore(*view, req, deadline);
    case fb::Op::kCoopMoved:
      return DoCoopMoved(req);
    case fb::Op::kWrite:
      // A squashed root has no CAP_FSETID here (the squash uid's rights).
    {
      auto r = DoWrite(*view, req, deadline, session,
                       Writer{req->kill_setid() || (asked.uid == 0 && cred.uid != 0), cred});
      if (r && opts_.on_access) {
        Accessed(session, req->handle(), req->data() ? req->data()->size() : req->length());
      }
      return r;
    }
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

auto FileService::Impl::CheckSlot(const SessionView& v, const fb::FsRequest* req) -> Status {
  if (!v.pool) return Err(EINVAL, "slot named but the session has no buffer pool");
  if (req->slot() >= static_cast<int64_t>(v.slot_count)) return Err(EINVAL, "bad slot");
  if (req->length() > v.slot_size || req->length() > opts_.slot_size) {
    return Err(EINVAL, "length over the slot size");
  }
  return Ok();
}

auto FileService::Impl::DoRead(const SessionView& v, const fb::FsRequest* req,
                               Clock::time_point deadline, uint64_t session) -> Result<m2m::Bytes> {
  if (req->coop_frames() != nullptr && v.cache_block > 0) {
    return DoCoopRead(v, req, deadline, session);
  }
  uint64_t n = 0;
  return ReadInto(v, req, deadline, session, &n);
}

auto FileService::Impl::ReadInto(const SessionView& v, const fb::FsRequest* req,
                                 Clock::time_point deadline, uint64_t session, uint64_t* read,
                                 const coop::FileId* id) -> Result<m2m::Bytes> {
  auto h = Local(session, req->handle());
  if (!h) return Err(h.error());
  if (req->slot() < 0) {
    if (req->length() > opts_.max_inline) return Err(EINVAL, "inline read over the limit");
    std::vector<std::byte> buf(req->length());
    auto n = local_->Read(*h, req->offset(), buf);
    if (!n) return Err(n.error());
    inline_bytes_.fetch_add(*n, std::memory_order_relaxed);
    *read = *n;
    return DataReply(std::span(buf.data(), *n), *n, id);
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
  *read = *n;
  return CountReply(*n, id);
}

// The holder's half of a cooperative read (docs/coopcache.md): the leading
// blocks that other clients keep are answered with where they keep them;
// otherwise the bytes are read here and the reader recorded as keeping
// them, under the file's version from before the read.
auto FileService::Impl::DoCoopRead(const SessionView& v, const fb::FsRequest* req,
                                   Clock::time_point deadline, uint64_t session)
    -> Result<m2m::Bytes> {
  const uint64_t block = req->coop_block();
  const auto* fr = req->coop_frames();
  if (block != v.cache_block || fr->size() == 0 || fr->size() > 256 ||
      req->offset() % block != 0 || req->length() != fr->size() * block) {
    return Err(EINVAL, "cooperative read not of whole cache blocks");
  }
  std::optional<coop::FileId> id;
  {
    MutexLock lock(mu_);
    if (auto s = sessions_.find(session); s != sessions_.end()) {
      if (auto k = s->second.keys.find(req->handle()); k != s->second.keys.end()) {
        id = coop::FileId{static_cast<uint64_t>(k->second.first),
                          static_cast<uint64_t>(k->second.second)};
      }
    }
  }
  uint64_t n = 0;
  if (!id) return ReadInto(v, req, deadline, session, &n);  // not told of changes: not shared
  CheckCoopEpoch();
  std::vector<coop::Frame> frames;
  frames.reserve(fr->size());
  for (const auto& [frame, tag] : fswire::CoopFramesOf(*req)) frames.push_back({frame, tag});
  const uint64_t first = req->offset() / block;
  const uint64_t version = dir_.Version(*id);
  if (!req->coop_replace()) {
    auto copies = dir_.Find(*id, block, first, frames.size(), session);
    if (!copies.empty()) {
      flatbuffers::FlatBufferBuilder b(512);
      std::vector<flatbuffers::Offset<fb::CoopCopy>> out;
      std::vector<uint32_t> lengths;
      {
        MutexLock lock(mu_);
        const FileServiceOptions::SelfCache& me = opts_.self_cache;
        for (const auto& [index, c] : copies) {
          // At another client, or in this node's own cache (a forward).
          const std::string* at_addr = &me.addr;
          const m2m::RegionDesc* data = &me.data;
          const m2m::RegionDesc* tags = &me.tags;
          if (c.session != kSelfSession) {
            auto s = sessions_.find(c.session);
            if (s == sessions_.end() || s->second.cache_block != block) break;
            at_addr = &s->second.addr;
            data = &s->second.cache_data;
            tags = &s->second.cache_tags;
          } else if (me.node.empty() || opts_.cache == nullptr ||
                     opts_.cache->block_size() != block) {
            break;
          }
          out.push_back(fswire::CoopCopyToWire(b, index, c.length, *at_addr, *data, *tags,
                                               c.frame, c.tag));
          lengths.push_back(c.length);
        }
      }
      if (!out.empty()) {
        // The reader keeps these blocks too once it has read them.
        dir_.Record(*id, version, session, block, first,
                    std::span(frames.data(), lengths.size()), lengths, false);
        coop_redirects_.fetch_add(1, std::memory_order_relaxed);
        auto vec = b.CreateVector(out);
        fb::FsReplyBuilder rb(b);
        rb.add_version(fswire::kVersion);
        rb.add_copies(vec);
        rb.add_coop_dev(id->dev);
        rb.add_coop_ino(id->ino);
        b.Finish(rb.Finish());
        return fswire::Finish(b);
      }
    }
  }
  auto r = ReadInto(v, req, deadline, session, &n, &*id);
  if (!r) return r;
  std::vector<uint32_t> lengths(frames.size(), 0);
  for (size_t i = 0; i < frames.size(); ++i) {
    const uint64_t from = i * block;
    if (from >= n) break;
    lengths[i] = static_cast<uint32_t>(std::min<uint64_t>(block, n - from));
  }
  dir_.Record(*id, version, session, block, first, frames, lengths, req->coop_replace());
  return r;
}

auto FileService::Impl::DoWrite(const SessionView& v, const fb::FsRequest* req,
                                Clock::time_point deadline, uint64_t session, const Writer& by)
    -> Result<m2m::Bytes> {
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

}  // namespace fedfs::ns
