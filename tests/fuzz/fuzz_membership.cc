// libFuzzer target: daemon::DecodeMemberMessage (cluster/membership.h), the
// payload of every kMemberJoin / kMemberHeartbeat request and reply.
//
// Input: the payload. Invariants: a decoded message has a valid sender and
// members (node ids, host:port addresses, states, tags, at most
// kMaxViewMembers); the bytes at an unaligned address decode alike;
// EncodeMemberMessage of it decodes back to the same message.
#include <cstring>
#include <vector>

#include "cluster/membership.h"
#include "cluster/node_addr.h"
#include "fuzz_util.h"

using namespace fedfs;
using namespace fedfs::daemon;

namespace {

bool Same(const MemberRecord& a, const MemberRecord& b) {
  return a.id == b.id && a.addr == b.addr && a.incarnation == b.incarnation &&
         a.state == b.state && a.tag == b.tag;
}

bool Same(const MemberMessage& a, const MemberMessage& b) {
  if (!Same(a.sender, b.sender) || a.epoch != b.epoch || a.members.size() != b.members.size()) {
    return false;
  }
  for (size_t i = 0; i < a.members.size(); ++i) {
    if (!Same(a.members[i], b.members[i])) return false;
  }
  return true;
}

void CheckRecord(const MemberRecord& r) {
  FUZZ_CHECK(IsValidNodeId(r.id));
  FUZZ_CHECK(ParseHostPort(r.addr).has_value());
  FUZZ_CHECK(r.state == MemberState::kAlive || r.state == MemberState::kDead);
  FUZZ_CHECK(r.tag != 0xffff);
}

void MakeSeeds(fuzz::Seeds& s) {
  MemberMessage m;
  m.sender = {"n1", "10.0.0.1:7000", 0x1234'5678'0001, MemberState::kAlive, 1};
  m.epoch = 3;
  s.Add("join_alone", EncodeMemberMessage(m));
  m.members = {m.sender, {"n2", "[fd00::2]:7000", 99, MemberState::kDead, 2},
               {"node_3-x", "host.example:65535", 1, MemberState::kAlive, 0}};
  s.Add("heartbeat_view", EncodeMemberMessage(m));
  s.Add("other_version", EncodeMemberMessage(m, 2));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fuzz::MaybeWriteSeeds(*argc, *argv, MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> payload(reinterpret_cast<const std::byte*>(data), size);
  auto m = DecodeMemberMessage(payload);

  std::vector<std::byte> shifted(size + 1);
  if (size > 0) std::memcpy(shifted.data() + 1, data, size);
  auto u = DecodeMemberMessage(std::span<const std::byte>(shifted).subspan(1));
  FUZZ_CHECK(m.has_value() == u.has_value());
  if (!m) {
    FUZZ_CHECK(m.error().code == EPROTO && u.error().code == EPROTO);
    return 0;
  }
  FUZZ_CHECK(Same(*m, *u));
  CheckRecord(m->sender);
  FUZZ_CHECK(m->members.size() <= kMaxViewMembers);
  for (const MemberRecord& r : m->members) CheckRecord(r);

  auto back = DecodeMemberMessage(EncodeMemberMessage(*m));
  FUZZ_CHECK(back.has_value());
  FUZZ_CHECK(Same(*m, *back));
  return 0;
}
