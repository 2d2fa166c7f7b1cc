#include "vfs/inode_table.h"

namespace fedfs::ns {

namespace {
bool IsDirType(mode_t type) { return (type & S_IFMT) == S_IFDIR; }
}  // namespace

InodeTable::InodeTable(uint64_t root_ino, Inode root) : root_(root_ino), next_ino_(root_ino + 1) {
  inodes_.emplace(root_ino, std::move(root));
}

InodeTable::Inode* InodeTable::Find(uint64_t ino) {
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? nullptr : &it->second;
}

const InodeTable::Inode* InodeTable::Find(uint64_t ino) const {
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? nullptr : &it->second;
}

std::optional<uint64_t> InodeTable::Named(uint64_t parent, const std::string& name) const {
  auto it = names_.find({parent, name});
  if (it == names_.end()) return std::nullopt;
  return it->second;
}

std::string InodeTable::Path(uint64_t ino) const {
  if (ino == root_) return "/";
  std::vector<const std::string*> parts;
  uint64_t cur = ino;
  while (cur != root_) {
    const Inode* n = Find(cur);
    if (n == nullptr || !n->linked) return "";
    parts.push_back(IsDirType(n->type) ? &n->name : &n->real_name);
    cur = n->parent;
  }
  std::string path;
  for (auto p = parts.rbegin(); p != parts.rend(); ++p) {
    path += '/';
    path += **p;
  }
  return path;
}

uint64_t InodeTable::Add(Inode n) {
  const uint64_t ino = next_ino_++;
  auto key = std::make_pair(n.parent, n.name);
  const uint64_t parent = n.parent;
  inodes_.emplace(ino, std::move(n));
  names_.emplace(std::move(key), ino);
  ++inodes_.at(parent).children;
  return ino;
}

void InodeTable::Unlink(uint64_t parent, const std::string& name) {
  auto it = names_.find({parent, name});
  if (it == names_.end()) return;
  inodes_.at(it->second).linked = false;
  names_.erase(it);
}

std::optional<uint64_t> InodeTable::TakeName(uint64_t parent, const std::string& name) {
  auto it = names_.find({parent, name});
  if (it == names_.end()) return std::nullopt;
  const uint64_t ino = it->second;
  names_.erase(it);
  return ino;
}

void InodeTable::Move(uint64_t ino, uint64_t new_parent, const std::string& new_name) {
  Inode& n = inodes_.at(ino);
  --inodes_.at(n.parent).children;
  n.parent = new_parent;
  n.name = n.real_name = new_name;
  ++inodes_.at(new_parent).children;
  names_[{new_parent, new_name}] = ino;
}

InodeTable::Inode& InodeTable::MarkReplaced(uint64_t ino) {
  Inode& n = inodes_.at(ino);
  if (auto it = names_.find({n.parent, n.name}); it != names_.end() && it->second == ino) {
    names_.erase(it);
  }
  n.linked = false;
  n.replaced = true;
  return n;
}

std::vector<uint64_t> InodeTable::EraseUnused(uint64_t ino) {
  std::vector<uint64_t> erased;
  while (ino != root_) {
    auto it = inodes_.find(ino);
    if (it == inodes_.end()) break;
    Inode& n = it->second;
    if (n.nlookup > 0 || n.children > 0) break;
    if (n.linked) names_.erase({n.parent, n.name});
    const uint64_t parent = n.parent;
    inodes_.erase(it);
    erased.push_back(ino);
    auto p = inodes_.find(parent);
    if (p == inodes_.end()) break;
    --p->second.children;
    ino = parent;
  }
  return erased;
}

}  // namespace fedfs::ns
