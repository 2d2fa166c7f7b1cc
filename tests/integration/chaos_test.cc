// The chaos run (docs/faults.md "Chaos run"; label "integration"; needs
// root): three daemons, each in a network namespace of its own joined to the
// others by a bridge, with FUSE mounts, the cooperative cache on and files
// migrating back and forth (fedfsctl migrate), while data workers write,
// fsync and read back files on their own and on other nodes, and namespace
// workers run random directory operations on shared directories
// (tests/integration/chaos_workload.h). Meanwhile, every 1 to 4 s, one node
// at a time is SIGKILLed (and must end: a daemon that does not is reported,
// its FUSE connection aborted) and restarted, or SIGSTOPped for up to 3 s, or has
// its link cut for up to 3 s; the next fault comes once every node sees every
// other alive again.
//
// Afterwards, with every node back: each mount and control socket answers;
// no worker thread is stuck (none in D state); every file holds, in every
// sector and through every mount, a version between the last one
// acknowledged by fsync and the last one written, and lives in exactly one
// export root; reads during the run never found an acknowledged version gone;
// no journaled directory operation or move is left pending; every mount
// shows the same tree of the namespace workers' names. Each namespace
// worker's history, closed by listings through every mount, is checked for
// linearizability with operations that failed with ETIMEDOUT, EIO,
// ECONNRESET, ENOTCONN, ECONNABORTED, EHOSTDOWN or EAGAIN counted as of
// unknown outcome (tests/tools/history_check.h, OutcomeUnknown): required
// without faults (FEDFS_CHAOS_FAULTS=0; then no data call or move may fail
// either), reported with them (a dead or cut-off node's files drop out of
// the others' listings until it is back, by design: docs/faults.md).
//
// FEDFS_CHAOS_SECONDS (default 60) bounds the faults' time, FEDFS_CHAOS_SEED
// (default 1) chooses them, FEDFS_CHAOS_FAULTS=0 runs the workload without
// any; FEDFS_CHAOS_RECORDS=1 runs the daemons with
// directory_ops.record_dead_members on; FEDFS_CHAOS_REPORT=<file> gets the figures as
// JSON (bench/chaos.sh); FEDFS_TEST_KEEP_LOGS=<dir> gets each daemon's
// whole log when the run fails. The fixture deletes its namespaces (and so the
// links) and the Cluster stops the daemons and clears the mounts whatever
// happens; a frozen daemon is thawed first.
#include <dirent.h>
#include <fcntl.h>

// The defaults of FEDFS_CHAOS_SECONDS and FEDFS_CHAOS_FAULTS: chaos_test
// (label chaos) runs 60 s with faults, chaos_workload_test (label
// integration, in scripts/test.sh) 20 s without (tests/integration/CMakeLists.txt).
#ifndef FEDFS_CHAOS_DEFAULT_SECONDS
#define FEDFS_CHAOS_DEFAULT_SECONDS 60
#endif
#ifndef FEDFS_CHAOS_DEFAULT_FAULTS
#define FEDFS_CHAOS_DEFAULT_FAULTS 1
#endif
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <ctime>
#include <thread>

#include "tests/integration/chaos_workload.h"
#include "tests/tools/cluster.h"
#include "tests/tools/history_check.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kNodes = 3;
constexpr int kFilesPerKind = 2;  // per node: local files and remote files

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::stoll(v) : fallback;
}

// A metric's value in `fedfsctl metrics` text (the sum over its lines), or
// -1 if the daemon did not answer.
double Metric(const std::string& socket, const std::string& name) {
  const CommandResult r = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", socket, "metrics"}, 20s);
  if (r.exit_code != 0) return -1;
  std::istringstream in(r.out);
  double sum = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + " ", 0) == 0 || line.rfind(name + "{", 0) == 0) {
      sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return sum;
}

// The threads of this process in D state (uninterruptible sleep), with
// where the kernel has them ("wchan").
std::string ThreadsInDState() {
  std::string out;
  for (const auto& e : fs::directory_iterator("/proc/self/task")) {
    const std::string stat = ReadFileText(e.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'D') {
      out += "thread " + e.path().filename().string() + " in D state, wchan " +
             ReadFileText(e.path().string() + "/wchan") + "\n";
    }
  }
  return out;
}

// The indexes of the operations an explanation names (#N), widened by 25
// before and 5 after; lo > hi if it names none.
std::pair<size_t, size_t> NamedRange(const std::string& explanation, const std::vector<NsOp>& h) {
  size_t lo = h.size(), hi = 0;
  for (size_t p = explanation.find('#'); p != std::string::npos; p = explanation.find('#', p + 1)) {
    if (p + 1 >= explanation.size() || !std::isdigit(static_cast<unsigned char>(explanation[p + 1]))) continue;
    const size_t i = std::strtoul(explanation.c_str() + p + 1, nullptr, 10);
    if (i < h.size()) {
      lo = std::min(lo, i);
      hi = std::max(hi, i);
    }
  }
  if (lo > hi || h.empty()) return {1, 0};
  return {lo > 25 ? lo - 25 : 0, std::min(h.size() - 1, hi + 5)};
}

// The operations of a history around those an explanation names (#N),
// with the node each went through and the faults meanwhile.
std::string Around(const std::string& explanation, const std::vector<NsOp>& h, const std::vector<int>& via,
                   const std::vector<std::pair<HistoryClock::time_point, std::string>>& events) {
  const auto [lo, hi] = NamedRange(explanation, h);
  if (lo > hi) return "";
  const auto t0 = h.front().invoke;
  auto ms = [&](HistoryClock::time_point t) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(t - t0).count());
  };
  std::string out = "operations #" + std::to_string(lo) + "..#" + std::to_string(hi) +
                    " (ms from the first; the node whose mount it went through):\n";
  for (size_t i = lo; i <= hi; ++i) {
    out += "  #" + std::to_string(i) + " " + ms(h[i].invoke) + ".." + ms(h[i].response) + " via n" +
           std::to_string(i < via.size() ? via[i] + 1 : 0) + ": " + FormatOp(h[i]) + "\n";
  }
  out += "faults:\n";
  for (const auto& [t, what] : events) {
    if (t + 10s >= h[lo].invoke && t <= h[hi].response + 10s) out += "  " + ms(t) + " " + what + "\n";
  }
  return out;
}

class Chaos : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, FUSE mounts)";
    const std::string tag = std::to_string(::getpid());
    hub_ = "fc" + tag + "h";
    const std::string net = "10." + std::to_string(100 + ::getpid() % 100) + "." +
                            std::to_string((::getpid() / 100) % 250) + ".";
    for (int i = 0; i < kNodes; ++i) {
      const std::string n = std::to_string(i + 1);
      ns_.push_back("fc" + tag + "n" + n);
      dev_.push_back("fv" + tag + "n" + n);
      hub_dev_.push_back("fv" + tag + "h" + n);
      ip_.push_back(net + n);
    }
    created_ = true;
    std::vector<std::vector<std::string>> cmds = {
        {"ip", "netns", "add", hub_},
        {"ip", "-n", hub_, "link", "add", "br0", "type", "bridge"},
        {"ip", "-n", hub_, "link", "set", "br0", "up"}};
    for (int i = 0; i < kNodes; ++i) {
      const std::string& ns = ns_[i];
      const std::string& dev = dev_[i];
      const std::string& hd = hub_dev_[i];
      cmds.push_back({"ip", "netns", "add", ns});
      cmds.push_back({"ip", "link", "add", dev, "type", "veth", "peer", "name", hd});
      cmds.push_back({"ip", "link", "set", dev, "netns", ns});
      cmds.push_back({"ip", "link", "set", hd, "netns", hub_});
      cmds.push_back({"ip", "-n", hub_, "link", "set", hd, "master", "br0"});
      cmds.push_back({"ip", "-n", hub_, "link", "set", hd, "up"});
      cmds.push_back({"ip", "-n", ns, "addr", "add", ip_[i] + "/24", "dev", dev});
      cmds.push_back({"ip", "-n", ns, "link", "set", dev, "up"});
      cmds.push_back({"ip", "-n", ns, "link", "set", "lo", "up"});
    }
    for (const auto& cmd : cmds) {
      const CommandResult r = RunCommand(cmd, 10s);
      ASSERT_EQ(r.exit_code, 0) << cmd[0] << " " << cmd[1] << " " << cmd[2] << " " << cmd[3] << ": " << r.err;
    }
  }

  void TearDown() override {
    for (const auto& id : ids_) {
      if (frozen_ == id && c_->Running(id)) ::kill(c_->pid(id), SIGCONT);
    }
    KeepLogs();
    c_.reset();  // the daemons stop before their namespaces go
    if (!created_) return;
    for (const auto& ns : ns_) RunCommand({"ip", "netns", "del", ns}, 10s);
    RunCommand({"ip", "netns", "del", hub_}, 10s);
    for (const auto& dev : dev_) RunCommand({"ip", "link", "del", dev}, 10s);  // only if it never moved
  }

  std::string Id(int i) const { return ids_[static_cast<size_t>(i)]; }

  // FEDFS_TEST_KEEP_LOGS=<dir>: the whole logs of a failing run (debug
  // level, every life of each daemon) are copied there, for a closer look
  // than the report's excerpts (as in namespace_history_test.cc).
  void KeepLogs() {
    const char* keep = std::getenv("FEDFS_TEST_KEEP_LOGS");
    if (keep == nullptr || *keep == '\0' || !HasFailure() || c_ == nullptr) return;
    std::error_code ec;
    fs::create_directories(keep, ec);
    for (const auto& id : ids_) {
      const std::string to = std::string(keep) + "/chaos-" + std::to_string(::getpid()) + "-" + id + ".log";
      std::ofstream(to) << c_->Log(id);
      std::printf("kept %s\n", to.c_str());
    }
  }

  // `ip netns exec` gives each daemon a mount namespace of its own (with
  // the network namespace's /sys, where UCX finds its devices): its mount is
  // reached through /proc/<pid>/root, and goes with the namespace when the
  // daemon dies.
  void StartNode(int i) {
    const pid_t pid = c_->Start(Id(i), configs_[static_cast<size_t>(i)], ns_[static_cast<size_t>(i)]);
    mounts_.Set(static_cast<size_t>(i), MountPath(i, pid));
  }
  std::string MountPath(int i, pid_t pid) const {
    return "/proc/" + std::to_string(pid) + "/root" + c_->Mountpoint(Id(i));
  }
  std::string MountPath(int i) const { return MountPath(i, c_->pid(Id(i))); }

  // The node's FUSE mount is there (in its daemon's mount namespace).
  bool Mounted(int i) const {
    std::istringstream in(ReadFileText("/proc/" + std::to_string(c_->pid(Id(i))) + "/mountinfo"));
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      std::string id, parent, dev, root, point;
      f >> id >> parent >> dev >> root >> point;
      if (point == c_->Mountpoint(Id(i)) && line.find(" - fuse") != std::string::npos) {
        // "0:NN": NN names the FUSE connection (/sys/fs/fuse/connections).
        if (dev.rfind("0:", 0) == 0) conn_[c_->pid(Id(i))] = dev.substr(2);
        return true;
      }
    }
    return false;
  }

  // SIGKILLs node i and waits until its daemon is gone. A daemon thread
  // that waits in the kernel for the answer to one of its own FUSE
  // requests outlives the kill and keeps the connection (and every caller
  // of the mount) waiting: that is reported, and the connection aborted
  // (fusectl) so that the process can end. Its pid is not reaped until it
  // does, so the connection's number is still its own.
  void Kill(int i) {
    const pid_t pid = c_->pid(Id(i));
    if (c_->Stop(Id(i), SIGKILL) != -2) return;
    const std::string threads = DStateThreadsOf(pid);
    hung_kills_.push_back(Id(i) + " (pid " + std::to_string(pid) + ") did not end on SIGKILL:\n" + threads);
    AbortConnection(pid);
    int status = 0;
    WaitFor([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 30s);
  }

  void AbortConnection(pid_t pid) {
    auto it = conn_.find(pid);
    if (it == conn_.end() || !fs::exists("/proc/" + std::to_string(pid))) return;
    std::ofstream("/sys/fs/fuse/connections/" + it->second + "/abort") << "1";
  }

  // The threads of process `pid` in D state, with their kernel stacks.
  static std::string DStateThreadsOf(pid_t pid) {
    std::string out;
    const std::string task = "/proc/" + std::to_string(pid) + "/task";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(task, ec)) {
      const std::string stat = ReadFileText(e.path().string() + "/stat");
      const size_t close = stat.rfind(')');
      if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'D') {
        out += "  thread " + e.path().filename().string() + ":\n" + ReadFileText(e.path().string() + "/stack");
      }
    }
    return out;
  }

  // Every node running, mounted and seeing every other alive.
  bool AllBack() {
    for (int i = 0; i < kNodes; ++i) {
      if (!c_->Running(Id(i)) || !Mounted(i) || !c_->SeesAlive(Id(i), ids_)) return false;
    }
    return true;
  }

  // The daemons' log lines about the namespace workers' names ("ns/")
  // logged while the operations an explanation names ran (give or take
  // 20 ms), at most 150 per node: their timestamps (local time, to the
  // millisecond) compared as text.
  std::string LogsAround(const std::string& explanation, const std::vector<NsOp>& h) {
    const auto [lo, hi] = NamedRange(explanation, h);
    if (lo > hi) return "";
    auto stamp = [](HistoryClock::time_point t) {
      const auto wall = std::chrono::system_clock::now() - (HistoryClock::now() - t);
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wall.time_since_epoch()).count();
      const std::time_t secs = static_cast<std::time_t>(ms / 1000);
      std::tm tm{};
      ::localtime_r(&secs, &tm);
      char buf[96];
      std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03lld", tm.tm_year + 1900, tm.tm_mon + 1,
                    tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(ms % 1000));
      return std::string(buf);
    };
    const std::string from = stamp(h[lo].invoke - 20ms), to = stamp(h[hi].response + 20ms);
    std::string out = "daemon log lines about ns/ from " + from + " to " + to + ":\n";
    for (const auto& id : ids_) {
      std::istringstream in(c_->Log(id));
      int n = 0;
      for (std::string line; std::getline(in, line) && n < 150;) {
        const std::string t = line.substr(0, from.size());
        if (t < from || t > to || line.find("ns/") == std::string::npos) continue;
        out += "  " + line + "\n";
        ++n;
      }
    }
    return out;
  }

  std::string Logs() {
    std::string out;
    for (const auto& id : ids_) {
      const std::string log = c_->Log(id);
      out += id + " log (last 3000 bytes):\n" + log.substr(log.size() > 3000 ? log.size() - 3000 : 0) + "\n";
    }
    return out;
  }

  std::unique_ptr<Cluster> c_ = std::make_unique<Cluster>();
  bool created_ = false;
  std::string hub_;
  std::vector<std::string> ns_, dev_, hub_dev_, ip_, ids_, configs_;
  std::string frozen_;  // the node SIGSTOPped now, if any
  mutable std::map<pid_t, std::string> conn_;  // daemon pid -> its FUSE connection's number
  std::vector<std::string> hung_kills_;  // daemons a SIGKILL did not end
  MountTable mounts_{kNodes};
};

#if FEDFS_CHAOS_DEFAULT_FAULTS
TEST_F(Chaos, NothingAcknowledgedIsLostAndEveryOperationIsWhole) {
#else
using ChaosWorkload = Chaos;
TEST_F(ChaosWorkload, NothingFailsNothingIsLostAndEveryHistoryIsLinearizable) {
#endif
  const int64_t seconds = EnvInt("FEDFS_CHAOS_SECONDS", FEDFS_CHAOS_DEFAULT_SECONDS);
  const uint64_t seed = static_cast<uint64_t>(EnvInt("FEDFS_CHAOS_SEED", 1));
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  const bool records = EnvInt("FEDFS_CHAOS_RECORDS", 0) != 0;
  constexpr const char* kYaml = "coopcache: {size: 32M}\n";
  constexpr const char* kRecordsYaml =
      "coopcache: {size: 32M}\ndirectory_ops: {record_dead_members: true}\n";
  for (int i = 0; i < kNodes; ++i) {
    const std::string id = "n" + std::to_string(i + 1);
    ids_.push_back(id);
    std::vector<std::string> peers;
    for (int j = 0; j < kNodes; ++j) {
      if (j != i) peers.push_back(ip_[static_cast<size_t>(j)] + ":7400");
    }
    configs_.push_back(c_->WriteConfig({.id = id,
                                        .listen = ip_[static_cast<size_t>(i)] + ":7400",
                                        .peers = peers,
                                        .net_devices = dev_[static_cast<size_t>(i)],
                                        .extra_yaml = records ? kRecordsYaml : kYaml}));
    // The shared directories are in every export root (spread directories).
    fs::create_directories(c_->ExportRoot(id) + "/data");
    fs::create_directories(c_->ExportRoot(id) + "/ns");
  }
  for (int i = 0; i < kNodes; ++i) StartNode(i);
  ASSERT_TRUE(WaitFor([&] { return AllBack(); }, kNoHang)) << Logs();

  // Data files, made through their node's mount (placement: local), each
  // with version 0 in every sector.
  std::vector<std::vector<ChaosFile>> per_writer(kNodes);
  uint32_t index = 0;
  for (int i = 0; i < kNodes; ++i) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int k = 0; k < kFilesPerKind; ++k) {
        ChaosFile f;
        f.index = index++;
        f.path = std::string("data/") + (kind == 0 ? "L" : "R") + std::to_string(i + 1) + "-" + std::to_string(k);
        f.writer = kind == 0 ? i : (i + 1) % kNodes;
        f.reader = kind == 0 ? (i + 1) % kNodes : (i + 2) % kNodes;
        std::string bytes(kChaosBlock * kChaosBlocks, '\0');
        for (uint32_t b = 0; b < kChaosBlocks; ++b) {
          for (uint32_t s = 0; s < kChaosBlock / kChaosSector; ++s) {
            FillSector(f.index, b, s, 0, bytes.data() + b * kChaosBlock + s * kChaosSector);
          }
        }
        const std::string path = MountPath(i) + "/" + f.path;
        const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
        ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
        ASSERT_EQ(::fsync(fd), 0);
        ::close(fd);
        ASSERT_TRUE(fs::exists(c_->ExportRoot(Id(i)) + "/" + f.path)) << f.path << " is not on " << Id(i);
        per_writer[static_cast<size_t>(f.writer)].push_back(std::move(f));
      }
    }
  }

  (void)ChaosMs();  // the run starts now
  ChaosCounters counters;
  Violations violations;
  std::vector<std::unique_ptr<DataWorker>> data;
  std::vector<std::unique_ptr<NamespaceWorker>> names;
  for (int i = 0; i < kNodes; ++i) {
    data.push_back(std::make_unique<DataWorker>(&mounts_, per_writer[static_cast<size_t>(i)], seed * 100 + i,
                                                &counters, &violations));
    names.push_back(std::make_unique<NamespaceWorker>(i, &mounts_, "ns", seed * 100 + 50 + i, &counters));
  }
  std::atomic<bool> stop{false};
  std::atomic<int> running{0};
  std::vector<std::thread> threads;
  auto launch = [&](std::function<void()> body) {
    ++running;
    threads.emplace_back([&running, body = std::move(body)] {
      body();
      --running;
    });
  };
  for (auto& w : data) launch([&stop, w = w.get()] { w->Run(stop); });
  for (auto& w : names) launch([&stop, w = w.get()] { w->Run(stop); });
  // Files move back and forth: `fedfsctl migrate` through a random node.
  std::vector<std::string> sockets, files;
  for (const auto& id : ids_) sockets.push_back(c_->Socket(id));
  for (const auto& w : per_writer) {
    for (const auto& f : w) files.push_back("/" + f.path);
  }
  launch([&stop, &counters, sockets, files, seed] {
    std::mt19937_64 r(seed * 100 + 99);
    auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(r); };
    while (!stop.load()) {
      const CommandResult res = RunCommand({FEDFS_FEDFSCTL_PATH, "--socket", sockets[pick(sockets.size())], "migrate",
                                            files[pick(files.size())], "--to", "n" + std::to_string(pick(kNodes) + 1)},
                                           60s);
      // A move to the node the file is on is refused and counts as neither.
      if (res.exit_code == 0) {
        counters.migrations_ok++;
        if (std::getenv("FEDFS_CHAOS_VERBOSE") != nullptr) {
          std::printf("moved at %lld ms: %s\n", ChaosMs(), res.out.c_str());
        }
      } else if (res.err.find("already") == std::string::npos) {
        counters.migrations_failed++;
        counters.Sample("migrate: " + res.err.substr(0, 200));
      }
      for (int i = 0; i < 10 && !stop.load(); ++i) std::this_thread::sleep_for(100ms);
    }
  });

  // The faults.
  int kills = 0, freezes = 0, cuts = 0;
  std::vector<std::pair<HistoryClock::time_point, std::string>> events;  // the faults, for reports
  std::string recovery_failure;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  const bool faults = EnvInt("FEDFS_CHAOS_FAULTS", FEDFS_CHAOS_DEFAULT_FAULTS) != 0;
  if (!faults) std::this_thread::sleep_until(end);  // the workload alone
  while (faults && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(uniform(1000, 4000)));
    const int n = uniform(0, kNodes - 1);
    const int action = uniform(0, 9);
    const auto hold = std::chrono::milliseconds(uniform(300, 3000));
    const std::string id = Id(n);
    const std::string what = action < 5 ? "SIGKILL" : action < 8 ? "SIGSTOP" : "link cut";
    events.emplace_back(HistoryClock::now(), what + " " + id + " for " + std::to_string(hold.count()) + " ms");
    if (action < 5) {
      mounts_.Set(static_cast<size_t>(n), "");
      Kill(n);  // its mount goes with its mount namespace
      std::this_thread::sleep_for(hold / 2);
      StartNode(n);
      ++kills;
    } else if (action < 8) {
      ::kill(c_->pid(id), SIGSTOP);
      frozen_ = id;
      std::this_thread::sleep_for(hold);
      ::kill(c_->pid(id), SIGCONT);
      frozen_.clear();
      ++freezes;
    } else {
      const std::string& hd = hub_dev_[static_cast<size_t>(n)];
      // `ip` has taken several seconds here under load (once more than the
      // 10 s it was given, leaving the link down for good: the federation
      // "did not come back" for a reason of the test's own). Each change is
      // waited for and tried again; a link that cannot be restored is the
      // test's failure, said as such.
      auto set = [&](const char* state) {
        CommandResult r;
        for (int attempt = 0; attempt < 5; ++attempt) {
          r = RunCommand({"ip", "-n", hub_, "link", "set", hd, state}, 60s);
          if (r.exit_code == 0) return std::string();
        }
        return "ip link set " + hd + " " + state + " failed: " + r.err;
      };
      std::string bad = set("down");
      std::this_thread::sleep_for(hold);
      if (std::string up = set("up"); !up.empty()) bad += (bad.empty() ? "" : "; ") + up;
      if (!bad.empty()) {
        recovery_failure = "the test could not cut or restore a link: " + bad;
        break;
      }
      ++cuts;
    }
    events.emplace_back(HistoryClock::now(), id + " restored");
    if (!WaitFor([&] { return AllBack(); }, kNoHang)) {
      recovery_failure = "after a fault on " + id + " the federation did not come back";
      break;
    }
  }
  stop = true;
  // Every worker ends within a bound; one that does not is stuck in a call.
  const bool ended = WaitFor([&] { return running.load() == 0; }, kNoHang);
  std::string stuck;
  if (!ended) stuck = ThreadsInDState() + "a worker did not end within " + std::to_string(kNoHang.count()) + " s";
  if (!ended) {
    for (int i = 0; i < kNodes; ++i) {
      if (!c_->Running(Id(i))) continue;
      AbortConnection(c_->pid(Id(i)));  // unblocks them (ECONNABORTED)
      Kill(i);
    }
  }
  for (auto& t : threads) t.join();
  if (!recovery_failure.empty()) {
    for (const auto& [t, what] : events) recovery_failure += "\nfault at " + std::to_string(ChaosMs(t)) + " ms: " + what;
  }
  ASSERT_TRUE(recovery_failure.empty()) << recovery_failure << "\n" << Logs();
  ASSERT_TRUE(ended) << stuck << "\n" << Logs();
  for (const auto& h : hung_kills_) ADD_FAILURE() << h;

  // Quiet: every node back, no journaled directory operation or move left.
  ASSERT_TRUE(WaitFor([&] { return AllBack(); }, kNoHang)) << Logs();
  for (const auto& id : ids_) {
    EXPECT_TRUE(WaitFor([&] { return Metric(c_->Socket(id), "fedfs_journal_pending") == 0; }, kNoHang))
        << id << ": directory operations still pending";
    EXPECT_TRUE(WaitFor([&] { return Metric(c_->Socket(id), "fedfs_migration_pending") == 0; }, kNoHang))
        << id << ": moves still pending";
  }
  // Every mount and control socket answers.
  for (int i = 0; i < kNodes; ++i) {
    const CommandResult st = RunCommand({"stat", "-f", MountPath(i)}, 30s);
    EXPECT_EQ(st.exit_code, 0) << Id(i) << "'s mount does not answer: " << st.err;
    EXPECT_TRUE(c_->Status(Id(i)).is_object()) << Id(i) << "'s control socket does not answer";
  }

  // Data: nothing acknowledged is lost, through any mount; one copy each.
  uint64_t files_checked = 0;
  for (const auto& w : data) {
    for (const ChaosFile& f : w->Files()) {
      int copies = 0;
      for (const auto& id : ids_) copies += fs::is_regular_file(c_->ExportRoot(id) + "/" + f.path) ? 1 : 0;
      EXPECT_EQ(copies, 1) << f.path << " is in " << copies << " export roots";
      for (int i = 0; i < kNodes; ++i) {
        const std::string m = MountPath(i);
        std::ifstream in(m + "/" + f.path, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const std::string wrong = in.bad() ? f.path + ": unreadable" : CheckFileBytes(f, bytes, f.acked, f.attempted);
        EXPECT_EQ(wrong, "") << "through " << m;
        ++files_checked;
      }
    }
  }
  for (const auto& v : violations.Take()) ADD_FAILURE() << "during the run: " << v;

  // Namespace: every mount shows the same tree of the workers' names, and
  // each worker's history, closed by listings through every mount, is
  // checked. Through the faults it is only reported: a dead or cut-off
  // node's files drop out of the other nodes' listings until it is back,
  // and a cut-off node serves what it holds itself (docs/faults.md, "Chaos
  // run"), so a history that spans them is not linearizable by design.
  auto tree = [&](int i) {
    std::string out;
    std::set<std::string> top;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(MountPath(i) + "/ns", ec)) top.insert(e.path().filename().string());
    if (ec) return "unlistable: " + ec.message();
    for (const auto& n : top) {
      out += n + "\n";
      std::set<std::string> inner;
      for (const auto& e : fs::directory_iterator(MountPath(i) + "/ns/" + n, ec)) inner.insert(e.path().filename().string());
      for (const auto& m : inner) out += n + "/" + m + "\n";
      ec.clear();
    }
    return out;
  };
  const std::string tree0 = tree(0);
  uint64_t conflicts = 0;
  for (size_t p = tree0.find('~'); p != std::string::npos; p = tree0.find('~', p + 1)) ++conflicts;
  for (int i = 1; i < kNodes; ++i) EXPECT_EQ(tree(i), tree0) << "through " << Id(i) << " and " << Id(0);
  uint64_t histories_ops = 0;
  int not_linearizable = 0, undecided = 0;
  for (auto& w : names) {
    for (int i = 0; i < kNodes; ++i) w->FinalListings(i);
    const std::vector<NsOp> history = w->TakeHistory();
    histories_ops += history.size();
    const auto t0 = std::chrono::steady_clock::now();
    const HistoryVerdict v = CheckLinearizable(history, {}, /*unknown_outcomes=*/true);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    std::printf("namespace history: %zu operations, %s, %llu configurations, checked in %lld ms\n", history.size(),
                v.linearizable ? "linearizable" : v.gave_up ? "undecided (the search's budget)" : "NOT linearizable",
                static_cast<unsigned long long>(v.explored),
                static_cast<long long>(ms.count()));
    if (!faults) {
      EXPECT_TRUE(v.linearizable) << v.explanation << Around(v.explanation, history, w->Via(), events)
                                  << LogsAround(v.explanation, history);
    } else if (v.gave_up) {
      ++undecided;
    } else if (!v.linearizable) {
      ++not_linearizable;
      std::printf("%s\n", v.explanation.substr(0, v.explanation.find("model state")).c_str());
    }
  }
  EXPECT_EQ(ThreadsInDState(), "");
  if (!faults) {
    // The workload alone: nothing fails.
    EXPECT_EQ(counters.data_errors.load(), 0u);
    EXPECT_EQ(counters.migrations_failed.load(), 0u);
  }

  nlohmann::json report = {
      {"seconds", seconds},
      {"seed", seed},
      {"kills", kills},
      {"hung_kills", hung_kills_.size()},
      {"freezes", freezes},
      {"cuts", cuts},
      {"writes", counters.writes.load()},
      {"fsyncs", counters.fsyncs.load()},
      {"reads_checked", counters.reads_checked.load()},
      {"data_errors", counters.data_errors.load()},
      {"files_checked", files_checked},
      {"ns_ops", counters.ns_ops.load()},
      {"ns_unknown", counters.ns_unknown.load()},
      {"history_ops", histories_ops},
      {"histories_not_linearizable", not_linearizable},
      {"histories_undecided", undecided},
      {"ns_conflicts", conflicts},
      {"migrations_ok", counters.migrations_ok.load()},
      {"migrations_failed", counters.migrations_failed.load()},
      {"failed", ::testing::Test::HasFailure()},
  };
  for (const auto& [t, what] : events) std::printf("fault at %lld ms: %s\n", ChaosMs(t), what.c_str());
  for (const auto& s : counters.Samples()) std::printf("failed: %s\n", s.c_str());
  std::printf("chaos: %s\n", report.dump().c_str());
  if (const char* path = std::getenv("FEDFS_CHAOS_REPORT"); path != nullptr && *path != '\0') {
    std::ofstream(path) << report.dump() << "\n";
  }
}

}  // namespace
}  // namespace fedfs::testing
