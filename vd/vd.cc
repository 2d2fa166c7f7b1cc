// Virtual directories: dirmerge and the conflict rule (vd/vd.h,
// docs/namespace.md), on top of the merge state of vd_internal.h.
#include "vd/vd.h"

#include <dirent.h>
#include <limits.h>

#include <algorithm>
#include <set>

#include "common/hash.h"
#include "common/path.h"
#include "nodefs/dir_id.h"
#include "vd/vd_internal.h"

namespace fedfs::ns {

const char* DirentTypeName(uint8_t dt) {
  switch (dt) {
    case DT_DIR: return "dir";
    case DT_REG: return "file";
    case DT_LNK: return "symlink";
    case DT_FIFO: return "fifo";
    case DT_SOCK: return "socket";
    case DT_CHR: return "char";
    case DT_BLK: return "block";
    default: return "unknown";
  }
}

namespace vd_internal {
namespace {

bool ByName(const VdEntry& a, const VdEntry& b) { return a.name < b.name; }

// "a@n2" -> "a" (node ids never contain '@', so the last '@' splits); "" if
// `name` has no '@' or nothing before it.
std::string AliasBase(const std::string& name) {
  const size_t at = name.rfind('@');
  if (at == std::string::npos || at == 0) return {};
  return name.substr(0, at);
}

}  // namespace

Result<MergeState> Collect(const std::vector<NodeListing>& listings) {
  MergeState s;
  std::set<std::string> seen_nodes;
  bool not_dir = false;
  // A file in a move: the target's incoming copy is shown only when the
  // source's tombstone of the same move is in this merge (the source has
  // committed), and a tombstone is never shown (docs/migration.md).
  std::set<uint64_t> committed;
  for (const NodeListing& l : listings) {
    if (!l.listing) continue;
    for (const DirEntry& e : *l.listing) {
      if (e.move_role == DirEntry::kOutgoing) committed.insert(e.move_id);
    }
  }
  for (const NodeListing& l : listings) {
    if (!seen_nodes.insert(l.node).second) continue;
    if (!l.listing) {
      if (l.listing.error().code == ENOTDIR) not_dir = true;
      continue;  // ENOENT: no such directory there; others: node left out
    }
    s.holders.push_back(l.node);
    for (const DirEntry& e : *l.listing) {
      if (!ValidateName(e.name)) continue;
      if (e.move_role == DirEntry::kOutgoing) continue;
      if (e.move_role == DirEntry::kIncoming && committed.count(e.move_id) == 0) continue;
      auto& copies = s.copies[e.name];
      const bool dup = std::any_of(copies.begin(), copies.end(),
                                   [&](const auto& c) { return c.first == l.node; });
      if (dup) continue;
      copies.emplace_back(l.node, e.type);
      if (e.type == DT_DIR) {
        uint64_t& id = s.dir_ids[e.name];
        id = MergeDirId(id, CopyDirId(e.id, l.node, e.ino));
      }
    }
  }
  if (s.holders.empty()) {
    if (not_dir) return Err(ENOTDIR, "not a directory on any node");
    return Err(ENOENT, "no such directory on any live node");
  }
  std::sort(s.holders.begin(), s.holders.end());
  for (auto& [name, copies] : s.copies) std::sort(copies.begin(), copies.end());
  return s;
}

std::vector<VdEntry> EntriesForName(const MergeState& s, const std::string& name) {
  std::vector<VdEntry> out;
  auto it = s.copies.find(name);
  if (it == s.copies.end()) return out;
  const auto& copies = it->second;

  VdEntry plain;
  plain.name = name;
  plain.real_name = name;
  for (const auto& [node, type] : copies) {
    if (type == DT_DIR) plain.holders.push_back(node);
  }
  if (!plain.holders.empty()) {
    plain.type = DT_DIR;  // directories merge and own the plain name
  } else {
    plain.type = copies.front().second;  // first holder in node-id order
    plain.holders.push_back(copies.front().first);
  }
  const bool dir_owner = plain.type == DT_DIR;
  if (dir_owner) {
    if (auto id = s.dir_ids.find(name); id != s.dir_ids.end()) plain.id = id->second;
  }
  const std::string first_node = copies.front().first;
  out.push_back(std::move(plain));

  for (const auto& [node, type] : copies) {
    if (dir_owner ? type == DT_DIR : node == first_node) continue;
    VdEntry a;
    a.name = name + "@" + node;
    if (s.copies.count(a.name) != 0 || a.name.size() > NAME_MAX) continue;  // hidden
    a.real_name = name;
    a.type = type;
    a.holders = {node};
    a.alias = true;
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<VdEntry> AllEntries(const MergeState& s) {
  std::vector<VdEntry> out;
  out.reserve(s.copies.size());
  for (const auto& [name, copies] : s.copies) {
    auto e = EntriesForName(s, name);
    std::move(e.begin(), e.end(), std::back_inserter(out));
  }
  std::sort(out.begin(), out.end(), ByName);
  return out;
}

std::vector<Conflict> ConflictsOf(const MergeState& s) {
  std::vector<Conflict> out;
  for (const auto& [name, copies] : s.copies) {
    size_t dirs = 0;
    for (const auto& c : copies) dirs += c.second == DT_DIR ? 1 : 0;
    const size_t others = copies.size() - dirs;
    if (others > 1 || (others >= 1 && dirs >= 1)) out.push_back(Conflict{name, copies});
  }
  std::sort(out.begin(), out.end(),
            [](const Conflict& a, const Conflict& b) { return a.name < b.name; });
  return out;
}

bool ApplyAdd(MergeState& s, const std::string& node, const std::string& name, uint8_t type,
              uint64_t id) {
  bool changed = false;
  if (type == DT_DIR && id != 0) {
    // The one known stays: a report racing with the store of a copy's id
    // (a watcher's, vd/ autonomy) must not replace it.
    changed = s.dir_ids.try_emplace(name, id).second;
  }
  auto h = std::lower_bound(s.holders.begin(), s.holders.end(), node);
  if (h == s.holders.end() || *h != node) {
    s.holders.insert(h, node);
    changed = true;
  }
  auto& copies = s.copies[name];
  auto c = std::lower_bound(copies.begin(), copies.end(), node,
                            [](const auto& copy, const std::string& n) { return copy.first < n; });
  if (c != copies.end() && c->first == node) {
    if (c->second == type) return changed;
    c->second = type;
    return true;
  }
  copies.insert(c, {node, type});
  return true;
}

bool ApplyRemove(MergeState& s, const std::string& node, const std::string& name) {
  auto it = s.copies.find(name);
  if (it == s.copies.end()) return false;
  auto& copies = it->second;
  auto c = std::find_if(copies.begin(), copies.end(),
                        [&](const auto& copy) { return copy.first == node; });
  if (c == copies.end()) return false;
  copies.erase(c);
  if (std::none_of(copies.begin(), copies.end(), [](const auto& k) { return k.second == DT_DIR; })) {
    s.dir_ids.erase(name);
  }
  if (copies.empty()) s.copies.erase(it);
  return true;
}

std::vector<std::string> RefreshKeys(const std::string& name) {
  std::vector<std::string> keys{name};
  if (std::string base = AliasBase(name); !base.empty()) keys.push_back(std::move(base));
  return keys;
}

std::vector<VdEntry> FreshEntries(const MergeState& s, const std::string& name) {
  std::vector<VdEntry> fresh;
  for (const std::string& k : RefreshKeys(name)) {
    auto e = EntriesForName(s, k);
    std::move(e.begin(), e.end(), std::back_inserter(fresh));
  }
  std::sort(fresh.begin(), fresh.end(), ByName);
  return fresh;
}

// O(1) per entry removed (the index), O(log N) per entry added. The entries
// of real name k are the plain "k" and its aliases "k@<node>", which are
// contiguous in name order.
void PatchEntries(const std::vector<std::string>& keys, std::vector<VdEntry> fresh,
                  VdEntries* entries, size_t* subdirs, int64_t* bytes) {
  auto count = [subdirs, bytes](const VdEntry& e, int d) {
    if (subdirs != nullptr && e.type == DT_DIR) *subdirs += d;
    if (bytes != nullptr) *bytes += d * static_cast<int64_t>(VdEntryBytes(e));
  };
  for (const std::string& k : keys) {
    if (auto it = entries->FindIter(k); it != entries->end() && it->real_name == k) {
      count(*it, -1);
      entries->Erase(it);
    }
    if (entries->NamesWithAt() == 0) continue;  // no alias to drop
    const std::string prefix = k + "@";
    for (auto it = entries->LowerBound(prefix);
         it != entries->end() && it->name.starts_with(prefix);) {
      if (it->real_name != k) {
        ++it;
        continue;
      }
      count(*it, -1);
      it = entries->Erase(it);
    }
  }
  for (VdEntry& e : fresh) {
    count(e, 1);
    entries->Put(std::move(e));
  }
}

void RefreshEntries(const MergeState& s, const std::string& name, VdEntries* entries,
                    size_t* subdirs) {
  PatchEntries(RefreshKeys(name), FreshEntries(s, name), entries, subdirs);
}

}  // namespace vd_internal

void VirtualDirectory::CountSubdirs() {
  subdirs = static_cast<size_t>(
      std::count_if(entries.begin(), entries.end(), [](const VdEntry& e) { return e.type == DT_DIR; }));
}

const VdEntry* VirtualDirectory::Find(const std::string& name) const { return entries.Find(name); }

size_t VdEntryBytes(const VdEntry& e) {
  size_t n = sizeof(VdEntry) + VdEntries::kIndexBytesPerEntry + e.name.size() + e.real_name.size();
  for (const auto& h : e.holders) n += sizeof(std::string) + h.size();
  return n;
}

Result<VirtualDirectory> DirMerge(const std::string& path, uint64_t epoch, uint64_t version,
                                  const std::vector<NodeListing>& listings) {
  auto s = vd_internal::Collect(listings);
  if (!s) return Err(s.error().code, path + ": " + s.error().context);
  VirtualDirectory vd;
  vd.path = path;
  vd.epoch = epoch;
  vd.version = version;
  vd.holders = std::move(s->holders);
  vd.entries = vd_internal::AllEntries(*s);
  vd.CountSubdirs();
  return vd;
}

std::vector<Conflict> FindConflicts(const std::vector<NodeListing>& listings) {
  auto s = vd_internal::Collect(listings);
  if (!s) return {};
  return vd_internal::ConflictsOf(*s);
}

std::shared_ptr<const VirtualDirectory> PartialOf(const std::shared_ptr<const VirtualDirectory>& vd,
                                                  const std::string& name) {
  if (vd->partial) return vd;
  auto part = std::make_shared<VirtualDirectory>();
  part->path = vd->path;
  part->version = vd->version;
  part->epoch = vd->epoch;
  part->holders = vd->holders;
  part->subdirs = vd->subdirs;
  part->cacheable = vd->cacheable;
  part->kernel_may_cache = vd->kernel_may_cache;
  part->partial = true;
  if (const VdEntry* e = vd->entries.Find(name)) part->entries.Put(*e);
  return part;
}

uint64_t HoldersHash(const std::vector<std::string>& holders) {
  std::string all;
  for (const auto& h : holders) {
    all += h;
    all.push_back('\0');
  }
  const uint64_t h = StableHash(all);
  return h == 0 ? 1 : h;
}

}  // namespace fedfs::ns
