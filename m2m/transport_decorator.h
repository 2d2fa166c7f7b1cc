// A Transport that hands every call to the transport it wraps; decorators
// (m2m/counting_transport.h, m2m/faulty_transport.h) override what they
// change. Threads: as the wrapped transport's.
#pragma once

#include <memory>
#include <string>

#include "m2m/transport.h"

namespace fedfs::m2m {

class TransportDecorator : public Transport {
 public:
  explicit TransportDecorator(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}

  void Handle(uint16_t method, RpcHandler handler) override {
    inner_->Handle(method, std::move(handler));
  }
  Result<std::string> Listen(const std::string& addr) override { return inner_->Listen(addr); }
  std::shared_ptr<Endpoint> GetEndpoint(const std::string& addr) override {
    return inner_->GetEndpoint(addr);
  }
  Result<std::unique_ptr<LocalRegion>> Register(void* addr, size_t len) override {
    return inner_->Register(addr, len);
  }
  Result<std::unique_ptr<LocalRegion>> Allocate(size_t len) override {
    return inner_->Allocate(len);
  }
  void Shutdown() override { inner_->Shutdown(); }

 protected:
  Transport& inner() { return *inner_; }

 private:
  std::unique_ptr<Transport> inner_;
};

}  // namespace fedfs::m2m
