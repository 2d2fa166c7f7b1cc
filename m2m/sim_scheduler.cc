#include "m2m/sim_scheduler.h"

#include <algorithm>
#include <cassert>

#include "common/thread_name.h"

namespace fedfs::m2m {

namespace {
// Rebuild the heap when cancelled events dominate it, so that timers cancelled
// early (the common case: an operation completed before its timeout) do not
// pile up until their time.
constexpr size_t kCompactMin = 256;
}  // namespace

SimScheduler::SimScheduler(SchedulerMode mode)
    : mode_(mode), start_(std::chrono::steady_clock::now()) {
  if (mode_ == SchedulerMode::kRealTime) {
    dispatcher_ = std::thread([this] { DispatcherLoop(); });
    NameThread(dispatcher_, "sim-dispatch");
    dispatcher_id_ = dispatcher_.get_id();
  }
}

SimScheduler::~SimScheduler() { Stop(); }

SimScheduler::Duration SimScheduler::Now() const {
  if (mode_ == SchedulerMode::kRealTime) {
    return std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - start_);
  }
  std::lock_guard lk(mu_);
  return virtual_now_;
}

SimScheduler::TimerId SimScheduler::Schedule(Duration delay, Fn fn) {
  if (delay < Duration::zero()) delay = Duration::zero();
  std::unique_lock lk(mu_);
  if (stopped_) {
    lk.unlock();
    fn = nullptr;  // destroyed outside the lock: its destructor may schedule
    return 0;
  }
  const Duration base =
      mode_ == SchedulerMode::kRealTime
          ? std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - start_)
          : virtual_now_;
  const TimerId id = next_seq_++;
  heap_.push_back(Event{base + delay, id, std::move(fn)});
  std::push_heap(heap_.begin(), heap_.end(), Later{});
  const bool earliest = heap_.front().seq == id;
  lk.unlock();
  if (earliest && mode_ == SchedulerMode::kRealTime) cv_.notify_one();
  return id;
}

void SimScheduler::Cancel(TimerId id) {
  std::vector<Event> dropped;  // destroyed after mu_ is released
  std::lock_guard lk(mu_);
  if (id == 0 || id >= next_seq_ || stopped_) return;
  cancelled_.insert(id);
  if (cancelled_.size() >= kCompactMin && cancelled_.size() * 2 > heap_.size()) {
    // Every id in cancelled_ that is not in heap_ already ran: forget it.
    std::vector<Event> keep;
    keep.reserve(heap_.size());
    for (auto& ev : heap_) {
      (cancelled_.contains(ev.seq) ? dropped : keep).push_back(std::move(ev));
    }
    heap_ = std::move(keep);
    std::make_heap(heap_.begin(), heap_.end(), Later{});
    cancelled_.clear();
  }
}

void SimScheduler::SkipCancelledLocked() {
  while (!heap_.empty() && !cancelled_.empty() && cancelled_.contains(heap_.front().seq)) {
    cancelled_.erase(heap_.front().seq);
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    heap_.pop_back();
  }
}

bool SimScheduler::PopDueLocked(Duration limit, Event* out) {
  SkipCancelledLocked();
  if (heap_.empty() || heap_.front().at > limit) return false;
  std::pop_heap(heap_.begin(), heap_.end(), Later{});
  *out = std::move(heap_.back());
  heap_.pop_back();
  return true;
}

void SimScheduler::RunOne(Event ev) {
  {
    std::lock_guard lk(mu_);
    if (ev.at > virtual_now_) virtual_now_ = ev.at;
  }
  ev.fn();
}

size_t SimScheduler::RunUntilIdle() {
  assert(mode_ == SchedulerMode::kSimulated);
  size_t n = 0;
  for (;;) {
    Event ev;
    {
      std::lock_guard lk(mu_);
      if (stopped_ || !PopDueLocked(Duration::max(), &ev)) return n;
    }
    RunOne(std::move(ev));
    ++n;
  }
}

void SimScheduler::RunFor(Duration d) {
  assert(mode_ == SchedulerMode::kSimulated);
  Duration limit;
  {
    std::lock_guard lk(mu_);
    limit = virtual_now_ + d;
  }
  for (;;) {
    Event ev;
    {
      std::lock_guard lk(mu_);
      if (stopped_ || !PopDueLocked(limit, &ev)) break;
    }
    RunOne(std::move(ev));
  }
  std::lock_guard lk(mu_);
  if (virtual_now_ < limit) virtual_now_ = limit;
}

bool SimScheduler::RunUntil(const std::function<bool()>& pred) {
  assert(mode_ == SchedulerMode::kSimulated);
  for (;;) {
    if (pred()) return true;
    Event ev;
    {
      std::lock_guard lk(mu_);
      if (stopped_ || !PopDueLocked(Duration::max(), &ev)) return false;
    }
    RunOne(std::move(ev));
  }
}

bool SimScheduler::OnSchedulerContext() const {
  return mode_ == SchedulerMode::kSimulated || std::this_thread::get_id() == dispatcher_id_;
}

bool SimScheduler::stopped() const {
  std::lock_guard lk(mu_);
  return stopped_;
}

size_t SimScheduler::pending() const {
  std::lock_guard lk(mu_);
  return heap_.size() - std::min(heap_.size(), cancelled_.size());
}

void SimScheduler::DispatcherLoop() {
  std::unique_lock lk(mu_);
  while (!stopped_) {
    SkipCancelledLocked();
    if (heap_.empty()) {
      cv_.wait(lk);
      continue;
    }
    const auto now =
        std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - start_);
    if (heap_.front().at > now) {
      cv_.wait_until(lk, start_ + heap_.front().at);
      continue;
    }
    {
      Event ev;
      PopDueLocked(now, &ev);
      lk.unlock();
      ev.fn();
    }  // ev (and its captures) destroyed outside the lock
    lk.lock();
  }
}

void SimScheduler::Stop() {
  {
    std::lock_guard lk(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  cv_.notify_all();
  if (dispatcher_.joinable()) {
    assert(std::this_thread::get_id() != dispatcher_id_);
    dispatcher_.join();
  }
  // Destroy pending events outside the lock; Schedule() now drops new ones.
  std::vector<Event> drop;
  {
    std::lock_guard lk(mu_);
    drop.swap(heap_);
    cancelled_.clear();
  }
}

}  // namespace fedfs::m2m
