// The daemon's Prometheus endpoint: GET /metrics over HTTP/1.1 (cpp-httplib)
// answers a Registry's scrape as text/plain; version=0.0.4. Any other path
// is 404, any other method 405. The listener binds one address (metrics.listen,
// 127.0.0.1:9480 by default: docs/metrics.md); port 0 takes a free one.
//
// Untrusted input: anything that can reach the address. Requests are parsed
// by cpp-httplib; bodies are refused past 4 KiB; a connection idle or slow
// for 5 s is closed; two worker threads serve, so a scrape waits at most that
// long behind slow clients.
//
// Threads: Start and Stop on one thread; the registry's collectors run on the
// endpoint's workers (they must be safe from any thread).
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "common/result.h"
#include "metrics/metrics.h"

namespace httplib {
class Server;
}

namespace fedfs::metrics {

class Endpoint {
 public:
  // Binds `listen` ("host:port"; host an IPv4 or IPv6 literal or a name)
  // and serves `registry` (outlives the endpoint) on a thread of its own.
  // EADDRINUSE / EADDRNOTAVAIL / EINVAL with a one-line context.
  static Result<std::unique_ptr<Endpoint>> Start(const std::string& listen, const Registry* registry);
  ~Endpoint();  // Stop()

  // The address bound, "host:port" (the port chosen when 0 was asked).
  const std::string& address() const { return address_; }
  void Stop();

 private:
  Endpoint() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
};

// Splits "host:port" ("[v6]:port" too); EINVAL naming what is wrong.
Result<std::pair<std::string, int>> SplitHostPort(const std::string& listen);

}  // namespace fedfs::metrics
