// Test helper: records every line logged by one module's logger, so a test
// can assert that a refusal or a failure was logged. A capture is installed
// once per module and never removed; any thread may log while tests read.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/sinks/base_sink.h>

#include "common/logging.h"

namespace fedfs::testing {

class LogCapture : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // The capture of `module`'s logger ("m2m", "fs", ...).
  static LogCapture& For(const std::string& module) {
    static std::mutex mu;
    static std::map<std::string, std::shared_ptr<LogCapture>> captures;
    std::lock_guard lock(mu);
    auto& c = captures[module];
    if (!c) {
      c = std::make_shared<LogCapture>();
      Logger(module)->sinks().push_back(c);
    }
    return *c;
  }
  size_t Mark() {
    std::lock_guard lock(lines_mu_);
    return lines_.size();
  }
  // Whether a line logged after `mark` contains `needle`.
  bool Contains(const std::string& needle, size_t mark) {
    std::lock_guard lock(lines_mu_);
    for (size_t i = mark; i < lines_.size(); ++i) {
      if (lines_[i].find(needle) != std::string::npos) return true;
    }
    return false;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::lock_guard lock(lines_mu_);
    lines_.emplace_back(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}

 private:
  std::mutex lines_mu_;
  std::vector<std::string> lines_;
};

}  // namespace fedfs::testing
