// PeerFetch: one node's side of cooperative caching over the transport
// (docs/coopcache.md, "Blocks fetched from peers' memory").
//
//  * Its BlockCache's arena and trailer array are registered with the transport
//    (Create), and their descriptors handed to every holder this node reads
//    from (Regions, in the file service's Hello), so that a holder may send
//    another reader here.
//  * Fetch reads a block from a peer's cache one-sidedly: the frame's bytes
//    and its trailer (tag and check), two gets in flight at once (one round
//    trip); the bytes count only if the trailer
//    carries the tag the holder named and the check of those bytes under it
//    (block_cache.h, "Cooperation"). That finds out a frame reused before,
//    during or after the read, and one not yet filled (a holder names a
//    reader's frame before its bytes are there). Anything else (a moved
//    tag, a dead or unreachable peer, a region it no longer has) is an
//    error the caller answers by asking the holder for the bytes.
//
// Threads: thread-safe; Fetch blocks (never call it on the transport's
// progress context).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "m2m/transport.h"

namespace fedfs::coop {

class BlockCache;

// Where a block of a file lives in a peer's cache (as a holder names it).
struct PeerCopy {
  std::string addr;         // the peer's transport address
  m2m::RegionDesc data;     // its arena
  m2m::RegionDesc tags;     // its trailer array (tag and check per frame)
  uint64_t block_size = 0;  // its blocks
  uint32_t frame = 0;
  uint64_t tag = 0;
  uint32_t length = 0;  // bytes of the block
};

class PeerFetch {
 public:
  // Registers `cache`'s memory with `transport` (both outlive this object).
  static Result<std::unique_ptr<PeerFetch>> Create(BlockCache* cache, m2m::Transport* transport,
                                                   std::chrono::nanoseconds timeout);
  ~PeerFetch();

  BlockCache* cache() const { return cache_; }
  // This node's arena and trailer array, for holders.
  m2m::RegionDesc data_region() const { return data_->Export(); }
  m2m::RegionDesc tags_region() const { return tags_->Export(); }

  // Reads `c.length` bytes of the copy into dst (at least c.length long).
  // ESTALE: the tag moved, or the bytes are not the block it names; other
  // errors: the peer could not be read.
  Status Fetch(const PeerCopy& c, std::byte* dst);
  // Fetch of copies[i] into dst[i] for every i, all their gets in flight at
  // once (one round trip for a run of blocks); a Status per copy.
  std::vector<Status> FetchAll(std::span<const PeerCopy> copies, std::span<std::byte* const> dst);

  // Tests: the gets in two rounds, the trailers first or the bytes first,
  // `hook` run between them, to force each race of a fetch with the peer's
  // reuse or fill of the frame. No hook: all at once.
  void SetBetweenGetsHookForTest(bool trailer_first, std::function<void()> hook) {
    trailer_first_ = trailer_first;
    between_ = std::move(hook);
  }

  struct Stats {
    // tag_misses: the trailer named another block, or the check failed
    uint64_t remote_hits = 0, remote_bytes = 0, tag_misses = 0, remote_errors = 0;
  };
  Stats stats() const;

 private:
  PeerFetch(BlockCache* cache, m2m::Transport* transport, std::chrono::nanoseconds timeout)
      : cache_(cache), transport_(transport), timeout_(timeout) {}
  struct Imported {
    std::shared_ptr<m2m::Endpoint> ep;
    m2m::RegionDesc data_desc, tags_desc;
    std::shared_ptr<m2m::RemoteRegion> data, tags;
  };
  Result<Imported> Import(const PeerCopy& c);

  BlockCache* const cache_;
  m2m::Transport* const transport_;
  const std::chrono::nanoseconds timeout_;
  std::unique_ptr<m2m::LocalRegion> data_, tags_;
  bool trailer_first_ = false;
  std::function<void()> between_;
  std::mutex mu_;
  std::map<std::string, Imported> peers_;  // by address, guarded by mu_
  std::atomic<uint64_t> remote_hits_{0}, remote_bytes_{0}, tag_misses_{0}, remote_errors_{0};
};

}  // namespace fedfs::coop
