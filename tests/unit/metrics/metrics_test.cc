// metrics/: histograms, the text exposition, control replies as samples,
// and the HTTP endpoint (real sockets on loopback; hostile bytes included).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <gtest/gtest.h>

#include "control/schema.h"
#include "metrics/endpoint.h"
#include "metrics/metrics.h"

namespace fedfs::metrics {
namespace {

using namespace std::chrono_literals;

TEST(MetricsHistogram, BucketsAreCumulativeInTheText) {
  Histogram h;
  h.Observe(15us);    // <= 2e-5
  h.Observe(3ms);     // <= 5e-3
  h.Observe(20s);     // +Inf only
  h.Observe(-1ns);    // clamped to 0: the first bucket
  const auto s = h.Read();
  EXPECT_EQ(s.count, 4u);
  EXPECT_NEAR(s.sum_seconds, 20.003015, 1e-9);
  Exposition e(Labels{{"node", "n1"}});
  e.Histogram("fedfs_x_seconds", "x", s, {{"op", "lookup"}});
  const std::string t = e.Text();
  EXPECT_NE(t.find("# TYPE fedfs_x_seconds histogram\n"), std::string::npos) << t;
  EXPECT_NE(t.find("fedfs_x_seconds_bucket{node=\"n1\",op=\"lookup\",le=\"1.0000000000000001e-05\"} 1\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("le=\"2.0000000000000002e-05\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("le=\"0.0050000000000000001\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("le=\"10\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("le=\"+Inf\"} 4\n"), std::string::npos) << t;
  EXPECT_NE(t.find("fedfs_x_seconds_count{node=\"n1\",op=\"lookup\"} 4\n"), std::string::npos) << t;
}

TEST(MetricsExposition, OneHelpAndTypePerFamilyLabelsEscaped) {
  Exposition e;
  e.Counter("fedfs_a_total", "first help", 1, {{"peer", "a\"b\\c\nd"}});
  e.Counter("fedfs_a_total", "second help is ignored", 2, {{"peer", "x"}});
  e.Gauge("fedfs_b", "a gauge", 0.5);
  e.Gauge("fedfs_a_total", "the same name as another type: dropped", 3);
  e.Counter("9bad-name", "dropped", 1);
  EXPECT_EQ(e.dropped(), 2u);
  EXPECT_EQ(e.Text(),
            "# HELP fedfs_a_total first help\n"
            "# TYPE fedfs_a_total counter\n"
            "fedfs_a_total{peer=\"a\\\"b\\\\c\\nd\"} 1\n"
            "fedfs_a_total{peer=\"x\"} 2\n"
            "# HELP fedfs_b a gauge\n"
            "# TYPE fedfs_b gauge\n"
            "fedfs_b 0.5\n");
}

TEST(MetricsExposition, NamesFollowPrometheusRules) {
  EXPECT_TRUE(ValidName("fedfs_fuse_op_duration_seconds"));
  EXPECT_TRUE(ValidName("a:b_c9"));
  EXPECT_FALSE(ValidName(""));
  EXPECT_FALSE(ValidName("9a"));
  EXPECT_FALSE(ValidName("a-b"));
  EXPECT_FALSE(ValidName("a b"));
}

TEST(MetricsReply, FieldsBecomeCountersAndGauges) {
  control::DtReply r;
  r.node = "n1";
  r.lookups = 7;
  r.resident = 3;
  r.messages_per_lookup = 0.25;
  r.table = control::DtTableRow{};
  r.table->hits = 5;
  r.table->occupancy = 2;
  Exposition e;
  ExposeReply(e, "fedfs_dt", "dt", r, {"resident", "occupancy"});
  const std::string t = e.Text();
  EXPECT_NE(t.find("# TYPE fedfs_dt_lookups_total counter\nfedfs_dt_lookups_total 7\n"),
            std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE fedfs_dt_resident gauge\nfedfs_dt_resident 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("fedfs_dt_messages_per_lookup 0.25\n"), std::string::npos) << t;
  EXPECT_NE(t.find("fedfs_dt_table_hits_total 5\n"), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE fedfs_dt_table_occupancy gauge\nfedfs_dt_table_occupancy 2\n"),
            std::string::npos) << t;
  EXPECT_EQ(t.find("node"), std::string::npos) << "strings are not samples: " << t;
  // Without a table, none of its samples.
  r.table.reset();
  Exposition e2;
  ExposeReply(e2, "fedfs_dt", "dt", r, {"resident"});
  EXPECT_EQ(e2.Text().find("fedfs_dt_table_"), std::string::npos);
}

TEST(MetricsRegistry, CollectorsRunOnEveryScrapeWithConstantLabels) {
  Registry reg(Labels{{"node", "n7"}});
  int scrapes = 0;
  reg.Add([&](Exposition& e) { e.Counter("fedfs_scrapes_total", "scrapes", ++scrapes); });
  EXPECT_EQ(reg.Render(), "# HELP fedfs_scrapes_total scrapes\n# TYPE fedfs_scrapes_total counter\n"
                          "fedfs_scrapes_total{node=\"n7\"} 1\n");
  EXPECT_NE(reg.Render().find("} 2\n"), std::string::npos);
}

TEST(MetricsEndpoint, AddressesParsedOrRefused) {
  auto a = SplitHostPort("127.0.0.1:9480");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->first, "127.0.0.1");
  EXPECT_EQ(a->second, 9480);
  auto b = SplitHostPort("[::1]:0");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->first, "::1");
  EXPECT_EQ(b->second, 0);
  for (const char* bad : {"", "nohost", ":1", "h:", "h:65536", "h:-1", "h:1x", "[::1]9", "[::1"}) {
    auto r = SplitHostPort(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, EINVAL) << bad;
  }
}

Registry& TestRegistry() {
  static Registry reg = [] {
    Registry r(Labels{{"node", "t"}});
    r.Add([](Exposition& e) { e.Gauge("fedfs_up", "up", 1); });
    return r;
  }();
  return reg;
}

TEST(MetricsEndpoint, ServesTheScrapeAndNothingElse) {
  auto ep = Endpoint::Start("127.0.0.1:0", &TestRegistry());
  ASSERT_TRUE(ep) << ep.error().ToString();
  auto hp = SplitHostPort((*ep)->address());
  ASSERT_TRUE(hp);
  ASSERT_NE(hp->second, 0);
  httplib::Client cli(hp->first, hp->second);
  auto res = cli.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res->body, "# HELP fedfs_up up\n# TYPE fedfs_up gauge\nfedfs_up{node=\"t\"} 1\n");
  auto other = cli.Get("/");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  auto post = cli.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);

  // The same port again: refused with a clear error.
  auto again = Endpoint::Start((*ep)->address(), &TestRegistry());
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, EADDRINUSE) << again.error().ToString();
  EXPECT_NE(again.error().context.find("already in use"), std::string::npos);
  auto bad = Endpoint::Start("127.0.0.1:http", &TestRegistry());
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, EINVAL);
  (*ep)->Stop();
  (*ep)->Stop();  // idempotent
}

// Raw bytes to the endpoint's port; returns what came back before close.
std::string SendRaw(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "connect failed";
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(MetricsEndpoint, HostileBytesGetAnErrorAndTheEndpointServesOn) {
  auto ep = Endpoint::Start("127.0.0.1:0", &TestRegistry());
  ASSERT_TRUE(ep) << ep.error().ToString();
  const int port = SplitHostPort((*ep)->address())->second;
  std::string huge_header = "GET /metrics HTTP/1.1\r\nX: " + std::string(1 << 20, 'a') + "\r\n\r\n";
  std::string zeros(4096, '\0');
  std::string big_body = "POST /metrics HTTP/1.1\r\nContent-Length: 100000000\r\n\r\nabc";
  for (const std::string& in : {std::string("\x16\x03\x01\x02\x00", 5), zeros, huge_header,
                                big_body, std::string("GET /metrics?") + std::string(9000, '%') +
                                              " HTTP/1.1\r\n\r\n",
                                std::string("GET /metrics HTTP/9.9\r\n\r\n")}) {
    const std::string reply = SendRaw(port, in);
    EXPECT_EQ(reply.find("fedfs_up"), std::string::npos) << "answered a scrape to junk";
  }
  httplib::Client cli("127.0.0.1", port);
  auto res = cli.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

}  // namespace
}  // namespace fedfs::metrics
