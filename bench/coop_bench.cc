// fedfs-coop-bench: what a block costs by each path of the file-data cache
// (docs/coopcache.md), over UCX (TCP on loopback; the peer runs in a child
// process), printed side by side in one run:
//
//   local hit     BlockCache::Get in this process
//   remote hit    PeerFetch::Fetch from the peer's registered cache (the
//                 bytes and the frame's trailer, two one-sided gets at
//                 once, and the check of the bytes)
//   raw get       one transport get of the same size from the same memory
//   holder read   RemoteNodeFs::Read of the same size from the peer's file
//                 service (its page cache; the file was just written)
//
// for 4 KiB and 256 KiB blocks: p50 and p99 latency, and the ratios the
// design names (remote hit / raw get: target within 1.5x). The paths take
// turns read by read (the machine's noise falls on all alike).
//
//   fedfs-coop-bench [--dir /var/tmp] [--reads 5000]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/executor.h"
#include "bench/loopback_ucx.h"
#include "common/logging.h"
#include "coopcache/block_cache.h"
#include "coopcache/peer_fetch.h"
#include "files/file_service.h"
#include "files/remote_node_fs.h"
#include "nodefs/local_node_fs.h"

using namespace fedfs;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kBlocks = 64;
const size_t kSizes[] = {4096, 256 << 10};

using bench::TOpts;
using bench::Ucx;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fedfs-coop-bench: %s\n", what.c_str());
  std::exit(1);
}

std::string Hex(const m2m::Bytes& b) {
  std::string s;
  char buf[3];
  for (std::byte x : b) {
    std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned>(x));
    s += buf;
  }
  return s;
}

m2m::Bytes Unhex(const std::string& s) {
  m2m::Bytes b;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    b.push_back(static_cast<std::byte>(std::stoul(s.substr(i, 2), nullptr, 16)));
  }
  return b;
}

// The peer: a cache per block size with kBlocks published blocks, and a file
// service on `root`; tells the parent where, then waits until it is done.
[[noreturn]] void Peer(const std::string& root, int out_fd, int stop_fd) {
  auto local = ns::LocalNodeFs::Open("peer", root);
  if (!local) Die(local.error().ToString());
  auto t = m2m::MakeUcxTransport(Ucx(), TOpts());
  if (!t) Die(t.error().ToString());
  auto pool = std::make_unique<ThreadPool>(2, "fs-server");
  auto svc = std::make_unique<ns::FileService>(ns::FileServiceOptions{}, t->get(), local->get(),
                                               pool.get());
  if (auto st = svc->RegisterHandlers(); !st) Die(st.error().ToString());
  auto addr = (*t)->Listen("127.0.0.1:0");
  if (!addr) Die(addr.error().ToString());
  std::ostringstream out;
  out << *addr << "\n";
  std::vector<std::unique_ptr<coop::BlockCache>> caches;
  std::vector<std::unique_ptr<coop::PeerFetch>> peers;
  std::mt19937_64 rng(3);
  for (size_t size : kSizes) {
    auto c = coop::BlockCache::Create({kBlocks * size, size, 25});
    if (!c) Die(c.error().ToString());
    auto p = coop::PeerFetch::Create(c->get(), t->get(), std::chrono::seconds(5));
    if (!p) Die(p.error().ToString());
    const auto d = (*p)->data_region(), g = (*p)->tags_region();
    out << size << " " << d.addr << " " << d.length << " " << Hex(d.rkey) << " " << g.addr << " "
        << g.length << " " << Hex(g.rkey) << "\n";
    std::vector<std::byte> bytes(size);
    for (size_t i = 0; i < kBlocks; ++i) {
      for (auto& x : bytes) x = std::byte(rng());
      auto s = (*c)->Reserve(1, i, (*c)->Generation(1));
      if (!s || !(*c)->Publish(*s, 1, i, (*c)->Generation(1), bytes, 0)) Die("publish");
      out << s->frame << " " << s->tag << "\n";
    }
    caches.push_back(std::move(*c));
    peers.push_back(std::move(*p));
  }
  const std::string text = out.str();
  if (write(out_fd, text.data(), text.size()) != ssize_t(text.size())) Die("pipe");
  close(out_fd);
  char ch;
  while (read(stop_fd, &ch, 1) > 0) {
  }
  (*t)->Shutdown();
  peers.clear();
  pool.reset();
  svc.reset();
  t->reset();
  std::_Exit(0);
}

struct Lat {
  double p50 = 0, p99 = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/var/tmp";
  size_t reads = 5000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--reads") reads = std::stoul(argv[i + 1]);
    else Die("unknown option " + a);
  }
  InitLogging("bench", "warn");
  std::string tmpl = dir + "/fedfs-coop-bench-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp");
  const std::string root = tmpl;
  {
    // The holder's file: kBlocks of the largest size, in its page cache.
    std::vector<char> bytes(kBlocks * kSizes[1], 'x');
    FILE* f = std::fopen((root + "/f").c_str(), "w");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) Die("file");
    std::fclose(f);
  }

  int out_pipe[2], stop_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(stop_pipe) != 0) Die("pipe");
  pid_t child = fork();  // before any UCX state exists in this process
  if (child < 0) Die("fork");
  if (child == 0) {
    close(out_pipe[0]);
    close(stop_pipe[1]);
    Peer(root, out_pipe[1], stop_pipe[0]);
  }
  close(out_pipe[1]);
  close(stop_pipe[0]);
  std::string text;
  char c;
  while (read(out_pipe[0], &c, 1) == 1) text += c;
  close(out_pipe[0]);
  std::istringstream in(text);
  std::string addr;
  if (!(in >> addr)) Die("the peer did not start");

  struct Row {
    size_t size;
    Lat local, remote, raw, holder;
  };
  std::vector<Row> rows;
  {
    auto t = m2m::MakeUcxTransport(Ucx(), TOpts());
    if (!t) Die(t.error().ToString());
    auto my = (*t)->Listen("127.0.0.1:0");
    if (!my) Die(my.error().ToString());
    auto ep = (*t)->GetEndpoint(addr);
    ns::RemoteNodeFsOptions ro;
    ro.local_node = "bench";
    ro.local_address = *my;
    ns::RemoteNodeFs holder("peer", ep, t->get(), ro);
    auto h = holder.Open(ns::Cred{}, "/f", O_RDONLY);
    if (!h) Die("open: " + h.error().ToString());
    std::mt19937_64 rng(1);
    for (size_t size : kSizes) {
      size_t block;
      coop::PeerCopy copy;
      copy.addr = addr;
      std::string dk, gk;
      if (!(in >> block >> copy.data.addr >> copy.data.length >> dk >> copy.tags.addr >>
            copy.tags.length >> gk) ||
          block != size) {
        Die("bad peer description");
      }
      copy.data.rkey = Unhex(dk);
      copy.tags.rkey = Unhex(gk);
      copy.block_size = size;
      copy.length = static_cast<uint32_t>(size);
      std::vector<std::pair<uint32_t, uint64_t>> frames(kBlocks);
      for (auto& [fr, tag] : frames) in >> fr >> tag;
      auto mine = coop::BlockCache::Create({kBlocks * size, size, 25});
      if (!mine) Die(mine.error().ToString());
      auto fetch = coop::PeerFetch::Create(mine->get(), t->get(), std::chrono::seconds(5));
      if (!fetch) Die(fetch.error().ToString());
      std::vector<std::byte> dst(size);
      for (size_t i = 0; i < kBlocks; ++i) (*mine)->Put(2, i, (*mine)->Generation(2), dst);
      auto region = ep->Import(copy.data);
      if (!region) Die("import: " + region.error().ToString());
      Row row{size, {}, {}, {}, {}};
      auto pick = [&] { return rng() % kBlocks; };
      // Warm-up: connections, imports, page cache.
      for (size_t i = 0; i < 50; ++i) {
        const size_t b = pick();
        copy.frame = frames[b].first;
        copy.tag = frames[b].second;
        if (!(*fetch)->Fetch(copy, dst.data())) Die("fetch");
        if (!holder.Read(h->handle, b * size, dst)) Die("holder read");
      }
      // The paths take turns, one read each, so that the machine's noise
      // falls on all of them alike.
      std::vector<std::function<void()>> paths{
          [&] {
            if (!(*mine)->Get(2, pick(), dst)) Die("local miss");
          },
          [&] {
            const size_t b = pick();
            copy.frame = frames[b].first;
            copy.tag = frames[b].second;
            if (auto st = (*fetch)->Fetch(copy, dst.data()); !st) {
              Die("fetch: " + st.error().ToString());
            }
          },
          [&] {
            const uint64_t off = uint64_t{frames[pick()].first} * size;
            if (!m2m::GetSync(*ep, dst.data(), size, **region, off, std::chrono::seconds(5))) {
              Die("get");
            }
          },
          [&] {
            auto n = holder.Read(h->handle, pick() * size, dst);
            if (!n || *n != size) Die("holder read");
          },
      };
      std::vector<std::vector<double>> us(paths.size());
      for (size_t i = 0; i < reads; ++i) {
        for (size_t p = 0; p < paths.size(); ++p) {
          const auto t0 = Clock::now();
          paths[p]();
          us[p].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
      }
      Lat* out[] = {&row.local, &row.remote, &row.raw, &row.holder};
      for (size_t p = 0; p < paths.size(); ++p) {
        std::sort(us[p].begin(), us[p].end());
        *out[p] = Lat{us[p][us[p].size() / 2], us[p][us[p].size() * 99 / 100]};
      }
      rows.push_back(row);
    }
    holder.Release(h->handle).IgnoreError();
    (*t)->Shutdown();
  }
  close(stop_pipe[1]);
  int status = 0;
  waitpid(child, &status, 0);
  std::filesystem::remove_all(root);

  std::printf("fedfs-coop-bench: %zu reads per row, UCX tcp/lo, peer in a child process\n",
              reads);
  std::printf("%-10s %-14s %10s %10s\n", "block", "path", "p50 us", "p99 us");
  for (const Row& r : rows) {
    const std::string b = std::to_string(r.size >> 10) + " KiB";
    auto line = [&](const char* path, const Lat& l) {
      std::printf("%-10s %-14s %10.1f %10.1f\n", b.c_str(), path, l.p50, l.p99);
    };
    line("local hit", r.local);
    line("remote hit", r.remote);
    line("raw get", r.raw);
    line("holder read", r.holder);
    std::printf("%-10s %-14s %9.2fx %9.2fx   (target p50 <= 1.5x)\n", b.c_str(),
                "remote/raw", r.remote.p50 / r.raw.p50, r.remote.p99 / r.raw.p99);
    std::printf("%-10s %-14s %9.2fx %9.2fx\n", b.c_str(), "remote/holder",
                r.remote.p50 / r.holder.p50, r.remote.p99 / r.holder.p99);
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
