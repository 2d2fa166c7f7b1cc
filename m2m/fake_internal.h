// Internals of the fake network (m2m/fake_network.h is the contract), shared
// by its files and by no one else:
//   fake_network.cc   the Core's delivery and latency model; FakeNetwork
//   fake_transport.cc a transport: listening, the server side, one-sided service
//   fake_endpoint.cc  an endpoint: connecting, calls, one-sided operations
// Everything below the public methods runs on the scheduler context (see
// fake_network.h); public Transport/Endpoint methods either post an event or
// RunSync() onto that context.
#pragma once

#include "m2m/fake_network.h"


#include <sys/mman.h>

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
#include <map>

namespace fedfs::m2m {

// Allocate()'s storage: anonymous mappings (zero, page-aligned), so that a
// region's pages cost memory only once touched (a simulator's thousands of
// buffer pools, mostly unused).
struct UnmapWords {
  size_t bytes = 0;
  void operator()(uint64_t* p) const { munmap(p, bytes); }
};
using OwnedWords = std::unique_ptr<uint64_t[], UnmapWords>;
namespace fake {

inline constexpr uint32_t kRkeyMagic = 0x4b524b46;  // "FKRK"
inline constexpr size_t kRkeyBytes = 4 + 4 + 8 + 8;  // magic, reserved, region id, tag
// Nominal header of a one-sided request or completion, for the latency model
// and the byte counters (a verbs work request / completion is of this order).
inline constexpr size_t kOneSidedHeaderBytes = 64;
// Nominal size of a reset (TCP RST-like) packet.
inline constexpr size_t kResetBytes = 40;

inline spdlog::logger& Log() {
  static const std::shared_ptr<spdlog::logger> log = Logger("m2m");
  return *log;
}

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline void PutU64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint64_t GetU64(const std::byte* p) {
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

}  // namespace fake

using fake::FakeEndpoint;
using fake::FakeTransport;
using fake::Packet;

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

namespace fake {

// ---------------------------------------------------------------------------
// Regions.

class FakeLocalRegion final : public LocalRegion {
 public:
  FakeLocalRegion(std::shared_ptr<FakeNetwork::Core> core, uint64_t transport, uint64_t id,
                  uint64_t tag, std::byte* base, size_t len, OwnedWords owned)
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
  OwnedWords owned_;  // Allocate(): 8-byte aligned storage
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
                                                 OwnedWords owned);
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

inline FakeLocalRegion::~FakeLocalRegion() {
  core_->RunSync([&] {
    if (FakeTransport* t = core_->Find(transport_)) t->regions_.erase(id_);
  });
}

}  // namespace fake
}  // namespace fedfs::m2m
