#include "m2m/frame.h"

#include <cstring>

#include <flatbuffers/flatbuffers.h>

#include "frame_generated.h"

namespace fedfs::m2m {

namespace fb = fedfs::m2m::wire;

Bytes EncodeFrame(const FrameHeader& h) {
  flatbuffers::FlatBufferBuilder b(128);
  auto nonce = h.nonce.empty() ? 0
                               : b.CreateVector(reinterpret_cast<const uint8_t*>(h.nonce.data()),
                                                h.nonce.size());
  auto mac = h.mac.empty()
                 ? 0
                 : b.CreateVector(reinterpret_cast<const uint8_t*>(h.mac.data()), h.mac.size());
  auto ctx = h.context.empty() ? 0 : b.CreateString(h.context);
  fb::FrameBuilder fbb(b);
  fbb.add_version(kWireVersion);
  fbb.add_kind(static_cast<fb::Kind>(h.kind));
  fbb.add_call_id(h.call_id);
  fbb.add_method(h.method);
  fbb.add_errno_code(h.errno_code);
  fbb.add_timeout_us(h.timeout_us);
  fbb.add_payload_size(h.payload_size);
  if (!nonce.IsNull()) fbb.add_nonce(nonce);
  if (!mac.IsNull()) fbb.add_mac(mac);
  if (!ctx.IsNull()) fbb.add_context(ctx);
  b.Finish(fbb.Finish());
  const auto* p = reinterpret_cast<const std::byte*>(b.GetBufferPointer());
  return Bytes(p, p + b.GetSize());
}

Result<FrameHeader> DecodeFrame(std::span<const std::byte> header, uint64_t payload_size,
                                uint64_t max_payload) {
  if (header.size() > kMaxFrameHeaderBytes) {
    return Err(EMSGSIZE, "frame header of " + std::to_string(header.size()) + " bytes");
  }
  if (payload_size > max_payload) {
    return Err(EMSGSIZE, "payload of " + std::to_string(payload_size) + " bytes over the limit");
  }
  // FlatBuffers reads fields in place and needs its buffer aligned; received
  // headers may sit anywhere (UCX hands them over unaligned).
  alignas(8) uint8_t aligned[kMaxFrameHeaderBytes];
  const auto* data = reinterpret_cast<const uint8_t*>(header.data());
  if (reinterpret_cast<uintptr_t>(data) % 8 != 0) {
    std::memcpy(aligned, data, header.size());
    data = aligned;
  }
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 8;
  opts.max_tables = 16;
  flatbuffers::Verifier v(data, header.size(), opts);
  if (header.size() < sizeof(flatbuffers::uoffset_t) || !fb::VerifyFrameBuffer(v)) {
    return Err(EPROTO, "malformed frame header");
  }
  const fb::Frame* f = fb::GetFrame(data);
  if (f->version() != kWireVersion) {
    return Err(EPROTO, "unsupported wire version " + std::to_string(f->version()));
  }
  if (static_cast<uint8_t>(f->kind()) > static_cast<uint8_t>(FrameKind::kBindAck)) {
    return Err(EPROTO, "unknown frame kind");
  }
  if (f->payload_size() != payload_size) {
    return Err(EPROTO, "payload size " + std::to_string(payload_size) + " disagrees with header " +
                           std::to_string(f->payload_size()));
  }
  FrameHeader h;
  h.kind = static_cast<FrameKind>(f->kind());
  h.call_id = f->call_id();
  h.method = f->method();
  h.errno_code = f->errno_code();
  h.timeout_us = f->timeout_us();
  h.payload_size = f->payload_size();
  if (f->nonce()) {
    const auto* p = reinterpret_cast<const std::byte*>(f->nonce()->data());
    h.nonce.assign(p, p + f->nonce()->size());
  }
  if (f->mac()) {
    const auto* p = reinterpret_cast<const std::byte*>(f->mac()->data());
    h.mac.assign(p, p + f->mac()->size());
  }
  if (f->context()) h.context = f->context()->str();
  if (h.kind == FrameKind::kReply && h.errno_code < 0) {
    return Err(EPROTO, "negative errno in reply");
  }
  return h;
}

}  // namespace fedfs::m2m
