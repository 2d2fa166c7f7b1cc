// The access trigger of file moves (docs/migration.md, "By access"): a file
// read or written mostly through one other node moves there.
//
// AccessMeter counts, at a file's node L, the bytes each node read or wrote
// of each file: other nodes' through the file service
// (FileServiceOptions::on_access), L's own through its mount
// (VfsOptions::on_local_access). Reads answered by a cache or the kernel's
// pages are not counted: they need no move. EndWindow closes a window: a
// file is a candidate to move to node D when D had at least `share` of its
// bytes and at least `min_bytes` in each of `windows` windows in a row, it
// did not arrive here within `cooldown` (nor failed to move within it), and
// D is not the node it came from within 2 x `cooldown` (hysteresis: a file
// that two nodes take turns at does not ping-pong). At most `max_tracked` files are counted per window (the ones
// after are not). Pure and thread-safe; time is the caller's.
//
// AccessTrigger runs it: every `window` it closes the window and moves the
// candidates one at a time (Migration::Move, trigger kAccess) on a thread of
// its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/result.h"

namespace fedfs::ns {

// The defaults are the config's (docs/config.md, migration.on_access).
struct AccessOptions {
  bool enabled = false;
  double share = 0.8;
  uint64_t min_bytes = uint64_t{64} << 20;
  std::chrono::milliseconds window{10000};
  int windows = 3;
  std::chrono::milliseconds cooldown{600000};
  size_t max_tracked = 100000;
};

class AccessMeter {
 public:
  using Clock = std::chrono::steady_clock;
  AccessMeter(AccessOptions options, std::string self);

  // `node` read or wrote `bytes` of the file at global path `path` here.
  void Count(const std::string& path, const std::string& node, uint64_t bytes);

  struct Candidate {
    std::string path;
    std::string to;
    uint64_t bytes = 0;  // the node's bytes of it in the last window
    bool operator==(const Candidate&) const = default;
  };
  // Closes the window that ends at `now` (see the header comment).
  std::vector<Candidate> EndWindow(Clock::time_point now);

  // `path` arrived here from node `from` at `now` (a move by any trigger,
  // Migration's `arrived` hook): cooldown and hysteresis.
  void Arrived(const std::string& path, const std::string& from, Clock::time_point now);
  // A move of `path` for its accesses was made or failed at `now`: not tried
  // again from here within `cooldown` (the reads counted while it moved
  // away would make it a candidate again).
  void Held(const std::string& path, Clock::time_point now);

  size_t tracked() const;

 private:
  struct Streak {
    std::string node;  // the node that had the share in the windows so far
    int windows = 0;
  };
  struct Came {
    Clock::time_point at;
    std::string from;  // "" for a failed move
  };
  const AccessOptions o_;
  const std::string self_;
  mutable std::mutex mu_;
  // The current window: path -> node -> bytes.
  std::unordered_map<std::string, std::map<std::string, uint64_t>> bytes_;
  std::unordered_map<std::string, Streak> streaks_;
  std::unordered_map<std::string, Came> came_;  // path -> its arrival (or failed move)
};

class AccessTrigger {
 public:
  // Moves `path` to `to`; its error is logged.
  using MoveFn = std::function<Status(const std::string& path, const std::string& to)>;
  AccessTrigger(AccessOptions options, std::string self, MoveFn move);
  ~AccessTrigger();  // Stop()
  AccessTrigger(const AccessTrigger&) = delete;
  AccessTrigger& operator=(const AccessTrigger&) = delete;

  AccessMeter& meter() { return meter_; }
  void Start();
  void Stop();  // the move in progress completes first

  struct Stats {
    uint64_t windows = 0, candidates = 0, moved = 0, failed = 0;
  };
  Stats stats() const;

 private:
  void Run();

  const AccessOptions o_;
  AccessMeter meter_;
  MoveFn move_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace fedfs::ns
