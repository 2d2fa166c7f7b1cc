// Hostile bytes on every port a real fedfsd listens on (label "integration"):
// the inputs that crashed or wedged a daemon (32 zero bytes; connections that
// were never closed), and a network fuzzer that sends raw junk, mutated and
// truncated bootstrap frames, and mutated frames on unbound UCX endpoints to
// every listening port of a live daemon, checking after each batch that the
// daemon runs, its mount answers and its peer still sees it alive.
//
// The fuzzer runs FEDFS_NETFUZZ_SECONDS (default 60) seconds;
// scripts/netfuzz.sh runs it longer.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "common/rpc_methods.h"
#include "m2m/auth.h"
#include "m2m/frame.h"
#include "m2m/ucx_transport.h"
#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string Loop() { return "127.0.0.1:" + std::to_string(FreePort()); }
uint16_t PortOf(const std::string& addr) {
  return static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1)));
}

// TCP ports pid listens on (its sockets in /proc/PID/fd, LISTEN in /proc/net/tcp*).
std::set<uint16_t> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(fd_dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      char target[128];
      const std::string p = fd_dir + "/" + e->d_name;
      const ssize_t n = ::readlink(p.c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = 0;
      std::string t(target);
      if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
    }
    ::closedir(d);
  }
  std::set<uint16_t> ports;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string sl, local, remote, state, queues, tr, retr, uid, timeout, inode;
      ls >> sl >> local >> remote >> state >> queues >> tr >> retr >> uid >> timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;  // 0A: LISTEN
      ports.insert(static_cast<uint16_t>(std::stoul(local.substr(local.rfind(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}

size_t FdCount(pid_t pid) {
  size_t n = 0;
  if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// A connected socket to 127.0.0.1:port (from `source`, a loopback address), or -1.
int Dial(uint16_t port, const char* source = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (source != nullptr) {
    sockaddr_in src{};
    src.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &src.sin_addr);
    ::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src);
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void SendAll(int fd, const m2m::Bytes& b) {
  [[maybe_unused]] ssize_t n = ::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
}

// True once the peer closed fd (EOF or reset), polling until `until`.
bool ClosedByPeer(int fd, Clock::time_point until) {
  timeval tv{0, 100000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::byte sink[4096];
  while (Clock::now() < until) {
    const ssize_t n = ::recv(fd, sink, sizeof sink, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
  }
  return false;
}

m2m::Bytes Random(std::mt19937_64& rng, size_t n) {
  m2m::Bytes b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

// A bootstrap message: [u32 header length][u32 payload length][header][payload].
m2m::Bytes Framed(const m2m::Bytes& header, const m2m::Bytes& payload = {}) {
  m2m::Bytes out;
  for (uint32_t v : {static_cast<uint32_t>(header.size()), static_cast<uint32_t>(payload.size())}) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::byte>((v >> s) & 0xff));
  }
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

m2m::Bytes Hello() {
  m2m::FrameHeader h;
  h.kind = m2m::FrameKind::kAuthHello;
  h.nonce = m2m::Bytes(32, std::byte{7});
  return m2m::EncodeFrame(h);
}

// The mount answers: stat of its root completes (in a child, bounded).
bool MountAnswers(const std::string& mnt) {
  return RunCommand({"stat", "-c", "%i", mnt}, std::chrono::seconds(20)).exit_code == 0;
}

class HostileNet : public ::testing::Test {
 protected:
  void SetUp() override {
    a1_ = Loop();
    a2_ = Loop();
    c_.Start("n1", c_.WriteConfig({.id = "n1", .listen = a1_}));
    c_.Start("n2", c_.WriteConfig({.id = "n2", .listen = a2_, .peers = {a1_}}));
    ASSERT_TRUE(WaitFor([&] { return c_.SeesAlive("n1", {"n1", "n2"}); }, kNoHang)) << c_.Log("n1");
    ASSERT_TRUE(WaitFor([&] { return c_.SeesAlive("n2", {"n1", "n2"}); }, kNoHang)) << c_.Log("n2");
  }
  // n1 runs, its mount answers, and n2 sees it alive.
  void ExpectHealthy(const std::string& when) {
    ASSERT_TRUE(c_.Running("n1")) << when << "\n" << c_.Log("n1");
    ASSERT_TRUE(MountAnswers(c_.Mountpoint("n1"))) << when;
    ASSERT_TRUE(WaitFor([&] { return c_.SeesAlive("n2", {"n1", "n2"}); }, kNoHang))
        << when << "\n" << c_.Log("n2");
  }
  Cluster c_;
  std::string a1_, a2_;
};

// Finding 1: zero bytes on the listen port aborted the daemon (UCX 1.13's
// connection manager asserted). Now the listen port is FedFS's own.
TEST_F(HostileNet, ZeroBytesOnTheListenPortAreRefused) {
  const uint16_t port = PortOf(a1_);
  for (size_t n : {size_t{32}, size_t{16}, size_t{64} << 10}) {
    const int fd = Dial(port);
    ASSERT_GE(fd, 0);
    SendAll(fd, m2m::Bytes(n, std::byte{0}));
    EXPECT_TRUE(ClosedByPeer(fd, Clock::now() + kNoHang)) << n << " zero bytes: not closed";
    ::close(fd);
  }
  ExpectHealthy("after zero bytes");
  EXPECT_NE(c_.Log("n1").find("refusing connection from 127.0.0.1"), std::string::npos)
      << c_.Log("n1");
}

// Finding 2: garbage connections were kept open forever (300 of them took
// the daemon from 75 to 375 descriptors). Now each is closed: at once when
// the bytes are garbage, after the handshake deadline when they are silent
// or incomplete; a source over its limit is closed at once.
TEST_F(HostileNet, GarbageAndSilentConnectionsAreClosed) {
  const uint16_t port = PortOf(a1_);
  const pid_t pid = c_.pid("n1");
  const size_t fds_before = FdCount(pid);
  std::mt19937_64 rng(21);
  std::vector<int> socks;
  for (int i = 0; i < 300; ++i) {
    // Spread over loopback sources: one source may hold only a few
    // unauthenticated connections at a time.
    const std::string src = "127.0.1." + std::to_string(1 + i % 50);
    const int fd = Dial(port, src.c_str());
    ASSERT_GE(fd, 0) << i;
    switch (i % 5) {
      case 0: SendAll(fd, Random(rng, 1 + rng() % 2000)); break;                 // random bytes
      case 1: SendAll(fd, m2m::Bytes{std::byte{0x7f}, std::byte{0xff}, std::byte{0xff},
                                     std::byte{0xff}, std::byte{0}, std::byte{0}, std::byte{0},
                                     std::byte{0}}); break;                      // huge length
      case 2: { auto m = Framed(Hello()); m.resize(m.size() / 2); SendAll(fd, m); break; }  // truncated
      case 3: SendAll(fd, m2m::Bytes{std::byte{'G'}, std::byte{'E'}, std::byte{'T'}, std::byte{' '},
                                     std::byte{'/'}, std::byte{'\r'}, std::byte{'\n'}}); break;
      default: break;  // silent
    }
    socks.push_back(fd);
  }
  const auto until = Clock::now() + kNoHang;
  size_t open = 0;
  for (int fd : socks) {
    open += ClosedByPeer(fd, until) ? 0 : 1;
    ::close(fd);
  }
  EXPECT_EQ(open, 0u) << "connections the daemon left open";
  EXPECT_TRUE(WaitFor([&] { return FdCount(pid) <= fds_before + 5; }, kNoHang))
      << FdCount(pid) << " descriptors now, " << fds_before << " before";

  // One source over its limit: the extra connections are closed at once,
  // while other sources (and the peer) are served.
  std::vector<int> held;
  for (int i = 0; i < 16; ++i) held.push_back(Dial(port, "127.0.2.1"));
  const int extra = Dial(port, "127.0.2.1");
  ASSERT_GE(extra, 0);
  EXPECT_TRUE(ClosedByPeer(extra, Clock::now() + std::chrono::seconds(3)))
      << "the 17th unauthenticated connection from one source was kept";
  ::close(extra);
  ExpectHealthy("with 16 connections from one source pending");
  for (int fd : held) ::close(fd);
  EXPECT_NE(c_.Log("n1").find("already authenticating"), std::string::npos);
}

// The network fuzzer.
TEST_F(HostileNet, FuzzEveryPort) {
  int seconds = 60;
  if (const char* s = std::getenv("FEDFS_NETFUZZ_SECONDS")) seconds = std::max(1, std::atoi(s));
  const pid_t pid = c_.pid("n1");
  const std::set<uint16_t> ports = ListeningPorts(pid);
  ASSERT_TRUE(ports.count(PortOf(a1_))) << "listen port not found among the daemon's sockets";
  ASSERT_GE(ports.size(), 2u) << "expected the bootstrap port and UCX's own TCP port(s)";
  auto key = m2m::LoadClusterKeyFile(c_.key_file());
  ASSERT_TRUE(key);
  m2m::UcxOptions ucx;
  ucx.tls = "tcp";
  ucx.net_devices = "lo";

  std::mt19937_64 rng(seconds * 7919ull + 1);
  m2m::FrameHeader req;
  req.kind = m2m::FrameKind::kRequest;
  req.call_id = 1;
  req.method = MethodId(RpcMethod::kMemberHeartbeat);
  const m2m::Bytes valid_req = m2m::EncodeFrame(req);
  auto mutate = [&](m2m::Bytes b) {
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < flips && !b.empty(); ++i) b[rng() % b.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
    if (rng() % 4 == 0) b.resize(rng() % (b.size() + 1));  // truncate
    return b;
  };
  std::map<std::string, size_t> sent;
  size_t batches = 0;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < end) {
    for (int i = 0; i < 40; ++i) {
      const uint16_t port = *std::next(ports.begin(), static_cast<long>(rng() % ports.size()));
      const int kind = static_cast<int>(rng() % 6);
      if (kind == 5) {
        // A peer that has the key but sends mutated frames on an unbound UCX endpoint.
        m2m::Bytes h = rng() % 2 ? mutate(valid_req) : Random(rng, rng() % 300);
        // Refused or dropped, as it should be: only the nodes' survival counts.
        m2m::UcxSendUnboundForTest(ucx, *key, a1_, h, Random(rng, rng() % 64)).IgnoreError();
        ++sent["unbound-ucx"];
        continue;
      }
      const int fd = Dial(port);
      if (fd < 0) continue;
      switch (kind) {
        case 0: SendAll(fd, Random(rng, rng() % 5000)); ++sent["random"]; break;
        case 1: SendAll(fd, m2m::Bytes(rng() % 70000, std::byte{0})); ++sent["zeros"]; break;
        case 2: SendAll(fd, mutate(Framed(Hello()))); ++sent["mutated-hello"]; break;
        case 3: SendAll(fd, mutate(Framed(valid_req, m2m::Bytes(0)))); ++sent["mutated-request"]; break;
        default: {  // a valid hello, then junk in place of the proof
          SendAll(fd, Framed(Hello()));
          std::byte buf[512];
          timeval tv{0, 200000};
          ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
          [[maybe_unused]] ssize_t n = ::recv(fd, buf, sizeof buf, 0);
          SendAll(fd, mutate(Framed(Random(rng, 40 + rng() % 60))));
          ++sent["hello-then-junk"];
        }
      }
      ::close(fd);
    }
    ++batches;
    ExpectHealthy("after batch " + std::to_string(batches));
    if (HasFatalFailure()) break;
  }
  std::string summary;
  for (auto& [k, n] : sent) summary += " " + k + "=" + std::to_string(n);
  std::cout << "netfuzz: " << seconds << " s, " << batches << " batches, ports " << ports.size()
            << ":" << summary << "\n";
  ExpectHealthy("at the end");
  EXPECT_GT(batches, 0u);
}

}  // namespace
}  // namespace fedfs::testing
