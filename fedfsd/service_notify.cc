#include "fedfsd/service_notify.h"

#include <systemd/sd-daemon.h>

#include "common/logging.h"
#include "common/thread_name.h"

namespace fedfs::daemon {

void ServiceNotifier::Ready(const std::string& status) {
  sd_notifyf(0, "READY=1\nSTATUS=%s", status.c_str());
}

void ServiceNotifier::Status(const std::string& status) {
  sd_notifyf(0, "STATUS=%s", status.c_str());
}

void ServiceNotifier::Stopping() {
  sd_notify(0, "STOPPING=1\nSTATUS=stopping");
  StopWatchdog();  // the mount is about to go: no more pings, no false alarm
}

void ServiceNotifier::StopWatchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void ServiceNotifier::StartWatchdog(std::function<bool()> healthy) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
  const auto every = std::chrono::microseconds(usec / 2);
  Logger("daemon")->info("systemd watchdog: {} ms; pinged every {} ms while the mount answers",
                         usec / 1000, usec / 2000);
  watchdog_ = std::thread([this, every, healthy = std::move(healthy)] {
    std::unique_lock lock(mu_);
    while (!stop_) {
      lock.unlock();
      const bool ok = healthy();
      if (ok) sd_notify(0, "WATCHDOG=1");
      lock.lock();
      if (!ok) Logger("daemon")->warn("systemd watchdog: the mount did not answer; no ping");
      cv_.wait_for(lock, every, [this] { return stop_; });
    }
  });
  NameThread(watchdog_, "watchdog");
}

ServiceNotifier::~ServiceNotifier() { StopWatchdog(); }

}  // namespace fedfs::daemon
