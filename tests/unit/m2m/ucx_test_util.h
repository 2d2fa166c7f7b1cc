// Helpers shared by the UCX transport tests: loopback options, transports on
// free ports, a log sink that records the "m2m" logger's lines. Test-only.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
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

// Records every line logged by the "m2m" logger (installed once, never removed).
class CaptureSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  static CaptureSink& Get() {
    static std::shared_ptr<CaptureSink> sink = [] {
      auto s = std::make_shared<CaptureSink>();
      Logger("m2m")->sinks().push_back(s);
      return s;
    }();
    return *sink;
  }
  size_t Mark() {
    std::lock_guard lock(mu_);
    return lines_.size();
  }
  // Whether a line logged after `mark` contains `needle`.
  bool Contains(const std::string& needle, size_t mark) {
    std::lock_guard lock(mu_);
    for (size_t i = mark; i < lines_.size(); ++i) {
      if (lines_[i].find(needle) != std::string::npos) return true;
    }
    return false;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::lock_guard lock(mu_);
    lines_.emplace_back(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

}  // namespace fedfs::m2m::testing
