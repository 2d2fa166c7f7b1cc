// Virtual directories: VD(P), the union of the local directories P on all
// live nodes, and dirmerge, the pure function that builds it.
//
// Name conflicts (docs/namespace.md) are resolved by one deterministic rule:
//  * the same name as a directory on several nodes is ONE entry (directories
//    merge; holders = every node that has it);
//  * if any node has the name as a directory, the directory owns the plain
//    name; otherwise the copy on the first holder in node-id order owns it;
//  * every other copy is shown as "name@node" (an alias: real_name = name,
//    holders = {node}); an alias that would collide with a real name is not
//    shown in listings but is still reported by Conflicts();
//  * nothing is hidden silently: Conflicts() lists every name with more than
//    one non-directory copy, or a mix of types.
//
// Plain data and pure functions; any thread. VDs are immutable once built and
// are shared as shared_ptr<const VirtualDirectory>.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "namespace/node_fs.h"

namespace fedfs::ns {

struct VdEntry {
  std::string name;       // the visible name (an alias for a conflict copy)
  std::string real_name;  // the name in the holders' export roots
  uint8_t type = 0;       // DT_*
  std::vector<std::string> holders;  // node ids holding it, sorted; 1 unless a directory
  bool alias = false;                // shown as "name@node" because of a conflict

  // The name in the holders' export roots.
  const std::string& RealName() const { return real_name.empty() ? name : real_name; }
};

struct VirtualDirectory {
  std::string path;
  uint64_t version = 0;  // grows with every change applied at the manager
  uint64_t epoch = 0;    // membership epoch it was built in
  std::vector<std::string> holders;  // nodes where `path` exists as a directory
  std::vector<VdEntry> entries;      // sorted by name
  size_t subdirs = 0;                // entries of type DT_DIR (nlink is 2 + subdirs)
  // False when the manager did not record the requester as a sharer (it was
  // not a live member in the manager's view): not to be kept in a directory
  // table, since no change would invalidate it.
  bool cacheable = true;

  // Sets `subdirs` from `entries` (O(entries)).
  void CountSubdirs();
  // The entry with visible name `name`, or nullptr.
  const VdEntry* Find(const std::string& name) const;
};

struct Conflict {
  std::string name;
  // (node, type) of every copy, sorted by node.
  std::vector<std::pair<std::string, uint8_t>> copies;
};

// One node's answer to "list P": its entries, or the error (ENOENT: the node
// has no directory P; ENOTDIR: it has a non-directory there).
struct NodeListing {
  std::string node;
  Result<std::vector<DirEntry>> listing;
};

// dirmerge: builds VD(P) from every live node's listing. ENOENT if no node
// has P as a directory (ENOTDIR if some node has a non-directory there and
// none a directory). Errors other than ENOENT/ENOTDIR from a node (dead,
// timed out) leave that node out of the union; the result says nothing of it.
Result<VirtualDirectory> DirMerge(const std::string& path, uint64_t epoch, uint64_t version,
                                  const std::vector<NodeListing>& listings);

// The conflicts among `listings` (same inputs as DirMerge).
std::vector<Conflict> FindConflicts(const std::vector<NodeListing>& listings);

}  // namespace fedfs::ns
