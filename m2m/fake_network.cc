// Implementation of the fake network. Everything below the public methods runs
// on the scheduler context (see fake_network.h); public Transport/Endpoint
// methods either post an event or RunSync() onto that context.
#include "m2m/fake_network.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <random>
#include <set>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>

#include "common/logging.h"
#include "m2m/auth.h"

namespace fedfs::m2m {

namespace {

constexpr uint32_t kRkeyMagic = 0x4b524b46;  // "FKRK"
constexpr size_t kRkeyBytes = 4 + 4 + 8 + 8;  // magic, reserved, region id, tag
// Nominal header of a one-sided request or completion, for the latency model
// and the byte counters (a verbs work request / completion is of this order).
constexpr size_t kOneSidedHeaderBytes = 64;
// Nominal size of a reset (TCP RST-like) packet.
constexpr size_t kResetBytes = 40;

spdlog::logger& Log() {
  static const std::shared_ptr<spdlog::logger> log = Logger("m2m");
  return *log;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void PutU64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint64_t GetU64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

enum class PacketKind : uint8_t { kFrame, kReset, kOneSidedRequest, kOneSidedDone };
enum class OneSided : uint8_t { kPut, kGet, kFetchAdd, kCompareSwap };

// What the network carries. Frames are real encoded bytes; one-sided
// operations and resets are the network's own (they have no frame on UCX
// either: they are RDMA work requests and connection events).
struct Packet {
  uint64_t src = 0;  // transport id; 0: the injector (or a node that is gone)
  uint64_t dst = 0;  // transport id; 0: nobody
  uint64_t conn = 0;
  bool to_server = true;  // which side of `conn` receives it
  PacketKind kind = PacketKind::kFrame;
  bool is_request = false;  // stats: a kRequest frame for `method`
  uint16_t method = 0;
  Bytes header;
  Bytes payload;  // frame payload, Put data, Get result
  // One-sided operations.
  OneSided op = OneSided::kPut;
  uint64_t op_id = 0;
  uint64_t region = 0, tag = 0, addr = 0, len = 0, a = 0, b = 0;
  int err = 0;  // kReset and kOneSidedDone: 0 or an errno
  bool host_reset = false;  // a reset the network sends for an absent host

  size_t WireBytes() const {
    switch (kind) {
      case PacketKind::kFrame:
        return header.size() + payload.size();
      case PacketKind::kReset:
        return kResetBytes;
      default:
        return kOneSidedHeaderBytes + payload.size();
    }
  }
};

class FakeTransport;
class FakeEndpoint;

}  // namespace

// ---------------------------------------------------------------------------
// Core: the network state shared by FakeNetwork, its transports and endpoints.
// All members except `sched` are touched only on the scheduler context.

class FakeNetwork::Core {
 public:
  explicit Core(const FakeNetworkOptions& o) : sched(o.mode), opts(o), rng(o.seed) {}

  // Runs f on the scheduler context and returns its result: inline when
  // already there (or in kSimulated mode, or once stopped), otherwise posted
  // to the dispatcher and waited for.
  template <class F>
  auto RunSync(F&& f) -> std::invoke_result_t<F&> {
    using R = std::invoke_result_t<F&>;
    if (sched.OnSchedulerContext() || sched.stopped()) return f();
    std::promise<R> p;
    auto fut = p.get_future();
    sched.Schedule(SimDuration::zero(), [&f, p = std::move(p)]() mutable {
      if constexpr (std::is_void_v<R>) {
        f();
        p.set_value();
      } else {
        p.set_value(f());
      }
    });
    try {
      return fut.get();
    } catch (const std::future_error&) {
      // The network stopped before the event ran (its dispatcher is joined):
      // nothing else runs any more, so run it here.
      return f();
    }
  }

  FakeTransport* Find(uint64_t id) const {
    auto it = transports.find(id);
    return it == transports.end() ? nullptr : it->second;
  }
  FakeTransport* FindByName(const std::string& name) const {
    auto it = names.find(name);
    return it == names.end() ? nullptr : Find(it->second);
  }

  double Uniform() { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
  LinkModel ModelFor(const std::string& a, const std::string& b) const;
  bool Partitioned(const std::string& a, const std::string& b) const {
    return partitions.contains(std::minmax(a, b));
  }

  void Send(Packet p);
  void Deliver(Packet p);
  void ResetBack(const Packet& p, int err);

  SimScheduler sched;
  FakeNetworkOptions opts;
  std::mt19937_64 rng;
  std::unordered_map<uint64_t, FakeTransport*> transports;
  std::unordered_map<std::string, uint64_t> names;
  uint64_t next_transport_id = 1;
  uint64_t next_conn_id = 1;
  uint64_t next_region_id = 1;
  uint64_t next_name = 1;
  std::unordered_map<std::string, LinkModel> node_models;
  std::map<std::pair<std::string, std::string>, LinkModel> link_models;
  std::set<std::pair<std::string, std::string>> partitions;
  std::unordered_map<uint64_t, SimDuration> link_last;  // (src << 32 | dst) -> last arrival
  std::vector<FrameHeader> injector_inbox;
  std::set<uint64_t> injector_conns;
};

namespace {

// ---------------------------------------------------------------------------
// Regions.

class FakeLocalRegion final : public LocalRegion {
 public:
  FakeLocalRegion(std::shared_ptr<FakeNetwork::Core> core, uint64_t transport, uint64_t id,
                  uint64_t tag, std::byte* base, size_t len, std::unique_ptr<uint64_t[]> owned)
      : core_(std::move(core)),
        transport_(transport),
        id_(id),
        tag_(tag),
        base_(base),
        len_(len),
        owned_(std::move(owned)) {}
  ~FakeLocalRegion() override;

  std::byte* data() override { return base_; }
  size_t size() const override { return len_; }
  RegionDesc Export() const override {
    RegionDesc d;
    d.addr = reinterpret_cast<uint64_t>(base_);
    d.length = len_;
    d.rkey.resize(kRkeyBytes);
    const uint64_t head = kRkeyMagic;
    PutU64(d.rkey.data(), head);
    PutU64(d.rkey.data() + 8, id_);
    PutU64(d.rkey.data() + 16, tag_);
    return d;
  }

 private:
  std::shared_ptr<FakeNetwork::Core> core_;
  uint64_t transport_, id_, tag_;
  std::byte* base_;
  size_t len_;
  std::unique_ptr<uint64_t[]> owned_;  // Allocate(): 8-byte aligned storage
};

class FakeRemoteRegion final : public RemoteRegion {
 public:
  FakeRemoteRegion(RegionDesc d, uint64_t id, uint64_t tag)
      : desc_(std::move(d)), id_(id), tag_(tag) {}
  const RegionDesc& desc() const override { return desc_; }
  uint64_t id() const { return id_; }
  uint64_t tag() const { return tag_; }

 private:
  RegionDesc desc_;
  uint64_t id_, tag_;
};

// ---------------------------------------------------------------------------
// Endpoint: the client side of one connection to one peer address.

class FakeEndpoint final : public Endpoint, public std::enable_shared_from_this<FakeEndpoint> {
 public:
  enum class Kind : uint8_t { kConnect, kCall, kPut, kGet, kFetchAdd, kCompareSwap };
  struct Op {
    Kind kind = Kind::kConnect;
    std::variant<Callback<void>, Callback<Bytes>, Callback<uint64_t>> done;
    SimScheduler::TimerId timer = 0;
    uint64_t conn = 0;  // connection it was sent on; 0 while waiting for one
    SimDuration deadline{0};
    uint16_t method = 0;
    Bytes payload;         // Call payload or Put data
    void* dst = nullptr;   // Get destination
    uint64_t region = 0, tag = 0, addr = 0, len = 0, a = 0, b = 0;
  };

  FakeEndpoint(std::shared_ptr<FakeNetwork::Core> core, FakeTransport* owner, std::string addr)
      : core_(std::move(core)), owner_(owner), addr_(std::move(addr)) {}

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

  // Scheduler context.
  void OnPacket(Packet p);
  // The owning transport shut down: fail everything with ESHUTDOWN.
  void OnOwnerShutdown();
  // Drops the connection (telling the server when `notify`) and fails every
  // operation with `code`.
  void Break(int code, const std::string& why, bool notify);

 private:
  // Validates a one-sided target in the caller's thread (the RemoteRegion may
  // be gone by the time the posted event runs).
  static Status CheckTarget(const RemoteRegion& r, uint64_t offset, uint64_t len, bool atomic,
                            Op* op);
  void Submit(Op op, Timeout timeout, Status early = Ok());
  void Start(Op op, Timeout timeout);
  void StartConnect(SimDuration limit);
  // Moves the attempt's deadline to `deadline`, capped by connect_timeout.
  void ExtendConnect(SimDuration deadline);
  void ConnectFailed(const Error& e);
  void OnConnected();
  void SendOp(uint64_t id);
  void SendFrame(const FrameHeader& h, Bytes payload, bool is_request = false);
  void OnTimeout(uint64_t id);
  void OnConnectTimeout(uint64_t conn);
  // Removes op `id` (cancelling its timer); false if it is no longer pending.
  bool Take(uint64_t id, Op* out);
  static void Fail(Op& op, const Error& e);
  // Fails every op matching pred (waiting ops have conn == 0).
  template <class Pred>
  void FailWhere(Pred pred, const Error& e);

  const std::shared_ptr<FakeNetwork::Core> core_;
  FakeTransport* owner_;  // null once the transport shut down
  const std::string addr_;

  enum class State : uint8_t { kIdle, kConnecting, kConnected };
  State state_ = State::kIdle;
  uint64_t conn_ = 0;
  uint64_t peer_ = 0;  // transport id the connection goes to (0: nobody)
  std::unique_ptr<ClientHandshake> handshake_;
  SimScheduler::TimerId connect_timer_ = 0;
  SimDuration connect_started_{0};
  SimDuration connect_deadline_{0};  // when the attempt gives up
  std::map<uint64_t, Op> ops_;  // by id = issue order
  uint64_t next_op_ = 1;
};

// ---------------------------------------------------------------------------
// Transport: one node.

class FakeTransport final : public Transport {
 public:
  FakeTransport(std::shared_ptr<FakeNetwork::Core> core, uint64_t id, TransportOptions o)
      : core_(std::move(core)), id_(id), opts_(std::move(o)), name_("anon:" + std::to_string(id)) {}
  ~FakeTransport() override { Shutdown(); }

  void Handle(uint16_t method, RpcHandler handler) override {
    core_->RunSync([&] { handlers_[method] = std::move(handler); });
  }
  Result<std::string> Listen(const std::string& addr) override;
  std::shared_ptr<Endpoint> GetEndpoint(const std::string& addr) override;
  Result<std::unique_ptr<LocalRegion>> Register(void* addr, size_t len) override;
  Result<std::unique_ptr<LocalRegion>> Allocate(size_t len) override;
  void Shutdown() override;

  // Scheduler context.
  void OnServerPacket(Packet p);
  void OnClientPacket(Packet p);
  void SendReply(uint64_t conn, uint64_t call_id, Result<Bytes> reply);
  void ResetConnections();
  void Send(Packet p) {
    p.src = id_;
    core_->Send(std::move(p));
  }

  struct ServerConn {
    uint64_t client = 0;
    ServerHandshake handshake;
    bool authenticated = false;
    std::string client_name;
  };
  struct Region {
    std::byte* base;
    size_t len;
    uint64_t tag;
  };

  const std::shared_ptr<FakeNetwork::Core> core_;
  const uint64_t id_;
  const TransportOptions opts_;
  std::string name_;
  bool listening_ = false;
  bool dead_ = false;
  bool replaced_ = false;  // dead and its name taken by another transport
  bool shut_down_ = false;
  std::unordered_map<uint16_t, RpcHandler> handlers_;
  std::unordered_map<std::string, std::shared_ptr<FakeEndpoint>> endpoints_;
  std::unordered_map<uint64_t, FakeEndpoint*> client_conns_;
  std::unordered_map<uint64_t, ServerConn> server_conns_;
  std::unordered_map<uint64_t, Region> regions_;
  TrafficStats stats_;

 private:
  void ServeFrame(Packet& p, const FrameHeader& h);
  void ServeOneSided(Packet& p);
  void SendServerFrame(uint64_t conn, uint64_t client, const FrameHeader& h, Bytes payload = {});
  void DropConn(uint64_t conn, bool notify_client);
  Result<std::unique_ptr<LocalRegion>> AddRegion(std::byte* base, size_t len,
                                                 std::unique_ptr<uint64_t[]> owned);
};

class FakeResponder final : public Responder::Impl {
 public:
  FakeResponder(std::weak_ptr<FakeNetwork::Core> core, uint64_t transport, uint64_t conn,
                uint64_t call_id)
      : core_(std::move(core)), transport_(transport), conn_(conn), call_id_(call_id) {}
  void Send(Result<Bytes> reply) override {
    auto core = core_.lock();
    if (!core) return;
    FakeNetwork::Core* c = core.get();
    c->sched.Schedule(SimDuration::zero(), [c, t = transport_, conn = conn_, id = call_id_,
                                            r = std::move(reply)]() mutable {
      if (FakeTransport* tr = c->Find(t)) tr->SendReply(conn, id, std::move(r));
    });
  }

 private:
  std::weak_ptr<FakeNetwork::Core> core_;
  uint64_t transport_, conn_, call_id_;
};

FakeLocalRegion::~FakeLocalRegion() {
  core_->RunSync([&] {
    if (FakeTransport* t = core_->Find(transport_)) t->regions_.erase(id_);
  });
}

}  // namespace

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

namespace {

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
                                                              std::unique_ptr<uint64_t[]> owned) {
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
  auto owned = std::unique_ptr<uint64_t[]>(new (std::nothrow) uint64_t[(len + 7) / 8]());
  if (!owned) return Err(ENOMEM, "allocate " + std::to_string(len) + " bytes");
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
    h.errno_code = reply.error().code > 0 ? reply.error().code : EIO;
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

}  // namespace

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
