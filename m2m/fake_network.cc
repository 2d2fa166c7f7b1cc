// The fake network: the Core's delivery and latency model, and FakeNetwork
// (see m2m/fake_internal.h).
#include "m2m/fake_internal.h"

namespace fedfs::m2m {

using namespace fake;

// ---------------------------------------------------------------------------
// Core: latency model and delivery.

LinkModel FakeNetwork::Core::ModelFor(const std::string& a, const std::string& b) const {
  if (!link_models.empty()) {
    auto it = link_models.find(std::minmax(a, b));
    if (it != link_models.end()) return it->second;
  }
  if (!node_models.empty()) {
    auto ia = node_models.find(a);
    auto ib = node_models.find(b);
    if (ia != node_models.end() && ib != node_models.end()) {
      return ia->second.base_latency >= ib->second.base_latency ? ia->second : ib->second;
    }
    if (ia != node_models.end()) return ia->second;
    if (ib != node_models.end()) return ib->second;
  }
  return opts.link;
}

void FakeNetwork::Core::Send(Packet p) {
  FakeTransport* src = Find(p.src);
  const size_t bytes = p.WireBytes();
  if (p.host_reset) {
    src = nullptr;  // answered by the "host", not by a (possibly dead) transport
  } else if (src) {
    if (src->dead_) {
      ++src->stats_.messages_dropped;
      return;
    }
    ++src->stats_.messages_sent;
    src->stats_.bytes_sent += bytes;
    if (p.is_request) {
      ++src->stats_.rpc_requests;
      auto& m = src->stats_.per_method[p.method];
      ++m.requests;
      m.bytes += bytes;
    }
  }
  if (opts.loss_probability > 0 && Uniform() < opts.loss_probability) {
    if (src) ++src->stats_.messages_dropped;
    return;
  }
  FakeTransport* dst = Find(p.dst);
  static const std::string kNobody;
  const LinkModel m = ModelFor(src ? src->name_ : kNobody, dst ? dst->name_ : kNobody);
  SimDuration delay = m.base_latency;
  if (m.bytes_per_second > 0) {
    delay += SimDuration(static_cast<int64_t>(static_cast<double>(bytes) * 1e9 / m.bytes_per_second));
  }
  if (m.jitter > SimDuration::zero()) {
    delay += SimDuration(static_cast<int64_t>(Uniform() * static_cast<double>(m.jitter.count())));
  }
  const SimDuration now = sched.Now();
  SimDuration arrival = now + delay;
  if (opts.reorder_probability > 0 && Uniform() < opts.reorder_probability) {
    arrival += SimDuration(
        static_cast<int64_t>(Uniform() * static_cast<double>(opts.reorder_max_delay.count())));
  } else {
    // FIFO per directed link: never arrive before an earlier message.
    SimDuration& last = link_last[(p.src << 32) ^ p.dst];
    if (arrival < last) arrival = last;
    last = arrival;
  }
  sched.Schedule(arrival - now, [this, p = std::move(p)]() mutable { Deliver(std::move(p)); });
}

void FakeNetwork::Core::ResetBack(const Packet& p, int err) {
  if (p.kind == PacketKind::kReset) return;  // never answer a reset
  if (p.src == 0 && !injector_conns.contains(p.conn)) return;
  Packet r;
  r.src = p.dst;
  r.dst = p.src;
  r.conn = p.conn;
  r.to_server = !p.to_server;
  r.kind = PacketKind::kReset;
  r.err = err;
  r.host_reset = true;
  Send(std::move(r));
}

void FakeNetwork::Core::Deliver(Packet p) {
  if (p.dst == 0 && !p.to_server && p.src != 0 && injector_conns.contains(p.conn)) {
    // A node answering the injector: keep decodable frames for the test.
    if (p.kind == PacketKind::kFrame) {
      if (auto h = DecodeFrame(p.header, p.payload.size(), UINT64_MAX)) {
        injector_inbox.push_back(std::move(*h));
      }
    } else if (p.kind == PacketKind::kReset) {
      FrameHeader h;
      h.kind = FrameKind::kReply;
      h.errno_code = p.err;
      h.context = "reset";
      injector_inbox.push_back(std::move(h));
    }
    return;
  }
  FakeTransport* dst = Find(p.dst);
  FakeTransport* src = Find(p.src);
  if (!dst || dst->replaced_) {
    // Nobody listens there (any more): the host answers with a reset.
    ResetBack(p, p.to_server ? ECONNREFUSED : ECONNRESET);
    return;
  }
  if (dst->dead_ ||
      (!partitions.empty() && Partitioned(src ? src->name_ : std::string("injector"), dst->name_))) {
    if (src) ++src->stats_.messages_dropped;
    return;
  }
  ++dst->stats_.messages_received;
  dst->stats_.bytes_received += p.WireBytes();
  if (p.to_server) {
    dst->OnServerPacket(std::move(p));
  } else {
    dst->OnClientPacket(std::move(p));
  }
}

// ---------------------------------------------------------------------------
// LinkModel and FakeNetwork.

LinkModel LinkModel::Rdma() {
  return {std::chrono::nanoseconds(2000), 10e9, std::chrono::nanoseconds(200)};
}
LinkModel LinkModel::TcpLan() {
  return {std::chrono::microseconds(25), 1.2e9, std::chrono::microseconds(5)};
}
LinkModel LinkModel::Wan() {
  return {std::chrono::milliseconds(5), 100e6, std::chrono::microseconds(500)};
}

Result<LinkModel> LinkModel::Preset(std::string_view name) {
  if (name == "zero") return Zero();
  if (name == "rdma") return Rdma();
  if (name == "tcp-lan") return TcpLan();
  if (name == "wan") return Wan();
  return Err(EINVAL, "unknown link preset '" + std::string(name) +
                         "' (zero, rdma, tcp-lan, wan)");
}

FakeNetwork::FakeNetwork(FakeNetworkOptions options)
    : core_(std::make_shared<Core>(options)) {}

FakeNetwork::~FakeNetwork() {
  core_->sched.Stop();
  // Transports that outlive us keep the core; they now run everything inline.
}

std::unique_ptr<Transport> FakeNetwork::NewTransport(const TransportOptions& options) {
  return core_->RunSync([&]() -> std::unique_ptr<Transport> {
    const uint64_t id = core_->next_transport_id++;
    auto t = std::make_unique<FakeTransport>(core_, id, options);
    core_->transports[id] = t.get();
    return t;
  });
}

SimDuration FakeNetwork::Now() const { return core_->sched.Now(); }

FakeNetwork::TimerId FakeNetwork::Schedule(SimDuration delay, std::move_only_function<void()> fn) {
  return core_->sched.Schedule(delay, std::move(fn));
}
void FakeNetwork::Cancel(TimerId id) { core_->sched.Cancel(id); }

size_t FakeNetwork::RunUntilIdle() { return core_->sched.RunUntilIdle(); }
void FakeNetwork::RunFor(SimDuration d) { core_->sched.RunFor(d); }
bool FakeNetwork::RunUntil(const std::function<bool()>& pred) { return core_->sched.RunUntil(pred); }

void FakeNetwork::SetDefaultLinkModel(const LinkModel& m) {
  core_->RunSync([&] { core_->opts.link = m; });
}
void FakeNetwork::SetNodeModel(const std::string& addr, const LinkModel& m) {
  core_->RunSync([&] { core_->node_models[addr] = m; });
}
void FakeNetwork::SetLinkModel(const std::string& a, const std::string& b, const LinkModel& m) {
  core_->RunSync([&] { core_->link_models[std::minmax(a, b)] = m; });
}
void FakeNetwork::SetLoss(double p) {
  core_->RunSync([&] { core_->opts.loss_probability = p; });
}
void FakeNetwork::SetReorder(double p, SimDuration max_delay) {
  core_->RunSync([&] {
    core_->opts.reorder_probability = p;
    core_->opts.reorder_max_delay = max_delay;
  });
}

void FakeNetwork::Partition(const std::string& a, const std::string& b) {
  core_->RunSync([&] { core_->partitions.insert(std::minmax(a, b)); });
}
void FakeNetwork::Heal(const std::string& a, const std::string& b) {
  core_->RunSync([&] { core_->partitions.erase(std::minmax(a, b)); });
}
void FakeNetwork::HealAll() {
  core_->RunSync([&] { core_->partitions.clear(); });
}

Status FakeNetwork::Kill(const std::string& addr) {
  return core_->RunSync([&]() -> Status {
    FakeTransport* t = core_->FindByName(addr);
    if (!t) return Err(ENOENT, "no node at " + addr);
    t->dead_ = true;
    Log().info("fake network: killed {}", addr);
    return Ok();
  });
}

Status FakeNetwork::Revive(const std::string& addr) {
  return core_->RunSync([&]() -> Status {
    FakeTransport* t = core_->FindByName(addr);
    if (!t) return Err(ENOENT, "no node at " + addr);
    if (!t->dead_) return Ok();
    t->dead_ = false;
    t->ResetConnections();  // as after a restart: peers reconnect
    Log().info("fake network: revived {}", addr);
    return Ok();
  });
}

uint64_t FakeNetwork::InjectRawFrame(const std::string& to_addr, Bytes header, Bytes payload,
                                     uint64_t conn) {
  return core_->RunSync([&]() -> uint64_t {
    if (conn == 0) conn = core_->next_conn_id++;
    core_->injector_conns.insert(conn);
    FakeTransport* t = core_->FindByName(to_addr);
    Packet p;
    p.src = 0;
    p.dst = t ? t->id_ : 0;
    p.conn = conn;
    p.to_server = true;
    p.header = std::move(header);
    p.payload = std::move(payload);
    core_->Send(std::move(p));
    return conn;
  });
}

std::vector<FrameHeader> FakeNetwork::TakeInjectorInbox() {
  return core_->RunSync([&] { return std::exchange(core_->injector_inbox, {}); });
}

TrafficStats FakeNetwork::Stats(const std::string& addr) {
  return core_->RunSync([&] {
    FakeTransport* t = core_->FindByName(addr);
    return t ? t->stats_ : TrafficStats{};
  });
}

TrafficStats FakeNetwork::TotalStats() {
  return core_->RunSync([&] {
    TrafficStats sum;
    for (auto& [id, t] : core_->transports) {
      const TrafficStats& s = t->stats_;
      sum.messages_sent += s.messages_sent;
      sum.bytes_sent += s.bytes_sent;
      sum.messages_received += s.messages_received;
      sum.bytes_received += s.bytes_received;
      sum.messages_dropped += s.messages_dropped;
      sum.rpc_requests += s.rpc_requests;
      sum.one_sided_ops += s.one_sided_ops;
      sum.auth_failures += s.auth_failures;
      sum.malformed_frames += s.malformed_frames;
      for (auto& [m, ms] : s.per_method) {
        sum.per_method[m].requests += ms.requests;
        sum.per_method[m].bytes += ms.bytes;
      }
    }
    return sum;
  });
}

void FakeNetwork::ResetStats() {
  core_->RunSync([&] {
    for (auto& [id, t] : core_->transports) t->stats_ = TrafficStats{};
  });
}

}  // namespace fedfs::m2m
