// systemd's service protocol (sd_notify(3), libsystemd), for a unit with
// Type=notify (deploy/systemd/fedfsd@.service): READY=1 once the namespace
// is mounted and the node has joined, STOPPING=1 when it begins to stop,
// STATUS= lines, and WATCHDOG=1 while the mount answers when the unit sets
// WatchdogSec=. Without NOTIFY_SOCKET in the environment every call does
// nothing.
//
// Threads: Ready, Stopping and the constructor/destructor on the main
// thread; the watchdog has a thread of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace fedfs::daemon {

class ServiceNotifier {
 public:
  ServiceNotifier() = default;
  ~ServiceNotifier();  // stops the watchdog
  ServiceNotifier(const ServiceNotifier&) = delete;
  ServiceNotifier& operator=(const ServiceNotifier&) = delete;

  void Ready(const std::string& status);
  void Status(const std::string& status);
  // STOPPING=1, and the watchdog's pings end.
  void Stopping();

  // When the service manager asked for a watchdog (WATCHDOG_USEC for this
  // pid), pings it every half interval as long as `healthy()` returns true;
  // a `healthy` that blocks or fails stops the pings, and systemd restarts
  // the unit. Otherwise does nothing.
  void StartWatchdog(std::function<bool()> healthy);

 private:
  void StopWatchdog();
  std::thread watchdog_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
};

}  // namespace fedfs::daemon
