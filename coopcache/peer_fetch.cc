#include "coopcache/peer_fetch.h"

#include "coopcache/block_cache.h"

namespace fedfs::coop {

Result<std::unique_ptr<PeerFetch>> PeerFetch::Create(BlockCache* cache, m2m::Transport* transport,
                                                     std::chrono::nanoseconds timeout) {
  std::unique_ptr<PeerFetch> p(new PeerFetch(cache, transport, timeout));
  auto arena = cache->arena();
  auto data = transport->Register(arena.data(), arena.size());
  if (!data) return Err(data.error().code, "registering the block cache: " + data.error().context);
  auto tags = cache->tags();
  auto t = transport->Register(tags.data(), tags.size());
  if (!t) return Err(t.error().code, "registering the block cache's tags: " + t.error().context);
  p->data_ = std::move(*data);
  p->tags_ = std::move(*t);
  return p;
}

PeerFetch::~PeerFetch() = default;

namespace {
bool SameDesc(const m2m::RegionDesc& a, const m2m::RegionDesc& b) {
  return a.addr == b.addr && a.length == b.length && a.rkey == b.rkey;
}
}  // namespace

auto PeerFetch::Import(const PeerCopy& c) -> Result<Imported> {
  std::lock_guard lock(mu_);
  auto it = peers_.find(c.addr);
  if (it != peers_.end() && SameDesc(it->second.data_desc, c.data) &&
      SameDesc(it->second.tags_desc, c.tags)) {
    return it->second;
  }
  Imported im;
  im.ep = transport_->GetEndpoint(c.addr);
  auto d = im.ep->Import(c.data);
  if (!d) return Err(d.error());
  auto t = im.ep->Import(c.tags);
  if (!t) return Err(t.error());
  im.data_desc = c.data;
  im.tags_desc = c.tags;
  im.data = std::move(*d);
  im.tags = std::move(*t);
  peers_[c.addr] = im;
  return im;
}

Status PeerFetch::Fetch(const PeerCopy& c, std::byte* dst) {
  const uint64_t off = uint64_t{c.frame} * c.block_size;
  if (c.block_size == 0 || c.length > c.block_size || off + c.length > c.data.length ||
      (uint64_t{c.frame} + 1) * sizeof(uint64_t) > c.tags.length) {
    remote_errors_.fetch_add(1, std::memory_order_relaxed);
    return Err(EPROTO, "a peer copy outside the peer's regions");
  }
  auto im = Import(c);
  if (!im) {
    remote_errors_.fetch_add(1, std::memory_order_relaxed);
    return Err(im.error());
  }
  // The tag, the bytes, the tag again: both reads must find the tag the
  // holder named. The one after the bytes proves no rewrite began since the
  // first (a frame's tag goes to 0 before its bytes change, and a tag is
  // never used twice); the one before proves the bytes were there: a holder
  // names a reader's frame as soon as the reader asks, before it is filled,
  // and bytes read then are the frame's old block.
  const uint64_t tag_off = uint64_t{c.frame} * 8;
  uint64_t before = 0, tag = 0;
  Status st = m2m::GetSync(*im->ep, &before, sizeof before, *im->tags, tag_off, timeout_);
  if (st && before != c.tag) {
    tag_misses_.fetch_add(1, std::memory_order_relaxed);
    return Err(ESTALE, "the peer's frame holds another block");
  }
  if (st) st = m2m::GetSync(*im->ep, dst, c.length, *im->data, off, timeout_);
  if (st && after_bytes_) after_bytes_();
  if (st) st = m2m::GetSync(*im->ep, &tag, sizeof tag, *im->tags, tag_off, timeout_);
  if (!st) {
    remote_errors_.fetch_add(1, std::memory_order_relaxed);
    // A region the peer no longer has (it restarted): import again next time.
    std::lock_guard lock(mu_);
    peers_.erase(c.addr);
    return st;
  }
  if (tag != c.tag) {
    tag_misses_.fetch_add(1, std::memory_order_relaxed);
    return Err(ESTALE, "the peer's frame moved on");
  }
  remote_hits_.fetch_add(1, std::memory_order_relaxed);
  remote_bytes_.fetch_add(c.length, std::memory_order_relaxed);
  return Ok();
}

auto PeerFetch::stats() const -> Stats {
  return Stats{remote_hits_.load(), remote_bytes_.load(), tag_misses_.load(),
               remote_errors_.load()};
}

}  // namespace fedfs::coop
