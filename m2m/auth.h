// Mutual authentication of peers with the cluster key.
//
// Protocol (frames of m2m/frame.fbs; HMAC-SHA-256 from libsodium, keyed with
// the 32-byte cluster key; nonces are 32 random bytes):
//   client -> server  AuthHello      nonce_c
//   server -> client  AuthChallenge  nonce_s, HMAC(k, "S" | nonce_c | nonce_s)
//   client            verifies the server's MAC (else EACCES, disconnect)
//   client -> server  AuthProof      HMAC(k, "C" | nonce_s | nonce_c)
//   server            verifies (else logs, answers EACCES and disconnects)
//   server -> client  AuthResult     errno_code 0
// After a successful handshake both sides hold the same bind token,
// HMAC(k, "B" | nonce_s | nonce_c), which is never sent in the handshake: the
// UCX transport's first message on the UCX endpoint carries it to bind that
// endpoint to the authenticated connection (m2m/bootstrap.h).
// A server serves no request and hands out no memory descriptor on a
// connection before the proof verified. Both sides prove knowledge of the key
// without revealing it; fresh nonces on both sides defeat replay.
//
// The handshake objects are per connection and not thread-safe.
#pragma once

#include <string>

#include "common/result.h"
#include "m2m/frame.h"

namespace fedfs::m2m {

inline constexpr size_t kClusterKeyBytes = 32;

// Reads a cluster key file: 64 hex digits (optionally followed by a newline).
// Refuses a file that group or others may read (EPERM) or that is not
// well-formed (EINVAL); errors name the path.
Result<Bytes> LoadClusterKeyFile(const std::string& path);

// A new random key, as the 64 hex digits a key file holds.
std::string GenerateClusterKeyHex();

class ClientHandshake {
 public:
  explicit ClientHandshake(Bytes key);
  FrameHeader Hello();
  // Verifies the server's challenge; returns the proof frame to send.
  Result<FrameHeader> OnChallenge(const FrameHeader& challenge);
  // Final answer from the server.
  Status OnResult(const FrameHeader& result);
  // The bind token (empty before the server's challenge verified).
  const Bytes& BindToken() const { return token_; }

 private:
  Bytes key_;
  Bytes nonce_c_;
  Bytes token_;
};

class ServerHandshake {
 public:
  explicit ServerHandshake(Bytes key);
  // Returns the challenge frame to send (EPROTO if the hello is malformed).
  Result<FrameHeader> OnHello(const FrameHeader& hello);
  // Verifies the proof: Ok -> peer authenticated; EACCES otherwise.
  Status OnProof(const FrameHeader& proof);
  // The AuthResult frame for a verdict.
  static FrameHeader ResultFrame(const Status& verdict);
  // The bind token (empty before the proof verified).
  const Bytes& BindToken() const { return token_; }

 private:
  Bytes key_;
  Bytes nonce_c_;
  Bytes nonce_s_;
  Bytes token_;
  bool hello_seen_ = false;
};

}  // namespace fedfs::m2m
