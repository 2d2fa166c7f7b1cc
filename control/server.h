// The control socket's server: the daemon's end of the control protocol
// (control/schema.h), answering each request line with a Dispatcher
// (control/dispatcher.h).
//
// The socket is a unix stream socket created mode 0600 (its parent directory
// 0700 if it has to be created), so only root (the daemon's user) may talk
// to it. Whatever arrives on it is untrusted: a line longer than 64 KiB is
// answered {"error":"request line too long"} and the client dropped; every
// other line is answered by the dispatcher, {"error":...} for anything
// malformed; nothing a client sends crashes the daemon.
//
// Threads: ControlServer owns one thread that accepts connections and one
// thread per connection that serves it (a client idle for 5 s is dropped),
// at most kMaxClients at once: a long request (a migrate, a rebalance) does
// not hold up another client's status or its cancel. A connection past the
// bound waits in the socket's backlog until one ends. The dispatcher's
// handlers run on the connections' threads, concurrently.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "control/dispatcher.h"

namespace fedfs::control {

struct ControlOptions {
  // Unix stream socket path; mode 0600, parent directory created 0700.
  std::string socket_path;
};

// OK when a daemon may take the control socket at `path`: nothing is there,
// or a stale socket nobody answers on. EADDRINUSE when a live daemon
// answers on it, EEXIST when it is not a socket. Probes only.
Status CheckControlSocketFree(const std::string& path);

class ControlServer {
 public:
  static constexpr size_t kMaxClients = 8;

  // `dispatcher`: every handler registered already.
  ControlServer(ControlOptions options, Dispatcher dispatcher);
  ~ControlServer();  // Stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Creates the socket (replacing a stale one; EADDRINUSE if another live
  // daemon answers on it) and starts the thread. On failure nothing is left
  // behind.
  Status Start();

  // Stops accepting, waits for the requests being served (a handler that
  // blocks is waited for), closes and removes the socket. Idempotent.
  void Stop();

 private:
  struct Client {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void Run();
  void Serve(int fd);

  const ControlOptions options_;
  const Dispatcher dispatcher_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: wakes the thread to stop
  int done_fd_ = -1;  // eventfd: a client's thread ended (Run joins it)
  std::thread thread_;
  std::vector<Client> clients_;  // the Run thread's only
};

}  // namespace fedfs::control
