// The fake network: an endpoint (see m2m/fake_internal.h).
#include "m2m/fake_internal.h"

namespace fedfs::m2m {

namespace fake {

// ---------------------------------------------------------------------------
// FakeEndpoint.

void FakeEndpoint::Fail(Op& op, const Error& e) {
  std::visit(
      [&](auto& cb) {
        if (cb) cb(Err(e));
      },
      op.done);
}

bool FakeEndpoint::Take(uint64_t id, Op* out) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return false;
  *out = std::move(it->second);
  ops_.erase(it);
  core_->sched.Cancel(out->timer);
  return true;
}

template <class Pred>
void FakeEndpoint::FailWhere(Pred pred, const Error& e) {
  std::vector<Op> failed;
  for (auto it = ops_.begin(); it != ops_.end();) {
    if (pred(it->second)) {
      core_->sched.Cancel(it->second.timer);
      failed.push_back(std::move(it->second));
      it = ops_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& op : failed) Fail(op, e);  // after the table is consistent
}

void FakeEndpoint::Submit(Op op, Timeout timeout, Status early) {
  if (core_->sched.stopped()) {
    Fail(op, Error{ESHUTDOWN, "fake network is gone"});
    return;
  }
  core_->sched.Schedule(SimDuration::zero(), [self = shared_from_this(), op = std::move(op),
                                              timeout, early = std::move(early)]() mutable {
    if (!early) {
      Fail(op, early.error());
    } else {
      self->Start(std::move(op), timeout);
    }
  });
}

void FakeEndpoint::Start(Op op, Timeout timeout) {
  if (owner_ == nullptr || owner_->shut_down_) {
    Fail(op, Error{ESHUTDOWN, "transport is shut down"});
    return;
  }
  if (op.kind == Kind::kCall && op.payload.size() > owner_->opts_.max_message_bytes) {
    Fail(op, Error{EMSGSIZE, "request of " + std::to_string(op.payload.size()) +
                                 " bytes over max_message_bytes"});
    return;
  }
  if (op.kind == Kind::kConnect && state_ == State::kConnected) {
    std::get<Callback<void>>(op.done)(Ok());
    return;
  }
  if (timeout < Timeout::zero()) timeout = Timeout::zero();
  if (op.kind == Kind::kPut || op.kind == Kind::kGet || op.kind == Kind::kFetchAdd ||
      op.kind == Kind::kCompareSwap) {
    ++owner_->stats_.one_sided_ops;
  }
  const uint64_t id = next_op_++;
  op.deadline = core_->sched.Now() + timeout;
  op.timer = core_->sched.Schedule(timeout, [w = weak_from_this(), id] {
    if (auto ep = w.lock()) ep->OnTimeout(id);
  });
  ops_.emplace(id, std::move(op));
  switch (state_) {
    case State::kConnected:
      SendOp(id);
      break;
    case State::kIdle:
      StartConnect(timeout);
      break;
    case State::kConnecting:
      // Sent when the handshake completes; the attempt may last as long as
      // this operation allows (within connect_timeout).
      ExtendConnect(ops_.at(id).deadline);
      break;
  }
}

void FakeEndpoint::StartConnect(SimDuration limit) {
  auto& core = *core_;
  FakeTransport* peer = core.FindByName(addr_);
  peer_ = peer ? peer->id_ : 0;
  conn_ = core.next_conn_id++;
  owner_->client_conns_[conn_] = this;
  state_ = State::kConnecting;
  handshake_ = std::make_unique<ClientHandshake>(owner_->opts_.cluster_key);
  connect_started_ = core.sched.Now();
  connect_deadline_ = connect_started_;
  connect_timer_ = 0;
  ExtendConnect(connect_started_ + limit);
  SendFrame(handshake_->Hello(), {});
}

void FakeEndpoint::ExtendConnect(SimDuration deadline) {
  deadline = std::min<SimDuration>(deadline, connect_started_ + owner_->opts_.connect_timeout);
  if (connect_timer_ != 0 && deadline <= connect_deadline_) return;
  core_->sched.Cancel(connect_timer_);
  connect_deadline_ = deadline;
  connect_timer_ = core_->sched.Schedule(deadline - core_->sched.Now(),
                                         [w = weak_from_this(), conn = conn_] {
                                           if (auto ep = w.lock()) ep->OnConnectTimeout(conn);
                                         });
}

void FakeEndpoint::SendFrame(const FrameHeader& h, Bytes payload, bool is_request) {
  Packet p;
  p.dst = peer_;
  p.conn = conn_;
  p.to_server = true;
  p.header = EncodeFrame(h);
  p.payload = std::move(payload);
  p.is_request = is_request;
  p.method = h.method;
  owner_->Send(std::move(p));
}

void FakeEndpoint::OnConnectTimeout(uint64_t conn) {
  connect_timer_ = 0;
  if (state_ != State::kConnecting || conn_ != conn) return;
  ConnectFailed(Error{ETIMEDOUT, "connect to " + addr_ + " timed out"});
}

void FakeEndpoint::ConnectFailed(const Error& e) {
  if (owner_ && conn_ != 0) {
    // Let the server forget the half-open connection.
    Packet r;
    r.dst = peer_;
    r.conn = conn_;
    r.to_server = true;
    r.kind = PacketKind::kReset;
    r.err = e.code;
    owner_->Send(std::move(r));
    owner_->client_conns_.erase(conn_);
  }
  core_->sched.Cancel(connect_timer_);
  connect_timer_ = 0;
  state_ = State::kIdle;
  conn_ = 0;
  handshake_.reset();
  FailWhere([](const Op& op) { return op.conn == 0; }, e);
}

void FakeEndpoint::OnConnected() {
  core_->sched.Cancel(connect_timer_);
  connect_timer_ = 0;
  state_ = State::kConnected;
  handshake_.reset();
  std::vector<uint64_t> waiting;
  for (auto& [id, op] : ops_) {
    if (op.conn == 0) waiting.push_back(id);
  }
  for (uint64_t id : waiting) {
    auto it = ops_.find(id);
    if (it == ops_.end() || state_ != State::kConnected) continue;
    if (it->second.kind == Kind::kConnect) {
      Op op;
      if (Take(id, &op)) std::get<Callback<void>>(op.done)(Ok());
    } else {
      SendOp(id);
    }
  }
}

void FakeEndpoint::SendOp(uint64_t id) {
  Op& op = ops_.at(id);
  op.conn = conn_;
  if (op.kind == Kind::kCall) {
    FrameHeader h;
    h.kind = FrameKind::kRequest;
    h.call_id = id;
    h.method = op.method;
    const SimDuration left = std::max(SimDuration::zero(), op.deadline - core_->sched.Now());
    h.timeout_us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(left).count());
    h.payload_size = op.payload.size();
    SendFrame(h, std::move(op.payload), /*is_request=*/true);
    return;
  }
  Packet p;
  p.dst = peer_;
  p.conn = conn_;
  p.to_server = true;
  p.kind = PacketKind::kOneSidedRequest;
  p.op_id = id;
  p.region = op.region;
  p.tag = op.tag;
  p.addr = op.addr;
  p.len = op.len;
  p.a = op.a;
  p.b = op.b;
  switch (op.kind) {
    case Kind::kPut:
      p.op = OneSided::kPut;
      p.payload = std::move(op.payload);
      break;
    case Kind::kGet:
      p.op = OneSided::kGet;
      break;
    case Kind::kFetchAdd:
      p.op = OneSided::kFetchAdd;
      break;
    default:
      p.op = OneSided::kCompareSwap;
      break;
  }
  owner_->Send(std::move(p));
}

void FakeEndpoint::OnTimeout(uint64_t id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return;
  Op op = std::move(it->second);
  ops_.erase(it);  // its timer is the one running: nothing to cancel
  Fail(op, Error{ETIMEDOUT, "operation on " + addr_ + " timed out"});
}

void FakeEndpoint::OnPacket(Packet p) {
  if (p.conn != conn_ || state_ == State::kIdle) return;
  switch (p.kind) {
    case PacketKind::kReset:
      if (state_ == State::kConnecting) {
        owner_->client_conns_.erase(conn_);
        conn_ = 0;  // the server already forgot it: no reset back
        ConnectFailed(Error{p.err ? p.err : ECONNREFUSED, "connect to " + addr_ + " refused"});
      } else {
        Break(ECONNRESET, "connection to " + addr_ + " reset by peer", /*notify=*/false);
      }
      return;
    case PacketKind::kOneSidedDone: {
      Op op;
      if (!Take(p.op_id, &op)) return;  // timed out already
      if (p.err != 0) {
        Fail(op, Error{p.err, "one-sided operation on " + addr_});
        return;
      }
      switch (op.kind) {
        case Kind::kGet:
          if (!p.payload.empty()) std::memcpy(op.dst, p.payload.data(), p.payload.size());
          std::get<Callback<void>>(op.done)(Ok());
          break;
        case Kind::kPut:
          std::get<Callback<void>>(op.done)(Ok());
          break;
        default:
          std::get<Callback<uint64_t>>(op.done)(p.a);
          break;
      }
      return;
    }
    case PacketKind::kOneSidedRequest:
      return;
    case PacketKind::kFrame:
      break;
  }
  auto h = DecodeFrame(p.header, p.payload.size(), owner_->opts_.max_message_bytes);
  if (!h) {
    ++owner_->stats_.malformed_frames;
    Log().warn("{}: dropped a frame from {}: {}", owner_->name_, addr_, h.error().ToString());
    return;
  }
  switch (h->kind) {
    case FrameKind::kAuthChallenge: {
      if (state_ != State::kConnecting || !handshake_) return;
      auto proof = handshake_->OnChallenge(*h);
      if (!proof) {
        ++owner_->stats_.auth_failures;
        Log().warn("{}: refused {}: {}", owner_->name_, addr_, proof.error().ToString());
        ConnectFailed(proof.error());
        return;
      }
      SendFrame(*proof, {});
      return;
    }
    case FrameKind::kAuthResult: {
      if (state_ != State::kConnecting || !handshake_) return;
      Status verdict = handshake_->OnResult(*h);
      if (!verdict) {
        Log().warn("{}: {} refused us: {}", owner_->name_, addr_, verdict.error().ToString());
        owner_->client_conns_.erase(conn_);
        conn_ = 0;  // the server dropped the connection already
        ConnectFailed(verdict.error());
        return;
      }
      OnConnected();
      return;
    }
    case FrameKind::kReply: {
      auto it = ops_.find(h->call_id);
      if (it == ops_.end() || it->second.kind != Kind::kCall) return;  // late reply
      Op op;
      Take(h->call_id, &op);
      auto& cb = std::get<Callback<Bytes>>(op.done);
      if (h->errno_code != 0) {
        cb(Err(h->errno_code, h->context.empty() ? "call to " + addr_ + " failed" : h->context));
      } else {
        cb(std::move(p.payload));
      }
      return;
    }
    default:
      Log().warn("{}: unexpected frame kind {} from {}", owner_->name_, static_cast<int>(h->kind),
                 addr_);
      return;
  }
}

void FakeEndpoint::Break(int code, const std::string& why, bool notify) {
  if (state_ == State::kIdle) return;
  if (owner_) {
    if (notify) {
      Packet r;
      r.dst = peer_;
      r.conn = conn_;
      r.to_server = true;
      r.kind = PacketKind::kReset;
      r.err = code;
      owner_->Send(std::move(r));
    }
    owner_->client_conns_.erase(conn_);
  }
  core_->sched.Cancel(connect_timer_);
  connect_timer_ = 0;
  state_ = State::kIdle;
  conn_ = 0;
  handshake_.reset();
  FailWhere([](const Op&) { return true; }, Error{code, why});
}

void FakeEndpoint::OnOwnerShutdown() {
  if (state_ != State::kIdle) Break(ESHUTDOWN, "transport is shut down", /*notify=*/true);
  FailWhere([](const Op&) { return true; }, Error{ESHUTDOWN, "transport is shut down"});
  owner_ = nullptr;
}

// --- Endpoint public methods (any thread) -----------------------------------

void FakeEndpoint::Connect(Timeout timeout, Callback<void> done) {
  Op op;
  op.kind = Kind::kConnect;
  op.done = std::move(done);
  Submit(std::move(op), timeout);
}

void FakeEndpoint::Call(uint16_t method, Bytes payload, Timeout timeout, Callback<Bytes> done) {
  Op op;
  op.kind = Kind::kCall;
  op.done = std::move(done);
  op.method = method;
  op.payload = std::move(payload);
  Submit(std::move(op), timeout);
}

Result<std::shared_ptr<RemoteRegion>> FakeEndpoint::Import(const RegionDesc& desc) {
  if (desc.rkey.size() != kRkeyBytes || GetU64(desc.rkey.data()) != kRkeyMagic) {
    return Err(EINVAL, "not a fake-network region key");
  }
  if (desc.length == 0 || desc.addr + desc.length < desc.addr) {
    return Err(EINVAL, "region descriptor with a bad range");
  }
  return std::make_shared<FakeRemoteRegion>(desc, GetU64(desc.rkey.data() + 8),
                                            GetU64(desc.rkey.data() + 16));
}

Status FakeEndpoint::CheckTarget(const RemoteRegion& r, uint64_t offset, uint64_t len,
                                 bool atomic, Op* op) {
  const auto* fr = dynamic_cast<const FakeRemoteRegion*>(&r);
  if (fr == nullptr) return Err(EINVAL, "region was not imported on a fake endpoint");
  const RegionDesc& d = fr->desc();
  if (offset > d.length || len > d.length - offset) {
    return Err(EINVAL, "[" + std::to_string(offset) + ", +" + std::to_string(len) +
                           ") outside a region of " + std::to_string(d.length) + " bytes");
  }
  op->region = fr->id();
  op->tag = fr->tag();
  op->addr = d.addr + offset;
  op->len = len;
  if (atomic && op->addr % 8 != 0) return Err(EINVAL, "atomic on a misaligned word");
  return Ok();
}

void FakeEndpoint::Put(const void* src, size_t len, const RemoteRegion& dst, uint64_t offset,
                       Timeout timeout, Callback<void> done) {
  Op op;
  op.kind = Kind::kPut;
  op.done = std::move(done);
  Status s = CheckTarget(dst, offset, len, false, &op);
  if (s && len > 0) {
    const auto* p = static_cast<const std::byte*>(src);
    op.payload.assign(p, p + len);  // the data leaves the caller's buffer now
  }
  Submit(std::move(op), timeout, std::move(s));
}

void FakeEndpoint::Get(void* dst, size_t len, const RemoteRegion& src, uint64_t offset,
                       Timeout timeout, Callback<void> done) {
  Op op;
  op.kind = Kind::kGet;
  op.done = std::move(done);
  op.dst = dst;
  Status s = CheckTarget(src, offset, len, false, &op);
  Submit(std::move(op), timeout, std::move(s));
}

void FakeEndpoint::FetchAdd(const RemoteRegion& region, uint64_t offset, uint64_t add,
                            Timeout timeout, Callback<uint64_t> done) {
  Op op;
  op.kind = Kind::kFetchAdd;
  op.done = std::move(done);
  op.a = add;
  Status s = CheckTarget(region, offset, 8, true, &op);
  Submit(std::move(op), timeout, std::move(s));
}

void FakeEndpoint::CompareSwap(const RemoteRegion& region, uint64_t offset, uint64_t expected,
                               uint64_t desired, Timeout timeout, Callback<uint64_t> done) {
  Op op;
  op.kind = Kind::kCompareSwap;
  op.done = std::move(done);
  op.a = expected;
  op.b = desired;
  Status s = CheckTarget(region, offset, 8, true, &op);
  Submit(std::move(op), timeout, std::move(s));
}

void FakeEndpoint::Disconnect() {
  if (core_->sched.stopped()) return;
  core_->sched.Schedule(SimDuration::zero(), [self = shared_from_this()] {
    self->Break(ECONNRESET, "disconnected", /*notify=*/true);
  });
}

}  // namespace fake

}  // namespace fedfs::m2m
