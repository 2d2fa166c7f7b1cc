// fedfs-shared-bench: one worker of bench/shared_dir_bench.sh, one phase.
// Works on the files "<prefix>-<k>" (k < --files) of --dir, doing one
// operation per file, in order:
//   create  open(O_CREAT | O_EXCL | O_WRONLY) and close (an empty file)
//   stat    stat
//   open    open(O_RDONLY) and close
//   remove  unlink
// The script starts one worker per node, all waiting at a barrier: with
// --go, each opens that FIFO (the script holds it open for writing, so the
// open does not block), says it is ready by creating the --ready file, and
// blocks reading the FIFO until the script closes its end, which releases
// every worker at once (end of file). The paths are built before the
// barrier, so only the system calls are timed.
// Prints one line: "ops <n> start <t0> end <t1>", t0 and t1 in seconds of
// CLOCK_MONOTONIC (one clock for every process of the machine), t0 just
// after the release and t1 after the last operation, so that the script can
// time the phase from the first worker's start to the slowest one's end.
// Exit code 1 (with a message) if any operation fails: numbers are only
// printed for runs that did all their work.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fedfs-shared-bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

double Now() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Waits at the barrier: see the comment at the top.
void Barrier(const std::string& go, const std::string& ready) {
  int fd = -1;
  if (!go.empty()) {
    fd = ::open(go.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Die("open " + go);
  }
  if (!ready.empty()) {
    const int r = ::open(ready.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (r < 0) Die("create " + ready);
    ::close(r);
  }
  if (fd < 0) return;
  char c;
  ssize_t n;
  while ((n = ::read(fd, &c, 1)) != 0) {
    if (n < 0 && errno != EINTR) Die("read " + go);
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  std::string phase, dir, prefix, go, ready;
  long files = 2000;
  CLI::App app{"fedfs-shared-bench: one phase (create/stat/open/remove) over N files"};
  app.add_option("--phase", phase, "create, stat, open or remove")
      ->required()
      ->check(CLI::IsMember({"create", "stat", "open", "remove"}));
  app.add_option("--dir", dir, "directory of the files")->required();
  app.add_option("--prefix", prefix, "the files are <prefix>-<k>")->required();
  app.add_option("--files", files, "N files")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--go", go, "FIFO to wait on before starting (end of file: go)");
  app.add_option("--ready", ready, "file to create once waiting at the barrier");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> paths(files);
  for (long k = 0; k < files; ++k) paths[k] = dir + "/" + prefix + "-" + std::to_string(k);

  const char op = phase[0];  // c(reate), s(tat), o(pen), r(emove)
  Barrier(go, ready);
  const double t0 = Now();
  struct stat st;
  for (const std::string& p : paths) {
    if (op == 'c') {
      const int fd = ::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
      if (fd < 0) Die("create " + p);
      ::close(fd);
    } else if (op == 's') {
      if (::stat(p.c_str(), &st) != 0) Die("stat " + p);
    } else if (op == 'o') {
      const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) Die("open " + p);
      ::close(fd);
    } else {
      if (::unlink(p.c_str()) != 0) Die("unlink " + p);
    }
  }
  const double t1 = Now();
  std::printf("ops %ld start %.9f end %.9f\n", files, t0, t1);
  return 0;
}
