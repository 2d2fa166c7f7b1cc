#include "control/server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/logging.h"
#include "common/thread_name.h"

namespace fedfs::control {
namespace {

constexpr size_t kMaxLine = 64 * 1024;
constexpr int kIdleMs = 5000;

bool SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

sockaddr_un UnixAddr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  return a;
}

}  // namespace

ControlServer::ControlServer(ControlOptions options, Dispatcher dispatcher)
    : options_(std::move(options)), dispatcher_(std::move(dispatcher)) {}

ControlServer::~ControlServer() { Stop(); }

Status CheckControlSocketFree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Ok();
  if (!S_ISSOCK(st.st_mode)) return Err(EEXIST, "control socket " + path + " exists and is not a socket");
  const sockaddr_un addr = UnixAddr(path);
  const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool live =
      probe >= 0 && ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  if (probe >= 0) ::close(probe);
  if (live) return Err(EADDRINUSE, "control socket " + path + " is in use by a running fedfsd");
  return Ok();
}

Status ControlServer::Start() {
  const std::string& path = options_.socket_path;
  if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Err(EINVAL, "control socket path \"" + path + "\" is empty or too long");
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(parent, ec)) {
      std::filesystem::create_directories(parent, ec);
      if (ec) return Err(ec.value(), "control socket directory " + parent.string());
      ::chmod(parent.c_str(), 0700);
    }
  }
  // A socket file already there: another live daemon, or a stale leftover.
  if (auto free = CheckControlSocketFree(path); !free) return free;
  ::unlink(path.c_str());
  const sockaddr_un addr = UnixAddr(path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Err(errno, "control socket");
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    ::close(fd);
    return Err(e, "control socket " + path);
  }
  ::chmod(path.c_str(), 0600);
  if (::listen(fd, 16) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(path.c_str());
    return Err(e, "control socket " + path);
  }
  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int dfd = efd < 0 ? -1 : ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (dfd < 0) {
    const int e = errno;
    if (efd >= 0) ::close(efd);
    ::close(fd);
    ::unlink(path.c_str());
    return Err(e, "eventfd");
  }
  listen_fd_ = fd;
  stop_fd_ = efd;
  done_fd_ = dfd;
  thread_ = std::thread([this] { Run(); });
  NameThread(thread_, "control");
  Logger("control")->info("control socket at {}", path);
  return Ok();
}

void ControlServer::Stop() {
  if (stop_fd_ < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(stop_fd_);
  ::close(done_fd_);
  listen_fd_ = stop_fd_ = done_fd_ = -1;
  ::unlink(options_.socket_path.c_str());
}

void ControlServer::Run() {
  for (;;) {
    // Finished clients' threads are joined first. At the bound, no accept:
    // a new client waits in the socket's backlog until one ends.
    std::erase_if(clients_, [](Client& cl) {
      if (!cl.done->load()) return false;
      cl.thread.join();
      return true;
    });
    const bool full = clients_.size() >= kMaxClients;
    pollfd fds[3] = {{listen_fd_, static_cast<short>(full ? 0 : POLLIN), 0},
                     {stop_fd_, POLLIN, 0},
                     {done_fd_, POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      Logger("control")->error("poll: {}", std::strerror(errno));
      break;
    }
    if (fds[1].revents) break;
    if (fds[2].revents) {
      uint64_t ended = 0;
      [[maybe_unused]] ssize_t n = ::read(done_fd_, &ended, sizeof ended);
    }
    if (full || !(fds[0].revents & POLLIN)) continue;
    const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    auto done = std::make_shared<std::atomic<bool>>(false);
    Client cl{std::thread([this, c, done] {
                Serve(c);
                ::close(c);
                done->store(true);
                const uint64_t one = 1;
                [[maybe_unused]] ssize_t n = ::write(done_fd_, &one, sizeof one);
              }),
              done};
    NameThread(cl.thread, "control-c");
    clients_.push_back(std::move(cl));
  }
  // The stop wakes every client's poll too; a handler in progress ends first.
  for (Client& cl : clients_) cl.thread.join();
  clients_.clear();
}

void ControlServer::Serve(int fd) {
  std::string buf;
  char chunk[4096];
  for (;;) {
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      if (!SendAll(fd, dispatcher_.Handle(line) + "\n")) return;
    }
    if (buf.size() > kMaxLine) {
      SendAll(fd, ErrorReply("request line too long") + "\n");
      return;
    }
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    const int r = ::poll(fds, 2, kIdleMs);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || fds[1].revents) return;
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    buf.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace fedfs::control
