#include "m2m/auth.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include <sodium.h>

namespace fedfs::m2m {
namespace {

constexpr size_t kNonceBytes = 32;

struct SodiumInit {
  SodiumInit() {
    if (sodium_init() < 0) std::abort();  // cannot run without a CSPRNG
  }
};

void EnsureSodium() { static SodiumInit init; }

Bytes NewNonce() {
  EnsureSodium();
  Bytes n(kNonceBytes);
  randombytes_buf(n.data(), n.size());
  return n;
}

Bytes Mac(const Bytes& key, char role, const Bytes& a, const Bytes& b) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  const unsigned char r = static_cast<unsigned char>(role);
  crypto_auth_hmacsha256_update(&st, &r, 1);
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(a.data()), a.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(b.data()), b.size());
  Bytes out(crypto_auth_hmacsha256_BYTES);
  crypto_auth_hmacsha256_final(&st, reinterpret_cast<unsigned char*>(out.data()));
  return out;
}

bool SameMac(const Bytes& want, const Bytes& got) {
  return want.size() == got.size() && sodium_memcmp(want.data(), got.data(), want.size()) == 0;
}

}  // namespace

Result<Bytes> LoadClusterKeyFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Err(errno, "cluster key file " + path);
  }
  if (!S_ISREG(st.st_mode)) return Err(EINVAL, "cluster key file " + path + " is not a regular file");
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    return Err(EPERM, "cluster key file " + path +
                          " is accessible by group or others (chmod 600 it)");
  }
  std::ifstream in(path);
  if (!in) return Err(errno ? errno : EACCES, "cluster key file " + path);
  std::string text;
  std::getline(in, text);
  while (!text.empty() && (text.back() == '\r' || text.back() == ' ')) text.pop_back();
  Bytes key(kClusterKeyBytes);
  size_t bin_len = 0;
  EnsureSodium();
  if (text.size() != 2 * kClusterKeyBytes ||
      sodium_hex2bin(reinterpret_cast<unsigned char*>(key.data()), key.size(), text.data(),
                     text.size(), nullptr, &bin_len, nullptr) != 0 ||
      bin_len != kClusterKeyBytes) {
    return Err(EINVAL, "cluster key file " + path + " must hold 64 hex digits");
  }
  return key;
}

std::string GenerateClusterKeyHex() {
  EnsureSodium();
  unsigned char key[kClusterKeyBytes];
  randombytes_buf(key, sizeof key);
  char hex[2 * kClusterKeyBytes + 1];
  sodium_bin2hex(hex, sizeof hex, key, sizeof key);
  return hex;
}

ClientHandshake::ClientHandshake(Bytes key) : key_(std::move(key)) {}

FrameHeader ClientHandshake::Hello() {
  nonce_c_ = NewNonce();
  FrameHeader h;
  h.kind = FrameKind::kAuthHello;
  h.nonce = nonce_c_;
  return h;
}

Result<FrameHeader> ClientHandshake::OnChallenge(const FrameHeader& c) {
  if (c.kind != FrameKind::kAuthChallenge || c.nonce.size() != kNonceBytes || nonce_c_.empty()) {
    return Err(EPROTO, "unexpected frame during authentication");
  }
  if (!SameMac(Mac(key_, 'S', nonce_c_, c.nonce), c.mac)) {
    return Err(EACCES, "peer does not know the cluster key");
  }
  FrameHeader p;
  p.kind = FrameKind::kAuthProof;
  p.mac = Mac(key_, 'C', c.nonce, nonce_c_);
  token_ = Mac(key_, 'B', c.nonce, nonce_c_);
  return p;
}

Status ClientHandshake::OnResult(const FrameHeader& r) {
  if (r.kind != FrameKind::kAuthResult) return Err(EPROTO, "unexpected frame during authentication");
  if (r.errno_code != 0) return Err(r.errno_code, "peer refused authentication");
  return Ok();
}

ServerHandshake::ServerHandshake(Bytes key) : key_(std::move(key)) {}

Result<FrameHeader> ServerHandshake::OnHello(const FrameHeader& hello) {
  if (hello.kind != FrameKind::kAuthHello || hello.nonce.size() != kNonceBytes || hello_seen_) {
    return Err(EPROTO, "malformed authentication hello");
  }
  hello_seen_ = true;
  nonce_c_ = hello.nonce;
  nonce_s_ = NewNonce();
  FrameHeader c;
  c.kind = FrameKind::kAuthChallenge;
  c.nonce = nonce_s_;
  c.mac = Mac(key_, 'S', nonce_c_, nonce_s_);
  return c;
}

Status ServerHandshake::OnProof(const FrameHeader& proof) {
  if (!hello_seen_ || proof.kind != FrameKind::kAuthProof) {
    return Err(EACCES, "authentication proof out of order");
  }
  if (!SameMac(Mac(key_, 'C', nonce_s_, nonce_c_), proof.mac)) {
    return Err(EACCES, "peer does not know the cluster key");
  }
  token_ = Mac(key_, 'B', nonce_s_, nonce_c_);
  return Ok();
}

FrameHeader ServerHandshake::ResultFrame(const Status& verdict) {
  FrameHeader r;
  r.kind = FrameKind::kAuthResult;
  r.errno_code = verdict ? 0 : verdict.error().code;
  return r;
}

}  // namespace fedfs::m2m
