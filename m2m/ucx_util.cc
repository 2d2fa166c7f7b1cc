#include "m2m/ucx_util.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <cstdlib>
#include <cstring>

#include "common/logging.h"

namespace fedfs::m2m::ucx {

Result<SockAddr> ParseAddress(const std::string& addr) {
  SockAddr out;
  std::string port;
  if (!addr.empty() && addr.front() == '[') {
    const auto close = addr.find(']');
    if (close == std::string::npos || close + 1 >= addr.size() || addr[close + 1] != ':') {
      return Err(EINVAL, "bad address '" + addr + "' (want [v6]:port)");
    }
    out.host = addr.substr(1, close - 1);
    port = addr.substr(close + 2);
  } else {
    const auto colon = addr.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return Err(EINVAL, "bad address '" + addr + "' (want host:port)");
    }
    out.host = addr.substr(0, colon);
    port = addr.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port) > 65535) {
    return Err(EINVAL, "bad port in address '" + addr + "'");
  }
  out.port = static_cast<uint16_t>(std::stoul(port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(out.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Err(EHOSTDOWN, "cannot resolve '" + out.host + "': " + gai_strerror(rc));
  }
  std::memcpy(&out.storage, res->ai_addr, res->ai_addrlen);
  out.len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return out;
}

std::string FormatAddress(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "unknown-family:" + std::to_string(sa->sa_family);
}

Result<ucp_config_t*> ReadConfig(const UcxOptions& opts) {
  ucp_config_t* cfg = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &cfg);
  if (s != UCS_OK) return Err(EIO, std::string("ucp_config_read: ") + ucs_status_string(s));
  auto set = [&](const std::string& name, const std::string& value, bool required) -> Status {
    const ucs_status_t st = ucp_config_modify(cfg, name.c_str(), value.c_str());
    if (st == UCS_OK) return Ok();
    if (!required) {
      Logger("m2m")->debug("UCX option {}={} not applied: {}", name, value, ucs_status_string(st));
      return Ok();
    }
    return Err(EINVAL, "UCX option " + name + "=" + value + ": " + ucs_status_string(st));
  };
  Status st = Ok();
  if (!opts.tls.empty()) st = set("TLS", opts.tls, true);
  if (st && !opts.net_devices.empty()) st = set("NET_DEVICES", opts.net_devices, true);
  // Only when shared memory may be used (UCX warns about unused settings).
  const bool shm_possible = opts.tls.empty() || opts.tls.find("sm") != std::string::npos ||
                            opts.tls.find("posix") != std::string::npos ||
                            opts.tls.find("sysv") != std::string::npos ||
                            opts.tls.find("all") != std::string::npos;
  if (st && opts.shm_error_handling && shm_possible) {
    st = set("POSIX_ERROR_HANDLING", "y", false);
    if (st) st = set("SYSV_ERROR_HANDLING", "y", false);
  }
  const bool tcp_possible = opts.tls.empty() || opts.tls.find("tcp") != std::string::npos ||
                            opts.tls.find("all") != std::string::npos;
  // A transport's key goes without its prefix (TX_SEG_SIZE, not
  // TCP_TX_SEG_SIZE: UCX 1.13 warns that the latter is unused and ignores it).
  auto set_unless_env = [&](const char* name, const std::string& value) -> Status {
    if (value.empty() || std::getenv((std::string("UCX_TCP_") + name).c_str()) != nullptr) {
      return Ok();
    }
    return set(name, value, false);
  };
  if (st && tcp_possible) st = set_unless_env("TX_SEG_SIZE", opts.tcp_tx_seg_size);
  if (st && tcp_possible) st = set_unless_env("RX_SEG_SIZE", opts.tcp_rx_seg_size);
  for (const auto& [name, value] : opts.extra_config) {
    if (!st) break;
    st = set(name, value, true);
  }
  if (!st) {
    ucp_config_release(cfg);
    return Err(st.error());
  }
  return cfg;
}

Result<std::shared_ptr<Context>> CreateContext(const UcxOptions& opts) {
  auto cfg = ReadConfig(opts);
  if (!cfg) return Err(cfg.error());
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  auto ctx = std::make_shared<Context>();
  const ucs_status_t s = ucp_init(&params, *cfg, &ctx->h);
  ucp_config_release(*cfg);
  if (s != UCS_OK) {
    ctx->h = nullptr;
    return Err(EIO, std::string("ucp_init: ") + ucs_status_string(s));
  }
  return ctx;
}

int StatusErrno(ucs_status_t s) {
  switch (s) {
    case UCS_OK:
      return 0;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return ETIMEDOUT;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
      return EHOSTDOWN;
    case UCS_ERR_INVALID_PARAM:
      return EINVAL;
    case UCS_ERR_NO_MEMORY:
      return ENOMEM;
    default:
      return ECONNRESET;
  }
}

}  // namespace fedfs::m2m::ucx
