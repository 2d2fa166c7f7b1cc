// UcxTransport internals: lifecycle, the progress loop, timers, remote keys (see m2m/ucx_core.h).
#include "m2m/ucx_core.h"

namespace fedfs::m2m::ucx {

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
  instance_ = InstanceOf(bo.local_address);
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

namespace {
// A sched_yield that took this long ran another thread: see Run().
constexpr auto kContendedYield = std::chrono::microseconds(30);
}  // namespace

void Core::Run() {
  const auto spin = std::chrono::microseconds(ucx_.spin_us);
  const auto spin_pending = spin + std::chrono::microseconds(ucx_.spin_pending_us);
  // The gaps between bursts of work (from running out of work to the next
  // event), smoothed (1/4 of each new one). While events keep coming at
  // gaps shorter than spin_pending, the next one is waited for spinning
  // (twice the gap) rather than asleep: a client's next request, a
  // server's next call. Idle, the gap grows and the spin falls back.
  Clock::duration gap = std::chrono::seconds(1);
  Clock::time_point idle_since{};
  bool idle = false;
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
    if (work > 0) {
      if (idle) {
        gap = (3 * gap + (Clock::now() - idle_since)) / 4;
        idle = false;
      }
      continue;
    }
    if (!idle) {
      idle_since = Clock::now();
      idle = true;
    }

    bool busy = false;
    // Longer while an answer is due or events come at short gaps
    // (UcxOptions::spin_pending_us).
    const bool due = !ops_.empty() || serving_.load(std::memory_order_relaxed) > 0;
    Clock::duration limit = due ? spin_pending : spin;
    if (2 * gap < spin_pending && 2 * gap > limit) limit = 2 * gap;
    const auto spin_end = Clock::now() + limit;
    while (Clock::now() < spin_end) {
      if (has_work_.load(std::memory_order_acquire) || ucp_worker_progress(worker_) != 0) {
        busy = true;
        break;
      }
      // Let a thread that waits for this core run (e.g. the application
      // thread our last completion woke): on small machines the progress
      // threads would otherwise starve it for a whole time slice. A yield
      // that gave the core away for a while says the CPUs are busy: the
      // spin then ends (the time it takes is better spent by others).
      if (ucx_.spin_yield) {
        const auto before = Clock::now();
        sched_yield();
        if (Clock::now() - before > kContendedYield) break;
      }
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
  // Until the close requests finished and the worker has been idle for
  // kIdleBeforeDestroy: UCX 1.13 aborts in ucp_worker_destroy (an assertion
  // in ucp_request_send_state_ff, dropped upstream by openucx/ucx#8175) when
  // it purges a wireup message still pending on an endpoint that was being
  // connected as the transport closed (seen once: a peer's connection
  // authenticated during a daemon's SIGTERM). Idle progress lets such
  // messages go out first.
  const auto until = Clock::now() + kCloseGrace;
  auto active = Clock::now();
  while (Clock::now() < until) {
    DrainQueue();  // tasks posted before closed_: ops fail with ESHUTDOWN
    if (ucp_worker_progress(worker_) != 0) active = Clock::now();
    while (!events_.empty()) {
      // Frames and errors after shutdown are dropped.
      if (auto* rv = std::get_if<RndvEvent>(&events_.front())) {
        ucp_am_data_release(worker_, rv->desc);
      }
      events_.pop_front();
    }
    std::erase_if(closing_, [](void* req) {
      if (ucp_request_check_status(req) == UCS_INPROGRESS) return false;
      ucp_request_free(req);
      return true;
    });
    if (closing_.empty() && ops_.empty() && Clock::now() - active >= kIdleBeforeDestroy) break;
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
  // The region must be the connected process's: a descriptor of an earlier
  // process at this address names memory the new one never registered (and
  // over a software RMA path nothing else would refuse it).
  const Bytes& k = r.desc().rkey;
  uint64_t instance = 0;
  for (size_t i = 0; i < kInstanceBytes && i < k.size(); ++i) {
    instance |= uint64_t(std::to_integer<uint8_t>(k[i])) << (8 * i);
  }
  if (k.size() <= kInstanceBytes || (c.peer_instance != 0 && instance != c.peer_instance)) {
    *err = Error{ESTALE, "region of another instance of " + c.remote_addr};
    return nullptr;
  }
  const ucs_status_t s = ucp_ep_rkey_unpack(c.ep, k.data() + kInstanceBytes, &r.rkey_);
  if (s != UCS_OK) {
    r.rkey_ = nullptr;
    *err = Error{EINVAL, std::string("cannot unpack remote key: ") + ucs_status_string(s)};
    return nullptr;
  }
  r.rkey_conn_ = c.id;
  return r.rkey_;
}

}  // namespace fedfs::m2m::ucx
