// The in-process fake network: N m2m::Transport objects that reach each other
// through a scheduler instead of sockets. For deterministic unit tests and for
// simulating hundreds to thousands of nodes in one process (one thread, a
// discrete-event simulation; a node costs a few small maps, no thread).
//
// What is modelled
//  * Real bytes: every two-sided message is a frame encoded with EncodeFrame
//    and checked with DecodeFrame on arrival; connections run the m2m/auth.h
//    handshake (4 messages); malformed frames are logged, counted and dropped.
//  * Latency: a message of n bytes (header + payload) arrives after
//      base_latency + n / bytes_per_second + U[0, jitter]
//    (U uniform, drawn from the network's seeded RNG; no congestion model).
//    Messages on one directed link keep their send order (as on a TCP or UCX
//    connection) unless reordering is on: each message is then, with
//    reorder_probability, held back by an extra U[0, reorder_max_delay] and may
//    be overtaken. With loss_probability a message is dropped. Per-link and
//    per-node (slow node) models override the network's default.
//  * One-sided Put/Get/FetchAdd/CompareSwap: a request message (carrying the
//    Put data) and a completion message (carrying the Get data), i.e. one round
//    trip. The network applies the operation to the target's registered memory
//    at the request's arrival instant, without any handler (no target CPU);
//    atomics use std::atomic_ref<uint64_t>, so real threads touching the same
//    words stay safe. Region keys are 24 bytes: magic, region id, random tag.
//    An unknown, unregistered or mistagged region answers EFAULT; a range
//    outside the descriptor or the registration answers EINVAL, as does a
//    misaligned atomic.
//  * Faults: Partition/Heal (by listen address), Kill (the node goes silent:
//    everything to or from it is dropped, so peers see ETIMEDOUT), Revive (it
//    answers again with its connections reset; a new transport may also Listen
//    on a killed node's address, and the old one then answers like a rebooted
//    host: resets). A packet to an address nobody listens on is answered by a
//    reset: ECONNREFUSED while connecting, ECONNRESET on a connection.
//  * Operations always complete exactly once, at the latest at their timeout
//    measured on the network's clock.
//
// Threads. All state of the network and of its transports lives on the
// scheduler context: the dispatcher thread (kRealTime) or the thread calling
// Run*() (kSimulated); handlers and callbacks run there. Transport/Endpoint
// calls from other threads post their work there (operations) or run it there
// and wait (Listen, GetEndpoint, Register, Shutdown, ...). In kSimulated mode
// every call must come from the owner thread, except Responder replies, which
// may come from any thread in both modes. Do not destroy a transport from
// inside its own handlers or callbacks. In kSimulated mode the blocking *Sync
// helpers cannot be used (nothing would run the events they wait for): issue
// operations with callbacks, then RunUntilIdle/RunFor/RunUntil.
//
// Ownership. FakeNetwork owns the scheduler. Transports and endpoints share
// the network's core and may outlive the FakeNetwork object (they then fail
// with ESHUTDOWN); pending events are dropped when the FakeNetwork dies.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "m2m/frame.h"
#include "m2m/sim_scheduler.h"
#include "m2m/transport.h"

namespace fedfs::m2m {

using SimDuration = std::chrono::nanoseconds;

// One-way cost of a message: base + bytes / bandwidth + U[0, jitter].
struct LinkModel {
  SimDuration base_latency{0};
  double bytes_per_second = 0;  // 0: unlimited
  SimDuration jitter{0};        // upper bound of the uniform extra delay

  static LinkModel Zero() { return {}; }
  // ~2 us one-way, ~10 GB/s (InfiniBand-class RDMA).
  static LinkModel Rdma();
  // ~25 us one-way, ~1.2 GB/s (10 GbE with a kernel TCP stack).
  static LinkModel TcpLan();
  // ~5 ms one-way, 100 MB/s.
  static LinkModel Wan();
  // "zero", "rdma", "tcp-lan", "wan"; EINVAL for anything else.
  static Result<LinkModel> Preset(std::string_view name);
};

struct FakeNetworkOptions {
  SchedulerMode mode = SchedulerMode::kRealTime;
  uint64_t seed = 1;             // latency jitter, loss, reordering, region tags
  LinkModel link = LinkModel::Zero();
  double loss_probability = 0;   // per message, in [0, 1]
  double reorder_probability = 0;
  SimDuration reorder_max_delay{0};
};

struct MethodStats {
  uint64_t requests = 0;  // requests sent for this method
  uint64_t bytes = 0;     // their header + payload bytes
  bool operator==(const MethodStats&) const = default;
};

// Traffic of one node (or the sum over all nodes). "Messages" are every packet
// the network carried: handshake frames, requests, replies, one-sided requests
// and completions, resets.
struct TrafficStats {
  uint64_t messages_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t messages_received = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_dropped = 0;  // sent by this node and lost (loss, partition, kill)
  uint64_t rpc_requests = 0;      // requests sent
  uint64_t one_sided_ops = 0;     // Put/Get/FetchAdd/CompareSwap issued
  uint64_t auth_failures = 0;     // handshakes this node refused or saw aborted
  uint64_t malformed_frames = 0;  // frames this node refused in DecodeFrame
  std::map<uint16_t, MethodStats> per_method;
  bool operator==(const TrafficStats&) const = default;
};

class FakeNetwork {
 public:
  using TimerId = SimScheduler::TimerId;

  explicit FakeNetwork(FakeNetworkOptions options = {});
  ~FakeNetwork();
  FakeNetwork(const FakeNetwork&) = delete;
  FakeNetwork& operator=(const FakeNetwork&) = delete;

  // A new node transport. Listen(addr) takes any name ("node-7", "fake:7");
  // an empty name or one ending in ":0" gets a unique name ("fake:<n>" or
  // "<prefix>:<n>"). A name held by a live transport gives EADDRINUSE.
  std::unique_ptr<Transport> NewTransport(const TransportOptions& options);

  // The network clock (since creation). Any thread.
  SimDuration Now() const;
  // Runs fn on the scheduler context after `delay` (timers of code running on
  // the network, e.g. heartbeats). Any thread.
  TimerId Schedule(SimDuration delay, std::move_only_function<void()> fn);
  void Cancel(TimerId id);

  // kSimulated mode only (owner thread, not from inside an event); see
  // SimScheduler.
  size_t RunUntilIdle();
  void RunFor(SimDuration d);
  bool RunUntil(const std::function<bool()>& pred);

  // Latency model: the default for every link, a node's links (slow node), or
  // one link (both directions). A link override beats node overrides; between
  // two node overrides the one with the larger base latency applies.
  void SetDefaultLinkModel(const LinkModel& m);
  void SetNodeModel(const std::string& addr, const LinkModel& m);
  void SetLinkModel(const std::string& a, const std::string& b, const LinkModel& m);
  void SetLoss(double probability);
  void SetReorder(double probability, SimDuration max_delay);

  // Drops every message between a and b (both directions, including those in
  // flight when they arrive) until Heal.
  void Partition(const std::string& a, const std::string& b);
  void Heal(const std::string& a, const std::string& b);
  void HealAll();
  // ENOENT if no transport holds addr.
  Status Kill(const std::string& addr);
  Status Revive(const std::string& addr);

  // Delivers a raw frame to the node at to_addr as if from an unauthenticated
  // peer, on connection `conn` (0: a new connection). Returns the connection
  // id used, so a test can continue a handshake on it. Frames the node sends
  // back on such connections are decoded into the injector inbox.
  uint64_t InjectRawFrame(const std::string& to_addr, Bytes header, Bytes payload,
                          uint64_t conn = 0);
  // Takes the frames received so far by the injector (kRealTime: call after
  // the frames had time to arrive).
  std::vector<FrameHeader> TakeInjectorInbox();

  // Counters of the transport now holding addr (zeros if none), and the sum
  // over live transports (a shut-down transport's counters leave the sum).
  TrafficStats Stats(const std::string& addr);
  TrafficStats TotalStats();
  void ResetStats();

  class Core;  // implementation (fake_network.cc)

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace fedfs::m2m
