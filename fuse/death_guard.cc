#include "fuse/death_guard.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fedfs::fuse {
namespace {

// ------------------------------------------------------------------ the child
// Everything below runs in the forked child and uses system calls only (the
// parent may have had other threads when it forked).

void Say(const char* a, const char* b = "", const char* c = "") {
  for (const char* s : {a, b, c}) {
    size_t n = std::strlen(s);
    while (n > 0) {
      const ssize_t w = ::write(STDERR_FILENO, s, n);
      if (w <= 0) return;
      s += w;
      n -= static_cast<size_t>(w);
    }
  }
}

void OnParentDeath(int) {}

// Writes "1" to fusectl's abort file of connection `id`; true if it did.
bool AbortConnection(const char* id) {
  char path[96] = "/sys/fs/fuse/connections/";
  std::strcat(path, id);
  std::strcat(path, "/abort");
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    // No such connection, or fusectl not mounted: mount it where only this
    // process sees it (fusectl is one instance, whatever mounts it) and look
    // again. Where a private namespace is refused (systemd's
    // RestrictNamespaces=), mount it for everyone, as many systems do at
    // boot (and as FuseMount::Unmount does when it must abort).
    if (::unshare(CLONE_NEWNS) == 0) ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
    if (::mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, nullptr) == 0) {
      fd = ::open(path, O_WRONLY | O_CLOEXEC);
    }
  }
  if (fd < 0) {
    // ENOENT: the connection ended with the process's descriptors.
    if (errno != ENOENT) Say("fedfsd: cannot abort FUSE connection ", id, ": cannot open fusectl\n");
    return false;
  }
  const bool ok = ::write(fd, "1", 1) == 1;
  ::close(fd);
  if (ok) {
    Say("fedfsd: the daemon's main thread died with FUSE connection ", id,
        " open; aborted it (its mount's callers get ENOTCONN)\n");
  }
  return ok;
}

[[noreturn]] void ChildMain(int rd, pid_t parent) {
  // Nothing of the parent is kept open but its socket: a descriptor held here
  // could keep a lock, a socket or the FUSE device alive.
  if (rd > 3) ::close_range(3, static_cast<unsigned>(rd) - 1, 0);
  ::close_range(static_cast<unsigned>(rd) + 1, ~0U, 0);
  if (::chdir("/") != 0) {
    // A cwd on a mount would only keep that mount busy; harmless if it stays.
  }
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
  struct sigaction sa {};
  sa.sa_handler = OnParentDeath;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR1, &sa, nullptr);
  sigset_t wait_mask;  // during ppoll: everything blocked but SIGUSR1
  sigfillset(&wait_mask);
  sigdelset(&wait_mask, SIGUSR1);

  char armed[16] = "";  // the connection id, "" when disarmed
  char line[32];
  size_t len = 0;
  // The owner thread waits in Start for this byte, so it is alive here; the
  // whole parent may have been killed meanwhile, though (then this process
  // has another parent already).
  bool dead = ::prctl(PR_SET_PDEATHSIG, SIGUSR1) != 0 || ::getppid() != parent;
  if (::send(rd, "r", 1, MSG_NOSIGNAL) != 1) dead = true;
  while (!dead) {
    struct pollfd p {rd, POLLIN, 0};
    const int rc = ::ppoll(&p, 1, nullptr, &wait_mask);
    if (rc < 0) {
      if (errno == EINTR) dead = true;  // SIGUSR1: the owner thread died
      continue;
    }
    char buf[64];
    const ssize_t n = ::read(rd, buf, sizeof buf);
    if (n <= 0) {
      // The write end closed without "q": every thread of the parent has gone
      // and with them its descriptors (and so the FUSE connection).
      if (n < 0 && errno == EINTR) continue;
      ::_exit(0);
    }
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        if (len + 1 < sizeof line) line[len++] = buf[i];
        continue;
      }
      line[len] = '\0';
      len = 0;
      if (line[0] == 'q') ::_exit(0);
      if (line[0] == 'd') armed[0] = '\0';
      if (line[0] == 'a' && std::strlen(line + 1) < sizeof armed) std::strcpy(armed, line + 1);
    }
  }
  if (armed[0] != '\0') AbortConnection(armed);
  ::_exit(0);
}

}  // namespace

// ----------------------------------------------------------------- the parent

Result<std::unique_ptr<DeathGuard>> DeathGuard::Start() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Err(errno, std::string("death guard: socketpair: ") + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return Err(e, std::string("death guard: fork: ") + std::strerror(e));
  }
  if (pid == 0) ChildMain(fds[0], parent);
  ::close(fds[0]);
  auto guard = std::unique_ptr<DeathGuard>(new DeathGuard(pid, fds[1]));
  // Until the child has asked for its signal, this thread's death would go
  // unnoticed: wait for its word.
  char ready = 0;
  ssize_t n;
  while ((n = ::recv(fds[1], &ready, 1, 0)) < 0 && errno == EINTR) {
  }
  if (n != 1 || ready != 'r') {
    return Err(ECHILD, "death guard: the guard process " + std::to_string(pid) + " did not start");
  }
  return guard;
}

DeathGuard::~DeathGuard() {
  Send("q").IgnoreError();  // a child already gone is reaped below all the same
  ::close(fd_);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

Status DeathGuard::Send(const std::string& line) {
  const std::string msg = line + "\n";
  const ssize_t w = ::send(fd_, msg.data(), msg.size(), MSG_NOSIGNAL);  // a few bytes: one piece
  if (w != static_cast<ssize_t>(msg.size())) {
    return Err(EPIPE, "death guard: the guard process " + std::to_string(pid_) + " is gone");
  }
  return Ok();
}

Status DeathGuard::Arm(const std::string& connection_id) {
  if (connection_id.empty() || connection_id.size() > 10 ||
      connection_id.find_first_not_of("0123456789") != std::string::npos) {
    return Err(EINVAL, "death guard: not a FUSE connection id: '" + connection_id + "'");
  }
  return Send("a" + connection_id);
}

Status DeathGuard::Disarm() { return Send("d"); }

}  // namespace fedfs::fuse
