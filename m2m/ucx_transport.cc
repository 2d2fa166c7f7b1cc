// UcxTransport: see m2m/ucx_transport.h for the contract.
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
#include "m2m/ucx_transport.h"

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
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "common/logging.h"
#include "common/thread_name.h"
#include "m2m/auth.h"
#include "m2m/bootstrap.h"
#include "m2m/frame.h"
#include "m2m/ucx_util.h"

namespace fedfs::m2m {
namespace {

using Clock = std::chrono::steady_clock;
using ucx::Context;

constexpr unsigned kAmId = 1;
constexpr size_t kMaxContextChars = 200;
// How long Shutdown waits for endpoint close requests before destroying the worker.
constexpr auto kCloseGrace = std::chrono::seconds(2);
// Cap on one epoll sleep (the loop re-checks its state at least this often).
constexpr int kMaxSleepMs = 1000;
// How often the progress loop polls the bootstrap sockets while it is busy.
constexpr auto kBootPollEvery = std::chrono::milliseconds(2);

std::shared_ptr<spdlog::logger> Log() { return Logger("m2m"); }

class Core;
class EndpointImpl;
class RemoteRegionImpl;

using AnyCallback = std::variant<Callback<void>, Callback<Bytes>, Callback<uint64_t>>;

std::string TokenKey(const Bytes& token) {
  return std::string(reinterpret_cast<const char*>(token.data()), token.size());
}

void InvokeFail(AnyCallback& cb, Error e) {
  std::visit([&](auto& f) { f(Err(std::move(e))); }, cb);
}

enum class OpKind { kConnect, kCall, kPut, kGet, kAtomic };

bool OneSided(OpKind k) { return k == OpKind::kPut || k == OpKind::kGet || k == OpKind::kAtomic; }

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

class Core : public std::enable_shared_from_this<Core> {
 public:
  Core(const UcxOptions& ucx, const TransportOptions& opts) : ucx_(ucx), opts_(opts) {}
  ~Core();

  Status Start();
  void Shutdown();
  bool OnProgressThread() const { return std::this_thread::get_id() == thread_id_; }

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
  void OnEpError(ucp_ep_h ep, ucs_status_t s) { events_.push_back(EpErrorEvent{ep, s}); }
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
      : core_(std::move(core)), conn_id_(conn_id), call_id_(call_id) {}
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

// --- UCX C callbacks --------------------------------------------------------

ucs_status_t AmCallback(void* arg, const void* header, size_t header_len, void* data, size_t len,
                        const ucp_am_recv_param_t* param) {
  return static_cast<Core*>(arg)->OnAm(header, header_len, data, len, param);
}

void EpErrorCallback(void* arg, ucp_ep_h ep, ucs_status_t status) {
  static_cast<Core*>(arg)->OnEpError(ep, status);
}

void OpReqCallback(void* request, ucs_status_t status, void* user_data) {
  auto* r = static_cast<OpReq*>(user_data);
  r->core->CompleteOp(r->op_id, status, r->value);
  delete r;
  ucp_request_free(request);
}

void SendCallback(void* request, ucs_status_t status, void* user_data) {
  auto* m = static_cast<OutMsg*>(user_data);
  if (status != UCS_OK && m->op_id != 0) {
    m->core->FailOp(m->op_id, Error{ucx::StatusErrno(status),
                                    std::string("send failed: ") + ucs_status_string(status)});
  }
  delete m;
  ucp_request_free(request);
}

void RxCallback(void* request, ucs_status_t status, size_t /*length*/, void* user_data) {
  auto* rx = static_cast<RxMsg*>(user_data);
  rx->core->OnRxDone(rx, status);
  ucp_request_free(request);
}

// --- Core: lifecycle --------------------------------------------------------

Status Core::Start() {
  auto ctx = ucx::CreateContext(ucx_);
  if (!ctx) return Err(ctx.error());
  ctx_ = std::move(*ctx);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t s = ucp_worker_create(ctx_->h, &wp, &worker_);
  if (s != UCS_OK) return Err(EIO, std::string("ucp_worker_create: ") + ucs_status_string(s));

  ucp_worker_attr_t wa{};
  wa.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  if (ucp_worker_query(worker_, &wa) == UCS_OK) max_am_header_ = wa.max_am_header;

  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                  UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kAmId;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.cb = &AmCallback;
  hp.arg = this;
  s = ucp_worker_set_am_recv_handler(worker_, &hp);
  if (s != UCS_OK) return Err(EIO, std::string("ucp_worker_set_am_recv_handler: ") + ucs_status_string(s));

  s = ucp_worker_get_efd(worker_, &worker_efd_);
  if (s != UCS_OK) return Err(EIO, std::string("ucp_worker_get_efd: ") + ucs_status_string(s));
  evfd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (evfd_ < 0 || epfd_ < 0) return Err(errno, "eventfd/epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = worker_efd_;
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, worker_efd_, &ev) != 0) return Err(errno, "epoll_ctl");
  ev.data.fd = evfd_;
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, evfd_, &ev) != 0) return Err(errno, "epoll_ctl");

  // The bootstrap hands our worker address to authenticated clients only.
  ucp_address_t* wa_addr = nullptr;
  size_t wa_len = 0;
  s = ucp_worker_get_address(worker_, &wa_addr, &wa_len);
  if (s != UCS_OK) return Err(EIO, std::string("ucp_worker_get_address: ") + ucs_status_string(s));
  BootstrapOptions bo;
  bo.cluster_key = opts_.cluster_key;
  const auto* wa_bytes = reinterpret_cast<const std::byte*>(wa_addr);
  bo.local_address.assign(wa_bytes, wa_bytes + wa_len);
  ucp_worker_release_address(worker_, wa_addr);
  bo.handshake_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(opts_.connect_timeout);
  BootstrapCallbacks bc;
  bc.accepted = [this](uint64_t link, const std::string& peer, Bytes token) {
    OnAccepted(link, peer, std::move(token));
  };
  bc.connected = [this](uint64_t link, Bytes address, Bytes token) {
    OnConnected(link, std::move(address), std::move(token));
  };
  bc.closed = [this](uint64_t link, Error why) { OnLinkClosed(link, std::move(why)); };
  auto boot = Bootstrap::Create(std::move(bo), std::move(bc));
  if (!boot) return Err(boot.error());
  boot_ = std::move(*boot);
  ev.data.fd = boot_->fd();
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, boot_->fd(), &ev) != 0) return Err(errno, "epoll_ctl");

  std::promise<void> started;
  auto f = started.get_future();
  thread_ = std::thread([this, &started] {
    thread_id_ = std::this_thread::get_id();
    started.set_value();
    Run();
  });
  NameThread(thread_, "m2m-progress");
  f.wait();
  return Ok();
}

Core::~Core() {
  // Shutdown() ran (or Start failed before the thread started).
  if (thread_.joinable()) thread_.join();
  if (worker_ != nullptr) {
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
  }
  if (epfd_ >= 0) ::close(epfd_);
  if (evfd_ >= 0) ::close(evfd_);
}

void Core::Shutdown() {
  {
    std::lock_guard lock(shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (OnProgressThread()) {
    Log()->error("Transport::Shutdown called from the progress thread: refused");
    return;
  }
  if (thread_.joinable()) {
    Post([this] { stopping_ = true; });
    thread_.join();
  }
  {
    // Break the Core <-> Endpoint reference cycle.
    std::lock_guard lock(endpoints_mu_);
    endpoints_closed_ = true;
    endpoints_.clear();
  }
}

bool Core::Post(std::move_only_function<void()> fn) {
  {
    std::lock_guard lock(queue_mu_);
    if (closed_) return false;
    queue_.push_back(std::move(fn));
  }
  // Dekker-style handshake with Run(): we publish has_work_ then read
  // sleeping_; Run publishes sleeping_ then reads has_work_ (both seq_cst), so
  // at least one side sees the other and no wake-up is lost. While the
  // progress thread spins (or when we are on it) no syscall is needed.
  has_work_.store(true, std::memory_order_seq_cst);
  if (!OnProgressThread() && sleeping_.load(std::memory_order_seq_cst)) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(evfd_, &one, sizeof one);
  }
  return true;
}

void Core::Submit(std::unique_ptr<Op> op) {
  // Post consumes the closure even when it fails; keep a way to fail the op.
  auto* raw = op.release();
  if (!Post([this, raw] { StartOp(std::unique_ptr<Op>(raw)); })) {
    std::unique_ptr<Op> back(raw);
    InvokeFail(back->done, Error{ESHUTDOWN, "transport is shut down"});
  }
}

int Core::DrainQueue() {
  std::vector<std::move_only_function<void()>> tasks;
  {
    std::lock_guard lock(queue_mu_);
    has_work_.store(false, std::memory_order_relaxed);
    tasks.swap(queue_);
  }
  for (auto& t : tasks) t();
  return static_cast<int>(tasks.size());
}

void Core::Run() {
  const auto spin = std::chrono::microseconds(ucx_.spin_us);
  while (true) {
    int work = DrainQueue();
    if (const auto now = Clock::now(); now >= next_boot_poll_) {
      // Cheap when idle (one epoll_wait with timeout 0); bounded delay while busy.
      boot_->Poll();
      next_boot_poll_ = now + kBootPollEvery;
    }
    while (ucp_worker_progress(worker_) != 0) ++work;
    if (!events_.empty()) {
      HandleEvents();
      ++work;
    }
    FireTimers();
    if (has_orphans_.load(std::memory_order_relaxed)) DestroyOrphanRkeys();
    if (stopping_) break;
    if (work > 0) continue;

    bool busy = false;
    const auto spin_end = Clock::now() + spin;
    while (Clock::now() < spin_end) {
      if (has_work_.load(std::memory_order_acquire) || ucp_worker_progress(worker_) != 0) {
        busy = true;
        break;
      }
      // Let a thread that waits for this core run (e.g. the application
      // thread our last completion woke): on small machines the progress
      // threads would otherwise starve it for a whole time slice.
      if (ucx_.spin_yield) sched_yield();
    }
    if (busy || !events_.empty()) continue;

    const ucs_status_t s = ucp_worker_arm(worker_);
    if (s == UCS_ERR_BUSY) continue;
    if (s != UCS_OK) {
      Log()->error("ucp_worker_arm: {}", ucs_status_string(s));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    sleeping_.store(true, std::memory_order_seq_cst);
    if (has_work_.load(std::memory_order_seq_cst)) {
      sleeping_.store(false, std::memory_order_relaxed);
      continue;
    }
    epoll_event evs[3];
    const int n = ::epoll_wait(epfd_, evs, 3, SleepMs());
    sleeping_.store(false, std::memory_order_relaxed);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.fd == evfd_) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(evfd_, &v, sizeof v);
      } else if (evs[i].data.fd == boot_->fd()) {
        next_boot_poll_ = Clock::time_point{};  // poll it now
      }
    }
  }
  Teardown();
}

void Core::Teardown() {
  // Stop accepting first: the bootstrap's sockets close (no callbacks), so no
  // new connection starts while the existing ones close.
  boot_.reset();
  link_conn_.clear();
  token_conn_.clear();
  // Fail every operation, then close client connections before accepted ones.
  std::vector<uint64_t> ids;
  for (auto& [id, op] : ops_) ids.push_back(id);
  for (uint64_t id : ids) FailOp(id, Error{ESHUTDOWN, "transport is shut down"});
  for (bool server : {false, true}) {
    std::vector<uint64_t> cids;
    for (auto& [id, c] : conns_) {
      if (c->server == server) cids.push_back(id);
    }
    for (uint64_t id : cids) {
      if (Conn* c = FindConn(id)) CloseConn(*c, Error{ESHUTDOWN, "transport is shut down"}, true);
    }
  }
  // Let the close requests finish; no more operations are accepted.
  {
    std::lock_guard lock(queue_mu_);
    closed_ = true;
  }
  const auto until = Clock::now() + kCloseGrace;
  while (Clock::now() < until) {
    DrainQueue();  // tasks posted before closed_: ops fail with ESHUTDOWN
    ucp_worker_progress(worker_);
    while (!events_.empty()) {
      // Frames and errors after shutdown are dropped.
      Event ev = std::move(events_.front());
      events_.pop_front();
      if (auto* rv = std::get_if<RndvEvent>(&ev)) ucp_am_data_release(worker_, rv->desc);
    }
    std::erase_if(closing_, [](void* req) {
      if (ucp_request_check_status(req) == UCS_INPROGRESS) return false;
      ucp_request_free(req);
      return true;
    });
    if (closing_.empty() && ops_.empty()) break;
  }
  DrainQueue();
  if (!closing_.empty()) Log()->warn("{} endpoint close requests did not finish", closing_.size());
  ops_.clear();
  conns_.clear();
  ep_client_.clear();
  ep_server_.clear();
  handlers_.clear();
  {
    std::lock_guard lock(regions_mu_);
    for (ucp_rkey_h k : orphan_rkeys_) ucp_rkey_destroy(k);
    orphan_rkeys_.clear();
    for (RemoteRegionImpl* r : regions_) {
      if (r->rkey_ != nullptr) ucp_rkey_destroy(r->rkey_);
      r->rkey_ = nullptr;
    }
    worker_alive_ = false;
  }
  ucp_worker_destroy(worker_);
  worker_ = nullptr;
}

int Core::SleepMs() {
  std::optional<Clock::time_point> at = boot_->NextDeadline();
  if (!timers_.empty() && (!at || timers_.top().at < *at)) at = timers_.top().at;
  if (!at) return kMaxSleepMs;
  const auto d = *at - Clock::now();
  if (d <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
  return static_cast<int>(std::min<int64_t>(ms, kMaxSleepMs));
}

void Core::AddTimer(Clock::time_point at, uint64_t id) {
  timers_.push(Timer{at, id});
  // Entries of finished operations are dropped lazily; rebuild when stale ones dominate.
  if (timers_.size() > 4096 && timers_.size() > 4 * (ops_.size() + conns_.size())) {
    std::vector<Timer> live;
    while (!timers_.empty()) {
      const Timer t = timers_.top();
      timers_.pop();
      if (ops_.count(t.id) != 0 || conns_.count(t.id) != 0) live.push_back(t);
    }
    for (const Timer& t : live) timers_.push(t);
  }
}

void Core::FireTimers() {
  const auto now = Clock::now();
  while (!timers_.empty() && timers_.top().at <= now) {
    const uint64_t id = timers_.top().id;
    timers_.pop();
    if (Op* op = FindOp(id)) {
      const bool one_sided = OneSided(op->kind);
      const uint64_t conn_id = op->conn_id;
      FailOp(id, Error{ETIMEDOUT, "operation timed out"});
      if (one_sided && conn_id != 0) {
        // UCX might still touch the caller's buffer: force-close the connection.
        if (Conn* c = FindConn(conn_id)) {
          Log()->warn("one-sided operation to {} timed out: closing the connection",
                      c->remote_addr);
          CloseConn(*c, Error{ECONNRESET, "connection closed after a one-sided timeout"}, true,
                    /*reset_sharer=*/true);
        }
      }
    } else if (Conn* c = FindConn(id); c != nullptr && c->state == ConnState::kAuthenticating) {
      if (c->server) {
        RejectConn(*c, Error{EACCES, "its UCX endpoint did not bind in time"});
      } else {
        CloseConn(*c, Error{EHOSTDOWN, "connect to " + c->remote_addr + " timed out"}, true);
      }
    }
  }
}

void Core::DestroyOrphanRkeys() {
  std::lock_guard lock(regions_mu_);
  for (ucp_rkey_h k : orphan_rkeys_) ucp_rkey_destroy(k);
  orphan_rkeys_.clear();
  has_orphans_.store(false, std::memory_order_relaxed);
}

Status Core::AddRegion(RemoteRegionImpl* r) {
  std::lock_guard lock(regions_mu_);
  if (!worker_alive_) return Err(ESHUTDOWN, "transport is shut down");
  regions_.insert(r);
  return Ok();
}

void Core::RemoveRegion(RemoteRegionImpl* r) {
  bool wake = false;
  {
    std::lock_guard lock(regions_mu_);
    regions_.erase(r);
    if (r->rkey_ != nullptr && worker_alive_) {
      orphan_rkeys_.push_back(r->rkey_);
      has_orphans_.store(true, std::memory_order_relaxed);
      wake = !OnProgressThread();
    }
    r->rkey_ = nullptr;
  }
  if (wake) Post([] {});
}

RemoteRegionImpl::~RemoteRegionImpl() { core_->RemoveRegion(this); }

ucp_rkey_h Core::RkeyFor(RemoteRegionImpl& r, Conn& c, Error* err) {
  std::lock_guard lock(regions_mu_);
  if (r.rkey_ != nullptr && r.rkey_conn_ == c.id) return r.rkey_;
  if (r.rkey_ != nullptr) ucp_rkey_destroy(r.rkey_);
  r.rkey_ = nullptr;
  const ucs_status_t s = ucp_ep_rkey_unpack(c.ep, r.desc().rkey.data(), &r.rkey_);
  if (s != UCS_OK) {
    r.rkey_ = nullptr;
    *err = Error{EINVAL, std::string("cannot unpack remote key: ") + ucs_status_string(s)};
    return nullptr;
  }
  r.rkey_conn_ = c.id;
  return r.rkey_;
}

// --- Core: operations -------------------------------------------------------

std::unique_ptr<Op> Core::TakeOp(uint64_t id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return nullptr;
  std::unique_ptr<Op> op = std::move(it->second);
  ops_.erase(it);
  if (op->conn_id != 0) {
    if (Conn* c = FindConn(op->conn_id)) c->inflight.erase(id);
  }
  return op;
}

void Core::FailOp(uint64_t id, Error e) {
  if (auto op = TakeOp(id)) InvokeFail(op->done, std::move(e));
}

void Core::CompleteOp(uint64_t id, ucs_status_t s, uint64_t value) {
  auto op = TakeOp(id);
  if (!op) return;  // timed out or failed already
  if (s != UCS_OK) {
    InvokeFail(op->done, Error{ucx::StatusErrno(s), std::string("UCX: ") + ucs_status_string(s)});
    return;
  }
  if (auto* v = std::get_if<Callback<void>>(&op->done)) {
    (*v)(Ok());
  } else if (auto* u = std::get_if<Callback<uint64_t>>(&op->done)) {
    (*u)(value);
  } else {
    InvokeFail(op->done, Error{EIO, "internal: completion of the wrong kind"});
  }
}

void Core::StartOp(std::unique_ptr<Op> op) {
  if (stopping_) {
    InvokeFail(op->done, Error{ESHUTDOWN, "transport is shut down"});
    return;
  }
  const uint64_t id = op->id;
  EndpointImpl* ep = op->ep.get();
  AddTimer(op->deadline, id);
  ops_.emplace(id, std::move(op));
  Conn* c = ep->conn_id_ != 0 ? FindConn(ep->conn_id_) : nullptr;
  if (c == nullptr) {
    Error err;
    c = OpenClientConn(ep, &err);
    if (c == nullptr) {
      FailOp(id, std::move(err));
      return;
    }
  }
  if (c->state == ConnState::kReady) {
    RunOnConn(id, *c);
  } else {
    c->waiting.push_back(id);
  }
}

void Core::RunOnConn(uint64_t op_id, Conn& c) {
  Op* op = FindOp(op_id);
  if (op == nullptr) return;
  op->conn_id = c.id;
  c.inflight.insert(op_id);
  auto start = std::move(op->start);
  start(c);  // may complete (and erase) the op
}

Conn* Core::OpenClientConn(EndpointImpl* ep, Error* err) {
  const auto& sa = ep->sockaddr();
  if (!sa) {
    *err = sa.error();
    return nullptr;
  }
  auto conn = std::make_unique<Conn>();
  conn->id = NextId();
  conn->server = false;
  conn->owner = ep;
  conn->remote_addr = ep->address();
  const auto deadline = Clock::now() + opts_.connect_timeout;
  conn->link = boot_->Connect(sa->get(), sa->len, ep->address(), deadline);
  Conn& c = *conn;
  link_conn_[c.link] = c.id;
  conns_.emplace(c.id, std::move(conn));
  ep->conn_id_ = c.id;
  AddTimer(deadline, c.id);
  return &c;
}

void Core::OnConnected(uint64_t link, Bytes address, Bytes token) {
  auto it = link_conn_.find(link);
  Conn* c = it == link_conn_.end() ? nullptr : FindConn(it->second);
  if (c == nullptr || c->server || c->state != ConnState::kAuthenticating || c->ep != nullptr) {
    boot_->Close(link);
    if (it != link_conn_.end()) link_conn_.erase(it);
    return;
  }
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                 UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.address = reinterpret_cast<const ucp_address_t*>(address.data());
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = &EpErrorCallback;
  p.err_handler.arg = this;
  ucp_ep_h ep = nullptr;
  const ucs_status_t s = ucp_ep_create(worker_, &p, &ep);
  if (s != UCS_OK) {
    Log()->warn("cannot connect to {}'s UCX worker: {}", c->remote_addr, ucs_status_string(s));
    CloseConn(*c, Error{EHOSTDOWN, "connect to " + c->remote_addr + ": " + ucs_status_string(s)},
              true);
    return;
  }
  c->ep = ep;
  ep_client_[ep] = c->id;
  FrameHeader bind;
  bind.kind = FrameKind::kBind;
  bind.nonce = std::move(token);
  Send(*c, std::move(bind), {}, 0);
}

void Core::OnAccepted(uint64_t link, const std::string& peer, Bytes token) {
  if (stopping_) {
    boot_->Close(link);
    return;
  }
  auto conn = std::make_unique<Conn>();
  conn->id = NextId();
  conn->server = true;
  conn->link = link;
  conn->remote_addr = peer;
  conn->token = token;
  Log()->debug("peer {} (connection {}) authenticated", peer, conn->id);
  link_conn_[link] = conn->id;
  token_conn_[TokenKey(token)] = conn->id;
  AddTimer(Clock::now() + opts_.connect_timeout, conn->id);
  conns_.emplace(conn->id, std::move(conn));
}

void Core::OnLinkClosed(uint64_t link, Error why) {
  auto it = link_conn_.find(link);
  if (it == link_conn_.end()) return;
  Conn* c = FindConn(it->second);
  link_conn_.erase(it);
  if (c == nullptr) return;
  c->link = 0;
  if (c->state == ConnState::kAuthenticating) {
    CloseConn(*c, why, true);  // client: EACCES / EHOSTDOWN / EPROTO from the handshake
  } else {
    Log()->debug("connection {} to {} lost: {}", c->id, c->remote_addr, why.ToString());
    CloseConn(*c, Error{ECONNRESET, "connection to " + c->remote_addr + " lost: " + why.context},
              true);
  }
}

void Core::OnBind(ucp_ep_h ep, const Bytes& token) {
  auto it = token_conn_.find(TokenKey(token));
  Conn* c = it == token_conn_.end() ? nullptr : FindConn(it->second);
  if (c == nullptr || !c->server || c->state != ConnState::kAuthenticating ||
      ep_server_.count(ep) != 0) {
    WarnStray("dropping a Bind with an unknown token on a UCX endpoint");
    CloseStrayEp(ep);
    return;
  }
  token_conn_.erase(it);
  c->token.clear();
  c->ep = ep;
  ep_server_[ep] = c->id;
  c->state = ConnState::kReady;
  FrameHeader ack;
  ack.kind = FrameKind::kBindAck;
  Send(*c, std::move(ack), {}, 0);
}

uint64_t Core::ConnFor(ucp_ep_h ep, FrameKind kind) const {
  const auto& m = (kind == FrameKind::kReply || kind == FrameKind::kBindAck) ? ep_client_ : ep_server_;
  auto it = m.find(ep);
  return it == m.end() ? 0 : it->second;
}

void Core::CloseStrayEp(ucp_ep_h ep) {
  if (ep == nullptr || ep_client_.count(ep) != 0 || ep_server_.count(ep) != 0) return;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* req = ucp_ep_close_nbx(ep, &p);
  if (UCS_PTR_IS_PTR(req)) closing_.push_back(req);
}

void Core::WarnStray(const std::string& what) {
  const auto now = Clock::now();
  if (now - stray_logged_ < std::chrono::seconds(10)) {
    ++stray_suppressed_;
    return;
  }
  if (stray_suppressed_ > 0) {
    Log()->warn("{} ({} more such frames in the last 10 s)", what, stray_suppressed_);
  } else {
    Log()->warn("{}", what);
  }
  stray_logged_ = now;
  stray_suppressed_ = 0;
}

void Core::CloseConn(Conn& c, const Error& err, bool force, bool reset_sharer) {
  if (c.state == ConnState::kClosed) return;
  c.state = ConnState::kClosed;
  if (c.owner != nullptr && c.owner->conn_id_ == c.id) c.owner->conn_id_ = 0;
  const uint64_t id = c.id;
  auto waiting = std::move(c.waiting);
  std::vector<uint64_t> inflight(c.inflight.begin(), c.inflight.end());
  c.inflight.clear();
  if (c.link != 0) {
    link_conn_.erase(c.link);
    if (boot_) boot_->Close(c.link);
    c.link = 0;
  }
  if (!c.token.empty()) token_conn_.erase(TokenKey(c.token));
  ucp_ep_h ep = c.ep;
  uint64_t sharer = 0;  // the other connection on the same UCP endpoint
  if (ep != nullptr) {
    auto& mine = c.server ? ep_server_ : ep_client_;
    auto& other = c.server ? ep_client_ : ep_server_;
    if (auto m = mine.find(ep); m != mine.end() && m->second == id) mine.erase(m);
    if (auto o = other.find(ep); o != other.end()) {
      sharer = o->second;
      ep = nullptr;  // still in use: closed with the sharer, if at all
    }
  }
  // The Conn leaves the table before user callbacks run (they may reconnect).
  std::unique_ptr<Conn> keep = std::move(conns_[id]);
  conns_.erase(id);

  if (ep != nullptr) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* req = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(req)) closing_.push_back(req);
  }
  if (reset_sharer && sharer != 0) {
    if (Conn* o = FindConn(sharer)) {
      CloseConn(*o, Error{ECONNRESET, "connection to " + o->remote_addr + " reset: " + err.context},
                true);
    }
  }
  for (uint64_t op : waiting) FailOp(op, err);
  for (uint64_t op : inflight) FailOp(op, err);
}

void Core::RejectConn(Conn& c, const Error& why) {
  if (c.state == ConnState::kClosed) return;
  Log()->warn("refusing peer {} (connection {}): {}", c.remote_addr, c.id, why.ToString());
  CloseConn(c, Error{ECONNRESET, "connection closed: " + why.context}, true);
}

void Core::Send(Conn& c, FrameHeader h, Bytes payload, uint64_t op_id) {
  if (h.context.size() > kMaxContextChars) h.context.resize(kMaxContextChars);
  h.payload_size = payload.size();
  auto* m = new OutMsg{this, op_id, EncodeFrame(h), std::move(payload)};
  if (m->header.size() > max_am_header_) {
    if (op_id != 0) FailOp(op_id, Error{EMSGSIZE, "frame header too large"});
    delete m;
    return;
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  p.cb.send = &SendCallback;
  p.user_data = m;
  void* r = ucp_am_send_nbx(c.ep, kAmId, m->header.data(), m->header.size(), m->payload.data(),
                            m->payload.size(), &p);
  if (UCS_PTR_IS_PTR(r)) return;  // SendCallback owns m now
  const ucs_status_t s = UCS_PTR_STATUS(r);
  delete m;
  if (s != UCS_OK && op_id != 0) {
    FailOp(op_id, Error{ucx::StatusErrno(s), std::string("send failed: ") + ucs_status_string(s)});
  }
}

void Core::SendReply(uint64_t conn_id, uint64_t call_id, Result<Bytes> reply) {
  Conn* c = FindConn(conn_id);
  if (c == nullptr || c->state != ConnState::kReady) return;  // peer gone: drop
  FrameHeader h;
  h.kind = FrameKind::kReply;
  h.call_id = call_id;
  Bytes payload;
  if (reply && reply->size() > opts_.max_message_bytes) {
    reply = Err(EMSGSIZE, "reply of " + std::to_string(reply->size()) + " bytes over the limit");
  }
  if (reply) {
    payload = std::move(*reply);
  } else {
    h.errno_code = reply.error().code > 0 ? reply.error().code : EIO;
    h.context = reply.error().context;
  }
  Send(*c, std::move(h), std::move(payload), 0);
}

void Core::DisconnectEndpoint(EndpointImpl* ep) {
  if (ep->conn_id_ == 0) return;
  if (Conn* c = FindConn(ep->conn_id_)) {
    CloseConn(*c, Error{ECONNRESET, "disconnected"}, true);
  }
  ep->conn_id_ = 0;
}

// --- Core: receiving ----------------------------------------------------------

ucs_status_t Core::OnAm(const void* header, size_t header_len, void* data, size_t len,
                        const ucp_am_recv_param_t* param) {
  ucp_ep_h from = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 ? param->reply_ep
                                                                           : nullptr;
  // UCX delivers the header at any alignment; FlatBuffers reads it in place
  // and needs 4-byte alignment, so copy it into an aligned buffer first.
  std::span<const std::byte> hdr(static_cast<const std::byte*>(header), header_len);
  if (header_len <= sizeof(aligned_header_) && reinterpret_cast<uintptr_t>(header) % 8 != 0) {
    std::memcpy(aligned_header_, header, header_len);
    hdr = std::span<const std::byte>(aligned_header_, header_len);
  }
  auto h = DecodeFrame(hdr, len, opts_.max_message_bytes);
  if (!h) {
    // The role is unknown: blame the server-side connection first (requests
    // are what peers send unasked), else ours.
    uint64_t conn_id = ConnFor(from, FrameKind::kRequest);
    if (conn_id == 0) conn_id = ConnFor(from, FrameKind::kReply);
    Conn* c = FindConn(conn_id);
    if (c == nullptr) {
      WarnStray("dropping malformed frame (" + std::to_string(header_len) + " header bytes, " +
                std::to_string(len) + " payload bytes) from an unbound UCX endpoint: " +
                h.error().ToString());
      events_.push_back(StrayEvent{from});
      return UCS_OK;
    }
    Log()->warn("dropping malformed frame ({} header bytes, {} payload bytes) from {}: {}",
                header_len, len, c->remote_addr, h.error().ToString());
    {
      if (c->state == ConnState::kReady && h.error().code == EMSGSIZE) {
        // An authenticated peer's oversized request: answer it, keep the connection.
        auto again = DecodeFrame(hdr, len, UINT64_MAX);
        if (again && (again->kind == FrameKind::kRequest || again->kind == FrameKind::kReply)) {
          FrameHeader refused;
          refused.kind = again->kind;
          refused.call_id = again->call_id;
          refused.errno_code = EMSGSIZE;
          refused.context = "payload of " + std::to_string(len) + " bytes over the receiver's limit";
          events_.push_back(FrameEvent{conn_id, std::move(refused), {}});
        }
      } else {
        events_.push_back(RejectEvent{conn_id, h.error()});
      }
    }
    return UCS_OK;  // drops the data (also a rendezvous descriptor)
  }
  if (h->kind == FrameKind::kBind) {
    if (from != nullptr && len == 0) events_.push_back(BindEvent{from, std::move(h->nonce)});
    return UCS_OK;
  }
  const uint64_t conn_id = ConnFor(from, h->kind);
  if (conn_id == 0) {
    WarnStray("dropping a frame of kind " + std::to_string(static_cast<int>(h->kind)) +
              " from a UCX endpoint bound to no authenticated connection");
    events_.push_back(StrayEvent{from});
    return UCS_OK;
  }
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    Conn* c = FindConn(conn_id);
    if (c == nullptr || c->state != ConnState::kReady) {
      events_.push_back(RejectEvent{conn_id, Error{EACCES, "bulk data before authentication"}});
      return UCS_OK;
    }
    events_.push_back(RndvEvent{conn_id, std::move(*h), data, len});
    return UCS_INPROGRESS;
  }
  const auto* p = static_cast<const std::byte*>(data);
  events_.push_back(FrameEvent{conn_id, std::move(*h), Bytes(p, p + len)});
  return UCS_OK;
}

void Core::OnRxDone(RxMsg* rx, ucs_status_t s) {
  std::unique_ptr<RxMsg> own(rx);
  if (s != UCS_OK) {
    Log()->warn("receiving a {}-byte payload failed: {}", rx->payload.size(), ucs_status_string(s));
    return;
  }
  events_.push_back(FrameEvent{rx->conn_id, std::move(rx->header), std::move(rx->payload)});
}

void Core::HandleEvents() {
  while (!events_.empty()) {
    Event ev = std::move(events_.front());
    events_.pop_front();
    if (auto* f = std::get_if<FrameEvent>(&ev)) {
      if (Conn* c = FindConn(f->conn_id)) OnFrame(*c, std::move(f->header), std::move(f->payload));
    } else if (auto* r = std::get_if<RndvEvent>(&ev)) {
      if (FindConn(r->conn_id) == nullptr) {
        ucp_am_data_release(worker_, r->desc);
        continue;
      }
      auto* rx = new RxMsg{this, r->conn_id, std::move(r->header), Bytes(r->length)};
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv_am = &RxCallback;
      p.user_data = rx;
      void* req = ucp_am_recv_data_nbx(worker_, r->desc, rx->payload.data(), rx->payload.size(), &p);
      if (UCS_PTR_IS_PTR(req)) continue;  // RxCallback finishes
      OnRxDone(rx, UCS_PTR_STATUS(req));
    } else if (auto* e = std::get_if<EpErrorEvent>(&ev)) {
      std::vector<uint64_t> on_ep;  // both roles: the endpoint is dead for each
      if (auto it = ep_client_.find(e->ep); it != ep_client_.end()) on_ep.push_back(it->second);
      if (auto it = ep_server_.find(e->ep); it != ep_server_.end()) on_ep.push_back(it->second);
      for (uint64_t cid : on_ep) {
      Conn* c = FindConn(cid);
      if (c == nullptr) continue;
      if (c->state == ConnState::kAuthenticating) {
        if (c->server) {
          Log()->warn("peer {} (connection {}) went away during authentication: {}",
                      c->remote_addr, c->id, ucs_status_string(e->status));
        }
        CloseConn(*c, Error{EHOSTDOWN, "cannot connect to " + c->remote_addr + ": " +
                                           ucs_status_string(e->status)},
                  true);
      } else {
        Log()->debug("connection {} to {} lost: {}", c->id, c->remote_addr,
                     ucs_status_string(e->status));
        CloseConn(*c, Error{ECONNRESET, "connection to " + c->remote_addr + " lost: " +
                                            ucs_status_string(e->status)},
                  true, /*reset_sharer=*/true);
      }
      }
    } else if (auto* j = std::get_if<RejectEvent>(&ev)) {
      if (Conn* c = FindConn(j->conn_id)) RejectConn(*c, j->why);
    } else if (auto* b = std::get_if<BindEvent>(&ev)) {
      OnBind(b->ep, b->token);
    } else if (auto* st = std::get_if<StrayEvent>(&ev)) {
      CloseStrayEp(st->ep);
    }
  }
}

void Core::OnFrame(Conn& c, FrameHeader h, Bytes payload) {
  if (c.state == ConnState::kClosed) return;
  if (c.server) {
    OnServerFrame(c, std::move(h), std::move(payload));
  } else {
    OnClientFrame(c, std::move(h), std::move(payload));
  }
}

void Core::OnServerFrame(Conn& c, FrameHeader h, Bytes payload) {
  // Only bound (kReady) connections get here: ConnFor maps an endpoint to a
  // server connection once its Bind carried the token (OnBind).
  if (c.state != ConnState::kReady || h.kind != FrameKind::kRequest) {
    Log()->warn("dropping unexpected frame kind {} from {}", static_cast<int>(h.kind),
                c.remote_addr);
    return;
  }
  Dispatch(c, h, std::move(payload));
}

void Core::Dispatch(Conn& c, const FrameHeader& h, Bytes payload) {
  if (h.errno_code != 0) {  // a request refused on arrival (see OnAm)
    SendReply(c.id, h.call_id, Err(h.errno_code, "request payload over the server's limit"));
    return;
  }
  auto it = handlers_.find(h.method);
  if (it == handlers_.end()) {
    SendReply(c.id, h.call_id, Err(ENOSYS, "no handler for method " + std::to_string(h.method)));
    return;
  }
  IncomingCall call{PeerInfo{c.id, c.remote_addr}, h.method, std::move(payload)};
  Responder responder(std::make_unique<ResponderImpl>(weak_from_this(), c.id, h.call_id));
  try {
    it->second(std::move(call), std::move(responder));
  } catch (const std::exception& e) {
    Log()->error("handler for method {} threw: {}", h.method, e.what());
  }
}

void Core::OnClientFrame(Conn& c, FrameHeader h, Bytes payload) {
  if (c.state == ConnState::kAuthenticating) {
    if (h.kind != FrameKind::kBindAck || h.errno_code != 0) {
      return CloseConn(c, Error{EPROTO, "unexpected frame while binding to " + c.remote_addr}, true);
    }
    c.state = ConnState::kReady;
    auto waiting = std::move(c.waiting);
    const uint64_t id = c.id;
    for (uint64_t op : waiting) {
      Conn* cur = FindConn(id);  // callbacks may have closed it
      if (cur == nullptr || cur->state != ConnState::kReady) {
        FailOp(op, Error{ECONNRESET, "connection closed"});
        continue;
      }
      RunOnConn(op, *cur);
    }
    return;
  }
  if (h.kind != FrameKind::kReply) {
    Log()->warn("dropping unexpected frame kind {} from {}", static_cast<int>(h.kind),
                c.remote_addr);
    return;
  }
  Op* op = FindOp(h.call_id);
  if (op == nullptr || op->kind != OpKind::kCall || op->conn_id != c.id) return;  // late reply
  auto done = TakeOp(h.call_id);
  auto& cb = std::get<Callback<Bytes>>(done->done);
  if (h.errno_code != 0) {
    cb(Err(h.errno_code, h.context.empty() ? "remote error" : h.context));
  } else {
    cb(std::move(payload));
  }
}

// --- Core: public entry points ------------------------------------------------

void Core::Handle(uint16_t method, RpcHandler handler) {
  Post([this, method, h = std::move(handler)]() mutable { handlers_[method] = std::move(h); });
}

Result<std::string> Core::Listen(const std::string& addr) {
  auto sa = ucx::ParseAddress(addr);
  if (!sa) return Err(sa.error());
  std::promise<Result<std::string>> done;
  auto f = done.get_future();
  const bool posted = Post([this, sa = *sa, &done] {
    auto port = boot_->Listen(sa.get(), sa.len);
    if (!port) {
      done.set_value(Err(port.error().code, port.error().context));
      return;
    }
    const std::string host = sa.host.find(':') != std::string::npos ? "[" + sa.host + "]" : sa.host;
    Log()->info("listening on {}:{}", host, *port);
    done.set_value(host + ":" + std::to_string(*port));
  });
  if (!posted) return Err(ESHUTDOWN, "transport is shut down");
  return f.get();
}

std::shared_ptr<Endpoint> Core::GetEndpoint(const std::string& addr) {
  std::lock_guard lock(endpoints_mu_);
  if (endpoints_closed_) {
    // Not cached (would keep the Core alive in a cycle); its operations fail with ESHUTDOWN.
    return std::make_shared<EndpointImpl>(shared_from_this(), addr, ucx::ParseAddress(addr));
  }
  auto& ep = endpoints_[addr];
  if (!ep) ep = std::make_shared<EndpointImpl>(shared_from_this(), addr, ucx::ParseAddress(addr));
  return ep;
}

Result<std::unique_ptr<LocalRegion>> Core::MapMemory(void* addr, size_t len, bool allocate) {
  if (len == 0) return Err(EINVAL, "cannot register an empty region");
  if (!allocate && addr == nullptr) return Err(EINVAL, "cannot register a null address");
  {
    std::lock_guard lock(regions_mu_);
    if (!worker_alive_) return Err(ESHUTDOWN, "transport is shut down");
  }
  ucp_mem_map_params_t p{};
  p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                 UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  p.address = allocate ? nullptr : addr;
  p.length = len;
  p.flags = allocate ? UCP_MEM_MAP_ALLOCATE : 0;
  ucp_mem_h memh = nullptr;
  ucs_status_t s = ucp_mem_map(ctx_->h, &p, &memh);
  if (s != UCS_OK) return Err(ucx::StatusErrno(s) == ENOMEM ? ENOMEM : EIO,
                              std::string("ucp_mem_map: ") + ucs_status_string(s));
  ucp_mem_attr_t a{};
  a.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  s = ucp_mem_query(memh, &a);
  void* base = allocate ? a.address : addr;
  if (s != UCS_OK || base == nullptr || (allocate && a.length < len) ||
      (allocate && reinterpret_cast<uintptr_t>(base) % 8 != 0)) {
    ucp_mem_unmap(ctx_->h, memh);
    return Err(EIO, "ucp_mem_query: unusable region");
  }
  if (allocate) std::memset(base, 0, len);
  void* rkey_buf = nullptr;
  size_t rkey_len = 0;
  s = ucp_rkey_pack(ctx_->h, memh, &rkey_buf, &rkey_len);
  if (s != UCS_OK) {
    ucp_mem_unmap(ctx_->h, memh);
    return Err(EIO, std::string("ucp_rkey_pack: ") + ucs_status_string(s));
  }
  RegionDesc desc;
  desc.addr = reinterpret_cast<uint64_t>(base);
  desc.length = len;
  const auto* kb = static_cast<const std::byte*>(rkey_buf);
  desc.rkey.assign(kb, kb + rkey_len);
  ucp_rkey_buffer_release(rkey_buf);
  return std::make_unique<LocalRegionImpl>(ctx_, memh, static_cast<std::byte*>(base), len,
                                           std::move(desc));
}

// --- EndpointImpl -----------------------------------------------------------

std::unique_ptr<Op> EndpointImpl::NewOp(OpKind kind, AnyCallback done, Timeout timeout) {
  auto op = std::make_unique<Op>();
  op->id = core_->NextId();
  op->kind = kind;
  op->done = std::move(done);
  op->deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  op->ep = shared_from_this();
  return op;
}

void EndpointImpl::Connect(Timeout timeout, Callback<void> done) {
  auto op = NewOp(OpKind::kConnect, std::move(done), timeout);
  Core* core = core_.get();
  const uint64_t id = op->id;
  op->start = [core, id](Conn&) { core->CompleteOp(id, UCS_OK, 0); };
  core_->Submit(std::move(op));
}

void EndpointImpl::Call(uint16_t method, Bytes payload, Timeout timeout, Callback<Bytes> done) {
  if (payload.size() > core_->opts().max_message_bytes) {
    done(Err(EMSGSIZE, "request of " + std::to_string(payload.size()) + " bytes over the limit"));
    return;
  }
  auto op = NewOp(OpKind::kCall, std::move(done), timeout);
  Core* core = core_.get();
  const uint64_t id = op->id;
  const auto deadline = op->deadline;
  op->start = [core, id, method, deadline, payload = std::move(payload)](Conn& c) mutable {
    FrameHeader h;
    h.kind = FrameKind::kRequest;
    h.call_id = id;
    h.method = method;
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
    h.timeout_us = static_cast<uint64_t>(std::max<int64_t>(left.count(), 0));
    core->Send(c, std::move(h), std::move(payload), id);
  };
  core_->Submit(std::move(op));
}

Result<std::shared_ptr<RemoteRegion>> EndpointImpl::Import(const RegionDesc& desc) {
  if (desc.rkey.empty() || desc.length == 0 || desc.addr + desc.length < desc.addr) {
    return Err(EINVAL, "malformed region descriptor");
  }
  auto r = std::make_shared<RemoteRegionImpl>(core_, this, desc);
  if (Status st = core_->AddRegion(r.get()); !st) return Err(st.error());
  return r;
}

Result<std::shared_ptr<RemoteRegionImpl>> EndpointImpl::Check(const RemoteRegion& r,
                                                              uint64_t offset, size_t len,
                                                              bool atomic) const {
  const auto* impl = dynamic_cast<const RemoteRegionImpl*>(&r);
  if (impl == nullptr || impl->owner() != this) {
    return Err(EINVAL, "region was not imported on this endpoint");
  }
  const uint64_t size = impl->desc().length;
  if (offset > size || len > size - offset) {
    return Err(EINVAL, "access [" + std::to_string(offset) + ", +" + std::to_string(len) +
                           ") outside the region of " + std::to_string(size) + " bytes");
  }
  if (atomic && (impl->desc().addr + offset) % 8 != 0) {
    return Err(EINVAL, "atomic on a word that is not 8-byte aligned");
  }
  return std::const_pointer_cast<RemoteRegionImpl>(impl->shared_from_this());
}

void EndpointImpl::Put(const void* src, size_t len, const RemoteRegion& dst, uint64_t offset,
                       Timeout timeout, Callback<void> done) {
  auto region = Check(dst, offset, len, false);
  if (!region) return done(Err(region.error()));
  auto op = NewOp(OpKind::kPut, std::move(done), timeout);
  op->region = *region;
  Core* core = core_.get();
  const uint64_t id = op->id;
  RemoteRegionImpl* r = region->get();
  op->start = [core, id, r, src, len, offset](Conn& c) {
    Error err;
    ucp_rkey_h rkey = core->RkeyFor(*r, c, &err);
    if (rkey == nullptr) return core->FailOp(id, std::move(err));
    if (!core->ucx().put_remote_completion) {
      // Local completion only: the callback of the put itself.
      auto* req = new OpReq{core, id};
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.send = &OpReqCallback;
      p.user_data = req;
      void* put = ucp_put_nbx(c.ep, src, len, r->desc().addr + offset, rkey, &p);
      if (UCS_PTR_IS_PTR(put)) return;
      delete req;
      return core->CompleteOp(id, UCS_PTR_STATUS(put), 0);
    }
    ucp_request_param_t p{};
    void* put = ucp_put_nbx(c.ep, src, len, r->desc().addr + offset, rkey, &p);
    if (UCS_PTR_IS_ERR(put)) return core->CompleteOp(id, UCS_PTR_STATUS(put), 0);
    if (put != nullptr) ucp_request_free(put);  // released by UCX when done
    // Remote completion: the flush completes once the data is at the target.
    auto* req = new OpReq{core, id};
    ucp_request_param_t fp{};
    fp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    fp.cb.send = &OpReqCallback;
    fp.user_data = req;
    void* flush = ucp_ep_flush_nbx(c.ep, &fp);
    if (UCS_PTR_IS_PTR(flush)) return;
    delete req;
    core->CompleteOp(id, UCS_PTR_STATUS(flush), 0);
  };
  core_->Submit(std::move(op));
}

void EndpointImpl::Get(void* dst, size_t len, const RemoteRegion& src, uint64_t offset,
                       Timeout timeout, Callback<void> done) {
  auto region = Check(src, offset, len, false);
  if (!region) return done(Err(region.error()));
  auto op = NewOp(OpKind::kGet, std::move(done), timeout);
  op->region = *region;
  Core* core = core_.get();
  const uint64_t id = op->id;
  RemoteRegionImpl* r = region->get();
  op->start = [core, id, r, dst, len, offset](Conn& c) {
    Error err;
    ucp_rkey_h rkey = core->RkeyFor(*r, c, &err);
    if (rkey == nullptr) return core->FailOp(id, std::move(err));
    auto* req = new OpReq{core, id};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &OpReqCallback;
    p.user_data = req;
    void* get = ucp_get_nbx(c.ep, dst, len, r->desc().addr + offset, rkey, &p);
    if (UCS_PTR_IS_PTR(get)) return;
    delete req;
    core->CompleteOp(id, UCS_PTR_STATUS(get), 0);
  };
  core_->Submit(std::move(op));
}

void StartAtomic(Core* core, uint64_t id, RemoteRegionImpl* r, uint64_t offset,
                 ucp_atomic_op_t opcode, uint64_t operand, uint64_t value, Conn& c) {
  Error err;
  ucp_rkey_h rkey = core->RkeyFor(*r, c, &err);
  if (rkey == nullptr) return core->FailOp(id, std::move(err));
  auto* req = new OpReq{core, id, operand, value};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
  p.cb.send = &OpReqCallback;
  p.user_data = req;
  p.datatype = ucp_dt_make_contig(8);
  p.reply_buffer = &req->value;
  void* a = ucp_atomic_op_nbx(c.ep, opcode, &req->operand, 1, r->desc().addr + offset, rkey, &p);
  if (UCS_PTR_IS_PTR(a)) return;
  const uint64_t v = req->value;
  delete req;
  core->CompleteOp(id, UCS_PTR_STATUS(a), v);
}

void EndpointImpl::FetchAdd(const RemoteRegion& region, uint64_t offset, uint64_t add,
                            Timeout timeout, Callback<uint64_t> done) {
  auto r = Check(region, offset, 8, true);
  if (!r) return done(Err(r.error()));
  auto op = NewOp(OpKind::kAtomic, std::move(done), timeout);
  op->region = *r;
  Core* core = core_.get();
  const uint64_t id = op->id;
  RemoteRegionImpl* raw = r->get();
  op->start = [core, id, raw, offset, add](Conn& c) {
    StartAtomic(core, id, raw, offset, UCP_ATOMIC_OP_ADD, add, 0, c);
  };
  core_->Submit(std::move(op));
}

void EndpointImpl::CompareSwap(const RemoteRegion& region, uint64_t offset, uint64_t expected,
                               uint64_t desired, Timeout timeout, Callback<uint64_t> done) {
  auto r = Check(region, offset, 8, true);
  if (!r) return done(Err(r.error()));
  auto op = NewOp(OpKind::kAtomic, std::move(done), timeout);
  op->region = *r;
  Core* core = core_.get();
  const uint64_t id = op->id;
  RemoteRegionImpl* raw = r->get();
  // CSWAP: buffer = compare value; reply_buffer = new value in, old value out.
  op->start = [core, id, raw, offset, expected, desired](Conn& c) {
    StartAtomic(core, id, raw, offset, UCP_ATOMIC_OP_CSWAP, expected, desired, c);
  };
  core_->Submit(std::move(op));
}

void EndpointImpl::Disconnect() {
  Core* core = core_.get();
  core_->Post([core, self = shared_from_this()] { core->DisconnectEndpoint(self.get()); });
}

// --- UcxTransport -----------------------------------------------------------

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  ~UcxTransport() override { Shutdown(); }

  void Handle(uint16_t method, RpcHandler handler) override {
    core_->Handle(method, std::move(handler));
  }
  Result<std::string> Listen(const std::string& addr) override { return core_->Listen(addr); }
  std::shared_ptr<Endpoint> GetEndpoint(const std::string& addr) override {
    return core_->GetEndpoint(addr);
  }
  Result<std::unique_ptr<LocalRegion>> Register(void* addr, size_t len) override {
    return core_->MapMemory(addr, len, false);
  }
  Result<std::unique_ptr<LocalRegion>> Allocate(size_t len) override {
    return core_->MapMemory(nullptr, len, true);
  }
  void Shutdown() override { core_->Shutdown(); }

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace

Result<std::unique_ptr<Transport>> MakeUcxTransport(const UcxOptions& ucx,
                                                    const TransportOptions& opts) {
  if (opts.cluster_key.size() != kClusterKeyBytes) {
    return Err(EINVAL, "cluster key must be " + std::to_string(kClusterKeyBytes) + " bytes");
  }
  auto core = std::make_shared<Core>(ucx, opts);
  if (Status st = core->Start(); !st) {
    core->Shutdown();
    return Err(st.error());
  }
  return std::unique_ptr<Transport>(std::make_unique<UcxTransport>(std::move(core)));
}

// --- raw sender for tests ----------------------------------------------------

namespace {

struct RawState {
  bool failed = false;
  ucs_status_t status = UCS_OK;
};

void RawErr(void* arg, ucp_ep_h, ucs_status_t s) {
  auto* st = static_cast<RawState*>(arg);
  st->failed = true;
  st->status = s;
}

// Progresses until req completes or `until`; true if it completed.
bool RawWait(ucp_worker_h w, void* req, Clock::time_point until) {
  if (!UCS_PTR_IS_PTR(req)) return true;
  while (ucp_request_check_status(req) == UCS_INPROGRESS) {
    if (Clock::now() > until) return false;
    ucp_worker_progress(w);
  }
  ucp_request_free(req);
  return true;
}

}  // namespace

Status UcxSendRawForTest(const UcxOptions& /*ucx*/, const std::string& addr, const Bytes& header,
                         const Bytes& payload) {
  auto sa = ucx::ParseAddress(addr);
  if (!sa) return Err(sa.error());
  const int fd = ::socket(sa->get()->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Err(errno, "socket");
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd, sa->get(), sa->len) != 0) {
    ::close(fd);
    return Err(EHOSTDOWN, "connect to " + addr);
  }
  Bytes msg;
  for (uint32_t v : {static_cast<uint32_t>(header.size()), static_cast<uint32_t>(payload.size())}) {
    for (int sh = 24; sh >= 0; sh -= 8) msg.push_back(static_cast<std::byte>((v >> sh) & 0xff));
  }
  msg.insert(msg.end(), header.begin(), header.end());
  msg.insert(msg.end(), payload.begin(), payload.end());
  // The server may close the connection before it has read everything (it
  // refuses a frame by its lengths): a reset while sending counts as sent.
  Status result = Ok();
  if (::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL) < 0 && errno != EPIPE &&
      errno != ECONNRESET) {
    result = Err(EHOSTDOWN, "send to " + addr + ": " + std::strerror(errno));
  }
  // Give the server time to see the message before the connection goes away.
  std::byte sink[256];
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  tv = {0, 50000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  while (Clock::now() < until && ::recv(fd, sink, sizeof sink, 0) != 0) {
  }
  ::close(fd);
  return result;
}

Status UcxSendUnboundForTest(const UcxOptions& ucx_opts, const Bytes& key, const std::string& addr,
                             const Bytes& header, const Bytes& payload) {
  auto sa = ucx::ParseAddress(addr);
  if (!sa) return Err(sa.error());
  // 1. Authenticate on the bootstrap like a real client, to learn the address.
  std::optional<Result<Bytes>> got;
  BootstrapOptions bo;
  bo.cluster_key = key;
  BootstrapCallbacks bc;
  bc.connected = [&](uint64_t, Bytes address, Bytes) { got = std::move(address); };
  bc.closed = [&](uint64_t, Error e) { got = Err(std::move(e)); };
  auto boot = Bootstrap::Create(bo, bc);
  if (!boot) return Err(boot.error());
  const auto until = Clock::now() + std::chrono::seconds(5);
  const uint64_t link = (*boot)->Connect(sa->get(), sa->len, addr, until);
  while (!got && Clock::now() < until) {
    (*boot)->Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!got) return Err(ETIMEDOUT, "bootstrap handshake with " + addr);
  if (!*got) return Err(got->error());
  const Bytes address = **got;
  // 2. A UCP endpoint of our own to that worker, never bound.
  auto ctx = ucx::CreateContext(ucx_opts);
  if (!ctx) return Err(ctx.error());
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h w = nullptr;
  if (ucp_worker_create((*ctx)->h, &wp, &w) != UCS_OK) return Err(EIO, "ucp_worker_create");
  // Whatever the server answers is dropped (UCX needs a handler for the id).
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
  hp.id = kAmId;
  hp.cb = [](void*, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
    return UCS_OK;
  };
  ucp_worker_set_am_recv_handler(w, &hp);
  RawState state;
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                 UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.address = reinterpret_cast<const ucp_address_t*>(address.data());
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = &RawErr;
  p.err_handler.arg = &state;
  ucp_ep_h ep = nullptr;
  Status result = Ok();
  if (ucp_ep_create(w, &p, &ep) != UCS_OK) {
    ucp_worker_destroy(w);
    return Err(EHOSTDOWN, "connect to the UCX worker of " + addr);
  }
  const auto send_until = Clock::now() + std::chrono::seconds(5);
  ucp_request_param_t sp{};
  sp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  sp.flags = UCP_AM_SEND_FLAG_REPLY;
  void* req = ucp_am_send_nbx(ep, kAmId, header.empty() ? nullptr : header.data(), header.size(),
                              payload.empty() ? nullptr : payload.data(), payload.size(), &sp);
  if (UCS_PTR_IS_ERR(req)) {
    result = Err(EHOSTDOWN, std::string("send: ") + ucs_status_string(UCS_PTR_STATUS(req)));
  } else if (!RawWait(w, req, send_until)) {
    result = Err(ETIMEDOUT, "raw send did not complete");
  }
  const auto linger = std::min(send_until, Clock::now() + std::chrono::milliseconds(200));
  while (Clock::now() < linger && !state.failed) ucp_worker_progress(w);
  ucp_request_param_t cp{};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  RawWait(w, ucp_ep_close_nbx(ep, &cp), Clock::now() + std::chrono::seconds(2));
  ucp_worker_destroy(w);
  (*boot)->Close(link);
  return result;
}

}  // namespace fedfs::m2m
