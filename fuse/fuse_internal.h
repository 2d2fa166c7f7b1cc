// What the fuse/*.cc files share: the module's logger and a monotonic clock
// in nanoseconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include <spdlog/logger.h>

#include "common/logging.h"

namespace fedfs::fuse {

inline std::shared_ptr<spdlog::logger> Log() {
  static auto log = Logger("fuse");
  return log;
}

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace fedfs::fuse
