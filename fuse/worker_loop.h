// The FUSE request loop: a bounded pool of worker threads that read requests
// from the session's /dev/fuse descriptor and hand them to libfuse
// (fuse_session_process_buf), in place of fuse_session_loop_mt.
//
// Why not fuse_session_loop_mt: its workers block in read(2), so every
// request wakes a sleeping thread, and on a virtual machine a wake-up of an
// idle core costs more than many requests take to serve. Here the descriptor
// is non-blocking; after a request arrives or is answered, one worker at a
// time keeps reading it (yielding the core between reads) for `spin` before
// it sleeps, so a stream of requests (a program's open, write, close, the
// kernel's lookups and permission checks before a create) finds a thread
// awake. The others sleep in epoll_wait with EPOLLEXCLUSIVE, so a request
// wakes one of them, not all. An idle daemon does not spin.
//
// Threads: Run() works on the caller's thread, starts more workers while all
// are busy (at most `threads`), and returns, after joining them, once Stop()
// was called (from any thread) or the kernel closed the connection. A worker
// serving a request finishes it first. The session's descriptor must stay
// open until Run() has returned: fuse_session_unmount closes it.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

struct fuse_session;

namespace fedfs::fuse {

struct WorkerLoopOptions {
  unsigned threads = 16;               // workers at most (>= 1)
  std::chrono::microseconds spin{50};  // 0: never spin
  // Called with the INIT request before libfuse handles it.
  std::function<void(const void* buf, size_t size)> on_init;
};

class WorkerLoop {
 public:
  WorkerLoop(struct fuse_session* se, const WorkerLoopOptions& options);
  ~WorkerLoop();
  WorkerLoop(const WorkerLoop&) = delete;
  WorkerLoop& operator=(const WorkerLoop&) = delete;

  // 0 when the loop was stopped or the connection closed, -errno when
  // reading the device failed.
  int Run();
  void Stop();
  // Changes `spin` (from any thread; workers see it at their next read).
  void SetSpin(std::chrono::microseconds spin);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedfs::fuse
