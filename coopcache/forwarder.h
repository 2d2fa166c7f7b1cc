// Forwarder: one node's side of N-chance forwarding (docs/coopcache.md,
// "N-chance forwarding"; Dahlin et al., OSDI'94).
//
// When replacement evicts a block this node's cache got from a file's node
// (its holder), the block may be the last copy in the federation's memory.
// The Forwarder then, off the reader's path:
//   1. tells the holder the copy is gone (ForwardPort::Evict); the holder
//      forgets it and, if it was the last one and current, names a peer to
//      take it and the file's version now;
//   2. stores the bytes in that peer's cache (Store), with the
//      recirculation count one higher;
//   3. tells the holder the peer keeps it (Moved), under that version: the
//      holder records the copy only if the file did not change meanwhile;
//      and records where it went as a hint (hints.h), for this node's next
//      miss of the block.
// A block forwarded `max_recirc` times is dropped at its next eviction
// (duplicates are never forwarded: the holder says so in step 1).
//
// Never blocks the reader: OnEvict (the BlockCache's evict sink, under its
// mutex) copies the block into one of `max_pending` staging buffers or, all
// busy, drops it (counted). One worker thread does the rest, or, with
// `runner`, one task at a time posted there (the simulator's fibers).
//
// The ForwardPort is implemented above this library (it talks to other
// nodes through the file service).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/executor.h"

#include "common/result.h"
#include "coopcache/block_cache.h"
#include "coopcache/hints.h"
#include "coopcache/peer_fetch.h"

namespace fedfs::coop {

// A block on its way to another node's cache.
struct Forward {
  Origin origin;       // the file's node and id there; recirc as stored here
  uint64_t file = 0, generation = 0;  // this node's cache key and generation
  uint64_t block = 0;  // block size
  uint64_t index = 0;
  uint32_t frame = 0;  // where this node kept it
  uint64_t tag = 0;
  std::vector<std::byte> bytes;
};

class ForwardPort {
 public:
  virtual ~ForwardPort() = default;
  struct Target {
    std::string node;
    uint64_t version = 0;
  };
  // Step 1: nullopt when the holder does not want it forwarded.
  virtual Result<std::optional<Target>> Evict(const Forward& f) = 0;
  // Step 2: where the target keeps it (its address and regions, frame, tag).
  using Stored = PeerCopy;
  virtual Result<Stored> Store(const std::string& target, const Forward& f) = 0;
  // Step 3.
  virtual Status Moved(const Forward& f, const Target& t, const Stored& at) = 0;
};

struct ForwarderOptions {
  uint32_t max_recirc = 2;  // 0: never forward
  size_t max_pending = 8;   // staging buffers
  Hints* hints = nullptr;   // where forwarded blocks went are recorded (null: not)
  // Where the forwards run: null, a thread of the Forwarder's own; else
  // tasks posted there, one at a time (never run inline: OnEvict runs under
  // the cache's mutex). Must outlive the object.
  Executor* runner = nullptr;
};

class Forwarder {
 public:
  // `port` must outlive the object; Stop (or the destructor) joins the worker.
  Forwarder(ForwarderOptions options, uint64_t block_size, ForwardPort* port);
  ~Forwarder();
  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  // The BlockCache's evict sink.
  void OnEvict(const Evicted& e);
  // Waits for the pending forwards to finish (tests and benchmarks).
  void Drain();
  // Drops what is pending and joins the worker (once; not from the port).
  void Stop();

  struct Stats {
    uint64_t evictions = 0;  // told to the holder
    uint64_t forwarded = 0;  // stored at a peer and recorded at the holder
    uint64_t declined = 0;   // the holder wanted none (not last, stale, no peer)
    uint64_t dropped = 0;    // every staging buffer busy, or recirculated enough
    uint64_t errors = 0;     // a step failed
  };
  Stats stats() const;

 private:
  void Run();
  // Forwards the queue's first block (mu_ held by `lock`; released meanwhile).
  void ForwardFront(std::unique_lock<std::mutex>& lock);
  // With a runner: forwards until the queue is empty (one task at a time).
  void Pump();
  template <class Pred>
  void WaitIdle(Pred done);
  void ForwardOne(Forward& f);

  const ForwarderOptions opts_;
  const uint64_t block_;
  ForwardPort* const port_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Forward> queue_;              // guarded by mu_
  std::vector<std::vector<std::byte>> spare_;  // staging buffers not in use
  bool busy_ = false, stop_ = false;
  bool pumping_ = false;  // a Pump is posted or running (with a runner)
  Stats stats_;
  std::thread worker_;
};

}  // namespace fedfs::coop
