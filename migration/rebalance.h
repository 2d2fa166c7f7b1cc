// The rebalance planner (docs/migration.md, "Rebalance"): which files to
// move where so that every node's share of its space in use comes within
// `threshold` of the federation's. Pure: no I/O, any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fedfs::ns {

struct NodeUsage {
  std::string node;
  uint64_t used = 0;   // bytes in use on the node's export file system
  uint64_t total = 0;  // its size (0: the node is left out)
  double share() const { return total == 0 ? 0 : static_cast<double>(used) / total; }
};

// A file a node offers to move: a regular file with one link.
struct RebalanceCandidate {
  std::string node;
  std::string path;  // global
  uint64_t size = 0;
};

struct PlannedMove {
  std::string path, from, to;
  uint64_t bytes = 0;
};

struct RebalancePlan {
  double mean = 0;                 // used / total over the federation
  std::vector<PlannedMove> moves;  // in the order to make them
  std::vector<NodeUsage> after;    // projected usage once they are made
};

// Biggest candidates first: each moves from a node whose share is above
// mean + threshold to the node with the lowest share, if that node stays at
// or below mean + threshold and the larger deviation from the mean of the
// two nodes falls. Ends when every node is within the threshold or no
// candidate helps. Nodes with total 0 are ignored.
RebalancePlan PlanRebalance(std::vector<NodeUsage> usage,
                            std::vector<RebalanceCandidate> candidates, double threshold);

}  // namespace fedfs::ns
