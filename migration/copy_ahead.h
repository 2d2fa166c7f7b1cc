// Internal to fedfs_migration: the reads of a move's copy at T, ahead of its
// hashing and writing (target.cc). Not a contract: include migration.h.
//
// `streams` threads each read every streams-th chunk of the file at the
// source (NodeFs::Read, through the file service), one chunk ahead each, so
// that the next reads are on the wire while T hashes and writes the current
// one. Next() hands the chunks out in the file's order; the first read
// shorter than a chunk (the end of the file as it was then) or failed is the
// last one handed out. The destructor stops the streams (a read in flight
// ends first) and joins them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/result.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

class CopyAhead {
 public:
  CopyAhead(NodeFs* src, Handle h, size_t chunk, int streams);
  ~CopyAhead();
  CopyAhead(const CopyAhead&) = delete;
  CopyAhead& operator=(const CopyAhead&) = delete;

  // The next chunk (at offset index * chunk) once read: its bytes (fewer
  // than a chunk at the end of the file, none past it), valid until the
  // next call; or the read's error. Not called again after a short chunk or
  // an error.
  Result<std::span<const std::byte>> Next();

 private:
  struct Stream {
    std::vector<std::byte> buf;
    uint64_t index = 0;     // the chunk in buf (when ready)
    bool ready = false;     // buf holds chunk `index`, not yet handed out
    Result<size_t> n{size_t{0}};
  };
  void Run(size_t s);

  NodeFs* const src_;
  const Handle h_;
  const size_t chunk_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Stream> streams_;  // guarded by mu_ (buf: by `ready`)
  uint64_t next_ = 0;            // the chunk Next() hands out next
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace fedfs::ns
