// WaitFor: blocks until an asynchronous operation calls its completion once,
// and returns what it was called with.
//
// Not std::promise: its set_value runs std::call_once, and glibc's
// pthread_once ends with a FUTEX_WAKE system call every time, even when the
// operation completed inline on the waiting thread (the common case for a
// directory this node manages, several per metadata request). Here an inline
// completion costs an uncontended mutex and no system call.
//
// In a fiber of a cooperative scheduler (common/cooperative.h: the
// simulator) a wait suspends the fiber instead, until its completion is
// called; everywhere else (a thread without one, or its main context) the
// only extra cost is one thread-local load and a branch.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

#include "common/cooperative.h"

namespace fedfs {

namespace cooperative_detail {

// WaitFor in a fiber: suspends until the completion is called (on the
// scheduler's thread); no suspension if it was called inline.
template <class R, class Start>
R WaitInFiber(Cooperative& co, Start&& start) {
  struct Slot {
    Cooperative* co;
    Cooperative::FiberId waiter = nullptr;
    std::optional<R> value;
  } slot{&co};
  start([&slot](R r) {
    slot.value.emplace(std::move(r));
    if (slot.waiter != nullptr) slot.co->Wake(slot.waiter);
  });
  if (!slot.value.has_value()) {
    slot.waiter = co.Current();
    while (!slot.value.has_value()) co.Suspend();
  }
  return std::move(*slot.value);
}

template <class R, class Start>
std::vector<R> WaitAllInFiber(Cooperative& co, size_t n, Start&& start) {
  struct Slots {
    Cooperative* co;
    Cooperative::FiberId waiter = nullptr;
    std::vector<std::optional<R>> values;
    size_t left = 0;
  } slots{&co};
  slots.values.resize(n);
  slots.left = n;
  for (size_t i = 0; i < n; ++i) {
    start(i, [&slots, i](R r) {
      slots.values[i].emplace(std::move(r));
      if (--slots.left == 0 && slots.waiter != nullptr) slots.co->Wake(slots.waiter);
    });
  }
  if (slots.left > 0) {
    slots.waiter = co.Current();
    while (slots.left > 0) co.Suspend();
  }
  std::vector<R> out;
  out.reserve(n);
  for (auto& v : slots.values) out.push_back(std::move(*v));
  return out;
}

}  // namespace cooperative_detail

// `start(done)` begins the operation; `done(R)` must be called exactly once,
// on any thread, before or after `start` returns.
template <class R, class Start>
R WaitFor(Start&& start) {
  if (Cooperative* co = SuspendableContext(); co != nullptr) [[unlikely]] {
    return cooperative_detail::WaitInFiber<R>(*co, std::forward<Start>(start));
  }
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

// `start(i, done)` begins operation i of n (all started before any wait);
// each `done(R)` must be called exactly once, on any thread. Returns what
// each was called with, in order.
template <class R, class Start>
std::vector<R> WaitForAll(size_t n, Start&& start) {
  if (Cooperative* co = SuspendableContext(); co != nullptr) [[unlikely]] {
    return cooperative_detail::WaitAllInFiber<R>(*co, n, std::forward<Start>(start));
  }
  struct Slots {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::optional<R>> values;
    size_t left = 0;
  } slots;
  slots.values.resize(n);
  slots.left = n;
  for (size_t i = 0; i < n; ++i) {
    start(i, [&slots, i](R r) {
      std::lock_guard lock(slots.mu);
      slots.values[i].emplace(std::move(r));
      if (--slots.left == 0) slots.cv.notify_one();  // under the lock, as above
    });
  }
  std::unique_lock lock(slots.mu);
  slots.cv.wait(lock, [&] { return slots.left == 0; });
  std::vector<R> out;
  out.reserve(n);
  for (auto& v : slots.values) out.push_back(std::move(*v));
  return out;
}

}  // namespace fedfs
