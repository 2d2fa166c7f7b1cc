// A Transport that counts its traffic by peer address and passes everything
// to the transport it wraps (the daemon's UCX transport): requests sent and
// how many failed, their payload bytes out and back, one-sided operations
// and their bytes and failures, requests served. Read by the metrics
// (docs/metrics.md, fedfs_transport_*).
//
// Threads: as the wrapped transport's; Traffic from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "m2m/transport_decorator.h"

namespace fedfs::m2m {

class CountingTransport final : public TransportDecorator {
 public:
  explicit CountingTransport(std::unique_ptr<Transport> inner);
  ~CountingTransport() override;

  struct PeerRow {
    std::string addr;  // as the caller named the peer (its listen address)
    uint64_t calls = 0, call_errors = 0, bytes_sent = 0, bytes_received = 0;
    uint64_t one_sided = 0, one_sided_bytes = 0, one_sided_errors = 0;
  };
  struct Traffic {
    std::vector<PeerRow> peers;  // by address
    uint64_t served = 0, served_bytes = 0;  // requests handled here, their payload bytes
  };
  Traffic traffic() const;

  void Handle(uint16_t method, RpcHandler handler) override;
  std::shared_ptr<Endpoint> GetEndpoint(const std::string& addr) override;

  struct Counters;  // counting_transport.cc

 private:
  mutable std::mutex mu_;
  struct Peer {
    std::shared_ptr<Endpoint> endpoint;
    std::shared_ptr<Counters> counters;
  };
  std::map<std::string, Peer> endpoints_;  // GUARDED_BY(mu_)
  std::shared_ptr<std::atomic<uint64_t>[]> served_;  // [0] requests, [1] bytes
};

}  // namespace fedfs::m2m
