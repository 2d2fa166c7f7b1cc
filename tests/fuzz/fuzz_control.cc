// libFuzzer target: the control protocol (control/schema.h, server.h,
// dispatcher.h): the request lines a ControlServer reads from its socket,
// cut into lines by the server and answered by its Dispatcher (here with the
// membership commands, cluster/membership_control.h: HandleControlRequest),
// and NormalizeControlPath, which ParseRequest applies to every command's
// path.
//
// Input: a mode byte, then the bytes one client sends on one connection.
// With mode 0xff, 65 KiB without a newline follow them (past the server's
// line limit; rare, since scanning them is slow under instrumentation). A real
// ControlServer (one, on a socket in a temp dir, over a fixed three-member
// view) serves each input. Invariants: one reply per non-empty complete
// line, each one JSON object on one line, then "request line too long"
// after an overlong line; every reply of HandleControlRequest is a JSON
// object; NormalizeControlPath is idempotent and leaves no "//" and no
// trailing '/'.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include <nlohmann/json.hpp>

#include "cluster/membership_control.h"
#include "cluster/ring.h"
#include "control/server.h"
#include "fuzz_util.h"

using namespace fedfs;
using namespace fedfs::daemon;
using fedfs::control::NormalizeControlPath;
using Json = nlohmann::json;

namespace {

constexpr size_t kMaxLine = 64 * 1024;  // control/server.cc

std::shared_ptr<const MembershipView> MakeView() {
  auto v = std::make_shared<MembershipView>();
  v->self_id = "n1";
  v->epoch = 9;
  const auto now = std::chrono::steady_clock::now();
  v->members["n1"] = {"n1", "10.0.0.1:7000", 1, MemberState::kAlive, now, 0, 1};
  v->members["n2"] = {"n2", "10.0.0.2:7000", 2, MemberState::kAlive, now, 120, 2};
  v->members["n3"] = {"n3", "[fd00::3]:7000", 3, MemberState::kDead, now, -1, 3};
  v->ring = std::make_shared<Ring>(std::vector<std::string>{"n1", "n2"}, 16);
  return v;
}

struct Server {
  std::string dir;
  std::string socket;
  std::shared_ptr<const MembershipView> view = MakeView();
  std::unique_ptr<control::ControlServer> server;
};
Server* g_server = nullptr;

void StopServer() {
  if (g_server == nullptr) return;
  g_server->server.reset();
  ::rmdir(g_server->dir.c_str());
}

void StartServer() {
  g_server = new Server;
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/fuzz_control.XXXXXX";
  FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr);
  g_server->dir = tmpl;
  g_server->socket = tmpl + "/c.sock";
  control::Dispatcher commands;
  RegisterMembershipControl(commands, [] { return g_server->view; });
  g_server->server = std::make_unique<control::ControlServer>(
      control::ControlOptions{g_server->socket}, std::move(commands));
  auto s = g_server->server->Start();
  if (!s) {
    std::fprintf(stderr, "control server: %s\n", s.error().ToString().c_str());
    std::abort();
  }
  std::atexit(StopServer);
}

// Sends `out` on one connection (then shuts the write side) and returns
// everything the server answered until it closed.
std::string Exchange(const std::string& out) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, g_server->socket.c_str(), sizeof(a.sun_path) - 1);
  FUZZ_CHECK(::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  std::string in;
  size_t sent = 0;
  bool shut = false;
  for (;;) {
    if (sent == out.size() && !shut) {
      ::shutdown(fd, SHUT_WR);
      shut = true;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (shut ? 0 : POLLOUT)), 0};
    const int r = ::poll(&p, 1, 10000);
    if (r < 0 && errno == EINTR) continue;  // libFuzzer's SIGALRM (its -timeout)
    FUZZ_CHECK(r > 0);  // the server answers or closes within its 5 s idle bound
    if (p.revents & POLLOUT) {
      const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        sent = out.size();  // the server closed (line too long): read what it said
        shut = true;
      }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[8192];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        in.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        break;
      }
    }
  }
  ::close(fd);
  return in;
}

void CheckObject(const std::string& reply) {
  FUZZ_CHECK(reply.find('\n') == std::string::npos);
  const Json j = Json::parse(reply, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!j.is_discarded() && j.is_object());
}

void CheckNormalize(const std::string& p) {
  if (p.empty() || p[0] != '/') return;
  const std::string n = NormalizeControlPath(p);
  FUZZ_CHECK(!n.empty() && n[0] == '/');
  FUZZ_CHECK(n.find("//") == std::string::npos);
  FUZZ_CHECK(n == "/" || n.back() != '/');
  FUZZ_CHECK(NormalizeControlPath(n) == n);
}

// A request naming a path: the path normalised as the contract says, and a
// ring request answered with the normalised path.
void CheckPath(const std::string& line, const std::string& reply) {
  const Json req = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) return;
  auto p = req.find("path");
  if (p == req.end() || !p->is_string()) return;
  const std::string path = p->get<std::string>();
  CheckNormalize(path);
  auto cmd = req.find("cmd");
  if (cmd == req.end() || *cmd != "ring" || path.empty() || path[0] != '/') return;
  const Json r = Json::parse(reply, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(r.contains("path") && r["path"] == NormalizeControlPath(path));
}

// The first byte of each seed is the mode byte (0xff: padded).
void MakeSeeds(fuzz::Seeds& s) {
  using namespace std::string_view_literals;
  s.Add("status", "\0{\"cmd\":\"status\"}\n"sv);
  s.Add("ring", "\0{\"cmd\":\"ring\",\"path\":\"/a//b/\"}\n"sv);
  s.Add("two_lines_crlf", "\0{\"cmd\":\"ring\",\"path\":\"/\"}\r\n\n{\"cmd\":\"status\"}\n"sv);
  s.Add("where", "\0{\"cmd\":\"where\",\"path\":\"/x\"}\n"sv);
  s.Add("bad", "\0[1,2]\n{\"cmd\":7}\nnot json\n{\"cmd\":\"nope\"}\n"sv);
  s.Add("too_long", "\xff{\"cmd\":\"status\"}\n"sv);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fuzz::MaybeWriteSeeds(*argc, *argv, MakeSeeds);
  StartServer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool pad = data[0] == 0xff;
  std::string out(reinterpret_cast<const char*>(data + 1), size - 1);

  // The lines the server must answer (control/server.cc's Serve):
  // complete lines, a trailing '\r' dropped, empty ones skipped; past
  // kMaxLine bytes without a newline it says so and closes.
  size_t expected = 0;
  bool too_long = false;
  {
    size_t start = 0;
    for (size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string line = out.substr(start, nl - start);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      ++expected;
      const std::string reply = HandleControlRequest(line, *g_server->view);
      CheckObject(reply);
      CheckPath(line, reply);
    }
    if (pad) {
      too_long = true;
    } else {
      too_long = out.size() - start > kMaxLine;
    }
  }
  if (pad) out.append(kMaxLine + 1024, 'x');

  const std::string in = Exchange(out);
  size_t replies = 0, start = 0;
  std::string last;
  for (size_t nl; (nl = in.find('\n', start)) != std::string::npos; start = nl + 1) {
    last = in.substr(start, nl - start);
    CheckObject(last);
    ++replies;
  }
  FUZZ_CHECK(start == in.size());  // every reply ends with its newline
  if (too_long) {
    FUZZ_CHECK(replies == expected + 1);
    FUZZ_CHECK(last.find("request line too long") != std::string::npos);
  } else {
    FUZZ_CHECK(replies == expected);
  }
  return 0;
}
