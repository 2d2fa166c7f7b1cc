// InodeTable: the facade's table of the inodes the kernel knows (FUSE node
// ids handed out by lookups), each with its place in the namespace (parent,
// visible and real name), its holder and identity, and the index
// (parent, visible name) -> inode of the linked ones. An inode lives while
// the kernel holds lookups of it or it has children in the table; unlinked
// (renamed over, removed, its name taken by another file) it lives on for
// the lookups and handles left, reachable by number only.
//
// Threads: not synchronized. VfsImpl holds its mu_ around every call.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fedfs::ns {

class InodeTable {
 public:
  struct Inode {
    uint64_t parent = 0;
    std::string name;       // visible name in the parent VD
    std::string real_name;  // the name in the holder's export root
    mode_t type = 0;        // S_IF* bits
    std::string node;       // holder (non-directories)
    uint64_t st_ino = 0;
    uint64_t nlookup = 0;
    uint64_t generation = 0;
    size_t children = 0;    // inodes whose parent is this one
    bool linked = true;     // still reachable by (parent, name)
    bool replaced = false;  // unlinked because its name now names another file
    // The attributes last handed to the kernel: a getattr that can no longer
    // reach the file because another file took its name answers these, with
    // no links (as a local file system answers for a file renamed over
    // between a stat's lookup and its getattr).
    struct stat last {};
    // `last` is a remote file's attributes from a lookup that its node
    // watches for this node: when the reply handed them to the kernel
    // uncached (VfsImpl::Remember), the getattr that follows may answer
    // them (VfsImpl::GetAttr), while this node changed no file since
    // (`lookup_mark`, VfsImpl::local_changes_) and for a short while.
    bool lookup_attr = false;
    uint64_t lookup_mark = 0;
    std::chrono::steady_clock::time_point lookup_at{};
    // Attributes went to the kernel cacheable in a reply (a lookup's) that
    // the kernel may not have made its inode from yet: an invalidation that
    // finds no inode is tried again (VfsImpl::DropKernelAttrs).
    bool attrs_unsure = false;
  };

  // The table with the root directory as inode `root_ino`, never erased.
  InodeTable(uint64_t root_ino, Inode root);

  Inode* Find(uint64_t ino);
  const Inode* Find(uint64_t ino) const;
  bool Contains(uint64_t ino) const { return inodes_.contains(ino); }
  size_t size() const { return inodes_.size(); }

  // The linked inode named `name` in directory inode `parent`.
  std::optional<uint64_t> Named(uint64_t parent, const std::string& name) const;
  // The global path of `ino` (real names of files, visible names of
  // directories); "" if it or an ancestor is unknown or unlinked.
  std::string Path(uint64_t ino) const;

  // Adds `n`, linked as (n.parent, n.name) unless that name is taken; the
  // parent gains a child. Returns its number (never reused).
  uint64_t Add(Inode n);
  // (parent, name) names nothing any more; its inode, unlinked, lives on.
  void Unlink(uint64_t parent, const std::string& name);
  // Removes (parent, name) from the index and returns the inode it named,
  // still marked linked: the caller links it again with Move.
  std::optional<uint64_t> TakeName(uint64_t parent, const std::string& name);
  // `ino` is named (new_parent, new_name) from now on (visible and real
  // name); the old parent loses a child, the new one gains it.
  void Move(uint64_t ino, uint64_t new_parent, const std::string& new_name);
  // Its name now names another file: unlinked and marked replaced.
  Inode& MarkReplaced(uint64_t ino);
  // Erases `ino` if nothing holds it (no lookups, no children), then its
  // parent on the same terms, and so on up. Returns the erased inodes.
  std::vector<uint64_t> EraseUnused(uint64_t ino);

 private:
  struct NameHash {
    size_t operator()(const std::pair<uint64_t, std::string>& k) const {
      return std::hash<std::string>{}(k.second) ^ (k.first * 0x9e3779b97f4a7c15ull);
    }
  };

  const uint64_t root_;
  std::unordered_map<uint64_t, Inode> inodes_;
  // (parent, visible name) -> inode, for linked inodes. Hashed: a listing
  // looks up every entry (VfsImpl::Snapshot).
  std::unordered_map<std::pair<uint64_t, std::string>, uint64_t, NameHash> names_;
  uint64_t next_ino_;
};

}  // namespace fedfs::ns
