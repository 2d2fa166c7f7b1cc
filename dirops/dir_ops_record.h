// The journal record of one multi-node directory operation (namespace/
// dir_ops.h; stored as one size-prefixed DirOpRecord of namespace/
// dir_ops.fbs under kvkeys::DirOpsJournalKey(id)) and its codec.
//
// Contract of DecodeRecord: the bytes are whatever the Kv holds, possibly
// damaged or written by another version. They are accepted only if the
// FlatBuffers verifier accepts them as a size-prefixed DirOpRecord of
// version kDirOpsRecordVersion with a known kind and state, a valid global
// `from` (and `to` for a rename; common/path.h) and a node in every
// saved directory; anything else is EPROTO (the caller keeps such a record
// and leaves it alone), never a crash. The bytes must be 8-aligned
// (FlatBuffers reads scalars in place; a Kv value in a std::string is).
// The decoded holders are sorted; `done` and `saved` are sets by node.
// DecodeRecord(EncodeRecord(r)) gives r back for every r DirOps builds.
// Pure functions; any thread. Internal to fedfs_ns_dirops (and its fuzz
// target).
#pragma once

#include <cerrno>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "dirops/dir_ops.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

inline constexpr uint16_t kDirOpsRecordVersion = 1;

// The daemon's credentials (probes, undo, recovery of what a caller began).
inline const Cred& RootCred() {
  static const Cred kRoot{};
  return kRoot;
}

// Runs `release` at scope exit (busy paths, name locks; also when a test
// hook throws).
class BusyGuard {
 public:
  explicit BusyGuard(std::function<void()> release) : release_(std::move(release)) {}
  ~BusyGuard() { release_(); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  std::function<void()> release_;
};

// Errnos after which the same step may succeed later (the node may come
// back); anything else is a definitive answer from the node.
inline bool IsTransient(int code) {
  switch (code) {
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case ETIMEDOUT:
    case ECONNREFUSED:
    case ECONNRESET:
    case ENOTCONN:
    case EAGAIN:
    case EINTR:
    case ESHUTDOWN:
      return true;
    default:
      return false;
  }
}

struct DirOps::Record {
  enum class Kind : uint8_t { kRename = 0, kRmdir = 1, kReplace = 2 };
  enum class State : uint8_t { kValidating = 0, kActing = 1, kUndoing = 2 };
  struct Saved {
    uint32_t mode = 0755;
    uint32_t uid = 0;
    uint32_t gid = 0;
  };

  uint64_t id = 0;
  Kind kind = Kind::kRename;
  State state = State::kValidating;
  std::string from;
  std::string to;
  unsigned flags = 0;
  Cred cred;
  std::vector<std::string> holders;  // sorted, unique
  std::set<std::string> done;
  std::map<std::string, Saved> saved;
  std::vector<NodeFs::DirTemplate> templates;
  uint64_t dir_id = 0;  // rename: the renamed directory's id (nodefs/dir_id.h)
  // kReplace (DirOps::ReplaceFile): the source's node and inode number, the
  // old destination's node, path and inode number.
  std::string from_node, to_node, replaced;
  uint64_t src_ino = 0, dst_ino = 0;

  std::vector<std::string> Paths() const {
    if (kind != Kind::kRmdir) return {from, to};
    return {from};
  }
  std::string Describe() const {
    if (kind == Kind::kReplace) {
      return "op " + std::to_string(id) + " rename " + from + " on " + from_node + " over " +
             replaced + " on " + to_node;
    }
    std::string s = "op " + std::to_string(id) + (kind == Kind::kRename ? " rename " : " rmdir ") +
                    from;
    if (kind == Kind::kRename) s += " -> " + to;
    s += " on [";
    for (size_t i = 0; i < holders.size(); ++i) s += (i ? "," : "") + holders[i];
    return s + "]";
  }
};


std::string EncodeRecord(const DirOps::Record& r);
Result<DirOps::Record> DecodeRecord(std::string_view bytes);

}  // namespace fedfs::ns
