#include "m2m/counting_transport.h"

namespace fedfs::m2m {

struct CountingTransport::Counters {
  std::atomic<uint64_t> calls{0}, call_errors{0}, bytes_sent{0}, bytes_received{0};
  std::atomic<uint64_t> one_sided{0}, one_sided_bytes{0}, one_sided_errors{0};
};

namespace {

using Counters = CountingTransport::Counters;

void Add(std::atomic<uint64_t>& a, uint64_t n) { a.fetch_add(n, std::memory_order_relaxed); }

class CountingEndpoint final : public Endpoint {
 public:
  CountingEndpoint(std::shared_ptr<Endpoint> inner, std::shared_ptr<Counters> c)
      : inner_(std::move(inner)), c_(std::move(c)) {}

  const std::string& address() const override { return inner_->address(); }
  void Connect(Timeout timeout, Callback<void> done) override {
    inner_->Connect(timeout, std::move(done));
  }
  void Call(uint16_t method, Bytes payload, Timeout timeout, Callback<Bytes> done) override {
    Add(c_->calls, 1);
    Add(c_->bytes_sent, payload.size());
    inner_->Call(method, std::move(payload), timeout,
                 [c = c_, done = std::move(done)](Result<Bytes> r) mutable {
                   if (r) {
                     Add(c->bytes_received, r->size());
                   } else {
                     Add(c->call_errors, 1);
                   }
                   done(std::move(r));
                 });
  }
  Result<std::shared_ptr<RemoteRegion>> Import(const RegionDesc& desc) override {
    return inner_->Import(desc);
  }
  void Put(const void* src, size_t len, const RemoteRegion& dst, uint64_t offset,
           Timeout timeout, Callback<void> done) override {
    OneSided(len);
    inner_->Put(src, len, dst, offset, timeout, Counted<void>(std::move(done)));
  }
  void Get(void* dst, size_t len, const RemoteRegion& src, uint64_t offset, Timeout timeout,
           Callback<void> done) override {
    OneSided(len);
    inner_->Get(dst, len, src, offset, timeout, Counted<void>(std::move(done)));
  }
  void FetchAdd(const RemoteRegion& region, uint64_t offset, uint64_t add, Timeout timeout,
                Callback<uint64_t> done) override {
    OneSided(8);
    inner_->FetchAdd(region, offset, add, timeout, Counted<uint64_t>(std::move(done)));
  }
  void CompareSwap(const RemoteRegion& region, uint64_t offset, uint64_t expected,
                   uint64_t desired, Timeout timeout, Callback<uint64_t> done) override {
    OneSided(8);
    inner_->CompareSwap(region, offset, expected, desired, timeout,
                        Counted<uint64_t>(std::move(done)));
  }
  void Disconnect() override { inner_->Disconnect(); }

 private:
  void OneSided(size_t len) {
    Add(c_->one_sided, 1);
    Add(c_->one_sided_bytes, len);
  }
  template <class T>
  Callback<T> Counted(Callback<T> done) {
    return [c = c_, done = std::move(done)](Result<T> r) mutable {
      if (!r) Add(c->one_sided_errors, 1);
      done(std::move(r));
    };
  }

  std::shared_ptr<Endpoint> inner_;
  std::shared_ptr<Counters> c_;
};

}  // namespace

CountingTransport::CountingTransport(std::unique_ptr<Transport> inner)
    : TransportDecorator(std::move(inner)), served_(new std::atomic<uint64_t>[2]{}) {}

CountingTransport::~CountingTransport() = default;

void CountingTransport::Handle(uint16_t method, RpcHandler handler) {
  inner().Handle(method, [served = served_, h = std::move(handler)](IncomingCall call,
                                                                     Responder r) mutable {
    Add(served[0], 1);
    Add(served[1], call.payload.size());
    h(std::move(call), std::move(r));
  });
}

std::shared_ptr<Endpoint> CountingTransport::GetEndpoint(const std::string& addr) {
  std::lock_guard lock(mu_);
  Peer& p = endpoints_[addr];
  if (!p.endpoint) {
    p.counters = std::make_shared<Counters>();
    p.endpoint = std::make_shared<CountingEndpoint>(inner().GetEndpoint(addr), p.counters);
  }
  return p.endpoint;
}

CountingTransport::Traffic CountingTransport::traffic() const {
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  Traffic t;
  t.served = get(served_[0]);
  t.served_bytes = get(served_[1]);
  std::lock_guard lock(mu_);
  for (const auto& [addr, p] : endpoints_) {
    const Counters& c = *p.counters;
    t.peers.push_back(PeerRow{addr, get(c.calls), get(c.call_errors), get(c.bytes_sent),
                              get(c.bytes_received), get(c.one_sided), get(c.one_sided_bytes),
                              get(c.one_sided_errors)});
  }
  return t;
}

}  // namespace fedfs::m2m
