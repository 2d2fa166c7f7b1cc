#include "metrics/endpoint.h"

#include <cerrno>
#include <charconv>
#include <cstring>

#include <sys/socket.h>

#include <httplib.h>

namespace fedfs::metrics {

Result<std::pair<std::string, int>> SplitHostPort(const std::string& listen) {
  std::string host;
  std::string port;
  if (!listen.empty() && listen.front() == '[') {
    const auto close = listen.find(']');
    if (close == std::string::npos || close + 1 >= listen.size() || listen[close + 1] != ':') {
      return Err(EINVAL, "metrics address '" + listen + "' is not [host]:port");
    }
    host = listen.substr(1, close - 1);
    port = listen.substr(close + 2);
  } else {
    const auto colon = listen.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return Err(EINVAL, "metrics address '" + listen + "' is not host:port");
    }
    host = listen.substr(0, colon);
    port = listen.substr(colon + 1);
  }
  int p = -1;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc{} || end != port.data() + port.size() || p < 0 || p > 65535) {
    return Err(EINVAL, "metrics address '" + listen + "': port '" + port + "' is not 0-65535");
  }
  return std::pair{host, p};
}

Result<std::unique_ptr<Endpoint>> Endpoint::Start(const std::string& listen,
                                                  const Registry* registry) {
  auto hp = SplitHostPort(listen);
  if (!hp) return Err(hp.error());
  std::unique_ptr<Endpoint> e(new Endpoint());
  e->server_ = std::make_unique<httplib::Server>();
  httplib::Server& s = *e->server_;
  s.new_task_queue = [] { return new httplib::ThreadPool(2); };
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  s.set_keep_alive_timeout(5);
  s.set_keep_alive_max_count(100);
  s.set_payload_max_length(4096);
  // SO_REUSEADDR only: cpp-httplib's default, SO_REUSEPORT, would let a
  // second daemon bind the same port and take half the scrapes.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  auto refuse = [](const httplib::Request&, httplib::Response& res) { res.status = 405; };
  s.Post("/metrics", refuse);
  s.Put("/metrics", refuse);
  s.Delete("/metrics", refuse);
  s.Patch("/metrics", refuse);
  errno = 0;
  int port = hp->second;
  if (port == 0) {
    port = s.bind_to_any_port(hp->first);
    if (port < 0) port = 0;
  } else if (!s.bind_to_port(hp->first, port)) {
    port = 0;
  }
  if (port == 0) {
    const int code = errno == 0 ? EADDRNOTAVAIL : errno;
    return Err(code, "metrics address " + listen + ": cannot listen (" +
                         std::string(code == EADDRINUSE ? "already in use" : std::strerror(code)) +
                         ")");
  }
  const bool v6 = hp->first.find(':') != std::string::npos;
  e->address_ = (v6 ? "[" + hp->first + "]" : hp->first) + ":" + std::to_string(port);
  e->thread_ = std::thread([&s] { s.listen_after_bind(); });
  // Until the loop runs, stop() would not end it (Stop right after Start).
  for (int i = 0; i < 5000 && !s.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return e;
}

Endpoint::~Endpoint() { Stop(); }

void Endpoint::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace fedfs::metrics
