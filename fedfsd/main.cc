// fedfsd: the FedFS daemon. `fedfsd --config FILE` runs in the foreground and
// logs to stderr (journald collects it); under systemd with Type=notify it
// says READY once mounted and joined (fedfsd/service_notify.h).
// SIGTERM/SIGINT stop it cleanly (exit 0). Exit codes: 2 for a bad command
// line or config, 1 when starting fails (port in use, transport, socket).
// `fedfsd --config FILE --check-config` checks and starts nothing
// (docs/config.md).
#include <signal.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/logging.h"
#include "control/server.h"
#include "fedfsd/config.h"
#include "fedfsd/daemon.h"
#include "fedfsd/local_daemons.h"
#include "fedfsd/service_notify.h"
#include "fuse/death_guard.h"

namespace {

constexpr int kExitConfig = 2;
constexpr int kExitStart = 1;

// The metrics address is probed too, unless it asks for a free port.
fedfs::Status CheckMetricsAddressFree(const fedfs::daemon::DaemonOptions& o) {
  if (o.metrics.listen.empty() || o.metrics.listen.ends_with(":0")) return fedfs::Ok();
  fedfs::Status m = fedfs::daemon::CheckListenAddressFree(o.metrics.listen);
  if (!m) return fedfs::Err(m.error().code, "metrics.listen: " + m.error().context);
  return m;
}

// What starting with `o` now would meet, in the order Run checks it: the
// control socket, the listen and metrics addresses, the mountpoint.
// (Probes only: nothing is taken.)
std::vector<fedfs::Status> StartProbes(const fedfs::daemon::DaemonOptions& o) {
  return {fedfs::control::CheckControlSocketFree(o.control_socket),
          fedfs::daemon::CheckListenAddressFree(o.listen), CheckMetricsAddressFree(o),
          fedfs::daemon::CheckMountpointUsable(o)};
}

// Once the mount is up, the node has joined when another member is alive;
// with seeds that do not answer it runs alone after trying each once.
void WaitJoined(const fedfs::daemon::Daemon& d, const fedfs::daemon::DaemonOptions& o) {
  if (o.peers.empty()) return;
  const auto deadline = std::chrono::steady_clock::now() +
                        o.timeouts.connect * static_cast<int>(o.peers.size()) +
                        o.timeouts.failure_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto v = d.Snapshot();
    for (const auto& [id, m] : v->members) {
      if (id != v->self_id && m.state == fedfs::daemon::MemberState::kAlive) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

size_t AliveCount(const fedfs::daemon::Daemon& d) {
  size_t n = 0;
  // Held here: a range over a member of the temporary would outlive it.
  const auto view = d.Snapshot();
  for (const auto& [id, m] : view->members) {
    n += m.state == fedfs::daemon::MemberState::kAlive ? 1 : 0;
  }
  return n;
}

int Run(const std::string& config_path, bool clear_stale_mount) {
  using namespace fedfs::daemon;
  auto opts = LoadConfigFile(config_path);
  if (!opts) {
    std::fprintf(stderr, "fedfsd: %s\n", opts.error().context.c_str());
    return kExitConfig;
  }
  if (clear_stale_mount) {
    bool cleared = false;
    if (fedfs::Status s = ClearStaleMountpoint(*opts, &cleared); !s) {
      std::fprintf(stderr, "fedfsd: %s\n", s.error().context.c_str());
      return kExitStart;
    }
    if (cleared) {
      std::fprintf(stderr, "fedfsd: cleared the stale FedFS mount at %s\n", opts->mountpoint.c_str());
    }
  }
  // Before anything logs: a control socket or a port in use, or a stale
  // mount, must give exactly one line.
  for (const fedfs::Status& s : StartProbes(*opts)) {
    if (!s) {
      std::fprintf(stderr, "fedfsd: %s\n", s.error().context.c_str());
      return kExitStart;
    }
  }

  // Paths apart from every other daemon's on this machine (FEDFS_RUN_DIR:
  // where they register, default /run/fedfs; docs/config.md).
  const char* run_dir = std::getenv("FEDFS_RUN_DIR");
  auto registered = LocalDaemons::Register(*opts, run_dir != nullptr && *run_dir != 0 ? run_dir
                                                                                   : "/run/fedfs");
  if (!registered) {
    std::fprintf(stderr, "fedfsd: %s\n", registered.error().context.c_str());
    return kExitStart;
  }

  // Signals are taken synchronously by this thread; every thread started
  // below inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  fedfs::InitLogging(opts->node_id, opts->log_level);
  auto log = fedfs::Logger("daemon");
  ServiceNotifier service;
  service.Status("starting");
  // A child of this thread that aborts the mount's FUSE connection if this
  // thread dies with it open (SIGKILL while another thread waits on the
  // mount in the kernel would otherwise leave the mount hung; fuse/
  // death_guard.h). Forked before the daemon's threads exist.
  std::unique_ptr<fedfs::fuse::DeathGuard> guard;
  auto unguarded = [&](const fedfs::Error& e) {
    log->warn("{}; a killed daemon's mount may stay hung until its connection is aborted", e.context);
  };
  if (opts->fuse.mount) {
    if (auto g = fedfs::fuse::DeathGuard::Start(); g) {
      guard = std::move(*g);
    } else {
      unguarded(g.error());
    }
  }
  auto daemon = Daemon::Start(*opts);
  if (!daemon) {
    std::fprintf(stderr, "fedfsd: %s\n", daemon.error().context.c_str());
    return kExitStart;
  }
  if (guard) {
    if (fedfs::Status s = guard->Arm((*daemon)->FuseConnection()); !s) unguarded(s.error());
  }
  // READY for systemd (Type=notify) once mounted and joined.
  WaitJoined(**daemon, *opts);
  const size_t alive = AliveCount(**daemon);
  service.Ready("node " + opts->node_id + (opts->fuse.mount ? " mounted at " + opts->mountpoint : "") +
                "; " + std::to_string(alive) + " member(s) alive");
  log->info("ready: {} member(s) alive", alive);
  service.StartWatchdog([mp = opts->fuse.mount ? opts->mountpoint : std::string()] {
    struct statfs st {};
    return mp.empty() || ::statfs(mp.c_str(), &st) == 0;  // a request to this daemon
  });
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  log->info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  service.Stopping();
  (*daemon)->Stop();
  daemon->reset();
  guard.reset();  // the mount is gone: the guard exits without aborting
  log->info("stopped");
  return 0;
}

// fedfsd --check-config: every problem of the config, and of starting with
// it now, one line each on stderr; exit 0 (and one line on stdout) when none.
int CheckConfig(const std::string& config_path) {
  using namespace fedfs::daemon;
  ConfigCheck check = CheckConfigFile(config_path);
  std::vector<std::string> problems = std::move(check.problems);
  if (check.options) {
    for (const fedfs::Status& s : StartProbes(*check.options)) {
      if (!s) problems.push_back(s.error().context);
    }
  }
  for (const std::string& p : problems) std::fprintf(stderr, "fedfsd: %s\n", p.c_str());
  if (!problems.empty()) return kExitConfig;
  const DaemonOptions& o = *check.options;
  std::printf("config %s: ok (node %s, listen %s, export %s, mount %s)\n", config_path.c_str(),
              o.node_id.c_str(), o.listen.c_str(), o.export_root.c_str(),
              o.fuse.mount ? o.mountpoint.c_str() : "none");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedfsd: the FedFS daemon (runs in the foreground, logs to stderr)"};
  std::string config;
  app.add_option("-c,--config", config, "YAML configuration file (docs/config.md)")->required();
  bool check = false;
  bool clear_stale = false;
  app.add_flag("--clear-stale-mount", clear_stale,
               "detach a stale FedFS mount at the mountpoint (left by a killed fedfsd) before "
               "starting (what the systemd unit does)");
  app.add_flag("--check-config", check,
               "check the config (and that its ports, control socket and mountpoint are free "
               "now), print one line per problem, exit 2 if any; start nothing");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitConfig;
  }
  return check ? CheckConfig(config) : Run(config, clear_stale);
}
