#include "tests/posix/mount_target.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace fedfs::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr long kFuseSuperMagic = 0x65735546;

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Waits for pid up to `timeout`; its exit code, or -2 if still running.
int WaitPid(pid_t pid, std::chrono::milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return ExitCode(status);
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= end) return -2;
    std::this_thread::sleep_for(10ms);
  }
}

[[noreturn]] void ExecOrDie(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
  ::_exit(127);
}

class NativeTarget : public MountTarget {
 public:
  NativeTarget() : dir_(MakeTempDir("fedfs-native")) {}
  ~NativeTarget() override { RemoveTree(dir_); }
  std::string name() const override { return "native"; }
  size_t view_count() const override { return 1; }
  std::string view(size_t) const override { return dir_; }
  bool is_mount() const override { return false; }

 private:
  std::string dir_;
};

class PassthroughLlTarget : public MountTarget {
 public:
  bool Init(std::string* why) {
#ifdef FEDFS_PASSTHROUGH_LL_PATH
    const std::string bin = FEDFS_PASSTHROUGH_LL_PATH;
#else
    const std::string bin;
#endif
    if (bin.empty() || ::access(bin.c_str(), X_OK) != 0) {
      *why = "passthrough_ll was not built (no /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c)";
      return false;
    }
    base_ = MakeTempDir("fedfs-ptll");
    source_ = base_ + "/source";
    mnt_ = base_ + "/mnt";
    if (::mkdir(source_.c_str(), 0755) != 0 || ::mkdir(mnt_.c_str(), 0755) != 0 ||
        ::chmod(source_.c_str(), 0755) != 0) {
      *why = "mkdir under " + base_ + ": " + std::strerror(errno);
      return false;
    }
    // timeout=0 / cache=never would hide caching bugs of the reference, not
    // ours; the defaults (cache=auto, 1 s timeouts) are what users run.
    return server_.Start({bin, "-f", "-o",
                          "source=" + source_ + ",allow_other,default_permissions,xattr,fsname=ptll",
                          mnt_},
                         mnt_, base_ + "/passthrough_ll.log", why);
  }
  ~PassthroughLlTarget() override {
    server_.Stop();
    if (!base_.empty()) RemoveTree(base_);
  }
  std::string name() const override { return "passthrough_ll"; }
  size_t view_count() const override { return 1; }
  std::string view(size_t) const override { return mnt_; }
  bool Has(Quirk q) const override {
    // passthrough_ll creates as root (no setfsuid), opens the backing file
    // with the caller's flags (O_DIRECT included), and answers EOPNOTSUPP
    // to any fallocate mode but 0 and EINVAL to any renameat2 flag; it
    // writes as root.
    return q == Quirk::kCreatesAsServerUser || q == Quirk::kODirectPassthrough ||
           q == Quirk::kFallocateModeZeroOnly || q == Quirk::kNoRenameFlags ||
           q == Quirk::kWritesAsServerUser;
  }

 private:
  std::string base_, source_, mnt_;
  FuseServer server_;
};

}  // namespace

ProcResult Run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
               const std::string& cwd) {
  ProcResult res;
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return res;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) {
      std::fprintf(stderr, "chdir %s: %s\n", cwd.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    ExecOrDie(argv);
  }
  ::close(out[1]);
  if (pid < 0) {
    ::close(out[0]);
    return res;
  }
  const auto end = Clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      res.timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    res.output.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  res.exit_code = res.timed_out ? -1 : ExitCode(status);
  return res;
}

ProcResult Sh(const std::string& script, std::chrono::milliseconds timeout) {
  return Run({"/bin/sh", "-c", script}, timeout);
}

std::string ShQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

std::string MakeTempDir(const std::string& prefix) {
  const char* env = std::getenv("FEDFS_TEST_TMPDIR");
  std::string tmpl = std::string(env && *env ? env : "/var/tmp") + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr || ::chmod(tmpl.c_str(), 0755) != 0) {
    throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
  }
  return tmpl;
}

bool RemoveContents(int dirfd) {
  const int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return false;
  }
  std::vector<std::pair<std::string, bool>> entries;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      is_dir = ::fstatat(fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    entries.emplace_back(n, is_dir);
  }
  bool ok = true;
  for (const auto& [n, is_dir] : entries) {
    if (is_dir) {
      const int sub = ::openat(fd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        ok = RemoveContents(sub) && ok;
        ::close(sub);
      }
      ok = ::unlinkat(fd, n.c_str(), AT_REMOVEDIR) == 0 && ok;
    } else {
      ok = ::unlinkat(fd, n.c_str(), 0) == 0 && ok;
    }
  }
  ::closedir(d);
  return ok;
}

bool RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  if (!S_ISDIR(st.st_mode)) return ::unlink(path.c_str()) == 0;
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  RemoveContents(fd);
  ::close(fd);
  return ::rmdir(path.c_str()) == 0;
}

bool IsFuseMount(const std::string& path) {
  struct statfs s;
  return ::statfs(path.c_str(), &s) == 0 && s.f_type == kFuseSuperMagic;
}

bool HaveProgram(const std::string& program) {
  return Sh("command -v " + ShQuote(program) + " >/dev/null 2>&1", 10s).exit_code == 0;
}

FuseServer::~FuseServer() { Stop(); }

bool FuseServer::Start(const std::vector<std::string>& argv, const std::string& mountpoint,
                       const std::string& log_path, std::string* why,
                       std::chrono::milliseconds timeout) {
  mountpoint_ = mountpoint;
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) {
    *why = "open " + log_path + ": " + std::strerror(errno);
    return false;
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    // A crashed test must not leave the server (and its mount) behind.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ExecOrDie(argv);
  }
  ::close(log);
  if (pid_ < 0) {
    *why = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  const auto end = Clock::now() + timeout;
  while (!IsFuseMount(mountpoint)) {
    const int rc = WaitPid(pid_, 0ms);
    if (rc != -2) {
      pid_ = -1;
      *why = argv[0] + " exited (" + std::to_string(rc) + ") before mounting; log " + log_path;
      return false;
    }
    if (Clock::now() >= end) {
      Stop();
      *why = mountpoint + " did not become a FUSE mount; log " + log_path;
      return false;
    }
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

int FuseServer::Stop() {
  if (pid_ <= 0) return -1;
  if (IsFuseMount(mountpoint_) && ::umount2(mountpoint_.c_str(), 0) != 0) {
    ::umount2(mountpoint_.c_str(), MNT_DETACH);
  }
  int rc = WaitPid(pid_, 5s);
  if (rc == -2) {
    ::kill(pid_, SIGTERM);
    rc = WaitPid(pid_, 5s);
  }
  if (rc == -2) {
    ::kill(pid_, SIGKILL);
    rc = WaitPid(pid_, 60s);
  }
  pid_ = -1;
  return rc;
}

std::unique_ptr<MountTarget> MakeNativeTarget() { return std::make_unique<NativeTarget>(); }

std::unique_ptr<MountTarget> MakePassthroughLlTarget(std::string* why) {
  auto t = std::make_unique<PassthroughLlTarget>();
  if (!t->Init(why)) return nullptr;
  return t;
}

}  // namespace fedfs::testing
