#include "m2m/reply_cache.h"

#include <deque>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/cooperative.h"

namespace fedfs::m2m {

struct ReplyCache::State {
  struct Entry {
    std::optional<Result<Bytes>> reply;  // none while in flight
    std::vector<Responder> waiting;      // resends that came meanwhile
  };
  explicit State(ReplyCacheOptions o) : options(o) {}
  void PruneLocked(std::chrono::steady_clock::time_point now);

  const ReplyCacheOptions options;
  std::mutex mu;
  std::unordered_map<std::string, Entry> entries;  // GUARDED_BY(mu)
  std::deque<std::pair<std::string, std::chrono::steady_clock::time_point>> order;  // oldest first
  size_t bytes = 0;
  uint64_t served = 0, duplicates = 0;
};

namespace {
size_t SizeOf(const Result<Bytes>& r) { return r ? r->size() : 0; }
void Answer(Responder& r, const Result<Bytes>& reply) {
  if (reply) {
    r.Reply(*reply);
  } else {
    r.Fail(reply.error());
  }
}
}  // namespace

ReplyCache::ReplyCache(ReplyCacheOptions options) : s_(std::make_shared<State>(options)) {}
ReplyCache::~ReplyCache() = default;

void ReplyCache::State::PruneLocked(std::chrono::steady_clock::time_point now) {
  while (!order.empty() && (order.front().second + options.keep_for <= now ||
                            order.size() > options.max_entries || bytes > options.max_bytes)) {
    auto it = entries.find(order.front().first);
    // One in flight stays until it is answered (its resends wait on it):
    // every request is answered within its timeouts.
    if (it != entries.end() && !it->second.reply) break;
    if (it != entries.end()) {
      bytes -= SizeOf(*it->second.reply);
      entries.erase(it);
    }
    order.pop_front();
  }
}

void ReplyCache::ServeOnce(const std::string& client, uint64_t id, Responder responder,
                           std::move_only_function<void(Callback<Bytes>)> serve) {
  std::string key = client;
  key.push_back('\0');
  key.append(reinterpret_cast<const char*>(&id), sizeof id);
  std::optional<Result<Bytes>> cached;
  {
    std::lock_guard lock(s_->mu);
    s_->PruneLocked(SteadyNow());
    auto [it, fresh] = s_->entries.try_emplace(key);
    if (!fresh) {
      ++s_->duplicates;
      if (!it->second.reply) {
        it->second.waiting.push_back(std::move(responder));
        return;
      }
      cached = *it->second.reply;
    } else {
      ++s_->served;
      s_->order.emplace_back(key, SteadyNow());
    }
  }
  if (cached) return Answer(responder, *cached);  // outside the lock
  serve([s = s_, key = std::move(key), responder = std::move(responder)](Result<Bytes> r) mutable {
    std::vector<Responder> waiting;
    {
      std::lock_guard lock(s->mu);
      if (auto it = s->entries.find(key); it != s->entries.end()) {
        it->second.reply = r;
        s->bytes += SizeOf(r);
        waiting = std::move(it->second.waiting);
      }
    }
    waiting.push_back(std::move(responder));
    for (Responder& w : waiting) Answer(w, r);
  });
}

ReplyCache::Stats ReplyCache::stats() const {
  std::lock_guard lock(s_->mu);
  return Stats{s_->served, s_->duplicates, s_->entries.size(), s_->bytes};
}

}  // namespace fedfs::m2m
