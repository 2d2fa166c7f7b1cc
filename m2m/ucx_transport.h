// The production m2m::Transport over UCX (UCP): active messages for RPC,
// ucp_put/get/atomic for one-sided operations, connections set up through
// FedFS's own authenticated bootstrap (m2m/bootstrap.h: the cluster-key
// handshake of m2m/auth.h, then UCP endpoints from worker addresses).
//
// Ownership and threads. Each transport owns one UCP context, one UCP worker
// and ONE progress thread that owns the worker: it is the only thread that
// calls into the worker, endpoints, listener and remote keys. Every public
// method may be called from any thread except the progress thread itself
// (callbacks and handlers run there; they may start new operations but must
// not call Shutdown or the *Sync helpers). Public methods hand their work to
// the progress thread through a queue and wake it with an eventfd. The
// progress thread busy-polls for UcxOptions::spin_us after the last activity,
// then arms the worker and sleeps in epoll on the worker's event fd, the
// eventfd and the nearest deadline. So a transport always serves incoming
// one-sided operations (put/get/atomics over TCP need the target's
// ucp_worker_progress), whatever its application threads do.
//
// Connections. The listen address is FedFS's own TCP listener (the bootstrap,
// m2m/bootstrap.h), not UCX's connection manager: an Endpoint connects lazily
// by running the cluster-key handshake there; only then does it learn the
// server's UCX worker address, create a UCP endpoint to it (error handling mode
// PEER) and bind that endpoint with a token derived from the handshake (a Bind
// frame, answered by BindAck); then the operations that waited start. A
// server serves no Request on a UCP endpoint before it is bound; frames on
// unbound endpoints are dropped (logged, rate-limited) and the endpoint closed.
// Pre-authentication limits and deadlines are the bootstrap's
// (TransportOptions::connect_timeout is the handshake deadline). Every
// received frame goes through DecodeFrame; malformed frames are logged and
// dropped, and the connection that sent them is closed. The bootstrap's TCP
// connection stays open as long as the connection: its end (or TCP keepalive)
// tells each side that the other went away.
//
// Errors (errno): connect/handshake failure or connect timeout -> EHOSTDOWN
// (EACCES when the peer's key is wrong); connection lost while an operation was
// in flight -> ECONNRESET; per-operation deadline -> ETIMEDOUT; out-of-bounds
// or misaligned one-sided access, foreign RemoteRegion -> EINVAL; payload over
// max_message_bytes -> EMSGSIZE; after Shutdown -> ESHUTDOWN.
//
// One-sided timeouts. When a Put/Get/FetchAdd/CompareSwap passes its timeout,
// it fails with ETIMEDOUT and the endpoint's connection is FORCE-closed
// (other operations in flight on it fail with ECONNRESET): force close discards
// UCX's lanes, so UCX cannot later write into (Get) or read from (Put) a
// buffer that the caller reuses after the ETIMEDOUT. The next operation
// reconnects (and re-unpacks imported remote keys).
//
// Put completion means REMOTE completion: the data is visible at the target.
// Implemented as ucp_put_nbx followed by ucp_ep_flush_nbx (the flush request's
// completion completes the Put). Measured over tcp on loopback (2 cores,
// fedfs-m2m-bench, chained): an 8-byte Put completes in ~3.4 us with local
// completion and ~40-55 us with the flush, i.e. the guarantee costs a bit more
// than one network round trip (an 8-byte Get is ~15-30 us). Chosen because the
// coherence protocol (DESIGN.md) acknowledges a change only after the sharers'
// version words are really bumped. UcxOptions::put_remote_completion=false
// trades the guarantee for latency.
//
// Shutdown and destruction of the Transport must not happen on its own
// progress thread (from a callback or handler): Shutdown joins that thread.
//
// Wire use of UCX: one active-message id for every frame (header = the
// EncodeFrame bytes, data = the payload), always sent with
// UCP_AM_SEND_FLAG_REPLY so that the receiver knows the connection; payloads
// above UCX's rendezvous threshold (~8 KiB over tcp) are received with
// ucp_am_recv_data_nbx. Error handling mode PEER on every endpoint; with shm
// in UCX_TLS, UCX 1.13 needs POSIX/SYSV_ERROR_HANDLING=y for that mode, which
// UcxOptions::shm_error_handling sets (only when shm may be used).
//
// RemoteRegion objects returned by Import must stay alive (the caller's
// reference) until operations that target them complete; the transport also
// keeps its own reference while an operation runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "m2m/transport.h"

namespace fedfs::m2m {

struct UcxOptions {
  // UCX_TLS for this transport instance, e.g. "tcp" or "tcp,sm,self".
  // Empty: UCX's default (all available transports).
  std::string tls;
  // UCX_NET_DEVICES, e.g. "lo" or "veth0". Empty: UCX's default (all). The
  // listener's device must be in the list.
  std::string net_devices;
  // Microseconds the progress thread keeps busy-polling the worker after the
  // last event before it arms the worker and sleeps in epoll. A wake-up from
  // epoll costs ~20 us on this class of machine; polling costs one core.
  // Default 50 us.
  uint32_t spin_us = 50;
  // The same while an answer is due: an operation of this transport is in
  // flight (a call awaiting its reply, a one-sided operation awaiting its
  // completion) or a request it received is with its handler (awaiting the
  // reply). The event that ends such a wait comes within a round trip or a
  // handler's run, typically 30-300 us here, and sleeping through it costs a
  // wake-up of this thread on top of the wait (one per message each way).
  // Also while events come at short gaps (their smoothed gap under half of
  // spin_us + this): the thread then spins twice the gap, so that the next
  // request of a busy client or server finds it awake. Default 400 us; at
  // most spin_us + this after each event while a wait lasts (a call left
  // unanswered for long costs that much once per event); idle, nothing.
  uint32_t spin_pending_us = 400;
  // Whether the progress thread calls sched_yield() between polls while it
  // spins, so that runnable threads sharing its core (the application thread
  // that a completion just woke) are not starved. Default true.
  bool spin_yield = true;
  // Put completes when the data is visible at the target (put + endpoint
  // flush). false: Put completes when the source buffer may be reused (local
  // completion; no visibility guarantee). Default true; see the header comment.
  bool put_remote_completion = true;
  // Whether shared-memory transports may be used together with error
  // handling mode PEER: sets UCX's POSIX_ERROR_HANDLING=y and
  // SYSV_ERROR_HANDLING=y (UCX 1.13 silently drops shm with PEER mode
  // otherwise). Default true.
  bool shm_error_handling = true;
  // TCP segment sizes (UCX_TCP_TX_SEG_SIZE / UCX_TCP_RX_SEG_SIZE) when tcp
  // may be used and the environment does not set them. UCX's 8 KiB send
  // segments cut a 1 MiB put into 128 sends; 64 KiB / 256 KiB carry remote
  // file data through a mount ~1.4x faster (docs/design.md, "TCP
  // segments"). Empty: UCX's own.
  std::string tcp_tx_seg_size = "64K";
  std::string tcp_rx_seg_size = "256K";
  // Further UCX configuration, (name without "UCX_" prefix, value), applied
  // with ucp_config_modify after the fields above. Default none.
  std::vector<std::pair<std::string, std::string>> extra_config;
};

// Creates a UCX transport: UCP context + worker + progress thread. Fails with
// EINVAL for a bad configuration value and EIO when UCX cannot initialise.
Result<std::unique_ptr<Transport>> MakeUcxTransport(const UcxOptions& ucx,
                                                    const TransportOptions& opts);

// Test-only: connects to a transport's listen address (its bootstrap, see
// m2m/bootstrap.h) and sends one arbitrary (header, payload) pair framed as
// the bootstrap frames its messages, without authenticating, to check that a
// server refuses malformed or unauthenticated input. Returns once the message
// was sent (or the server reset the connection while it was sent) and the
// server closed the connection, or after 200 ms (EHOSTDOWN if the peer cannot
// be reached). `ucx` is unused.
Status UcxSendRawForTest(const UcxOptions& ucx, const std::string& addr, const Bytes& header,
                         const Bytes& payload);

// Test-only: authenticates on addr's bootstrap with `key` (so it learns the
// server's UCX worker address), then sends (header, payload) as an active
// message on a UCP endpoint of its own that it never binds — the server must
// drop it. Returns once sent (bounded by a few seconds).
Status UcxSendUnboundForTest(const UcxOptions& ucx, const Bytes& key, const std::string& addr,
                             const Bytes& header, const Bytes& payload);

// Test-only: the transport's table of UCX failure statuses (docs/errors.md):
// {status, errno} for every status value from UCS_ERR_LAST to UCS_OK.
std::vector<std::pair<int, int>> UcxStatusErrnosForTest();

}  // namespace fedfs::m2m
