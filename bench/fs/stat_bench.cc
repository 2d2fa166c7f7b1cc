// fedfs-stat-bench: per-stat latency of a directory, for bench/dt_bench.sh.
// Stats the M files "stat-<i>" of --dir K times (passes in order, files in
// order within a pass), timing every stat, and prints one "name value" line
// each: stats, mean_us, p50_us, p99_us, max_us. With --create it first
// creates the M empty files (not timed).
//
// Each stat is fstatat(dirfd, name) relative to an open descriptor of --dir,
// so only the last component is looked up: on a FUSE mount, one LOOKUP in
// --dir (plus a GETATTR when attributes are not cached) per stat, which is
// what the directory table serves; the ancestors of --dir are not walked
// again. One warm-up pass (not timed) runs first, so that the first lookup of
// a directory (a directory-table miss, a dirmerge) is not in the figures.
// Single-threaded. Exit code 1 (with a message) if any operation fails:
// numbers are only printed for runs that did all their work.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fedfs-stat-bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

// The q-quantile of sorted `v` (nearest rank).
double Quantile(const std::vector<double>& v, double q) {
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size()) + 0.5);
  if (i > 0) --i;
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  long files = 100, passes = 100;
  bool create = false;
  CLI::App app{"fedfs-stat-bench: per-stat latency of M files stat-ed K times"};
  app.add_option("--dir", dir, "directory holding (or to hold) the files")->required();
  app.add_option("--files", files, "M files")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--passes", passes, "K stats of each")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--create", create, "create the files first");
  CLI11_PARSE(app, argc, argv);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) Die("open " + dir);
  std::vector<std::string> names(static_cast<size_t>(files));
  for (long i = 0; i < files; ++i) names[static_cast<size_t>(i)] = "stat-" + std::to_string(i);
  if (create) {
    for (const auto& n : names) {
      const int fd = ::openat(dfd, n.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
      if (fd < 0) Die("create " + dir + "/" + n);
      ::close(fd);
    }
  }
  struct stat st;
  for (const auto& n : names) {  // warm-up pass
    if (::fstatat(dfd, n.c_str(), &st, 0) != 0) Die("stat " + dir + "/" + n);
  }
  std::vector<double> us;
  us.reserve(static_cast<size_t>(files * passes));
  for (long p = 0; p < passes; ++p) {
    for (const auto& n : names) {
      const auto t = Clock::now();
      const int r = ::fstatat(dfd, n.c_str(), &st, 0);
      const auto d = Clock::now() - t;
      if (r != 0) Die("stat " + dir + "/" + n);
      us.push_back(std::chrono::duration<double, std::micro>(d).count());
    }
  }
  ::close(dfd);
  double sum = 0;
  for (double v : us) sum += v;
  std::sort(us.begin(), us.end());
  std::printf("stats %zu\n", us.size());
  std::printf("mean_us %.2f\n", sum / static_cast<double>(us.size()));
  std::printf("p50_us %.2f\n", Quantile(us, 0.50));
  std::printf("p99_us %.2f\n", Quantile(us, 0.99));
  std::printf("max_us %.2f\n", us.back());
  return 0;
}
