// Executors: where work that may block runs.
//
// Transport handlers and callbacks must not block (m2m/transport.h); work that
// does system calls or waits is posted to an Executor. The daemon uses a
// ThreadPool; the simulator uses InlineExecutor (work runs at once on the
// simulation thread, which is fine for its in-memory file systems).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fedfs {

using Task = std::move_only_function<void()>;

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs `task` some time later (or at once for inline executors). A task
  // posted after the executor began shutting down is dropped (destroyed on
  // the poster's thread).
  virtual void Post(Task task) = 0;
};

class InlineExecutor final : public Executor {
 public:
  void Post(Task task) override { task(); }
};

// A fixed pool of threads taking tasks in FIFO order. Thread-safe.
// The destructor runs the tasks already queued, then joins.
class ThreadPool final : public Executor {
 public:
  ThreadPool(size_t threads, std::string name);
  ~ThreadPool() override;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Post(Task task) override;

 private:
  void Run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  std::vector<std::thread> threads_;
  std::string name_;
};

}  // namespace fedfs
