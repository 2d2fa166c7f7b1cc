// mount.fuse.fedfs: the mount helper, so that `mount -t fuse.fedfs CONFIG
// DIR` and an fstab line mount the global namespace:
//
//   /etc/fedfs/node1.yaml  /fedfs  fuse.fedfs  _netdev,x-systemd.requires=network-online.target  0 0
//
// mount(8) runs it as `mount.fuse.fedfs CONFIG DIR [-o OPTIONS] [-v] ...`
// (so does libfuse's mount.fuse, as `fedfs CONFIG DIR -o OPTIONS`, when no
// mount.fuse.fedfs is installed). It checks the config (DIR must be its
// mountpoint), starts fedfsd --config CONFIG --clear-stale-mount in the
// background (its own session; log in <state_dir>/fedfsd.log, pid in
// <state_dir>/fedfsd.pid) and returns once the daemon says READY over the
// notify protocol of systemd (fedfsd/service_notify.h), on a socket of the
// helper's own: exit 0 then, the namespace mounted and the node joined. If
// the daemon exits first, or is not ready within x-fedfs.timeout=SECONDS
// (default 120), its last log lines are printed and the exit is 32 (mount
// failure; the daemon is stopped). `umount DIR` stops the daemon cleanly.
//
// Options: the generic ones mount(8) and systemd keep for themselves
// (_netdev, nofail, noauto, auto, defaults, user(s), nouser, rw, x-*,
// comment=...) are accepted and ignored; x-fedfs.timeout is this helper's;
// anything else is refused (exit 1) rather than silently dropped. The
// fedfsd binary is FEDFSD from the environment, or the one installed with
// the helper.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fedfsd/config.h"

namespace {

namespace fs = std::filesystem;

constexpr int kExitUsage = 1;
constexpr int kExitFail = 32;  // mount(8): mount failure

[[noreturn]] void Die(int code, const std::string& msg) {
  std::fprintf(stderr, "mount.fuse.fedfs: %s\n", msg.c_str());
  std::exit(code);
}

bool Ignored(const std::string& o) {
  static const char* kGeneric[] = {"_netdev", "nofail", "noauto", "auto", "defaults", "user",
                                   "users", "nouser", "rw", "dev", "suid", "exec", "async"};
  for (const char* g : kGeneric) {
    if (o == g) return true;
  }
  return o.rfind("x-", 0) == 0 || o.rfind("comment=", 0) == 0;
}

std::string LastLines(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    lines.push_back(l);
    if (lines.size() > n) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += "  " + l + "\n";
  return out;
}

// FEDFSD, else bin/fedfsd beside this helper's sbin/ (any prefix), else the
// configured install path.
std::string FedfsdPath() {
  if (const char* e = std::getenv("FEDFSD"); e != nullptr && *e != 0) return e;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = self.parent_path().parent_path() / "bin" / "fedfsd";
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return FEDFS_INSTALLED_FEDFSD;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> positional, options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-o") {
      if (++i >= argc) Die(kExitUsage, "-o needs options");
      std::string all = argv[i];
      for (size_t at = 0; at <= all.size();) {
        const size_t comma = std::min(all.find(',', at), all.size());
        if (comma > at) options.push_back(all.substr(at, comma - at));
        at = comma + 1;
      }
    } else if (a == "-t") {
      ++i;  // the type: ours
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: mount.fuse.fedfs CONFIG MOUNTPOINT [-o OPTIONS]\n"
                  "  mounts the FedFS global namespace by starting fedfsd --config CONFIG;\n"
                  "  MOUNTPOINT must be the config's mountpoint. Options: x-fedfs.timeout=SECONDS\n"
                  "  (default 120); _netdev, nofail, noauto, defaults, x-* are ignored.\n");
      return 0;
    } else if (a.size() > 1 && a[0] == '-') {
      // -s, -f, -n, -v (mount(8)'s sloppy, fake, no-mtab, verbose): nothing to do.
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) Die(kExitUsage, "usage: mount.fuse.fedfs CONFIG MOUNTPOINT [-o OPTIONS]");
  int timeout_s = 120;
  for (const std::string& o : options) {
    if (o.rfind("x-fedfs.timeout=", 0) == 0) {
      timeout_s = std::atoi(o.c_str() + 16);
      if (timeout_s <= 0) Die(kExitUsage, "x-fedfs.timeout must be a number of seconds above 0");
    } else if (!Ignored(o)) {
      Die(kExitUsage, "option '" + o + "' is not supported (FedFS takes its settings from " +
                          positional[0] + ")");
    }
  }
  const std::string config = fs::absolute(positional[0]).string();
  auto opts = fedfs::daemon::LoadConfigFile(config);
  if (!opts) Die(kExitUsage, opts.error().context);
  std::error_code ec;
  const fs::path want = fs::weakly_canonical(opts->mountpoint, ec);
  const fs::path got = fs::weakly_canonical(positional[1], ec);
  if (want != got) {
    Die(kExitUsage, "mountpoint " + positional[1] + " is not the one " + config + " names (" +
                        opts->mountpoint + ")");
  }
  if (!opts->fuse.mount) Die(kExitUsage, config + " mounts nothing (fuse.mount: false)");

  fs::create_directories(opts->state_dir, ec);
  const std::string log = opts->state_dir + "/fedfsd.log";
  const std::string pidfile = opts->state_dir + "/fedfsd.pid";
  // The notify socket, in a directory of our own.
  char tmpl[] = "/tmp/fedfs-mount-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) Die(kExitFail, std::string("mkdtemp: ") + std::strerror(errno));
  const std::string dir = tmpl;
  const std::string sock_path = dir + "/notify";
  const int sock = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", sock_path.c_str());
  if (sock < 0 || ::bind(sock, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    Die(kExitFail, "notify socket " + sock_path + ": " + std::strerror(errno));
  }
  auto cleanup = [&] {
    ::close(sock);
    ::unlink(sock_path.c_str());
    ::rmdir(dir.c_str());
  };

  const std::string fedfsd = FedfsdPath();
  const pid_t pid = ::fork();
  if (pid < 0) Die(kExitFail, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setsid();
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0640);
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    ::setenv("NOTIFY_SOCKET", sock_path.c_str(), 1);
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
    ::execl(fedfsd.c_str(), "fedfsd", "--config", config.c_str(), "--clear-stale-mount",
            static_cast<char*>(nullptr));
    std::fprintf(stderr, "mount.fuse.fedfs: cannot run %s: %s\n", fedfsd.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  std::ofstream(pidfile) << pid << "\n";

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  timeval tv{0, 100'000};
  ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  for (;;) {
    char buf[4096];
    const ssize_t n = ::recv(sock, buf, sizeof buf - 1, 0);
    if (n > 0) {
      buf[n] = 0;
      if (std::strstr(buf, "READY=1") != nullptr) {
        cleanup();  // the daemon's later messages (STOPPING) go nowhere
        return 0;
      }
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      cleanup();
      ::unlink(pidfile.c_str());
      Die(kExitFail, "fedfsd exited before the namespace was mounted (" +
                         (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status))) +
                         "); the end of " + log + ":\n" + LastLines(log, 8));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
      cleanup();
      ::unlink(pidfile.c_str());
      Die(kExitFail, "fedfsd was not ready within " + std::to_string(timeout_s) +
                         " s (stopped); the end of " + log + ":\n" + LastLines(log, 8));
    }
  }
}
