#include "tests/tools/cluster.h"

#include <dirent.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <set>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "m2m/auth.h"

namespace fedfs::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Where fusectl is mounted (if it is).
constexpr const char* kFusectl = "/sys/fs/fuse/connections";

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// waitpid with a deadline; returns the exit code or -2 if still running.
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

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  CommandResult res;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return res;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return res;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ExecOrDie(argv);
  }
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    return res;
  }
  const auto end = Clock::now() + timeout;
  bool out_open = true, err_open = true, killed = false;
  char buf[4096];
  while (out_open || err_open) {
    pollfd fds[2] = {{out_open ? out[0] : -1, POLLIN, 0}, {err_open ? err[0] : -1, POLLIN, 0}};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        (i == 0 ? out_open : err_open) = false;
      } else {
        (i == 0 ? res.out : res.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  res.exit_code = killed ? -1 : ExitCode(status);
  return res;
}

// A port nobody has bound now, below the kernel's ephemeral range: a port the
// kernel handed out for bind(0) can be taken by any outgoing connection (UCX
// opens many) between this call and the daemon's bind, so tests would flake
// with "address already in use".
uint16_t FreePort() {
  unsigned lo = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo;
  const unsigned first = 10000;
  const unsigned span = lo > first + 1000 ? lo - first : 20000;
  static std::mutex mu;
  static std::set<uint16_t> handed_out;  // never the same port twice in one process
  const std::lock_guard lock(mu);
  static std::mt19937 rng(static_cast<unsigned>(::getpid()) ^
                          static_cast<unsigned>(Clock::now().time_since_epoch().count()));
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto port = static_cast<uint16_t>(first + rng() % span);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(std::string("FreePort: ") + std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok && handed_out.insert(port).second) return port;
  }
  throw std::runtime_error("FreePort: no free port below the ephemeral range");
}

std::set<std::string> ListNames(const std::string& dir) {
  std::set<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return {"<errno " + std::to_string(errno) + ">"};
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.insert(n);
  }
  ::closedir(d);
  return out;
}

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double MetricSample(const std::string& text, const std::string& series) {
  const std::string key = "\n" + series + " ";
  const auto at = ("\n" + text).find(key);
  if (at == std::string::npos) return -1;
  const auto start = at + key.size() - 1;  // in text (one char shorter)
  return std::stod(text.substr(start, text.find('\n', start) - start));
}

std::string DescribeExit(int code) {
  if (code > 128) {
    return "killed by signal " + std::to_string(code - 128) + " (" + ::strsignal(code - 128) + ")";
  }
  return "exit status " + std::to_string(code);
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(50ms);
  }
}

Cluster::Cluster() : fusectl_was_mounted_(IsMounted(kFusectl)) {
  // Under TMPDIR (scripts/test.sh gives each run its own), else /tmp.
  std::string tmpl = (std::filesystem::temp_directory_path() / "fedfs-it-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
  dir_ = tmpl;
  key_file_ = NewKeyFile("cluster.key");
}

ScopedEnv::ScopedEnv(const char* name, const std::string& value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  ::setenv(name, value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() {
  if (old_) {
    ::setenv(name_, old_->c_str(), 1);
  } else {
    ::unsetenv(name_);
  }
}

bool IsMounted(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string id, parent, dev, root, mnt;
    ss >> id >> parent >> dev >> root >> mnt;
    if (mnt == path) return true;
  }
  return false;
}

std::string UnmountOrDetach(const std::string& dir) {
  if (::umount2(dir.c_str(), 0) == 0) return "";
  if (errno == EBUSY && ::umount2(dir.c_str(), MNT_DETACH) == 0) return "";
  return std::strerror(errno);
}

bool Cluster::ClearMount(const std::string& mountpoint) {
  if (!IsMounted(mountpoint)) return true;
  RunCommand({"fusermount3", "-u", "-z", mountpoint}, kNoHang);
  return !IsMounted(mountpoint);
}

Cluster::~Cluster() {
  std::vector<std::string> names;
  for (const auto& [name, pid] : nodes_) names.push_back(name);
  std::erase_if(names, [this](const std::string& n) { return ReapIfExited(n); });
  for (const auto& [n, rc] : exited_) {
    ADD_FAILURE() << "fedfsd " << n << " exited on its own (" << DescribeExit(rc)
                  << ") while the test ran; log:\n" << Log(n);
  }
  for (const auto& n : names) ::kill(nodes_.at(n), SIGTERM);
  for (const auto& n : names) {
    // A clean shutdown exits 0; anything else (a crash, a sanitizer report,
    // a hang that needed SIGKILL) fails the test that owns the cluster.
    if (const int rc = Stop(n, SIGTERM); rc != 0) {
      ADD_FAILURE() << "fedfsd " << n << " exited with " << rc << " on SIGTERM; log:\n" << Log(n);
    }
  }
  // Never leave a mount behind (and never let remove_all walk into one).
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    if (e.path().string().ends_with("-mnt") && !ClearMount(e.path().string())) {
      ADD_FAILURE() << "cannot unmount " << e.path();
    }
  }
  // (A daemon mounts it again when it needs it.)
  if (!fusectl_was_mounted_ && IsMounted(kFusectl)) {
    if (const std::string err = UnmountOrDetach(kFusectl); !err.empty()) {
      ADD_FAILURE() << "cannot unmount the fusectl a daemon mounted on " << kFusectl << ": " << err;
    }
  }
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    if (e.path().extension() != ".log") continue;
    const std::string log = ReadFileText(e.path());
    if (log.find("ERROR: AddressSanitizer") != std::string::npos ||
        log.find("ERROR: LeakSanitizer") != std::string::npos ||
        log.find("runtime error:") != std::string::npos) {
      ADD_FAILURE() << "sanitizer report in " << e.path() << ":\n" << log;
    }
  }
  if (std::getenv("FEDFS_KEEP_TEST_DIR") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string Cluster::WriteFile(const std::string& name, const std::string& text, int mode) {
  const std::string path = dir_ + "/" + name;
  {
    std::ofstream(path, std::ios::trunc) << text;
  }
  ::chmod(path.c_str(), static_cast<mode_t>(mode));
  return path;
}

std::string Cluster::NewKeyFile(const std::string& name, int mode) {
  return WriteFile(name, m2m::GenerateClusterKeyHex() + "\n", mode);
}

std::string Cluster::WriteConfig(const NodeConfig& c) {
  const std::string export_root = dir_ + "/" + c.id + "-export";
  std::filesystem::create_directories(export_root);
  std::filesystem::create_directories(Mountpoint(c.id));
  const int tag = c.node_tag != 0 ? c.node_tag : ++next_tag_;
  std::ostringstream y;
  y << "node_id: " << c.id << "\n"
    << "node_tag: " << tag << "\n"
    << "listen: \"" << c.listen << "\"\n"
    << "export_root: " << export_root << "\n"
    << "mountpoint: " << Mountpoint(c.id) << "\n"
    << "peers: [";
  for (size_t i = 0; i < c.peers.size(); ++i) y << (i ? ", " : "") << "\"" << c.peers[i] << "\"";
  y << "]\n"
    << "cluster_key_file: " << (c.key_file.empty() ? key_file_ : c.key_file) << "\n"
    << "control_socket: " << Socket(c.id) << "\n"
    << "state_dir: " << dir_ << "/" << c.id << "-state\n"
    << "log_level: debug\n"
    << "transport: {tls: \"" << c.tls << "\", net_devices: \"" << c.net_devices << "\"}\n"
    << "timeouts: {heartbeat_interval_ms: " << c.heartbeat_ms
    << ", failure_timeout_ms: " << c.failure_ms << ", rpc_ms: 1000, connect_ms: 1000}\n"
    << (c.mount ? "" : "fuse: {mount: false}\n")
    // A free port each (fedfsctl metrics --json names it).
    << (c.extra_yaml.find("metrics:") == std::string::npos ? "metrics: {listen: \"127.0.0.1:0\"}\n" : "")
    << c.extra_yaml;
  return WriteFile(c.id + ".yaml", y.str());
}

pid_t Cluster::Start(const std::string& name, const std::string& config, const std::string& netns,
                     const std::vector<std::string>& args) {
  if (nodes_.contains(name)) throw std::runtime_error("node " + name + " is already running");
  const std::string log = LogPath(name);
  std::vector<std::string> argv;
  if (!netns.empty()) argv = {"ip", "netns", "exec", netns};
  argv.push_back(FEDFS_FEDFSD_PATH);
  argv.push_back("--config");
  argv.push_back(config);
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    // The daemons of this Cluster register with each other here, not in
    // /run/fedfs (fedfsd/local_daemons.h): a killed one leaves nothing behind.
    ::setenv("FEDFS_RUN_DIR", (dir_ + "/run").c_str(), 1);
    ExecOrDie(argv);  // `ip netns exec` execs fedfsd in place: pid stays the daemon's
  }
  nodes_[name] = pid;
  // Remember the node's mountpoint (to clear it if the daemon dies).
  std::istringstream cfg(ReadFileText(config));
  for (std::string line; std::getline(cfg, line);) {
    if (line.rfind("mountpoint: ", 0) == 0) mounts_[name] = line.substr(12);
  }
  return pid;
}

int Cluster::Stop(const std::string& name, int sig, bool keep_stale_mount) {
  int rc = -1;
  if (ReapIfExited(name)) {
    rc = *ExitedOnItsOwn(name);  // before the signal: it exited on its own
  } else if (auto it = nodes_.find(name); it != nodes_.end()) {
    const pid_t pid = it->second;
    ::kill(pid, sig);
    // A clean stop may wait up to 3 s for a busy mount before aborting it;
    // the rest of the bound is for a loaded machine.
    rc = WaitPid(pid, sig == SIGTERM ? kNoHang : 15s);
    if (rc == -2) {
      ::kill(pid, SIGKILL);
      rc = WaitPid(pid, 15s);
    }
    nodes_.erase(it);
  } else {
    return ExitedOnItsOwn(name).value_or(-1);
  }
  if (auto m = mounts_.find(name); m != mounts_.end() && rc != -2 && !keep_stale_mount) {
    ClearMount(m->second);
  }
  return rc;
}

bool Cluster::ReapIfExited(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return false;
  int status = 0;
  if (::waitpid(it->second, &status, WNOHANG) != it->second) return false;
  exited_.emplace_back(name, ExitCode(status));
  nodes_.erase(it);
  return true;
}

bool Cluster::Running(const std::string& name) {
  ReapIfExited(name);
  return nodes_.contains(name);
}

std::optional<int> Cluster::ExitedOnItsOwn(const std::string& name) const {
  for (auto it = exited_.rbegin(); it != exited_.rend(); ++it) {
    if (it->first == name) return it->second;
  }
  return std::nullopt;
}

nlohmann::json Cluster::Status(const std::string& id) const { return Ctl(id, {"status"}); }

nlohmann::json Cluster::Ctl(const std::string& id, std::vector<std::string> args) const {
  std::vector<std::string> argv = {FEDFS_FEDFSCTL_PATH, "--socket", Socket(id)};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--json");
  auto r = RunCommand(argv, kNoHang);
  if (r.exit_code != 0) return nullptr;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_discarded() ? nullptr : j;
}

nlohmann::json Cluster::Member(const std::string& id, const std::string& member) const {
  auto s = Status(id);
  if (!s.is_object()) return nullptr;
  for (const auto& m : s["members"]) {
    if (m["id"] == member) return m;
  }
  return nullptr;
}

int Cluster::AliveCount(const std::string& id) const {
  auto s = Status(id);
  if (!s.is_object()) return -1;
  int n = 0;
  for (const auto& m : s["members"]) n += m["state"] == "alive";
  return n;
}

std::string Cluster::StartMounted(int count, std::vector<std::string>* ids,
                                  const std::string& extra_yaml) {
  std::vector<std::string> addrs;
  for (int i = 0; i < count; ++i) addrs.push_back("127.0.0.1:" + std::to_string(FreePort()));
  ids->clear();
  for (int i = 0; i < count; ++i) {
    const std::string id = "n" + std::to_string(i + 1);
    std::vector<std::string> peers;
    for (int j = 0; j < count; ++j) {
      if (j != i) peers.push_back(addrs[j]);
    }
    Start(id, WriteConfig({.id = id, .listen = addrs[i], .peers = peers, .extra_yaml = extra_yaml}));
    ids->push_back(id);
  }
  for (const auto& id : *ids) {
    if (!WaitFor([&] { return SeesAlive(id, *ids); }, kNoHang)) {
      return id + " does not see every node alive; log:\n" + Log(id);
    }
    if (!WaitFor([&] { return IsMounted(Mountpoint(id)); }, kNoHang)) {
      return id + " did not mount; log:\n" + Log(id);
    }
  }
  // Settled: every node at the same membership epoch. Each change of epoch
  // a node sees drops the names its kernel caches, and with them the
  // inodes of closed files and their pages: a test that keeps pages across
  // opens would see a late one of the start as a fault.
  auto settled = [&] {
    std::set<uint64_t> epochs;
    for (const auto& id : *ids) {
      auto s = Status(id);
      if (!s.is_object() || !s.contains("epoch")) return false;
      epochs.insert(s["epoch"].get<uint64_t>());
    }
    return epochs.size() == 1;
  };
  if (!WaitFor(settled, kNoHang)) return "the nodes' membership epochs did not settle";
  return "";
}

bool Cluster::SeesAlive(const std::string& id, const std::vector<std::string>& ids) const {
  auto s = Status(id);
  if (!s.is_object()) return false;
  std::vector<std::string> alive;
  for (const auto& m : s["members"]) {
    if (m["state"] == "alive") alive.push_back(m["id"]);
  }
  std::vector<std::string> want = ids;
  std::sort(want.begin(), want.end());
  std::sort(alive.begin(), alive.end());
  return alive == want;
}

}  // namespace fedfs::testing
