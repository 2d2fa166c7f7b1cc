// The control commands about the file-data cache (control/schema.h):
// "cache" (size, occupancy, hits, misses, reads from files' nodes,
// invalidations) and "cache_drop" (fedfsctl cache drop: every block dropped,
// then the same answer). Their handlers run on the control server's thread.
#pragma once

#include <functional>
#include <string>

#include "control/dispatcher.h"
#include "control/schema.h"

namespace fedfs::coop {

class BlockCache;
class PeerFetch;

// What this node, as the node of files others cache, knows of their copies.
struct HolderCounts {
  uint64_t redirects = 0, directory_files = 0, directory_copies = 0;
};
using HolderCountsFn = std::function<HolderCounts()>;

// The "cache" reply of `cache` (null: the cache is off) and `peers` (null:
// not shared), this node being `self`.
control::CacheReply CacheStatus(const BlockCache* cache, const PeerFetch* peers,
                                const HolderCountsFn& holder, const std::string& self);

// Registers "cache" and "cache_drop" (`cache` and `peers` must outlive the
// dispatcher's serving; null: they answer that the cache is off / not shared).
void RegisterCacheControl(control::Dispatcher& dispatcher, BlockCache* cache, PeerFetch* peers,
                          HolderCountsFn holder, const std::string& self);

}  // namespace fedfs::coop
