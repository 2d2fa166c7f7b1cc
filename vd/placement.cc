// Placement of new files (vd/placement.h).
#include "vd/placement.h"

#include <set>

#include "common/path.h"

namespace fedfs::ns {

namespace {

bool KnownPolicy(const std::string& p) {
  return p == "local" || p == "hash" || p == "most-free";
}

Status ValidateRule(const PlacementRule& r) {
  const std::string what = "placement rule for prefix '" + r.prefix + "'";
  if (auto s = ValidateGlobalPath(r.prefix); !s) {
    return Err(EINVAL, what + ": prefix is not a global path (" + s.error().context + ")");
  }
  if (!r.node.empty()) {
    if (!r.policy.empty() && r.policy != "node") {
      return Err(EINVAL, what + ": both policy '" + r.policy + "' and node '" + r.node + "'");
    }
    return Ok();
  }
  if (r.policy == "node") return Err(EINVAL, what + ": policy 'node' without a node");
  if (!KnownPolicy(r.policy)) {
    return Err(EINVAL, what + ": unknown policy '" + r.policy +
                           "' (local, hash, most-free, or a node)");
  }
  return Ok();
}

Result<std::string> Apply(const std::string& policy, const std::string& node,
                          const ClusterView& view, const std::string& path,
                          const std::map<std::string, uint64_t>& free_bytes) {
  if (!node.empty()) {
    if (!view.IsAlive(node)) {
      return Err(EHOSTDOWN, "placement node '" + node + "' for " + path + " is not alive");
    }
    return node;
  }
  if (view.live.empty()) return Err(EHOSTDOWN, "no live node to place " + path);
  if (policy == "local") return view.self;
  if (policy == "hash") {
    if (!view.ring || view.ring->empty()) return Err(EHOSTDOWN, "empty ring placing " + path);
    return view.ring->Owner(path);
  }
  // most-free: the live map is sorted by id, so a strict > keeps the smallest
  // id among equals.
  const std::string* best = nullptr;
  uint64_t best_free = 0;
  for (const auto& [id, addr] : view.live) {
    auto f = free_bytes.find(id);
    const uint64_t free = f == free_bytes.end() ? 0 : f->second;
    if (best == nullptr || free > best_free) {
      best = &id;
      best_free = free;
    }
  }
  return *best;
}

}  // namespace

Status ValidatePlacementOptions(const PlacementOptions& options) {
  if (!KnownPolicy(options.policy)) {
    return Err(EINVAL, "unknown placement policy '" + options.policy +
                           "' (local, hash, most-free)");
  }
  std::set<std::string> prefixes;
  for (const PlacementRule& r : options.rules) {
    if (auto s = ValidateRule(r); !s) return s;
    if (!prefixes.insert(r.prefix).second) {
      return Err(EINVAL, "two placement rules for prefix '" + r.prefix + "'");
    }
  }
  return Ok();
}

Result<std::string> ChoosePlacement(const PlacementOptions& options, const ClusterView& view,
                                    const std::string& path,
                                    const std::map<std::string, uint64_t>& free_bytes) {
  if (auto s = ValidatePlacementOptions(options); !s) return Err(s.error());
  if (auto s = ValidateGlobalPath(path); !s) return Err(s.error());
  const PlacementRule* best = nullptr;
  for (const PlacementRule& r : options.rules) {
    if (!PathWithin(path, r.prefix)) continue;
    if (best == nullptr || r.prefix.size() > best->prefix.size()) best = &r;
  }
  if (best == nullptr) return Apply(options.policy, "", view, path, free_bytes);
  return Apply(best->policy, best->node, view, path, free_bytes);
}

}  // namespace fedfs::ns
