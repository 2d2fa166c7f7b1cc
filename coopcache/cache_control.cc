#include "coopcache/cache_control.h"

#include "coopcache/block_cache.h"
#include "coopcache/forwarder.h"
#include "coopcache/hints.h"
#include "coopcache/memory_guard.h"
#include "coopcache/peer_fetch.h"

namespace fedfs::coop {

control::CacheReply CacheStatus(const CacheParts& parts, const HolderCountsFn& holder,
                                const std::string& self) {
  const BlockCache* cache = parts.cache;
  const PeerFetch* peers = parts.peers;
  control::CacheReply r;
  r.node = self;
  if (holder) {
    const HolderCounts h = holder();
    r.redirects = h.redirects;
    r.directory_files = h.directory_files;
    r.directory_copies = h.directory_copies;
    r.forward_asked = h.forward_asked;
    r.forwarded_in = h.forwarded_in;
  }
  if (parts.forwarder != nullptr) {
    const Forwarder::Stats f = parts.forwarder->stats();
    r.forward_evictions = f.evictions;
    r.forwards = f.forwarded;
    r.forward_declined = f.declined;
    r.forward_dropped = f.dropped;
    r.forward_errors = f.errors;
  }
  if (parts.hints != nullptr) {
    const Hints::Stats h = parts.hints->stats();
    r.hints = h.entries;
    r.hint_hits = h.hits;
    r.hint_misses = h.misses;
  }
  if (parts.guard != nullptr) {
    const MemoryGuard::Stats g = parts.guard->stats();
    r.min_free_bytes = parts.guard->min_free_bytes();
    r.pressure_shrinks = g.shrinks;
    r.pressure_grows = g.grows;
  }
  if (peers != nullptr) {
    const PeerFetch::Stats p = peers->stats();
    r.shared = true;
    r.remote_hits = p.remote_hits;
    r.remote_bytes = p.remote_bytes;
    r.tag_misses = p.tag_misses;
    r.remote_errors = p.remote_errors;
  }
  if (cache == nullptr) return r;
  const BlockCache::Stats s = cache->stats();
  r.enabled = true;
  r.size_bytes = s.size_bytes;
  r.block_bytes = s.block_bytes;
  r.blocks_used = s.blocks_used;
  r.bytes_used = s.bytes_used;
  r.files = s.files;
  r.probation = s.probation;
  r.protected_blocks = s.protected_blocks;
  r.hits = s.hits;
  r.misses = s.misses;
  r.stale = s.stale;
  r.puts = s.puts;
  r.puts_refused = s.puts_refused;
  r.evictions = s.evictions;
  r.invalidations = s.invalidations;
  r.promotions = s.promotions;
  r.fetches = s.fetches;
  r.fetched_bytes = s.fetched_bytes;
  r.streamed = s.streamed;
  r.streamed_bytes = s.streamed_bytes;
  r.clears = s.clears;
  r.limit_bytes = s.limit_blocks * s.block_bytes;
  return r;
}

void RegisterCacheControl(control::Dispatcher& dispatcher, CacheParts parts,
                          HolderCountsFn holder, const std::string& self) {
  dispatcher.Register(
      [parts, holder, self](const control::Request&) -> Result<control::CacheReply> {
        return CacheStatus(parts, holder, self);
      });
  dispatcher.Register(
      [parts, holder, self](const control::Request&) -> Result<control::CacheDropReply> {
    if (parts.cache != nullptr) parts.cache->Clear();
    control::CacheDropReply r;
    static_cast<control::CacheReply&>(r) = CacheStatus(parts, holder, self);
    return r;
  });
}

}  // namespace fedfs::coop
