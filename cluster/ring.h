// The consistent-hash ring that maps a global path to its manager node,
// M(P) = ring_owner(hash(P)) (DESIGN.md).
//
// Each member contributes `vnodes` points at StableHash(node_id + "#" + i)
// (common/hash.h: xxHash64, fixed seed, identical on every node and build).
// A path's owner is the member owning the first point at or after
// StableHash(path), wrapping around at 2^64. Only the member list and vnodes
// decide the result: two nodes with the same live set agree on every owner,
// and removing a member moves exactly the paths that member owned.
//
// Pure logic with no daemon dependencies (library fedfs_ring), reused by
// namespace/. A Ring is immutable after construction and safe to share among
// threads; the daemon publishes it inside shared_ptr<const ...> snapshots.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fedfs::daemon {

class Ring {
 public:
  // `members`: node ids (duplicates are ignored); vnodes >= 1.
  Ring(std::vector<std::string> members, uint32_t vnodes);

  // The manager of `path` (a normalized global path such as "/a/b"; the
  // caller normalizes, the ring hashes the bytes as given). Empty string if
  // the ring has no members.
  const std::string& Owner(std::string_view path) const;

  // The owner of a raw hash value (for callers that hash themselves).
  const std::string& OwnerOfHash(uint64_t h) const;

  // Fraction of the 2^64 hash space owned by node_id (0 if not a member).
  // Sums to 1 over the members.
  double Share(std::string_view node_id) const;

  // Members, sorted.
  const std::vector<std::string>& members() const { return members_; }
  uint32_t vnodes() const { return vnodes_; }
  bool empty() const { return members_.empty(); }

 private:
  struct Point {
    uint64_t hash;
    uint32_t member;  // index into members_
  };
  std::vector<std::string> members_;
  uint32_t vnodes_;
  std::vector<Point> points_;  // sorted by (hash, member name)
  std::unordered_map<std::string, double> shares_;
};

}  // namespace fedfs::daemon
