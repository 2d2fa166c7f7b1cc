// VfsImpl: reads of remote files through this node's file-data cache
// (coopcache/block_cache.h; docs/coopcache.md, "What runs today").
//
// A block of a remote file is kept while this node is told of the file's
// changes without a gap: from a handle open with attr_callbacks, or a watch
// (vfs_impl.cc, WatchLocked). It goes when a callback names the file
// (RemoteAttrsChanged), when this node changes the file's data itself
// (DataChanged: its node does not tell the session that made the change),
// when the file stops being told (the last told handle released with no
// watch, the inode forgotten), and when the session with the file's node or
// the membership epoch changed since it was read. Files with more than one
// link are not cached: each name is its own inode here, and a change
// through one would not reach the blocks of the other.
#include "vfs/vfs_impl.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace fedfs::ns {

void VfsImpl::DataChanged(uint64_t ino) {
  if (deps_.cache != nullptr) deps_.cache->InvalidateFile(ino);
}

Result<size_t> VfsImpl::CachedRead(const OpenFile& f, uint64_t offset, std::span<std::byte> dst) {
  coop::BlockCache& cache = *deps_.cache;
  const size_t block = cache.block_size();
  const CachedIn now{f.fs->SessionCount(), deps_.cluster->Current()->epoch};
  {
    std::lock_guard lock(cache_mu_);
    auto [it, added] = cached_in_.try_emplace(f.ino, now);
    if (!added && (it->second.session != now.session || it->second.epoch != now.epoch)) {
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
    auto n = f.fs->Read(f.handle, index * block, std::span<std::byte>(into, span));
    if (!n) {
      if (done > 0) return done;  // what was read so far
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
    const size_t avail = *n > in_block ? *n - in_block : 0;
    const size_t got = std::min(dst.size() - done, avail);
    if (!direct) std::memcpy(dst.data() + done, into + in_block, got);
    done += got;
    if (*n < span) break;  // the file ended within the run
  }
  return done;
}

}  // namespace fedfs::ns
