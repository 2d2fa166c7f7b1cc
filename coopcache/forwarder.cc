#include "coopcache/forwarder.h"

#include "common/cooperative.h"
#include "common/logging.h"

namespace fedfs::coop {

Forwarder::Forwarder(ForwarderOptions options, uint64_t block_size, ForwardPort* port)
    : opts_(options), block_(block_size), port_(port) {
  for (size_t i = 0; i < opts_.max_pending; ++i) spare_.emplace_back();
  if (opts_.runner == nullptr) worker_ = std::thread([this] { Run(); });
}

Forwarder::~Forwarder() { Stop(); }

void Forwarder::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  idle_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  WaitIdle([&] { return !pumping_; });
}

// Waits for `done` (under mu_): in a fiber of the simulator
// (common/cooperative.h) by looking every 20 µs of simulated time, as a
// wait on a condition variable would block the thread the Pump runs on.
template <class Pred>
void Forwarder::WaitIdle(Pred done) {
  std::unique_lock lock(mu_);
  while (!done()) {
    if (SuspendableContext() == nullptr) {
      idle_cv_.wait(lock, done);
      return;
    }
    lock.unlock();
    SleepFor(std::chrono::microseconds(20));
    lock.lock();
  }
}

void Forwarder::OnEvict(const Evicted& e) {
  std::lock_guard lock(mu_);
  if (stop_ || e.origin.recirc >= opts_.max_recirc || spare_.empty()) {
    ++stats_.dropped;
    return;
  }
  Forward f;
  f.origin = e.origin;
  f.file = e.file;
  f.generation = e.generation;
  f.block = block_;
  f.index = e.index;
  f.frame = e.frame;
  f.tag = e.tag;
  f.bytes = std::move(spare_.back());
  spare_.pop_back();
  f.bytes.assign(e.bytes.begin(), e.bytes.end());  // capacity kept across uses
  queue_.push_back(std::move(f));
  cv_.notify_one();
  if (opts_.runner != nullptr && !pumping_) {
    pumping_ = true;
    opts_.runner->Post([this] { Pump(); });
  }
}

void Forwarder::Drain() {
  WaitIdle([&] { return stop_ || (queue_.empty() && !busy_ && !pumping_); });
}

void Forwarder::ForwardFront(std::unique_lock<std::mutex>& lock) {
  Forward f = std::move(queue_.front());
  queue_.pop_front();
  busy_ = true;
  lock.unlock();
  ForwardOne(f);
  lock.lock();
  busy_ = false;
  spare_.push_back(std::move(f.bytes));
}

void Forwarder::Pump() {
  std::unique_lock lock(mu_);
  while (!stop_ && !queue_.empty()) ForwardFront(lock);
  pumping_ = false;
  idle_cv_.notify_all();
}

void Forwarder::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    ForwardFront(lock);
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void Forwarder::ForwardOne(Forward& f) {
  auto fail = [&](const Error& e, const char* step) {
    static auto log = Logger("coopcache");
    log->debug("forwarding block {} of {}:{}:{}: {}: {}", f.index, f.origin.holder,
               f.origin.dev, f.origin.ino, step, e.ToString());
    std::lock_guard lock(mu_);
    ++stats_.errors;
  };
  {
    std::lock_guard lock(mu_);
    ++stats_.evictions;
  }
  auto target = port_->Evict(f);
  if (!target) return fail(target.error(), "telling its node");
  if (!*target) {
    std::lock_guard lock(mu_);
    ++stats_.declined;
    return;
  }
  auto at = port_->Store((*target)->node, f);
  if (!at) return fail(at.error(), "storing it");
  if (auto st = port_->Moved(f, **target, *at); !st) return fail(st.error(), "recording it");
  // A hint for this node's own reads only: a block it fetched itself (not
  // one forwarded to it, kept under a key no read of this node looks up).
  if (opts_.hints != nullptr && f.origin.recirc == 0) {
    opts_.hints->Put(f.file, f.index, f.generation, *at);
  }
  std::lock_guard lock(mu_);
  ++stats_.forwarded;
}

auto Forwarder::stats() const -> Stats {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace fedfs::coop
