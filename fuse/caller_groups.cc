#include "fuse/caller_groups.h"

namespace fedfs::fuse {

void CallerGroups::Keep(const Key& key, const Groups& g, Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (kept_.size() >= capacity_ && !kept_.contains(key)) {
    std::erase_if(kept_, [now](const auto& kv) { return kv.second.until <= now; });
    if (kept_.size() >= capacity_) kept_.clear();
  }
  kept_[key] = Entry{g, now + ttl_};
}

}  // namespace fedfs::fuse
