// Small helpers shared by the UCX transport files (m2m/ucx_*.cc): UCX
// configuration per instance, socket addresses, UCX status -> errno. Internal
// to the m2m module; includes ucp.h, so only m2m/ucx_*.cc may include it.
// Pure functions; any thread.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <memory>
#include <string>

#include <ucp/api/ucp.h>

#include "common/result.h"
#include "m2m/ucx_transport.h"

namespace fedfs::m2m::ucx {

// A parsed "host:port" / "[v6]:port".
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  std::string host;  // as written (without brackets)
  uint16_t port = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// Parses and resolves addr (numeric hosts do not touch DNS). EINVAL if the
// syntax is wrong, EHOSTDOWN if the name does not resolve.
Result<SockAddr> ParseAddress(const std::string& addr);

// "a.b.c.d:port" / "[v6]:port" of a socket address.
std::string FormatAddress(const sockaddr* sa);

// Reads UCX's configuration and applies the per-instance options (TLS,
// NET_DEVICES, error handling of shm, extra_config). Never touches the
// environment of the process.
Result<ucp_config_t*> ReadConfig(const UcxOptions& opts);

// Owns a ucp_context_h; ucp_cleanup on destruction. Shared by the transport
// core and every LocalRegion, so that registered memory outlives a shutdown.
struct Context {
  ucp_context_h h = nullptr;
  ~Context() {
    if (h != nullptr) ucp_cleanup(h);
  }
};

// Creates a context with AM | RMA | AMO64 | WAKEUP, thread-safe for the
// context-level calls (mem map/unmap, rkey pack) that any thread may make.
Result<std::shared_ptr<Context>> CreateContext(const UcxOptions& opts);

// The transport's rule for a UCX failure status (docs/errors.md, "The UCX
// status table"): the timeouts (UCS_ERR_TIMED_OUT, UCS_ERR_ENDPOINT_TIMEOUT)
// -> ETIMEDOUT; unreachable, rejected, not connected -> EHOSTDOWN;
// UCS_ERR_INVALID_PARAM -> EINVAL; UCS_ERR_NO_MEMORY -> ENOMEM; everything
// else (reset, canceled, I/O, link and endpoint failures) -> ECONNRESET.
// Only errnos of the transport's own list (m2m/transport.h), which the rule
// at the mount (common/errors.h) knows: EHOSTDOWN and ECONNRESET both read
// EHOSTDOWN there, ETIMEDOUT stays.
int StatusErrno(ucs_status_t s);

}  // namespace fedfs::m2m::ucx
