#include "coopcache/memory_guard.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/logging.h"
#include "coopcache/block_cache.h"

namespace fedfs::coop {

namespace {

Result<uint64_t> MemInfo(const char* field) {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return Err(errno, "opening /proc/meminfo");
  char line[256];
  const size_t len = std::strlen(field);
  Result<uint64_t> out = Err(ENOENT, std::string(field) + " not in /proc/meminfo");
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long kb = 0;
    if (std::strncmp(line, field, len) == 0 && line[len] == ':' &&
        std::sscanf(line + len + 1, "%llu", &kb) == 1) {
      out = uint64_t{kb} * 1024;
      break;
    }
  }
  std::fclose(f);
  return out;
}

}  // namespace

Result<uint64_t> MemAvailable() { return MemInfo("MemAvailable"); }
Result<uint64_t> MemTotal() { return MemInfo("MemTotal"); }

MemoryGuard::MemoryGuard(BlockCache* cache, MemoryGuardOptions options)
    : cache_(cache), opts_(std::move(options)) {
  min_free_ = opts_.min_free_bytes;
  if (min_free_ == 0) {
    auto total = MemTotal();
    min_free_ = total ? *total / 20 : uint64_t{256} << 20;
  }
  if (opts_.start_thread) thread_ = std::thread([this] { Run(); });
}

MemoryGuard::~MemoryGuard() { Stop(); }

void MemoryGuard::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MemoryGuard::Run() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, opts_.period, [&] { return stop_; })) {
    lock.unlock();
    Check();
    lock.lock();
  }
}

void MemoryGuard::Check() {
  auto avail = opts_.available ? opts_.available() : MemAvailable();
  if (!avail) {
    std::lock_guard lock(mu_);
    if (stats_.errors++ == 0) {
      Logger("coopcache")->warn("cannot read the memory available: {}; the cache will not shrink",
                                avail.error().ToString());
    }
    return;
  }
  const size_t capacity = cache_->capacity_blocks();
  const size_t limit = cache_->limit_blocks();
  const uint64_t block = cache_->block_size();
  const size_t step = std::max<size_t>(1, capacity / 8);
  if (*avail < min_free_) {
    if (limit == 0) return;
    const size_t deficit = static_cast<size_t>((min_free_ - *avail + block - 1) / block);
    const size_t cut = std::min(limit, std::max(deficit, step));
    cache_->SetLimit(limit - cut);
    std::lock_guard lock(mu_);
    ++stats_.shrinks;
  } else if (*avail >= 2 * min_free_ + step * block && limit < capacity) {
    cache_->SetLimit(std::min(capacity, limit + step));
    std::lock_guard lock(mu_);
    ++stats_.grows;
  }
}

auto MemoryGuard::stats() const -> Stats {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace fedfs::coop
