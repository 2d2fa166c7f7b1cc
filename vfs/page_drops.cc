#include "vfs/page_drops.h"

#include <algorithm>

#include "common/thread_name.h"

namespace fedfs::ns {

namespace {

uint64_t EndOf(DataRange r) {
  return r.length > DataRange::kToEnd - r.offset ? DataRange::kToEnd : r.offset + r.length;
}

// The smallest range holding both.
DataRange Union(DataRange a, DataRange b) {
  const uint64_t begin = std::min(a.offset, b.offset);
  const uint64_t end = std::max(EndOf(a), EndOf(b));
  return {begin, end == DataRange::kToEnd ? DataRange::kToEnd : end - begin};
}

}  // namespace

PageDrops::PageDrops(std::function<void(uint64_t, DataRange)> drop,
                     std::chrono::milliseconds max_wait)
    : drop_(std::move(drop)), max_wait_(max_wait) {}

PageDrops::~PageDrops() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

PageDrops::Writing::Writing(PageDrops& d, uint64_t ino, uint64_t offset, uint64_t length)
    : d_(d), ino_(ino) {
  std::lock_guard lock(d_.mu_);
  id_ = d_.next_id_++;
  const uint64_t end = length > DataRange::kToEnd - offset ? DataRange::kToEnd : offset + length;
  d_.writing_[ino].push_back({id_, offset, end});
}

PageDrops::Writing::~Writing() {
  bool wake = false;
  {
    std::lock_guard lock(d_.mu_);
    auto it = d_.writing_.find(ino_);
    if (it != d_.writing_.end()) {
      std::erase_if(it->second, [&](const Span& s) { return s.id == id_; });
      if (it->second.empty()) d_.writing_.erase(it);
    }
    wake = !d_.pending_.empty();
  }
  if (wake) d_.changed_.notify_all();
}

bool PageDrops::OverlapsLocked(uint64_t ino, DataRange range) const {
  auto it = writing_.find(ino);
  if (it == writing_.end()) return false;
  const uint64_t end = EndOf(range);
  return std::any_of(it->second.begin(), it->second.end(),
                     [&](const Span& s) { return s.offset < end && range.offset < s.end; });
}

bool PageDrops::DropNowOrLater(uint64_t ino, DataRange range) {
  if (range.empty()) return true;
  {
    std::lock_guard lock(mu_);
    if (!OverlapsLocked(ino, range)) return true;
    ++put_off_;
    auto same = std::find_if(pending_.begin(), pending_.end(),
                             [&](const Pending& p) { return p.ino == ino; });
    if (same != pending_.end()) {
      same->range = Union(same->range, range);
    } else {
      pending_.push_back({ino, range, std::chrono::steady_clock::now()});
    }
    if (!thread_.joinable()) {
      thread_ = std::thread([this] { Run(); });
      NameThread(thread_, "fedfs-pagedrop");
    }
  }
  changed_.notify_all();
  return false;
}

void PageDrops::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (stop_) return;  // the mount goes: its pages with it
    if (pending_.empty()) {
      changed_.wait(lock);
      continue;
    }
    // The first drop whose writes were answered, or that waited max_wait;
    // otherwise the earliest deadline.
    const auto now = std::chrono::steady_clock::now();
    auto ready = pending_.end();
    auto next = now + max_wait_;
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (!OverlapsLocked(it->ino, it->range) || now - it->since >= max_wait_) {
        ready = it;
        break;
      }
      next = std::min(next, it->since + max_wait_);
    }
    if (ready == pending_.end()) {
      changed_.wait_until(lock, next);
      continue;
    }
    const Pending p = *ready;
    pending_.erase(ready);
    dropping_ = true;
    lock.unlock();
    drop_(p.ino, p.range);
    lock.lock();
    dropping_ = false;
    changed_.notify_all();
  }
}

void PageDrops::Drain() {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return pending_.empty() && !dropping_; });
}

uint64_t PageDrops::put_off() const {
  std::lock_guard lock(mu_);
  return put_off_;
}

}  // namespace fedfs::ns
