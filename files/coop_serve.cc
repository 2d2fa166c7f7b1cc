// FileService: N-chance forwarding (docs/coopcache.md, "N-chance
// forwarding"; fs.fbs, Op kCoopEvict, kCoopStore, kCoopMoved). As the
// file's node it forgets evicted copies and names a peer for the last one;
// as that peer it keeps a forwarded block in this node's cache, where
// other readers find it one-sidedly.
#include <algorithm>
#include <random>

#include "coopcache/block_cache.h"
#include "files/file_service_impl.h"

namespace fedfs::ns {

using namespace files_detail;

namespace {

constexpr size_t kMaxNodeId = 255;

// The cache key of a block forwarded here: never a mount's inode number
// (those count up from the root), one per (file's node, file).
uint64_t ForeignKey(std::string_view node, uint64_t dev, uint64_t ino) {
  uint64_t x = std::hash<std::string_view>{}(node) ^ (dev * 0x9e3779b97f4a7c15ull);
  x ^= ino + 0x632be59bd9b4e019ull + (x << 6) + (x >> 2);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return (x ^ (x >> 31)) | (uint64_t{1} << 63);
}

Status CheckForward(const fb::FsRequest* req) {
  if (req->coop_block() == 0 || req->coop_frames() == nullptr || req->coop_frames()->size() != 1) {
    return Err(EINVAL, "forwarding names one block of the cache's size");
  }
  return Ok();
}

}  // namespace

void FileService::ForgetOwnCopy(uint64_t dev, uint64_t ino, uint64_t block, uint64_t index,
                                uint32_t frame, uint64_t tag) {
  impl_->ForgetOwnCopy(coop::FileId{dev, ino}, block, index, frame, tag);
}

void FileService::Impl::CheckCoopEpoch() {
  if (!opts_.membership_epoch) return;
  const uint64_t e = opts_.membership_epoch();
  if (coop_epoch_.exchange(e) != e) dir_.DropAll();  // copies of another membership
}

auto FileService::Impl::DoCoopEvict(const fb::FsRequest* req, uint64_t session)
    -> Result<m2m::Bytes> {
  if (auto st = CheckForward(req); !st) return Err(st.error());
  CheckCoopEpoch();
  const auto [frame, tag] = fswire::CoopFramesOf(*req)[0];  // copied: maybe misaligned
  const coop::FileId id{req->coop_dev(), req->coop_ino()};
  const auto ev = dir_.Evict(id, session, req->coop_block(), req->coop_index(), frame, tag);
  if (!ev.last) return EmptyReply();
  // A peer, at random among the other nodes whose caches take blocks of
  // this size (sessions of this node's clients: it can name their copies).
  std::string target;
  {
    MutexLock lock(mu_);
    auto self = sessions_.find(session);
    const std::string from = self == sessions_.end() ? std::string() : self->second.node;
    std::vector<const std::string*> nodes;
    for (const auto& [sid, s] : sessions_) {
      if (s.node != from && s.cache_block == req->coop_block() && !s.addr.empty()) {
        nodes.push_back(&s.node);
      }
    }
    // By id, each once (not in the sessions' order: their ids are random).
    std::sort(nodes.begin(), nodes.end(), [](auto* a, auto* b) { return *a < *b; });
    nodes.erase(std::unique(nodes.begin(), nodes.end(), [](auto* a, auto* b) { return *a == *b; }),
                nodes.end());
    // This node's own cache too (its own file's block, named to readers
    // like any other copy).
    const FileServiceOptions::SelfCache& me = opts_.self_cache;
    if (!me.node.empty() && me.node != from && opts_.cache != nullptr &&
        opts_.cache->block_size() == req->coop_block()) {
      nodes.push_back(&me.node);
    }
    if (!nodes.empty()) target = *nodes[forward_rng_() % nodes.size()];
  }
  if (target.empty()) return EmptyReply();
  coop_forward_asked_.fetch_add(1, std::memory_order_relaxed);
  flatbuffers::FlatBufferBuilder b(96);
  auto n = b.CreateString(target);
  fb::FsReplyBuilder rb(b);
  rb.add_version(fswire::kVersion);
  rb.add_forward_node(n);
  rb.add_forward_version(ev.version);
  b.Finish(rb.Finish());
  return fswire::Finish(b);
}

auto FileService::Impl::DoCoopStore(const SessionView& v, const fb::FsRequest* req,
                                    Clock::time_point deadline) -> Result<m2m::Bytes> {
  if (auto st = CheckForward(req); !st) return Err(st.error());
  coop::BlockCache* cache = opts_.cache;
  if (cache == nullptr || cache->block_size() != req->coop_block()) {
    return Err(ENOTSUP, "no cache here for blocks of this size");
  }
  const size_t len = req->length();
  const auto* node = req->coop_node();
  if (len == 0 || len > req->coop_block()) return Err(EINVAL, "forwarded block of a bad length");
  if (node == nullptr || node->size() == 0 || node->size() > kMaxNodeId) {
    return Err(EINVAL, "forwarded block without its file's node");
  }
  const uint64_t key = ForeignKey(node->string_view(), req->coop_dev(), req->coop_ino());
  const uint64_t gen = cache->Generation(key);
  auto slot = cache->Reserve(key, req->coop_index(), gen);
  if (!slot) return Err(EAGAIN, "no frame free for a forwarded block");
  auto abandon = [&](Error e) -> Result<m2m::Bytes> {
    cache->Abandon(*slot);
    return Err(std::move(e));
  };
  if (req->slot() >= 0) {
    if (auto st = CheckSlot(v, req); !st) return abandon(st.error());
    auto st = m2m::GetSync(*v.ep, slot->data, len, *v.pool, uint64_t(req->slot()) * v.slot_size,
                           Remaining(deadline));
    if (!st) return abandon(st.error());
    // Past the deadline the client may reuse its slot: not known to be its bytes.
    if (Clock::now() >= deadline) return abandon(Error{ETIMEDOUT, "the client's deadline passed"});
    one_sided_bytes_.fetch_add(len, std::memory_order_relaxed);
  } else {
    if (req->data() == nullptr || req->data()->size() != len) {
      return abandon(Error{EINVAL, "forwarded block's bytes missing"});
    }
    std::memcpy(slot->data, req->data()->data(), len);
    inline_bytes_.fetch_add(len, std::memory_order_relaxed);
  }
  const coop::Origin origin{node->str(), req->coop_dev(), req->coop_ino(), req->coop_recirc()};
  if (!cache->Publish(*slot, key, req->coop_index(), gen, {}, len, &origin)) {
    return Err(EAGAIN, "forwarded block not kept");
  }
  coop_stored_.fetch_add(1, std::memory_order_relaxed);
  // Where it is, as other nodes read it (the forwarder's hint).
  const FileServiceOptions::SelfCache& me = opts_.self_cache;
  flatbuffers::FlatBufferBuilder b(256);
  auto at = fswire::CoopCopyToWire(b, req->coop_index(), static_cast<uint32_t>(len), me.addr,
                                   me.data, me.tags, slot->frame, slot->tag);
  fb::FsReplyBuilder rb(b);
  rb.add_version(fswire::kVersion);
  rb.add_stored(at);
  b.Finish(rb.Finish());
  return fswire::Finish(b);
}

auto FileService::Impl::DoCoopMoved(const fb::FsRequest* req) -> Result<m2m::Bytes> {
  if (auto st = CheckForward(req); !st) return Err(st.error());
  const auto* node = req->coop_node();
  if (node == nullptr || node->size() == 0 || node->size() > kMaxNodeId) {
    return Err(EINVAL, "moved block without the node that keeps it");
  }
  const uint64_t block = req->coop_block();
  const size_t len = req->length();
  if (len == 0 || len > block) return Err(EINVAL, "moved block of a bad length");
  std::optional<uint64_t> at;
  if (!opts_.self_cache.node.empty() && node->string_view() == opts_.self_cache.node) {
    at = kSelfSession;  // kept in this node's own cache
  } else {
    MutexLock lock(mu_);
    for (const auto& [sid, s] : sessions_) {
      if (s.node == node->string_view() && s.cache_block == block && !s.addr.empty()) {
        at = sid;
        break;
      }
    }
  }
  if (!at) return Err(ENOENT, "no session of node " + node->str() + " with a cache");
  const auto [at_frame, at_tag] = fswire::CoopFramesOf(*req)[0];  // copied: maybe misaligned
  const coop::Frame frame{at_frame, at_tag};
  const auto length = static_cast<uint32_t>(len);
  if (!dir_.Record(coop::FileId{req->coop_dev(), req->coop_ino()}, req->coop_version(), *at,
                   block, req->coop_index(), std::span(&frame, 1), std::span(&length, 1),
                   false)) {
    return Err(ESTALE, "the file changed while its block was forwarded");
  }
  return EmptyReply();
}

}  // namespace fedfs::ns
