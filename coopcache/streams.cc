#include "coopcache/streams.h"

#include <algorithm>

namespace fedfs::coop {

bool Streams::Read(uint64_t key, uint64_t offset, uint64_t length) {
  if (opts_.after == 0) return false;
  std::lock_guard lock(mu_);
  if (streams_.size() >= opts_.max_streams && !streams_.contains(key)) streams_.clear();
  Stream& s = streams_[key];
  const bool near = s.run != 0 && offset <= s.end + opts_.window &&
                    offset + opts_.window >= s.end;
  if (!near) {
    s = Stream{offset + length, length};
    return false;
  }
  const bool past = s.run >= opts_.after;
  s.run += length;
  s.end = std::max(s.end, offset + length);
  return past;
}

void Streams::Forget(uint64_t key) {
  std::lock_guard lock(mu_);
  streams_.erase(key);
}

size_t Streams::size() const {
  std::lock_guard lock(mu_);
  return streams_.size();
}

}  // namespace fedfs::coop
