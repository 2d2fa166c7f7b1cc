// Encoding and verification of the transport envelope (m2m/frame.fbs).
// Every frame a transport receives goes through DecodeFrame before anything
// else looks at it: wrong version, malformed bytes, oversized fields and a
// payload whose size disagrees with the header are all refused here.
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/result.h"
#include "m2m/transport.h"

namespace fedfs::m2m {

inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kMaxFrameHeaderBytes = 4096;

enum class FrameKind : uint8_t {
  kRequest = 0,
  kReply = 1,
  kAuthHello = 2,
  kAuthChallenge = 3,
  kAuthProof = 4,
  kAuthResult = 5,
  kBind = 6,     // UCX transport: first message on a UCX endpoint (nonce = bind token)
  kBindAck = 7,  // its answer (errno_code 0)
};

struct FrameHeader {
  FrameKind kind = FrameKind::kRequest;
  uint64_t call_id = 0;
  uint16_t method = 0;
  int32_t errno_code = 0;
  uint64_t timeout_us = 0;
  uint64_t payload_size = 0;
  Bytes nonce;
  Bytes mac;
  std::string context;
};

Bytes EncodeFrame(const FrameHeader& h);

// Verifies and decodes a received header. `payload_size` is the size of the
// payload that arrived with it; `max_payload` the transport's limit.
// EPROTO: not a valid frame or unsupported version; EMSGSIZE: too large.
Result<FrameHeader> DecodeFrame(std::span<const std::byte> header, uint64_t payload_size,
                                uint64_t max_payload);

}  // namespace fedfs::m2m
