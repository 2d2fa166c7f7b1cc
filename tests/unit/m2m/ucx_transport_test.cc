// Tests of the UCX transport beyond the shared contract suite: large RPCs,
// deadlines, one-sided operations and atomics, authentication failures,
// malformed input, peer death and reconnect, and one-sided operations against
// a process whose only application thread is blocked.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <flatbuffers/flatbuffers.h>
#include <gtest/gtest.h>

#include "common/errors.h"
#include "m2m/frame.h"
#include "tests/unit/m2m/bounded_wait.h"
#include "tests/unit/m2m/ucx_test_util.h"

extern char** environ;

namespace fedfs::m2m {
namespace {

using namespace std::chrono_literals;
using testing::BoundedCall;
using testing::CaptureSinkGet;
using testing::NewUcx;
using testing::TestKey;
using testing::WaitUntil;

// Timeout of operations that are expected to succeed (or fail for a reason
// other than time): far above normal, so that a loaded machine never hits it.
constexpr auto kT = 30s;

Bytes Pattern(size_t n, uint32_t seed) {
  Bytes b(n);
  std::mt19937 rng(seed);
  for (auto& x : b) x = std::byte(rng());
  return b;
}

// A listening server with an echo handler (1), a never-answering handler (2),
// and a handler that answers from another thread (3).
struct Server {
  explicit Server(const Bytes& key = TestKey('k'), size_t max = 64u << 20) {
    t = NewUcx(key, max);
    t->Handle(1, [this](IncomingCall call, Responder r) {
      last_peer = call.peer;
      r.Reply(std::move(call.payload));
    });
    t->Handle(2, [this](IncomingCall, Responder r) {
      std::lock_guard lock(mu);
      parked.push_back(std::move(r));
    });
    t->Handle(3, [](IncomingCall call, Responder r) {
      std::thread([call = std::move(call), r = std::move(r)]() mutable {
        std::this_thread::sleep_for(1ms);
        Bytes out = call.payload;
        out.push_back(std::byte{'!'});
        r.Reply(std::move(out));
      }).detach();
    });
    auto a = t->Listen("127.0.0.1:0");
    EXPECT_TRUE(a) << a.error().ToString();
    addr = a.value_or("");
  }
  ~Server() {
    t->Shutdown();
    std::lock_guard lock(mu);
    parked.clear();
  }
  std::unique_ptr<Transport> t;
  std::string addr;
  PeerInfo last_peer;
  std::mutex mu;
  std::vector<Responder> parked;
};

TEST(UcxTransport, ListenReportsRealPort) {
  Server s;
  EXPECT_EQ(s.addr.rfind("127.0.0.1:", 0), 0u) << s.addr;
  EXPECT_NE(s.addr, "127.0.0.1:0");
}

TEST(UcxTransport, RpcSmallLargeAndUnknownMethod) {
  Server s;
  auto c = NewUcx(TestKey('k'));
  auto ep = c->GetEndpoint(s.addr);
  EXPECT_EQ(ep.get(), c->GetEndpoint(s.addr).get());

  auto small = CallSync(*ep, 1, Pattern(64, 1), kT);
  ASSERT_TRUE(small) << small.error().ToString();
  EXPECT_EQ(*small, Pattern(64, 1));
  EXPECT_NE(s.last_peer.conn_id, 0u);
  EXPECT_EQ(s.last_peer.remote_addr.rfind("127.0.0.1:", 0), 0u) << s.last_peer.remote_addr;

  const Bytes big = Pattern(4u << 20, 2);
  auto large = CallSync(*ep, 1, big, 20s);
  ASSERT_TRUE(large) << large.error().ToString();
  EXPECT_TRUE(*large == big);

  auto other_thread = CallSync(*ep, 3, Pattern(10, 3), kT);
  ASSERT_TRUE(other_thread) << other_thread.error().ToString();
  EXPECT_EQ(other_thread->size(), 11u);

  auto unknown = CallSync(*ep, 999, {}, kT);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ENOSYS);

  // The sender refuses payloads over its own limit.
  auto too_big = CallSync(*ep, 1, Bytes((64u << 20) + 1), kT);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().code, EMSGSIZE);
}

TEST(UcxTransport, ManyConcurrentCalls) {
  Server s;
  auto c = NewUcx(TestKey('k'));
  auto ep = c->GetEndpoint(s.addr);
  constexpr int kN = 200;
  std::atomic<int> ok{0}, done{0};
  for (int i = 0; i < kN; ++i) {
    Bytes p = Pattern(32, static_cast<uint32_t>(i));
    ep->Call(1, p, kT, [&, p](Result<Bytes> r) {
      if (r && *r == p) ok.fetch_add(1);
      done.fetch_add(1);
    });
  }
  EXPECT_TRUE(WaitUntil([&] { return done.load() == kN; })) << done.load() << " of " << kN;
  EXPECT_EQ(ok.load(), kN);
}

TEST(UcxTransport, CallDeadline) {
  Server s;
  auto c = NewUcx(TestKey('k'));
  auto ep = c->GetEndpoint(s.addr);
  ASSERT_TRUE(ConnectSync(*ep, kT));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = BoundedCall(*ep, 2, Pattern(8, 4), 200ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r);
  // The deadline ended the call (ETIMEDOUT is only the deadline's), and not
  // before its time, while the handler held the request it had received.
  EXPECT_EQ(r.error().code, ETIMEDOUT) << r.error().ToString();
  EXPECT_GE(took, 200ms);
  EXPECT_TRUE(WaitUntil([&] {
    std::lock_guard lock(s.mu);
    return s.parked.size() == 1;
  }));
  // The late reply (EIO, the parked responders are dropped) is ignored; the
  // connection still works.
  {
    std::lock_guard lock(s.mu);
    s.parked.clear();
  }
  auto again = CallSync(*ep, 1, Pattern(8, 5), kT);
  ASSERT_TRUE(again) << again.error().ToString();
}

TEST(UcxTransport, ResponderDroppedGivesEio) {
  Server s;
  s.t->Handle(4, [](IncomingCall, Responder) {});
  // Handle after Listen is allowed here because no traffic runs yet.
  auto c = NewUcx(TestKey('k'));
  auto r = CallSync(*c->GetEndpoint(s.addr), 4, {}, kT);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EIO);
}

// The transport's UCX table (m2m/ucx_util.cc, docs/errors.md) yields only
// errnos that the rule at the mount (common/errors.h) knows: the deadline,
// the unreachable class, and the two local failures.
TEST(UcxTransport, StatusTableYieldsTransportErrnos) {
  std::map<int, int> table;
  for (auto [status, e] : UcxStatusErrnosForTest()) table[status] = e;
  ASSERT_EQ(table.at(0), 0);  // UCS_OK
  for (auto [status, e] : table) {
    if (status == 0) continue;
    EXPECT_TRUE(e == ETIMEDOUT || e == EINVAL || e == ENOMEM || IsUnreachable(e))
        << "UCX status " << status << " -> " << std::strerror(e);
  }
  // UCX's status values (ucs/type/status.h, part of its ABI).
  EXPECT_EQ(table.at(-20), ETIMEDOUT);  // UCS_ERR_TIMED_OUT
  EXPECT_EQ(table.at(-80), ETIMEDOUT);  // UCS_ERR_ENDPOINT_TIMEOUT
  for (int s : {-6, -23, -24}) {        // UNREACHABLE, REJECTED, NOT_CONNECTED
    EXPECT_EQ(table.at(s), EHOSTDOWN) << s;
  }
  EXPECT_EQ(table.at(-5), EINVAL);  // UCS_ERR_INVALID_PARAM
  EXPECT_EQ(table.at(-4), ENOMEM);  // UCS_ERR_NO_MEMORY
  for (int s : {-3, -16, -25, -40, -60}) {  // IO_ERROR, CANCELED, CONNECTION_RESET, link, endpoint
    EXPECT_EQ(table.at(s), ECONNRESET) << s;
  }
  // What the caller of a mount gets for them.
  EXPECT_EQ(CallerErrno(Error{table.at(-20), ""}), ETIMEDOUT);
  for (int s : {-6, -16, -25}) EXPECT_EQ(CallerErrno(Error{table.at(s), ""}), EHOSTDOWN) << s;
}

struct Regions : ::testing::Test {
  void SetUp() override {
    region = s.t->Allocate(2u << 20).value_or(nullptr);
    ASSERT_TRUE(region);
    c = NewUcx(TestKey('k'));
    ep = c->GetEndpoint(s.addr);
    auto imp = ep->Import(region->Export());
    ASSERT_TRUE(imp) << imp.error().ToString();
    remote = *imp;
  }
  Server s;
  std::unique_ptr<LocalRegion> region;
  std::unique_ptr<Transport> c;
  std::shared_ptr<Endpoint> ep;
  std::shared_ptr<RemoteRegion> remote;
};

TEST_F(Regions, AllocateIsZeroedAndAligned) {
  EXPECT_EQ(reinterpret_cast<uintptr_t>(region->data()) % 8, 0u);
  for (size_t i = 0; i < region->size(); i += 4096) ASSERT_EQ(region->data()[i], std::byte{0});
  const RegionDesc d = region->Export();
  EXPECT_EQ(d.length, 2u << 20);
  EXPECT_EQ(d.addr, reinterpret_cast<uint64_t>(region->data()));
  EXPECT_FALSE(d.rkey.empty());
}

TEST_F(Regions, PutGetSmallAndLarge) {
  const uint64_t word = 0x1122334455667788ULL;
  ASSERT_TRUE(PutSync(*ep, &word, 8, *remote, 16, kT));
  uint64_t seen;
  std::memcpy(&seen, region->data() + 16, 8);  // Put completion = visible at the target
  EXPECT_EQ(seen, word);
  uint64_t back = 0;
  ASSERT_TRUE(GetSync(*ep, &back, 8, *remote, 16, kT));
  EXPECT_EQ(back, word);

  const Bytes big = Pattern(1u << 20, 6);
  ASSERT_TRUE(PutSync(*ep, big.data(), big.size(), *remote, 4096, kT));
  EXPECT_EQ(std::memcmp(region->data() + 4096, big.data(), big.size()), 0);
  Bytes got(big.size());
  ASSERT_TRUE(GetSync(*ep, got.data(), got.size(), *remote, 4096, kT));
  EXPECT_TRUE(got == big);
}

TEST_F(Regions, RegisteredUserMemory) {
  std::vector<uint64_t> mem(1024, 7);
  auto reg = s.t->Register(mem.data(), mem.size() * 8);
  ASSERT_TRUE(reg) << reg.error().ToString();
  auto imp = ep->Import((*reg)->Export());
  ASSERT_TRUE(imp);
  uint64_t v = 0;
  ASSERT_TRUE(GetSync(*ep, &v, 8, **imp, 8, kT));
  EXPECT_EQ(v, 7u);
  v = 99;
  ASSERT_TRUE(PutSync(*ep, &v, 8, **imp, 800, kT));
  EXPECT_EQ(mem[100], 99u);
}

TEST_F(Regions, BoundsAndAlignmentChecked) {
  char buf[16] = {};
  const uint64_t len = region->size();
  auto st = PutSync(*ep, buf, 16, *remote, len - 8, kT);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, EINVAL);
  st = GetSync(*ep, buf, 1, *remote, len, kT);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, EINVAL);
  st = GetSync(*ep, buf, 8, *remote, UINT64_MAX - 2, kT);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, EINVAL);
  auto fa = FetchAddSync(*ep, *remote, 4, 1, kT);
  ASSERT_FALSE(fa);
  EXPECT_EQ(fa.error().code, EINVAL);
  // A region imported on another endpoint is refused.
  auto other = c->GetEndpoint("127.0.0.1:1");
  auto foreign = GetSync(*other, buf, 8, *remote, 0, kT);
  ASSERT_FALSE(foreign);
  EXPECT_EQ(foreign.error().code, EINVAL);
}

TEST_F(Regions, CompareSwapSemantics) {
  const uint64_t five = 5;
  ASSERT_TRUE(PutSync(*ep, &five, 8, *remote, 64, kT));
  auto ok = CompareSwapSync(*ep, *remote, 64, 5, 7, kT);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(*ok, 5u);  // swapped
  uint64_t now;
  std::memcpy(&now, region->data() + 64, 8);
  EXPECT_EQ(now, 7u);
  auto fail = CompareSwapSync(*ep, *remote, 64, 5, 9, kT);
  ASSERT_TRUE(fail);
  EXPECT_EQ(*fail, 7u);  // not swapped: old value != expected
  std::memcpy(&now, region->data() + 64, 8);
  EXPECT_EQ(now, 7u);
  auto fa = FetchAddSync(*ep, *remote, 64, 3, kT);
  ASSERT_TRUE(fa);
  EXPECT_EQ(*fa, 7u);
  std::memcpy(&now, region->data() + 64, 8);
  EXPECT_EQ(now, 10u);
}

TEST_F(Regions, ConcurrentFetchAddFromFourTransports) {
  constexpr int kClients = 4, kEach = 500;
  std::vector<std::unique_ptr<Transport>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(NewUcx(TestKey('k')));
  std::mutex mu;
  std::set<uint64_t> olds;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  const RegionDesc desc = region->Export();
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto e = clients[i]->GetEndpoint(s.addr);
      auto r = e->Import(desc);
      if (!r) {
        errors.fetch_add(1);
        return;
      }
      for (int k = 0; k < kEach; ++k) {
        auto v = FetchAddSync(*e, **r, 128, 1, kT);
        if (!v) {
          errors.fetch_add(1);
          continue;
        }
        std::lock_guard lock(mu);
        olds.insert(*v);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  uint64_t total;
  std::memcpy(&total, region->data() + 128, 8);
  EXPECT_EQ(total, uint64_t{kClients * kEach});
  EXPECT_EQ(olds.size(), size_t{kClients * kEach});  // every old value seen exactly once
}

TEST(UcxTransport, WrongKeyRefusedBothWays) {
  auto& log = CaptureSinkGet();
  Server s(TestKey('k'));

  // A client with the wrong key: it detects the server's MAC mismatch (EACCES),
  // and the server logs the aborted handshake.
  size_t mark = log.Mark();
  auto bad = NewUcx(TestKey('x'));
  auto st = ConnectSync(*bad->GetEndpoint(s.addr), kT);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, EACCES);
  auto call = CallSync(*bad->GetEndpoint(s.addr), 1, {}, kT);
  ASSERT_FALSE(call);
  EXPECT_EQ(call.error().code, EACCES);

  // A client that does not check the server and sends a forged proof: the
  // server refuses it and logs.
  FrameHeader proof;
  proof.kind = FrameKind::kAuthProof;
  proof.mac = Bytes(32, std::byte{1});
  ASSERT_TRUE(UcxSendRawForTest(testing::Loopback(), s.addr, EncodeFrame(proof), {}));
  EXPECT_TRUE(WaitUntil([&] { return log.Contains("refusing peer", mark); }));

  // A server with the wrong key, seen from a good client.
  Server wrong_server(TestKey('y'));
  auto good = NewUcx(TestKey('k'));
  auto st2 = ConnectSync(*good->GetEndpoint(wrong_server.addr), kT);
  ASSERT_FALSE(st2);
  EXPECT_EQ(st2.error().code, EACCES);

  // The real server still serves a correct client.
  auto r = CallSync(*good->GetEndpoint(s.addr), 1, Pattern(16, 7), kT);
  ASSERT_TRUE(r) << r.error().ToString();
}

// A frame with an arbitrary version number, built field by field.
Bytes FrameWithVersion(uint16_t version) {
  flatbuffers::FlatBufferBuilder b;
  const auto start = b.StartTable();
  b.AddElement<uint16_t>(4, version, 0);    // version
  b.AddElement<uint8_t>(6, 0, 0xff);        // kind = Request
  b.AddElement<uint64_t>(8, 1, 0);          // call_id
  b.AddElement<uint16_t>(10, 1, 0);         // method
  b.Finish(flatbuffers::Offset<void>(b.EndTable(start)));
  const auto* p = reinterpret_cast<const std::byte*>(b.GetBufferPointer());
  return Bytes(p, p + b.GetSize());
}

TEST(UcxTransport, MalformedFramesAreDropped) {
  auto& log = CaptureSinkGet();
  const size_t mark = log.Mark();
  Server s(TestKey('k'), /*max=*/1u << 20);
  // Sanity of the hand-built frame: version 1 decodes, version 7 does not.
  ASSERT_TRUE(DecodeFrame(FrameWithVersion(kWireVersion), 0, 1024));
  ASSERT_FALSE(DecodeFrame(FrameWithVersion(7), 0, 1024));

  FrameHeader req;
  req.kind = FrameKind::kRequest;
  req.call_id = 1;
  req.method = 1;
  const Bytes valid = EncodeFrame(req);
  FrameHeader giant = req;
  giant.payload_size = uint64_t{1} << 40;
  FrameHeader big = req;
  big.payload_size = 2u << 20;

  const auto ucx = testing::Loopback();
  EXPECT_TRUE(UcxSendRawForTest(ucx, s.addr, Pattern(64, 8), {}));                 // random bytes
  EXPECT_TRUE(UcxSendRawForTest(ucx, s.addr, Bytes(valid.begin(), valid.begin() + valid.size() / 2), {}));
  EXPECT_TRUE(UcxSendRawForTest(ucx, s.addr, FrameWithVersion(7), {}));           // wrong version
  EXPECT_TRUE(UcxSendRawForTest(ucx, s.addr, EncodeFrame(giant), Pattern(16, 9)));  // giant length
  EXPECT_TRUE(UcxSendRawForTest(ucx, s.addr, EncodeFrame(big), Pattern(2u << 20, 10)));  // > max
  EXPECT_TRUE(UcxSendRawForTest(ucx, s.addr, {}, Pattern(100, 11)));              // no header
  req.payload_size = 4;
  EXPECT_TRUE(UcxSendRawForTest(ucx, s.addr, EncodeFrame(req), Pattern(4, 12)));  // unauthenticated
  EXPECT_TRUE(log.Contains("malformed frame", mark));

  auto c = NewUcx(TestKey('k'));
  auto r = CallSync(*c->GetEndpoint(s.addr), 1, Pattern(32, 13), kT);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(*r, Pattern(32, 13));
}

TEST(UcxTransport, PeerDiesThenNewServerOnSameAddress) {
  auto s1 = std::make_unique<Server>();
  const std::string addr = s1->addr;
  auto region1 = s1->t->Allocate(4096).value_or(nullptr);
  ASSERT_TRUE(region1);
  auto c = NewUcx(TestKey('k'));
  auto ep = c->GetEndpoint(addr);
  auto remote1 = ep->Import(region1->Export());
  ASSERT_TRUE(remote1);
  ASSERT_TRUE(FetchAddSync(*ep, **remote1, 0, 1, kT));

  s1.reset();  // the peer dies (Shutdown)
  // The operations fail because the peer is gone (the connection breaks, a
  // new one is refused), not at their deadlines: ETIMEDOUT would mean the
  // death went unnoticed.
  auto r = BoundedCall(*ep, 1, {}, kT);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().code == ECONNRESET || r.error().code == EHOSTDOWN)
      << r.error().ToString();
  auto fa = testing::Bounded<uint64_t>(
      [&](Callback<uint64_t> cb) { ep->FetchAdd(**remote1, 0, 1, kT, std::move(cb)); });
  ASSERT_FALSE(fa);
  EXPECT_TRUE(fa.error().code == ECONNRESET || fa.error().code == EHOSTDOWN)
      << fa.error().ToString();

  // A new server on the same address: the endpoint reconnects.
  auto s2 = NewUcx(TestKey('k'));
  s2->Handle(1, [](IncomingCall call, Responder resp) { resp.Reply(std::move(call.payload)); });
  Result<std::string> a2 = Err(EIO, "");
  for (int i = 0; i < 50 && !(a2 = s2->Listen(addr)); ++i) std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(a2) << a2.error().ToString();
  auto ok = CallSync(*ep, 1, Pattern(8, 14), kT);
  ASSERT_TRUE(ok) << ok.error().ToString();
  // The dead server's region, named by its old descriptor, is refused on the
  // new one (ESTALE), never read or written there: over TCP the software
  // RMA path would touch whatever the new process has at that address.
  auto stale = testing::Bounded<uint64_t>(
      [&](Callback<uint64_t> cb) { ep->FetchAdd(**remote1, 0, 1, kT, std::move(cb)); });
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ESTALE) << stale.error().ToString();
  auto reimported = ep->Import(region1->Export());
  ASSERT_TRUE(reimported);
  std::vector<std::byte> got(64);
  auto get = GetSync(*ep, got.data(), got.size(), **reimported, 0, kT);
  ASSERT_FALSE(get);
  EXPECT_EQ(get.error().code, ESTALE) << get.error().ToString();
  auto region2 = s2->Allocate(4096).value_or(nullptr);
  ASSERT_TRUE(region2);
  auto remote2 = ep->Import(region2->Export());
  ASSERT_TRUE(remote2);
  auto v = FetchAddSync(*ep, **remote2, 8, 5, kT);
  ASSERT_TRUE(v) << v.error().ToString();
  EXPECT_EQ(*v, 0u);
  s2->Shutdown();
}

TEST(UcxTransport, ConnectToNobodyFailsFast) {
  // The connect timeout is above the call's deadline, which is above
  // normal: an EHOSTDOWN before the deadline (ETIMEDOUT) can only come
  // from the refused connection, not from waiting either timeout out.
  auto c = NewUcx(TestKey('k'), 64u << 20, 2 * kT);
  // A port nobody listens on (a listener we shut down).
  std::string addr;
  {
    Server s;
    addr = s.addr;
  }
  auto r = BoundedCall(*c->GetEndpoint(addr), 1, {}, kT);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EHOSTDOWN) << r.error().ToString();
}

TEST(UcxTransport, ShutdownFailsInFlightAndIsIdempotent) {
  Server s;
  auto c = NewUcx(TestKey('k'));
  auto ep = c->GetEndpoint(s.addr);
  ASSERT_TRUE(ConnectSync(*ep, kT));
  std::promise<Result<Bytes>> p;
  ep->Call(2, {}, testing::kHang, [&](Result<Bytes> r) { p.set_value(std::move(r)); });
  // In flight: the server's handler holds the request.
  ASSERT_TRUE(WaitUntil([&] {
    std::lock_guard lock(s.mu);
    return s.parked.size() == 1;
  }));
  c->Shutdown();
  auto f = p.get_future();
  ASSERT_EQ(f.wait_for(testing::kHang), std::future_status::ready);
  auto r = f.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ESHUTDOWN);
  c->Shutdown();
  auto after = CallSync(*ep, 1, {}, kT);
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code, ESHUTDOWN);
  EXPECT_FALSE(c->Allocate(64));
}

TEST(UcxTransport, DisconnectThenReconnect) {
  Server s;
  auto c = NewUcx(TestKey('k'));
  auto ep = c->GetEndpoint(s.addr);
  auto region = s.t->Allocate(64).value_or(nullptr);
  ASSERT_TRUE(region);
  auto remote = ep->Import(region->Export());
  ASSERT_TRUE(remote);
  ASSERT_TRUE(FetchAddSync(*ep, **remote, 0, 1, kT));
  const uint64_t first = s.last_peer.conn_id;
  ep->Disconnect();
  auto v = FetchAddSync(*ep, **remote, 0, 1, kT);  // re-unpacks the key on the new connection
  ASSERT_TRUE(v) << v.error().ToString();
  EXPECT_EQ(*v, 1u);
  ASSERT_TRUE(CallSync(*ep, 1, {}, kT));
  EXPECT_NE(s.last_peer.conn_id, first);
}

// --- one-sided operations against a blocked process --------------------------

// Child side: run as `<this binary> --gtest_filter=UcxChild.BlockedTarget` with
// FEDFS_UCX_CHILD_FD=<pipe fd>. Publishes "addr desc.addr desc.length rkeyhex\n"
// then blocks its only application thread in read() forever.
TEST(UcxChild, BlockedTarget) {
  const char* fd_env = std::getenv("FEDFS_UCX_CHILD_FD");
  if (fd_env == nullptr) GTEST_SKIP() << "helper for OneSidedWhileTargetBlocked";
  const int fd = std::atoi(fd_env);
  auto t = NewUcx(TestKey('k'));
  auto a = t->Listen("127.0.0.1:0");
  ASSERT_TRUE(a);
  auto region = t->Allocate(1u << 20);
  ASSERT_TRUE(region);
  const RegionDesc d = (*region)->Export();
  std::string line = *a + " " + std::to_string(d.addr) + " " + std::to_string(d.length) + " ";
  static const char* kHex = "0123456789abcdef";
  for (std::byte b : d.rkey) {
    line += kHex[std::to_integer<int>(b) >> 4];
    line += kHex[std::to_integer<int>(b) & 15];
  }
  line += "\n";
  ASSERT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  char c;
  while (true) [[maybe_unused]] auto n = ::read(STDIN_FILENO, &c, 1);  // blocks forever
}

TEST(UcxTransport, OneSidedWhileTargetBlocked) {
  int out[2], in[2];
  ASSERT_EQ(::pipe(out), 0);  // child -> parent: descriptor
  ASSERT_EQ(::pipe(in), 0);   // parent -> child: never written (child blocks on it)
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  ASSERT_GT(n, 0);
  exe[n] = 0;
  const std::string fd_env = "FEDFS_UCX_CHILD_FD=" + std::to_string(out[1]);
  std::vector<std::string> env_strings{fd_env};
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string filter = "--gtest_filter=UcxChild.BlockedTarget";
  char* argv[] = {exe, filter.data(), nullptr};
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(in[0], STDIN_FILENO);
    ::close(out[0]);
    ::execve(exe, argv, envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(in[0]);
  struct Reap {
    pid_t pid;
    int fds[2];
    ~Reap() {
      ::kill(pid, SIGKILL);
      int status;
      ::waitpid(pid, &status, 0);
      ::close(fds[0]);
      ::close(fds[1]);
    }
  } reap{pid, {out[0], in[1]}};

  std::string line;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < until) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t r = ::read(out[0], buf, sizeof buf);
    if (r <= 0) break;
    line.append(buf, static_cast<size_t>(r));
  }
  ASSERT_NE(line.find('\n'), std::string::npos) << "child did not publish its region";
  std::istringstream is(line);
  std::string addr, hex;
  RegionDesc d;
  is >> addr >> d.addr >> d.length >> hex;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    d.rkey.push_back(std::byte(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  // The child's only application thread is now blocked in read().
  auto c = NewUcx(TestKey('k'));
  auto ep = c->GetEndpoint(addr);
  auto remote = ep->Import(d);
  ASSERT_TRUE(remote) << remote.error().ToString();
  const Bytes data = Pattern(64 << 10, 15);
  ASSERT_TRUE(PutSync(*ep, data.data(), data.size(), **remote, 4096, kT));
  Bytes back(data.size());
  ASSERT_TRUE(GetSync(*ep, back.data(), back.size(), **remote, 4096, kT));
  EXPECT_TRUE(back == data);
  auto fa = FetchAddSync(*ep, **remote, 0, 41, kT);
  ASSERT_TRUE(fa) << fa.error().ToString();
  EXPECT_EQ(*fa, 0u);
  auto cas = CompareSwapSync(*ep, **remote, 0, 41, 42, kT);
  ASSERT_TRUE(cas) << cas.error().ToString();
  EXPECT_EQ(*cas, 41u);
  uint64_t word = 0;
  ASSERT_TRUE(GetSync(*ep, &word, 8, **remote, 0, kT));
  EXPECT_EQ(word, 42u);

  // A frozen target (even its progress thread): a one-sided operation fails
  // with ETIMEDOUT (and the connection is force-closed); once the target runs
  // again, the next operation reconnects and re-unpacks the key.
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, WUNTRACED), pid);  // stopped for sure
  ASSERT_TRUE(WIFSTOPPED(wstatus));
  uint64_t stale = 0;
  auto frozen = GetSync(*ep, &stale, 8, **remote, 0, 300ms);
  ASSERT_FALSE(frozen);
  EXPECT_EQ(frozen.error().code, ETIMEDOUT);
  ASSERT_EQ(::kill(pid, SIGCONT), 0);
  word = 0;
  auto thawed = GetSync(*ep, &word, 8, **remote, 0, kT);
  ASSERT_TRUE(thawed) << thawed.error().ToString();
  EXPECT_EQ(word, 42u);
  c->Shutdown();
}

}  // namespace
}  // namespace fedfs::m2m
