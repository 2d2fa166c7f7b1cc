// Membership messages: round trip, and every malformed input (random bytes,
// truncations, wrong version, invalid fields) is refused with EPROTO without
// crashing. Control-socket requests answered from a view.
#include "cluster/membership.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "cluster/membership_control.h"

namespace fedfs::daemon {
namespace {

MemberMessage Sample(size_t members = 3) {
  MemberMessage m;
  m.sender = {"n0", "127.0.0.1:7000", 0x1234, MemberState::kAlive};
  m.epoch = 42;
  for (size_t i = 0; i < members; ++i) {
    m.members.push_back({"n" + std::to_string(i), "10.0.0." + std::to_string(i + 1) + ":7000",
                         1000 + i, i % 2 ? MemberState::kDead : MemberState::kAlive});
  }
  return m;
}

TEST(MemberMessage, RoundTrip) {
  const MemberMessage in = Sample(5);
  auto out = DecodeMemberMessage(EncodeMemberMessage(in));
  ASSERT_TRUE(out) << out.error().context;
  EXPECT_EQ(out->sender.id, "n0");
  EXPECT_EQ(out->sender.addr, "127.0.0.1:7000");
  EXPECT_EQ(out->sender.incarnation, 0x1234u);
  EXPECT_EQ(out->epoch, 42u);
  ASSERT_EQ(out->members.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(out->members[i].id, in.members[i].id);
    EXPECT_EQ(out->members[i].addr, in.members[i].addr);
    EXPECT_EQ(out->members[i].incarnation, in.members[i].incarnation);
    EXPECT_EQ(out->members[i].state, in.members[i].state);
  }
}

TEST(MemberMessage, TagsTravel) {
  MemberMessage in = Sample(3);
  in.sender.tag = 7;
  for (size_t i = 0; i < in.members.size(); ++i) in.members[i].tag = static_cast<uint16_t>(100 + i);
  in.members[2].tag = 0;  // not announced (a node that does not care)
  auto out = DecodeMemberMessage(EncodeMemberMessage(in));
  ASSERT_TRUE(out) << out.error().context;
  EXPECT_EQ(out->sender.tag, 7);
  EXPECT_EQ(out->members[0].tag, 100);
  EXPECT_EQ(out->members[1].tag, 101);
  EXPECT_EQ(out->members[2].tag, 0);
}

void ExpectEproto(std::span<const std::byte> b, const std::string& what) {
  auto r = DecodeMemberMessage(b);
  ASSERT_FALSE(r) << what;
  EXPECT_EQ(r.error().code, EPROTO) << what;
  EXPECT_FALSE(r.error().context.empty());
}

TEST(MemberMessage, EmptyAndRandomBytesAreRefused) {
  ExpectEproto({}, "empty");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    m2m::Bytes b(1 + rng() % 512);
    for (auto& x : b) x = static_cast<std::byte>(rng());
    auto r = DecodeMemberMessage(b);  // must not crash; random bytes are never valid
    if (r) {
      ADD_FAILURE() << "random buffer " << i << " accepted";
    } else {
      EXPECT_EQ(r.error().code, EPROTO);
    }
  }
}

TEST(MemberMessage, EveryTruncationIsRefused) {
  const m2m::Bytes good = EncodeMemberMessage(Sample(4));
  for (size_t n = 0; n < good.size(); ++n) {
    ExpectEproto(std::span(good.data(), n), "truncated to " + std::to_string(n));
  }
}

TEST(MemberMessage, BitFlipsNeverCrash) {
  const m2m::Bytes good = EncodeMemberMessage(Sample(4));
  std::mt19937 rng(11);
  for (int i = 0; i < 5000; ++i) {
    m2m::Bytes b = good;
    b[rng() % b.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
    auto r = DecodeMemberMessage(b);  // either refused or a well-formed message
    if (!r) {
      EXPECT_EQ(r.error().code, EPROTO);
    }
  }
}

TEST(MemberMessage, UnalignedBufferIsFine) {
  const m2m::Bytes good = EncodeMemberMessage(Sample(2));
  m2m::Bytes shifted(good.size() + 1);
  std::copy(good.begin(), good.end(), shifted.begin() + 1);
  EXPECT_TRUE(DecodeMemberMessage(std::span(shifted.data() + 1, good.size())));
}

// Found by fuzz_membership (tests/fuzz/corpus/fuzz_membership/regress_empty_unaligned):
// an empty payload at an unaligned address was copied into an empty vector
// (memcpy to a null pointer) before its size was checked; UBSan stopped it.
TEST(MemberMessage, EmptyPayloadAtAnUnalignedAddressIsRefused) {
  alignas(8) const std::byte buf[16] = {};
  ExpectEproto(std::span(buf + 1, 0), "empty, unaligned");
}

TEST(MemberMessage, WrongVersionIsRefused) {
  auto r = DecodeMemberMessage(EncodeMemberMessage(Sample(), kMembershipWireVersion + 1));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EPROTO);
  EXPECT_NE(r.error().context.find("version"), std::string::npos);
}

TEST(MemberMessage, InvalidFieldsAreRefused) {
  MemberMessage m = Sample();
  m.sender.id = "bad id";
  ExpectEproto(EncodeMemberMessage(m), "bad sender id");
  m = Sample();
  m.sender.addr = "nowhere";
  ExpectEproto(EncodeMemberMessage(m), "bad sender addr");
  m = Sample();
  m.members[1].id = "";
  ExpectEproto(EncodeMemberMessage(m), "empty member id");
  m = Sample();
  m.sender.tag = 0xffff;
  ExpectEproto(EncodeMemberMessage(m), "sender tag 65535");
  m = Sample();
  m.members[1].tag = 0xffff;
  ExpectEproto(EncodeMemberMessage(m), "member tag 65535");
  m = Sample();
  m.members.resize(kMaxViewMembers + 1, m.members[0]);
  ExpectEproto(EncodeMemberMessage(m), "too many members");
}

MembershipView SampleView() {
  MembershipView v;
  v.self_id = "a";
  v.epoch = 9;
  const auto now = std::chrono::steady_clock::now();
  v.members["a"] = {"a", "127.0.0.1:1", 1, MemberState::kAlive, now, 0};
  v.members["b"] = {"b", "127.0.0.1:2", 2, MemberState::kAlive, now, 150};
  v.members["c"] = {"c", "127.0.0.1:3", 3, MemberState::kDead, now, -1};
  v.ring = std::make_shared<const Ring>(std::vector<std::string>{"a", "b"}, 64);
  return v;
}

TEST(Control, Status) {
  const auto v = SampleView();
  auto j = nlohmann::json::parse(HandleControlRequest(R"({"cmd":"status"})", v));
  EXPECT_EQ(j["node_id"], "a");
  EXPECT_EQ(j["epoch"], 9);
  ASSERT_EQ(j["members"].size(), 3u);
  double share = 0;
  for (const auto& m : j["members"]) share += m["ring_share"].get<double>();
  EXPECT_NEAR(share, 1.0, 1e-9);
  EXPECT_EQ(j["members"][2]["state"], "dead");
  EXPECT_EQ(j["members"][2]["ring_share"], 0.0);
  EXPECT_EQ(j["members"][1]["rtt_us"], 150);
  EXPECT_EQ(j["members"][0]["self"], true);
}

TEST(Control, RingNormalizesPath) {
  const auto v = SampleView();
  auto j = nlohmann::json::parse(HandleControlRequest(R"({"cmd":"ring","path":"//x/y/"})", v));
  EXPECT_EQ(j["path"], "/x/y");
  EXPECT_EQ(j["manager"], v.ring->Owner("/x/y"));
  EXPECT_EQ(j["epoch"], 9);
}

TEST(Control, BadRequests) {
  const auto v = SampleView();
  for (const char* bad : {"", "nonsense", "[1]", R"({"cmd":7})", R"({"cmd":"explode"})",
                          R"({"cmd":"ring"})", R"({"cmd":"ring","path":"rel"})"}) {
    auto j = nlohmann::json::parse(HandleControlRequest(bad, v));
    EXPECT_TRUE(j.contains("error")) << bad;
  }
}

}  // namespace
}  // namespace fedfs::daemon
