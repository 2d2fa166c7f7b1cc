// The event scheduler under the fake network (m2m/fake_network.h): a queue of
// timed closures ordered by (time, insertion order), in one of two modes.
//
//  * kRealTime: one internal dispatcher thread runs each event when
//    std::chrono::steady_clock reaches its time. Any thread may Schedule or
//    Cancel. Run*() must not be called.
//  * kSimulated: a virtual clock and no thread. The owner calls RunUntilIdle,
//    RunFor or RunUntil, which run events on the calling thread and advance the
//    clock to each event's time. Events at the same virtual time run in the
//    order they were scheduled, so a single-threaded workload is deterministic.
//    Schedule and Cancel stay thread-safe (a Responder may post from anywhere),
//    but determinism then holds only for what the owner thread schedules.
//
// Events never run concurrently with each other. Owned by FakeNetwork's core;
// Stop() (also the destructor) ends the dispatcher and drops pending events.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

namespace fedfs::m2m {

enum class SchedulerMode { kRealTime, kSimulated };

class SimScheduler {
 public:
  using Duration = std::chrono::nanoseconds;
  using Fn = std::move_only_function<void()>;
  using TimerId = uint64_t;

  explicit SimScheduler(SchedulerMode mode);
  ~SimScheduler();
  SimScheduler(const SimScheduler&) = delete;
  SimScheduler& operator=(const SimScheduler&) = delete;

  SchedulerMode mode() const { return mode_; }

  // Time since the scheduler was created: virtual (kSimulated) or
  // steady_clock (kRealTime). Any thread.
  Duration Now() const;

  // Runs fn at Now() + delay (negative delays count as 0). Returns an id for
  // Cancel. After Stop(), fn is destroyed at once (outside any lock) and the
  // id refers to nothing. Any thread.
  TimerId Schedule(Duration delay, Fn fn);
  // Prevents a not-yet-started event from running; no-op for unknown ids or
  // events that already ran. A cancelled event does not advance the virtual
  // clock. Any thread.
  void Cancel(TimerId id);

  // kSimulated only, owner thread only, never from inside an event.
  // Runs events until none is left; returns how many ran.
  size_t RunUntilIdle();
  // Runs every event due within `d` of Now(), then sets the clock to Now()+d.
  void RunFor(Duration d);
  // Runs events until pred() holds (checked before the first event and after
  // each one); false if the queue ran dry first.
  bool RunUntil(const std::function<bool()>& pred);

  // True on the thread that runs events: the dispatcher (kRealTime) or, in
  // kSimulated mode, always (the mode is single-threaded by contract).
  bool OnSchedulerContext() const;
  // True once Stop() has begun.
  bool stopped() const;

  // Ends the dispatcher thread (waits for a running event to finish; must not
  // be called from an event) and destroys every pending event. Idempotent.
  void Stop();

  size_t pending() const;

 private:
  struct Event {
    Duration at;
    uint64_t seq;
    Fn fn;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.at != b.at ? a.at > b.at : a.seq > b.seq;
    }
  };

  // Drops cancelled events from the top of the heap. REQUIRES: mu_ held.
  void SkipCancelledLocked();
  // Pops the earliest live event if due at or before `limit`. REQUIRES: mu_.
  bool PopDueLocked(Duration limit, Event* out);
  void DispatcherLoop();
  // Runs one event with the clock set to its time (kSimulated).
  void RunOne(Event ev);

  const SchedulerMode mode_;
  const std::chrono::steady_clock::time_point start_;

  mutable std::mutex mu_;  // leaf lock: never held while an event runs
  std::condition_variable cv_;
  std::vector<Event> heap_;               // GUARDED_BY(mu_), a min-heap by Later
  std::unordered_set<TimerId> cancelled_;  // GUARDED_BY(mu_), ids still in heap_
  uint64_t next_seq_ = 1;                  // GUARDED_BY(mu_)
  Duration virtual_now_{0};                // GUARDED_BY(mu_), kSimulated
  bool stopped_ = false;                   // GUARDED_BY(mu_)
  std::thread dispatcher_;
  std::thread::id dispatcher_id_;
};

}  // namespace fedfs::m2m
