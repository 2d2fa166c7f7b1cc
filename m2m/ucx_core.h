// Internals of the UCX transport (m2m/ucx_transport.h is the contract),
// shared by its files and by no one else:
//   ucx_core.cc       lifecycle, the progress loop, timers, remote keys
//   ucx_conn.cc       operations, connections (bootstrap glue, binding),
//                     sending, receiving, the public entry points of Core
//   ucx_endpoint.cc   Endpoint operations, the Transport object
//   ucx_test_hooks.cc the raw senders for tests
// Includes ucp.h: only m2m/ucx_*.cc may include it.
//
// Structure. `Core` holds everything the progress thread owns (worker,
// bootstrap, connections, operations, timers). Public objects (the Transport,
// Endpoints, RemoteRegions, Responders) keep a shared_ptr to the Core and talk
// to it only through Post()/Submit(), except for context-level calls
// (mem map, rkey pack) that UCP makes thread-safe (mt_workers_shared).
//
// UCX callbacks (active messages, endpoint errors, connection requests) only
// record an event; the progress loop handles events after ucp_worker_progress
// returns, so no endpoint is created, used or closed from inside a UCX
// callback.
//
// Lock order: Core::endpoints_mu_ -> Core::queue_mu_; Core::regions_mu_ ->
// Core::queue_mu_. No lock is held while a user callback runs.
#pragma once

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <queue>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "common/hash.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "m2m/auth.h"
#include "m2m/bootstrap.h"
#include "m2m/frame.h"
#include "m2m/ucx_transport.h"
#include "m2m/ucx_util.h"

namespace fedfs::m2m::ucx {


using Clock = std::chrono::steady_clock;

inline constexpr unsigned kAmId = 1;
inline constexpr size_t kMaxContextChars = 200;
// How long Shutdown waits for endpoint close requests before destroying the worker.
inline constexpr auto kCloseGrace = std::chrono::seconds(2);
// How long the worker must make no progress before it is destroyed (Teardown).
inline constexpr auto kIdleBeforeDestroy = std::chrono::milliseconds(5);
// Cap on one epoll sleep (the loop re-checks its state at least this often).
inline constexpr int kMaxSleepMs = 1000;
// How often the progress loop polls the bootstrap sockets while it is busy.
inline constexpr auto kBootPollEvery = std::chrono::milliseconds(2);

inline std::shared_ptr<spdlog::logger> Log() { return Logger("m2m"); }

class Core;
class EndpointImpl;
class RemoteRegionImpl;

using AnyCallback = std::variant<Callback<void>, Callback<Bytes>, Callback<uint64_t>>;

inline std::string TokenKey(const Bytes& token) {
  return std::string(reinterpret_cast<const char*>(token.data()), token.size());
}

inline void InvokeFail(AnyCallback& cb, Error e) {
  std::visit([&](auto& f) { f(Err(std::move(e))); }, cb);
}

enum class OpKind { kConnect, kCall, kPut, kGet, kAtomic };

inline bool OneSided(OpKind k) { return k == OpKind::kPut || k == OpKind::kGet || k == OpKind::kAtomic; }

enum class ConnState { kAuthenticating, kReady, kClosed };

// One connection: its bootstrap link (m2m/bootstrap.h) and, once the link
// authenticated, its UCP endpoint. kAuthenticating lasts until the endpoint is
// bound (client: BindAck received; server: Bind with the token received).
// Owned by Core::conns_ (progress thread).
struct Conn {
  uint64_t id = 0;
  ucp_ep_h ep = nullptr;
  uint64_t link = 0;  // 0 once the bootstrap link is gone
  Bytes token;        // the bind token (server: until bound)
  bool server = false;
  ConnState state = ConnState::kAuthenticating;
  std::string remote_addr;
  // Client side: the instance of the peer's transport (InstanceOf its worker
  // address), which a region descriptor must name to be used here.
  uint64_t peer_instance = 0;
  EndpointImpl* owner = nullptr;  // client side: the Endpoint (outlives the Conn)
  std::vector<uint64_t> waiting;          // ops waiting for kReady
  std::unordered_set<uint64_t> inflight;  // ops started on this connection
};

// One operation from Submit to completion. Owned by Core::ops_ (progress thread).
struct Op {
  uint64_t id = 0;
  OpKind kind = OpKind::kConnect;
  AnyCallback done;
  Clock::time_point deadline;
  std::shared_ptr<EndpointImpl> ep;
  uint64_t conn_id = 0;  // the connection it runs on; 0 while waiting for one
  // Starts the operation on a ready connection (runs at most once).
  std::move_only_function<void(Conn&)> start;
  std::shared_ptr<RemoteRegionImpl> region;  // keeps the remote key alive
};

// A UCX request's own context: lives until UCX calls back (even when the
// operation already timed out), and holds the atomic operand/result words.
struct OpReq {
  Core* core;
  uint64_t op_id;
  uint64_t operand = 0;
  uint64_t value = 0;
};

// An outgoing active message: header and payload live until UCX is done.
struct OutMsg {
  Core* core;
  uint64_t op_id;  // operation to fail if the send fails (0: none)
  Bytes header;
  Bytes payload;
};

// A rendezvous payload being received.
struct RxMsg {
  Core* core;
  uint64_t conn_id;
  FrameHeader header;
  Bytes payload;
};

// Events recorded by UCX callbacks, handled after ucp_worker_progress returns.
struct FrameEvent {
  uint64_t conn_id;
  FrameHeader header;
  Bytes payload;
};
struct RndvEvent {
  uint64_t conn_id;
  FrameHeader header;
  void* desc;
  size_t length;
};
struct EpErrorEvent {
  ucp_ep_h ep;
  ucs_status_t status;
};
struct RejectEvent {  // a garbage frame: close the connection that sent it
  uint64_t conn_id;
  Error why;
};
struct BindEvent {  // a Bind frame on a UCP endpoint (maybe a new one)
  ucp_ep_h ep;
  Bytes token;
};
struct StrayEvent {  // a frame on a UCP endpoint bound to no connection
  ucp_ep_h ep;
};
using Event = std::variant<FrameEvent, RndvEvent, EpErrorEvent, RejectEvent, BindEvent, StrayEvent>;

struct Timer {
  Clock::time_point at;
  uint64_t id;  // an Op id or a Conn id (handshake deadline)
  bool operator>(const Timer& o) const { return at > o.at; }
};

// ---------------------------------------------------------------------------

class LocalRegionImpl final : public LocalRegion {
 public:
  LocalRegionImpl(std::shared_ptr<Context> ctx, ucp_mem_h memh, std::byte* data, size_t size,
                  RegionDesc desc)
      : ctx_(std::move(ctx)), memh_(memh), data_(data), size_(size), desc_(std::move(desc)) {}
  ~LocalRegionImpl() override { ucp_mem_unmap(ctx_->h, memh_); }
  std::byte* data() override { return data_; }
  size_t size() const override { return size_; }
  RegionDesc Export() const override { return desc_; }

 private:
  std::shared_ptr<Context> ctx_;
  ucp_mem_h memh_;
  std::byte* data_;
  size_t size_;
  RegionDesc desc_;
};

class RemoteRegionImpl final : public RemoteRegion,
                               public std::enable_shared_from_this<RemoteRegionImpl> {
 public:
  RemoteRegionImpl(std::shared_ptr<Core> core, const EndpointImpl* owner, RegionDesc desc)
      : core_(std::move(core)), owner_(owner), desc_(std::move(desc)) {}
  ~RemoteRegionImpl() override;
  const RegionDesc& desc() const override { return desc_; }
  const EndpointImpl* owner() const { return owner_; }

  // Guarded by Core::regions_mu_.
  ucp_rkey_h rkey_ = nullptr;
  uint64_t rkey_conn_ = 0;  // connection the key was unpacked on

 private:
  std::shared_ptr<Core> core_;
  const EndpointImpl* owner_;
  RegionDesc desc_;
};

// ---------------------------------------------------------------------------

// The identity of one transport instance (one process's UCX worker): a hash
// of its worker address, which the bootstrap hands to every client. A
// region's descriptor starts with its exporter's instance (kInstanceBytes),
// so that a descriptor of an earlier process at the same address is refused
// (ESTALE) instead of reaching memory the new process never registered.
inline constexpr size_t kInstanceBytes = 8;
inline uint64_t InstanceOf(std::span<const std::byte> worker_address) {
  return StableHash(std::string_view(reinterpret_cast<const char*>(worker_address.data()),
                                     worker_address.size())) |
         1;  // never 0 (0: not known)
}

class Core : public std::enable_shared_from_this<Core> {
 public:
  Core(const UcxOptions& ucx, const TransportOptions& opts) : ucx_(ucx), opts_(opts) {}
  ~Core();

  Status Start();
  void Shutdown();
  bool OnProgressThread() const { return std::this_thread::get_id() == thread_id_; }
  // Requests handed to their handlers and not answered yet (a ResponderImpl
  // alive): the progress thread spins longer while there are any
  // (UcxOptions::spin_pending_us).
  std::atomic<int64_t> serving_{0};

  // Queues fn for the progress thread. False (fn dropped) once it has stopped.
  bool Post(std::move_only_function<void()> fn);
  // Hands an operation to the progress thread; fails it with ESHUTDOWN inline
  // if the transport is shut down.
  void Submit(std::unique_ptr<Op> op);
  uint64_t NextId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  const TransportOptions& opts() const { return opts_; }
  const UcxOptions& ucx() const { return ucx_; }
  const std::shared_ptr<Context>& context() const { return ctx_; }

  void Handle(uint16_t method, RpcHandler handler);
  Result<std::string> Listen(const std::string& addr);
  std::shared_ptr<Endpoint> GetEndpoint(const std::string& addr);
  Result<std::unique_ptr<LocalRegion>> MapMemory(void* addr, size_t len, bool allocate);

  // Region registry (any thread).
  Status AddRegion(RemoteRegionImpl* r);
  void RemoveRegion(RemoteRegionImpl* r);

  // Progress thread only.
  void SendReply(uint64_t conn_id, uint64_t call_id, Result<Bytes> reply);
  void DisconnectEndpoint(EndpointImpl* ep);
  ucp_rkey_h RkeyFor(RemoteRegionImpl& r, Conn& c, Error* err);
  void CompleteOp(uint64_t id, ucs_status_t s, uint64_t value);
  void FailOp(uint64_t id, Error e);
  void Send(Conn& c, FrameHeader h, Bytes payload, uint64_t op_id);

  // UCX callbacks (progress thread, inside ucp_worker_progress).
  ucs_status_t OnAm(const void* header, size_t header_len, void* data, size_t len,
                    const ucp_am_recv_param_t* param);
  void OnEpError(ucp_ep_h ep, ucs_status_t s);
  void OnRxDone(RxMsg* rx, ucs_status_t s);

 private:
  void Run();
  void Teardown();
  int DrainQueue();
  void HandleEvents();
  void FireTimers();
  int SleepMs();
  void AddTimer(Clock::time_point at, uint64_t id);
  void DestroyOrphanRkeys();

  void StartOp(std::unique_ptr<Op> op);
  void RunOnConn(uint64_t op_id, Conn& c);
  Conn* OpenClientConn(EndpointImpl* ep, Error* err);
  // Bootstrap callbacks (m2m/bootstrap.h).
  void OnAccepted(uint64_t link, const std::string& peer, Bytes token);
  void OnConnected(uint64_t link, Bytes address, Bytes token);
  void OnLinkClosed(uint64_t link, Error why);
  void OnBind(ucp_ep_h ep, const Bytes& token);
  // The connection bound to ep in the role a frame kind belongs to (0: none).
  uint64_t ConnFor(ucp_ep_h ep, FrameKind kind) const;
  void CloseStrayEp(ucp_ep_h ep);
  void WarnStray(const std::string& what);
  // Closes the connection and its UCP endpoint (force: discarding what is
  // queued). An endpoint shared with another connection stays open for it,
  // unless reset_sharer: then the sharer is closed too (after a one-sided
  // timeout UCX must not touch the caller's buffers any more).
  void CloseConn(Conn& c, const Error& err, bool force, bool reset_sharer = false);
  void RejectConn(Conn& c, const Error& why);
  void OnFrame(Conn& c, FrameHeader h, Bytes payload);
  void OnServerFrame(Conn& c, FrameHeader h, Bytes payload);
  void OnClientFrame(Conn& c, FrameHeader h, Bytes payload);
  void Dispatch(Conn& c, const FrameHeader& h, Bytes payload);
  Conn* FindConn(uint64_t id) {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
  }
  Op* FindOp(uint64_t id) {
    auto it = ops_.find(id);
    return it == ops_.end() ? nullptr : it->second.get();
  }
  std::unique_ptr<Op> TakeOp(uint64_t id);

  const UcxOptions ucx_;
  const TransportOptions opts_;
  std::shared_ptr<Context> ctx_;
  ucp_worker_h worker_ = nullptr;
  uint64_t instance_ = 0;  // InstanceOf(this worker's address), set in Start
  int epfd_ = -1;
  int evfd_ = -1;
  int worker_efd_ = -1;
  size_t max_am_header_ = kMaxFrameHeaderBytes;  // refined by ucp_worker_query
  std::thread thread_;
  std::thread::id thread_id_;
  std::atomic<uint64_t> next_id_{1};

  std::mutex shutdown_mu_;
  bool shut_down_ = false;  // guarded by shutdown_mu_

  std::mutex queue_mu_;
  std::vector<std::move_only_function<void()>> queue_;  // guarded by queue_mu_
  bool closed_ = false;                                 // guarded by queue_mu_: Post fails
  std::atomic<bool> has_work_{false};
  std::atomic<bool> sleeping_{false};  // the progress thread is (about to be) in epoll_wait

  std::mutex endpoints_mu_;
  std::unordered_map<std::string, std::shared_ptr<EndpointImpl>> endpoints_;  // guarded
  bool endpoints_closed_ = false;                                              // guarded

  std::mutex regions_mu_;
  std::unordered_set<RemoteRegionImpl*> regions_;  // guarded by regions_mu_
  std::vector<ucp_rkey_h> orphan_rkeys_;           // guarded by regions_mu_
  bool worker_alive_ = true;                       // guarded by regions_mu_
  std::atomic<bool> has_orphans_{false};

  // Progress thread only.
  bool stopping_ = false;
  std::unique_ptr<Bootstrap> boot_;
  Clock::time_point next_boot_poll_{};
  std::unordered_map<uint64_t, uint64_t> link_conn_;  // bootstrap link -> Conn id
  std::unordered_map<std::string, uint64_t> token_conn_;  // bind token -> server Conn waiting
  Clock::time_point stray_logged_{};
  size_t stray_suppressed_ = 0;
  std::unordered_map<uint16_t, RpcHandler> handlers_;
  std::unordered_map<uint64_t, std::unique_ptr<Op>> ops_;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  // UCX matches the endpoints two workers create to each other, so one UCP
  // endpoint may carry our client connection to a peer AND that peer's
  // client connection to us (our server side). Frames are routed by kind.
  std::unordered_map<ucp_ep_h, uint64_t> ep_client_;
  std::unordered_map<ucp_ep_h, uint64_t> ep_server_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  std::deque<Event> events_;
  alignas(8) std::byte aligned_header_[kMaxFrameHeaderBytes];  // see OnAm
  std::vector<void*> closing_;  // ucp_ep_close_nbx requests in progress
};

// ---------------------------------------------------------------------------

class EndpointImpl final : public Endpoint, public std::enable_shared_from_this<EndpointImpl> {
 public:
  EndpointImpl(std::shared_ptr<Core> core, std::string addr, Result<ucx::SockAddr> sa)
      : core_(std::move(core)), addr_(std::move(addr)), sa_(std::move(sa)) {}

  const std::string& address() const override { return addr_; }
  void Connect(Timeout timeout, Callback<void> done) override;
  void Call(uint16_t method, Bytes payload, Timeout timeout, Callback<Bytes> done) override;
  Result<std::shared_ptr<RemoteRegion>> Import(const RegionDesc& desc) override;
  void Put(const void* src, size_t len, const RemoteRegion& dst, uint64_t offset, Timeout timeout,
           Callback<void> done) override;
  void Get(void* dst, size_t len, const RemoteRegion& src, uint64_t offset, Timeout timeout,
           Callback<void> done) override;
  void FetchAdd(const RemoteRegion& region, uint64_t offset, uint64_t add, Timeout timeout,
                Callback<uint64_t> done) override;
  void CompareSwap(const RemoteRegion& region, uint64_t offset, uint64_t expected,
                   uint64_t desired, Timeout timeout, Callback<uint64_t> done) override;
  void Disconnect() override;

  const Result<ucx::SockAddr>& sockaddr() const { return sa_; }
  uint64_t conn_id_ = 0;  // progress thread only: current connection (0: none)

 private:
  std::unique_ptr<Op> NewOp(OpKind kind, AnyCallback done, Timeout timeout);
  // The shared part of Put/Get/FetchAdd/CompareSwap: checks the access, makes
  // the operation and submits it; `issue` starts the UCX request once the
  // connection is ready and the remote key is unpacked on it.
  using Issue =
      std::move_only_function<void(Core*, uint64_t id, uint64_t raddr, ucp_rkey_h, Conn&)>;
  template <typename Done>
  void SubmitOneSided(OpKind kind, Done done, Timeout timeout, const RemoteRegion& region,
                      uint64_t offset, size_t len, bool atomic, Issue issue);
  // Validates a one-sided access; on success returns the region to keep alive.
  Result<std::shared_ptr<RemoteRegionImpl>> Check(const RemoteRegion& r, uint64_t offset,
                                                  size_t len, bool atomic) const;

  std::shared_ptr<Core> core_;
  const std::string addr_;
  const Result<ucx::SockAddr> sa_;
};

class ResponderImpl final : public Responder::Impl {
 public:
  ResponderImpl(std::weak_ptr<Core> core, uint64_t conn_id, uint64_t call_id)
      : core_(std::move(core)), conn_id_(conn_id), call_id_(call_id) {
    if (auto c = core_.lock()) c->serving_.fetch_add(1, std::memory_order_relaxed);
  }
  ~ResponderImpl() override {
    if (auto c = core_.lock()) c->serving_.fetch_sub(1, std::memory_order_relaxed);
  }
  void Send(Result<Bytes> reply) override {
    auto core = core_.lock();
    if (!core) return;
    if (core->OnProgressThread()) {
      core->SendReply(conn_id_, call_id_, std::move(reply));
      return;
    }
    core->Post([core = core.get(), conn = conn_id_, call = call_id_,
                reply = std::move(reply)]() mutable { core->SendReply(conn, call, std::move(reply)); });
  }

 private:
  std::weak_ptr<Core> core_;
  uint64_t conn_id_;
  uint64_t call_id_;
};

// UCX C callbacks (ucx_core.cc): they record events for the progress loop.
ucs_status_t AmCallback(void* arg, const void* header, size_t header_len, void* data, size_t len,
                        const ucp_am_recv_param_t* param);
void EpErrorCallback(void* arg, ucp_ep_h ep, ucs_status_t status);
void OpReqCallback(void* request, ucs_status_t status, void* user_data);
void SendCallback(void* request, ucs_status_t status, void* user_data);
void RxCallback(void* request, ucs_status_t status, size_t length, void* user_data);

}  // namespace fedfs::m2m::ucx
