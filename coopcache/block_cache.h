// BlockCache: one node's cache of file data in blocks (docs/coopcache.md,
// "Blocks and generations"): `size_bytes` of memory in blocks of
// `block_bytes`, for the data of files held on other nodes.
//
// Files and generations. A file is named by a 64-bit key chosen by the user
// (the mount's inode number of the file). Every invalidation draws a stamp
// from one counter that only grows: InvalidateFile stamps the whole file,
// InvalidateRange a run of its blocks (whose blocks go at once; the others
// stay). A file's generation (Generation) is its latest stamp. A reader
// takes it before it asks the file's node for the bytes, and Puts them with
// it: they are refused if the file, or a range holding their block, was
// invalidated since -- bytes fetched before an invalidation that raced with
// the fetch are never returned later. A block is returned while no
// whole-file invalidation followed the generation it was stored under. A
// file keeps its last kMaxRanges range stamps; a fetch older than those it
// forgot is refused. A block stored short (the file ended in it) goes with
// every range invalidation of the file, and is stored only if nothing of the
// file was invalidated since its fetch began: a write past it may have grown
// the file. (A file's record may be dropped while it has no block:
// it then answers `floor_`, which moved past every stamp handed out
// before.)
//
// Replacement (scan-resistant, as 2Q): a new block enters the probation
// queue (FIFO); a hit there promotes it to the protected queue (LRU). A
// victim is taken from probation while it holds more than its share
// (probation_percent of the blocks) or protected is empty, else from
// protected. One sequential scan larger than the cache thus cycles through
// probation and leaves the blocks read twice alone.
//
// Memory: one anonymous mapping of size_bytes (reserved, not touched: a
// block's pages are backed when first stored into); Clear gives every page
// back (MADV_DONTNEED). The bookkeeping is about 100 bytes per block in
// use, plus 32 per file that has blocks.
//
// Cooperation (docs/coopcache.md, "Blocks fetched from peers' memory"): the
// blocks live in one arena, and every frame (a block's place in it) has a
// trailer of two 64-bit words in a second array, its tag and its check; both
// may be registered with the transport so that peers read a block
// one-sidedly. A frame's tag is 0 while it is free, reserved or being
// rewritten, and a value never used before by this object (from a random
// start) while it holds one block's bytes; its check is then
// Check(bytes, tag). A peer reads the bytes and the trailer at once (in any
// order, even torn): the bytes are the block the tag names iff the tag is
// the one it was told and the check is that of the bytes it read under that
// tag (odds of a false match 2^-64 per read). A fill for peers to find goes
// Reserve (a frame and the tag it will have) -> Publish (bytes stored, tag
// and check set) or Abandon.
//
// Forwarding (docs/coopcache.md, "N-chance forwarding"): a block published
// with an Origin (the file's node, the file's id there, how often it was
// forwarded) is handed to the evict sink when replacement evicts it while
// it is current (not when it is invalidated, cleared or replaced in place).
// The sink runs under the cache's mutex: it must copy what it keeps, return
// quickly and never call back into the cache.
//
// Threads: every method is thread-safe (one mutex; copies in and out are
// made under it, a block at a time). Invalidate never blocks on I/O, so it
// may be called from the transport's progress context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"

namespace fedfs::coop {

struct BlockCacheOptions {
  size_t size_bytes = 0;       // 0: no cache (Create refuses it; callers skip it)
  size_t block_bytes = 256 << 10;  // a power of two, 4 KiB .. 64 MiB
  unsigned probation_percent = 25;  // 1..99
};

// Where a block came from (see "Forwarding" above).
struct Origin {
  std::string holder;  // the file's node; empty: none (never forwarded)
  uint64_t dev = 0, ino = 0;  // the file there
  uint32_t recirc = 0;        // times forwarded so far
};

// A block replacement evicted (see "Forwarding" above).
struct Evicted {
  const Origin& origin;
  uint64_t file = 0;        // the cache's key of the file
  uint64_t generation = 0;  // the file's generation (the block is current under it)
  uint64_t index = 0;       // block of the file
  uint32_t frame = 0;  // where it was
  uint64_t tag = 0;    // the tag it had there
  std::span<const std::byte> bytes;
};

class BlockCache {
 public:
  // EINVAL for a block size that is not a power of two in range, a size
  // below one block or a probation share out of range; ENOMEM when the
  // mapping fails.
  static Result<std::unique_ptr<BlockCache>> Create(const BlockCacheOptions& options);
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  size_t block_size() const { return block_; }
  size_t capacity_blocks() const { return frames_.size(); }

  // The generation of `file` now: take it before fetching its bytes.
  uint64_t Generation(uint64_t file) const;
  // Block `index` of `file` (bytes [index * block_size, +block_size)), if
  // stored under the file's current generation: copies up to dst.size() of
  // its bytes into dst and answers how many the block holds (fewer than a
  // block: the file ended there when it was fetched). A hit counts, and in
  // probation promotes the block.
  std::optional<size_t> Get(uint64_t file, uint64_t index, std::span<std::byte> dst);
  // Stores `data` (at most a block; fewer: the file ends within it) as block
  // `index` of `file`, fetched while the file's generation was `generation`.
  // False (nothing stored) if the generation moved since.
  bool Put(uint64_t file, uint64_t index, uint64_t generation, std::span<const std::byte> data);
  // A frame for block `index` of `file`, to be filled by a fetch made under
  // `generation`, and the tag it will carry once published; its tag stays 0
  // until then. nullopt if the generation moved or every frame is reserved.
  struct Slot {
    uint32_t frame = 0;
    uint64_t tag = 0;
    std::byte* data = nullptr;  // the frame's bytes (block_size of them)
  };
  std::optional<Slot> Reserve(uint64_t file, uint64_t index, uint64_t generation);
  // Stores `data` (at most a block) in the slot's frame, or, with no data,
  // takes the first `length` bytes already there; then indexes it as block
  // `index` of `file` and sets its tag. False (the frame freed) if the
  // file's generation moved since `generation`.
  // With `origin`, the block is handed to the evict sink when evicted.
  bool Publish(const Slot& slot, uint64_t file, uint64_t index, uint64_t generation,
               std::span<const std::byte> data, size_t length, const Origin* origin = nullptr);
  // The evict sink (null: none).
  void SetEvictSink(std::function<void(const Evicted&)> sink) {
    std::lock_guard lock(mu_);
    sink_ = std::move(sink);
  }
  void Abandon(const Slot& slot);
  // A frame's trailer (see "Cooperation"), as peers read it.
  struct Trailer {
    uint64_t tag = 0;
    uint64_t check = 0;
  };
  static constexpr size_t kTrailerBytes = sizeof(Trailer);
  // The arena and the trailer array (one Trailer per frame), for registration.
  std::span<std::byte> arena() { return {arena_, arena_bytes_}; }
  std::span<std::byte> tags() {
    return {reinterpret_cast<std::byte*>(tags_), frames_.size() * kTrailerBytes};
  }
  // The check of a block's bytes published under `tag` (see "Cooperation").
  static uint64_t Check(std::span<const std::byte> bytes, uint64_t tag);
  // Whether Get would hit, without counting it or moving the block.
  bool Has(uint64_t file, uint64_t index) const;
  // Every block of `file` stops being returned (O(1); freed as found).
  void InvalidateFile(uint64_t file);
  // Blocks first..last of `file` go (at once); fetches of them in flight
  // are refused, those of its other blocks not. A run of more than
  // kMaxRangeBlocks is InvalidateFile.
  static constexpr uint64_t kMaxRangeBlocks = 256;
  static constexpr size_t kMaxRanges = 16;
  void InvalidateRange(uint64_t file, uint64_t first, uint64_t last);
  // Drops every block and gives the memory back (fedfsctl cache drop).
  void Clear();
  // Memory pressure (memory_guard.h): at most `blocks` frames hold blocks
  // from now on (at most capacity_blocks()); blocks past it are evicted
  // (as replacement would) and every free frame's memory is given back.
  void SetLimit(size_t blocks);
  size_t limit_blocks() const;
  // Accounting of the caller's misses: one read of `bytes` from the file's
  // node (its page cache or disk).
  void NoteFetch(uint64_t bytes);
  // One read of `bytes` from the file's node that went past the cache (a
  // long sequential stream: streams.h).
  void NoteStreamed(uint64_t bytes);

  struct Stats {
    uint64_t size_bytes = 0, block_bytes = 0;
    uint64_t blocks_used = 0, bytes_used = 0, files = 0;
    uint64_t probation = 0, protected_blocks = 0;
    uint64_t hits = 0, misses = 0, stale = 0;  // stale: found, of an older generation
    uint64_t puts = 0, puts_refused = 0, evictions = 0, invalidations = 0, promotions = 0;
    uint64_t fetches = 0, fetched_bytes = 0;  // NoteFetch
    uint64_t streamed = 0, streamed_bytes = 0;  // NoteStreamed
    uint64_t clears = 0;
    uint64_t reserved = 0;  // frames reserved now
    uint64_t evicted_to_sink = 0;  // evictions handed to the evict sink
    uint64_t limit_blocks = 0;     // SetLimit (capacity when never set)
  };
  Stats stats() const;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  enum class Queue : uint8_t { kFree, kProbation, kProtected, kReserved };
  struct Frame {
    uint64_t file = 0, index = 0, generation = 0;
    uint32_t length = 0;
    uint32_t prev = kNone, next = kNone;
    Queue queue = Queue::kFree;
    Origin origin;
  };
  struct List {
    uint32_t head = kNone, tail = kNone;  // head: newest
    size_t size = 0;
  };
  struct Key {
    uint64_t file, index;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const noexcept;
  };
  struct Range {
    uint64_t stamp, first, last;
  };
  struct FileRec {
    uint64_t generation = 0;  // the last whole-file stamp
    size_t blocks = 0;
    uint64_t partial = UINT64_MAX;  // a block stored short (the file ended in it)
    uint64_t ranges_floor = 0;  // range stamps up to this are forgotten
    std::vector<Range> ranges;  // the last kMaxRanges range stamps since `generation`, oldest first
    // The last stamp, whole or range (Generation).
    uint64_t Latest() const { return ranges.empty() ? generation : ranges.back().stamp; }
  };

  BlockCache(const BlockCacheOptions& options, std::byte* arena, size_t arena_bytes,
             Trailer* tags);
  // Tag 0, or `tag` with the check of the frame's bytes (see "Cooperation").
  void SetTag(uint32_t f, uint64_t tag);
  uint64_t NextTagLocked();
  // Indexes frame f (filled, tag 0) as block `index` of `file` and sets its
  // tag (`tag`, or a new one when 0).
  void IndexLocked(uint32_t f, uint64_t file, uint64_t index, uint64_t generation, size_t length,
                   Queue q, uint64_t tag = 0);
  List& ListOf(Queue q) { return q == Queue::kProbation ? probation_ : protected_; }
  void Unlink(uint32_t f);
  void PushHead(Queue q, uint32_t f);
  void FreeFrame(uint32_t f);  // unlinks, unindexes, returns it to free_
  uint32_t TakeFrame();        // a free frame, evicting one if none (or at the limit)
  bool EvictOneLocked();       // the replacement victim goes; false: none
  uint64_t GenerationLocked(uint64_t file) const;
  // Whether bytes of block `index` fetched under `generation` may be stored;
  // a short block (the file ended in it) only if nothing of the file was
  // invalidated since: a write elsewhere may have grown the file past it.
  bool FetchValidLocked(uint64_t file, uint64_t index, uint64_t generation, bool short_block) const;
  // Whether frame f's block is current (no whole-file stamp since).
  bool CurrentLocked(const Frame& fr) const;
  std::byte* Data(uint32_t f) { return arena_ + size_t{f} * block_; }

  const size_t block_;
  const unsigned probation_percent_;
  std::byte* const arena_;
  const size_t arena_bytes_;
  Trailer* const tags_;  // one per frame, its words accessed as atomics
  mutable std::mutex mu_;
  std::vector<Frame> frames_;
  std::vector<uint32_t> free_;
  List probation_, protected_;
  std::unordered_map<Key, uint32_t, KeyHash> index_;
  std::unordered_map<uint64_t, FileRec> files_;
  uint64_t next_generation_ = 1;  // the next generation InvalidateFile hands out
  uint64_t floor_ = 0;            // the generation of a file without a record
  uint64_t next_tag_ = 0;         // random start, never 0
  size_t limit_ = 0;              // frames that may hold blocks (SetLimit)
  std::function<void(const Evicted&)> sink_;
  Stats stats_;
};

}  // namespace fedfs::coop
