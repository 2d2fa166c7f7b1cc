// HolderDirectory: the holder's half of cooperative caching
// (docs/coopcache.md, "Blocks fetched from peers' memory"): for the files
// this node holds, which client sessions cache which blocks, and where in
// their registered cache (frame, tag).
//
// It is a hint, never the truth: a reader sent to a copy checks the frame's
// tag after reading its bytes (coopcache/peer_fetch.h), and goes back to
// the holder when it moved. What it must never do is name a copy of bytes
// older than the file's last change: DropFile (or DropRange, for the
// blocks a change touched) is called after every change
// of a file's data and before that change is acknowledged (the file
// service's AttrsChanged), and Record takes the version the fetch began
// under, refusing a copy whose fetch a change overtook.
//
// Bounded: at most kCopiesPerBlock copies per block (the newest stay) and
// max_blocks blocks in all (past that, nothing new is recorded until
// changes or departed sessions free room).
//
// Threads: every method is thread-safe (one mutex, never held across I/O).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace fedfs::coop {

struct FileId {
  uint64_t dev = 0, ino = 0;
  auto operator<=>(const FileId&) const = default;
};

// One cached copy of a block at a client session.
struct Copy {
  uint64_t session = 0;
  uint32_t frame = 0;
  uint64_t tag = 0;
  uint32_t length = 0;  // bytes of the block (fewer than a block: the file ended)
};

// Where a reader announces it will keep blocks it asks for (one per block of
// the request, in order).
struct Frame {
  uint32_t frame = 0;
  uint64_t tag = 0;
};

class HolderDirectory {
 public:
  static constexpr size_t kCopiesPerBlock = 4;
  explicit HolderDirectory(size_t max_blocks = size_t{1} << 20) : max_blocks_(max_blocks) {}

  // The file's version now: taken before reading its bytes for a fetch.
  uint64_t Version(const FileId& f) const;
  // Session `session` keeps blocks first.. (frames[i] for block first+i,
  // lengths[i] bytes; a block of length 0 is not recorded), fetched under
  // `version`; with `replace`, every other copy of those blocks goes (the
  // reader found one wrong). False if the file changed since `version`.
  bool Record(const FileId& f, uint64_t version, uint64_t session, uint64_t block_size,
              uint64_t first, std::span<const Frame> frames, std::span<const uint32_t> lengths,
              bool replace);
  // The copies of blocks first.., one per block, for the longest run of
  // blocks (at most `count`) that some session other than `reader` caches
  // (the newest copy of each); empty if block `first` has none.
  std::vector<std::pair<uint64_t, Copy>> Find(const FileId& f, uint64_t block_size, uint64_t first,
                                              size_t count, uint64_t reader) const;
  // N-chance forwarding (docs/coopcache.md): session `session` evicted its
  // copy of block `index` (at frame/tag). The copy is forgotten; `last` is
  // true when it was recorded (so current: no change since it was fetched)
  // and no other copy of the block is left, and `version` is the file's
  // version now, for the Record of the copy a forward makes.
  struct Evicted {
    bool last = false;
    uint64_t version = 0;
  };
  Evicted Evict(const FileId& f, uint64_t session, uint64_t block_size, uint64_t index,
                uint32_t frame, uint64_t tag);
  // The file's data changed: no copy of it is named again.
  void DropFile(const FileId& f);
  // The file's bytes [offset, offset + length) changed: the copies of the
  // blocks holding them, and of a short last block (the change may have
  // grown the file past it), are forgotten, the others stay named, and every
  // fetch of the file in flight is refused at Record. A range to the end
  // (length UINT64_MAX), or of more than 256 blocks, is DropFile.
  void DropRange(const FileId& f, uint64_t offset, uint64_t length);
  // Every copy is forgotten (the membership changed).
  void DropAll();
  // The session ended: its copies are forgotten.
  void DropSession(uint64_t session);
  bool Empty() const;

  struct Stats {
    uint64_t files = 0, blocks = 0, copies = 0;
    uint64_t recorded = 0, refused = 0, dropped_files = 0, found = 0, dropped_ranges = 0;
    uint64_t evicted = 0, evicted_last = 0;
  };
  Stats stats() const;

 private:
  struct FileRec {
    uint64_t version = 0;
    uint64_t block_size = 0;
    std::map<uint64_t, std::vector<Copy>> blocks;  // index -> copies, newest last
  };
  uint64_t VersionLocked(const FileId& f) const;
  void EraseLocked(std::map<FileId, FileRec>::iterator it);

  const size_t max_blocks_;
  mutable std::mutex mu_;
  std::map<FileId, FileRec> files_;
  size_t blocks_ = 0, copies_ = 0;
  uint64_t next_version_ = 1;
  uint64_t floor_ = 0;  // the version of a file without a record
  mutable Stats stats_;
};

}  // namespace fedfs::coop
