// Logging: one spdlog logger per module ("m2m", "member", "daemon", ...),
// all sharing one sink and a pattern that carries the node id.
// InitLogging() is called once by a program's main before any thread starts;
// Logger() may be called from any thread afterwards.
#pragma once

#include <memory>
#include <string>

#include <spdlog/logger.h>

namespace fedfs {

// level: "trace", "debug", "info", "warn", "error", "off". Logs go to stderr
// (foreground, systemd-friendly). node_id appears in every line.
void InitLogging(const std::string& node_id, const std::string& level);

// The named module logger; created on first use with the shared sink.
std::shared_ptr<spdlog::logger> Logger(const std::string& module);

}  // namespace fedfs
