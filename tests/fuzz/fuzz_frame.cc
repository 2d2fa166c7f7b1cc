// libFuzzer target: m2m::DecodeFrame (m2m/frame.h), the first thing every
// received frame header goes through.
//
// Input: 8 bytes (little-endian) the size of the payload that "arrived" with
// the header, then the header bytes. Invariants: a decoded header has the
// size limits, kind range, payload size and reply errno the contract names;
// the same bytes at an unaligned address decode alike; EncodeFrame of a
// decoded header decodes back to equal fields.
#include <cstring>
#include <vector>

#include "fuzz_util.h"
#include "m2m/frame.h"

using namespace fedfs;
using namespace fedfs::m2m;

namespace {

constexpr uint64_t kMaxPayload = 64u << 20;

bool Same(const FrameHeader& a, const FrameHeader& b) {
  return a.kind == b.kind && a.call_id == b.call_id && a.method == b.method &&
         a.errno_code == b.errno_code && a.timeout_us == b.timeout_us &&
         a.payload_size == b.payload_size && a.nonce == b.nonce && a.mac == b.mac &&
         a.context == b.context;
}

void MakeSeeds(fuzz::Seeds& s) {
  auto add = [&](const char* name, const FrameHeader& h) {
    s.Add(name, fuzz::Le64(h.payload_size), EncodeFrame(h));
  };
  FrameHeader req;
  req.kind = FrameKind::kRequest;
  req.call_id = 7;
  req.method = 3;
  req.timeout_us = 2'000'000;
  req.payload_size = 120;
  add("request", req);
  FrameHeader err;
  err.kind = FrameKind::kReply;
  err.call_id = 7;
  err.errno_code = 2;
  err.context = "no such file";
  add("reply_error", err);
  FrameHeader hello;
  hello.kind = FrameKind::kAuthChallenge;
  hello.nonce.assign(32, std::byte{0x5a});
  hello.mac.assign(32, std::byte{0xa5});
  add("auth_challenge", hello);
  FrameHeader proof;
  proof.kind = FrameKind::kAuthProof;
  proof.mac.assign(32, std::byte{1});
  add("auth_proof", proof);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fuzz::MaybeWriteSeeds(*argc, *argv, MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint64_t payload_size = fuzz::Take<uint64_t>(data, size);
  const std::span<const std::byte> header(reinterpret_cast<const std::byte*>(data), size);
  auto h = DecodeFrame(header, payload_size, kMaxPayload);

  // The same bytes one byte off alignment (UCX hands headers over anywhere).
  std::vector<std::byte> shifted(size + 1);
  if (size > 0) std::memcpy(shifted.data() + 1, data, size);
  auto u = DecodeFrame(std::span<const std::byte>(shifted).subspan(1), payload_size, kMaxPayload);
  FUZZ_CHECK(h.has_value() == u.has_value());
  if (!h) {
    FUZZ_CHECK(u.error().code == h.error().code);
    FUZZ_CHECK(h.error().code == EPROTO || h.error().code == EMSGSIZE);
    return 0;
  }
  FUZZ_CHECK(Same(*h, *u));
  FUZZ_CHECK(size <= kMaxFrameHeaderBytes);
  FUZZ_CHECK(static_cast<uint8_t>(h->kind) <= static_cast<uint8_t>(FrameKind::kBindAck));
  FUZZ_CHECK(h->payload_size == payload_size && payload_size <= kMaxPayload);
  FUZZ_CHECK(h->kind != FrameKind::kReply || h->errno_code >= 0);

  const Bytes again = EncodeFrame(*h);
  if (again.size() <= kMaxFrameHeaderBytes) {
    auto back = DecodeFrame(again, h->payload_size, kMaxPayload);
    FUZZ_CHECK(back.has_value());
    FUZZ_CHECK(Same(*h, *back));
  }
  return 0;
}
