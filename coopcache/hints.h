// Hints: where this node's forwarded blocks went (docs/coopcache.md,
// "Hints"), so that a later miss of such a block reads it from there
// one-sidedly without asking the file's node first.
//
// A hint is as safe as a cached block: it is recorded under the generation
// the block had in this node's cache (block_cache.h) and used only while
// the file's generation is still that one, so a change this node was told
// of (or any gap in being told) voids it. The copy it names is checked by
// its tag as every copy is (peer_fetch.h); a miss falls back to the file's
// node. Used once (taken), bounded (the oldest go first).
//
// Threads: thread-safe (one mutex, never held across I/O).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "coopcache/peer_fetch.h"

namespace fedfs::coop {

class Hints {
 public:
  explicit Hints(size_t max_entries = 65536) : max_(max_entries) {}

  // Block `index` of `file` (this node's cache key), current under
  // `generation` when it was evicted, now kept as `copy`.
  void Put(uint64_t file, uint64_t index, uint64_t generation, PeerCopy copy);
  // The copy, if recorded under `generation` (else the hint goes).
  std::optional<PeerCopy> Take(uint64_t file, uint64_t index, uint64_t generation);
  // The outcome of reading a taken hint's copy.
  void NoteRead(bool ok);

  struct Stats {
    uint64_t entries = 0, recorded = 0, taken = 0, stale = 0, hits = 0, misses = 0;
  };
  Stats stats() const;

 private:
  struct Key {
    uint64_t file, index;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const noexcept {
      return std::hash<uint64_t>{}(k.file * 0x9e3779b97f4a7c15ull ^ k.index);
    }
  };
  struct Entry {
    uint64_t generation = 0;
    PeerCopy copy;
    std::list<Key>::iterator order;
  };

  const size_t max_;
  mutable std::mutex mu_;
  std::unordered_map<Key, Entry, KeyHash> map_;
  std::list<Key> order_;  // oldest first
  Stats stats_;
};

}  // namespace fedfs::coop
