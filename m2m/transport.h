// The memory-to-memory (M2M) transport: what VIA/InfiniBand offer, behind one
// interface that every other module uses.
//
//  * connection management by address: a Transport listens on one address and
//    hands out Endpoints to peers by address; an Endpoint connects lazily on
//    first use and reconnects after a failure (each operation makes at most
//    one connection attempt within its own timeout);
//  * two-sided request/response messages (RPC) with per-call timeouts and
//    payloads up to Options::max_message_bytes (>= 4 MiB);
//  * memory registration with an exportable descriptor (address, length,
//    packed remote key) that a peer imports on its Endpoint;
//  * one-sided RDMA write (Put) and read (Get) into/out of an imported region,
//    and remote 64-bit atomics (FetchAdd, CompareSwap), which complete without
//    any application thread of the target taking part.
//
// Peers authenticate each other with the cluster key (challenge-response, see
// m2m/auth.h) before any request is served or any descriptor is handed out.
//
// Implementations: UcxTransport (production; m2m/ucx_transport.h) and the
// in-process FakeNetwork (tests and simulation; m2m/fake_network.h). The
// contract test suite in tests/unit/m2m runs unchanged against both.
//
// Threading and completion rules (all implementations):
//  * Every asynchronous operation completes exactly once: with a value, with an
//    error, or with ETIMEDOUT when its timeout passes. No operation hangs.
//  * Completion callbacks and RPC handlers run on the transport's progress
//    context (UCX: its progress thread; fake network: its scheduler). They must
//    not block and must not call the *Sync helpers below; work that blocks is
//    posted to another thread. A Responder may be answered from any thread.
//  * Buffers passed to Put/Get/Call must stay valid until the operation
//    completes. Hot paths pass memory from a LocalRegion so that no
//    registration happens per request.
//  * Errors (errno): ETIMEDOUT the timeout passed; EHOSTDOWN/ECONNREFUSED the
//    peer cannot be reached; ECONNRESET the connection broke while the
//    operation was in flight; EACCES authentication failed; EMSGSIZE payload
//    over the limit; EINVAL bad arguments (e.g. out of the region's bounds);
//    ENOSYS no handler for the method; ESHUTDOWN the transport is shut down;
//    EPROTO malformed input; ENOMEM no memory to register; EIO a request
//    dropped without a reply. A handler's own errno reaches the caller as
//    it is (AsErrno, common/errors.h). The full table: docs/errors.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"

namespace fedfs::m2m {

using Timeout = std::chrono::nanoseconds;
using Bytes = std::vector<std::byte>;

template <class T>
using Callback = std::move_only_function<void(Result<T>)>;

// Exportable descriptor of a registered memory region: what a peer needs to
// address it with one-sided operations. Plain data; modules that send it put
// its three fields into their own messages.
struct RegionDesc {
  uint64_t addr = 0;    // remote virtual address of the first byte
  uint64_t length = 0;  // bytes
  // Packed remote key (opaque, implementation-specific). It names the
  // exporting process (UCX): an operation through a connection to another process
  // at the same address (the peer restarted) fails with ESTALE.
  Bytes rkey;
};

// Memory registered with the transport on this node. Owned by its creator;
// must outlive every operation that targets it. Data is 8-byte aligned so that
// 64-bit atomics may target any multiple of 8.
class LocalRegion {
 public:
  virtual ~LocalRegion() = default;
  virtual std::byte* data() = 0;
  virtual size_t size() const = 0;
  virtual RegionDesc Export() const = 0;
};

// A peer's region imported on an Endpoint (RegionDesc + unpacked key).
// Valid across reconnects of that Endpoint (implementations re-unpack).
class RemoteRegion {
 public:
  virtual ~RemoteRegion() = default;
  virtual const RegionDesc& desc() const = 0;
};

// Who sent an incoming request.
struct PeerInfo {
  uint64_t conn_id = 0;     // unique per accepted connection, per transport
  std::string remote_addr;  // as seen by the transport (not the listen address)
};

// Answers one incoming request. Exactly one Reply; if the Responder is
// destroyed without one, the caller receives EIO. Any thread.
class Responder {
 public:
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual void Send(Result<Bytes> reply) = 0;
  };
  Responder() = default;
  explicit Responder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Responder(Responder&&) = default;
  Responder& operator=(Responder&&) = default;
  ~Responder();

  void Reply(Bytes payload);
  void Fail(Error error);  // caller receives this errno (and context in logs)

 private:
  std::unique_ptr<Impl> impl_;
};

struct IncomingCall {
  PeerInfo peer;
  uint16_t method = 0;
  Bytes payload;
};

using RpcHandler = std::move_only_function<void(IncomingCall call, Responder responder)>;

// A handle on one peer, by address. Cheap to share; thread-safe.
class Endpoint {
 public:
  virtual ~Endpoint() = default;

  virtual const std::string& address() const = 0;

  // Connects and authenticates now if not connected (otherwise completes at
  // once). Useful to warm up; every operation below does it on demand.
  virtual void Connect(Timeout timeout, Callback<void> done) = 0;

  // Sends a request for `method` and completes with the reply payload, or
  // with the error the handler chose, or ETIMEDOUT.
  virtual void Call(uint16_t method, Bytes payload, Timeout timeout, Callback<Bytes> done) = 0;

  // Imports a peer's region for one-sided operations on this Endpoint.
  virtual Result<std::shared_ptr<RemoteRegion>> Import(const RegionDesc& desc) = 0;

  // One-sided write of [src, src+len) to remote region offset `offset`.
  virtual void Put(const void* src, size_t len, const RemoteRegion& dst, uint64_t offset,
                   Timeout timeout, Callback<void> done) = 0;
  // One-sided read of remote [offset, offset+len) into dst.
  virtual void Get(void* dst, size_t len, const RemoteRegion& src, uint64_t offset,
                   Timeout timeout, Callback<void> done) = 0;
  // Remote atomic add on the 8-byte aligned word at `offset`; yields the old value.
  virtual void FetchAdd(const RemoteRegion& region, uint64_t offset, uint64_t add,
                        Timeout timeout, Callback<uint64_t> done) = 0;
  // Remote compare-and-swap: if word == expected then word = desired; yields
  // the old value (== expected iff the swap happened).
  virtual void CompareSwap(const RemoteRegion& region, uint64_t offset, uint64_t expected,
                           uint64_t desired, Timeout timeout, Callback<uint64_t> done) = 0;

  // Breaks the connection (ops in flight fail with ECONNRESET); the next
  // operation reconnects.
  virtual void Disconnect() = 0;
};

struct TransportOptions {
  // The cluster key (raw bytes, 32). Peers must prove knowledge of it.
  Bytes cluster_key;
  // Largest request or reply payload accepted; larger ones are refused
  // (EMSGSIZE on send, logged and dropped on receive).
  size_t max_message_bytes = 64u << 20;
  // Timeout of the connect + authentication handshake when an operation
  // connects on demand (bounded by the operation's own timeout).
  Timeout connect_timeout = std::chrono::seconds(5);
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Installs the handler for `method` (before Listen; not thread-safe with
  // incoming traffic). Requests for methods without a handler get ENOSYS.
  virtual void Handle(uint16_t method, RpcHandler handler) = 0;

  // Starts accepting connections on addr ("host:port"; port 0 picks one).
  // Returns the address peers should use.
  virtual Result<std::string> Listen(const std::string& addr) = 0;

  // The Endpoint for a peer address; the same object for the same address.
  virtual std::shared_ptr<Endpoint> GetEndpoint(const std::string& addr) = 0;

  // Registers `len` bytes at `addr` (caller keeps ownership of the memory).
  virtual Result<std::unique_ptr<LocalRegion>> Register(void* addr, size_t len) = 0;
  // Allocates and registers `len` zeroed bytes owned by the returned region
  // (may be truly one-sided over shared memory).
  virtual Result<std::unique_ptr<LocalRegion>> Allocate(size_t len) = 0;

  // Stops the listener, fails every operation in flight with ESHUTDOWN, closes
  // connections. Idempotent; also done by the destructor.
  virtual void Shutdown() = 0;
};

// Blocking helpers: wait for an asynchronous operation. Not for use on the
// transport's progress context (see above).
Status ConnectSync(Endpoint& ep, Timeout timeout);
Result<Bytes> CallSync(Endpoint& ep, uint16_t method, Bytes payload, Timeout timeout);
Status PutSync(Endpoint& ep, const void* src, size_t len, const RemoteRegion& dst,
               uint64_t offset, Timeout timeout);
Status GetSync(Endpoint& ep, void* dst, size_t len, const RemoteRegion& src, uint64_t offset,
               Timeout timeout);
Result<uint64_t> FetchAddSync(Endpoint& ep, const RemoteRegion& region, uint64_t offset,
                              uint64_t add, Timeout timeout);
Result<uint64_t> CompareSwapSync(Endpoint& ep, const RemoteRegion& region, uint64_t offset,
                                 uint64_t expected, uint64_t desired, Timeout timeout);

// Bytes <-> string views, for payloads built by serializers.
inline Bytes ToBytes(std::span<const uint8_t> s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return Bytes(p, p + s.size());
}
inline std::span<const uint8_t> AsU8(const Bytes& b) {
  return {reinterpret_cast<const uint8_t*>(b.data()), b.size()};
}

}  // namespace fedfs::m2m
