#include "coopcache/hints.h"

namespace fedfs::coop {

void Hints::Put(uint64_t file, uint64_t index, uint64_t generation, PeerCopy copy) {
  if (max_ == 0) return;
  std::lock_guard lock(mu_);
  const Key k{file, index};
  if (auto it = map_.find(k); it != map_.end()) {
    order_.erase(it->second.order);
    map_.erase(it);
  }
  while (map_.size() >= max_) {
    map_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(k);
  map_.emplace(k, Entry{generation, std::move(copy), std::prev(order_.end())});
  ++stats_.recorded;
}

std::optional<PeerCopy> Hints::Take(uint64_t file, uint64_t index, uint64_t generation) {
  std::lock_guard lock(mu_);
  auto it = map_.find(Key{file, index});
  if (it == map_.end()) return std::nullopt;
  std::optional<PeerCopy> out;
  if (it->second.generation == generation) {
    out = std::move(it->second.copy);
    ++stats_.taken;
  } else {
    ++stats_.stale;
  }
  order_.erase(it->second.order);
  map_.erase(it);
  return out;
}

void Hints::NoteRead(bool ok) {
  std::lock_guard lock(mu_);
  ++(ok ? stats_.hits : stats_.misses);
}

auto Hints::stats() const -> Stats {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.entries = map_.size();
  return s;
}

}  // namespace fedfs::coop
