// UcxTransport's raw senders for tests (m2m/ucx_transport.h).
#include "m2m/ucx_core.h"

namespace fedfs::m2m {

using ucx::Clock;
using ucx::kAmId;

std::vector<std::pair<int, int>> UcxStatusErrnosForTest() {
  std::vector<std::pair<int, int>> out;
  for (int s = UCS_ERR_LAST; s <= UCS_OK; ++s) {
    out.emplace_back(s, ucx::StatusErrno(static_cast<ucs_status_t>(s)));
  }
  return out;
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
