// The control socket: how fedfsctl (and scripts) ask a running fedfsd about
// its state (docs/membership.md, "Control socket").
//
// Protocol: a unix stream socket; each request is one JSON object on one
// line, answered by one JSON object on one line:
//   {"cmd":"status"}         -> {"node_id","epoch","members":[{"id","addr",
//                                "state","incarnation","ring_share","rtt_us",
//                                "last_heard_ms_ago","self"}]}
//   {"cmd":"ring","path":P}  -> {"path","manager","epoch"}
//   {"cmd":"where","path":P} -> {"path","holders":[node ids]}      (daemon.cc)
//   {"cmd":"conflicts","path":P} -> {"path","conflicts":[{"name",
//                                "copies":[{"node","type"}]}]}      (daemon.cc)
//   anything else            -> {"error":"..."}
// The socket is created mode 0600 (its parent directory 0700 if it has to be
// created), so only root (the daemon's user) may talk to it.
//
// Threads: ControlServer owns one thread that accepts and serves connections
// one at a time (a client idle for 5 s is dropped). The view provider is
// called on that thread. nlohmann/json stays inside control.cc.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/result.h"
#include "cluster/membership.h"
#include "fedfsd/options.h"

namespace fedfs::daemon {

using ViewProvider = std::function<std::shared_ptr<const MembershipView>()>;
// Answers the request lines it knows (one JSON line) and returns nullopt for
// the others, which go to HandleControlRequest. Called on the server thread.
using ExtraHandler = std::function<std::optional<std::string>(const std::string& line)>;

// OK when a daemon may take the control socket at `path`: nothing is there,
// or a stale socket nobody answers on. EADDRINUSE when a live daemon
// answers on it, EEXIST when it is not a socket. Probes only.
Status CheckControlSocketFree(const std::string& path);

// The path of a request as every command uses it: each run of '/' made one,
// a trailing '/' dropped ("/a//b/" -> "/a/b"; "/" stays "/"). The caller
// checked that it starts with '/'. Pure; any thread.
std::string NormalizeControlPath(const std::string& p);

// Answers one request line (without its newline) from `view`: untrusted
// bytes (any user able to open the socket), answered with one JSON object,
// {"error": ...} for anything malformed; never throws or crashes. Pure; any
// thread.
std::string HandleControlRequest(const std::string& line, const MembershipView& view);

class ControlServer {
 public:
  ControlServer(ControlOptions options, ViewProvider provider, ExtraHandler extra = nullptr);
  ~ControlServer();  // Stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Creates the socket (replacing a stale one; EADDRINUSE if another live
  // daemon answers on it) and starts the thread. On failure nothing is left
  // behind.
  Status Start();

  // Stops the thread, closes and removes the socket. Idempotent.
  void Stop();

 private:
  void Run();
  void Serve(int fd);

  const ControlOptions options_;
  const ViewProvider provider_;
  const ExtraHandler extra_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: wakes the thread to stop
  std::thread thread_;
};

}  // namespace fedfs::daemon
