// Integration tests with real fedfsd daemons over UCX on loopback (label
// "integration"): federation, failure detection, rejoin, wrong key,
// malformed messages. Each test owns a Cluster (tests/tools/cluster.h) that
// stops its daemons by pid whatever happens.
#include <gtest/gtest.h>

#include <flatbuffers/flatbuffers.h>

#include <random>
#include <regex>

#include "common/rpc_methods.h"
#include "m2m/auth.h"
#include "m2m/frame.h"
#include "m2m/ucx_transport.h"
#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

std::string Loop() { return "127.0.0.1:" + std::to_string(FreePort()); }

uint64_t Epoch(const Cluster& c, const std::string& id) {
  auto s = c.Status(id);
  return s.is_object() ? s["epoch"].get<uint64_t>() : 0;
}

std::string State(const Cluster& c, const std::string& id, const std::string& member) {
  auto m = c.Member(id, member);
  return m.is_object() ? m["state"].get<std::string>() : "absent";
}

// Three daemons form a federation, notice a SIGKILLed member (the delay is
// recorded, not asserted), and take it back (higher epoch) when it restarts.
TEST(Federation, ThreeNodesFormDetectFailureAndRejoin) {
  Cluster c;
  const std::string a1 = Loop(), a2 = Loop(), a3 = Loop();
  const int kHeartbeatMs = 100, kFailureMs = 1000;
  auto cfg = [&](const std::string& id, const std::string& addr,
                 std::vector<std::string> peers) {
    return c.WriteConfig({.id = id, .listen = addr, .peers = std::move(peers),
                          .heartbeat_ms = kHeartbeatMs, .failure_ms = kFailureMs});
  };
  const std::string c1 = cfg("n1", a1, {}), c2 = cfg("n2", a2, {a1}), c3 = cfg("n3", a3, {a2, a1});
  c.Start("n1", c1);
  c.Start("n2", c2);
  c.Start("n3", c3);
  const std::vector<std::string> all = {"n1", "n2", "n3"};
  for (const auto& id : all) {
    ASSERT_TRUE(WaitFor([&] { return c.SeesAlive(id, all); }, kNoHang))
        << id << " status: " << c.Status(id).dump() << "\nlog:\n" << c.Log(id);
  }
  // Every node agrees on the ring.
  for (const char* path : {"/", "/a", "/a/b/c", "/home/user/x"}) {
    std::set<std::string> managers;
    for (const auto& id : all) {
      auto r = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c.Socket(id), "ring", path, "--json"});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      managers.insert(nlohmann::json::parse(r.out)["manager"].get<std::string>());
    }
    EXPECT_EQ(managers.size(), 1u) << path;
  }
  // Shares sum to 1 and RTTs are measured.
  auto s1 = c.Status("n1");
  double share = 0;
  for (const auto& m : s1["members"]) {
    share += m["ring_share"].get<double>();
    if (m["id"] != "n1") {
      EXPECT_TRUE(
          WaitFor([&] { return c.Member("n1", m["id"])["rtt_us"].get<int64_t>() >= 0; }, kNoHang));
    }
  }
  EXPECT_NEAR(share, 1.0, 1e-6);
  const uint64_t epoch_before = std::max(Epoch(c, "n1"), Epoch(c, "n2"));

  // SIGKILL n3 by pid: both others mark it dead (normally within the
  // failure timeout and a heartbeat interval; the delay is recorded).
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(c.Stop("n3", SIGKILL), 128 + SIGKILL);
  for (const char* id : {"n1", "n2"}) {
    ASSERT_TRUE(WaitFor([&] { return State(c, id, "n3") == "dead"; }, kNoHang))
        << id << " still sees n3 as " << State(c, id, "n3");
  }
  const auto detected_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - killed_at)
                               .count();
  RecordProperty("failure_detected_ms", std::to_string(detected_ms));
  EXPECT_TRUE(c.SeesAlive("n1", {"n1", "n2"}));
  EXPECT_DOUBLE_EQ(c.Member("n1", "n3")["ring_share"].get<double>(), 0.0);
  const uint64_t epoch_dead = Epoch(c, "n1");
  EXPECT_GT(epoch_dead, epoch_before);

  // Restart n3 with the same config: it rejoins with a higher epoch.
  c.Start("n3", c3);
  for (const auto& id : all) {
    ASSERT_TRUE(WaitFor([&] { return c.SeesAlive(id, all); }, kNoHang))
        << id << " status: " << c.Status(id).dump() << "\nlog:\n" << c.Log("n3");
  }
  for (const auto& id : all) {
    ASSERT_TRUE(WaitFor([&] { return Epoch(c, id) > epoch_dead; }, kNoHang)) << id;
  }
  EXPECT_NE(c.Log("n1").find("new incarnation"), std::string::npos) << c.Log("n1");

  // Clean shutdown: SIGTERM -> exit 0, control socket removed.
  EXPECT_EQ(c.Stop("n2", SIGTERM), 0);
  EXPECT_FALSE(std::filesystem::exists(c.Socket("n2")));
  auto r = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", c.Socket("n2"), "status"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not running"), std::string::npos) << r.err;
}

// A daemon with another cluster key never becomes a member, and the good
// node logs the refusal.
TEST(Federation, WrongClusterKeyIsRefused) {
  Cluster c;
  const std::string a1 = Loop(), a2 = Loop(), a3 = Loop();
  c.Start("n1", c.WriteConfig({.id = "n1", .listen = a1}));
  c.Start("n2", c.WriteConfig({.id = "n2", .listen = a2, .peers = {a1}}));
  const std::string bad_key = c.NewKeyFile("other.key");
  c.Start("bad", c.WriteConfig({.id = "bad", .listen = a3, .peers = {a1}, .key_file = bad_key}));
  ASSERT_TRUE(WaitFor([&] { return c.SeesAlive("n1", {"n1", "n2"}); }, kNoHang)) << c.Log("n1");
  const std::regex refusal("refusing peer|during authentication|failed authentication");
  auto refusals = [&] {
    const std::string log = c.Log("n1");
    return std::distance(std::sregex_iterator(log.begin(), log.end(), refusal), std::sregex_iterator());
  };
  // It keeps trying its seed (with back-off): after 3 refusals it must still
  // be unknown to both members, and never have appeared meanwhile.
  std::string appeared;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const char* id : {"n1", "n2"}) {
          if (appeared.empty() && State(c, id, "bad") != "absent") appeared = id;
        }
        return !appeared.empty() || refusals() >= 3;
      },
      kNoHang))
      << "n1 refused the bad node " << refusals() << " times; n1 log:\n" << c.Log("n1");
  EXPECT_EQ(appeared, "") << "the bad node became a member of " << appeared;
  EXPECT_EQ(State(c, "n1", "bad"), "absent");
  EXPECT_EQ(State(c, "n2", "bad"), "absent");
  EXPECT_TRUE(c.SeesAlive("bad", {"bad"}));
  EXPECT_TRUE(c.Running("bad"));  // running alone, retrying its seeds
}

// A frame envelope with an arbitrary version, built field by field
// (m2m/frame.fbs: version, kind, call_id, method).
m2m::Bytes FrameWithVersion(uint16_t version) {
  flatbuffers::FlatBufferBuilder b;
  const auto start = b.StartTable();
  b.AddElement<uint16_t>(4, version, 0);
  b.AddElement<uint8_t>(6, 0, 0xff);
  b.AddElement<uint64_t>(8, 1, 0);
  b.AddElement<uint16_t>(10, MethodId(RpcMethod::kMemberHeartbeat), 0);
  b.Finish(flatbuffers::Offset<void>(b.EndTable(start)));
  const auto* p = reinterpret_cast<const std::byte*>(b.GetBufferPointer());
  return m2m::Bytes(p, p + b.GetSize());
}

m2m::Bytes Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  m2m::Bytes b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

// Malformed frames and malformed membership payloads are rejected and
// logged; the daemon keeps serving and its peer stays alive.
TEST(Federation, MalformedMessagesAreRejected) {
  Cluster c;
  const std::string a1 = Loop(), a2 = Loop();
  c.Start("n1", c.WriteConfig({.id = "n1", .listen = a1}));
  c.Start("n2", c.WriteConfig({.id = "n2", .listen = a2, .peers = {a1}}));
  ASSERT_TRUE(WaitFor([&] { return c.SeesAlive("n1", {"n1", "n2"}); }, kNoHang)) << c.Log("n1");

  m2m::UcxOptions ucx;
  ucx.tls = "tcp";
  ucx.net_devices = "lo";
  m2m::FrameHeader req;
  req.kind = m2m::FrameKind::kRequest;
  req.call_id = 1;
  req.method = MethodId(RpcMethod::kMemberHeartbeat);
  const m2m::Bytes valid = m2m::EncodeFrame(req);
  m2m::FrameHeader giant = req;
  giant.payload_size = uint64_t{1} << 40;
  // Unauthenticated raw frames (the transport must drop them).
  EXPECT_TRUE(m2m::UcxSendRawForTest(ucx, a1, Random(64, 1), {}));
  EXPECT_TRUE(m2m::UcxSendRawForTest(ucx, a1, m2m::Bytes(valid.begin(), valid.begin() + valid.size() / 2), {}));
  EXPECT_TRUE(m2m::UcxSendRawForTest(ucx, a1, FrameWithVersion(99), {}));
  EXPECT_TRUE(m2m::UcxSendRawForTest(ucx, a1, m2m::EncodeFrame(giant), Random(16, 2)));
  EXPECT_TRUE(m2m::UcxSendRawForTest(ucx, a1, {}, Random(100, 3)));

  // Authenticated peers sending malformed membership payloads get EPROTO.
  auto key = m2m::LoadClusterKeyFile(c.key_file());
  ASSERT_TRUE(key);
  auto t = m2m::MakeUcxTransport(ucx, {.cluster_key = *key});
  ASSERT_TRUE(t) << t.error().ToString();
  auto ep = (*t)->GetEndpoint(a1);
  for (uint64_t seed = 10; seed < 20; ++seed) {
    for (RpcMethod m : {RpcMethod::kMemberHeartbeat, RpcMethod::kMemberJoin}) {
      auto r = m2m::CallSync(*ep, MethodId(m), Random(1 + seed * 13, seed), 5s);
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().code, EPROTO) << r.error().ToString();
    }
  }
  auto empty = m2m::CallSync(*ep, MethodId(RpcMethod::kMemberHeartbeat), {}, 5s);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, EPROTO);
  (*t)->Shutdown();

  // Still serving: status works, n2 is still alive, and both kinds of
  // rejection were logged. (Not a wait for a condition: had the messages
  // broken n1's link to n2, n2 would be declared dead once the failure
  // timeout passed, so at least that long must pass before the check.)
  std::this_thread::sleep_for(1500ms);  // longer than the failure timeout
  EXPECT_TRUE(c.Running("n1"));
  EXPECT_TRUE(c.SeesAlive("n1", {"n1", "n2"})) << c.Status("n1").dump();
  EXPECT_TRUE(c.SeesAlive("n2", {"n1", "n2"})) << c.Status("n2").dump();
  const std::string log = c.Log("n1");
  EXPECT_NE(log.find("malformed"), std::string::npos) << log;
  EXPECT_NE(log.find("rejected heartbeat"), std::string::npos) << log;
  EXPECT_NE(log.find("rejected join"), std::string::npos) << log;
}

}  // namespace
}  // namespace fedfs::testing
