// MemoryGuard: the file-data cache gives memory back under pressure
// (docs/coopcache.md, "Memory").
//
// Every `period` it reads how much memory the machine has available
// (MemAvailable of /proc/meminfo: free memory plus what the kernel can
// reclaim without swapping). Below `min_free_bytes` the cache's limit
// (BlockCache::SetLimit) is cut by the deficit, and by at least an eighth
// of the cache, and the memory of the blocks it evicts is given back; with
// twice `min_free_bytes` available the limit grows back an eighth at a
// time. The cache never grows the daemon into the kernel's OOM killer: it
// is the first to shrink.
//
// Threads: one thread of its own; Check may also be called directly
// (tests). Stop (or the destructor) joins it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "common/result.h"

namespace fedfs::coop {

class BlockCache;

struct MemoryGuardOptions {
  uint64_t min_free_bytes = 0;  // 0: 5% of the machine's memory (MemTotal)
  std::chrono::milliseconds period{500};
  // Bytes available (tests); default: MemAvailable of /proc/meminfo.
  std::function<Result<uint64_t>()> available;
  bool start_thread = true;  // false: only Check (tests)
};

// MemAvailable and MemTotal of /proc/meminfo, in bytes.
Result<uint64_t> MemAvailable();
Result<uint64_t> MemTotal();

class MemoryGuard {
 public:
  MemoryGuard(BlockCache* cache, MemoryGuardOptions options);
  ~MemoryGuard();
  MemoryGuard(const MemoryGuard&) = delete;
  MemoryGuard& operator=(const MemoryGuard&) = delete;

  void Check();
  void Stop();

  uint64_t min_free_bytes() const { return min_free_; }
  struct Stats {
    uint64_t shrinks = 0, grows = 0, errors = 0;
  };
  Stats stats() const;

 private:
  void Run();

  BlockCache* const cache_;
  const MemoryGuardOptions opts_;
  uint64_t min_free_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace fedfs::coop
