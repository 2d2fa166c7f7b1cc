// At-most-once serving of requests that a client resends after a lost
// message (docs/faults.md, "Lost messages"). A client gives a request that
// must not take effect twice an id, the same in every resend; the server
// runs it once per (client, id) and answers every arrival with the first
// answer: the one in flight when a resend comes while it runs, the kept one
// after. Answers are kept for `keep_for` and at most `max_entries` (and
// `max_bytes` of replies), oldest first; a resend is made within a few
// timeouts of the first try, long before that.
//
// ConnectionBroken(code) says which of a call's errors are worth a resend:
// over a reliable transport a message is lost only with its connection,
// and the request may or may not have been acted on. A timeout is not
// resent: the peer is silent, and another try would cost another timeout
// (membership declares it dead meanwhile).
//
// Threads: any; one mutex of its own (a leaf: nothing is called out while
// it is held, so answers may be given under other locks).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "m2m/transport.h"

namespace fedfs::m2m {

// A broken connection: the request or its reply may have been lost, and the
// peer may or may not have acted on it.
inline bool ConnectionBroken(int code) {
  return code == ECONNRESET || code == ENOTCONN || code == EPIPE || code == ECONNABORTED;
}

// How many times a client sends such a request again at most.
inline constexpr int kMaxResends = 4;

struct ReplyCacheOptions {
  std::chrono::milliseconds keep_for{60'000};
  size_t max_entries = 16384;
  size_t max_bytes = 64u << 20;
};

class ReplyCache {
 public:
  explicit ReplyCache(ReplyCacheOptions options = {});
  ~ReplyCache();

  // Runs `serve` for the first arrival of (client, id) only, and answers
  // `responder` with its answer (or the first arrival's). `serve` calls its
  // callback exactly once, on any thread.
  void ServeOnce(const std::string& client, uint64_t id, Responder responder,
                 std::move_only_function<void(Callback<Bytes>)> serve);

  struct Stats {
    uint64_t served = 0;      // first arrivals
    uint64_t duplicates = 0;  // resends answered without running again
    size_t entries = 0, bytes = 0;
  };
  Stats stats() const;

 private:
  struct State;  // shared with the answers in flight (the cache may go first)
  std::shared_ptr<State> s_;
};

}  // namespace fedfs::m2m
