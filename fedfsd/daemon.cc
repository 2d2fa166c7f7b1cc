#include "fedfsd/daemon.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/logging.h"
#include "fedfsd/config.h"
#include "m2m/auth.h"
#ifdef FEDFS_HAVE_UCX
#include "m2m/ucx_transport.h"
#endif

namespace fedfs::daemon {

Status CheckListenAddressFree(const std::string& listen) {
  auto hp = ParseHostPort(listen);
  if (!hp) return Err(EINVAL, "address " + listen + " is not host:port");
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(hp->port);
  if (int rc = ::getaddrinfo(hp->host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return Err(EADDRNOTAVAIL, "address " + listen + ": cannot resolve " + hp->host + ": " +
                                  ::gai_strerror(rc));
  }
  Status result = Ok();
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const int rc = ::bind(fd, ai->ai_addr, ai->ai_addrlen);
    const int err = errno;
    ::close(fd);
    if (rc == 0) {
      result = Ok();
      break;
    }
    if (err == EADDRINUSE) {
      result = Err(EADDRINUSE, "address " + listen + " is already in use");
    } else {
      result = Err(err, "cannot listen on " + listen + ": " + std::strerror(err));
    }
  }
  ::freeaddrinfo(res);
  return result;
}

Result<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& o) {
  auto log = Logger("daemon");
  auto key = m2m::LoadClusterKeyFile(o.cluster_key_file);
  if (!key) return Err(key.error().code, key.error().ToString());

  std::unique_ptr<Daemon> d(new Daemon());
#ifdef FEDFS_HAVE_UCX
  m2m::UcxOptions ucx;
  ucx.tls = o.transport.tls;
  ucx.net_devices = o.transport.net_devices;
  // A restarted daemon must get its port back at once, although the
  // connections of its previous life linger in TIME_WAIT for a minute.
  ucx.extra_config.emplace_back("TCP_CM_REUSEADDR", "y");
  m2m::TransportOptions topts;
  topts.cluster_key = std::move(*key);
  topts.max_message_bytes = o.transport.max_message_bytes;
  topts.connect_timeout = o.timeouts.connect;
  auto transport = m2m::MakeUcxTransport(ucx, topts);
  if (!transport) {
    return Err(transport.error().code, "cannot start the UCX transport: " + transport.error().ToString());
  }
  d->transport_ = std::move(*transport);
#else
  return Err(ENOSYS, "fedfsd was built without a transport (fedfs_m2m_ucx missing)");
#endif

  // Peers reach us at the configured listen address (config validation
  // refuses wildcard addresses), so membership can advertise it before the
  // transport listens; the handlers must be installed before Listen.
  d->membership_ = std::make_unique<Membership>(MembershipOptionsFrom(o, o.listen),
                                                d->transport_.get());
  d->membership_->RegisterHandlers();
  auto listening = d->transport_->Listen(o.listen);
  if (!listening) {
    const Error& e = listening.error();
    d->Stop();
    if (e.code == EADDRINUSE || e.code == EBUSY) {
      return Err(EADDRINUSE, "address " + o.listen + " is already in use");
    }
    return Err(e.code, "cannot listen on " + o.listen + ": " + e.ToString());
  }
  log->info("node {} listening on {} (tls={}, net_devices={})", o.node_id, *listening,
            o.transport.tls, o.transport.net_devices.empty() ? "all" : o.transport.net_devices);

  d->control_ = std::make_unique<ControlServer>(
      ControlOptions{o.control_socket},
      [m = d->membership_.get()] { return m->Snapshot(); });
  if (auto s = d->control_->Start(); !s) {
    d->Stop();
    return Err(s.error().code, s.error().ToString());
  }
  d->membership_->Start();
  log->info("started: incarnation {:016x}, {} seed(s), heartbeat {} ms, failure timeout {} ms",
            d->membership_->incarnation(), o.peers.size(), o.timeouts.heartbeat_interval.count(),
            o.timeouts.failure_timeout.count());
  return d;
}

Daemon::~Daemon() { Stop(); }

void Daemon::Stop() {
  if (control_) control_->Stop();
  if (membership_) membership_->Stop();
  if (transport_) transport_->Shutdown();
}

}  // namespace fedfs::daemon
