// What the benchmarks that run a peer in a child process over UCX share:
// the transport options (a fixed cluster key) and UCX over TCP on loopback.
#pragma once

#include "m2m/ucx_transport.h"

namespace fedfs::bench {

inline m2m::TransportOptions TOpts() {
  m2m::TransportOptions t;
  t.cluster_key = m2m::Bytes(32, std::byte{5});
  return t;
}

inline m2m::UcxOptions Ucx() {
  m2m::UcxOptions u;
  u.tls = "tcp";
  u.net_devices = "lo";
  return u;
}

}  // namespace fedfs::bench
