// Internal to fedfs_migration: the journal record, the messages' encoding,
// and the state of a move in memory. Not a contract: include migration.h.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "common/result.h"
#include "m2m/transport.h"
#include "migration/migration.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

inline constexpr uint32_t kMigrationWireVersion = 1;
inline constexpr size_t kMaxLargest = 4096;  // files in one kMigLargest answer

// The hash of a chunk of a file (XXH3, 128 bits), as kMigDelta compares
// them (delta.cc).
// All of [p, p + n) is zero (a hole, as copies write it).
inline bool AllZero(const std::byte* p, size_t n) {
  return std::all_of(p, p + n, [](std::byte b) { return b == std::byte{0}; });
}
// A time as nanoseconds since the epoch (MoveMsg's atime_ns, mtime_ns).
inline int64_t Ns(const struct timespec& t) { return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; }

struct ChunkHashValue {
  uint64_t low = 0, high = 0;
  bool operator==(const ChunkHashValue&) const = default;
};
ChunkHashValue ChunkHash(const std::byte* data, size_t n);
inline constexpr size_t kMaxDeltaChunks = 262144;  // hashes in one kMigDelta (4 MiB)
// The block of a delta of a file of `size` bytes: `block` (a power of two),
// doubled until at most kMaxDeltaChunks blocks cover the file.
uint64_t DeltaBlock(uint64_t size, uint64_t block);

struct Migration::Rec {
  enum State : uint8_t { kCopying = 0, kCommitted = 1, kReceiving = 2, kPlaced = 3 };
  uint64_t id = 0;
  State state = kCopying;
  std::string path;
  std::string peer;  // T at the source, L at the target
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint8_t type = 0;
  bool out() const { return state == kCopying || state == kCommitted; }
  std::string Key() const;
};

// One message (migration.fbs MoveMessage), decoded.
struct MoveMsg {
  uint64_t id = 0;
  std::string path;
  std::string from;
  std::string to;
  uint64_t size = 0;
  uint32_t mode = 0, uid = 0, gid = 0;
  int64_t atime_ns = 0, mtime_ns = 0;
  std::vector<NodeFs::DirTemplate> parents;
  uint8_t state = 0;
  uint64_t bytes = 0;
  uint8_t trigger = 0;  // kMigStart: MoveTrigger
  bool dry_run = false;  // kMigStart: only the checks
  uint64_t max_rate = 0;  // kMigStart, kMigPrepare: the copy's bytes per second (0: no limit)
  uint64_t chunk = 0;                 // kMigDelta: bytes per hashed chunk
  std::vector<ChunkHashValue> hashes;  // kMigDelta: the source's, chunk by chunk
  std::vector<std::pair<std::string, uint64_t>> files;  // kMigLargest's answer: path, size
};

struct Migration::Alive {
  std::shared_mutex mu;
  Migration* m = nullptr;  // null once the object is going
};

struct Migration::Prep {
  MoveMsg m;
};

// A copy being received at T: its unnamed file, and the hash of each block
// (MigrationOptions::delta_block bytes) of it as it was written.
struct Migration::Staged {
  explicit Staged(int f) : fd(f) {}
  ~Staged();
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  int fd;
  std::vector<ChunkHashValue> hashes;
  bool aligned = true;  // every read of the copy was whole but the last
  std::atomic<bool> cancelled{false};  // L cancelled the move (kMigCancel)
  std::atomic<uint64_t> copied{0};     // bytes read and written so far (kMigProgress)
};

m2m::Bytes EncodeMoveRecord(const Migration::Rec& r);
// EPROTO for anything the verifier refuses or of another version.
Result<Migration::Rec> DecodeMoveRecord(std::string_view bytes);
m2m::Bytes EncodeMsg(const MoveMsg& m);
// Untrusted bytes: EPROTO unless verified, of this version, with a valid
// global path (when one is given), at most 256 parents and at most
// kMaxLargest files, each with a valid global path, at most kMaxDeltaChunks
// hashes.
Result<MoveMsg> DecodeMsg(const m2m::Bytes& payload);

}  // namespace fedfs::ns
