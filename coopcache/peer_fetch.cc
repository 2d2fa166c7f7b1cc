#include "coopcache/peer_fetch.h"

#include <algorithm>

#include "common/wait.h"
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
  std::byte* const d[] = {dst};
  return std::move(FetchAll({&c, 1}, d)[0]);
}

std::vector<Status> PeerFetch::FetchAll(std::span<const PeerCopy> copies,
                                        std::span<std::byte* const> dst) {
  constexpr uint64_t kTrailer = BlockCache::kTrailerBytes;
  const size_t n = std::min(copies.size(), dst.size());
  std::vector<Status> out(n, Ok());
  struct Want {
    size_t copy;
    Imported im;
    BlockCache::Trailer trailer;
  };
  std::vector<Want> wants;
  wants.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const PeerCopy& c = copies[i];
    const uint64_t off = uint64_t{c.frame} * c.block_size;
    if (c.block_size == 0 || c.length > c.block_size || off + c.length > c.data.length ||
        (uint64_t{c.frame} + 1) * kTrailer > c.tags.length) {
      remote_errors_.fetch_add(1, std::memory_order_relaxed);
      out[i] = Err(EPROTO, "a peer copy outside the peer's regions");
      continue;
    }
    auto im = Import(c);
    if (!im) {
      remote_errors_.fetch_add(1, std::memory_order_relaxed);
      out[i] = Err(im.error());
      continue;
    }
    wants.push_back(Want{i, std::move(*im)});
  }
  // Every copy's bytes and trailer, all in flight at once: one round trip.
  // Their order does not matter to the check, which ties the bytes to the
  // tag. Tests run them in two rounds (the trailers first or the bytes
  // first), the hook between.
  auto get = [&](size_t k, bool trailer, m2m::Callback<void> done) {
    Want& w = wants[k];
    const PeerCopy& c = copies[w.copy];
    if (trailer) {
      w.im.ep->Get(&w.trailer, kTrailer, *w.im.tags, uint64_t{c.frame} * kTrailer, timeout_,
                   std::move(done));
    } else {
      w.im.ep->Get(dst[w.copy], c.length, *w.im.data, uint64_t{c.frame} * c.block_size,
                   timeout_, std::move(done));
    }
  };
  std::vector<Status> bytes(wants.size(), Ok()), trailers(wants.size(), Ok());
  if (!wants.empty() && !between_) {
    auto all = WaitForAll<Status>(2 * wants.size(), [&](size_t g, m2m::Callback<void> done) {
      get(g / 2, g % 2 == 1, std::move(done));
    });
    for (size_t k = 0; k < wants.size(); ++k) {
      bytes[k] = std::move(all[2 * k]);
      trailers[k] = std::move(all[2 * k + 1]);
    }
  } else if (!wants.empty()) {
    auto round = [&](bool trailer) {
      return WaitForAll<Status>(wants.size(), [&](size_t k, m2m::Callback<void> done) {
        get(k, trailer, std::move(done));
      });
    };
    (trailer_first_ ? trailers : bytes) = round(trailer_first_);
    between_();
    (trailer_first_ ? bytes : trailers) = round(!trailer_first_);
  }
  for (size_t k = 0; k < wants.size(); ++k) {
    const Want& w = wants[k];
    const PeerCopy& c = copies[w.copy];
    Status& st = out[w.copy];
    if (!bytes[k]) st = std::move(bytes[k]);
    else if (!trailers[k]) st = std::move(trailers[k]);
    if (!st) {
      remote_errors_.fetch_add(1, std::memory_order_relaxed);
      // A region the peer no longer has (it restarted): import again next time.
      std::lock_guard lock(mu_);
      peers_.erase(c.addr);
      continue;
    }
    if (w.trailer.tag != c.tag) {
      tag_misses_.fetch_add(1, std::memory_order_relaxed);
      st = Err(ESTALE, "the peer's frame holds another block");
    } else if (w.trailer.check != BlockCache::Check({dst[w.copy], c.length}, c.tag)) {
      tag_misses_.fetch_add(1, std::memory_order_relaxed);
      st = Err(ESTALE, "the peer's frame changed while it was read");
    } else {
      remote_hits_.fetch_add(1, std::memory_order_relaxed);
      remote_bytes_.fetch_add(c.length, std::memory_order_relaxed);
    }
  }
  return out;
}

auto PeerFetch::stats() const -> Stats {
  return Stats{remote_hits_.load(), remote_bytes_.load(), tag_misses_.load(),
               remote_errors_.load()};
}

}  // namespace fedfs::coop
