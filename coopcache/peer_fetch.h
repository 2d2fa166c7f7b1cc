// PeerFetch: one node's side of cooperative caching over the transport
// (docs/coopcache.md, "Blocks fetched from peers' memory").
//
//  * Its BlockCache's arena and tag array are registered with the transport
//    (Create), and their descriptors handed to every holder this node reads
//    from (Regions, in the file service's Hello), so that a holder may send
//    another reader here.
//  * Fetch reads a block from a peer's cache one-sidedly: the frame's tag,
//    the bytes, the tag again; the bytes count only if both reads find the
//    tag the holder named (block_cache.h, "Cooperation"): the first proves
//    the frame was filled (a holder names a frame before its reader filled
//    it), the second that no rewrite began meanwhile. Anything else (a moved tag, a
//    dead or unreachable peer, a region it no longer has) is an error the
//    caller answers by asking the holder for the bytes.
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
#include <string>

#include "common/result.h"
#include "m2m/transport.h"

namespace fedfs::coop {

class BlockCache;

// Where a block of a file lives in a peer's cache (as a holder names it).
struct PeerCopy {
  std::string addr;         // the peer's transport address
  m2m::RegionDesc data;     // its arena
  m2m::RegionDesc tags;     // its tag array
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
  // This node's arena and tag array, for holders.
  m2m::RegionDesc data_region() const { return data_->Export(); }
  m2m::RegionDesc tags_region() const { return tags_->Export(); }

  // Reads `c.length` bytes of the copy into dst (at least c.length long).
  // ESTALE: the tag moved; other errors: the peer could not be read.
  Status Fetch(const PeerCopy& c, std::byte* dst);

  // Tests: runs between the read of a copy's bytes and the second read of
  // its tag (to force the races of a fetch with the peer's reuse or fill of
  // the frame).
  void SetAfterBytesHookForTest(std::function<void()> hook) { after_bytes_ = std::move(hook); }

  struct Stats {
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
  std::function<void()> after_bytes_;
  std::mutex mu_;
  std::map<std::string, Imported> peers_;  // by address, guarded by mu_
  std::atomic<uint64_t> remote_hits_{0}, remote_bytes_{0}, tag_misses_{0}, remote_errors_{0};
};

}  // namespace fedfs::coop
