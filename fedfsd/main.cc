// fedfsd: the FedFS daemon. `fedfsd --config FILE` runs in the foreground and
// logs to stderr (systemd-friendly: Type=simple, journald collects stderr).
// SIGTERM/SIGINT stop it cleanly (exit 0). Exit codes: 2 for a bad command
// line or config, 1 when starting fails (port in use, transport, socket).
// `fedfsd --config FILE --check-config` checks and starts nothing
// (docs/config.md).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/logging.h"
#include "control/server.h"
#include "fedfsd/config.h"
#include "fedfsd/daemon.h"
#include "fedfsd/local_daemons.h"

namespace {

constexpr int kExitConfig = 2;
constexpr int kExitStart = 1;

int Run(const std::string& config_path) {
  using namespace fedfs::daemon;
  auto opts = LoadConfigFile(config_path);
  if (!opts) {
    std::fprintf(stderr, "fedfsd: %s\n", opts.error().context.c_str());
    return kExitConfig;
  }
  // Before anything logs: a control socket or a port in use, or a stale
  // mount, must give exactly one line. (Probes only: nothing is taken yet.)
  for (const fedfs::Status& s : {fedfs::control::CheckControlSocketFree(opts->control_socket),
                                 CheckListenAddressFree(opts->listen), CheckMountpointUsable(*opts)}) {
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
  auto daemon = Daemon::Start(*opts);
  if (!daemon) {
    std::fprintf(stderr, "fedfsd: %s\n", daemon.error().context.c_str());
    return kExitStart;
  }
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  log->info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*daemon)->Stop();
  daemon->reset();
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
    const DaemonOptions& o = *check.options;
    std::vector<fedfs::Status> probes = {fedfs::control::CheckControlSocketFree(o.control_socket),
                                         CheckListenAddressFree(o.listen),
                                         CheckMountpointUsable(o)};
    if (!o.metrics.listen.empty() && !o.metrics.listen.ends_with(":0")) {
      fedfs::Status m = CheckListenAddressFree(o.metrics.listen);
      if (!m) m = fedfs::Err(m.error().code, "metrics.listen: " + m.error().context);
      probes.push_back(m);
    }
    for (const fedfs::Status& s : probes) {
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
  app.add_flag("--check-config", check,
               "check the config (and that its ports, control socket and mountpoint are free "
               "now), print one line per problem, exit 2 if any; start nothing");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitConfig;
  }
  return check ? CheckConfig(config) : Run(config);
}
