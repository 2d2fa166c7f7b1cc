// UcxTransport: see m2m/ucx_transport.h for the contract and
// m2m/ucx_core.h for the structure. This file: Endpoint operations and the
// Transport object.
#include "m2m/ucx_core.h"

namespace fedfs::m2m {
namespace ucx {

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
  if (desc.rkey.size() <= kInstanceBytes || desc.length == 0 ||
      desc.addr + desc.length < desc.addr) {
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

namespace {

// Parameters of a one-sided request whose completion OpReqCallback reports.
ucp_request_param_t ReqParam(OpReq* req) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &OpReqCallback;
  p.user_data = req;
  return p;
}

// Completes op `id` now unless UCX returned a request (OpReqCallback then does).
void Finish(Core* core, uint64_t id, void* r, OpReq* req) {
  if (UCS_PTR_IS_PTR(r)) return;
  const uint64_t v = req->value;
  delete req;
  core->CompleteOp(id, UCS_PTR_STATUS(r), v);
}

void StartAtomic(Core* core, uint64_t id, uint64_t raddr, ucp_rkey_h rkey, Conn& c,
                 ucp_atomic_op_t opcode, uint64_t operand, uint64_t value) {
  auto* req = new OpReq{core, id, operand, value};
  ucp_request_param_t p = ReqParam(req);
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
  p.datatype = ucp_dt_make_contig(8);
  p.reply_buffer = &req->value;
  Finish(core, id, ucp_atomic_op_nbx(c.ep, opcode, &req->operand, 1, raddr, rkey, &p), req);
}

}  // namespace

template <typename Done>
void EndpointImpl::SubmitOneSided(OpKind kind, Done done, Timeout timeout,
                                  const RemoteRegion& region, uint64_t offset, size_t len,
                                  bool atomic, Issue issue) {
  auto r = Check(region, offset, len, atomic);
  if (!r) return done(Err(r.error()));
  auto op = NewOp(kind, std::move(done), timeout);
  op->region = *r;
  Core* core = core_.get();
  const uint64_t id = op->id;
  RemoteRegionImpl* raw = r->get();
  op->start = [core, id, raw, offset, issue = std::move(issue)](Conn& c) mutable {
    Error err;
    ucp_rkey_h rkey = core->RkeyFor(*raw, c, &err);
    if (rkey == nullptr) return core->FailOp(id, std::move(err));
    issue(core, id, raw->desc().addr + offset, rkey, c);
  };
  core_->Submit(std::move(op));
}

void EndpointImpl::Put(const void* src, size_t len, const RemoteRegion& dst, uint64_t offset,
                       Timeout timeout, Callback<void> done) {
  SubmitOneSided(OpKind::kPut, std::move(done), timeout, dst, offset, len, false,
                 [src, len](Core* core, uint64_t id, uint64_t raddr, ucp_rkey_h rkey, Conn& c) {
    if (!core->ucx().put_remote_completion) {
      // Local completion only: the callback of the put itself.
      auto* req = new OpReq{core, id};
      ucp_request_param_t p = ReqParam(req);
      return Finish(core, id, ucp_put_nbx(c.ep, src, len, raddr, rkey, &p), req);
    }
    ucp_request_param_t p{};
    void* put = ucp_put_nbx(c.ep, src, len, raddr, rkey, &p);
    if (UCS_PTR_IS_ERR(put)) return core->CompleteOp(id, UCS_PTR_STATUS(put), 0);
    if (put != nullptr) ucp_request_free(put);  // released by UCX when done
    // Remote completion: the flush completes once the data is at the target.
    auto* req = new OpReq{core, id};
    ucp_request_param_t fp = ReqParam(req);
    Finish(core, id, ucp_ep_flush_nbx(c.ep, &fp), req);
  });
}

void EndpointImpl::Get(void* dst, size_t len, const RemoteRegion& src, uint64_t offset,
                       Timeout timeout, Callback<void> done) {
  SubmitOneSided(OpKind::kGet, std::move(done), timeout, src, offset, len, false,
                 [dst, len](Core* core, uint64_t id, uint64_t raddr, ucp_rkey_h rkey, Conn& c) {
    auto* req = new OpReq{core, id};
    ucp_request_param_t p = ReqParam(req);
    Finish(core, id, ucp_get_nbx(c.ep, dst, len, raddr, rkey, &p), req);
  });
}

void EndpointImpl::FetchAdd(const RemoteRegion& region, uint64_t offset, uint64_t add,
                            Timeout timeout, Callback<uint64_t> done) {
  SubmitOneSided(OpKind::kAtomic, std::move(done), timeout, region, offset, 8, true,
                 [add](Core* core, uint64_t id, uint64_t raddr, ucp_rkey_h rkey, Conn& c) {
    StartAtomic(core, id, raddr, rkey, c, UCP_ATOMIC_OP_ADD, add, 0);
  });
}

void EndpointImpl::CompareSwap(const RemoteRegion& region, uint64_t offset, uint64_t expected,
                               uint64_t desired, Timeout timeout, Callback<uint64_t> done) {
  // CSWAP: buffer = compare value; reply_buffer = new value in, old value out.
  SubmitOneSided(OpKind::kAtomic, std::move(done), timeout, region, offset, 8, true,
                 [expected, desired](Core* core, uint64_t id, uint64_t raddr, ucp_rkey_h rkey,
                                     Conn& c) {
    StartAtomic(core, id, raddr, rkey, c, UCP_ATOMIC_OP_CSWAP, expected, desired);
  });
}

void EndpointImpl::Disconnect() {
  Core* core = core_.get();
  core_->Post([core, self = shared_from_this()] { core->DisconnectEndpoint(self.get()); });
}

}  // namespace ucx

namespace {

using ucx::Core;

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

}  // namespace fedfs::m2m
