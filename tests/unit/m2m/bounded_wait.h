// "Does not hang" waits of the m2m tests. The *Sync helpers block until an
// operation completes, so a transport that never completes one would block
// the test instead of failing it. Bounded waits at most kHang: far above any
// normal completion (a loaded 2-core machine included), so that no test
// depends on how fast anything runs. Test-only.
#pragma once

#include <cerrno>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "m2m/transport.h"

namespace fedfs::m2m::testing {

inline constexpr auto kHang = std::chrono::seconds(60);

// Runs start(done) and returns what done was called with, or ETIME (which no
// transport gives) when done was not called within kHang.
template <class T, class Start>
Result<T> Bounded(Start&& start) {
  auto p = std::make_shared<std::promise<Result<T>>>();
  auto f = p->get_future();
  start(Callback<T>([p](Result<T> r) { p->set_value(std::move(r)); }));
  if (f.wait_for(kHang) != std::future_status::ready) {
    return Err(ETIME, "the operation did not complete within the does-not-hang bound");
  }
  return f.get();
}

inline Result<Bytes> BoundedCall(Endpoint& ep, uint16_t method, Bytes payload, Timeout t) {
  return Bounded<Bytes>(
      [&](Callback<Bytes> cb) { ep.Call(method, std::move(payload), t, std::move(cb)); });
}

// Polls pred until it holds; false if it still does not after kHang.
inline bool WaitUntil(const std::function<bool()>& pred) {
  const auto until = std::chrono::steady_clock::now() + kHang;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace fedfs::m2m::testing
