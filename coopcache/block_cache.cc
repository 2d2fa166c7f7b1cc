#include "coopcache/block_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <random>

#include <xxhash.h>

namespace fedfs::coop {

size_t BlockCache::KeyHash::operator()(const Key& k) const noexcept {
  // splitmix64 of the two words: blocks of one file spread over the buckets.
  uint64_t x = k.file * 0x9e3779b97f4a7c15ull + k.index;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<size_t>(x ^ (x >> 31));
}

Result<std::unique_ptr<BlockCache>> BlockCache::Create(const BlockCacheOptions& o) {
  if (!std::has_single_bit(o.block_bytes) || o.block_bytes < 4096 ||
      o.block_bytes > (size_t{64} << 20)) {
    return Err(EINVAL, "cache block size must be a power of two from 4 KiB to 64 MiB");
  }
  if (o.size_bytes < o.block_bytes) return Err(EINVAL, "cache size below one block");
  if (o.size_bytes / o.block_bytes >= kNone) return Err(EINVAL, "cache of too many blocks");
  if (o.probation_percent < 1 || o.probation_percent > 99) {
    return Err(EINVAL, "cache probation share must be 1..99 percent");
  }
  const size_t bytes = o.size_bytes / o.block_bytes * o.block_bytes;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  if (p == MAP_FAILED) return Err(errno, "mapping the block cache");
  // Transparent huge pages where the kernel has them for madvise: a block
  // stored into fresh memory then faults once per 2 MiB, not once per 4 KiB
  // (measured: the faults of a first fill cost more than the copies on a
  // small VM). Best effort.
  ::madvise(p, bytes, MADV_HUGEPAGE);
  const size_t tag_bytes = bytes / o.block_bytes * kTrailerBytes;
  void* t = ::mmap(nullptr, tag_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (t == MAP_FAILED) {
    const int e = errno;
    ::munmap(p, bytes);
    return Err(e, "mapping the block cache's tags");
  }
  return std::unique_ptr<BlockCache>(
      new BlockCache(o, static_cast<std::byte*>(p), bytes, static_cast<Trailer*>(t)));
}

BlockCache::BlockCache(const BlockCacheOptions& o, std::byte* arena, size_t arena_bytes,
                       Trailer* tags)
    : block_(o.block_bytes),
      probation_percent_(o.probation_percent),
      arena_(arena),
      arena_bytes_(arena_bytes),
      tags_(tags),
      frames_(arena_bytes / o.block_bytes),
      limit_(frames_.size()) {
  // Tags start at a random point: a restarted node's frames never carry a
  // tag its earlier run published (2^-40 odds over a trillion fills).
  std::random_device rd;
  next_tag_ = (uint64_t{rd()} << 32 | rd()) | 1;
  free_.reserve(frames_.size());
  for (size_t f = frames_.size(); f-- > 0;) free_.push_back(static_cast<uint32_t>(f));
  stats_.size_bytes = arena_bytes;
  stats_.block_bytes = block_;
}

BlockCache::~BlockCache() {
  ::munmap(arena_, arena_bytes_);
  ::munmap(tags_, frames_.size() * kTrailerBytes);
}

uint64_t BlockCache::Check(std::span<const std::byte> bytes, uint64_t tag) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), tag);
}

// A frame's tag goes to 0 before its bytes change; after they are stored its
// check is set, then its tag (release). A reader needs no order among these:
// the check ties the bytes to the tag (see "Cooperation" in the header). The
// fence keeps the stores of a rewrite after the store of 0.
void BlockCache::SetTag(uint32_t f, uint64_t tag) {
  if (tag != 0) {
    const uint64_t check = Check({Data(f), frames_[f].length}, tag);
    std::atomic_ref<uint64_t>(tags_[f].check).store(check, std::memory_order_relaxed);
  }
  std::atomic_ref<uint64_t>(tags_[f].tag).store(tag, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

uint64_t BlockCache::NextTagLocked() {
  if (++next_tag_ == 0) ++next_tag_;
  return next_tag_;
}

void BlockCache::Unlink(uint32_t f) {
  Frame& fr = frames_[f];
  List& l = ListOf(fr.queue);
  if (fr.prev != kNone) frames_[fr.prev].next = fr.next; else l.head = fr.next;
  if (fr.next != kNone) frames_[fr.next].prev = fr.prev; else l.tail = fr.prev;
  fr.prev = fr.next = kNone;
  --l.size;
}

void BlockCache::PushHead(Queue q, uint32_t f) {
  Frame& fr = frames_[f];
  List& l = ListOf(q);
  fr.queue = q;
  fr.prev = kNone;
  fr.next = l.head;
  if (l.head != kNone) frames_[l.head].prev = f; else l.tail = f;
  l.head = f;
  ++l.size;
}

void BlockCache::FreeFrame(uint32_t f) {
  Frame& fr = frames_[f];
  Unlink(f);
  index_.erase(Key{fr.file, fr.index});
  if (auto it = files_.find(fr.file); it != files_.end() && it->second.blocks > 0) {
    --it->second.blocks;
  }
  stats_.bytes_used -= fr.length;
  fr.queue = Queue::kFree;
  SetTag(f, 0);
  free_.push_back(f);
}

bool BlockCache::EvictOneLocked() {
  const size_t probation_cap = std::max<size_t>(1, limit_ * probation_percent_ / 100);
  const List& from =
      probation_.size > probation_cap || protected_.size == 0 ? probation_ : protected_;
  if (from.tail == kNone) return false;  // every frame reserved
  const uint32_t victim = from.tail;
  const Frame& v = frames_[victim];
  if (sink_ && !v.origin.holder.empty() && CurrentLocked(v)) {
    ++stats_.evicted_to_sink;
    sink_(Evicted{v.origin, v.file, v.generation, v.index, victim,
                  std::atomic_ref<uint64_t>(tags_[victim].tag).load(std::memory_order_relaxed),
                  std::span<const std::byte>(Data(victim), v.length)});
  }
  FreeFrame(victim);
  ++stats_.evictions;
  return true;
}

uint32_t BlockCache::TakeFrame() {
  if (free_.empty() || frames_.size() - free_.size() >= limit_) {
    if (!EvictOneLocked()) return kNone;
  }
  if (free_.empty()) return kNone;
  const uint32_t f = free_.back();
  free_.pop_back();
  return f;
}

uint64_t BlockCache::GenerationLocked(uint64_t file) const {
  auto it = files_.find(file);
  return it == files_.end() ? floor_ : it->second.Latest();
}

bool BlockCache::FetchValidLocked(uint64_t file, uint64_t index, uint64_t generation,
                                  bool short_block) const {
  auto it = files_.find(file);
  if (it == files_.end()) return generation == floor_;
  const FileRec& r = it->second;
  if (generation < r.generation || generation < r.ranges_floor) return false;
  if (short_block && generation < r.Latest()) return false;
  for (const Range& g : r.ranges) {
    if (g.stamp > generation && index >= g.first && index <= g.last) return false;
  }
  return true;
}

bool BlockCache::CurrentLocked(const Frame& fr) const {
  auto it = files_.find(fr.file);
  return it != files_.end() && fr.generation >= it->second.generation;
}

uint64_t BlockCache::Generation(uint64_t file) const {
  std::lock_guard lock(mu_);
  return GenerationLocked(file);
}

std::optional<size_t> BlockCache::Get(uint64_t file, uint64_t index, std::span<std::byte> dst) {
  std::lock_guard lock(mu_);
  auto it = index_.find(Key{file, index});
  if (it == index_.end()) {
    ++stats_.misses;
    return std::nullopt;
  }
  const uint32_t f = it->second;
  Frame& fr = frames_[f];
  if (!CurrentLocked(fr)) {
    ++stats_.stale;
    ++stats_.misses;
    FreeFrame(f);
    return std::nullopt;
  }
  std::memcpy(dst.data(), Data(f), std::min<size_t>(dst.size(), fr.length));
  ++stats_.hits;
  Unlink(f);
  if (fr.queue == Queue::kProbation) ++stats_.promotions;
  PushHead(Queue::kProtected, f);
  return fr.length;
}

bool BlockCache::Has(uint64_t file, uint64_t index) const {
  std::lock_guard lock(mu_);
  auto it = index_.find(Key{file, index});
  return it != index_.end() && CurrentLocked(frames_[it->second]);
}

bool BlockCache::Put(uint64_t file, uint64_t index, uint64_t generation,
                     std::span<const std::byte> data) {
  if (data.size() > block_) return false;
  std::lock_guard lock(mu_);
  if (!FetchValidLocked(file, index, generation, data.size() < block_)) {
    ++stats_.puts_refused;
    return false;
  }
  uint32_t f;
  Queue q = Queue::kProbation;
  if (auto it = index_.find(Key{file, index}); it != index_.end()) {
    f = it->second;  // replaced in place, in the queue it was in
    q = frames_[f].queue;
    stats_.bytes_used -= frames_[f].length;
    Unlink(f);
    index_.erase(it);
    --files_[file].blocks;
    SetTag(f, 0);
  } else {
    f = TakeFrame();
    if (f == kNone) {
      ++stats_.puts_refused;
      return false;
    }
  }
  std::memcpy(Data(f), data.data(), data.size());
  IndexLocked(f, file, index, generation, data.size(), q);
  return true;
}

void BlockCache::IndexLocked(uint32_t f, uint64_t file, uint64_t index, uint64_t generation,
                             size_t length, Queue q, uint64_t tag) {
  if (auto it = index_.find(Key{file, index}); it != index_.end()) {
    FreeFrame(it->second);  // a concurrent fill of the same block: the newer stays
  }
  index_.emplace(Key{file, index}, f);
  auto [rec, added] = files_.try_emplace(file, FileRec{generation, 0, UINT64_MAX, 0, {}});
  ++rec->second.blocks;
  if (length < block_) rec->second.partial = index;
  Frame& fr = frames_[f];
  fr.file = file;
  fr.index = index;
  fr.generation = generation;
  fr.length = static_cast<uint32_t>(length);
  fr.origin = {};
  stats_.bytes_used += fr.length;
  PushHead(q, f);
  SetTag(f, tag != 0 ? tag : NextTagLocked());
  ++stats_.puts;
  // Records of files without blocks: dropped once they outnumber the
  // blocks; floor_ then moves past every generation handed out, so that a
  // fetch that took one of theirs is refused.
  if (files_.size() > 1024 + 2 * index_.size()) {
    std::erase_if(files_, [](const auto& kv) { return kv.second.blocks == 0; });
    floor_ = next_generation_++;
  }
}

auto BlockCache::Reserve(uint64_t file, uint64_t index, uint64_t generation)
    -> std::optional<Slot> {
  std::lock_guard lock(mu_);
  if (!FetchValidLocked(file, index, generation, false)) return std::nullopt;
  const uint32_t f = TakeFrame();
  if (f == kNone) return std::nullopt;
  frames_[f].queue = Queue::kReserved;
  ++stats_.reserved;
  // The tag it will carry: taken now so that a holder may name it before
  // the bytes are there (a peer told early finds 0 and asks the holder).
  return Slot{f, NextTagLocked(), Data(f)};
}

bool BlockCache::Publish(const Slot& slot, uint64_t file, uint64_t index, uint64_t generation,
                         std::span<const std::byte> data, size_t length,
                         const Origin* origin) {
  if (!data.empty()) length = data.size();
  std::lock_guard lock(mu_);
  Frame& fr = frames_[slot.frame];
  if (fr.queue != Queue::kReserved) return false;
  --stats_.reserved;
  if (length > block_ || !FetchValidLocked(file, index, generation, length < block_)) {
    ++stats_.puts_refused;
    fr.queue = Queue::kFree;
    free_.push_back(slot.frame);
    return false;
  }
  if (!data.empty()) std::memcpy(Data(slot.frame), data.data(), data.size());
  fr.queue = Queue::kFree;  // IndexLocked links it
  // With the tag the holder was told.
  IndexLocked(slot.frame, file, index, generation, length, Queue::kProbation, slot.tag);
  if (origin != nullptr) fr.origin = *origin;
  return true;
}

void BlockCache::Abandon(const Slot& slot) {
  std::lock_guard lock(mu_);
  Frame& fr = frames_[slot.frame];
  if (fr.queue != Queue::kReserved) return;
  --stats_.reserved;
  fr.queue = Queue::kFree;
  free_.push_back(slot.frame);
}

void BlockCache::InvalidateFile(uint64_t file) {
  std::lock_guard lock(mu_);
  if (auto it = files_.find(file); it != files_.end()) {
    FileRec& r = it->second;
    r.generation = next_generation_++;
    r.ranges.clear();  // the whole-file stamp covers them
  } else {
    // No block of it here: only a fetch in flight could be spoiled. Moving
    // the floor refuses every such fetch of a file without a record,
    // without keeping one per file ever told of.
    floor_ = next_generation_++;
  }
  ++stats_.invalidations;
}

void BlockCache::InvalidateRange(uint64_t file, uint64_t first, uint64_t last) {
  if (last < first) return;
  if (last - first >= kMaxRangeBlocks) return InvalidateFile(file);
  std::lock_guard lock(mu_);
  ++stats_.invalidations;
  auto it = files_.find(file);
  if (it == files_.end()) {
    floor_ = next_generation_++;  // as InvalidateFile: only fetches in flight
    return;
  }
  FileRec& r = it->second;
  r.ranges.push_back({next_generation_++, first, last});
  // A short block elsewhere: the change may have grown the file past it.
  if (r.partial != UINT64_MAX && (r.partial < first || r.partial > last)) {
    if (auto f = index_.find(Key{file, r.partial}); f != index_.end()) FreeFrame(f->second);
  }
  r.partial = UINT64_MAX;
  if (r.ranges.size() > kMaxRanges) {
    r.ranges_floor = r.ranges.front().stamp;
    r.ranges.erase(r.ranges.begin());
  }
  for (uint64_t i = first; i <= last; ++i) {
    if (auto f = index_.find(Key{file, i}); f != index_.end()) FreeFrame(f->second);
  }
}

void BlockCache::Clear() {
  std::lock_guard lock(mu_);
  for (uint32_t f = 0; f < frames_.size(); ++f) {
    if (frames_[f].queue != Queue::kFree && frames_[f].queue != Queue::kReserved) FreeFrame(f);
  }
  // Every file's generation moves: fetches in flight are refused.
  files_.clear();
  floor_ = next_generation_++;
  ++stats_.clears;
  ::madvise(arena_, arena_bytes_, MADV_DONTNEED);
}

void BlockCache::SetLimit(size_t blocks) {
  std::lock_guard lock(mu_);
  limit_ = std::min(blocks, frames_.size());
  while (frames_.size() - free_.size() > limit_ && EvictOneLocked()) {
  }
  // Every free frame's pages go back (under the lock: a frame taken
  // meanwhile would lose what is stored into it). A peer reading one finds
  // its tag 0.
  for (uint32_t f : free_) ::madvise(Data(f), block_, MADV_DONTNEED);
}

size_t BlockCache::limit_blocks() const {
  std::lock_guard lock(mu_);
  return limit_;
}

void BlockCache::NoteStreamed(uint64_t bytes) {
  std::lock_guard lock(mu_);
  ++stats_.streamed;
  stats_.streamed_bytes += bytes;
}

void BlockCache::NoteFetch(uint64_t bytes) {
  std::lock_guard lock(mu_);
  ++stats_.fetches;
  stats_.fetched_bytes += bytes;
}

auto BlockCache::stats() const -> Stats {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.blocks_used = index_.size();
  s.files = files_.size();
  s.probation = probation_.size;
  s.protected_blocks = protected_.size;
  s.limit_blocks = limit_;
  return s;
}

}  // namespace fedfs::coop
