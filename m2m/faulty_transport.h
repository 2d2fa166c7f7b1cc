// A Transport that injects faults into the calls this node makes, around
// any transport (the daemon's UCX transport, the fake network): requests
// lost before they are sent, replies lost after the peer acted (the caller
// gets ECONNRESET either way: over a reliable transport a message is lost
// only with its connection), delays (so that messages overtake each other),
// broken connections and duplicated requests (what a resend after a broken
// connection does to a request the peer got). One-sided operations are delayed, lost or disconnected the
// same way. Requests served here are not touched: every node injecting its
// own faults covers both directions. Seeded: one seed, one sequence of
// decisions (the interleaving still depends on timing).
//
// For tests and fault runs only (docs/faults.md, "Fault injection"): the
// daemon wraps its transport in one when FEDFS_TEST_FAULTS is set.
//
// Threads: as the wrapped transport's; delayed operations are sent from a
// thread of the FaultyTransport's own, started by the first of them (without
// delays no thread is started: the simulator's fibers use it so).
#pragma once

#include <chrono>
#include <map>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/timers.h"
#include "m2m/transport_decorator.h"

namespace fedfs::m2m {

struct FaultSpec {
  double drop = 0;        // share of operations lost (half before, half after the peer acts)
  double delay = 0;       // share of operations delayed ...
  std::chrono::microseconds delay_max{0};  // ... by up to this much (uniform)
  double disconnect = 0;  // share of operations preceded by a broken connection
  // Share of calls whose request the peer gets twice: a copy is sent too,
  // delayed by up to delay_max (so it may come before or after the
  // original), and its answer thrown away.
  double duplicate = 0;
  uint64_t seed = 1;

  bool Any() const { return drop > 0 || delay > 0 || disconnect > 0 || duplicate > 0; }
  std::string ToString() const;
};

// "drop=0.01,delay=0.05:20ms,disconnect=0.001,duplicate=0.01,seed=7" (any subset; delays
// in us, ms or s): the spec, or EINVAL naming the bad part.
Result<FaultSpec> ParseFaultSpec(std::string_view text);

class FaultyTransport final : public TransportDecorator {
 public:
  FaultyTransport(std::unique_ptr<Transport> inner, FaultSpec spec);
  ~FaultyTransport() override;

  struct Counts {
    uint64_t operations = 0, dropped_requests = 0, dropped_replies = 0, delayed = 0,
             disconnects = 0, duplicated = 0;
  };
  Counts counts() const;

  std::shared_ptr<Endpoint> GetEndpoint(const std::string& addr) override;

  struct State;  // faulty_transport.cc

 private:
  std::shared_ptr<State> state_;
  std::mutex endpoints_mu_;
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints_;  // GUARDED_BY(endpoints_mu_)
};

}  // namespace fedfs::m2m
