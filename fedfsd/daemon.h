// The daemon's wiring: the one place that names concrete implementations
// (the UCX transport) and connects transport, membership and the control
// socket. main.cc owns one Daemon; integration tests run the fedfsd binary.
//
// Threads: Start and Stop are called by the main thread. The transport, the
// membership and the control server each own their threads.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "fedfsd/control.h"
#include "fedfsd/membership.h"
#include "fedfsd/options.h"
#include "m2m/transport.h"

namespace fedfs::daemon {

// Checks that nothing listens on (or holds) the TCP address "host:port", by
// binding a probe socket (SO_REUSEADDR, like a listener) and closing it.
// EADDRINUSE with "address H:P is already in use"; EADDRNOTAVAIL when the host
// is not an address of this machine; the error context is one line.
Status CheckListenAddressFree(const std::string& listen);

class Daemon {
 public:
  // Creates the transport, listens, starts membership and the control
  // socket. On failure everything started is stopped again and the error's
  // context is one line naming what failed.
  static Result<std::unique_ptr<Daemon>> Start(const DaemonOptions& options);

  ~Daemon();  // Stop()

  // Stops the control socket (and removes it), membership, then the
  // transport. Idempotent.
  void Stop();

  std::shared_ptr<const MembershipView> Snapshot() const { return membership_->Snapshot(); }

 private:
  Daemon() = default;

  std::unique_ptr<m2m::Transport> transport_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<ControlServer> control_;
};

}  // namespace fedfs::daemon
