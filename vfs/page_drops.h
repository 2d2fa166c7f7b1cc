// Drops of the kernel's cached pages of a file that must not wait for this
// node's own writes of the same pages (docs/coopcache.md, "Two writers").
//
// A FUSE WRITE keeps the kernel's page locks of its range until it is
// answered, and the answer waits for the file's node, which waits until
// every other node that has the file open dropped the pages of the change.
// Two nodes writing one file would each wait, in the kernel's page lock,
// for the other's write: each drop of a range that overlaps a write of this
// node still in flight is therefore put off until that write is answered
// (done on a thread of its own), and the callback is answered at once.
// Attributes are dropped at once by the caller.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <chrono>
#include "nodefs/node_fs.h"

namespace fedfs::ns {

class PageDrops {
 public:
  // `drop` drops a range of an inode's pages (KernelCache::InvalidateData);
  // it may block on the kernel's page locks. `max_wait` bounds how long a
  // put-off drop waits for the writes it overlaps (writes that never pause
  // then wait in the kernel instead).
  explicit PageDrops(std::function<void(uint64_t ino, DataRange range)> drop,
                     std::chrono::milliseconds max_wait = std::chrono::milliseconds(1000));
  ~PageDrops();  // stops its thread; drops still put off are not made
  PageDrops(const PageDrops&) = delete;
  PageDrops& operator=(const PageDrops&) = delete;

  // A write of `length` bytes at `offset` of inode `ino` by this node, in
  // flight from construction to destruction.
  class Writing {
   public:
    Writing(PageDrops& d, uint64_t ino, uint64_t offset, uint64_t length);
    ~Writing();
    Writing(const Writing&) = delete;
    Writing& operator=(const Writing&) = delete;

   private:
    PageDrops& d_;
    uint64_t ino_, id_;
  };

  // True if `range` of `ino` overlaps no write of this node in flight: the
  // caller drops it now. False: it is dropped once those writes are
  // answered (or after max_wait), by this object's thread.
  bool DropNowOrLater(uint64_t ino, DataRange range);

  // Waits until every drop put off so far was made (tests).
  void Drain();

  uint64_t put_off() const;  // drops put off since construction

 private:
  struct Span {
    uint64_t id, offset, end;  // [offset, end)
  };
  struct Pending {
    uint64_t ino;
    DataRange range;
    std::chrono::steady_clock::time_point since;
  };
  bool OverlapsLocked(uint64_t ino, DataRange range) const;
  void Run();

  const std::function<void(uint64_t, DataRange)> drop_;
  const std::chrono::milliseconds max_wait_;
  mutable std::mutex mu_;  // leaf lock: never held across drop_
  std::condition_variable changed_;
  std::unordered_map<uint64_t, std::vector<Span>> writing_;  // ino -> writes in flight
  uint64_t next_id_ = 1;
  std::deque<Pending> pending_;
  bool dropping_ = false;  // the thread is making a drop (Drain)
  bool stop_ = false;
  uint64_t put_off_ = 0;
  std::thread thread_;  // started at the first drop put off
};

}  // namespace fedfs::ns
