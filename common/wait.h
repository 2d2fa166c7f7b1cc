// WaitFor: blocks until an asynchronous operation calls its completion once,
// and returns what it was called with.
//
// Not std::promise: its set_value runs std::call_once, and glibc's
// pthread_once ends with a FUTEX_WAKE system call every time, even when the
// operation completed inline on the waiting thread (the common case for a
// directory this node manages, several per metadata request). Here an inline
// completion costs an uncontended mutex and no system call.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>

namespace fedfs {

// `start(done)` begins the operation; `done(R)` must be called exactly once,
// on any thread, before or after `start` returns.
template <class R, class Start>
R WaitFor(Start&& start) {
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<R> value;
  } slot;
  start([&slot](R r) {
    std::lock_guard lock(slot.mu);
    slot.value.emplace(std::move(r));
    slot.cv.notify_one();  // under the lock: the slot lives until we release it
  });
  std::unique_lock lock(slot.mu);
  slot.cv.wait(lock, [&] { return slot.value.has_value(); });
  return std::move(*slot.value);
}

}  // namespace fedfs
