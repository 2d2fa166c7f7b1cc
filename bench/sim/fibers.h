// FiberScheduler: the production code's blocking calls on fibers in
// simulated time (issue 22). A cooperative scheduler (common/cooperative.h)
// over the fake network's simulated clock (m2m/fake_network.h, kSimulated):
// code that blocks -- VfsImpl, the VD service's *Sync helpers, CallSync,
// FileService handlers that WaitForAll -- runs unchanged in a fiber, and
// every wait suspends that fiber instead of the thread.
//
// Switching (Boost.Context fibers): a fiber is always resumed from, and
// always suspends back to, the scheduler's main context -- the event loop
// of the fake network (RunUntilIdle and friends). A wake-up (a completion
// arriving, a sleep expiring, a SuspendingMutex unlocked) schedules an event
// on the network's scheduler that resumes the fiber (zero delay; a sleep's
// event is at its end); the fiber runs until it suspends again or returns.
// Everything happens on one thread in the simulated clock's order, so a run
// is deterministic.
//
// Stacks: fixed, `stack_bytes` each (128 KiB by default), carved from
// mappings of 256 stacks (a mapping per stack would pass Linux's per-process
// limit of mappings at a thousand nodes' peaks), touched on demand (only the
// pages a fiber used are resident) and reused through a free list, so a
// fiber per request costs no system call once warm. An overflow is caught
// when the stack comes back (a pattern at its bottom, checked) and aborts.
//
// Threads: everything on the thread that created the scheduler (it installs
// itself there for its lifetime), which runs the network. Not thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include "common/cooperative.h"
#include "common/executor.h"
#include "m2m/fake_network.h"

namespace fedfs::bench {

class FiberStackPool;  // fibers.cc

class FiberScheduler final : public Cooperative {
 public:
  static constexpr size_t kDefaultStackBytes = 128 * 1024;

  // `net` (kSimulated) outlives the scheduler's use; installs this
  // scheduler on the calling thread until destroyed.
  explicit FiberScheduler(m2m::FakeNetwork& net, size_t stack_bytes = kDefaultStackBytes);
  // Fibers still suspended then are unwound (resumed, they throw from where
  // they wait, and their stacks' destructors run); a simulation that ran to
  // idle has none.
  ~FiberScheduler() override;
  FiberScheduler(const FiberScheduler&) = delete;
  FiberScheduler& operator=(const FiberScheduler&) = delete;

  // Runs `fn` in a new fiber: at once (until it first suspends) when called
  // from the main context, from a zero-delay event when called from a fiber.
  void Spawn(std::move_only_function<void()> fn);

  size_t live() const { return live_; }        // fibers started, not finished
  size_t spawned() const { return spawned_; }  // fibers ever started
  size_t max_live() const { return max_live_; }

  // Cooperative.
  FiberId Current() const override { return current_; }
  void Suspend() override;
  void Wake(FiberId f) override;
  void Sleep(std::chrono::nanoseconds d) override;
  std::chrono::steady_clock::time_point Now() const override;

 public:
  struct Fiber;  // fibers.cc

 private:
  void Start(std::move_only_function<void()> fn);
  // To fiber `f` until it suspends or ends; Resume also deletes it if it ended.
  void Switch(Fiber* f);
  void Resume(Fiber* f);

  m2m::FakeNetwork& net_;
  std::unique_ptr<FiberStackPool> stacks_;
  Fiber* current_ = nullptr;
  Fiber* all_ = nullptr;  // live fibers, a doubly linked list
  size_t live_ = 0, spawned_ = 0, max_live_ = 0;
  // The main context's stack, as ASan is told of it at each switch back.
  const void* main_bottom_ = nullptr;
  size_t main_size_ = 0;
  void* main_fake_stack_ = nullptr;
  ScopedCooperative installed_;
};

// An Executor whose every task runs in a fresh fiber of `s` (the services'
// blocking executor in the simulator: FileService handlers may wait).
class FiberExecutor final : public Executor {
 public:
  explicit FiberExecutor(FiberScheduler* s) : s_(s) {}
  void Post(Task task) override { s_->Spawn(std::move(task)); }

 private:
  FiberScheduler* s_;
};

}  // namespace fedfs::bench
