// Streams: which reads of a file handle belong to a long sequential stream
// (docs/coopcache.md, "Sequential reads"). The kernel's read-ahead sends a
// sequential reader's reads about a megabyte at a time, two or more at once
// and not always in order; a read belongs to its handle's stream when it
// starts within `window` bytes of the furthest end the stream read. A read
// that does not starts a new stream. Read answers whether the read continues
// a stream that had read `after` bytes or more before it: such reads go past
// the block cache (the reading node's kernel keeps the pages, and one scan
// must not fill the cache with blocks it reads once).
//
// Memory: one entry per handle that read; Forget drops it (on release); past
// max_streams entries all are dropped (streams start over).
// Threads: thread-safe (one mutex, O(1) per call).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace fedfs::coop {

struct StreamsOptions {
  uint64_t after = uint64_t{4} << 20;   // 0: no read is streamed
  uint64_t window = uint64_t{8} << 20;  // how far a read may start from the stream's end
  size_t max_streams = 65536;
};

class Streams {
 public:
  explicit Streams(const StreamsOptions& options = {}) : opts_(options) {}
  // Notes a read of [offset, offset + length) through handle `key`.
  bool Read(uint64_t key, uint64_t offset, uint64_t length);
  void Forget(uint64_t key);
  size_t size() const;

 private:
  struct Stream {
    uint64_t end = 0;  // the furthest byte read + 1
    uint64_t run = 0;  // bytes read in the stream
  };
  const StreamsOptions opts_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Stream> streams_;
};

}  // namespace fedfs::coop
