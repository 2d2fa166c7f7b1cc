#include "tools/migrate_job.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <stop_token>
#include <thread>
#include <nlohmann/json.hpp>

#include "common/path.h"
#include "control/client.h"
#include "control/schema.h"

namespace fedfs::tools {
namespace {

namespace control = fedfs::control;
using Json = nlohmann::json;

std::atomic<bool> g_interrupted{false};

void OnInterrupt(int) {
  g_interrupted.store(true);
  ::signal(SIGINT, SIG_DFL);  // a second ^C ends fedfsctl at once
}

struct File {
  std::string path;
  std::string from;
  uint64_t bytes = 0;
  std::string error;  // from the plan or the move
  bool done = false;
};

struct Walk {
  std::vector<File> files;
  size_t already = 0;  // regular files found on `to` already
  size_t other = 0;    // entries that are not regular files nor directories
};

template <class R>
Result<R> AskFor(const std::string& socket, const control::Request& q, std::chrono::seconds limit) {
  auto reply = control::Ask(socket, q, limit);
  if (!reply) return Err(reply.error());
  return control::DecodeReply<R>(*reply);
}

// The type of `path` ("dir", "file", ...) as its parent's listing has it.
Result<std::string> TypeOf(const std::string& socket, const std::string& path) {
  if (path == "/") return std::string("dir");
  const std::string parent(ns::ParentPath(path));
  auto l = AskFor<control::ListReply>(socket, {std::string(control::kList.name), parent, ""},
                                      std::chrono::seconds(10));
  if (!l) return Err(l.error());
  const std::string name(ns::BaseName(path));
  for (const auto& e : l->entries) {
    if (e.name == name) return e.type;
  }
  return Err(ENOENT, path + ": no such file or directory");
}

Status Expand(const std::string& socket, const std::string& dir, const std::string& to, Walk* w) {
  auto l = AskFor<control::ListReply>(socket, {std::string(control::kList.name), dir, ""},
                                      std::chrono::seconds(10));
  if (!l) return Err(l.error());
  for (const auto& e : l->entries) {
    const std::string p = dir == "/" ? "/" + e.name : dir + "/" + e.name;
    if (e.type == "dir") {
      if (auto s = Expand(socket, p, to, w); !s) return s;
    } else if (e.type == "file") {
      if (e.holders.size() == 1 && e.holders[0] == to) {
        ++w->already;
      } else {
        w->files.push_back(File{p, e.holders.empty() ? "" : e.holders[0], 0, "", false});
      }
    } else {
      ++w->other;
    }
  }
  return Ok();
}

std::string Human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char b[32];
  std::snprintf(b, sizeof b, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return b;
}

class Bar {
 public:
  explicit Bar(bool on) : on_(on), t0_(std::chrono::steady_clock::now()) {}
  void Clear() const {
    if (on_) std::fputs("\r\033[K", stderr);
  }
  void Draw(size_t done, size_t files, uint64_t bytes, uint64_t total, const std::string& now) const {
    if (!on_) return;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const double rate = secs > 0 ? static_cast<double>(bytes) / secs : 0;
    constexpr int kWidth = 24;
    const double frac = total > 0 ? static_cast<double>(bytes) / static_cast<double>(total)
                                  : (files > 0 ? static_cast<double>(done) / static_cast<double>(files) : 1);
    const int fill = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(fill), '=');
    bar.resize(kWidth, ' ');
    std::string eta = "-";
    if (rate > 0 && total >= bytes) {
      eta = std::to_string(static_cast<long long>(static_cast<double>(total - bytes) / rate)) + " s";
    }
    std::fprintf(stderr, "\r\033[K[%s] %zu/%zu files  %s/%s  %s/s  ETA %s  %s", bar.c_str(), done,
                 files, Human(static_cast<double>(bytes)).c_str(),
                 Human(static_cast<double>(total)).c_str(), Human(rate).c_str(), eta.c_str(),
                 now.c_str());
    std::fflush(stderr);
  }

 private:
  const bool on_;
  const std::chrono::steady_clock::time_point t0_;
};

void PrintFile(const MigrateJob& job, const File& f, size_t done, size_t files) {
  if (job.json) {
    Json j{{"path", f.path}, {"from", f.from}, {"to", job.to}, {"bytes", f.bytes},
           {"done", done},   {"files", files}};
    if (!f.error.empty()) j["error"] = f.error;
    std::printf("%s\n", j.dump().c_str());
  } else if (!f.error.empty()) {
    std::fprintf(stderr, "fedfsctl: %s\n", f.error.c_str());
  } else {
    std::printf("%s %s from %s to %s (%llu bytes)\n", job.dry_run ? "would move" : "moved",
                f.path.c_str(), f.from.c_str(), job.to.c_str(),
                static_cast<unsigned long long>(f.bytes));
  }
  std::fflush(stdout);
}

}  // namespace

int RunMigrateJob(const MigrateJob& job) {
  // 1. What to move: files as given, directories walked.
  Walk w;
  bool walked = false;
  for (const std::string& given : job.paths) {
    const std::string p = control::NormalizeControlPath(given);
    auto type = TypeOf(job.socket, p);
    if (type && *type == "dir") {
      walked = true;
      if (auto s = Expand(job.socket, p, job.to, &w); !s) {
        std::fprintf(stderr, "fedfsctl: %s\n", s.error().context.c_str());
        return 1;
      }
    } else {
      // A file, or what the daemon refuses with its reason (below).
      w.files.push_back(File{p, "", 0, "", false});
    }
  }
  const size_t n = w.files.size();
  const bool summary = n != 1 || walked;
  if (walked && n == 0) {
    std::fprintf(stderr, "fedfsctl: no file to move to %s (%zu there already, %zu not regular files)\n",
                 job.to.c_str(), w.already, w.other);
    return w.already > 0 ? 0 : 2;
  }

  // 2. Each move checked at its file's node: its size, or why not.
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sa.sa_flags = SA_RESTART;  // the move asked meanwhile is answered
  ::sigaction(SIGINT, &sa, nullptr);
  // On a terminal, also for one file: the bar advances within a file as
  // its copy does (migrate_progress).
  const Bar bar(!job.json && ::isatty(STDERR_FILENO) == 1);
  uint64_t total = 0;
  for (File& f : w.files) {
    control::Request q{std::string(control::kMigratePlan.name), f.path, job.to};
    auto plan = AskFor<control::MigratePlanReply>(job.socket, q, std::chrono::seconds(10));
    if (!plan) {
      f.error = plan.error().context;
      continue;
    }
    f.from = plan->from;
    f.bytes = plan->bytes;
    total += f.bytes;
  }

  // 3. The moves, one at a time.
  size_t done = 0, failed = 0;
  uint64_t moved_bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) {
    File& f = w.files[i];
    if (g_interrupted.load()) break;
    if (f.error.empty() && !job.dry_run) {
      bar.Draw(done, n, moved_bytes, total, f.path);
      control::Request q{std::string(control::kMigrate.name), f.path, job.to};
      q.max_rate = job.max_rate;
      // ^C during the move cancels it (the daemon's "cancel"); the move
      // then answers ECANCELED, unless it had committed. Meanwhile the bar
      // shows how far the copy of the file is, asked every 250 ms.
      std::jthread canceller([&, path = f.path](std::stop_token stop) {
        for (int tick = 1; !stop.stop_requested(); ++tick) {
          if (g_interrupted.load()) {
            (void)control::Ask(job.socket, {std::string(control::kCancel.name), path, ""});
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          if (tick % 5 != 0 || stop.stop_requested()) continue;
          auto p = AskFor<control::MigrateProgressReply>(
              job.socket, {std::string(control::kMigrateProgress.name), path, ""},
              std::chrono::seconds(2));
          if (p && !stop.stop_requested()) bar.Draw(done, n, moved_bytes + p->copied, total, path);
        }
      });
      auto r = AskFor<control::MigrateReply>(job.socket, q, std::chrono::seconds(0));
      canceller.request_stop();
      if (r) {
        f.from = r->from;
        f.bytes = r->bytes;
      } else {
        f.error = r.error().context;
      }
    }
    ++done;
    if (f.error.empty()) {
      moved_bytes += f.bytes;
    } else {
      ++failed;
    }
    bar.Clear();
    PrintFile(job, f, done, n);
  }
  bar.Clear();
  ::signal(SIGINT, SIG_DFL);
  const bool interrupted = done < n;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (summary) {
    if (job.json) {
      Json j{{"files", n},          {"done", done - failed}, {"failed", failed},
             {"not_done", n - done}, {"skipped_there", w.already}, {"skipped_other", w.other},
             {"bytes", moved_bytes}, {"seconds", secs},      {"dry_run", job.dry_run}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s %zu of %zu file(s), %s in %.1f s; %zu failed; %zu already on %s; %zu not regular files%s\n",
                  job.dry_run ? "would move" : "moved", done - failed, n,
                  Human(static_cast<double>(moved_bytes)).c_str(), secs, failed, w.already,
                  job.to.c_str(), w.other, interrupted ? "; interrupted" : "");
    }
  }
  if (interrupted) {
    std::fprintf(stderr, "fedfsctl: interrupted: %zu file(s) not moved\n", n - done);
  }
  return failed > 0 || interrupted ? 1 : 0;
}

}  // namespace fedfs::tools
