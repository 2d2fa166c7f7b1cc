// Blocking wrappers over the asynchronous Endpoint operations, and the
// Responder's out-of-line members.
#include "common/wait.h"

#include "m2m/transport.h"

namespace fedfs::m2m {

Responder::~Responder() {
  if (impl_) impl_->Send(Err(EIO, "request dropped without a reply"));
}

void Responder::Reply(Bytes payload) {
  if (auto impl = std::move(impl_)) impl->Send(std::move(payload));
}

void Responder::Fail(Error error) {
  if (auto impl = std::move(impl_)) impl->Send(Err(std::move(error)));
}

namespace {

// Every operation completes (at the latest at its timeout).
template <class T, class Start>
Result<T> Wait(Start&& start) {
  return WaitFor<Result<T>>(std::forward<Start>(start));
}

}  // namespace

Status ConnectSync(Endpoint& ep, Timeout t) {
  return Wait<void>([&](Callback<void> cb) { ep.Connect(t, std::move(cb)); });
}
Result<Bytes> CallSync(Endpoint& ep, uint16_t method, Bytes payload, Timeout t) {
  return Wait<Bytes>([&](Callback<Bytes> cb) { ep.Call(method, std::move(payload), t, std::move(cb)); });
}
Status PutSync(Endpoint& ep, const void* src, size_t len, const RemoteRegion& dst, uint64_t off,
               Timeout t) {
  return Wait<void>([&](Callback<void> cb) { ep.Put(src, len, dst, off, t, std::move(cb)); });
}
Status GetSync(Endpoint& ep, void* dst, size_t len, const RemoteRegion& src, uint64_t off,
               Timeout t) {
  return Wait<void>([&](Callback<void> cb) { ep.Get(dst, len, src, off, t, std::move(cb)); });
}
Result<uint64_t> FetchAddSync(Endpoint& ep, const RemoteRegion& r, uint64_t off, uint64_t add,
                              Timeout t) {
  return Wait<uint64_t>([&](Callback<uint64_t> cb) { ep.FetchAdd(r, off, add, t, std::move(cb)); });
}
Result<uint64_t> CompareSwapSync(Endpoint& ep, const RemoteRegion& r, uint64_t off,
                                 uint64_t expected, uint64_t desired, Timeout t) {
  return Wait<uint64_t>(
      [&](Callback<uint64_t> cb) { ep.CompareSwap(r, off, expected, desired, t, std::move(cb)); });
}

}  // namespace fedfs::m2m
