#include "migration/access.h"

#include <iterator>

#include "common/logging.h"
#include "common/thread_name.h"

namespace fedfs::ns {

AccessMeter::AccessMeter(AccessOptions options, std::string self)
    : o_(options), self_(std::move(self)) {}

void AccessMeter::Count(const std::string& path, const std::string& node, uint64_t bytes) {
  if (bytes == 0) return;
  std::lock_guard lock(mu_);
  auto it = bytes_.find(path);
  if (it == bytes_.end()) {
    if (bytes_.size() >= o_.max_tracked) return;
    it = bytes_.emplace(path, std::map<std::string, uint64_t>{}).first;
  }
  it->second[node] += bytes;
}

std::vector<AccessMeter::Candidate> AccessMeter::EndWindow(Clock::time_point now) {
  std::unordered_map<std::string, std::map<std::string, uint64_t>> window;
  std::lock_guard lock(mu_);
  window.swap(bytes_);
  std::vector<Candidate> out;
  std::unordered_map<std::string, Streak> streaks;
  for (const auto& [path, by_node] : window) {
    uint64_t total = 0;
    const std::pair<const std::string, uint64_t>* top = nullptr;
    for (const auto& e : by_node) {
      total += e.second;
      if (top == nullptr || e.second > top->second) top = &e;
    }
    if (top == nullptr || top->first == self_ || top->second < o_.min_bytes ||
        static_cast<double>(top->second) < o_.share * static_cast<double>(total)) {
      continue;  // the streak ends
    }
    Streak s{top->first, 1};
    if (auto was = streaks_.find(path); was != streaks_.end() && was->second.node == top->first) {
      s.windows = was->second.windows + 1;
    }
    streaks[path] = s;  // held back below or not, the streak goes on
    if (s.windows < o_.windows) continue;
    if (auto m = came_.find(path); m != came_.end()) {
      const auto since = now - m->second.at;
      if (since < o_.cooldown) continue;  // cooldown
      if (m->second.from == top->first && since < 2 * o_.cooldown) continue;  // hysteresis
    }
    out.push_back(Candidate{path, top->first, top->second});
  }
  streaks_.swap(streaks);
  // Forget the arrivals past both bounds.
  for (auto it = came_.begin(); it != came_.end();) {
    it = now - it->second.at >= 2 * o_.cooldown ? came_.erase(it) : std::next(it);
  }
  return out;
}

void AccessMeter::Arrived(const std::string& path, const std::string& from,
                          Clock::time_point now) {
  std::lock_guard lock(mu_);
  came_[path] = Came{now, from};
  streaks_.erase(path);
}

void AccessMeter::Held(const std::string& path, Clock::time_point now) {
  std::lock_guard lock(mu_);
  came_[path] = Came{now, ""};
  streaks_.erase(path);
}

size_t AccessMeter::tracked() const {
  std::lock_guard lock(mu_);
  return bytes_.size();
}

AccessTrigger::AccessTrigger(AccessOptions options, std::string self, MoveFn move)
    : o_(options), meter_(options, std::move(self)), move_(std::move(move)) {}

AccessTrigger::~AccessTrigger() { Stop(); }

void AccessTrigger::Start() {
  if (!o_.enabled || thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
  NameThread(thread_, "mig-access");
}

void AccessTrigger::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

auto AccessTrigger::stats() const -> Stats {
  std::lock_guard lock(mu_);
  return stats_;
}

void AccessTrigger::Run() {
  auto next = AccessMeter::Clock::now() + o_.window;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (cv_.wait_until(lock, next, [this] { return stop_; })) return;
    }
    next += o_.window;
    const auto candidates = meter_.EndWindow(AccessMeter::Clock::now());
    {
      std::lock_guard lock(mu_);
      stats_.windows++;
      stats_.candidates += candidates.size();
    }
    for (const auto& c : candidates) {
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
      }
      Status s = move_(c.path, c.to);
      meter_.Held(c.path, AccessMeter::Clock::now());
      if (s) {
        Logger("migration")->info("{} moved to {}: {} bytes through it in the last window", c.path,
                                  c.to, c.bytes);
      } else {
        Logger("migration")->info("{}: not moved to {} for its accesses: {}", c.path, c.to,
                                  s.error().ToString());
      }
      std::lock_guard lock(mu_);
      (s ? stats_.moved : stats_.failed)++;
    }
    // A window that took longer than one (a long move) starts afresh.
    if (next < AccessMeter::Clock::now()) next = AccessMeter::Clock::now() + o_.window;
  }
}

}  // namespace fedfs::ns
