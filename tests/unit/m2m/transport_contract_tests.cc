// The transport contract suite (see transport_contract.h): what every
// m2m::Transport must do, checked only through the Transport interface and the
// blocking *Sync helpers, so that it runs unchanged against every
// implementation. No timing assertions: operations that might hang are waited
// for with a "does not hang" bound (bounded_wait.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/m2m/bounded_wait.h"
#include "tests/unit/m2m/transport_contract.h"

namespace fedfs::m2m::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint16_t kEcho = 1;   // replies with the request payload
constexpr uint16_t kFail = 2;   // fails with the errno in the first payload byte
constexpr uint16_t kHold = 3;   // keeps the Responder without replying
constexpr uint16_t kDrop = 4;   // destroys the Responder without replying
constexpr uint16_t kLater = 5;  // replies from another thread
constexpr uint16_t kRev = 6;    // replies with the payload reversed
constexpr uint16_t kUnhandled = 77;

// Timeout of operations expected to succeed: far above normal.
constexpr Timeout kOpTimeout = seconds(30);

Bytes Key(char c) { return Bytes(32, std::byte(c)); }

Bytes Pattern(size_t n, uint32_t seed) {
  Bytes b(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    b[i] = std::byte(x >> 24);
  }
  return b;
}

Bytes Str(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return Bytes(p, p + s.size());
}

bool IsPeerDownErrno(int code) {
  return code == ETIMEDOUT || code == ECONNRESET || code == EHOSTDOWN || code == ECONNREFUSED;
}

// A listening server with the standard handlers, and what they saw.
struct Server {
  std::unique_ptr<Transport> t;
  std::string addr;
  std::mutex mu;
  std::vector<Responder> held;  // kHold
  std::promise<void> first_hold;
  bool first_hold_set = false;
  std::vector<std::thread> repliers;  // kLater

  ~Server() {
    for (auto& th : repliers) th.join();
  }
  void ReleaseHeld() {
    std::vector<Responder> h;
    {
      std::lock_guard lk(mu);
      h.swap(held);
    }
    for (auto& r : h) r.Reply(Str("late"));
  }
};

std::unique_ptr<Server> StartServer(ContractEnv& env, const Bytes& key = Key('k')) {
  auto s = std::make_unique<Server>();
  s->t = env.NewTransport(key);
  Server* raw = s.get();
  s->t->Handle(kEcho, [](IncomingCall c, Responder r) { r.Reply(std::move(c.payload)); });
  s->t->Handle(kRev, [](IncomingCall c, Responder r) {
    std::reverse(c.payload.begin(), c.payload.end());
    r.Reply(std::move(c.payload));
  });
  s->t->Handle(kFail, [](IncomingCall c, Responder r) {
    const int code = c.payload.empty() ? EIO : static_cast<int>(c.payload[0]);
    r.Fail(Error{code, "handler chose to fail"});
  });
  s->t->Handle(kHold, [raw](IncomingCall, Responder r) {
    std::lock_guard lk(raw->mu);
    raw->held.push_back(std::move(r));
    if (!raw->first_hold_set) {
      raw->first_hold_set = true;
      raw->first_hold.set_value();
    }
  });
  s->t->Handle(kDrop, [](IncomingCall, Responder) {});
  s->t->Handle(kLater, [raw](IncomingCall c, Responder r) {
    std::lock_guard lk(raw->mu);
    raw->repliers.emplace_back([c = std::move(c), r = std::move(r)]() mutable {
      std::this_thread::sleep_for(milliseconds(5));
      r.Reply(std::move(c.payload));
    });
  });
  auto addr = s->t->Listen(env.ListenAddress());
  EXPECT_TRUE(addr) << addr.error().ToString();
  if (addr) s->addr = *addr;
  return s;
}

std::unique_ptr<ContractEnv> MakeEnv(const ContractEnvFactory& f) { return f.make(); }

TEST_P(TransportContract, SmallRpcRoundTrip) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  ASSERT_TRUE(ep);
  EXPECT_EQ(ep->address(), server->addr);
  EXPECT_TRUE(ConnectSync(*ep, kOpTimeout));
  for (int i = 0; i < 10; ++i) {
    const Bytes msg = Str("hello " + std::to_string(i));
    auto r = CallSync(*ep, kEcho, msg, kOpTimeout);
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(*r, msg);
  }
  auto empty = CallSync(*ep, kEcho, {}, kOpTimeout);
  ASSERT_TRUE(empty) << empty.error().ToString();
  EXPECT_TRUE(empty->empty());
}

TEST_P(TransportContract, FourMiBRpcContentChecked) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  const Bytes big = Pattern(4u << 20, 7);
  auto r = CallSync(*ep, kRev, big, kOpTimeout);
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(r->size(), big.size());
  EXPECT_TRUE(std::equal(r->begin(), r->end(), big.rbegin()));
}

TEST_P(TransportContract, HandlerErrorReachesCaller) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  for (int code : {ENOENT, EEXIST, ENOSPC}) {
    auto r = CallSync(*ep, kFail, Bytes{std::byte(code)}, kOpTimeout);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, code);
  }
  // The connection still serves after errors.
  auto ok = CallSync(*ep, kEcho, Str("x"), kOpTimeout);
  EXPECT_TRUE(ok) << ok.error().ToString();
}

TEST_P(TransportContract, UnknownMethodIsEnosys) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  auto r = CallSync(*ep, kUnhandled, Str("?"), kOpTimeout);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ENOSYS);
}

TEST_P(TransportContract, DroppedResponderGivesEio) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  auto r = CallSync(*ep, kDrop, Str("?"), kOpTimeout);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EIO);
}

TEST_P(TransportContract, ResponderAnsweredFromAnotherThread) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  for (int i = 0; i < 5; ++i) {
    const Bytes msg = Pattern(100 + i, i);
    auto r = CallSync(*ep, kLater, msg, kOpTimeout);
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(*r, msg);
  }
}

TEST_P(TransportContract, PayloadOverLimitIsEmsgsize) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto client = env->NewTransport(Key('k'));  // default options
  auto ep = client->GetEndpoint(server->addr);
  Bytes huge(TransportOptions{}.max_message_bytes + 1);
  auto r = CallSync(*ep, kEcho, std::move(huge), kOpTimeout);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EMSGSIZE);
  auto ok = CallSync(*ep, kEcho, Str("still fine"), kOpTimeout);
  EXPECT_TRUE(ok) << ok.error().ToString();
}

TEST_P(TransportContract, CallTimesOutWhenHandlerDoesNotReply) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  ASSERT_TRUE(ConnectSync(*ep, kOpTimeout));
  const Timeout t = milliseconds(300);
  auto r = BoundedCall(*ep, kHold, Str("wait"), t);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ETIMEDOUT) << r.error().ToString();
  // A late reply is discarded; the endpoint keeps working.
  server->ReleaseHeld();
  auto ok = CallSync(*ep, kEcho, Str("after"), kOpTimeout);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(*ok, Str("after"));
}

TEST_P(TransportContract, ConcurrentCallersGetTheirOwnReplies) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        const Bytes msg = Str(std::to_string(t) + "/" + std::to_string(i));
        auto r = CallSync(*ep, kEcho, msg, kOpTimeout);
        if (!r || *r != msg) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_P(TransportContract, SameEndpointForSameAddress) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto client = env->NewTransport(Key('k'));
  EXPECT_EQ(client->GetEndpoint(server->addr), client->GetEndpoint(server->addr));
}

TEST_P(TransportContract, ExportImportDescriptor) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto region = server->t->Allocate(4096);
  ASSERT_TRUE(region) << region.error().ToString();
  ASSERT_EQ((*region)->size(), 4096u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*region)->data()) % 8, 0u);
  EXPECT_TRUE(std::all_of((*region)->data(), (*region)->data() + 4096,
                          [](std::byte b) { return b == std::byte{0}; }));
  const RegionDesc desc = (*region)->Export();
  EXPECT_EQ(desc.length, 4096u);
  EXPECT_FALSE(desc.rkey.empty());

  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  auto remote = ep->Import(desc);
  ASSERT_TRUE(remote) << remote.error().ToString();
  EXPECT_EQ((*remote)->desc().addr, desc.addr);
  EXPECT_EQ((*remote)->desc().length, desc.length);

  // Register wraps caller memory: a Put shows up in the caller's buffer.
  std::vector<uint64_t> mine(64, 0);
  auto reg = server->t->Register(mine.data(), mine.size() * 8);
  ASSERT_TRUE(reg) << reg.error().ToString();
  EXPECT_EQ((*reg)->data(), reinterpret_cast<std::byte*>(mine.data()));
  auto remote2 = ep->Import((*reg)->Export());
  ASSERT_TRUE(remote2);
  const uint64_t v = 0x1122334455667788ULL;
  ASSERT_TRUE(PutSync(*ep, &v, 8, **remote2, 8 * 5, kOpTimeout));
  EXPECT_EQ(mine[5], v);
}

void PutGetRoundTrip(ContractEnv& env, size_t region_len, size_t len, uint64_t put_off,
                     uint64_t get_off) {
  auto server = StartServer(env);
  auto region = server->t->Allocate(region_len);
  ASSERT_TRUE(region) << region.error().ToString();
  std::byte* mem = (*region)->data();
  auto client = env.NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  auto remote = ep->Import((*region)->Export());
  ASSERT_TRUE(remote) << remote.error().ToString();

  // Put lands exactly at [put_off, put_off + len) and nowhere else.
  const Bytes data = Pattern(len, static_cast<uint32_t>(len));
  auto put = PutSync(*ep, data.data(), len, **remote, put_off, kOpTimeout);
  ASSERT_TRUE(put) << put.error().ToString();
  EXPECT_EQ(std::memcmp(mem + put_off, data.data(), len), 0);
  EXPECT_TRUE(std::all_of(mem, mem + put_off, [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_TRUE(std::all_of(mem + put_off + len, mem + region_len,
                          [](std::byte b) { return b == std::byte{0}; }));

  // Get reads what the server wrote locally, at another offset.
  const Bytes local = Pattern(len, static_cast<uint32_t>(len) + 1);
  std::memcpy(mem + get_off, local.data(), len);
  Bytes back(len, std::byte{0xee});
  auto get = GetSync(*ep, back.data(), len, **remote, get_off, kOpTimeout);
  ASSERT_TRUE(get) << get.error().ToString();
  EXPECT_EQ(back, local);
}

TEST_P(TransportContract, PutGetEightBytesAtOffsets) {
  auto env = MakeEnv(GetParam());
  PutGetRoundTrip(*env, 4096, 8, 24, 1000);
}

TEST_P(TransportContract, PutGetOneMiBAtOffsets) {
  auto env = MakeEnv(GetParam());
  PutGetRoundTrip(*env, 3u << 20, 1u << 20, 4096 + 8, (2u << 20) - 64);
}

TEST_P(TransportContract, OutOfBoundsIsEinval) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto region = server->t->Allocate(4096);
  ASSERT_TRUE(region);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  auto remote = ep->Import((*region)->Export());
  ASSERT_TRUE(remote);
  uint64_t buf[2] = {~0ULL, ~0ULL};

  auto put = PutSync(*ep, buf, 16, **remote, 4096 - 8, kOpTimeout);
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().code, EINVAL);
  auto get = GetSync(*ep, buf, 8, **remote, 4096, kOpTimeout);
  ASSERT_FALSE(get);
  EXPECT_EQ(get.error().code, EINVAL);
  auto far = GetSync(*ep, buf, 8, **remote, ~0ULL - 4, kOpTimeout);  // offset + len overflows
  ASSERT_FALSE(far);
  EXPECT_EQ(far.error().code, EINVAL);
  auto fa = FetchAddSync(*ep, **remote, 4096, 1, kOpTimeout);
  ASSERT_FALSE(fa);
  EXPECT_EQ(fa.error().code, EINVAL);
  auto cas = CompareSwapSync(*ep, **remote, 8192, 0, 1, kOpTimeout);
  ASSERT_FALSE(cas);
  EXPECT_EQ(cas.error().code, EINVAL);
  // Nothing was written.
  EXPECT_TRUE(std::all_of((*region)->data(), (*region)->data() + 4096,
                          [](std::byte b) { return b == std::byte{0}; }));
  // In-bounds at the very end works.
  EXPECT_TRUE(PutSync(*ep, buf, 8, **remote, 4096 - 8, kOpTimeout));
}

TEST_P(TransportContract, FetchAddFromManyClientsIsExact) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto region = server->t->Allocate(64);
  ASSERT_TRUE(region);
  const RegionDesc desc = (*region)->Export();
  constexpr int kClients = 4;
  constexpr int kAdds = 1000;
  constexpr uint64_t kAdd = 3;
  constexpr uint64_t kOffset = 16;

  std::vector<std::unique_ptr<Transport>> clients;
  std::vector<std::shared_ptr<Endpoint>> eps;
  std::vector<std::shared_ptr<RemoteRegion>> remotes;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(env->NewTransport(Key('k')));
    eps.push_back(clients.back()->GetEndpoint(server->addr));
    auto r = eps.back()->Import(desc);
    ASSERT_TRUE(r);
    remotes.push_back(*r);
  }
  std::vector<std::vector<uint64_t>> olds(kClients);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < kAdds; ++n) {
        auto r = FetchAddSync(*eps[i], *remotes[i], kOffset, kAdd, kOpTimeout);
        if (r) {
          olds[i].push_back(*r);
        } else {
          ++errors;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(errors.load(), 0);
  uint64_t word;
  std::memcpy(&word, (*region)->data() + kOffset, 8);
  EXPECT_EQ(word, kClients * kAdds * kAdd);
  // Every add saw a distinct old value: 0, 3, 6, ... (atomicity).
  std::set<uint64_t> seen;
  for (auto& v : olds) seen.insert(v.begin(), v.end());
  EXPECT_EQ(seen.size(), size_t{kClients * kAdds});
  EXPECT_EQ(*seen.begin(), 0u);
  EXPECT_EQ(*seen.rbegin(), (kClients * kAdds - 1) * kAdd);
  // Neighbouring words untouched.
  uint64_t before, after;
  std::memcpy(&before, (*region)->data() + kOffset - 8, 8);
  std::memcpy(&after, (*region)->data() + kOffset + 8, 8);
  EXPECT_EQ(before, 0u);
  EXPECT_EQ(after, 0u);
}

TEST_P(TransportContract, CompareSwapSuccessAndFailure) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto region = server->t->Allocate(64);
  ASSERT_TRUE(region);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  auto remote = ep->Import((*region)->Export());
  ASSERT_TRUE(remote);
  auto word = [&] {
    uint64_t w;
    std::memcpy(&w, (*region)->data() + 8, 8);
    return w;
  };

  auto r1 = CompareSwapSync(*ep, **remote, 8, 0, 5, kOpTimeout);  // succeeds
  ASSERT_TRUE(r1) << r1.error().ToString();
  EXPECT_EQ(*r1, 0u);
  EXPECT_EQ(word(), 5u);
  auto r2 = CompareSwapSync(*ep, **remote, 8, 0, 7, kOpTimeout);  // fails: word is 5
  ASSERT_TRUE(r2);
  EXPECT_EQ(*r2, 5u);
  EXPECT_EQ(word(), 5u);
  auto r3 = CompareSwapSync(*ep, **remote, 8, 5, 0xdeadbeefcafef00dULL, kOpTimeout);
  ASSERT_TRUE(r3);
  EXPECT_EQ(*r3, 5u);
  EXPECT_EQ(word(), 0xdeadbeefcafef00dULL);
  auto fa = FetchAddSync(*ep, **remote, 8, 0, kOpTimeout);  // add 0 reads the word
  ASSERT_TRUE(fa);
  EXPECT_EQ(*fa, 0xdeadbeefcafef00dULL);
}

TEST_P(TransportContract, WrongKeyRefusedAndServerStillServes) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env, Key('k'));
  auto region = server->t->Allocate(64);
  ASSERT_TRUE(region);

  auto intruder = env->NewTransport(Key('x'));
  auto bad = intruder->GetEndpoint(server->addr);
  auto c = Bounded<void>([&](Callback<void> cb) { bad->Connect(kOpTimeout, std::move(cb)); });
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, EACCES) << c.error().ToString();
  auto r = BoundedCall(*bad, kEcho, Str("let me in"), kOpTimeout);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EACCES) << r.error().ToString();

  auto client = env->NewTransport(Key('k'));
  auto good = client->GetEndpoint(server->addr);
  auto ok = CallSync(*good, kEcho, Str("friend"), kOpTimeout);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(*ok, Str("friend"));
  auto remote = good->Import((*region)->Export());
  ASSERT_TRUE(remote);
  EXPECT_TRUE(FetchAddSync(*good, **remote, 0, 1, kOpTimeout));
}

TEST_P(TransportContract, PeerDeathFailsOperationsWithinTimeout) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto region = server->t->Allocate(4096);
  ASSERT_TRUE(region);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  auto remote = ep->Import((*region)->Export());
  ASSERT_TRUE(remote);
  ASSERT_TRUE(CallSync(*ep, kEcho, Str("alive"), kOpTimeout));
  ASSERT_TRUE(FetchAddSync(*ep, **remote, 0, 1, kOpTimeout));

  env->Kill(*server->t, server->addr);

  // Each operation completes (bounded wait: it does not hang) with an error
  // that says the peer is down.
  const Timeout t = seconds(1);
  auto check = [&](const char* what, auto&& op) {
    auto r = op();
    ASSERT_FALSE(r) << what << " succeeded on a dead peer";
    EXPECT_TRUE(IsPeerDownErrno(r.error().code)) << what << ": " << r.error().ToString();
  };
  check("Call", [&] { return BoundedCall(*ep, kEcho, Str("anyone?"), t); });
  uint64_t v = 42;
  check("Put", [&] {
    return Bounded<void>([&](Callback<void> cb) { ep->Put(&v, 8, **remote, 8, t, std::move(cb)); });
  });
  check("Get", [&] {
    return Bounded<void>([&](Callback<void> cb) { ep->Get(&v, 8, **remote, 8, t, std::move(cb)); });
  });
  check("FetchAdd", [&] {
    return Bounded<uint64_t>(
        [&](Callback<uint64_t> cb) { ep->FetchAdd(**remote, 0, 1, t, std::move(cb)); });
  });
  check("CompareSwap", [&] {
    return Bounded<uint64_t>(
        [&](Callback<uint64_t> cb) { ep->CompareSwap(**remote, 0, 1, 2, t, std::move(cb)); });
  });
  check("Call again", [&] { return BoundedCall(*ep, kEcho, Str("anyone?"), t); });
}

TEST_P(TransportContract, DisconnectThenReconnect) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto region = server->t->Allocate(64);
  ASSERT_TRUE(region);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  auto remote = ep->Import((*region)->Export());
  ASSERT_TRUE(remote);
  for (int round = 0; round < 3; ++round) {
    auto r = CallSync(*ep, kEcho, Str("round " + std::to_string(round)), kOpTimeout);
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(*r, Str("round " + std::to_string(round)));
    auto fa = FetchAddSync(*ep, **remote, 0, 1, kOpTimeout);  // imported region survives
    ASSERT_TRUE(fa) << fa.error().ToString();
    EXPECT_EQ(*fa, static_cast<uint64_t>(round));
    ep->Disconnect();
  }
  EXPECT_TRUE(ConnectSync(*ep, kOpTimeout));
}

TEST_P(TransportContract, DisconnectFailsCallInFlight) {
  auto env = MakeEnv(GetParam());
  auto server = StartServer(*env);
  auto client = env->NewTransport(Key('k'));
  auto ep = client->GetEndpoint(server->addr);
  ASSERT_TRUE(ConnectSync(*ep, kOpTimeout));
  auto held = server->first_hold.get_future();
  std::promise<Result<Bytes>> done;
  auto result = done.get_future();
  ep->Call(kHold, Str("hold"), seconds(30),
           [&done](Result<Bytes> r) { done.set_value(std::move(r)); });
  ASSERT_EQ(held.wait_for(kOpTimeout), std::future_status::ready);
  ep->Disconnect();
  ASSERT_EQ(result.wait_for(kHang), std::future_status::ready)
      << "Disconnect did not fail the call in flight";
  auto r = result.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ECONNRESET);
  server->ReleaseHeld();
  auto ok = CallSync(*ep, kEcho, Str("again"), kOpTimeout);
  EXPECT_TRUE(ok) << ok.error().ToString();
}

}  // namespace
}  // namespace fedfs::m2m::testing
