// fedfs-m2m-bench: latency and bandwidth of the UCX transport between two
// processes on one machine (UCX tcp on loopback by default).
//
//   fedfs-m2m-bench [--tls=tcp] [--dev=lo] [--iters=N] [--spin=us] [--window=4]
//                   [--yield=0|1] [--put-local]
//
// The benchmark forks and execs itself as the server (`--server`), a separate
// process with its own progress thread, which publishes its address and a
// registered region on stdout and serves until its stdin closes. The client
// then measures, closed loop (one operation outstanding unless noted):
//   rpc64     RPC round trip, 64-byte request and reply
//   put8/get8 8-byte Put (remote completion: put + flush) / Get
//   fadd/cas  remote FetchAdd / CompareSwap
//   put1m/get1m  1 MiB Put / Get bandwidth, --window operations outstanding
// Two issue modes for the latency tests:
//   app       an application thread issues the operation and sleeps until its
//             callback wakes it (futex), as a FUSE worker would;
//   chained   the next operation is issued from the previous one's callback on
//             the progress thread (transport cost without the thread hand-off).
// Output: one "name value" line per metric (microseconds; MB/s = 2^20 B/s as
// in ucx_perftest).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "m2m/auth.h"
#include "m2m/ucx_transport.h"

namespace fedfs::m2m {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kT = std::chrono::seconds(10);
constexpr size_t kRegionBytes = 8u << 20;

struct Args {
  bool server = false;
  std::string tls = "tcp";
  std::string dev = "lo";
  int iters = 20000;
  int spin_us = -1;  // progress-thread spin of both transports (-1: UcxOptions default)
  int window = 4;    // bandwidth tests: operations outstanding
  int yield = 1;     // UcxOptions::spin_yield
  bool put_local = false;  // UcxOptions::put_remote_completion = false (client)
};

std::unique_ptr<Transport> MakeTransport(const Args& a) {
  UcxOptions u;
  u.tls = a.tls;
  u.net_devices = a.dev;
  if (a.spin_us >= 0) u.spin_us = static_cast<uint32_t>(a.spin_us);
  u.spin_yield = a.yield != 0;
  u.put_remote_completion = !a.put_local;
  TransportOptions o;
  o.cluster_key = Bytes(kClusterKeyBytes, std::byte{0x42});
  auto t = MakeUcxTransport(u, o);
  if (!t) {
    std::cerr << "transport: " << t.error().ToString() << "\n";
    std::exit(1);
  }
  return std::move(*t);
}

int RunServer(const Args& a) {
  auto t = MakeTransport(a);
  t->Handle(1, [](IncomingCall call, Responder r) { r.Reply(std::move(call.payload)); });
  auto addr = t->Listen("127.0.0.1:0");
  auto region = t->Allocate(kRegionBytes);
  if (!addr || !region) return 1;
  const RegionDesc d = (*region)->Export();
  std::string line = *addr + " " + std::to_string(d.addr) + " " + std::to_string(d.length) + " ";
  static const char* kHex = "0123456789abcdef";
  for (std::byte b : d.rkey) {
    line += kHex[std::to_integer<int>(b) >> 4];
    line += kHex[std::to_integer<int>(b) & 15];
  }
  std::cout << line << std::endl;
  char c;
  while (::read(STDIN_FILENO, &c, 1) > 0) {
  }
  t->Shutdown();
  return 0;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Starts one operation and calls `done` (any thread) when it completes.
using StartFn = std::function<void(std::function<void(bool ok)> done)>;

// App mode: the calling thread issues and sleeps until completion.
std::vector<double> RunApp(const StartFn& start, int iters) {
  std::vector<double> lat;
  lat.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    std::atomic<int> flag{0};
    const auto t0 = Clock::now();
    start([&](bool ok) {
      flag.store(ok ? 1 : 2);
      flag.notify_one();
    });
    flag.wait(0);
    if (flag.load() != 1) {
      std::cerr << "operation failed\n";
      std::exit(1);
    }
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return lat;
}

// Chained mode: each completion (on the progress thread) starts the next one.
std::vector<double> RunChained(const StartFn& start, int iters) {
  struct State {
    std::vector<double> lat;
    Clock::time_point t0;
    int left;
    std::atomic<int> finished{0};
    std::function<void()> next;
  } st;
  st.lat.reserve(iters);
  st.left = iters;
  st.next = [&] {
    st.t0 = Clock::now();
    start([&](bool ok) {
      st.lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - st.t0).count());
      if (!ok || --st.left == 0) {
        st.finished.store(ok ? 1 : 2);
        st.finished.notify_one();
        return;
      }
      st.next();
    });
  };
  st.next();
  st.finished.wait(0);
  if (st.finished.load() != 1) {
    std::cerr << "operation failed\n";
    std::exit(1);
  }
  return st.lat;
}

// Bandwidth: `window` operations outstanding, `total` operations of `bytes`.
double RunBandwidth(const StartFn& start, int total, int window, size_t bytes) {
  std::atomic<int> issued{0}, completed{0}, failed{0};
  std::function<void()> issue = [&] {
    if (issued.fetch_add(1) >= total) return;
    start([&](bool ok) {
      if (!ok) failed.fetch_add(1);
      if (completed.fetch_add(1) + 1 == total) {
        completed.notify_one();
        return;
      }
      issue();
    });
  };
  const auto t0 = Clock::now();
  for (int i = 0; i < window; ++i) issue();
  for (int c = completed.load(); c < total; c = completed.load()) completed.wait(c);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (failed.load() != 0) {
    std::cerr << "bandwidth operation failed\n";
    std::exit(1);
  }
  return static_cast<double>(bytes) * total / s / 1048576.0;  // MB/s as ucx_perftest: 2^20
}

int RunClient(const Args& a, const char* self) {
  int to_child[2], from_child[2];
  if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) return 1;
  std::string tls = "--tls=" + a.tls, dev = "--dev=" + a.dev;
  std::string spin = "--spin=" + std::to_string(a.spin_us);
  std::string yield = "--yield=" + std::to_string(a.yield);
  char* argv[] = {const_cast<char*>(self), const_cast<char*>("--server"), tls.data(), dev.data(),
                  spin.data(), yield.data(), nullptr};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(to_child[0], STDIN_FILENO);
    ::dup2(from_child[1], STDOUT_FILENO);
    ::close(to_child[1]);
    ::close(from_child[0]);
    ::execv(self, argv);
    ::_exit(127);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  std::string line;
  char c;
  while (::read(from_child[0], &c, 1) == 1 && c != '\n') line += c;
  std::istringstream is(line);
  std::string addr, hex;
  RegionDesc d;
  is >> addr >> d.addr >> d.length >> hex;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    d.rkey.push_back(std::byte(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  int rc = 0;
  {
    auto t = MakeTransport(a);
    auto ep = t->GetEndpoint(addr);
    auto remote = ep->Import(d);
    if (!remote || !ConnectSync(*ep, kT)) {
      std::cerr << "cannot reach the server at " << addr << "\n";
      rc = 1;
    } else {
      const RemoteRegion& r = **remote;
      auto local = t->Allocate(kRegionBytes);
      std::byte* buf = (*local)->data();
      const Bytes msg(64, std::byte{7});
      uint64_t word = 0;
      std::vector<std::pair<std::string, StartFn>> lat_tests = {
          {"rpc64",
           [&](auto done) {
             ep->Call(1, msg, kT, [done = std::move(done)](Result<Bytes> res) { done(res.has_value()); });
           }},
          {"put8",
           [&](auto done) {
             ep->Put(&word, 8, r, 0, kT, [done = std::move(done)](Status s) { done(s.has_value()); });
           }},
          {"get8",
           [&](auto done) {
             ep->Get(buf, 8, r, 8, kT, [done = std::move(done)](Status s) { done(s.has_value()); });
           }},
          {"fadd",
           [&](auto done) {
             ep->FetchAdd(r, 16, 1, kT,
                          [done = std::move(done)](Result<uint64_t> v) { done(v.has_value()); });
           }},
          {"cas",
           [&](auto done) {
             ep->CompareSwap(r, 24, 0, 0, kT,
                             [done = std::move(done)](Result<uint64_t> v) { done(v.has_value()); });
           }},
      };
      for (auto& [name, fn] : lat_tests) {
        RunApp(fn, std::max(100, a.iters / 10));  // warm-up
        auto app = RunApp(fn, a.iters);
        auto chained = RunChained(fn, a.iters);
        std::printf("%s_app_p50_us %.2f\n%s_app_p99_us %.2f\n", name.c_str(), Percentile(app, 0.5),
                    name.c_str(), Percentile(app, 0.99));
        std::printf("%s_chained_p50_us %.2f\n%s_chained_p99_us %.2f\n", name.c_str(),
                    Percentile(chained, 0.5), name.c_str(), Percentile(chained, 0.99));
        std::fflush(stdout);
      }
      constexpr size_t kMiB = 1u << 20;
      const int n = std::max(64, a.iters / 20);
      StartFn put1m = [&](auto done) {
        ep->Put(buf, kMiB, r, 0, kT, [done = std::move(done)](Status s) { done(s.has_value()); });
      };
      StartFn get1m = [&](auto done) {
        ep->Get(buf + kMiB, kMiB, r, kMiB, kT,
                [done = std::move(done)](Status s) { done(s.has_value()); });
      };
      RunBandwidth(put1m, 16, 4, kMiB);
      std::printf("put1m_MBps %.0f\n", RunBandwidth(put1m, n, a.window, kMiB));
      RunBandwidth(get1m, 16, 4, kMiB);
      std::printf("get1m_MBps %.0f\n", RunBandwidth(get1m, n, a.window, kMiB));
      std::fflush(stdout);
    }
    t->Shutdown();
  }
  ::close(to_child[1]);  // the server exits on EOF
  int status = 0;
  ::waitpid(pid, &status, 0);
  return rc;
}

}  // namespace
}  // namespace fedfs::m2m

int main(int argc, char** argv) {
  fedfs::m2m::Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--server") a.server = true;
    else if (s.rfind("--tls=", 0) == 0) a.tls = s.substr(6);
    else if (s.rfind("--dev=", 0) == 0) a.dev = s.substr(6);
    else if (s.rfind("--iters=", 0) == 0) a.iters = std::stoi(s.substr(8));
    else if (s.rfind("--spin=", 0) == 0) a.spin_us = std::stoi(s.substr(7));
    else if (s.rfind("--window=", 0) == 0) a.window = std::stoi(s.substr(9));
    else if (s.rfind("--yield=", 0) == 0) a.yield = std::stoi(s.substr(8));
    else if (s == "--put-local") a.put_local = true;
    else {
      std::cerr << "usage: " << argv[0] << " [--tls=tcp] [--dev=lo] [--iters=20000] [--spin=us] [--window=4] [--yield=1] [--put-local]\n";
      return 2;
    }
  }
  fedfs::InitLogging(a.server ? "bench-server" : "bench-client", "warn");
  return a.server ? fedfs::m2m::RunServer(a) : fedfs::m2m::RunClient(a, "/proc/self/exe");
}
