#include "common/logging.h"

#include <mutex>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace fedfs {
namespace {

std::mutex g_mu;
spdlog::sink_ptr g_sink;
std::string g_pattern = "%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%n] %v";
spdlog::level::level_enum g_level = spdlog::level::info;

spdlog::sink_ptr SinkLocked() {
  if (!g_sink) g_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  return g_sink;
}

}  // namespace

void InitLogging(const std::string& node_id, const std::string& level) {
  std::lock_guard lock(g_mu);
  g_pattern = "%Y-%m-%dT%H:%M:%S.%e %^%L%$ " + node_id + " [%n] %v";
  g_level = spdlog::level::from_str(level);
  spdlog::apply_all([](std::shared_ptr<spdlog::logger> l) {
    l->set_pattern(g_pattern);
    l->set_level(g_level);
  });
}

std::shared_ptr<spdlog::logger> Logger(const std::string& module) {
  std::lock_guard lock(g_mu);
  if (auto l = spdlog::get(module)) return l;
  auto l = std::make_shared<spdlog::logger>(module, SinkLocked());
  l->set_pattern(g_pattern);
  l->set_level(g_level);
  spdlog::register_logger(l);
  return l;
}

}  // namespace fedfs
