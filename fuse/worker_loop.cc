#define FUSE_USE_VERSION 312
#include "fuse/worker_loop.h"

#include <fuse_lowlevel.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/thread_name.h"
#include "fuse/fuse_internal.h"

namespace fedfs::fuse {
namespace {

// What libfuse reads with: the largest request (a write of 256 pages) and
// its header.
size_t BufferSize() { return 256 * static_cast<size_t>(getpagesize()) + 4096; }

}  // namespace

class WorkerLoop::Impl {
 public:
  Impl(fuse_session* se, const WorkerLoopOptions& o)
      : se_(se), fd_(fuse_session_fd(se)), max_(std::max(1u, o.threads)),
        spin_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(o.spin).count()),
        on_init_(o.on_init),
        stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
        stop_fd_errno_(errno) {}
  ~Impl() {
    if (stop_fd_ >= 0) ::close(stop_fd_);
  }

  // Ends every worker: asked to, the session is over, or reading the device
  // failed.
  void Stop(int rc = 0) {
    if (rc != 0) rc_.store(rc);
    fuse_session_exit(se_);
    uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(stop_fd_, &one, sizeof one);
  }

  void SetSpin(std::chrono::microseconds spin) {
    spin_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(spin).count());
  }

  int Run() {
    if (stop_fd_ < 0) return Fail(stop_fd_errno_, "eventfd");
    const int fl = ::fcntl(fd_, F_GETFL);
    if (fl < 0 || ::fcntl(fd_, F_SETFL, fl | O_NONBLOCK) != 0) return Fail(errno, "O_NONBLOCK");
    {
      std::lock_guard lk(mu_);
      started_ = 1;
    }
    Work(/*first=*/true);
    // The session has exited now: Took() starts no more workers.
    std::vector<std::thread> threads;
    {
      std::lock_guard lk(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
    return rc_.load();
  }

 private:
  int Fail(int e, const char* what) {
    Log()->error("FUSE loop: {}: {}", what, std::strerror(e));
    return -e;
  }

  // A request was taken: if no other worker is left to take the next one,
  // start another (up to max_).
  void Took() {
    if (busy_.fetch_add(1) + 1 < started_.load()) return;
    std::lock_guard lk(mu_);
    if (fuse_session_exited(se_) || started_.load() >= max_ || busy_.load() < started_.load()) {
      return;
    }
    started_.fetch_add(1);
    try {
      threads_.emplace_back([this] { Work(/*first=*/false); });
      NameThread(threads_.back(), "fuse-dev");
    } catch (const std::system_error& e) {  // no thread now: the others go on
      started_.fetch_sub(1);
      Log()->warn("FUSE loop: cannot start another worker: {}", e.what());
    }
  }

  // A worker that cannot start (no descriptor, no memory) ends the loop if
  // it is the first, and only itself otherwise.
  void SetupFailed(bool first, int e, const char* what) {
    const int rc = Fail(e, what);
    if (first) {
      Stop(rc);
    } else {
      started_.fetch_sub(1);
    }
  }

  void Work(bool first) {
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return SetupFailed(first, errno, "epoll_create1");
    epoll_event dev{};
    dev.events = EPOLLIN | EPOLLEXCLUSIVE;
    dev.data.fd = fd_;
    epoll_event stop{};
    stop.events = EPOLLIN;
    stop.data.fd = stop_fd_;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd_, &dev) != 0 ||
        ::epoll_ctl(ep, EPOLL_CTL_ADD, stop_fd_, &stop) != 0) {
      const int e = errno;
      ::close(ep);
      return SetupFailed(first, e, "epoll_ctl");
    }
    const size_t size = BufferSize();
    std::unique_ptr<char, decltype(&std::free)> mem(static_cast<char*>(std::malloc(size)),
                                                     &std::free);
    if (!mem) {
      ::close(ep);
      return SetupFailed(first, ENOMEM, "request buffer");
    }
    bool spinning = false;  // this worker holds spinner_
    while (!fuse_session_exited(se_)) {
      const ssize_t n = ::read(fd_, mem.get(), size);
      if (n < 0) {
        const int e = errno;
        if (e == EAGAIN) {
          const int64_t spin_ns = spin_ns_.load(std::memory_order_relaxed);
          if (spin_ns > 0 && NowNs() - last_ns_.load(std::memory_order_relaxed) < spin_ns &&
              (spinning || !spinner_.exchange(true))) {
            spinning = true;
            ::sched_yield();
            continue;
          }
          if (spinning) spinner_.store(false);
          spinning = false;
          epoll_event ev;
          ::epoll_wait(ep, &ev, 1, -1);  // EINTR: read again
          continue;
        }
        if (e == EINTR || e == ENOENT) continue;  // ENOENT: the request was interrupted
        if (e == ENODEV || e == ECONNABORTED) {   // unmounted or aborted
          Stop(0);
          break;
        }
        Stop(Fail(e, "reading /dev/fuse"));
        break;
      }
      if (spinning) spinner_.store(false);
      spinning = false;
      if (static_cast<size_t>(n) < 40 /* sizeof(struct fuse_in_header) */) {
        Stop(Fail(EIO, "short read of /dev/fuse"));
        break;
      }
      Took();
      uint32_t opcode;
      std::memcpy(&opcode, mem.get() + 4, sizeof opcode);
      if (opcode == 26 /* FUSE_INIT */ && on_init_) on_init_(mem.get(), static_cast<size_t>(n));
      fuse_buf buf{};
      buf.size = static_cast<size_t>(n);
      buf.mem = mem.get();
      fuse_session_process_buf(se_, &buf);
      busy_.fetch_sub(1);
      last_ns_.store(NowNs(), std::memory_order_relaxed);
    }
    if (spinning) spinner_.store(false);
    ::close(ep);
  }

  fuse_session* const se_;
  const int fd_;
  const unsigned max_;
  std::atomic<int64_t> spin_ns_;
  const std::function<void(const void*, size_t)> on_init_;
  const int stop_fd_;  // readable once Stop() was called
  const int stop_fd_errno_;
  std::atomic<int> rc_{0};
  std::atomic<unsigned> started_{0};  // workers started (this thread included)
  std::atomic<unsigned> busy_{0};     // workers serving a request
  std::atomic<bool> spinner_{false};  // a worker is spinning
  std::atomic<int64_t> last_ns_{0};   // a request was last answered
  std::mutex mu_;                     // threads_, starting a worker
  std::vector<std::thread> threads_;
};

WorkerLoop::WorkerLoop(fuse_session* se, const WorkerLoopOptions& options)
    : impl_(std::make_unique<Impl>(se, options)) {}
WorkerLoop::~WorkerLoop() = default;
int WorkerLoop::Run() { return impl_->Run(); }
void WorkerLoop::Stop() { impl_->Stop(); }
void WorkerLoop::SetSpin(std::chrono::microseconds spin) { impl_->SetSpin(spin); }

}  // namespace fedfs::fuse
