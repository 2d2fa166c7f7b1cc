// The control protocol's one schema (control/schema.h): replies encode to
// the same bytes the daemon wrote before the schema existed (the JSON
// built field by field, as the tests below build it) and decode back;
// requests are parsed once, their path normalised; the dispatcher answers
// every malformed, unknown or failed request with {"error":...}; the server
// answers on a 0600 socket, and the client (fedfsctl's) asks it.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/client.h"
#include "control/dispatcher.h"
#include "control/schema.h"
#include "control/server.h"

namespace fedfs::control {
namespace {

using Json = nlohmann::json;

TEST(ControlSchema, StatusBytesAsBefore) {
  StatusReply r{"a", 9, {}};
  r.members.push_back({"a", "127.0.0.1:1", "alive", 1, 0.5, 0, 0, true});
  r.members.push_back({"b", "[::1]:2", "dead", 0xffff'ffff'ffffULL, 0.0, -1, 1234, false});
  Json members = Json::array();
  members.push_back({{"id", "a"}, {"addr", "127.0.0.1:1"}, {"state", "alive"},
                     {"incarnation", uint64_t{1}}, {"ring_share", 0.5}, {"rtt_us", int64_t{0}},
                     {"last_heard_ms_ago", int64_t{0}}, {"self", true}});
  members.push_back({{"id", "b"}, {"addr", "[::1]:2"}, {"state", "dead"},
                     {"incarnation", uint64_t{0xffff'ffff'ffffULL}}, {"ring_share", 0.0},
                     {"rtt_us", int64_t{-1}}, {"last_heard_ms_ago", int64_t{1234}},
                     {"self", false}});
  const std::string before =
      Json{{"node_id", "a"}, {"epoch", uint64_t{9}}, {"members", members}}.dump();
  EXPECT_EQ(EncodeReply(r), before);
  auto back = DecodeReply<StatusReply>(before);
  ASSERT_TRUE(back) << back.error().context;
  EXPECT_EQ(EncodeReply(*back), before);
}

TEST(ControlSchema, NamespaceRepliesBytesAsBefore) {
  EXPECT_EQ(EncodeReply(RingReply{"/x/y", "b", 7}),
            (Json{{"path", "/x/y"}, {"manager", "b"}, {"epoch", uint64_t{7}}}.dump()));
  EXPECT_EQ(EncodeReply(WhereReply{"/f", {"n1", "n2"}}),
            (Json{{"path", "/f"}, {"holders", std::vector<std::string>{"n1", "n2"}}}.dump()));
  EXPECT_EQ(EncodeReply(WhereReply{"/f", {}}), R"({"holders":[],"path":"/f"})");
  ConflictsReply c{"/d", {{"x", {{"n1", "file"}, {"n2", "dir"}}}}};
  Json copies = Json::array({Json{{"node", "n1"}, {"type", "file"}}, Json{{"node", "n2"}, {"type", "dir"}}});
  EXPECT_EQ(EncodeReply(c),
            (Json{{"path", "/d"}, {"conflicts", Json::array({Json{{"name", "x"}, {"copies", copies}}})}}
                 .dump()));
  EXPECT_EQ(EncodeReply(ConflictsReply{"/d", {}}), R"({"conflicts":[],"path":"/d"})");
}

TEST(ControlSchema, DtAndFilesBytesAsBefore) {
  DtReply d;
  d.node = "n2";
  d.lookups = 4;
  d.gets_sent = 1;
  d.messages_per_lookup = 0.25;
  d.invalidations_sent = 3;
  d.resident = 2;
  Json before{{"node", "n2"}, {"lookups", 4u}, {"gets_sent", 1u}, {"messages_per_lookup", 0.25},
              {"dt_invals_received", 0u}, {"notifies_sent", 0u}, {"kernel_invalidations", 0u},
              {"sharer_records", 0u}, {"invalidations_sent", 3u}, {"invalidations_failed", 0u},
              {"broadcasts_sent", 0u}, {"changes_invalidated", 0u},
              {"deltas_sent", 0u}, {"deltas_kept", 0u}, {"invalidations_resent", 0u}, {"resends", 0u}, {"duplicates_answered", 0u},
              {"gets_served", 0u},
              {"dirmerges", 0u}, {"updates_applied", 0u}, {"resident", 2u},
              {"leases_granted", 0u}, {"leases_recalled", 0u}, {"leases_taken", 0u},
              {"leases_ended", 0u}, {"leases_held", 0u}, {"unlinks_asked", 0u},
              {"unlinks_made", 0u}, {"renames_asked", 0u}, {"renames_made", 0u},
              {"table", nullptr}};
  EXPECT_EQ(EncodeReply(d), before.dump());
  d.table = DtTableRow{4096, 64, 3, 100, 10, 2, 1, 0, 5, 6, 7};
  before["table"] = Json{{"capacity", 4096u}, {"max_bytes", 64u}, {"occupancy", 3u},
                         {"bytes", 100u}, {"hits", 10u}, {"misses", 2u}, {"stale", 1u},
                         {"evictions", 0u}, {"bumps_received", 5u}, {"local_bumps", 6u},
                         {"patches", 7u}, {"name_hits", 0u}, {"name_installs", 0u},
                         {"skeletons", 0u}, {"deltas_applied", 0u},
                         {"deltas_refused", 0u}, {"deltas_queued", 0u}};
  EXPECT_EQ(EncodeReply(d), before.dump());
  auto back = DecodeReply<DtReply>(before.dump());
  ASSERT_TRUE(back) << back.error().context;
  ASSERT_TRUE(back->table);
  EXPECT_EQ(back->table->patches, 7u);
  EXPECT_EQ(back->messages_per_lookup, 0.25);

  FilesReply f{"n1", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  EXPECT_EQ(EncodeReply(f),
            (Json{{"node", "n1"}, {"sessions", 1u}, {"handles", 2u}, {"watches", 3u},
                  {"served", 4u}, {"refused", 5u}, {"callbacks_sent", 6u},
                  {"callbacks_failed", 7u}, {"callbacks_received", 8u},
                  {"callbacks_refused", 9u}, {"data_bytes", 10u}, {"sessions_expired", 11u},
                  {"duplicates_answered", 12u}, {"lease_waits", 0u}, {"pinned", 0u},
                  {"deferred_opens", 0u}, {"deferred_used", 0u}, {"deferred_adopted", 0u},
                  {"deferred_stale", 0u}}
                 .dump()));
}

TEST(ControlSchema, InvalidUtf8IsCarriedNotThrown) {
  const std::string reply = EncodeReply(ConflictsReply{"/d", {{"bad\xff", {{"n1", "file"}}}}});
  EXPECT_TRUE(Json::accept(reply)) << reply;
}

TEST(ControlSchema, DecodeRefusesWrongTypesAndKeepsDefaults) {
  EXPECT_FALSE(DecodeReply<RingReply>("not json"));
  EXPECT_FALSE(DecodeReply<RingReply>("[1]"));
  auto wrong = DecodeReply<RingReply>(R"({"path":7})");
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().context.find("path"), std::string::npos);
  EXPECT_FALSE(DecodeReply<StatusReply>(R"({"members":[{"id":1}]})"));
  auto partial = DecodeReply<FilesReply>(R"({"node":"n1","extra":true})");
  ASSERT_TRUE(partial);
  EXPECT_EQ(partial->node, "n1");
  EXPECT_EQ(partial->sessions, 0u);
}

TEST(ControlSchema, Requests) {
  EXPECT_EQ(EncodeRequest({"status", ""}).value(), R"({"cmd":"status"})");
  EXPECT_EQ(EncodeRequest({"ring", "/a//b/"}).value(), R"({"cmd":"ring","path":"/a//b/"})");
  EXPECT_FALSE(EncodeRequest({"where", "/bad\xff"}));
  auto q = ParseRequest(R"({"cmd":"conflicts","path":"//a//b/","x":1})");
  ASSERT_TRUE(q) << q.error().context;
  EXPECT_EQ(q->cmd, "conflicts");
  EXPECT_EQ(q->path, "/a/b");
  auto s = ParseRequest(R"({"cmd":"dt","path":7})");  // no path argument: ignored
  ASSERT_TRUE(s);
  EXPECT_EQ(s->path, "");
  for (const char* bad : {"", "nonsense", "[1]", R"({"cmd":7})", R"({"cmd":"explode"})",
                          R"({"cmd":"where"})", R"({"cmd":"where","path":"rel"})",
                          R"({"cmd":"ring","path":""})"}) {
    EXPECT_FALSE(ParseRequest(bad)) << bad;
  }
  // A move's rate bound: migrate and rebalance only, a byte count.
  Request m{"migrate", "/a", "n2"};
  m.max_rate = 5 << 20;
  EXPECT_EQ(EncodeRequest(m).value(), R"({"cmd":"migrate","max_rate":5242880,"node":"n2","path":"/a"})");
  auto mr = ParseRequest(EncodeRequest(m).value());
  ASSERT_TRUE(mr) << mr.error().context;
  EXPECT_EQ(mr->max_rate, 5u << 20);
  EXPECT_EQ(ParseRequest(R"({"cmd":"rebalance","max_rate":7})").value().max_rate, 7u);
  EXPECT_EQ(ParseRequest(R"({"cmd":"migrate","path":"/a","node":"n2"})").value().max_rate, 0u);
  for (const char* bad : {R"({"cmd":"status","max_rate":7})",
                          R"({"cmd":"migrate","path":"/a","node":"n2","max_rate":-1})",
                          R"({"cmd":"migrate","path":"/a","node":"n2","max_rate":"5M"})",
                          R"({"cmd":"migrate","path":"/a","node":"n2","max_rate":1.5})"}) {
    EXPECT_FALSE(ParseRequest(bad)) << bad;
  }
  EXPECT_EQ(NormalizeControlPath("/"), "/");
  EXPECT_EQ(NormalizeControlPath("///"), "/");
  EXPECT_EQ(NormalizeControlPath("/a//b/"), "/a/b");
  EXPECT_EQ(DefaultSocketPath("n1"), "/run/fedfs/n1.sock");
}

TEST(ControlDispatcher, ParsesOnceAndAnswersErrors) {
  Dispatcher d;
  std::string seen;
  d.Register([&seen](const Request& q) -> Result<WhereReply> {
    seen = q.path;
    if (q.path == "/missing") return Err(ENOENT, q.path + ": no such entry");
    return WhereReply{q.path, {"n1"}};
  });
  EXPECT_TRUE(d.Serves("where"));
  EXPECT_FALSE(d.Serves("dt"));
  EXPECT_EQ(d.Handle(R"({"cmd":"where","path":"/a//b/"})"), R"({"holders":["n1"],"path":"/a/b"})");
  EXPECT_EQ(seen, "/a/b");
  EXPECT_EQ(d.Handle(R"({"cmd":"where","path":"/missing"})"),
            R"({"error":"/missing: no such entry"})");
  EXPECT_EQ(d.Handle(R"({"cmd":"where"})"), R"({"error":"missing \"path\""})");
  EXPECT_EQ(d.Handle("[]"), R"({"error":"request is not a JSON object"})");
  for (const char* bad : {"", "{", R"({"cmd":"dt"})", R"({"cmd":"nope"})", R"({"cmd":null})"}) {
    const Json j = Json::parse(d.Handle(bad));
    EXPECT_TRUE(j.contains("error")) << bad;
  }
  d.Register([](const Request&) -> Result<DtReply> { throw std::runtime_error("boom"); });
  EXPECT_TRUE(Json::parse(d.Handle(R"({"cmd":"dt"})")).contains("error"));
}

TEST(ControlServer, AnswersOnAPrivateSocket) {
  const std::string dir = ::testing::TempDir() + "control_test." + std::to_string(::getpid());
  const std::string path = dir + "/sub/c.sock";
  std::filesystem::remove_all(dir);
  Dispatcher d;
  d.Register([](const Request& q) -> Result<RingReply> { return RingReply{q.path, "n1", 3}; });
  ControlServer server({path}, std::move(d));
  ASSERT_TRUE(server.Start());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir + "/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(CheckControlSocketFree(path).error().code, EADDRINUSE);

  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string out = "{\"cmd\":\"ring\",\"path\":\"/a/\"}\r\n\nnot json\n";
  ASSERT_EQ(::send(fd, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
  ::shutdown(fd, SHUT_WR);
  std::string in;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) in.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(in, "{\"epoch\":3,\"manager\":\"n1\",\"path\":\"/a\"}\n"
                "{\"error\":\"request is not a JSON object\"}\n");
  server.Stop();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(CheckControlSocketFree(path));
  std::filesystem::remove_all(dir);
}

TEST(ControlClient, AsksAServer) {
  const std::string dir = ::testing::TempDir() + "control_client." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/n1.sock";
  auto none = OnlySocketIn(dir);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ENOENT);
  auto down = Ask(path, {"status", ""});
  ASSERT_FALSE(down);
  EXPECT_NE(down.error().context.find("fedfsd is not running"), std::string::npos);

  Dispatcher d;
  d.Register([](const Request& q) -> Result<WhereReply> {
    if (q.path == "/x") return Err(ENOENT, "/x: no such entry");
    return WhereReply{q.path, {"n1", "n2"}};
  });
  ControlServer server({path}, std::move(d));
  ASSERT_TRUE(server.Start());
  EXPECT_EQ(OnlySocketIn(dir).value(), path);
  auto r = Ask(path, {"where", "/a//b"});
  ASSERT_TRUE(r) << r.error().context;
  EXPECT_EQ(DecodeReply<WhereReply>(*r).value().holders, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(Indented(*r), Json::parse(*r).dump(2));
  auto e = Ask(path, {"where", "/x"});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().context, "fedfsd: /x: no such entry");
  auto unserved = Ask(path, {"dt", ""});
  ASSERT_FALSE(unserved);
  EXPECT_EQ(unserved.error().context.rfind("fedfsd: ", 0), 0u);
  server.Stop();
  std::filesystem::remove_all(dir);
}

// Each connection is served on its own thread: a request whose handler
// blocks (a migrate, a rebalance) holds up no other client; past
// kMaxClients at once a connection waits until one ends.
TEST(ControlServer, ALongRequestHoldsUpNoOtherClient) {
  const std::string dir = ::testing::TempDir() + "control_conc." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/n1.sock";
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> waiting{0};
  Dispatcher d;
  d.Register([&](const Request& q) -> Result<RingReply> {
    ++waiting;
    released.wait();
    return RingReply{q.path, "n1", 1};
  });
  std::atomic<int> wheres{0};
  d.Register([&](const Request& q) -> Result<WhereReply> {
    ++wheres;
    return WhereReply{q.path, {"n2"}};
  });
  ControlServer server({path}, std::move(d));
  ASSERT_TRUE(server.Start());
  std::vector<std::thread> slow;
  std::thread next;
  bool released_yet = false;
  // Whatever an assertion below cuts short: the blocked handlers end, the
  // clients are joined, the server stops and its directory goes.
  struct Cleanup {
    std::function<void()> run;
    ~Cleanup() { run(); }
  } cleanup{[&] {
    if (!released_yet) release.set_value();
    for (std::thread& t : slow) {
      if (t.joinable()) t.join();
    }
    if (next.joinable()) next.join();
    server.Stop();
    std::filesystem::remove_all(dir);
  }};
  std::vector<Result<std::string>> answers(ControlServer::kMaxClients, Err(EIO, "not asked"));
  for (size_t i = 0; i < ControlServer::kMaxClients; ++i) {
    slow.emplace_back([&, i] { answers[i] = Ask(path, {"ring", "/slow"}, std::chrono::seconds(0)); });
    if (i == 0) {
      // One blocked: another client is answered meanwhile.
      for (int t = 0; t < 500 && waiting.load() < 1; ++t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ASSERT_EQ(waiting.load(), 1);
      auto r = Ask(path, {"where", "/a"});
      ASSERT_TRUE(r) << r.error().context;
      EXPECT_EQ(DecodeReply<WhereReply>(*r).value().holders, std::vector<std::string>{"n2"});
    }
  }
  for (int t = 0; t < 500 && waiting.load() < static_cast<int>(ControlServer::kMaxClients); ++t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(waiting.load(), static_cast<int>(ControlServer::kMaxClients));
  // Past the bound: not served until a slow one ends.
  Result<std::string> queued = Err(EIO, "not asked");
  next = std::thread([&] { queued = Ask(path, {"where", "/q"}, std::chrono::seconds(0)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(wheres.load(), 1) << "a ninth client was served while eight were";
  release.set_value();
  released_yet = true;
  for (std::thread& t : slow) t.join();
  next.join();
  ASSERT_TRUE(queued) << queued.error().context;
  EXPECT_EQ(wheres.load(), 2);
  for (const auto& a : answers) {
    ASSERT_TRUE(a) << a.error().context;
    EXPECT_EQ(DecodeReply<RingReply>(*a).value().manager, "n1");
  }
}

}  // namespace
}  // namespace fedfs::control
