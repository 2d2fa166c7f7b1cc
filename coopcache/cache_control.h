// The control commands about the file-data cache (control/schema.h):
// "cache" (size, occupancy, hits, misses, reads from files' nodes,
// invalidations) and "cache_drop" (fedfsctl cache drop: every block dropped,
// then the same answer). Their handlers run on the control server's thread.
#pragma once

#include <string>

#include "control/dispatcher.h"
#include "control/schema.h"

namespace fedfs::coop {

class BlockCache;

// The "cache" reply of `cache` (null: the cache is off), this node being
// `self`.
control::CacheReply CacheStatus(const BlockCache* cache, const std::string& self);

// Registers "cache" and "cache_drop" (`cache` must outlive the dispatcher's
// serving; null: they answer that the cache is off).
void RegisterCacheControl(control::Dispatcher& dispatcher, BlockCache* cache,
                          const std::string& self);

}  // namespace fedfs::coop
