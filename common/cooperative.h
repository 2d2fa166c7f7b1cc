// Cooperative waiting: the one hook through which the blocking helpers
// (common/wait.h's WaitFor/WaitForAll, hence m2m's CallSync and the VD
// service's *Sync helpers), SleepFor, SteadyNow and SuspendingMutex let
// production code written to block run unchanged on fibers in simulated time
// (fedfs-bench's simulator, bench/sim/fibers.h).
//
// Without a scheduler installed on the thread (the daemon, every test that
// does not install one) nothing changes: WaitFor blocks on a condition
// variable, SleepFor is std::this_thread::sleep_for, SteadyNow is
// std::chrono::steady_clock::now(), SuspendingMutex is a std::mutex. The
// cost is one thread-local load and a branch.
//
// With one installed (ScopedCooperative), on its thread:
//  * inside one of its fibers (Current() != nullptr), a wait suspends the
//    fiber until its completion is called, a sleep suspends it for that much
//    of the scheduler's time, and a contended SuspendingMutex suspends it
//    until the holder unlocks;
//  * on the thread's main context (Current() == nullptr: nothing can be
//    suspended there) waits and sleeps behave as without a scheduler;
//  * SteadyNow is the scheduler's clock everywhere on the thread.
// A cooperative scheduler is single-threaded: completions of waits started
// in its fibers must be called on its thread.
#pragma once

#include <chrono>
#include <mutex>
#include <vector>

namespace fedfs {

class Cooperative {
 public:
  using FiberId = void*;
  virtual ~Cooperative() = default;
  // The fiber running now; nullptr on the thread's main context.
  virtual FiberId Current() const = 0;
  // Suspends the current fiber (REQUIRES Current() != nullptr) until
  // Wake(it); returns when it runs again.
  virtual void Suspend() = 0;
  // Makes fiber `f`, suspended by Suspend, run again later. Once per Suspend.
  virtual void Wake(FiberId f) = 0;
  // Suspends the current fiber for `d` of the scheduler's time.
  virtual void Sleep(std::chrono::nanoseconds d) = 0;
  // The scheduler's clock, in steady_clock's type (never its zero point).
  virtual std::chrono::steady_clock::time_point Now() const = 0;
};

namespace cooperative_detail {
extern constinit thread_local Cooperative* installed;
}  // namespace cooperative_detail

// The scheduler installed on this thread, or nullptr.
inline Cooperative* CurrentCooperative() { return cooperative_detail::installed; }

// The scheduler, if this code runs in one of its fibers (so may suspend).
inline Cooperative* SuspendableContext() {
  Cooperative* co = cooperative_detail::installed;
  return co != nullptr && co->Current() != nullptr ? co : nullptr;
}

// Installs `co` on this thread for the object's lifetime (restores the
// previous one after).
class ScopedCooperative {
 public:
  explicit ScopedCooperative(Cooperative* co) : prev_(cooperative_detail::installed) {
    cooperative_detail::installed = co;
  }
  ~ScopedCooperative() { cooperative_detail::installed = prev_; }
  ScopedCooperative(const ScopedCooperative&) = delete;
  ScopedCooperative& operator=(const ScopedCooperative&) = delete;

 private:
  Cooperative* prev_;
};

// std::this_thread::sleep_for, or a suspension of the current fiber.
void SleepFor(std::chrono::nanoseconds d);

// std::chrono::steady_clock::now(), or the installed scheduler's clock.
inline std::chrono::steady_clock::time_point SteadyNow() {
  if (Cooperative* co = cooperative_detail::installed; co != nullptr) [[unlikely]] {
    return co->Now();
  }
  return std::chrono::steady_clock::now();
}

// A Clock (for deadlines) whose now() is SteadyNow().
struct SteadyClock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr bool is_steady = true;
  static time_point now() { return SteadyNow(); }
};

// A std::mutex (BasicLockable) that a fiber may hold across a suspension: a
// fiber that finds it held suspends until it is unlocked instead of
// blocking the thread (which would deadlock: the holder could never run to
// unlock it). Elsewhere it is a std::mutex. Do not lock it from the main
// context of a cooperative thread while a fiber may hold it.
class SuspendingMutex {
 public:
  void lock() {
    if (Cooperative* co = SuspendableContext(); co != nullptr) [[unlikely]] {
      return LockSuspending(*co);
    }
    mu_.lock();
  }
  bool try_lock() { return mu_.try_lock(); }
  void unlock() {
    mu_.unlock();
    // Only fibers (one thread) ever add waiters: empty elsewhere.
    if (!waiters_.empty()) [[unlikely]] WakeOne();
  }

 private:
  void LockSuspending(Cooperative& co);
  void WakeOne();

  std::mutex mu_;
  std::vector<Cooperative::FiberId> waiters_;  // fibers of the scheduler's thread, FIFO
  Cooperative* co_ = nullptr;                  // whose fibers wait
};

}  // namespace fedfs
