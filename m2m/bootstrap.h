// The connection bootstrap of the UCX transport: FedFS's own TCP listener and
// connector, on which peers authenticate with the cluster key (m2m/auth.h)
// BEFORE any UCX endpoint exists between them.
//
// Why. UCX 1.13's own connection manager (ucp_listener) parses the first
// bytes of every connection in code that asserts on hostile input (32 zero
// bytes abort the process). So nothing unauthenticated reaches UCX's
// connection manager: the listen port is ours; only an authenticated client
// learns the server's UCX worker address, and the first message on the UCX
// endpoint it creates must carry the bind token both sides derived from the
// handshake (m2m/auth.h), or the server drops it.
//
// Protocol on the TCP connection (a "link"): messages of
//   [u32 header length][u32 payload length][header: EncodeFrame][payload]
// (lengths big-endian), every header through DecodeFrame. Client: AuthHello;
// server: AuthChallenge; client: AuthProof; server: AuthResult whose payload
// is the server's UCX worker address (errno_code 0), or EACCES and close.
// After that the link stays open and silent for the life of the UCX
// connection: it is how each side learns that the other went away (EOF, reset
// or TCP keepalive/user timeout: ~30 s for a peer that vanished without a
// FIN). Anything received on an established link closes it.
//
// Limits (before authentication): a handshake must finish within
// handshake_timeout; at most max_pending unauthenticated links in total and
// max_pending_per_source from one IP address (more are accepted and closed at
// once); headers over kMaxFrameHeaderBytes and payloads over max_blob_bytes
// close the link. Every refusal is logged in the "m2m" log, at most 5 lines
// per source address per 10 s (the next line says how many were not logged).
//
// Threads: not thread-safe. One thread (the transport's progress thread) owns
// it and calls Poll() when fd() is readable (and at least every few
// milliseconds while it spins); callbacks run inside Poll().
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/result.h"
#include "m2m/transport.h"

namespace fedfs::m2m {

struct BootstrapOptions {
  Bytes cluster_key;
  // Sent to every authenticated client: the local UCX worker address.
  Bytes local_address;
  std::chrono::milliseconds handshake_timeout{5000};
  size_t max_pending = 256;
  size_t max_pending_per_source = 16;
  size_t max_blob_bytes = 64u << 10;
};

struct BootstrapCallbacks {
  // Server side: a client proved the key; its UCX endpoint's Bind must carry
  // `token`. `peer` is "ip:port".
  std::function<void(uint64_t link, const std::string& peer, Bytes token)> accepted;
  // Client side: the server proved the key and sent its UCX worker address.
  std::function<void(uint64_t link, Bytes address, Bytes token)> connected;
  // A link ended: a failed client handshake (EACCES: wrong key either way;
  // EHOSTDOWN: unreachable or closed; EPROTO: garbage), or an established
  // link closed by the peer (ECONNRESET). Not called for Close().
  std::function<void(uint64_t link, Error why)> closed;
};

class Bootstrap {
 public:
  using Clock = std::chrono::steady_clock;

  static Result<std::unique_ptr<Bootstrap>> Create(BootstrapOptions opts, BootstrapCallbacks cb);
  ~Bootstrap();  // closes every socket without callbacks
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  // An epoll fd, readable when Poll() has something to do.
  int fd() const;
  // Starts listening (once). Returns the bound port. EADDRINUSE, EINVAL.
  Result<uint16_t> Listen(const sockaddr* addr, socklen_t len);
  // Starts a client link; the outcome comes through `connected` or `closed`
  // (also when the handshake does not finish by `deadline`).
  uint64_t Connect(const sockaddr* addr, socklen_t len, std::string peer, Clock::time_point deadline);
  // Closes a link (no callback). Unknown ids are ignored.
  void Close(uint64_t link);
  // Accepts, reads, writes, enforces deadlines; never blocks.
  void Poll();
  // The earliest handshake deadline, if any (for the caller's sleep).
  std::optional<Clock::time_point> NextDeadline() const;
  // Links not yet authenticated (server and client side).
  size_t pending() const;

  struct Impl;

 private:
  explicit Bootstrap(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedfs::m2m
