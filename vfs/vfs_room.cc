// VfsImpl: room (VfsOptions::on_full; docs/migration.md, "On a full disk").
// A write that its file's node cannot store moves the file, through the
// mover (migration/), to the node with the most free bytes and is written
// there; a create on a node without room is made on another.
#include <sys/statvfs.h>

#include <thread>

#include "common/cooperative.h"
#include "common/path.h"
#include "vfs/vfs_impl.h"
#include "vfs/vfs_util.h"

namespace fedfs::ns {

using vfs_detail::Log;

VfsImpl::Room VfsImpl::RoomStats() const {
  return Room{room_writes_.load(std::memory_order_relaxed),
              room_creates_.load(std::memory_order_relaxed)};
}

std::string VfsImpl::RoomyNode(const std::string& except, uint64_t need) {
  std::string best;
  uint64_t most = 0;
  for (const auto& [node, bytes] : FreeBytes(true)) {
    if (node == except || bytes < need || bytes <= most) continue;
    best = node;
    most = bytes;
  }
  return best;
}

bool VfsImpl::LowOnRoom() {
  if (!options_.on_full.enabled || options_.on_full.min_free == 0) return false;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          SteadyNow().time_since_epoch())
                          .count();
  const int64_t at = low_on_room_at_.load(std::memory_order_acquire);
  if (at != 0 && now - at < 100'000'000) return low_on_room_.load(std::memory_order_relaxed);
  auto st = deps_.local->StatFs();
  const uint64_t unit = st && st->f_frsize != 0 ? st->f_frsize : st ? st->f_bsize : 0;
  const bool low = st && static_cast<uint64_t>(st->f_bavail) * unit < options_.on_full.min_free;
  low_on_room_.store(low, std::memory_order_relaxed);
  low_on_room_at_.store(now, std::memory_order_release);
  return low;
}

Result<size_t> VfsImpl::WriteForRoom(uint64_t fh, uint64_t offset,
                                     std::span<const std::byte> src, const Writer& by,
                                     Error full) {
  const VfsOptions::Room& o = options_.on_full;
  if (!o.enabled || !mover_) return Err(full);
  auto f = FileOf(fh);
  if (!f || !OneLink(f->ino)) return Err(full);
  auto path = PathOf(f->ino);
  if (!path) return Err(full);
  const auto deadline = SteadyNow() + o.max_wait;
  for (;;) {
    const std::string holder = f->fs->node_id();
    auto st = f->fs->Stat(Cred{}, *path);
    if (!st || static_cast<uint64_t>(st->st_size) > o.max_size) return Err(full);
    // Room for the file as it is and the write, and as much again of slack.
    const uint64_t need = static_cast<uint64_t>(st->st_size) + 2 * src.size();
    const std::string to = RoomyNode(holder, need);
    if (to.empty()) {
      Log()->info("{}: no room at {} and no node with {} bytes free: {}", *path, holder, need,
                  full.ToString());
      return Err(full);
    }
    Status moved = mover_(holder, *path, to);
    if (!moved && moved.error().code != EBUSY && moved.error().code != EAGAIN) {
      Log()->info("{}: no room at {}; the move to {} failed: {}", *path, holder, to,
                  moved.error().ToString());
      return Err(full);
    }
    // Through the handle opened again where the file is now (WithFile).
    auto n = WithFile(fh, [&](const OpenFile& g) { return g.fs->Write(g.handle, offset, src, by); });
    if (n) {
      room_writes_.fetch_add(1, std::memory_order_relaxed);
      MarkDirty(fh);
      return n;
    }
    // Another writer's move of the file still runs (EBUSY above), or the
    // file's new node is full too: try again until max_wait.
    if (!NoRoom(n.error().code) || SteadyNow() >= deadline) return n;
    SleepFor(std::chrono::milliseconds(50));
    f = FileOf(fh);
    if (!f) return Err(f.error());
  }
}

}  // namespace fedfs::ns
