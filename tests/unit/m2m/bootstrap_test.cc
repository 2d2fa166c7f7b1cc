// The UCX transport's connection bootstrap (m2m/bootstrap.h) on its own:
// both sides authenticate and derive the same bind token; a wrong key is
// refused either way; silent and garbage connections are closed; one source
// cannot hold more than its share of unauthenticated connections; an
// established link that ends or talks is reported.
#include "m2m/bootstrap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "m2m/auth.h"

namespace fedfs::m2m {
namespace {

using Clock = Bootstrap::Clock;
using namespace std::chrono_literals;

Bytes Key(char c) { return Bytes(kClusterKeyBytes, std::byte(c)); }

sockaddr_in Loopback(uint16_t port, const char* ip = "127.0.0.1") {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &sa.sin_addr);
  return sa;
}

// One bootstrap and what its callbacks reported.
struct Side {
  explicit Side(Bytes key, std::chrono::milliseconds timeout = 5s, Bytes address = {}) {
    BootstrapOptions o;
    o.cluster_key = std::move(key);
    o.local_address = address.empty() ? Bytes(40, std::byte{0x5a}) : std::move(address);
    o.handshake_timeout = timeout;
    o.max_pending_per_source = 4;
    BootstrapCallbacks cb;
    cb.accepted = [this](uint64_t link, const std::string&, Bytes token) { accepted[link] = token; };
    cb.connected = [this](uint64_t link, Bytes address, Bytes token) {
      connected[link] = {std::move(address), std::move(token)};
    };
    cb.closed = [this](uint64_t link, Error why) { closed[link] = why; };
    auto b = Bootstrap::Create(std::move(o), std::move(cb));
    EXPECT_TRUE(b);
    boot = std::move(*b);
  }
  uint16_t Listen() {
    const sockaddr_in sa = Loopback(0);
    auto p = boot->Listen(reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
    EXPECT_TRUE(p) << p.error().ToString();
    return p ? *p : 0;
  }
  uint64_t Connect(uint16_t port) {
    const sockaddr_in sa = Loopback(port);
    return boot->Connect(reinterpret_cast<const sockaddr*>(&sa), sizeof sa, "server",
                         Clock::now() + 5s);
  }
  std::unique_ptr<Bootstrap> boot;
  std::map<uint64_t, Bytes> accepted;
  std::map<uint64_t, std::pair<Bytes, Bytes>> connected;
  std::map<uint64_t, Error> closed;
};

// Polls both sides until pred holds (bounded: a hang becomes a failure).
template <typename Pred>
bool Pump(std::initializer_list<Side*> sides, Pred pred, std::chrono::seconds bound = 30s) {
  const auto until = Clock::now() + bound;
  while (Clock::now() < until) {
    for (Side* s : sides) s->boot->Poll();
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

int Dial(uint16_t port, const char* source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_in src = Loopback(0, source);
  ::bind(fd, reinterpret_cast<const sockaddr*>(&src), sizeof src);
  const sockaddr_in sa = Loopback(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa), 0);
  return fd;
}

// 1 if the peer closed fd, 0 if it is still open (non-blocking check).
int PeerClosed(int fd) {
  std::byte b[64];
  const ssize_t n = ::recv(fd, b, sizeof b, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ? 1 : 0;
}

TEST(Bootstrap, BothSidesAuthenticateAndShareTheBindToken) {
  Side server(Key('k'), 5s, Bytes(300, std::byte{0x42}));
  Side client(Key('k'));
  const uint64_t link = client.Connect(server.Listen());
  ASSERT_TRUE(Pump({&server, &client}, [&] { return !server.accepted.empty() && !client.connected.empty(); }));
  const auto& [address, token] = client.connected.at(link);
  EXPECT_EQ(address, Bytes(300, std::byte{0x42}));
  ASSERT_EQ(token.size(), 32u);
  EXPECT_EQ(server.accepted.begin()->second, token);
  EXPECT_EQ(server.boot->pending(), 0u);
  EXPECT_EQ(client.boot->pending(), 0u);

  // The link stays open while idle; its end is reported on the other side.
  ASSERT_FALSE(Pump({&server, &client}, [&] { return !server.closed.empty(); }, 1s));
  client.boot->Close(link);
  ASSERT_TRUE(Pump({&server}, [&] { return !server.closed.empty(); }));
  EXPECT_EQ(server.closed.begin()->second.code, ECONNRESET);
  EXPECT_TRUE(client.closed.empty()) << "Close() reports nothing";
}

TEST(Bootstrap, WrongKeyIsRefusedEitherWay) {
  Side server(Key('k'));
  Side client(Key('x'));
  const uint64_t link = client.Connect(server.Listen());
  ASSERT_TRUE(Pump({&server, &client}, [&] { return client.closed.count(link) != 0; }));
  EXPECT_EQ(client.closed.at(link).code, EACCES) << client.closed.at(link).ToString();
  EXPECT_TRUE(server.accepted.empty());
  EXPECT_TRUE(client.connected.empty());
}

TEST(Bootstrap, UnreachableServerIsReportedAsHostDown) {
  Side client(Key('k'));
  uint16_t port;
  {
    Side gone(Key('k'));
    port = gone.Listen();
  }
  const uint64_t link = client.Connect(port);
  ASSERT_TRUE(Pump({&client}, [&] { return client.closed.count(link) != 0; }));
  EXPECT_EQ(client.closed.at(link).code, EHOSTDOWN);
}

TEST(Bootstrap, SilentAndGarbageConnectionsAreClosed) {
  Side server(Key('k'), 300ms);
  const uint16_t port = server.Listen();
  const int silent = Dial(port, "127.0.0.1");
  const int zeros = Dial(port, "127.0.0.1");
  const int junk = Dial(port, "127.0.0.1");
  ASSERT_EQ(::send(zeros, Bytes(32).data(), 32, MSG_NOSIGNAL), 32);
  const char http[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_GT(::send(junk, http, sizeof http - 1, MSG_NOSIGNAL), 0);
  ASSERT_TRUE(Pump({&server}, [&] { return PeerClosed(zeros) + PeerClosed(junk) == 2; }));
  ASSERT_TRUE(Pump({&server}, [&] { return PeerClosed(silent) == 1; }))
      << "a silent connection outlived the handshake deadline";
  EXPECT_EQ(server.boot->pending(), 0u);
  for (int fd : {silent, zeros, junk}) ::close(fd);
}

TEST(Bootstrap, OneSourceHoldsAtMostItsShareOfPendingConnections) {
  Side server(Key('k'));
  const uint16_t port = server.Listen();
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(Dial(port, "127.0.3.1"));
  ASSERT_TRUE(Pump({&server}, [&] { return server.boot->pending() == 4; }));
  const int extra = Dial(port, "127.0.3.1");
  ASSERT_TRUE(Pump({&server}, [&] { return PeerClosed(extra) == 1; }));
  for (int fd : held) EXPECT_EQ(PeerClosed(fd), 0);
  // Another source is still served.
  Side client(Key('k'));
  client.Connect(port);
  ASSERT_TRUE(Pump({&server, &client}, [&] { return !client.connected.empty(); }));
  for (int fd : held) ::close(fd);
  ::close(extra);
}

TEST(Bootstrap, DataOnAnEstablishedLinkClosesIt) {
  Side server(Key('k'));
  const uint16_t port = server.Listen();
  // A hand-made client: authenticates, then talks out of turn.
  const int fd = Dial(port, "127.0.0.1");
  ClientHandshake hs(Key('k'));
  auto send_frame = [&](const FrameHeader& h) {
    const Bytes hdr = EncodeFrame(h);
    Bytes m = {std::byte(0), std::byte(0), std::byte(hdr.size() >> 8), std::byte(hdr.size() & 0xff),
               std::byte(0), std::byte(0), std::byte(0), std::byte(0)};
    m.insert(m.end(), hdr.begin(), hdr.end());
    ASSERT_EQ(::send(fd, m.data(), m.size(), MSG_NOSIGNAL), static_cast<ssize_t>(m.size()));
  };
  auto read_frame = [&]() -> FrameHeader {
    std::byte len[8];
    EXPECT_TRUE(Pump({&server}, [&] { return ::recv(fd, len, 8, MSG_DONTWAIT | MSG_PEEK) == 8; }));
    EXPECT_EQ(::recv(fd, len, 8, 0), 8);
    const size_t hl = (size_t(len[2]) << 8) | size_t(len[3]);
    const size_t pl = (size_t(len[6]) << 8) | size_t(len[7]);
    Bytes body(hl + pl);
    EXPECT_TRUE(Pump({&server}, [&] {
      return ::recv(fd, body.data(), body.size(), MSG_DONTWAIT | MSG_PEEK) == ssize_t(body.size());
    }));
    EXPECT_EQ(::recv(fd, body.data(), body.size(), 0), ssize_t(body.size()));
    auto h = DecodeFrame(std::span<const std::byte>(body.data(), hl), pl, 1 << 20);
    EXPECT_TRUE(h);
    return h ? *h : FrameHeader{};
  };
  send_frame(hs.Hello());
  auto proof = hs.OnChallenge(read_frame());
  ASSERT_TRUE(proof);
  send_frame(*proof);
  EXPECT_TRUE(hs.OnResult(read_frame()));
  ASSERT_TRUE(Pump({&server}, [&] { return server.accepted.size() == 1; }));
  ASSERT_EQ(server.accepted.begin()->second, hs.BindToken());
  send_frame(hs.Hello());  // out of turn
  ASSERT_TRUE(Pump({&server}, [&] { return server.closed.size() == 1; }));
  EXPECT_EQ(server.closed.begin()->second.code, EPROTO);
  ::close(fd);
}

}  // namespace
}  // namespace fedfs::m2m
