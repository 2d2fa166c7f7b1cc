// Bootstrap: see m2m/bootstrap.h for the contract.
#include "m2m/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/logging.h"
#include "m2m/auth.h"
#include "m2m/frame.h"

namespace fedfs::m2m {
namespace {

using Clock = Bootstrap::Clock;

constexpr size_t kLenBytes = 8;  // two u32 lengths
constexpr auto kLogEvery = std::chrono::seconds(10);
constexpr size_t kLogBurst = 5;
constexpr size_t kMaxLogSources = 1024;
// Keepalive of established links: a peer that vanished without a FIN is
// noticed after idle + count * interval seconds, or when unacknowledged data
// is older than the user timeout.
constexpr int kKeepIdleS = 10, kKeepIntervalS = 5, kKeepCount = 3;
constexpr unsigned kUserTimeoutMs = 30000;

std::shared_ptr<spdlog::logger> Log() { return Logger("m2m"); }

enum class Role { kServer, kClient };
enum class Phase { kConnecting, kHandshake, kEstablished };

struct Link {
  uint64_t id = 0;
  int fd = -1;
  Role role = Role::kServer;
  Phase phase = Phase::kHandshake;
  std::string peer;    // "ip:port"
  std::string source;  // ip only (limits, log)
  Clock::time_point deadline;
  Bytes in;
  Bytes out;
  bool want_out = false;
  std::optional<ClientHandshake> client;
  std::optional<ServerHandshake> server;
  bool closing = false;  // refusal sent: close once `out` is flushed
};

std::string AddrString(const sockaddr* sa, bool with_port) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  }
  if (!with_port) return host;
  if (sa->sa_family == AF_INET6) return "[" + std::string(host) + "]:" + std::to_string(port);
  return std::string(host) + ":" + std::to_string(port);
}

void PutU32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::byte>((v >> s) & 0xff));
}
uint32_t GetU32(const std::byte* p) {
  return (uint32_t{std::to_integer<uint8_t>(p[0])} << 24) |
         (uint32_t{std::to_integer<uint8_t>(p[1])} << 16) |
         (uint32_t{std::to_integer<uint8_t>(p[2])} << 8) | uint32_t{std::to_integer<uint8_t>(p[3])};
}

}  // namespace

struct Bootstrap::Impl {
  BootstrapOptions opts;
  BootstrapCallbacks cb;
  int epfd = -1;
  int listen_fd = -1;
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, Link> links;
  std::unordered_map<int, uint64_t> fd_link;
  std::unordered_map<std::string, size_t> pending_by_source;
  size_t pending_total = 0;
  struct LogState {
    Clock::time_point window_start;
    size_t lines = 0;
    size_t suppressed = 0;
  };
  std::unordered_map<std::string, LogState> log_state;
  std::vector<std::pair<uint64_t, Error>> deferred;  // Connect failures for the next Poll

  ~Impl() {
    for (auto& [id, l] : links) ::close(l.fd);
    if (listen_fd >= 0) ::close(listen_fd);
    if (epfd >= 0) ::close(epfd);
  }

  // At most kLogBurst warnings per source per kLogEvery; the rest are counted
  // and reported with the next line.
  void Refusal(const std::string& source, const std::string& what) {
    const auto now = Clock::now();
    if (log_state.size() > kMaxLogSources) log_state.clear();
    auto [it, fresh] = log_state.try_emplace(source);
    LogState& st = it->second;
    if (fresh || now - st.window_start >= kLogEvery) {
      st.window_start = now;
      st.lines = 0;
    }
    if (st.lines >= kLogBurst) {
      ++st.suppressed;
      return;
    }
    ++st.lines;
    if (st.suppressed > 0) {
      Log()->warn("{} ({} more refusals from {} not logged)", what, st.suppressed, source);
      st.suppressed = 0;
    } else {
      Log()->warn("{}", what);
    }
  }

  bool Pending(const Link& l) const { return l.phase != Phase::kEstablished; }

  void CountPending(const Link& l, int delta) {
    if (l.role != Role::kServer) return;
    if (delta > 0) {
      ++pending_total;
      ++pending_by_source[l.source];
    } else {
      --pending_total;
      auto it = pending_by_source.find(l.source);
      if (it != pending_by_source.end() && --it->second == 0) pending_by_source.erase(it);
    }
  }

  void Watch(Link& l, bool out) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (out ? EPOLLOUT : 0u);
    ev.data.u64 = l.id;
    ::epoll_ctl(epfd, EPOLL_CTL_MOD, l.fd, &ev);
    l.want_out = out;
  }

  Link& Add(int fd, Role role, Phase phase, std::string peer, std::string source,
            Clock::time_point deadline) {
    const uint64_t id = next_id++;
    Link& l = links[id];
    l.id = id;
    l.fd = fd;
    l.role = role;
    l.phase = phase;
    l.peer = std::move(peer);
    l.source = std::move(source);
    l.deadline = deadline;
    fd_link[fd] = id;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (phase == Phase::kConnecting ? EPOLLOUT : 0u);
    ev.data.u64 = id;
    ::epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    l.want_out = phase == Phase::kConnecting;
    CountPending(l, +1);
    return l;
  }

  // Removes the link; `why` (if any) goes to the closed callback.
  void Drop(uint64_t id, std::optional<Error> why) {
    auto it = links.find(id);
    if (it == links.end()) return;
    Link& l = it->second;
    if (Pending(l)) CountPending(l, -1);
    ::epoll_ctl(epfd, EPOLL_CTL_DEL, l.fd, nullptr);
    ::close(l.fd);
    fd_link.erase(l.fd);
    links.erase(it);
    if (why && cb.closed) cb.closed(id, std::move(*why));
  }

  // Server side: a refusal (logged, rate-limited) and the link closed.
  void Refuse(Link& l, const std::string& why) {
    Refusal(l.source, "refusing connection from " + l.peer + ": " + why);
    Drop(l.id, std::nullopt);
  }

  // Client-side failure: reported to the owner.
  // Pending server links are refused silently for the owner; everything else
  // is reported to it.
  void Fail(Link& l, Error e) {
    if (l.role == Role::kServer) {
      if (Pending(l)) {
        Refuse(l, e.context);
        return;
      }
      Refusal(l.source, "closing connection from " + l.peer + ": " + e.context);
    }
    Drop(l.id, std::move(e));
  }

  void Queue(Link& l, const FrameHeader& h0, const Bytes& payload) {
    FrameHeader h = h0;
    h.payload_size = payload.size();
    const Bytes hdr = EncodeFrame(h);
    PutU32(l.out, static_cast<uint32_t>(hdr.size()));
    PutU32(l.out, static_cast<uint32_t>(payload.size()));
    l.out.insert(l.out.end(), hdr.begin(), hdr.end());
    l.out.insert(l.out.end(), payload.begin(), payload.end());
  }

  // Writes what it can; false if the link was dropped.
  bool Flush(Link& l) {
    while (!l.out.empty()) {
      const ssize_t n = ::send(l.fd, l.out.data(), l.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        Fail(l, Error{EHOSTDOWN, "send to " + l.peer + ": " + std::strerror(errno)});
        return false;
      }
      l.out.erase(l.out.begin(), l.out.begin() + n);
    }
    if (l.out.empty() && l.closing) {
      Drop(l.id, std::nullopt);
      return false;
    }
    if (l.out.empty() == l.want_out) Watch(l, !l.out.empty());
    return true;
  }

  void Accept() {
    while (true) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          Refusal("accept", std::string("accept on the listen port failed: ") + std::strerror(errno));
        }
        return;
      }
      const auto* sa = reinterpret_cast<const sockaddr*>(&ss);
      std::string peer = AddrString(sa, true);
      std::string source = AddrString(sa, false);
      if (pending_total >= opts.max_pending) {
        Refusal(source, "refusing connection from " + peer + ": " + std::to_string(pending_total) +
                            " connections already authenticating (limit " +
                            std::to_string(opts.max_pending) + ")");
        ::close(fd);
        continue;
      }
      auto ps = pending_by_source.find(source);
      if (ps != pending_by_source.end() && ps->second >= opts.max_pending_per_source) {
        Refusal(source, "refusing connection from " + peer + ": " + std::to_string(ps->second) +
                            " connections from " + source + " already authenticating (limit " +
                            std::to_string(opts.max_pending_per_source) + ")");
        ::close(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Link& l = Add(fd, Role::kServer, Phase::kHandshake, std::move(peer), std::move(source),
                    Clock::now() + opts.handshake_timeout);
      l.server.emplace(opts.cluster_key);
    }
  }

  void Establish(Link& l) {
    CountPending(l, -1);
    l.phase = Phase::kEstablished;
    l.client.reset();
    l.server.reset();
    const int one = 1;
    ::setsockopt(l.fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    ::setsockopt(l.fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepIdleS, sizeof kKeepIdleS);
    ::setsockopt(l.fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepIntervalS, sizeof kKeepIntervalS);
    ::setsockopt(l.fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepCount, sizeof kKeepCount);
    ::setsockopt(l.fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &kUserTimeoutMs, sizeof kUserTimeoutMs);
  }

  // Handles one complete message; false if the link was dropped.
  bool OnMessage(Link& l, const FrameHeader& h, Bytes payload) {
    if (l.role == Role::kServer) {
      if (h.kind == FrameKind::kAuthHello) {
        auto challenge = l.server->OnHello(h);
        if (!challenge) {
          Refuse(l, challenge.error().context);
          return false;
        }
        Queue(l, *challenge, {});
        return true;
      }
      if (h.kind == FrameKind::kAuthProof) {
        Status verdict = l.server->OnProof(h);
        if (!verdict) {
          Refusal(l.source, "refusing peer " + l.peer + ": " + verdict.error().ToString());
          Queue(l, ServerHandshake::ResultFrame(verdict), {});
          l.closing = true;
          return Flush(l);
        }
        Bytes token = l.server->BindToken();
        Queue(l, ServerHandshake::ResultFrame(Ok()), opts.local_address);
        Establish(l);
        const uint64_t id = l.id;
        const std::string peer = l.peer;
        if (cb.accepted) cb.accepted(id, peer, std::move(token));
        return links.count(id) != 0;
      }
      Refuse(l, "frame kind " + std::to_string(static_cast<int>(h.kind)) +
                    " before authentication");
      return false;
    }
    // Client.
    if (h.kind == FrameKind::kAuthChallenge) {
      auto proof = l.client->OnChallenge(h);
      if (!proof) {
        Log()->warn("server {} failed authentication: {}", l.peer, proof.error().ToString());
        Fail(l, proof.error());
        return false;
      }
      Queue(l, *proof, {});
      return true;
    }
    if (h.kind == FrameKind::kAuthResult) {
      Status st = l.client->OnResult(h);
      if (!st) {
        Log()->warn("server {} refused authentication: {}", l.peer, st.error().ToString());
        Fail(l, st.error());
        return false;
      }
      if (l.client->BindToken().empty() || payload.empty()) {
        Fail(l, Error{EPROTO, "server " + l.peer + " sent no address"});
        return false;
      }
      Bytes token = l.client->BindToken();
      Establish(l);
      const uint64_t id = l.id;
      if (cb.connected) cb.connected(id, std::move(payload), std::move(token));
      return links.count(id) != 0;
    }
    Fail(l, Error{EPROTO, "unexpected frame from " + l.peer + " during authentication"});
    return false;
  }

  // Parses complete messages from l.in; false if the link was dropped.
  bool Parse(Link& l) {
    size_t off = 0;
    while (l.phase != Phase::kEstablished && l.in.size() - off >= kLenBytes) {
      const uint32_t hlen = GetU32(l.in.data() + off);
      const uint32_t plen = GetU32(l.in.data() + off + 4);
      if (hlen == 0 || hlen > kMaxFrameHeaderBytes || plen > opts.max_blob_bytes) {
        Fail(l, Error{EPROTO, "malformed frame: lengths " + std::to_string(hlen) + "/" +
                                  std::to_string(plen) + " out of range"});
        return false;
      }
      if (l.in.size() - off < kLenBytes + hlen + plen) break;
      const std::byte* p = l.in.data() + off + kLenBytes;
      auto h = DecodeFrame(std::span<const std::byte>(p, hlen), plen, opts.max_blob_bytes);
      if (!h) {
        Fail(l, Error{EPROTO, "malformed frame: " + h.error().context});
        return false;
      }
      Bytes payload(p + hlen, p + hlen + plen);
      off += kLenBytes + hlen + plen;
      if (!OnMessage(l, *h, std::move(payload))) return false;
    }
    if (l.phase == Phase::kEstablished) {
      if (off < l.in.size()) {
        Fail(l, Error{EPROTO, "data from " + l.peer + " after authentication"});
        return false;
      }
      Bytes().swap(l.in);
    } else {
      l.in.erase(l.in.begin(), l.in.begin() + static_cast<ptrdiff_t>(off));
    }
    return Flush(l);
  }

  void OnReadable(Link& l) {
    std::byte buf[16384];
    while (true) {
      const ssize_t n = ::recv(l.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        const std::string what = n == 0 ? "closed the connection" : std::strerror(errno);
        if (l.phase == Phase::kEstablished) {
          Drop(l.id, Error{ECONNRESET, l.peer + " " + what});
        } else {
          Fail(l, Error{EHOSTDOWN, l.peer + " " + what + " during authentication"});
        }
        return;
      }
      if (l.phase == Phase::kEstablished) {
        Fail(l, Error{EPROTO, "data from " + l.peer + " after authentication"});
        return;
      }
      if (l.in.size() + static_cast<size_t>(n) > kLenBytes + kMaxFrameHeaderBytes + opts.max_blob_bytes + sizeof buf) {
        Fail(l, Error{EPROTO, "malformed frame: too much data"});
        return;
      }
      l.in.insert(l.in.end(), buf, buf + n);
      if (!Parse(l)) return;
    }
  }

  void OnEvent(uint64_t id, uint32_t events) {
    auto it = links.find(id);
    if (it == links.end()) return;
    Link& l = it->second;
    if (l.phase == Phase::kConnecting) {
      if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(l.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        Fail(l, Error{EHOSTDOWN, "connect to " + l.peer + ": " + std::strerror(err)});
        return;
      }
      l.phase = Phase::kHandshake;
      Queue(l, l.client->Hello(), {});
      Flush(l);
      return;
    }
    if ((events & EPOLLOUT) != 0 && !Flush(l)) return;
    if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) OnReadable(l);
  }

  void Expire() {
    const auto now = Clock::now();
    std::vector<uint64_t> late;
    for (auto& [id, l] : links) {
      if (Pending(l) && l.deadline <= now) late.push_back(id);
    }
    for (uint64_t id : late) {
      auto it = links.find(id);
      if (it == links.end()) continue;
      Link& l = it->second;
      if (l.role == Role::kServer) {
        Refuse(l, "authentication did not finish within " +
                      std::to_string(opts.handshake_timeout.count()) + " ms");
      } else {
        Fail(l, Error{EHOSTDOWN, "connect to " + l.peer + " timed out"});
      }
    }
  }
};

Result<std::unique_ptr<Bootstrap>> Bootstrap::Create(BootstrapOptions opts, BootstrapCallbacks cb) {
  auto impl = std::make_unique<Impl>();
  impl->opts = std::move(opts);
  impl->cb = std::move(cb);
  impl->epfd = ::epoll_create1(EPOLL_CLOEXEC);
  if (impl->epfd < 0) return Err(errno, "epoll_create1");
  return std::unique_ptr<Bootstrap>(new Bootstrap(std::move(impl)));
}

Bootstrap::Bootstrap(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Bootstrap::~Bootstrap() = default;

int Bootstrap::fd() const { return impl_->epfd; }

Result<uint16_t> Bootstrap::Listen(const sockaddr* addr, socklen_t len) {
  if (impl_->listen_fd >= 0) return Err(EINVAL, "already listening");
  const int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Err(errno, "socket");
  const int one = 1;
  // A restarted node gets its port back while old connections sit in TIME_WAIT.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, addr, len) != 0 || ::listen(fd, 128) != 0) {
    const int e = errno;
    ::close(fd);
    return Err(e, "listen on " + AddrString(addr, true));
  }
  sockaddr_storage ss{};
  socklen_t sl = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl);
  const auto* sa = reinterpret_cast<const sockaddr*>(&ss);
  const uint16_t port = ntohs(sa->sa_family == AF_INET6
                                  ? reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port
                                  : reinterpret_cast<const sockaddr_in*>(sa)->sin_port);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // link ids start at 1
  if (::epoll_ctl(impl_->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    const int e = errno;
    ::close(fd);
    return Err(e, "epoll_ctl");
  }
  impl_->listen_fd = fd;
  return port;
}

uint64_t Bootstrap::Connect(const sockaddr* addr, socklen_t len, std::string peer,
                            Clock::time_point deadline) {
  Impl& m = *impl_;
  const int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int rc = -1;
  int err = errno;
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    rc = ::connect(fd, addr, len);
    err = errno;
  }
  if (fd < 0 || (rc != 0 && err != EINPROGRESS)) {
    if (fd >= 0) ::close(fd);
    // Reported through `closed` by the next Poll, like any other failure.
    const uint64_t id = m.next_id++;
    m.deferred.emplace_back(id, Error{EHOSTDOWN, "connect to " + peer + ": " + std::strerror(err)});
    return id;
  }
  // Also when connect() finished at once: EPOLLOUT fires and OnEvent starts
  // the handshake, so no callback runs inside Connect.
  Link& l = m.Add(fd, Role::kClient, Phase::kConnecting, std::move(peer), "", deadline);
  l.client.emplace(m.opts.cluster_key);
  return l.id;
}

void Bootstrap::Close(uint64_t link) {
  impl_->Drop(link, std::nullopt);
  std::erase_if(impl_->deferred, [link](const auto& d) { return d.first == link; });
}

void Bootstrap::Poll() {
  Impl& m = *impl_;
  auto deferred = std::move(m.deferred);
  m.deferred.clear();
  for (auto& [id, e] : deferred) {
    if (m.cb.closed) m.cb.closed(id, std::move(e));
  }
  epoll_event evs[64];
  while (true) {
    const int n = ::epoll_wait(m.epfd, evs, 64, 0);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 == 0) {
        m.Accept();
      } else {
        m.OnEvent(evs[i].data.u64, evs[i].events);
      }
    }
    if (n < 64) break;
  }
  m.Expire();
}

std::optional<Clock::time_point> Bootstrap::NextDeadline() const {
  std::optional<Clock::time_point> best;
  for (const auto& [id, l] : impl_->links) {
    if (impl_->Pending(l) && (!best || l.deadline < *best)) best = l.deadline;
  }
  return best;
}

size_t Bootstrap::pending() const {
  size_t n = 0;
  for (const auto& [id, l] : impl_->links) n += impl_->Pending(l) ? 1 : 0;
  return n;
}

}  // namespace fedfs::m2m
