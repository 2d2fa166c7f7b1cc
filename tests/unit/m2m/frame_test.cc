#include "m2m/frame.h"

#include <random>

#include <gtest/gtest.h>

namespace fedfs::m2m {
namespace {

TEST(Frame, RoundTrips) {
  FrameHeader h;
  h.kind = FrameKind::kReply;
  h.call_id = 42;
  h.method = 7;
  h.errno_code = ENOENT;
  h.timeout_us = 1000;
  h.payload_size = 5;
  h.nonce = Bytes(32, std::byte{1});
  h.context = "nope";
  Bytes enc = EncodeFrame(h);
  auto d = DecodeFrame(enc, 5, 1 << 20);
  ASSERT_TRUE(d) << d.error().ToString();
  EXPECT_EQ(d->kind, FrameKind::kReply);
  EXPECT_EQ(d->call_id, 42u);
  EXPECT_EQ(d->method, 7);
  EXPECT_EQ(d->errno_code, ENOENT);
  EXPECT_EQ(d->nonce.size(), 32u);
  EXPECT_EQ(d->context, "nope");
}

TEST(Frame, RejectsRandomBytesTruncationAndSizeMismatch) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000; ++i) {
    Bytes junk(rng() % 200);
    for (auto& b : junk) b = std::byte(rng());
    auto d = DecodeFrame(junk, 0, 1 << 20);
    if (d) {
      // Random bytes that happen to verify must still be a sane frame.
      EXPECT_EQ(d->payload_size, 0u);
    }
  }
  FrameHeader h;
  h.payload_size = 10;
  Bytes enc = EncodeFrame(h);
  for (size_t n = 0; n < enc.size(); ++n) {
    auto d = DecodeFrame(std::span(enc).first(n), 10, 1 << 20);
    EXPECT_FALSE(d) << "truncated to " << n;
  }
  auto mismatch = DecodeFrame(enc, 11, 1 << 20);
  ASSERT_FALSE(mismatch);
  EXPECT_EQ(mismatch.error().code, EPROTO);
}

TEST(Frame, RejectsGiantPayloadAndHeader) {
  FrameHeader h;
  h.payload_size = 1ull << 40;
  Bytes enc = EncodeFrame(h);
  auto d = DecodeFrame(enc, 1ull << 40, 64 << 20);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, EMSGSIZE);
  Bytes huge(kMaxFrameHeaderBytes + 1);
  EXPECT_EQ(DecodeFrame(huge, 0, 1 << 20).error().code, EMSGSIZE);
}

TEST(Frame, RejectsWrongVersion) {
  FrameHeader h;
  Bytes enc = EncodeFrame(h);
  // The version is the first field written; find the 16-bit value 1 and bump it.
  bool patched = false;
  for (size_t i = 0; i + 1 < enc.size(); ++i) {
    Bytes copy = enc;
    if (copy[i] == std::byte{kWireVersion} && copy[i + 1] == std::byte{0}) {
      copy[i] = std::byte{99};
      auto d = DecodeFrame(copy, 0, 1 << 20);
      if (!d && d.error().context.find("version") != std::string::npos) {
        patched = true;
        break;
      }
    }
  }
  EXPECT_TRUE(patched);
}

}  // namespace
}  // namespace fedfs::m2m

namespace fedfs::m2m {
namespace {

TEST(Frame, DecodesUnalignedHeaders) {
  FrameHeader h;
  h.kind = FrameKind::kRequest;
  h.call_id = 7;
  h.method = 3;
  Bytes enc = EncodeFrame(h);
  for (size_t shift = 1; shift < 8; ++shift) {
    Bytes buf(enc.size() + shift);
    std::copy(enc.begin(), enc.end(), buf.begin() + shift);
    auto d = DecodeFrame(std::span(buf).subspan(shift), 0, 1 << 20);
    ASSERT_TRUE(d) << "shift " << shift << ": " << d.error().ToString();
    EXPECT_EQ(d->call_id, 7u);
  }
}

}  // namespace
}  // namespace fedfs::m2m
