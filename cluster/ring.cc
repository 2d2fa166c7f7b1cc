#include "cluster/ring.h"

#include <algorithm>

#include "common/hash.h"

namespace fedfs::daemon {
namespace {
const std::string kNoOwner;
}  // namespace

Ring::Ring(std::vector<std::string> members, uint32_t vnodes)
    : members_(std::move(members)), vnodes_(std::max<uint32_t>(vnodes, 1)) {
  std::sort(members_.begin(), members_.end());
  members_.erase(std::unique(members_.begin(), members_.end()), members_.end());
  points_.reserve(members_.size() * vnodes_);
  for (uint32_t m = 0; m < members_.size(); ++m) {
    for (uint32_t i = 0; i < vnodes_; ++i) {
      points_.push_back({StableHash(members_[m] + "#" + std::to_string(i)), m});
    }
  }
  // Ties (astronomically rare) break by member name so that every node agrees.
  std::sort(points_.begin(), points_.end(), [](const Point& a, const Point& b) {
    return a.hash != b.hash ? a.hash < b.hash : a.member < b.member;
  });
  // Point k owns the arc (points_[k-1].hash, points_[k].hash]; point 0 also
  // owns the wrap-around arc above the last point. Unsigned subtraction
  // computes both (2^64 arithmetic).
  for (const auto& m : members_) shares_[m] = 0.0;
  constexpr double kSpace = 18446744073709551616.0;  // 2^64
  for (size_t k = 0; k < points_.size(); ++k) {
    const uint64_t prev = points_[k == 0 ? points_.size() - 1 : k - 1].hash;
    uint64_t arc = points_[k].hash - prev;
    if (points_.size() == 1) {
      shares_[members_[points_[k].member]] = 1.0;
      break;
    }
    shares_[members_[points_[k].member]] += static_cast<double>(arc) / kSpace;
  }
}

const std::string& Ring::OwnerOfHash(uint64_t h) const {
  if (points_.empty()) return kNoOwner;
  auto it = std::lower_bound(points_.begin(), points_.end(), h,
                             [](const Point& p, uint64_t v) { return p.hash < v; });
  if (it == points_.end()) it = points_.begin();
  return members_[it->member];
}

const std::string& Ring::Owner(std::string_view path) const {
  return OwnerOfHash(StableHash(path));
}

double Ring::Share(std::string_view node_id) const {
  auto it = shares_.find(std::string(node_id));
  return it == shares_.end() ? 0.0 : it->second;
}

}  // namespace fedfs::daemon
