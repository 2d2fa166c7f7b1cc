// What the namespace needs to know about the federation: who is alive, how
// to reach them, the membership epoch and the ring that picks managers.
//
// The daemon adapts its Membership to ClusterViewSource; the simulator builds
// views directly. A ClusterView is immutable; Current() may be called from
// any thread, including the transport's progress context.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "cluster/ring.h"

namespace fedfs::ns {

using Ring = fedfs::daemon::Ring;

struct ClusterView {
  std::string self;                            // this node's id
  uint64_t epoch = 0;                          // membership epoch
  std::map<std::string, std::string> live;     // alive node id -> transport address
  std::map<std::string, std::string> dead;     // known dead node id -> address
  std::shared_ptr<const Ring> ring;            // over `live`

  // M(P): the manager of global path `path` ("" if no member is alive).
  const std::string& Manager(const std::string& path) const { return ring->Owner(path); }
  bool IsAlive(const std::string& node) const { return live.count(node) != 0; }
};

class ClusterViewSource {
 public:
  virtual ~ClusterViewSource() = default;
  // Never null.
  virtual std::shared_ptr<const ClusterView> Current() const = 0;
};

// A view that its owner sets (simulations and benchmarks on the fake
// network). Not synchronized: one thread sets and reads it.
class SettableClusterView final : public ClusterViewSource {
 public:
  std::shared_ptr<const ClusterView> Current() const override { return view_; }
  void Set(std::shared_ptr<const ClusterView> v) { view_ = std::move(v); }

 private:
  std::shared_ptr<const ClusterView> view_;
};

}  // namespace fedfs::ns
