// Helpers shared by the UCX transport tests: loopback options, transports on
// free ports, a log sink that records the "m2m" logger's lines. Test-only.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/tools/log_capture.h"
#include <spdlog/sinks/base_sink.h>

#include "common/logging.h"
#include "m2m/auth.h"
#include "m2m/ucx_transport.h"

namespace fedfs::m2m::testing {

inline Bytes TestKey(char c) { return Bytes(kClusterKeyBytes, std::byte(c)); }

inline UcxOptions Loopback() {
  UcxOptions u;
  u.tls = "tcp";
  u.net_devices = "lo";
  return u;
}

inline std::unique_ptr<Transport> NewUcx(const Bytes& key,
                                         size_t max_message_bytes = 64u << 20,
                                         Timeout connect_timeout = std::chrono::seconds(5)) {
  TransportOptions o;
  o.cluster_key = key;
  o.max_message_bytes = max_message_bytes;
  o.connect_timeout = connect_timeout;
  auto t = MakeUcxTransport(Loopback(), o);
  EXPECT_TRUE(t) << t.error().ToString();
  return t ? std::move(*t) : nullptr;
}

// Captures the "m2m" logger.
inline ::fedfs::testing::LogCapture& CaptureSinkGet() { return ::fedfs::testing::LogCapture::For("m2m"); }

}  // namespace fedfs::m2m::testing
