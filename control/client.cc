#include "control/client.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

namespace fedfs::control {
namespace {

using Json = nlohmann::json;

// Closes the fd when it goes out of scope.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::string> OnlySocketIn(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".sock") found.push_back(e.path().string());
  }
  if (found.size() == 1) return found[0];
  if (found.empty()) {
    return Err(ENOENT, "no fedfsd control socket in " + dir +
                           " (is fedfsd running? else use --socket or --config)");
  }
  return Err(EEXIST, "several fedfsd sockets in " + dir + "; choose one with --socket or --config");
}

Result<std::string> Ask(const std::string& path, const Request& request,
                        std::chrono::seconds timeout) {
  auto line = EncodeRequest(request);
  if (!line) return Err(line.error());
  *line += "\n";
  const Fd fd{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (fd.fd < 0) return Err(errno, std::string("socket: ") + std::strerror(errno));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) return Err(ENAMETOOLONG, "control socket path too long: " + path);
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (::connect(fd.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    if (e == ENOENT || e == ECONNREFUSED) {
      return Err(e, "fedfsd is not running (control socket " + path + ": " + std::strerror(e) + ")");
    }
    return Err(e, "cannot connect to fedfsd at " + path + ": " + std::strerror(e));
  }
  if (timeout.count() > 0) {
    timeval tv{static_cast<time_t>(timeout.count()), 0};
    ::setsockopt(fd.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  if (::send(fd.fd, line->data(), line->size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line->size())) {
    const int e = errno;
    return Err(e, "cannot send to fedfsd at " + path + ": " + std::strerror(e));
  }
  std::string reply;
  char buf[4096];
  while (reply.find('\n') == std::string::npos) {
    const ssize_t n = ::recv(fd.fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Err(ETIMEDOUT, "fedfsd at " + path + " gave no answer within " +
                                std::to_string(timeout.count()) + " s");
    }
    if (n <= 0) return Err(EPROTO, "fedfsd at " + path + " closed the connection without an answer");
    reply.append(buf, static_cast<size_t>(n));
  }
  reply.resize(reply.find('\n'));
  const Json j = Json::parse(reply, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Err(EPROTO, "fedfsd sent an answer that is not JSON");
  if (auto e = j.find("error"); e != j.end()) {
    return Err(EIO, "fedfsd: " + (e->is_string() ? e->get<std::string>()
                                                 : e->dump(-1, ' ', false, Json::error_handler_t::replace)));
  }
  return reply;
}

std::string Indented(std::string_view reply) {
  const Json j = Json::parse(reply.begin(), reply.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::string(reply);
  return j.dump(2, ' ', false, Json::error_handler_t::replace);
}

}  // namespace fedfs::control
