// VfsImpl: reads of remote files through this node's file-data cache
// (coopcache/block_cache.h; docs/coopcache.md, "What runs today").
//
// A block of a remote file is kept while this node is told of the file's
// changes without a gap: from a handle open with attr_callbacks, or a watch
// (vfs_impl.cc, WatchLocked). It goes when a callback names bytes of it
// (RemoteAttrsChanged: the blocks holding them; the whole file for a change
// to its end), when this node changes the file's data itself
// (DataChanged: its node does not tell the session that made the change),
// when the file stops being told (the last told handle released with no
// watch, the inode forgotten), and when the file's node or the session with
// it changed since it was read (CachedIn). Files with more than one
// link are not cached: each name is its own inode here, and a change
// through one would not reach the blocks of the other.
#include "vfs/vfs_impl.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace fedfs::ns {

void VfsImpl::DataChanged(uint64_t ino, DataRange data) {
  if (deps_.cache == nullptr || data.empty()) return;
  const uint64_t block = deps_.cache->block_size();
  if (data.length == DataRange::kToEnd || data.offset > UINT64_MAX - data.length) {
    deps_.cache->InvalidateFile(ino);
    return;
  }
  deps_.cache->InvalidateRange(ino, data.offset / block, (data.offset + data.length - 1) / block);
}

Result<size_t> VfsImpl::CachedRead(const OpenFile& f, uint64_t offset, std::span<std::byte> dst) {
  coop::BlockCache& cache = *deps_.cache;
  const size_t block = cache.block_size();
  const CachedIn now = CachedInOf(f);
  {
    std::lock_guard lock(cache_mu_);
    auto [it, added] = cached_in_.try_emplace(f.ino, now);
    if (!added && it->second != now) {
      cache.InvalidateFile(f.ino);
      it->second = now;
    }
  }
  size_t done = 0;
  // Parts of blocks and runs that do not land in dst whole go through this
  // thread's buffer (kept: a fresh one per read faulted in every page).
  thread_local std::vector<std::byte> buf;
  while (done < dst.size()) {
    const uint64_t pos = offset + done;
    const uint64_t index = pos / block;
    const size_t in_block = static_cast<size_t>(pos % block);
    const size_t want = std::min(dst.size() - done, block - in_block);
    // A whole block wanted lands in place; a part goes through buf.
    if (in_block == 0 && want == block) {
      if (auto n = cache.Get(f.ino, index, dst.subspan(done, block))) {
        done += *n;
        if (*n < block) break;  // the file ended there
        continue;
      }
    } else {
      if (buf.size() < block) buf.resize(block);
      if (auto n = cache.Get(f.ino, index, std::span<std::byte>(buf.data(), block))) {
        const size_t got = *n > in_block ? std::min(want, *n - in_block) : 0;
        std::memcpy(dst.data() + done, buf.data() + in_block, got);
        done += got;
        if (*n < block) break;
        continue;
      }
    }
    // A block this node forwarded: read from where it went, without asking
    // the file's node (then found by Get).
    if (deps_.hints != nullptr && HintedFill(f, index)) continue;
    // A miss: the run of missing blocks up to the end of the request is
    // read in one call, then each block stored.
    uint64_t last = (offset + dst.size() - 1) / block;
    for (uint64_t i = index + 1; i <= last; ++i) {
      if (cache.Has(f.ino, i)) {
        last = i - 1;
        break;
      }
    }
    const uint64_t generation = cache.Generation(f.ino);
    const size_t span = static_cast<size_t>((last - index + 1) * block);
    // The run straight into dst when it starts at a block and fits there
    // (a sequential read: no copy but the one into the cache).
    const bool direct = in_block == 0 && span <= dst.size() - done;
    std::byte* into = direct ? dst.data() + done : nullptr;
    if (!direct) {
      if (buf.size() < span) buf.resize(span);
      into = buf.data();
    }
    Filled filled;
    if (deps_.peers != nullptr) {
      auto r = CoopMiss(f, index, last, generation, into);
      if (!r) {
        if (done > 0) return done;  // what was read so far
        return Err(r.error());
      }
      filled = *r;
    } else {
      auto n = f.fs->Read(f.handle, index * block, std::span<std::byte>(into, span));
      if (!n) {
        if (done > 0) return done;
        return Err(n.error());
      }
      cache.NoteFetch(*n);
      for (uint64_t i = index; i <= last; ++i) {
        const size_t from = static_cast<size_t>((i - index) * block);
        if (from > *n || (from == *n && i != index)) break;
        const size_t len = std::min(block, *n - from);
        cache.Put(f.ino, i, generation, std::span<const std::byte>(into + from, len));
        if (len < block) break;
      }
      filled = Filled{*n, *n < span};
    }
    const size_t avail = filled.n > in_block ? filled.n - in_block : 0;
    const size_t got = std::min(dst.size() - done, avail);
    if (!direct) std::memcpy(dst.data() + done, into + in_block, got);
    done += got;
    if (filled.eof || got == 0) break;  // the file ended within the run
  }
  return done;
}

// A hint is as safe as a cached block (coopcache/hints.h): taken only under
// the generation the block had here when it was forwarded, and its copy
// checked by its tag. The file's node does not learn of this copy (a later
// eviction of it is not forwarded).
bool VfsImpl::HintedFill(const OpenFile& f, uint64_t index) {
  coop::BlockCache& cache = *deps_.cache;
  const uint64_t generation = cache.Generation(f.ino);
  auto hint = deps_.hints->Take(f.ino, index, generation);
  if (!hint) return false;
  if (hint->block_size != cache.block_size() || hint->length == 0 ||
      hint->length > cache.block_size()) {
    return false;
  }
  auto slot = cache.Reserve(f.ino, index, generation);
  if (!slot) return false;
  if (auto st = deps_.peers->Fetch(*hint, slot->data); !st) {
    cache.Abandon(*slot);
    deps_.hints->NoteRead(false);
    return false;
  }
  deps_.hints->NoteRead(true);
  return cache.Publish(*slot, f.ino, index, generation, {}, hint->length);
}

// The copies the file's node names are read one-sidedly into this node's
// reserved frames and checked (coopcache/peer_fetch.h); one that fails
// (moved on, its node unreachable) makes the file's node read the bytes
// itself and forget the other copies (CoopAsk.replace).
auto VfsImpl::CoopMiss(const OpenFile& f, uint64_t first, uint64_t last, uint64_t generation,
                       std::byte* into) -> Result<Filled> {
  coop::BlockCache& cache = *deps_.cache;
  const size_t block = cache.block_size();
  const size_t count = static_cast<size_t>(last - first + 1);
  std::vector<coop::BlockCache::Slot> slots;
  slots.reserve(count);
  for (uint64_t i = first; i <= last; ++i) {
    auto s = cache.Reserve(f.ino, i, generation);
    if (!s) break;
    slots.push_back(*s);
  }
  auto abandon = [&](size_t from) {
    for (size_t k = from; k < slots.size(); ++k) cache.Abandon(slots[k]);
  };
  if (slots.size() < count) {  // the generation moved, or no frame is free
    abandon(0);
    auto n = f.fs->Read(f.handle, first * block, std::span<std::byte>(into, count * block));
    if (!n) return Err(n.error());
    cache.NoteFetch(*n);
    return Filled{*n, *n < count * block};
  }
  NodeFs::CoopAsk ask;
  ask.block = block;
  for (const auto& s : slots) ask.frames.emplace_back(s.frame, s.tag);
  for (int attempt = 0;; ++attempt) {
    auto r = f.fs->ReadCoop(f.handle, first * block, std::span<std::byte>(into, count * block), ask);
    if (!r) {
      abandon(0);
      return Err(r.error());
    }
    // Where the blocks come from, for N-chance forwarding when they are
    // evicted (coopcache/forwarder.h): the file's node and its id there.
    coop::Origin origin;
    if (r->dev != 0 || r->ino != 0) origin = {f.fs->node_id(), r->dev, r->ino, 0};
    const coop::Origin* from = origin.holder.empty() ? nullptr : &origin;
    if (r->copies.empty()) {
      const size_t n = r->n;
      cache.NoteFetch(n);
      size_t k = 0;
      for (; k < count; ++k) {
        const size_t at = k * block;
        if (at >= n) break;
        const size_t len = std::min(block, n - at);
        cache.Publish(slots[k], f.ino, first + k, generation,
                      std::span<const std::byte>(into + at, len), len, from);
        if (len < block) {
          ++k;
          break;
        }
      }
      abandon(k);
      return Filled{n, n < count * block};
    }
    // Copies of the leading blocks at other nodes, read all at once.
    size_t k = 0, n = 0;
    bool ok = true, eof = false;
    std::vector<coop::PeerCopy> pcs;
    std::vector<std::byte*> dsts;
    for (const auto& c : r->copies) {
      const size_t j = pcs.size();
      if (j >= count || c.index != first + j || c.length > block) {
        ok = false;
        break;
      }
      pcs.push_back(PeerCopyOf(c, block));
      dsts.push_back(slots[j].data);
      if (c.length < block) break;  // the file ends in it
    }
    if (ok) {
      auto got = deps_.peers->FetchAll(pcs, dsts);
      for (; k < got.size(); ++k) {
        if (!got[k]) {
          ok = false;
          break;
        }
        std::memcpy(into + n, slots[k].data, pcs[k].length);
        n += pcs[k].length;
        if (pcs[k].length < block) {
          eof = true;
          ++k;
          break;
        }
      }
    }
    if (!ok) {
      if (attempt > 0) {  // copies again after replace: read plainly
        abandon(0);
        auto p = f.fs->Read(f.handle, first * block, std::span<std::byte>(into, count * block));
        if (!p) return Err(p.error());
        cache.NoteFetch(*p);
        return Filled{*p, *p < count * block};
      }
      ask.replace = true;  // read by the file's node, the other copies forgotten
      continue;
    }
    for (size_t j = 0; j < k; ++j) {
      const size_t len = std::min(block, n - j * block);
      cache.Publish(slots[j], f.ino, first + j, generation, {}, len, from);
    }
    abandon(k);
    return Filled{n, eof};
  }
}

}  // namespace fedfs::ns
