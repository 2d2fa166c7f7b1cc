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

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/result.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

// A DT_* type as fedfsctl shows it: dir, file, symlink, fifo, socket, char,
// block, unknown.
const char* DirentTypeName(uint8_t dt);

struct VdEntry {
  std::string name;       // the visible name (an alias for a conflict copy)
  std::string real_name;  // the name in the holders' export roots
  uint8_t type = 0;       // DT_*
  std::vector<std::string> holders;  // node ids holding it, sorted; 1 unless a directory
  bool alias = false;                // shown as "name@node" because of a conflict
  // A directory's identity (nodefs/dir_id.h): the least id of its copies',
  // kept while any copy is listed; 0 for other types and when unknown.
  uint64_t id = 0;

  // The name in the holders' export roots.
  const std::string& RealName() const { return real_name.empty() ? name : real_name; }
};

// The entries of a VD by visible name, in name order. A tree, not a sorted
// vector: a change inserts or erases in O(log N) (shifting a vector of 10,000
// entries cost a rename about 100 us at the manager and at every DT copy).
// Find goes through a hash index of the tree's nodes: a walk down a tree of
// 20,000 names cost about 1 us (a cache miss per level), and every lookup,
// create, rename and unlink makes several.
class VdEntries {
  using Map = std::map<std::string, VdEntry, std::less<>>;
  // Keys view the tree's keys, which stay in place while their node lives.
  using Index = std::unordered_map<std::string_view, Map::iterator>;

  template <class It, class Ref>
  class Iter {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = VdEntry;
    using difference_type = std::ptrdiff_t;
    using pointer = std::remove_reference_t<Ref>*;
    using reference = Ref;
    Iter() = default;
    explicit Iter(It it) : it_(it) {}
    Ref operator*() const { return it_->second; }
    pointer operator->() const { return &it_->second; }
    Iter& operator++() { return ++it_, *this; }
    Iter operator++(int) { Iter t = *this; ++it_; return t; }
    Iter& operator--() { return --it_, *this; }
    Iter operator--(int) { Iter t = *this; --it_; return t; }
    bool operator==(const Iter&) const = default;
    It base() const { return it_; }

   private:
    It it_{};
  };

 public:
  using iterator = Iter<Map::iterator, VdEntry&>;
  using const_iterator = Iter<Map::const_iterator, const VdEntry&>;

  VdEntries() = default;
  // From entries sorted by name (names unique).
  VdEntries(std::vector<VdEntry> sorted) {  // NOLINT: implicit, like the vector it replaced
    for (VdEntry& e : sorted) map_.emplace_hint(map_.end(), e.name, std::move(e));
    Reindex();
  }
  VdEntries(const VdEntries& o) : map_(o.map_) { Reindex(); }
  VdEntries& operator=(const VdEntries& o) {
    if (this != &o) {
      map_ = o.map_;
      Reindex();
    }
    return *this;
  }
  // A move keeps the tree's nodes, so the index stays valid; the source is
  // left empty.
  VdEntries(VdEntries&& o) noexcept
      : map_(std::move(o.map_)), index_(std::move(o.index_)), with_at_(o.with_at_) {
    o.Clear();
  }
  VdEntries& operator=(VdEntries&& o) noexcept {
    if (this != &o) {
      map_ = std::move(o.map_);
      index_ = std::move(o.index_);
      with_at_ = o.with_at_;
      o.Clear();
    }
    return *this;
  }

  size_t size() const { return map_.size(); }
  bool empty() const { return map_.empty(); }
  iterator begin() { return iterator(map_.begin()); }
  iterator end() { return iterator(map_.end()); }
  const_iterator begin() const { return const_iterator(map_.begin()); }
  const_iterator end() const { return const_iterator(map_.end()); }

  const VdEntry* Find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &it->second->second;
  }
  iterator FindIter(std::string_view name) {
    auto it = index_.find(name);
    return it == index_.end() ? end() : iterator(it->second);
  }
  // Entries whose name contains '@' (every alias does): none means no
  // "name@node" range to scan.
  size_t NamesWithAt() const { return with_at_; }
  // The first entry whose name is not less than `name`.
  iterator LowerBound(std::string_view name) { return iterator(map_.lower_bound(name)); }
  iterator Erase(iterator it) {
    const std::string_view key(it.base()->first);
    if (HasAt(key)) --with_at_;
    index_.erase(key);
    return iterator(map_.erase(it.base()));
  }
  // Adds `e`, replacing an entry of the same name.
  void Put(VdEntry e) {
    std::string key = e.name;
    auto [it, added] = map_.insert_or_assign(std::move(key), std::move(e));
    if (added) Indexed(it);
  }

  // Bytes the index takes per entry (node, bucket), for byte bounds.
  static constexpr size_t kIndexBytesPerEntry =
      sizeof(void*) + sizeof(size_t) + sizeof(std::string_view) + sizeof(Map::iterator) +
      sizeof(void*);

 private:
  static bool HasAt(std::string_view name) { return name.find('@') != std::string_view::npos; }
  void Clear() {
    index_.clear();
    map_.clear();
    with_at_ = 0;
  }
  void Indexed(Map::iterator it) {
    index_.emplace(std::string_view(it->first), it);
    if (HasAt(it->first)) ++with_at_;
  }
  void Reindex() {
    index_.clear();
    with_at_ = 0;
    index_.reserve(map_.size());
    for (auto it = map_.begin(); it != map_.end(); ++it) Indexed(it);
  }

  Map map_;
  Index index_;
  size_t with_at_ = 0;
};

// Bytes a VD entry takes (for the DT's byte bound).
size_t VdEntryBytes(const VdEntry& e);

struct VirtualDirectory {
  std::string path;
  uint64_t version = 0;  // grows with every change applied at the manager
  uint64_t epoch = 0;    // membership epoch it was built in
  std::vector<std::string> holders;  // nodes where `path` exists as a directory
  VdEntries entries;                 // by name
  size_t subdirs = 0;                // entries of type DT_DIR (nlink is 2 + subdirs)
  // False when the manager did not record the requester as a sharer (it was
  // not a live member in the manager's view): not to be kept in a directory
  // table, since no change would invalidate it.
  bool cacheable = true;
  // Only the entry of one name (VdService::GetName): Find that name, use
  // holders and version; `entries` is not the listing (the count of
  // directories, `subdirs`, is the whole VD's).
  bool partial = false;
  // False when this node's kernel would not be told of the VD's changes (it
  // was fetched without `notify`: the directory is busy, VdService::Get):
  // names from it must not be cached by the kernel.
  bool kernel_may_cache = true;

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

// A hash of a list of holders (0 never: "none"), by which a requester tells
// a manager which holders it has, so that the same ones are not sent back
// (thousands of node ids at 1,024 nodes).
uint64_t HoldersHash(const std::vector<std::string>& holders);

// The partial VD of `vd` for a lookup of `name` (VirtualDirectory::partial):
// that name's entry (or none), the holders, version, epoch, flags and count
// of subdirectories; O(1). A partial `vd` is returned as it is.
std::shared_ptr<const VirtualDirectory> PartialOf(const std::shared_ptr<const VirtualDirectory>& vd,
                                                  const std::string& name);

// dirmerge: builds VD(P) from every live node's listing. ENOENT if no node
// has P as a directory (ENOTDIR if some node has a non-directory there and
// none a directory). Errors other than ENOENT/ENOTDIR from a node (dead,
// timed out) leave that node out of the union; the result says nothing of it
// (the VD service serves such a VD but does not keep it: vd_service.cc).
Result<VirtualDirectory> DirMerge(const std::string& path, uint64_t epoch, uint64_t version,
                                  const std::vector<NodeListing>& listings);

// The conflicts among `listings` (same inputs as DirMerge).
std::vector<Conflict> FindConflicts(const std::vector<NodeListing>& listings);

}  // namespace fedfs::ns
