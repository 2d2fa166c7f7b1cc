// Placement: which node stores a new file (create, mknod, symlink, mkdir of a
// file's missing parents). Policies (docs/namespace.md, docs/config.md
// `placement:`):
//  * "local"     the creating node (default: locality; a local program on
//                that node sees the file in its own export root);
//  * "hash"      the ring owner of the file's global path (spreads files
//                evenly, independent of who creates them);
//  * "most-free" the live node with the most free bytes (ties: smallest node
//                id; a live node with no figure in `free_bytes` counts as 0);
//  * a fixed node (PlacementRule::node): that node; EHOSTDOWN while it is not
//    alive.
// Path rules refine the default: the rule with the longest prefix containing
// the path (by whole components, PathWithin: "/a" covers "/a/b", not "/ab")
// decides.
//
// Pure functions over immutable inputs; any thread. The daemon fills
// PlacementOptions from its config and passes a fresh free-space table
// (statfs figures it gathers) to each decision.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "cluster/cluster.h"

namespace fedfs::ns {

struct PlacementRule {
  std::string prefix;  // a global path; "/" covers everything
  std::string policy;  // "local" | "hash" | "most-free"; "" or "node" with `node`
  std::string node;    // fixed node id (then `policy` must be "" or "node")
};

struct PlacementOptions {
  std::string policy = "local";  // default when no rule matches
  std::vector<PlacementRule> rules;
};

// Ok iff every policy name is known, every prefix is a valid global path,
// every fixed-node rule names a node, and no two rules share a prefix.
// EINVAL with the offending rule otherwise. (Config loading calls this.)
Status ValidatePlacementOptions(const PlacementOptions& options);

// The node that should store the new file `path` (a valid global path), by
// the options and the current view. Errors: EINVAL for invalid options or
// path; EHOSTDOWN when the chosen fixed node is not alive or no node is.
Result<std::string> ChoosePlacement(const PlacementOptions& options, const ClusterView& view,
                                    const std::string& path,
                                    const std::map<std::string, uint64_t>& free_bytes);

}  // namespace fedfs::ns
