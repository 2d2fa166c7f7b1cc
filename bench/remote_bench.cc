// fedfs-remote-bench: remote file I/O through RemoteNodeFs over UCX (TCP on
// loopback; the FileService + LocalNodeFs server runs in a child process)
// versus LocalNodeFs directly, on the same directory.
//
// Rows: sequential 1 MiB writes and reads (MB/s over --mib MiB; the file is
// in the page cache), 4 KiB random reads (p50/p99 latency, warm cache), each
// for local, remote with 4 KiB inline in the RPC, and remote with 4 KiB
// through a slot (one-sided Put). Prints the ratio remote/local.
//
//   fedfs-remote-bench [--dir /var/tmp] [--mib 256] [--reads 20000]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/executor.h"
#include "bench/loopback_ucx.h"
#include "common/logging.h"
#include "files/file_service.h"
#include "nodefs/local_node_fs.h"
#include "files/remote_node_fs.h"

using namespace fedfs;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

using bench::TOpts;
using bench::Ucx;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fedfs-remote-bench: %s\n", what.c_str());
  std::exit(1);
}

// The child: serve `root` until the parent closes the pipe.
[[noreturn]] void Server(const std::string& root, int addr_fd, int stop_fd) {
  auto local = ns::LocalNodeFs::Open("server", root);
  if (!local) Die(local.error().ToString());
  auto t = m2m::MakeUcxTransport(Ucx(), TOpts());
  if (!t) Die(t.error().ToString());
  auto pool = std::make_unique<ThreadPool>(4, "fs-server");
  auto svc = std::make_unique<ns::FileService>(ns::FileServiceOptions{}, t->get(), local->get(),
                                               pool.get());
  if (auto st = svc->RegisterHandlers(); !st) Die(st.error().ToString());
  auto addr = (*t)->Listen("127.0.0.1:0");
  if (!addr) Die(addr.error().ToString());
  std::string line = *addr + "\n";
  if (write(addr_fd, line.data(), line.size()) != ssize_t(line.size())) Die("pipe");
  close(addr_fd);
  char c;
  while (read(stop_fd, &c, 1) > 0) {
  }
  (*t)->Shutdown();
  pool.reset();
  svc.reset();
  t->reset();
  std::_Exit(0);
}

struct Row {
  double write_mbs = 0, read_mbs = 0, p50_us = 0, p99_us = 0;
};

Row Measure(ns::NodeFs& fs, const std::string& name, size_t mib, size_t reads) {
  ns::Cred root{};
  Row row;
  auto f = fs.Create(root, name, O_RDWR | O_TRUNC, 0644);
  if (!f) Die("create: " + f.error().ToString());
  std::vector<std::byte> buf(1u << 20);
  std::mt19937_64 rng(1);
  for (auto& b : buf) b = std::byte(rng());
  auto t0 = Clock::now();
  for (size_t i = 0; i < mib; ++i) {
    auto w = fs.Write(f->handle, uint64_t(i) << 20, buf);
    if (!w || *w != buf.size()) Die("write failed");
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  row.write_mbs = mib * 1.048576 / s;
  t0 = Clock::now();
  for (size_t i = 0; i < mib; ++i) {
    auto r = fs.Read(f->handle, uint64_t(i) << 20, buf);
    if (!r || *r != buf.size()) Die("read failed");
  }
  s = std::chrono::duration<double>(Clock::now() - t0).count();
  row.read_mbs = mib * 1.048576 / s;
  std::vector<double> lat;
  lat.reserve(reads);
  std::vector<std::byte> small(4096);
  const uint64_t blocks = (uint64_t(mib) << 20) / 4096;
  for (size_t i = 0; i < reads; ++i) {
    const uint64_t off = (rng() % blocks) * 4096;
    auto a = Clock::now();
    auto r = fs.Read(f->handle, off, small);
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    if (!r || *r != small.size()) Die("random read failed");
  }
  std::sort(lat.begin(), lat.end());
  row.p50_us = lat[lat.size() / 2];
  row.p99_us = lat[lat.size() * 99 / 100];
  // Measured already; the temporary export root is removed at exit.
  fs.Release(f->handle).IgnoreError();
  fs.Unlink(root, name).IgnoreError();
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/var/tmp";
  size_t mib = 256, reads = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--mib") mib = std::stoul(argv[i + 1]);
    else if (a == "--reads") reads = std::stoul(argv[i + 1]);
    else Die("unknown option " + a);
  }
  InitLogging("bench", "warn");
  std::string tmpl = dir + "/fedfs-remote-bench-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp");
  const std::string root = tmpl;

  int addr_pipe[2], stop_pipe[2];
  if (pipe(addr_pipe) != 0 || pipe(stop_pipe) != 0) Die("pipe");
  pid_t child = fork();  // before any UCX state exists in this process
  if (child < 0) Die("fork");
  if (child == 0) {
    close(addr_pipe[0]);
    close(stop_pipe[1]);
    Server(root, addr_pipe[1], stop_pipe[0]);
  }
  close(addr_pipe[1]);
  close(stop_pipe[0]);
  std::string addr;
  char c;
  while (read(addr_pipe[0], &c, 1) == 1 && c != '\n') addr += c;
  close(addr_pipe[0]);
  if (addr.empty()) Die("the server did not start");

  Row local_row, inline_row, slot_row;
  {
    auto local = ns::LocalNodeFs::Open("local", root);
    if (!local) Die(local.error().ToString());
    local_row = Measure(**local, "/local.dat", mib, reads);
  }
  {
    auto t = m2m::MakeUcxTransport(Ucx(), TOpts());
    if (!t) Die(t.error().ToString());
    auto my = (*t)->Listen("127.0.0.1:0");
    if (!my) Die(my.error().ToString());
    for (size_t inline_max : {size_t{4096}, size_t{0}}) {
      ns::RemoteNodeFsOptions o;
      o.local_node = "bench";
      o.local_address = *my;
      o.inline_max = inline_max;
      ns::RemoteNodeFs remote("server", (*t)->GetEndpoint(addr), t->get(), o);
      (inline_max ? inline_row : slot_row) = Measure(remote, "/remote.dat", mib, reads);
    }
    (*t)->Shutdown();
  }
  close(stop_pipe[1]);
  int status = 0;
  waitpid(child, &status, 0);
  std::filesystem::remove_all(root);

  std::printf("fedfs-remote-bench: %zu MiB sequential, %zu random 4 KiB reads, UCX tcp/lo, %s\n",
              mib, reads, root.c_str());
  std::printf("%-28s %12s %12s %12s %12s\n", "", "seq-write", "seq-read", "4k-rand p50",
              "4k-rand p99");
  auto print = [&](const char* name, const Row& r) {
    std::printf("%-28s %9.0f MB/s %7.0f MB/s %9.1f us %9.1f us\n", name, r.write_mbs, r.read_mbs,
                r.p50_us, r.p99_us);
  };
  print("local (LocalNodeFs)", local_row);
  print("remote, 4 KiB inline", inline_row);
  print("remote, 4 KiB via slot", slot_row);
  std::printf("%-28s %11.2fx %11.2fx %11.2fx %11.2fx\n", "ratio remote(inline)/local",
              inline_row.write_mbs / local_row.write_mbs, inline_row.read_mbs / local_row.read_mbs,
              inline_row.p50_us / local_row.p50_us, inline_row.p99_us / local_row.p99_us);
  std::printf("%-28s %12s %12s %11.2fx %11.2fx\n", "4k latency slot/inline", "", "",
              slot_row.p50_us / inline_row.p50_us, slot_row.p99_us / inline_row.p99_us);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
