// fedfs-meta-bench: the metadata loop of bench/fs_bench.sh. In a fresh
// subdirectory of --dir it creates N empty files, stats each, reads the
// directory (--readdir-passes times), renames each, and unlinks each, timing
// every phase, and prints one "name value" line per phase (operations or
// directory entries per second). Single-threaded, so it measures per-operation
// latency of the file system under test, like a shell loop without the fork.
// Exit code 1 (with a message) if any operation fails: numbers are only
// printed for runs that did all their work.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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
  std::fprintf(stderr, "fedfs-meta-bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

// Where phase names go (--marker); -1: nowhere.
int marker_fd = -1;

void Mark(const char* phase) {
  if (marker_fd < 0) return;
  const std::string line = std::string("fedfs-meta-bench ") + phase + "\n";
  if (::write(marker_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    Die("write to the marker file");
  }
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}


}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  long files = 10000, passes = 5;
  CLI::App app{"fedfs-meta-bench: create/stat/readdir/rename/unlink ops/s over N files"};
  app.add_option("--dir", dir, "directory to work in (a subdirectory is made)")->required();
  app.add_option("--files", files, "N files")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--readdir-passes", passes, "readdir passes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::string marker;
  app.add_option("--marker", marker, "file to write each phase's name to as it starts");
  CLI11_PARSE(app, argc, argv);
  if (!marker.empty()) {
    marker_fd = ::open(marker.c_str(), O_WRONLY | O_CLOEXEC);
    if (marker_fd < 0) Die("open " + marker);
  }
  const std::string base = dir + "/meta-bench-" + std::to_string(::getpid());
  if (::mkdir(base.c_str(), 0755) != 0) Die("mkdir " + base);
  std::vector<std::string> a(files), b(files);
  for (long i = 0; i < files; ++i) {
    a[i] = base + "/file-" + std::to_string(i);
    b[i] = base + "/renamed-" + std::to_string(i);
  }

  Mark("create");
  auto t = Clock::now();
  for (long i = 0; i < files; ++i) {
    const int fd = ::open(a[i].c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) Die("create " + a[i]);
    ::close(fd);
  }
  std::printf("create_ops_s %.0f\n", files / Seconds(t));

  Mark("stat");
  t = Clock::now();
  struct stat st;
  for (long i = 0; i < files; ++i) {
    if (::stat(a[i].c_str(), &st) != 0) Die("stat " + a[i]);
  }
  std::printf("stat_ops_s %.0f\n", files / Seconds(t));

  Mark("readdir");
  t = Clock::now();
  long entries = 0;
  for (long p = 0; p < passes; ++p) {
    DIR* d = ::opendir(base.c_str());
    if (d == nullptr) Die("opendir " + base);
    long n = 0;
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
    if (n != files + 2) {
      errno = EIO;
      Die("readdir saw " + std::to_string(n) + " entries, expected " + std::to_string(files + 2));
    }
    entries += n;
  }
  std::printf("readdir_entries_s %.0f\n", entries / Seconds(t));

  Mark("rename");
  t = Clock::now();
  for (long i = 0; i < files; ++i) {
    if (::rename(a[i].c_str(), b[i].c_str()) != 0) Die("rename " + a[i]);
  }
  std::printf("rename_ops_s %.0f\n", files / Seconds(t));

  Mark("unlink");
  t = Clock::now();
  for (long i = 0; i < files; ++i) {
    if (::unlink(b[i].c_str()) != 0) Die("unlink " + b[i]);
  }
  std::printf("unlink_ops_s %.0f\n", files / Seconds(t));
  Mark("end");
  if (::rmdir(base.c_str()) != 0) Die("rmdir " + base);
  return 0;
}
