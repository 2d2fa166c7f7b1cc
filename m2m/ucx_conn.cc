// UcxTransport internals: operations, connections, sending, receiving, entry points (see m2m/ucx_core.h).
#include "m2m/ucx_core.h"

#include "common/errors.h"

namespace fedfs::m2m::ucx {

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
  c->peer_instance = InstanceOf(address);
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
    h.errno_code = AsErrno(reply.error().code);
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

void Core::OnEpError(ucp_ep_h ep, ucs_status_t s) {
  events_.emplace_back(std::in_place_type<EpErrorEvent>, EpErrorEvent{ep, s});
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
  // This instance first (kInstanceBytes, little-endian), then UCX's key.
  desc.rkey.resize(kInstanceBytes);
  for (size_t i = 0; i < kInstanceBytes; ++i) desc.rkey[i] = std::byte(instance_ >> (8 * i));
  const auto* kb = static_cast<const std::byte*>(rkey_buf);
  desc.rkey.insert(desc.rkey.end(), kb, kb + rkey_len);
  ucp_rkey_buffer_release(rkey_buf);
  return std::make_unique<LocalRegionImpl>(ctx_, memh, static_cast<std::byte*>(base), len,
                                           std::move(desc));
}

}  // namespace fedfs::m2m::ucx
