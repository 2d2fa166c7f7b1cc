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
class Forwarder;
class Hints;
class MemoryGuard;
class PeerFetch;

// What this node, as the node of files others cache, knows of their copies.
struct HolderCounts {
  uint64_t redirects = 0, directory_files = 0, directory_copies = 0;
  uint64_t forward_asked = 0, forwarded_in = 0;  // N-chance forwarding
};
using HolderCountsFn = std::function<HolderCounts()>;

// The parts of the cache a "cache" reply tells of (null: off).
struct CacheParts {
  BlockCache* cache = nullptr;
  const PeerFetch* peers = nullptr;       // null: not shared
  const Forwarder* forwarder = nullptr;  // null: blocks not forwarded
  const Hints* hints = nullptr;          // null: likewise
  const MemoryGuard* guard = nullptr;    // null: the cache does not shrink
};

// The "cache" reply of `parts`, this node being `self`.
control::CacheReply CacheStatus(const CacheParts& parts, const HolderCountsFn& holder,
                                const std::string& self);

// Registers "cache" and "cache_drop" (`parts` must outlive the
// dispatcher's serving).
void RegisterCacheControl(control::Dispatcher& dispatcher, CacheParts parts,
                          HolderCountsFn holder, const std::string& self);

}  // namespace fedfs::coop
