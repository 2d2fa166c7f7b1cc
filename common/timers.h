// Timers: tasks run once after a delay, on one thread of the Timers' own.
//
// Built on Boost.Asio's io_context and steady_timer (a kept timer queue,
// rather than a heap and condition variable of our own). Tasks run one at a
// time in deadline order: a task that blocks delays the ones after it, so a
// task must be short or bounded (a blocking RPC with a deadline is fine).
// The destructor drops the tasks not yet due (destroyed, not run) and joins.
// Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/executor.h"

namespace fedfs {

class Timers {
 public:
  explicit Timers(std::string name);
  ~Timers();
  Timers(const Timers&) = delete;
  Timers& operator=(const Timers&) = delete;

  // Runs `task` on the Timers' thread once `delay` has passed.
  void After(std::chrono::nanoseconds delay, Task task);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedfs
