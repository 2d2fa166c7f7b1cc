// Tests of the fake network itself, in simulated mode (virtual clock, no
// threads): scheduler order, latency model, determinism, faults, malformed
// frames, and a 1024-node scale smoke test. The Transport semantics shared
// with UCX are covered by the contract suite (fake_contract_test.cc).
#include "m2m/fake_network.h"

#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>

#include <gtest/gtest.h>

#include "m2m/auth.h"
#include "m2m/sim_scheduler.h"

namespace fedfs::m2m {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

constexpr uint16_t kEcho = 1;
constexpr uint16_t kName = 2;    // replies with the node's name
constexpr uint16_t kRecord = 3;  // records the payload's first byte, replies empty
constexpr uint16_t kHold = 4;    // keeps the Responder
constexpr uint16_t kBig = 5;     // replies with 2048 bytes

Bytes Key(char c) { return Bytes(kClusterKeyBytes, std::byte(c)); }
Bytes Str(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return Bytes(p, p + s.size());
}

template <class T>
struct Slot {
  int calls = 0;
  std::optional<Result<T>> r;
  SimDuration at{0};
  bool ok() const { return r && r->has_value(); }
  int code() const { return r && !r->has_value() ? (*r).error().code : 0; }
};

FakeNetworkOptions SimOptions(uint64_t seed = 1, LinkModel link = LinkModel::Zero()) {
  FakeNetworkOptions o;
  o.mode = SchedulerMode::kSimulated;
  o.seed = seed;
  o.link = link;
  return o;
}

// A simulated federation: nodes with a few handlers.
class Sim {
 public:
  explicit Sim(FakeNetworkOptions o = SimOptions()) : net(o) {}

  Transport& Add(const std::string& name, char key = 'k', size_t max_message = 64u << 20) {
    TransportOptions o;
    o.cluster_key = Key(key);
    o.max_message_bytes = max_message;
    auto t = net.NewTransport(o);
    t->Handle(kEcho, [](IncomingCall c, Responder r) { r.Reply(std::move(c.payload)); });
    t->Handle(kName, [name](IncomingCall, Responder r) { r.Reply(Str(name)); });
    t->Handle(kRecord, [this, name](IncomingCall c, Responder r) {
      recorded[name].push_back(c.payload.empty() ? -1 : static_cast<int>(c.payload[0]));
      r.Reply({});
    });
    t->Handle(kHold, [this](IncomingCall, Responder r) { held.push_back(std::move(r)); });
    t->Handle(kBig, [](IncomingCall, Responder r) { r.Reply(Bytes(2048)); });
    auto addr = t->Listen(name);
    EXPECT_TRUE(addr) << addr.error().ToString();
    EXPECT_EQ(*addr, name);
    nodes[name] = std::move(t);
    return *nodes[name];
  }

  std::shared_ptr<Slot<Bytes>> Call(const std::string& from, const std::string& to, uint16_t m,
                                    Bytes payload, Timeout timeout = seconds(1)) {
    auto slot = std::make_shared<Slot<Bytes>>();
    nodes.at(from)->GetEndpoint(to)->Call(m, std::move(payload), timeout,
                                          [this, slot](Result<Bytes> r) {
                                            ++slot->calls;
                                            slot->r = std::move(r);
                                            slot->at = net.Now();
                                          });
    return slot;
  }
  std::shared_ptr<Slot<void>> Connect(const std::string& from, const std::string& to) {
    auto slot = std::make_shared<Slot<void>>();
    nodes.at(from)->GetEndpoint(to)->Connect(seconds(5), [this, slot](Status s) {
      ++slot->calls;
      slot->r = std::move(s);
      slot->at = net.Now();
    });
    return slot;
  }
  template <class T>
  static Callback<T> Into(FakeNetwork& net, std::shared_ptr<Slot<T>> slot) {
    return [&net, slot](Result<T> r) {
      ++slot->calls;
      slot->r = std::move(r);
      slot->at = net.Now();
    };
  }

  FakeNetwork net;
  std::map<std::string, std::unique_ptr<Transport>> nodes;
  std::map<std::string, std::vector<int>> recorded;
  std::vector<Responder> held;
};

// --- Scheduler --------------------------------------------------------------

TEST(SimScheduler, RunsInTimeThenInsertionOrder) {
  SimScheduler s(SchedulerMode::kSimulated);
  std::vector<std::pair<int, int64_t>> ran;
  auto at = [&](int tag) { return [&, tag] { ran.emplace_back(tag, s.Now().count()); }; };
  s.Schedule(nanoseconds(30), at(30));
  s.Schedule(nanoseconds(10), at(11));
  s.Schedule(nanoseconds(10), at(12));
  const auto cancelled = s.Schedule(nanoseconds(5), at(5));
  s.Schedule(nanoseconds(20), [&] {
    ran.emplace_back(20, s.Now().count());
    s.Schedule(nanoseconds(0), at(21));  // same time, after everything already due
  });
  s.Cancel(cancelled);
  EXPECT_EQ(s.RunUntilIdle(), 5u);
  const std::vector<std::pair<int, int64_t>> want = {
      {11, 10}, {12, 10}, {20, 20}, {21, 20}, {30, 30}};
  EXPECT_EQ(ran, want);
  EXPECT_EQ(s.Now(), nanoseconds(30));
}

TEST(SimScheduler, RunForAndRunUntil) {
  SimScheduler s(SchedulerMode::kSimulated);
  int n = 0;
  for (int i = 1; i <= 10; ++i) s.Schedule(milliseconds(i), [&] { ++n; });
  s.RunFor(milliseconds(3));
  EXPECT_EQ(n, 3);
  EXPECT_EQ(s.Now(), milliseconds(3));
  EXPECT_TRUE(s.RunUntil([&] { return n == 7; }));
  EXPECT_EQ(s.Now(), milliseconds(7));
  EXPECT_FALSE(s.RunUntil([] { return false; }));
  EXPECT_EQ(n, 10);
  s.RunFor(seconds(1));
  EXPECT_EQ(s.Now(), milliseconds(1010));
}

TEST(SimScheduler, ManyCancelledTimersDoNotAccumulate) {
  SimScheduler s(SchedulerMode::kSimulated);
  for (int i = 0; i < 10000; ++i) s.Cancel(s.Schedule(seconds(5), [] {}));
  EXPECT_LT(s.pending(), 10000u);
  EXPECT_EQ(s.RunUntilIdle(), 0u);
  EXPECT_EQ(s.Now(), nanoseconds(0));  // cancelled events do not move the clock
}

TEST(FakeNetwork, NetworkTimersRunOnTheVirtualClock) {
  Sim sim;
  std::vector<int64_t> at;
  sim.net.Schedule(milliseconds(5), [&] { at.push_back(sim.net.Now().count()); });
  auto id = sim.net.Schedule(milliseconds(1), [&] { at.push_back(-1); });
  sim.net.Cancel(id);
  sim.net.RunUntilIdle();
  EXPECT_EQ(at, std::vector<int64_t>{5'000'000});
}

// --- Latency model ----------------------------------------------------------

TEST(LinkModel, Presets) {
  for (const char* name : {"zero", "rdma", "tcp-lan", "wan"}) {
    EXPECT_TRUE(LinkModel::Preset(name)) << name;
  }
  auto bad = LinkModel::Preset("carrier-pigeon");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, EINVAL);
  EXPECT_EQ(LinkModel::Rdma().base_latency, microseconds(2));
  EXPECT_EQ(LinkModel::TcpLan().base_latency, microseconds(25));
  EXPECT_EQ(LinkModel::Wan().base_latency, milliseconds(5));
  EXPECT_DOUBLE_EQ(LinkModel::Wan().bytes_per_second, 100e6);
}

TEST(FakeNetwork, RoundTripIsTwoOneWayLatencies) {
  LinkModel link{microseconds(10), 1e9, nanoseconds(0)};  // 1 byte = 1 ns
  Sim sim(SimOptions(1, link));
  sim.Add("a");
  sim.Add("b");
  auto c = sim.Connect("a", "b");
  sim.net.RunUntilIdle();
  ASSERT_TRUE(c->ok());
  // Hello, challenge, proof, result: four one-way trips (+ frame bytes).
  EXPECT_GE(c->at, microseconds(40));
  EXPECT_LT(c->at, microseconds(42));

  const SimDuration t0 = sim.net.Now();
  auto r = sim.Call("a", "b", kEcho, Bytes(1000));
  sim.net.RunUntilIdle();
  ASSERT_TRUE(r->ok());
  const SimDuration rtt = r->at - t0;
  // 2 x 10 us + 2 x 1000 payload bytes at 1 GB/s + two small headers.
  EXPECT_GE(rtt, microseconds(22));
  EXPECT_LE(rtt, microseconds(22) + nanoseconds(400));

  // One-sided operations cost one round trip too; Get carries its data back.
  auto region = sim.nodes["b"]->Allocate(1 << 20);
  ASSERT_TRUE(region);
  auto ep = sim.nodes["a"]->GetEndpoint("b");
  auto remote = ep->Import((*region)->Export());
  ASSERT_TRUE(remote);
  Bytes dst(1 << 20);
  auto g = std::make_shared<Slot<void>>();
  const SimDuration t1 = sim.net.Now();
  ep->Get(dst.data(), dst.size(), **remote, 0, seconds(1), Sim::Into(sim.net, g));
  sim.net.RunUntilIdle();
  ASSERT_TRUE(g->ok());
  EXPECT_EQ(g->at - t1, microseconds(20) + nanoseconds(2 * 64 + (1 << 20)));

  // A slow node: its links use its own model.
  sim.net.SetNodeModel("b", LinkModel::Wan());
  auto gate = LinkModel::Wan();
  gate.jitter = nanoseconds(0);
  sim.net.SetNodeModel("b", gate);
  const SimDuration t2 = sim.net.Now();
  auto slow = sim.Call("a", "b", kEcho, Bytes(100));
  sim.net.RunUntilIdle();
  ASSERT_TRUE(slow->ok());
  EXPECT_GE(slow->at - t2, milliseconds(10));
  EXPECT_LT(slow->at - t2, milliseconds(10) + microseconds(10));
  // A link override beats it.
  sim.net.SetLinkModel("a", "b", LinkModel::Zero());
  const SimDuration t3 = sim.net.Now();
  auto fast = sim.Call("a", "b", kEcho, Bytes(100));
  sim.net.RunUntilIdle();
  ASSERT_TRUE(fast->ok());
  EXPECT_EQ(fast->at, t3);
}

TEST(FakeNetwork, RdmaPresetRoundTrip) {
  Sim sim(SimOptions(3, LinkModel::Rdma()));
  sim.Add("a");
  sim.Add("b");
  sim.Connect("a", "b");
  sim.net.RunUntilIdle();
  const SimDuration t0 = sim.net.Now();
  auto r = sim.Call("a", "b", kEcho, Bytes(64));
  sim.net.RunUntilIdle();
  ASSERT_TRUE(r->ok());
  EXPECT_GE(r->at - t0, microseconds(4));
  EXPECT_LE(r->at - t0, microseconds(5));  // + at most 2 x 0.2 us jitter + bytes
}

// --- Determinism --------------------------------------------------------------

struct WorkloadResult {
  std::vector<int64_t> completions;  // time (ns) * 1000 + errno, in issue order
  TrafficStats total;
  bool operator==(const WorkloadResult&) const = default;
};

WorkloadResult RunWorkload(uint64_t seed) {
  FakeNetworkOptions o = SimOptions(seed, LinkModel::TcpLan());
  o.loss_probability = 0.02;
  o.reorder_probability = 0.1;
  o.reorder_max_delay = microseconds(50);
  Sim sim(o);
  constexpr int kNodes = 16;
  for (int i = 0; i < kNodes; ++i) sim.Add("n" + std::to_string(i));
  auto region = sim.nodes["n0"]->Allocate(64);
  const RegionDesc desc = (*region)->Export();
  std::mt19937 work(12345);  // the workload itself is fixed; only the network seed varies
  std::vector<std::shared_ptr<Slot<Bytes>>> calls;
  std::vector<std::shared_ptr<Slot<uint64_t>>> adds;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < kNodes; ++i) {
      const std::string from = "n" + std::to_string(i);
      const std::string to = "n" + std::to_string(work() % kNodes);
      calls.push_back(sim.Call(from, to, kEcho, Bytes(work() % 20000), milliseconds(5)));
      auto ep = sim.nodes[from]->GetEndpoint("n0");
      auto remote = ep->Import(desc);
      auto s = std::make_shared<Slot<uint64_t>>();
      ep->FetchAdd(**remote, 0, 1, milliseconds(5), Sim::Into(sim.net, s));
      adds.push_back(s);
    }
    sim.net.RunFor(microseconds(300));
  }
  sim.net.RunUntilIdle();
  WorkloadResult out;
  for (auto& c : calls) {
    EXPECT_EQ(c->calls, 1);
    out.completions.push_back(c->at.count() * 1000 + c->code());
  }
  for (auto& a : adds) {
    EXPECT_EQ(a->calls, 1);
    out.completions.push_back(a->at.count() * 1000 + a->code());
  }
  out.total = sim.net.TotalStats();
  return out;
}

TEST(FakeNetwork, SameSeedSameRunDifferentSeedDifferentRun) {
  const WorkloadResult a = RunWorkload(7);
  const WorkloadResult b = RunWorkload(7);
  const WorkloadResult c = RunWorkload(8);
  EXPECT_GT(a.total.messages_sent, 0u);
  EXPECT_EQ(a.completions, b.completions);
  EXPECT_EQ(a.total, b.total);
  EXPECT_NE(a.completions, c.completions);
}

// --- Faults -----------------------------------------------------------------

TEST(FakeNetwork, PartitionAndHeal) {
  Sim sim(SimOptions(1, LinkModel::TcpLan()));
  sim.Add("a");
  sim.Add("b");
  sim.Add("c");
  sim.Connect("a", "b");
  sim.net.RunUntilIdle();

  sim.net.Partition("a", "b");
  const SimDuration t0 = sim.net.Now();
  auto cut = sim.Call("a", "b", kEcho, Str("x"), milliseconds(50));
  auto cut_new = sim.Call("b", "a", kEcho, Str("x"), milliseconds(50));  // connect attempt
  auto around = sim.Call("a", "c", kEcho, Str("y"), milliseconds(50));
  sim.net.RunUntilIdle();
  EXPECT_EQ(cut->code(), ETIMEDOUT);
  EXPECT_EQ(cut->at - t0, milliseconds(50));  // exactly at the timeout, network clock
  EXPECT_EQ(cut_new->code(), ETIMEDOUT);
  EXPECT_TRUE(around->ok());
  EXPECT_GT(sim.net.Stats("a").messages_dropped, 0u);

  sim.net.Heal("a", "b");
  auto healed = sim.Call("a", "b", kEcho, Str("z"));
  auto healed_back = sim.Call("b", "a", kEcho, Str("z"));
  sim.net.RunUntilIdle();
  EXPECT_TRUE(healed->ok());
  EXPECT_TRUE(healed_back->ok());
}

TEST(FakeNetwork, KillAndRevive) {
  Sim sim(SimOptions(1, LinkModel::TcpLan()));
  sim.Add("a");
  sim.Add("b");
  auto region = sim.nodes["b"]->Allocate(64);
  auto ep = sim.nodes["a"]->GetEndpoint("b");
  auto remote = ep->Import((*region)->Export());
  ASSERT_TRUE(remote);
  auto before = sim.Call("a", "b", kName, {});
  sim.net.RunUntilIdle();
  ASSERT_TRUE(before->ok());

  ASSERT_TRUE(sim.net.Kill("b"));
  EXPECT_EQ(sim.net.Kill("nobody").error().code, ENOENT);
  const SimDuration t0 = sim.net.Now();
  auto call = sim.Call("a", "b", kName, {}, milliseconds(20));
  uint64_t word = 0;
  auto get = std::make_shared<Slot<void>>();
  ep->Get(&word, 8, **remote, 0, milliseconds(30), Sim::Into(sim.net, get));
  auto add = std::make_shared<Slot<uint64_t>>();
  ep->FetchAdd(**remote, 0, 1, milliseconds(40), Sim::Into(sim.net, add));
  sim.net.RunUntilIdle();
  EXPECT_EQ(call->code(), ETIMEDOUT);
  EXPECT_EQ(call->at - t0, milliseconds(20));
  EXPECT_EQ(get->code(), ETIMEDOUT);
  EXPECT_EQ(add->code(), ETIMEDOUT);
  uint64_t mem;
  std::memcpy(&mem, (*region)->data(), 8);
  EXPECT_EQ(mem, 0u);  // a dead node's memory is not touched

  // Revived: its connections were reset, so a peer's first operation may see
  // ECONNRESET; the next one reconnects.
  ASSERT_TRUE(sim.net.Revive("b"));
  auto first = sim.Call("a", "b", kName, {});
  sim.net.RunUntilIdle();
  EXPECT_TRUE(first->ok() || first->code() == ECONNRESET) << first->code();
  auto again = sim.Call("a", "b", kName, {});
  sim.net.RunUntilIdle();
  ASSERT_TRUE(again->ok());
  EXPECT_EQ(**again->r, Str("b"));

  // A killed node's address can be taken over by a new process.
  TransportOptions o;
  o.cluster_key = Key('k');
  auto clash = sim.net.NewTransport(o);
  EXPECT_EQ(clash->Listen("b").error().code, EADDRINUSE);
  ASSERT_TRUE(sim.net.Kill("b"));
  auto b2 = sim.net.NewTransport(o);
  b2->Handle(kName, [](IncomingCall, Responder r) { r.Reply(Str("b2")); });
  ASSERT_TRUE(b2->Listen("b"));
  auto reset = sim.Call("a", "b", kName, {});
  sim.net.RunUntilIdle();
  EXPECT_EQ(reset->code(), ECONNRESET);  // the old connection met a "rebooted host"
  auto fresh = sim.Call("a", "b", kName, {});
  sim.net.RunUntilIdle();
  ASSERT_TRUE(fresh->ok());
  EXPECT_EQ(**fresh->r, Str("b2"));
}

TEST(FakeNetwork, UnknownAddressIsRefused) {
  Sim sim(SimOptions(1, LinkModel::TcpLan()));
  sim.Add("a");
  auto r = sim.Call("a", "ghost", kEcho, {});
  sim.net.RunUntilIdle();
  EXPECT_EQ(r->code(), ECONNREFUSED);
  EXPECT_LT(r->at, milliseconds(1));  // answered, not timed out
}

TEST(FakeNetwork, LossLeadsToTimeoutsAndEveryOpCompletesOnce) {
  Sim sim(SimOptions(5, LinkModel::TcpLan()));
  sim.Add("a");
  sim.Add("b");
  sim.Connect("a", "b");
  sim.net.RunUntilIdle();

  sim.net.SetLoss(1.0);
  auto lost = sim.Call("a", "b", kEcho, {}, milliseconds(10));
  sim.net.RunUntilIdle();
  EXPECT_EQ(lost->code(), ETIMEDOUT);

  sim.net.SetLoss(0.3);
  std::vector<std::shared_ptr<Slot<Bytes>>> slots;
  for (int i = 0; i < 300; ++i) slots.push_back(sim.Call("a", "b", kEcho, Str("p"), milliseconds(10)));
  sim.net.RunUntilIdle();
  int ok = 0, timed_out = 0;
  for (auto& s : slots) {
    EXPECT_EQ(s->calls, 1);
    ok += s->ok();
    timed_out += s->code() == ETIMEDOUT;
  }
  EXPECT_EQ(ok + timed_out, 300);
  // P(success) = 0.7^2 = 0.49 per call.
  EXPECT_GT(ok, 100);
  EXPECT_GT(timed_out, 100);
  EXPECT_GT(sim.net.TotalStats().messages_dropped, 100u);
}

TEST(FakeNetwork, LateReplyAfterTimeoutIsDiscarded) {
  Sim sim(SimOptions(1, LinkModel{milliseconds(10), 0, nanoseconds(0)}));
  sim.Add("a");
  sim.Add("b");
  sim.Connect("a", "b");
  sim.net.RunUntilIdle();
  const SimDuration t0 = sim.net.Now();
  auto r = sim.Call("a", "b", kEcho, {}, milliseconds(15));  // reply would come at 20 ms
  sim.net.RunUntilIdle();
  EXPECT_EQ(r->calls, 1);
  EXPECT_EQ(r->code(), ETIMEDOUT);
  EXPECT_EQ(r->at - t0, milliseconds(15));
  EXPECT_EQ(sim.net.Now() - t0, milliseconds(20));  // the reply did arrive, and was dropped
}

TEST(FakeNetwork, ConnectAttemptLastsAsLongAsItsLongestWaiter) {
  Sim sim(SimOptions(1, LinkModel{milliseconds(10), 0, nanoseconds(0)}));
  sim.Add("a");
  sim.Add("b");
  auto quick = sim.Call("a", "b", kEcho, {}, milliseconds(15));
  auto patient = sim.Call("a", "b", kEcho, {}, milliseconds(100));
  sim.net.RunUntilIdle();
  EXPECT_EQ(quick->code(), ETIMEDOUT);
  EXPECT_EQ(quick->at, milliseconds(15));
  ASSERT_TRUE(patient->ok());
  EXPECT_EQ(patient->at, milliseconds(60));  // 4 one-way handshake trips + a round trip
}

TEST(FakeNetwork, LinksAreFifoUnlessReorderingIsOn) {
  for (bool reorder : {false, true}) {
    FakeNetworkOptions o = SimOptions(9, LinkModel::TcpLan());  // jitter 5 us
    if (reorder) {
      o.reorder_probability = 0.5;
      o.reorder_max_delay = microseconds(200);
    }
    Sim sim(o);
    sim.Add("a");
    sim.Add("b");
    sim.Connect("a", "b");
    sim.net.RunUntilIdle();
    std::vector<std::shared_ptr<Slot<Bytes>>> slots;
    std::vector<int> sent;
    for (int i = 0; i < 200; ++i) {
      slots.push_back(sim.Call("a", "b", kRecord, Bytes{std::byte(i)}));
      sent.push_back(i);
    }
    sim.net.RunUntilIdle();
    for (auto& s : slots) EXPECT_TRUE(s->ok());
    const auto& got = sim.recorded["b"];
    ASSERT_EQ(got.size(), 200u);
    if (reorder) {
      EXPECT_NE(got, sent);
      EXPECT_TRUE(std::is_permutation(got.begin(), got.end(), sent.begin()));
    } else {
      EXPECT_EQ(got, sent);
    }
  }
}

// --- Authentication and malformed input ------------------------------------------

TEST(FakeNetwork, WrongKeyIsRefusedOnBothSides) {
  Sim sim;
  sim.Add("server", 'k');
  sim.Add("intruder", 'x');
  auto r = sim.Call("intruder", "server", kEcho, {});
  sim.net.RunUntilIdle();
  EXPECT_EQ(r->code(), EACCES);
  EXPECT_GE(sim.net.Stats("server").auth_failures, 1u);
  EXPECT_GE(sim.net.Stats("intruder").auth_failures, 1u);
}

TEST(FakeNetwork, MalformedAndUnauthenticatedFramesAreRefused) {
  Sim sim;
  sim.Add("a");
  sim.Add("b");
  auto garbage = Bytes(50);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = std::byte(i * 37 + 11);
  sim.net.InjectRawFrame("b", garbage, {});
  FrameHeader req;
  req.kind = FrameKind::kRequest;
  req.method = kEcho;
  req.call_id = 1;
  req.payload_size = 10;
  Bytes good = EncodeFrame(req);
  sim.net.InjectRawFrame("b", Bytes(good.begin(), good.begin() + good.size() / 2), {});  // truncated
  sim.net.InjectRawFrame("b", good, Bytes(3));                    // size disagrees with header
  sim.net.InjectRawFrame("b", Bytes(kMaxFrameHeaderBytes + 1), {});  // oversized header
  sim.net.InjectRawFrame("b", {}, {});                             // empty
  sim.net.RunUntilIdle();
  EXPECT_EQ(sim.net.Stats("b").malformed_frames, 5u);
  EXPECT_TRUE(sim.net.TakeInjectorInbox().empty());  // dropped silently

  // A well-formed request on a connection that never authenticated: reset.
  sim.net.InjectRawFrame("b", good, Bytes(10));
  sim.net.RunUntilIdle();
  auto inbox = sim.net.TakeInjectorInbox();
  ASSERT_EQ(inbox.size(), 1u);
  EXPECT_EQ(inbox[0].errno_code, ECONNRESET);

  // Hello, then a request before the proof: EACCES and the connection is dropped.
  ClientHandshake hs(Key('z'));
  const uint64_t conn = sim.net.InjectRawFrame("b", EncodeFrame(hs.Hello()), {});
  sim.net.RunUntilIdle();
  inbox = sim.net.TakeInjectorInbox();
  ASSERT_EQ(inbox.size(), 1u);
  EXPECT_EQ(inbox[0].kind, FrameKind::kAuthChallenge);
  sim.net.InjectRawFrame("b", good, Bytes(10), conn);
  sim.net.RunUntilIdle();
  inbox = sim.net.TakeInjectorInbox();
  ASSERT_EQ(inbox.size(), 1u);
  EXPECT_EQ(inbox[0].kind, FrameKind::kReply);
  EXPECT_EQ(inbox[0].errno_code, EACCES);

  // Hello, then a forged proof: AuthResult EACCES.
  ClientHandshake hs2(Key('z'));
  const uint64_t conn2 = sim.net.InjectRawFrame("b", EncodeFrame(hs2.Hello()), {});
  sim.net.RunUntilIdle();
  ASSERT_EQ(sim.net.TakeInjectorInbox().size(), 1u);
  FrameHeader forged;
  forged.kind = FrameKind::kAuthProof;
  forged.mac = Bytes(32, std::byte{0});
  sim.net.InjectRawFrame("b", EncodeFrame(forged), {}, conn2);
  sim.net.RunUntilIdle();
  inbox = sim.net.TakeInjectorInbox();
  ASSERT_EQ(inbox.size(), 1u);
  EXPECT_EQ(inbox[0].kind, FrameKind::kAuthResult);
  EXPECT_EQ(inbox[0].errno_code, EACCES);
  EXPECT_GE(sim.net.Stats("b").auth_failures, 2u);

  // The node keeps serving a real client.
  auto r = sim.Call("a", "b", kEcho, Str("still here"));
  sim.net.RunUntilIdle();
  ASSERT_TRUE(r->ok());
  EXPECT_EQ(**r->r, Str("still here"));
}

TEST(FakeNetwork, MessageLimitsOnBothSides) {
  Sim sim;
  sim.Add("small", 'k', 1024);
  sim.Add("client", 'k', 1 << 20);
  // The server's reply is over its own limit: the caller gets EMSGSIZE.
  auto big_reply = sim.Call("client", "small", kBig, {});
  // A request the client may send but the server refuses: dropped, timeout.
  auto big_req = sim.Call("client", "small", kEcho, Bytes(2000), milliseconds(20));
  // Over the client's own limit: refused at once.
  auto too_big = sim.Call("client", "small", kEcho, Bytes((1 << 20) + 1));
  sim.net.RunUntilIdle();
  EXPECT_EQ(big_reply->code(), EMSGSIZE);
  EXPECT_EQ(big_req->code(), ETIMEDOUT);
  EXPECT_EQ(too_big->code(), EMSGSIZE);
  EXPECT_EQ(too_big->at, SimDuration::zero());
  EXPECT_EQ(sim.net.Stats("small").malformed_frames, 1u);
}

// --- Regions ----------------------------------------------------------------------

TEST(FakeNetwork, RegionKeysAreChecked) {
  Sim sim;
  sim.Add("a");
  sim.Add("b");
  auto ep = sim.nodes["a"]->GetEndpoint("b");
  RegionDesc junk{0x1000, 64, Bytes(5)};
  EXPECT_EQ(ep->Import(junk).error().code, EINVAL);
  EXPECT_EQ(sim.nodes["b"]->Allocate(0).error().code, EINVAL);
  EXPECT_EQ(sim.nodes["b"]->Register(nullptr, 8).error().code, EINVAL);

  auto region = sim.nodes["b"]->Allocate(64);
  ASSERT_TRUE(region);
  RegionDesc desc = (*region)->Export();
  RegionDesc forged = desc;
  forged.rkey[20] ^= std::byte{1};  // wrong tag
  auto bad = ep->Import(forged);
  ASSERT_TRUE(bad);  // well-formed; the target refuses it
  auto good = ep->Import(desc);
  ASSERT_TRUE(good);

  uint64_t v = 1;
  auto s1 = std::make_shared<Slot<void>>();
  ep->Put(&v, 8, **bad, 0, seconds(1), Sim::Into(sim.net, s1));
  auto s2 = std::make_shared<Slot<uint64_t>>();
  ep->FetchAdd(**good, 4, 1, seconds(1), Sim::Into(sim.net, s2));  // misaligned
  sim.net.RunUntilIdle();
  EXPECT_EQ(s1->code(), EFAULT);
  EXPECT_EQ(s2->code(), EINVAL);

  region->reset();  // deregistered: the old key no longer works
  auto s3 = std::make_shared<Slot<void>>();
  ep->Get(&v, 8, **good, 0, seconds(1), Sim::Into(sim.net, s3));
  sim.net.RunUntilIdle();
  EXPECT_EQ(s3->code(), EFAULT);
}

TEST(FakeNetwork, ShutdownFailsOperationsInFlight) {
  Sim sim;
  sim.Add("a");
  sim.Add("b");
  auto held = sim.Call("a", "b", kHold, {}, seconds(10));
  sim.net.RunFor(milliseconds(1));  // delivered and held, far from its timeout
  ASSERT_EQ(sim.held.size(), 1u);
  EXPECT_EQ(held->calls, 0);
  auto ep = sim.nodes["a"]->GetEndpoint("b");
  sim.nodes["a"]->Shutdown();
  EXPECT_EQ(held->code(), ESHUTDOWN);
  auto after = std::make_shared<Slot<Bytes>>();
  ep->Call(kEcho, {}, seconds(1), Sim::Into(sim.net, after));
  sim.net.RunUntilIdle();
  EXPECT_EQ(after->code(), ESHUTDOWN);
  sim.held.clear();  // late EIO reply to a closed connection: ignored
  sim.net.RunUntilIdle();
  EXPECT_EQ(held->calls, 1);
}

TEST(FakeNetwork, CountsMessagesPerNodeAndMethod) {
  Sim sim;
  sim.Add("a");
  sim.Add("b");
  for (int i = 0; i < 3; ++i) sim.Call("a", "b", kEcho, Bytes(10));
  for (int i = 0; i < 2; ++i) sim.Call("a", "b", kName, {});
  sim.net.RunUntilIdle();
  const TrafficStats a = sim.net.Stats("a");
  const TrafficStats b = sim.net.Stats("b");
  EXPECT_EQ(a.rpc_requests, 5u);
  EXPECT_EQ(a.per_method.at(kEcho).requests, 3u);
  EXPECT_EQ(a.per_method.at(kName).requests, 2u);
  EXPECT_EQ(a.messages_sent, 2u + 5u);      // hello, proof, requests
  EXPECT_EQ(b.messages_sent, 2u + 5u);      // challenge, result, replies
  EXPECT_EQ(a.messages_received, b.messages_sent);
  EXPECT_EQ(sim.net.TotalStats().messages_sent, 14u);
  sim.net.ResetStats();
  EXPECT_EQ(sim.net.TotalStats(), TrafficStats{});
}

// --- Real-time mode ---------------------------------------------------------------

TEST(FakeNetworkRealTime, TransportsAndRespondersMayOutliveTheNetwork) {
  std::unique_ptr<Transport> a, b;
  std::shared_ptr<Endpoint> ep;
  std::mutex mu;
  std::vector<Responder> held;
  {
    FakeNetwork net;  // kRealTime by default
    TransportOptions o;
    o.cluster_key = Key('k');
    a = net.NewTransport(o);
    b = net.NewTransport(o);
    b->Handle(kEcho, [](IncomingCall c, Responder r) { r.Reply(std::move(c.payload)); });
    b->Handle(kHold, [&](IncomingCall, Responder r) {
      std::lock_guard lk(mu);
      held.push_back(std::move(r));
    });
    auto addr = b->Listen("");
    ASSERT_TRUE(addr);
    EXPECT_TRUE(addr->starts_with("fake:"));
    ep = a->GetEndpoint(*addr);
    auto r = CallSync(*ep, kEcho, Str("x"), seconds(5));
    ASSERT_TRUE(r) << r.error().ToString();
    auto h = CallSync(*ep, kHold, {}, milliseconds(50));
    EXPECT_EQ(h.error().code, ETIMEDOUT);
  }
  auto r = CallSync(*ep, kEcho, Str("x"), seconds(1));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ESHUTDOWN);
  a.reset();
  b.reset();
  std::lock_guard lk(mu);
  EXPECT_EQ(held.size(), 1u);
  held.clear();  // replies into nothing
}

// --- Scale ------------------------------------------------------------------------

long MaxRssKiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(FakeNetwork, ScaleSmoke1024NodesEightRpcsEach) {
  constexpr int kNodes = 1024;
  constexpr int kFanout = 8;
  const long rss0 = MaxRssKiB();
  const auto wall0 = std::chrono::steady_clock::now();
  FakeNetworkOptions o = SimOptions(2024, LinkModel::TcpLan());
  FakeNetwork net(o);
  std::vector<std::unique_ptr<Transport>> nodes;
  nodes.reserve(kNodes);
  TransportOptions to;
  to.cluster_key = Key('k');
  for (int i = 0; i < kNodes; ++i) {
    auto t = net.NewTransport(to);
    t->Handle(kEcho, [](IncomingCall c, Responder r) { r.Reply(std::move(c.payload)); });
    ASSERT_TRUE(t->Listen("node-" + std::to_string(i)));
    nodes.push_back(std::move(t));
  }
  const auto wall1 = std::chrono::steady_clock::now();
  int ok = 0, failed = 0;
  for (int i = 0; i < kNodes; ++i) {
    for (int k = 0; k < kFanout; ++k) {
      const int peer = (i + (1 << k)) % kNodes;  // 1, 2, 4, ..., 128 hops away
      nodes[i]->GetEndpoint("node-" + std::to_string(peer))
          ->Call(kEcho, Bytes(128), seconds(1),
                 [&](Result<Bytes> r) { (r && r->size() == 128) ? ++ok : ++failed; });
    }
  }
  const size_t events = net.RunUntilIdle();
  const auto wall2 = std::chrono::steady_clock::now();
  EXPECT_EQ(ok, kNodes * kFanout);
  EXPECT_EQ(failed, 0);
  const TrafficStats total = net.TotalStats();
  // 8192 connections x (4 handshake + request + reply).
  EXPECT_EQ(total.messages_sent, uint64_t{kNodes} * kFanout * 6);
  const double setup_s = std::chrono::duration<double>(wall1 - wall0).count();
  const double run_s = std::chrono::duration<double>(wall2 - wall1).count();
  std::cout << "[scale] " << kNodes << " nodes x " << kFanout << " RPCs: setup " << setup_s * 1e3
            << " ms, run " << run_s * 1e3 << " ms real, " << events << " events, "
            << total.messages_sent << " messages, " << total.bytes_sent << " bytes, virtual "
            << std::chrono::duration<double, std::micro>(net.Now()).count() << " us, max RSS +"
            << (MaxRssKiB() - rss0) << " KiB\n";
  RecordProperty("run_ms", static_cast<int>(run_s * 1e3));
  // No bound on the wall-clock figures: they depend on the machine and its
  // load; a hang is caught by ctest --timeout (scripts/test.sh).
}

}  // namespace
}  // namespace fedfs::m2m
