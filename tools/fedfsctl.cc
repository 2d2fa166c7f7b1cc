// fedfsctl: talks to a running fedfsd through its control socket
// (fedfsd/control.h) and makes cluster keys.
//
//   fedfsctl [--socket PATH | --config FILE] status [--json]
//   fedfsctl [--socket PATH | --config FILE] ring PATH [--json]
//   fedfsctl [--socket PATH | --config FILE] where PATH [--json]
//   fedfsctl [--socket PATH | --config FILE] conflicts PATH [--json]
//   fedfsctl [--socket PATH | --config FILE] dt [--json]
//   fedfsctl keygen
//
// Without --socket/--config, the only socket in /run/fedfs is used.
// Exit codes: 0 ok, 1 the daemon cannot be reached or answered an error,
// 2 bad command line.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "fedfsd/config.h"
#include "m2m/auth.h"

namespace {

using Json = nlohmann::json;

struct Failure {
  std::string message;
};

std::string FindSocket(const std::string& socket, const std::string& config) {
  if (!socket.empty()) return socket;
  if (!config.empty()) {
    auto s = fedfs::daemon::ControlSocketFromConfigFile(config);
    if (!s) throw Failure{s.error().context};
    return *s;
  }
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/run/fedfs", ec)) {
    if (e.path().extension() == ".sock") found.push_back(e.path().string());
  }
  if (found.size() == 1) return found[0];
  if (found.empty()) {
    throw Failure{"no fedfsd control socket in /run/fedfs (is fedfsd running? else use --socket or --config)"};
  }
  throw Failure{"several fedfsd sockets in /run/fedfs; choose one with --socket or --config"};
}

Json Ask(const std::string& path, const Json& request) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Failure{std::string("socket: ") + std::strerror(errno)};
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) throw Failure{"control socket path too long: " + path};
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == ENOENT || e == ECONNREFUSED) {
      throw Failure{"fedfsd is not running (control socket " + path + ": " + std::strerror(e) + ")"};
    }
    throw Failure{"cannot connect to fedfsd at " + path + ": " + std::strerror(e)};
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string line = request.dump() + "\n";
  if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    ::close(fd);
    throw Failure{"cannot send to fedfsd at " + path + ": " + std::strerror(errno)};
  }
  std::string reply;
  char buf[4096];
  while (reply.find('\n') == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw Failure{"fedfsd at " + path + " closed the connection without an answer"};
    }
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  Json j = Json::parse(reply.substr(0, reply.find('\n')), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Failure{"fedfsd sent an answer that is not JSON"};
  if (j.contains("error")) throw Failure{"fedfsd: " + j["error"].get<std::string>()};
  return j;
}

std::string Fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

void PrintStatus(const Json& s) {
  size_t alive = 0;
  size_t w_id = 2, w_addr = 7;
  for (const auto& m : s["members"]) {
    if (m["state"] == "alive") ++alive;
    w_id = std::max(w_id, m["id"].get<std::string>().size() + 1);
    w_addr = std::max(w_addr, m["addr"].get<std::string>().size());
  }
  std::printf("node %s  epoch %llu  members %zu (%zu alive, %zu dead)\n",
              s["node_id"].get<std::string>().c_str(),
              static_cast<unsigned long long>(s["epoch"].get<uint64_t>()), s["members"].size(),
              alive, s["members"].size() - alive);
  std::printf("%-*s  %-*s  %-5s  %6s  %9s  %10s\n", static_cast<int>(w_id), "ID",
              static_cast<int>(w_addr), "ADDRESS", "STATE", "RING", "RTT", "LAST SEEN");
  for (const auto& m : s["members"]) {
    const bool self = m.value("self", false);
    const std::string id = m["id"].get<std::string>() + (self ? "*" : "");
    const int64_t rtt = m["rtt_us"].get<int64_t>();
    const int64_t ago = m["last_heard_ms_ago"].get<int64_t>();
    const std::string rtt_s = self ? "-" : rtt < 0 ? "?" : (rtt < 10000 ? std::to_string(rtt) + "us" : Fixed(rtt / 1000.0, 1) + "ms");
    const std::string ago_s = self ? "-" : (ago < 10000 ? std::to_string(ago) + "ms" : Fixed(ago / 1000.0, 1) + "s") + " ago";
    std::printf("%-*s  %-*s  %-5s  %5s%%  %9s  %10s\n", static_cast<int>(w_id), id.c_str(),
                static_cast<int>(w_addr), m["addr"].get<std::string>().c_str(),
                m["state"].get<std::string>().c_str(),
                Fixed(100.0 * m["ring_share"].get<double>(), 1).c_str(), rtt_s.c_str(),
                ago_s.c_str());
  }
  std::printf("(* this node; RING = share of the hash ring it manages)\n");
}

// The human form of the "dt" answer (docs/namespace.md, "Directory table").
void PrintDt(const Json& r) {
  auto u = [&](const Json& o, const char* k) {
    return static_cast<unsigned long long>(o.value(k, uint64_t{0}));
  };
  const Json& t = r["table"];
  std::printf("directory table of %s\n", r.value("node", std::string("?")).c_str());
  if (t.is_null()) {
    std::printf("  disabled (directory_table.entries: 0): every lookup asks the manager\n");
  } else {
    std::printf("  capacity      %llu entries, %llu bytes\n", u(t, "capacity"), u(t, "max_bytes"));
    std::printf("  occupancy     %llu entries, %llu bytes\n", u(t, "occupancy"), u(t, "bytes"));
    std::printf("  hits          %llu\n", u(t, "hits"));
    std::printf("  misses        %llu (%llu stale, %llu evictions)\n", u(t, "misses"),
                u(t, "stale"), u(t, "evictions"));
    std::printf("  invalidations received %llu one-sided, %llu broadcast; own changes patched %llu\n",
                u(t, "bumps_received"), u(r, "dt_invals_received"), u(t, "patches"));
  }
  std::printf("  lookups %llu, requests to managers %llu, messages per lookup %.4f\n",
              u(r, "lookups"), u(r, "gets_sent"), r.value("messages_per_lookup", 0.0));
  std::printf("as a manager: %llu sharer records, invalidations sent %llu (failed %llu), "
              "broadcasts %llu, changes %llu\n",
              u(r, "sharer_records"), u(r, "invalidations_sent"), u(r, "invalidations_failed"),
              u(r, "broadcasts_sent"), u(r, "changes_invalidated"));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedfsctl: inspect a running fedfsd"};
  app.require_subcommand(1);
  std::string socket, config;
  auto* sock_opt = app.add_option("-s,--socket", socket, "the daemon's control socket");
  app.add_option("-c,--config", config, "the daemon's config file (finds its control socket)")
      ->excludes(sock_opt);
  bool json = false;
  auto* status = app.add_subcommand("status", "members, states, epoch, ring shares, RTTs");
  status->add_flag("--json", json, "machine-readable output");
  auto* ring = app.add_subcommand("ring", "which node manages PATH");
  std::string path;
  ring->add_option("path", path, "a global path, e.g. /a/b")->required();
  ring->add_flag("--json", json, "machine-readable output");
  auto* where = app.add_subcommand("where", "which node(s) hold PATH (a file's node, a directory's nodes)");
  where->add_option("path", path, "a global path, e.g. /a/b")->required();
  where->add_flag("--json", json, "machine-readable output");
  auto* conflicts = app.add_subcommand("conflicts", "name conflicts in directory PATH");
  conflicts->add_option("path", path, "a global directory path, e.g. /a")->required();
  conflicts->add_flag("--json", json, "machine-readable output");
  auto* dt = app.add_subcommand(
      "dt", "directory table: capacity, occupancy, hits, misses, invalidations, messages per lookup");
  dt->add_flag("--json", json, "machine-readable output");
  auto* files = app.add_subcommand(
      "files", "file service: other nodes' sessions and open handles, requests, change callbacks");
  files->add_flag("--json", json, "machine-readable output");
  app.add_subcommand("keygen", "print a new cluster key (store it mode 0600)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (app.got_subcommand("keygen")) {
      std::printf("%s\n", fedfs::m2m::GenerateClusterKeyHex().c_str());
      return 0;
    }
    const std::string sock = FindSocket(socket, config);
    if (app.got_subcommand(status)) {
      const Json s = Ask(sock, {{"cmd", "status"}});
      if (json) {
        std::printf("%s\n", s.dump(2).c_str());
      } else {
        PrintStatus(s);
      }
    } else if (app.got_subcommand(where)) {
      const Json r = Ask(sock, {{"cmd", "where"}, {"path", path}});
      if (json) {
        std::printf("%s\n", r.dump(2).c_str());
      } else {
        std::string holders;
        for (const auto& h : r["holders"]) holders += (holders.empty() ? "" : " ") + h.get<std::string>();
        std::printf("%s is held by %s\n", r["path"].get<std::string>().c_str(), holders.c_str());
      }
    } else if (app.got_subcommand(dt)) {
      const Json r = Ask(sock, {{"cmd", "dt"}});
      if (json) {
        std::printf("%s\n", r.dump(2).c_str());
      } else {
        PrintDt(r);
      }
    } else if (app.got_subcommand(files)) {
      const Json r = Ask(sock, {{"cmd", "files"}});
      if (json) {
        std::printf("%s\n", r.dump(2).c_str());
      } else {
        auto u = [&](const char* k) { return static_cast<unsigned long long>(r.value(k, uint64_t{0})); };
        std::printf("file service of %s\n", r.value("node", std::string("?")).c_str());
        std::printf("  sessions %llu, open handles %llu, watched files %llu\n", u("sessions"),
                    u("handles"), u("watches"));
        std::printf("  requests served %llu, refused %llu\n", u("served"), u("refused"));
        std::printf("  change callbacks sent %llu (failed %llu)\n", u("callbacks_sent"),
                    u("callbacks_failed"));
        std::printf("files open elsewhere: change callbacks received %llu (refused %llu)\n",
                    u("callbacks_received"), u("callbacks_refused"));
      }
    } else if (app.got_subcommand(conflicts)) {
      const Json r = Ask(sock, {{"cmd", "conflicts"}, {"path", path}});
      if (json) {
        std::printf("%s\n", r.dump(2).c_str());
      } else if (r["conflicts"].empty()) {
        std::printf("no conflicts in %s\n", r["path"].get<std::string>().c_str());
      } else {
        for (const auto& c : r["conflicts"]) {
          std::string copies;
          for (const auto& k : c["copies"]) {
            copies += (copies.empty() ? "" : ", ") + k["type"].get<std::string>() + " on " +
                      k["node"].get<std::string>();
          }
          std::printf("%s: %s\n", c["name"].get<std::string>().c_str(), copies.c_str());
        }
      }
    } else {
      const Json r = Ask(sock, {{"cmd", "ring"}, {"path", path}});
      if (json) {
        std::printf("%s\n", r.dump(2).c_str());
      } else {
        std::printf("%s is managed by %s (epoch %llu)\n", r["path"].get<std::string>().c_str(),
                    r["manager"].get<std::string>().c_str(),
                    static_cast<unsigned long long>(r["epoch"].get<uint64_t>()));
      }
    }
  } catch (const Failure& f) {
    std::fprintf(stderr, "fedfsctl: %s\n", f.message.c_str());
    return 1;
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "fedfsctl: unexpected answer from fedfsd: %s\n", e.what());
    return 1;
  }
  return 0;
}
