// What the VfsImpl files (vfs_impl.cc helpers and caches, vfs_names.cc
// namespace operations, vfs_files.cc files, directories and the rest) share:
// inode-number layout, mode/d_type conversions, the "vfs" logger. Internal to
// fedfs_ns_vfs.
#pragma once

#include <dirent.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/path.h"
#include "vfs/vfs_impl.h"

// Returns the error of a failed Result from the enclosing function.
#define FEDFS_TRY(var, expr)            \
  auto var = (expr);                    \
  if (!var) return Err(var.error())

namespace fedfs::ns::vfs_detail {


inline constexpr uint64_t kInoMask = (uint64_t{1} << 48) - 1;
inline constexpr uint64_t kDirTag = 0xffff;

inline mode_t TypeFromDt(uint8_t dt) { return static_cast<mode_t>(DTTOIF(dt)); }
inline uint8_t DtFromMode(mode_t m) { return static_cast<uint8_t>(IFTODT(m & S_IFMT)); }
inline bool IsDir(mode_t type) { return S_ISDIR(type); }

inline std::shared_ptr<spdlog::logger> Log() {
  static auto log = Logger("vfs");
  return log;
}

inline std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}


// One file or directory under one name: same real name, holders and type.
inline bool SameEntry(const VdEntry* e, const std::optional<VdEntry>& was) {
  if (e == nullptr || !was) return e == nullptr && !was;
  return e->real_name == was->real_name && e->holders == was->holders && e->type == was->type;
}
inline bool Unlisted(const VdEntry* e) { return e == nullptr; }

}  // namespace fedfs::ns::vfs_detail

namespace fedfs::ns {

// A path this node is renaming away, from construction to destruction
// (renaming_): a getattr that finds the file gone there waits for it
// (RenamedAway).
class VfsImpl::RenamingAway {
 public:
  RenamingAway(VfsImpl* vfs, std::string path) : vfs_(vfs), path_(std::move(path)) {
    std::lock_guard lock(vfs_->mu_);
    vfs_->renaming_.insert(path_);
  }
  RenamingAway(const RenamingAway&) = delete;
  RenamingAway& operator=(const RenamingAway&) = delete;
  ~RenamingAway() {
    {
      std::lock_guard lock(vfs_->mu_);
      vfs_->renaming_.erase(vfs_->renaming_.find(path_));
    }
    vfs_->renamed_.notify_all();
  }

 private:
  VfsImpl* vfs_;
  std::string path_;
};

// The name locks (VdClient::Lock, which waits out another node's hold) of
// one operation: taken in (directory, name) order, so two operations never
// wait for each other in a cycle. Released at the end unless the
// operation's reported change ended them at the manager (Reported).
class VfsImpl::NameLocks {
 public:
  explicit NameLocks(VdClient* vds) : vds_(vds) {}
  NameLocks(const NameLocks&) = delete;
  NameLocks& operator=(const NameLocks&) = delete;
  ~NameLocks() {
    for (const auto& [dir, name] : held_) vds_->Release(dir, name);
  }

  Status Take(std::vector<std::pair<std::string, std::string>> names) {
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    for (auto& [dir, name] : names) {
      if (auto s = vds_->Lock(dir, name); !s) return s;
      held_.emplace_back(std::move(dir), std::move(name));
    }
    return Ok();
  }
  // Locks `name` and claims `claim` in directory `dir` in one step (no other
  // lock held: a rename within one directory). The claim is the caller's to
  // end (ReleaseNew) unless the reported change ends it.
  Status TakeWithClaim(const std::string& dir, const std::string& name, const std::string& claim) {
    if (auto s = vds_->LockAndClaim(dir, name, claim); !s) return s;
    held_.emplace_back(dir, name);
    return Ok();
  }
  // Reads `name` of `dir` and holds it in one step (VdClient::LockRead);
  // held (and released at the end) only when it names an entry under its
  // own real name. No other lock held.
  Result<VdClient::NameRead> TakeRead(const std::string& dir, const std::string& name) {
    auto r = vds_->LockRead(dir, name);
    if (r && r->held) held_.emplace_back(dir, name);
    return r;
  }
  // The operation reported its change: the manager ended the locks.
  void Reported() { held_.clear(); }

 private:
  VdClient* vds_;
  std::vector<std::pair<std::string, std::string>> held_;
};

template <class T, class Make>
Result<std::pair<std::string, T>> VfsImpl::MakeNew(const Cred& c, const std::string& dir_path,
                                                   const VdPtr& dir_vd, const std::string& name,
                                                   bool is_dir, Make make, uint8_t add_type,
                                                   NewName* owed) {
  const std::string path = JoinPath(dir_path, name);
  NewName added;
  FEDFS_TRY(node, PlaceNew(c, dir_path, dir_vd, path, is_dir, add_type, &added));
  if (owed != nullptr) *owed = added;
  auto fs = FsOf(*node);
  Result<T> made = fs ? make(*fs, path) : Result<T>(Err(fs.error()));
  if (!made && options_.on_full.enabled && NoRoom(made.error().code)) {
    // No room at the chosen node: made on the node with the most free bytes
    // (vfs_room.cc), under the same claim of the name.
    const std::string other = RoomyNode(*node, 0);
    auto other_fs = other.empty() ? Result<std::shared_ptr<NodeFs>>(Err(made.error()))
                                  : FsOf(other);
    if (other_fs && EnsureDirOn(c, other, dir_path, dir_vd)) {
      Result<T> again = make(*other_fs, path);
      if (again) {
        room_creates_.fetch_add(1, std::memory_order_relaxed);
        if (added.owed == NewEntry::kAdded) {
          // The entry moves to the other node in one change (its claim ends).
          ReportEdits(dir_path, {VdEdit{false, name, 0, *node, 0},
                                 VdEdit{true, name, add_type, other, 0}});
          if (owed != nullptr) owed->owed = NewEntry::kReported;
        }
        return std::make_pair(other, std::move(*again));
      }
    }
  }
  if (!made) {
    AbandonNew(dir_path, name, *node, added);
    return Err(made.error());
  }
  return std::make_pair(std::move(*node), std::move(*made));
}

}  // namespace fedfs::ns

