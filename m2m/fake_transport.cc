// The fake network: a transport (see m2m/fake_internal.h).
#include "m2m/fake_internal.h"

#include "common/errors.h"

namespace fedfs::m2m {

namespace fake {

// ---------------------------------------------------------------------------
// FakeTransport.

Result<std::string> FakeTransport::Listen(const std::string& addr) {
  return core_->RunSync([&]() -> Result<std::string> {
    if (shut_down_) return Err(ESHUTDOWN, "transport is shut down");
    if (listening_) return Err(EINVAL, "already listening on " + name_);
    std::string name = addr;
    if (name.empty()) name = "fake:0";
    if (name.size() >= 2 && name.ends_with(":0")) {
      const std::string prefix = name.substr(0, name.size() - 1);
      do {
        name = prefix + std::to_string(core_->next_name++);
      } while (core_->names.contains(name));
    }
    if (auto it = core_->names.find(name); it != core_->names.end()) {
      FakeTransport* holder = core_->Find(it->second);
      if (holder && !holder->dead_) return Err(EADDRINUSE, "address " + name + " in use");
      if (holder) holder->replaced_ = true;  // a restarted process takes the name over
    }
    core_->names[name] = id_;
    name_ = name;
    listening_ = true;
    return name;
  });
}

std::shared_ptr<Endpoint> FakeTransport::GetEndpoint(const std::string& addr) {
  return core_->RunSync([&]() -> std::shared_ptr<Endpoint> {
    if (shut_down_) return std::make_shared<FakeEndpoint>(core_, nullptr, addr);
    auto& ep = endpoints_[addr];
    if (!ep) ep = std::make_shared<FakeEndpoint>(core_, this, addr);
    return ep;
  });
}

Result<std::unique_ptr<LocalRegion>> FakeTransport::AddRegion(std::byte* base, size_t len,
                                                              OwnedWords owned) {
  return core_->RunSync([&]() -> Result<std::unique_ptr<LocalRegion>> {
    if (shut_down_) return Err(ESHUTDOWN, "transport is shut down");
    const uint64_t rid = core_->next_region_id++;
    const uint64_t tag = SplitMix64(core_->opts.seed ^ SplitMix64(rid)) | 1;
    regions_[rid] = Region{base, len, tag};
    return std::unique_ptr<LocalRegion>(
        new FakeLocalRegion(core_, id_, rid, tag, base, len, std::move(owned)));
  });
}

Result<std::unique_ptr<LocalRegion>> FakeTransport::Register(void* addr, size_t len) {
  if (addr == nullptr || len == 0) return Err(EINVAL, "register: empty region");
  return AddRegion(static_cast<std::byte*>(addr), len, nullptr);
}

Result<std::unique_ptr<LocalRegion>> FakeTransport::Allocate(size_t len) {
  if (len == 0) return Err(EINVAL, "allocate: empty region");
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return Err(ENOMEM, "allocate " + std::to_string(len) + " bytes");
  OwnedWords owned(static_cast<uint64_t*>(m), UnmapWords{len});
  auto* base = reinterpret_cast<std::byte*>(owned.get());
  return AddRegion(base, len, std::move(owned));
}

void FakeTransport::Shutdown() {
  core_->RunSync([&] {
    if (shut_down_) return;
    shut_down_ = true;
    if (listening_) {
      auto it = core_->names.find(name_);
      if (it != core_->names.end() && it->second == id_) core_->names.erase(it);
    }
    // Close server connections politely (clients see ECONNRESET).
    auto conns = std::move(server_conns_);
    server_conns_.clear();
    for (auto& [conn, sc] : conns) {
      Packet r;
      r.dst = sc.client;
      r.conn = conn;
      r.to_server = false;
      r.kind = PacketKind::kReset;
      r.err = ECONNRESET;
      if (!dead_) Send(std::move(r));
    }
    auto eps = std::move(endpoints_);
    endpoints_.clear();
    for (auto& [addr, ep] : eps) ep->OnOwnerShutdown();
    client_conns_.clear();
    regions_.clear();
    core_->transports.erase(id_);
  });
}

void FakeTransport::ResetConnections() {
  for (auto& [conn, sc] : server_conns_) core_->injector_conns.erase(conn);
  server_conns_.clear();
  std::vector<std::shared_ptr<FakeEndpoint>> eps;
  for (auto& [addr, ep] : endpoints_) eps.push_back(ep);
  // Our old client connections: tell their servers, so they free them.
  for (auto& ep : eps) ep->Break(ECONNRESET, "node restarted", /*notify=*/true);
}

void FakeTransport::SendServerFrame(uint64_t conn, uint64_t client, const FrameHeader& h,
                                    Bytes payload) {
  Packet p;
  p.dst = client;
  p.conn = conn;
  p.to_server = false;
  p.header = EncodeFrame(h);
  p.payload = std::move(payload);
  Send(std::move(p));
}

void FakeTransport::DropConn(uint64_t conn, bool notify_client) {
  auto it = server_conns_.find(conn);
  if (it == server_conns_.end()) return;
  if (notify_client) {
    Packet r;
    r.dst = it->second.client;
    r.conn = conn;
    r.to_server = false;
    r.kind = PacketKind::kReset;
    r.err = ECONNRESET;
    Send(std::move(r));
  }
  server_conns_.erase(it);
}

void FakeTransport::OnServerPacket(Packet p) {
  if (shut_down_) return;
  switch (p.kind) {
    case PacketKind::kReset: {
      auto it = server_conns_.find(p.conn);
      if (it == server_conns_.end()) return;
      if (!it->second.authenticated) {
        ++stats_.auth_failures;
        Log().warn("{}: {} closed the connection during authentication", name_,
                   it->second.client_name);
      }
      server_conns_.erase(it);
      return;
    }
    case PacketKind::kOneSidedRequest:
      ServeOneSided(p);
      return;
    case PacketKind::kOneSidedDone:
      return;  // not for a server
    case PacketKind::kFrame:
      break;
  }
  auto h = DecodeFrame(p.header, p.payload.size(), opts_.max_message_bytes);
  if (!h) {
    ++stats_.malformed_frames;
    Log().warn("{}: dropped a frame from connection {}: {}", name_, p.conn, h.error().ToString());
    return;
  }
  ServeFrame(p, *h);
}

void FakeTransport::ServeFrame(Packet& p, const FrameHeader& h) {
  auto it = server_conns_.find(p.conn);
  if (h.kind == FrameKind::kAuthHello) {
    if (it != server_conns_.end()) {
      Log().warn("{}: second hello on connection {}", name_, p.conn);
      DropConn(p.conn, true);
      return;
    }
    FakeTransport* client = core_->Find(p.src);
    ServerConn sc{p.src, ServerHandshake(opts_.cluster_key), false,
                  client ? client->name_ : std::string("injector")};
    auto challenge = sc.handshake.OnHello(h);
    if (!challenge) {
      Log().warn("{}: refused a hello: {}", name_, challenge.error().ToString());
      Packet r;
      r.dst = p.src;
      r.conn = p.conn;
      r.to_server = false;
      r.kind = PacketKind::kReset;
      r.err = EPROTO;
      Send(std::move(r));
      return;
    }
    server_conns_.emplace(p.conn, std::move(sc));
    SendServerFrame(p.conn, p.src, *challenge);
    return;
  }
  if (it == server_conns_.end()) {
    core_->ResetBack(p, ECONNRESET);  // no such connection (e.g. we restarted)
    return;
  }
  ServerConn& sc = it->second;
  switch (h.kind) {
    case FrameKind::kAuthProof: {
      if (sc.authenticated) {
        Log().warn("{}: proof on authenticated connection {}", name_, p.conn);
        return;
      }
      Status verdict = sc.handshake.OnProof(h);
      SendServerFrame(p.conn, sc.client, ServerHandshake::ResultFrame(verdict));
      if (verdict) {
        sc.authenticated = true;
      } else {
        ++stats_.auth_failures;
        Log().warn("{}: refused {}: {}", name_, sc.client_name, verdict.error().ToString());
        server_conns_.erase(it);
      }
      return;
    }
    case FrameKind::kRequest: {
      if (!sc.authenticated) {
        ++stats_.auth_failures;
        Log().warn("{}: request from unauthenticated {} refused", name_, sc.client_name);
        FrameHeader r;
        r.kind = FrameKind::kReply;
        r.call_id = h.call_id;
        r.errno_code = EACCES;
        r.context = "not authenticated";
        SendServerFrame(p.conn, sc.client, r);
        server_conns_.erase(it);
        return;
      }
      auto hit = handlers_.find(h.method);
      if (hit == handlers_.end()) {
        SendReply(p.conn, h.call_id, Err(ENOSYS, "no handler for method " + std::to_string(h.method)));
        return;
      }
      IncomingCall call{PeerInfo{p.conn, sc.client_name}, h.method, std::move(p.payload)};
      Responder responder(std::make_unique<FakeResponder>(core_, id_, p.conn, h.call_id));
      hit->second(std::move(call), std::move(responder));
      return;
    }
    default:
      Log().warn("{}: unexpected {} frame on connection {}", name_, static_cast<int>(h.kind),
                 p.conn);
      return;
  }
}

void FakeTransport::SendReply(uint64_t conn, uint64_t call_id, Result<Bytes> reply) {
  if (shut_down_) return;
  auto it = server_conns_.find(conn);
  if (it == server_conns_.end() || !it->second.authenticated) return;  // caller is gone
  FrameHeader h;
  h.kind = FrameKind::kReply;
  h.call_id = call_id;
  Bytes payload;
  if (reply && reply->size() > opts_.max_message_bytes) {
    Log().warn("{}: reply of {} bytes over the limit", name_, reply->size());
    reply = Err(EMSGSIZE, "reply over max_message_bytes");
  }
  if (reply) {
    payload = std::move(*reply);
    h.payload_size = payload.size();
  } else {
    h.errno_code = AsErrno(reply.error().code);
    h.context = reply.error().context.substr(0, 512);
  }
  SendServerFrame(conn, it->second.client, h, std::move(payload));
}

void FakeTransport::ServeOneSided(Packet& p) {
  auto it = server_conns_.find(p.conn);
  if (it == server_conns_.end() || !it->second.authenticated) {
    core_->ResetBack(p, ECONNRESET);
    return;
  }
  Packet done;
  done.dst = p.src;
  done.conn = p.conn;
  done.to_server = false;
  done.kind = PacketKind::kOneSidedDone;
  done.op = p.op;
  done.op_id = p.op_id;
  auto rit = regions_.find(p.region);
  if (rit == regions_.end() || rit->second.tag != p.tag) {
    done.err = EFAULT;  // not registered (any more) or a forged key
  } else {
    const Region& r = rit->second;
    const uint64_t base = reinterpret_cast<uint64_t>(r.base);
    const bool atomic = p.op == OneSided::kFetchAdd || p.op == OneSided::kCompareSwap;
    if (p.addr < base || p.len > r.len || p.addr - base > r.len - p.len ||
        (atomic && p.addr % 8 != 0)) {
      done.err = EINVAL;
    } else {
      std::byte* at = r.base + (p.addr - base);
      switch (p.op) {
        case OneSided::kPut:
          if (!p.payload.empty()) std::memcpy(at, p.payload.data(), p.payload.size());
          break;
        case OneSided::kGet:
          done.payload.assign(at, at + p.len);
          break;
        case OneSided::kFetchAdd:
          done.a = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(at)).fetch_add(p.a);
          break;
        case OneSided::kCompareSwap: {
          uint64_t expected = p.a;
          std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(at))
              .compare_exchange_strong(expected, p.b);
          done.a = expected;  // the old value either way
          break;
        }
      }
    }
  }
  Send(std::move(done));
}

void FakeTransport::OnClientPacket(Packet p) {
  if (shut_down_) return;
  auto it = client_conns_.find(p.conn);
  if (it == client_conns_.end()) return;  // a connection we already dropped
  // Keep the endpoint alive while it handles the packet (a callback could
  // shut the transport down).
  std::shared_ptr<FakeEndpoint> ep = it->second->shared_from_this();
  ep->OnPacket(std::move(p));
}

}  // namespace fake

}  // namespace fedfs::m2m
