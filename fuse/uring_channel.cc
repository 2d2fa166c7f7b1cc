#define FUSE_USE_VERSION 312
#include "fuse/uring_channel.h"

#include <cap-ng.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <liburing.h>
#include <linux/capability.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/thread_name.h"
#include "fuse/fuse_internal.h"

namespace fedfs::fuse {
namespace {

// The kernel's interface (include/uapi/linux/fuse.h, protocol 7.42), which
// Debian 12's headers predate.
constexpr uint64_t kOverIoUring = 1ULL << 41;  // FUSE_OVER_IO_URING (INIT flags)
constexpr uint32_t kInitExt = 1U << 30;        // FUSE_INIT_EXT: flags2 is valid
constexpr uint32_t kCmdRegister = 1;           // FUSE_IO_URING_CMD_REGISTER
constexpr uint32_t kCmdCommitAndFetch = 2;     // FUSE_IO_URING_CMD_COMMIT_AND_FETCH
constexpr size_t kOpInSize = 128;              // FUSE_URING_OP_IN_OUT_SZ

struct RingEntInOut {  // struct fuse_uring_ent_in_out
  uint64_t flags;
  uint64_t commit_id;  // the request's unique, to name it in the commit
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};

struct RingReqHeader {  // struct fuse_uring_req_header
  char in_out[128];     // fuse_in_header in, fuse_out_header out
  char op_in[kOpInSize];  // the request's first argument
  RingEntInOut ring_ent_in_out;
};

struct RingCmdReq {  // struct fuse_uring_cmd_req, in the SQE's command area
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};

static_assert(sizeof(RingReqHeader) == 288);
static_assert(sizeof(RingCmdReq) == 24);

// The payload buffer: the largest request (a write of 256 pages) and some.
size_t PayloadSize() { return 257 * static_cast<size_t>(::getpagesize()); }
// Before it, one page: the entry's header at its start, the rebuilt request
// header and first argument at its end, right before the payload.
size_t SparePage() { return static_cast<size_t>(::getpagesize()); }

constexpr uint64_t kTagEntry = 1;
constexpr uint64_t kTagStop = 2;

// CAP_SYS_NICE in this thread's effective set: needed to go back from
// SCHED_IDLE to SCHED_OTHER, also for another thread.
bool HasSysNice() {
  return capng_get_caps_process() == 0 &&
         capng_have_capability(CAPNG_EFFECTIVE, CAP_SYS_NICE) == 1;
}

bool SetPolicy(pid_t tid, int policy) {
  sched_param sp{};
  return ::sched_setscheduler(tid, policy, &sp) == 0;
}

// The watcher (Impl::Watch): how often it looks while requests come, for
// how long it makes the queue threads SCHED_OTHER when one was starved, and
// after how long without requests it stops looking (and the threads stop
// going SCHED_IDLE).
constexpr int kLookMs = 10;
constexpr int64_t kContendedNs = 1'000'000'000;
constexpr int64_t kQuietNs = 1'000'000'000;

}  // namespace

struct Entry {
  unsigned qid = 0;
  char* map = nullptr;
  size_t map_size = 0;
  RingReqHeader* hdr = nullptr;
  char* payload = nullptr;
  size_t payload_size = 0;
  iovec iov[2]{};
  io_uring ring{};
  bool ring_ok = false;
  uint64_t commit_id = 0;  // the request being served
  bool replied = false;
  std::atomic<pid_t> tid{0};
  bool idle = false;                   // SCHED_IDLE as far as this thread knows
  int sched_fd = -1;                   // its /proc/.../schedstat (the watcher's)
  int64_t queued_ns = 0;               // its time waiting to run, at the last look
  std::atomic<uint64_t> served{0};
  std::atomic<bool> done{false};
  std::thread thread;
};

namespace {
thread_local Entry* tl_entry = nullptr;  // the entry this thread serves
}  // namespace

class UringChannel::Impl {
 public:
  Impl(fuse_session* se, int stop_fd)
      : se_(se), fd_(fuse_session_fd(se)), stop_fd_(stop_fd),
        kick_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

  ~Impl() {
    for (auto& e : entries_) {
      if (e->ring_ok) io_uring_queue_exit(&e->ring);
      if (e->map != nullptr) ::munmap(e->map, e->map_size);
      if (e->sched_fd >= 0) ::close(e->sched_fd);
    }
    if (stop_fd_ >= 0) ::close(stop_fd_);
    if (kick_fd_ >= 0) ::close(kick_fd_);
  }

  // Memory and a ring for every entry; false with the reason otherwise.
  bool Setup(unsigned queues, unsigned per_queue, std::string* why) {
    for (unsigned q = 0; q < queues; ++q) {
      for (unsigned t = 0; t < per_queue; ++t) {
        entries_.push_back(std::make_unique<Entry>());  // ~Impl frees what it gets
        Entry* e = entries_.back().get();
        e->qid = q;
        e->payload_size = PayloadSize();
        e->map_size = SparePage() + e->payload_size;
        void* m = ::mmap(nullptr, e->map_size, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
          *why = std::string("mmap: ") + std::strerror(errno);
          return false;
        }
        e->map = static_cast<char*>(m);
        e->hdr = reinterpret_cast<RingReqHeader*>(e->map);
        e->payload = e->map + SparePage();
        e->iov[0] = {e->hdr, sizeof(RingReqHeader)};
        e->iov[1] = {e->payload, e->payload_size};
        io_uring_params p{};
        p.flags = IORING_SETUP_SQE128;
        const int rc = io_uring_queue_init_params(4, &e->ring, &p);
        if (rc < 0) {
          *why = std::string("io_uring_setup: ") + std::strerror(-rc);
          return false;
        }
        e->ring_ok = true;
      }
    }
    queues_ = queues;
    return true;
  }

  bool OnInitRequest(const void* buf, size_t size) {
    if (size < sizeof(fuse_in_header) + offsetof(fuse_init_in, flags2) + sizeof(uint32_t)) {
      return false;
    }
    const auto* in = static_cast<const fuse_in_header*>(buf);
    const auto* arg = reinterpret_cast<const fuse_init_in*>(in + 1);
    const bool offered = (arg->flags & kInitExt) != 0 &&
                         (arg->flags2 & static_cast<uint32_t>(kOverIoUring >> 32)) != 0;
    if (!offered) {
      Log()->info("FUSE over io_uring: not offered by the kernel at INIT; using /dev/fuse");
    }
    return offered;
  }

  ssize_t Writev(int fd, const iovec* iov, int count) {
    Entry* e = tl_entry;
    if (count < 1 || iov[0].iov_len != sizeof(fuse_out_header)) return ::writev(fd, iov, count);
    const auto* oh = static_cast<const fuse_out_header*>(iov[0].iov_base);
    if (e != nullptr && oh->unique == e->commit_id && !e->replied) return ToEntry(*e, *oh, iov, count);
    return ::writev(fd, iov, count);
  }

  bool Stop(std::chrono::steady_clock::time_point deadline) {
    std::lock_guard lk(mu_);
    uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(stop_fd_, &one, sizeof one);
    if (watcher_.joinable()) watcher_.join();
    bool all = true;
    for (auto& e : entries_) {
      if (!e->thread.joinable()) continue;
      while (!e->done.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (e->done.load()) {
        e->thread.join();
      } else {
        e->thread.detach();
        all = false;
      }
    }
    return all;
  }

  bool started() const { return started_.load(); }

  uint64_t served() const {
    uint64_t n = 0;
    for (const auto& e : entries_) n += e->served.load(std::memory_order_relaxed);
    return n;
  }

  ssize_t InitReply(int fd, const iovec* iov, int count) {
    const auto* oh = static_cast<const fuse_out_header*>(iov[0].iov_base);
    if (oh->error != 0 || count != 2 || iov[1].iov_len < sizeof(fuse_init_out)) {
      return ::writev(fd, iov, count);
    }
    fuse_init_out arg;
    std::memcpy(&arg, iov[1].iov_base, sizeof arg);
    const size_t largest = std::max<size_t>({8192, arg.max_write,
                                             static_cast<size_t>(arg.max_pages) * ::getpagesize()});
    if (largest > PayloadSize()) {
      Log()->warn("FUSE over io_uring: requests of {} bytes exceed the ring buffers; using "
                  "/dev/fuse", largest);
      return ::writev(fd, iov, count);
    }
    arg.flags |= kInitExt;
    arg.flags2 |= static_cast<uint32_t>(kOverIoUring >> 32);
    iovec patched[2] = {iov[0], {&arg, sizeof arg}};
    const ssize_t rc = ::writev(fd, patched, 2);
    if (rc >= 0) Start();
    return rc;
  }

 private:
  // A reply to the request `e` serves: into its header and payload.
  ssize_t ToEntry(Entry& e, const fuse_out_header& oh, const iovec* iov, int count) {
    size_t off = 0;
    for (int i = 1; i < count; ++i) {
      if (iov[i].iov_len > e.payload_size - off) {
        errno = EINVAL;  // not replied: Serve answers EIO
        return -1;
      }
      // READ replies may have been read straight into the payload.
      if (iov[i].iov_base != e.payload + off) {
        std::memmove(e.payload + off, iov[i].iov_base, iov[i].iov_len);
      }
      off += iov[i].iov_len;
    }
    fuse_out_header out = oh;
    out.len = static_cast<uint32_t>(sizeof out + off);
    std::memcpy(e.hdr->in_out, &out, sizeof out);
    e.hdr->ring_ent_in_out.payload_sz = static_cast<uint32_t>(off);
    e.replied = true;
    return static_cast<ssize_t>(out.len);
  }

  void Start() {
    std::lock_guard lk(mu_);
    started_ = true;
    handover_ = kick_fd_ >= 0 && HasSysNice();
    if (handover_) {
      try {
        watcher_ = std::thread([this] { Watch(); });
        NameThread(watcher_, "fuse-uwatch");
      } catch (const std::system_error&) {
        handover_ = false;
      }
    }
    for (auto& e : entries_) {
      Entry* p = e.get();
      try {
        p->thread = std::thread([this, p] { Run(*p); });
        NameThread(p->thread, "fuse-q" + std::to_string(p->qid));
      } catch (const std::system_error& ex) {
        Log()->error("FUSE over io_uring: cannot start a queue thread: {}; using /dev/fuse",
                     ex.what());
        p->done = true;
        // Its queue might never get an entry, and the kernel holds every
        // request until all queues have one: a registration it refuses makes
        // it give up the rings and keep to /dev/fuse.
        RefuseRings(*p);
        break;
      }
    }
    Log()->info("FUSE over io_uring: {} queues, {} threads each{}", queues_,
                entries_.size() / std::max(1u, queues_),
                handover_ ? "" : " (SCHED_OTHER only: no CAP_SYS_NICE)");
  }

  // Scheduling of the queue threads. A reply wakes the caller, whose CPU is
  // the serving thread's: while that thread runs, the scheduler moves the
  // caller to an idle CPU (select_idle_sibling; fio 4 KiB random writes:
  // 80,000 task migrations in 3 s), and the next request then wakes a
  // sleeping core, which on a virtual machine whose idle cores halt costs
  // more than serving many requests. As SCHED_IDLE, the thread leaves its CPU
  // counting as idle: the caller stays and preempts it, and it finishes when
  // the caller sleeps again. One node, against SCHED_OTHER: fio 4 KiB random
  // writes 16,600 -> 41,000-44,300/s, python creates 10,300-11,600 ->
  // 13,400-14,100/s. Switching only around each commit costs two system
  // calls per request, which undo most of it (11,100-11,600 creates/s).
  // The danger: a program keeping the CPU busy starves a SCHED_IDLE thread
  // (25-40 creates/s with one busy loop per CPU). So threads go SCHED_IDLE
  // only while the watcher looks every kLookMs, which makes them all
  // SCHED_OTHER for kContendedNs once one of them spent most of the time
  // since the last look waiting to run (a request dispatched to it, or half
  // served, waits for it meanwhile).
  void SetIdle(Entry& e) {
    const bool want = handover_ && watching_.load(std::memory_order_relaxed) &&
                      NowNs() >= contended_until_.load(std::memory_order_relaxed);
    if (want == e.idle) return;
    if (SetPolicy(0, want ? SCHED_IDLE : SCHED_OTHER)) e.idle = want;
  }

  // A request was taken: wake the watcher if it is not looking.
  void Kick() {
    if (!handover_ || watching_.load(std::memory_order_relaxed) || kicked_.exchange(true)) return;
    uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(kick_fd_, &one, sizeof one);
  }

  void AllOther() {
    for (auto& e : entries_) {
      const pid_t tid = e->tid.load();
      if (tid != 0) SetPolicy(tid, SCHED_OTHER);  // the threads resync e.idle
    }
  }

  // The thread's time spent waiting to run so far (schedstat's second
  // field, ns); -1 if unknown.
  static int64_t QueuedNs(Entry& e) {
    if (e.sched_fd < 0) {
      const pid_t tid = e.tid.load();
      if (tid == 0) return -1;  // not started yet
      char path[64];
      std::snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", static_cast<int>(tid));
      e.sched_fd = ::open(path, O_RDONLY | O_CLOEXEC);
      if (e.sched_fd < 0) return -1;
    }
    char buf[96];
    const ssize_t n = ::pread(e.sched_fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = 0;
    unsigned long long run = 0, queued = 0;
    if (std::sscanf(buf, "%llu %llu", &run, &queued) != 2) return -1;
    return static_cast<int64_t>(queued);
  }

  void Watch() {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {kick_fd_, POLLIN, 0}};
    int64_t active_at = 0;  // a request was last served
    int64_t looked_at = 0;
    uint64_t last_served = 0;
    for (;;) {
      const bool watching = watching_.load(std::memory_order_relaxed);
      if (::poll(fds, 2, watching ? kLookMs : -1) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) return;
      const int64_t now = NowNs();
      if (fds[1].revents != 0) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(kick_fd_, &v, sizeof v);
        kicked_ = false;
        watching_ = true;
        active_at = now;
        looked_at = 0;
        continue;
      }
      if (!watching) continue;
      const uint64_t now_served = served();
      bool starved = false;
      for (auto& e : entries_) {
        const int64_t q = QueuedNs(*e);
        if (q < 0) continue;
        // Runnable for 80 % of the time since the last look.
        if (looked_at != 0 && (q - e->queued_ns) * 5 >= (now - looked_at) * 4) starved = true;
        e->queued_ns = q;
      }
      looked_at = now;
      if (now_served != last_served) active_at = now;
      last_served = now_served;
      if (starved && now >= contended_until_.load(std::memory_order_relaxed)) {
        contended_until_ = now + kContendedNs;
        AllOther();
        if (stalls_.fetch_add(1) == 0) {
          Log()->info("FUSE over io_uring: a queue thread waited to run for {} ms (a busy CPU?); "
                      "queue threads run as SCHED_OTHER for {} s at a time (logged once)",
                      kLookMs, kContendedNs / 1'000'000'000);
        }
      }
      if (now - active_at > kQuietNs) {
        watching_ = false;  // the threads go SCHED_OTHER at their next request
        AllOther();         // and those asleep now, before it comes
      }
    }
  }

  io_uring_sqe* PrepCmd(Entry& e, uint32_t op) {
    io_uring_sqe* sqe = io_uring_get_sqe(&e.ring);
    // Four slots, at most two filled between submissions.
    if (sqe == nullptr) {
      Log()->critical("FUSE over io_uring: queue {}: no free submission entry (op {})", e.qid, op);
      std::abort();
    }
    std::memset(static_cast<void*>(sqe), 0, 2 * sizeof *sqe);  // SQE128: the command area too
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = fd_;
    sqe->cmd_op = op;
    sqe->addr = reinterpret_cast<uintptr_t>(e.iov);
    sqe->len = 2;
    sqe->user_data = kTagEntry;
    auto* cmd = reinterpret_cast<RingCmdReq*>(sqe->cmd);
    cmd->qid = static_cast<uint16_t>(e.qid);
    cmd->commit_id = op == kCmdCommitAndFetch ? e.commit_id : 0;
    return sqe;
  }

  void RefuseRings(Entry& e) {
    io_uring_sqe* sqe = PrepCmd(e, kCmdRegister);
    reinterpret_cast<RingCmdReq*>(sqe->cmd)->qid = UINT16_MAX;  // no such queue: EINVAL
    io_uring_cqe* cqe = nullptr;
    if (io_uring_submit_and_wait(&e.ring, 1) >= 0 && io_uring_peek_cqe(&e.ring, &cqe) == 0) {
      io_uring_cqe_seen(&e.ring, cqe);
    }
  }

  void ReplyError(Entry& e, int err) {
    fuse_out_header out{};
    out.len = sizeof out;
    out.error = -err;
    out.unique = e.commit_id;
    std::memcpy(e.hdr->in_out, &out, sizeof out);
    e.hdr->ring_ent_in_out.payload_sz = 0;
    e.replied = true;
  }

  // The request in `e`, rebuilt in the /dev/fuse layout right before its
  // payload, goes to libfuse; the reply (Writev) is committed with the fetch
  // of the next request.
  void Serve(Entry& e) {
    fuse_in_header in;
    std::memcpy(&in, e.hdr->in_out, sizeof in);
    const RingEntInOut io = e.hdr->ring_ent_in_out;
    e.commit_id = io.commit_id;
    e.replied = false;
    const size_t head = sizeof in;
    if (in.len < head + io.payload_sz || in.len - head - io.payload_sz > kOpInSize ||
        io.payload_sz > e.payload_size) {
      Log()->error("FUSE over io_uring: malformed request (opcode {}, length {}, payload {})",
                   in.opcode, in.len, io.payload_sz);
      ReplyError(e, EIO);
    } else {
      const size_t op_len = in.len - head - io.payload_sz;
      char* start = e.payload - head - op_len;
      std::memcpy(start, &in, head);
      std::memcpy(start + head, e.hdr->op_in, op_len);
      fuse_buf buf{};
      buf.mem = start;
      buf.size = in.len;
      tl_entry = &e;
      fuse_session_process_buf(se_, &buf);
      tl_entry = nullptr;
      if (!e.replied) ReplyError(e, EIO);
    }
    e.served.fetch_add(1, std::memory_order_relaxed);
    PrepCmd(e, kCmdCommitAndFetch);
  }

  void Run(Entry& e) {
    e.tid = static_cast<pid_t>(::syscall(SYS_gettid));
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(e.qid, &set);
    // Not fatal: a CPU this process may not use still has its queue.
    (void)::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
    PrepCmd(e, kCmdRegister);
    io_uring_sqe* sqe = io_uring_get_sqe(&e.ring);
    if (sqe == nullptr) {
      Log()->critical("FUSE over io_uring: queue {}: no free submission entry (stop poll)", e.qid);
      std::abort();
    }
    io_uring_prep_poll_add(sqe, stop_fd_, POLLIN);
    sqe->user_data = kTagStop;
    bool stop = false;
    while (!stop) {
      SetIdle(e);
      const int rc = io_uring_submit_and_wait(&e.ring, 1);
      if (rc < 0 && rc != -EINTR) {
        Log()->error("FUSE over io_uring: io_uring_enter: {}", std::strerror(-rc));
        break;
      }
      io_uring_cqe* cqe = nullptr;
      while (io_uring_peek_cqe(&e.ring, &cqe) == 0) {
        const uint64_t tag = cqe->user_data;
        const int res = cqe->res;
        io_uring_cqe_seen(&e.ring, cqe);
        if (tag == kTagStop) {
          stop = true;
        } else if (res < 0) {
          // The connection ended (ENOTCONN), or the kernel refused the entry:
          // it then serves the queue through /dev/fuse.
          if (res != -ENOTCONN && res != -ECONNABORTED && res != -ECANCELED) {
            Log()->warn("FUSE over io_uring: queue {}: {}; requests use /dev/fuse", e.qid,
                        std::strerror(-res));
          }
          stop = true;
        } else {
          Kick();
          Serve(e);
        }
      }
    }
    io_uring_submit(&e.ring);  // the last commit, if one is pending
    e.done = true;
  }

  fuse_session* const se_;
  const int fd_;
  const int stop_fd_;  // readable once Stop() was called
  unsigned queues_ = 0;
  std::atomic<bool> started_{false};
  // SetIdle's hand-over: CAP_SYS_NICE (set before the threads start).
  bool handover_ = false;
  const int kick_fd_;  // wakes the watcher
  std::atomic<bool> watching_{false};
  std::atomic<bool> kicked_{false};
  std::atomic<int64_t> contended_until_{0};
  std::atomic<uint64_t> stalls_{0};
  std::thread watcher_;
  std::mutex mu_;                          // Start against Stop
  std::vector<std::unique_ptr<Entry>> entries_;
};

std::unique_ptr<UringChannel> UringChannel::Create(fuse_session* se, unsigned threads_per_queue,
                                                   std::string* why_not) {
  std::ifstream sw("/sys/module/fuse/parameters/enable_uring");
  char on = 'N';
  if (!(sw >> on)) {
    *why_not = "this kernel has no FUSE over io_uring (Linux 6.14 or later)";
    return nullptr;
  }
  if (on != 'Y' && on != '1') {
    *why_not = "switched off in the kernel (/sys/module/fuse/parameters/enable_uring)";
    return nullptr;
  }
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd < 0) {
    *why_not = std::string("eventfd: ") + std::strerror(errno);
    return nullptr;
  }
  auto impl = std::make_unique<Impl>(se, stop_fd);
  // The kernel has a queue for every possible CPU and uses the ring only
  // once each has an entry.
  const unsigned queues = static_cast<unsigned>(std::max(1, ::get_nprocs_conf()));
  if (!impl->Setup(queues, std::max(1u, threads_per_queue), why_not)) return nullptr;
  return std::unique_ptr<UringChannel>(new UringChannel(std::move(impl)));
}

UringChannel::UringChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UringChannel::~UringChannel() {
  if (impl_) impl_->Stop(std::chrono::steady_clock::time_point::max());
}
bool UringChannel::OnInitRequest(const void* buf, size_t size) {
  return impl_->OnInitRequest(buf, size);
}
ssize_t UringChannel::Writev(int fd, const iovec* iov, int count) {
  return impl_->Writev(fd, iov, count);
}
ssize_t UringChannel::InitReply(int fd, const iovec* iov, int count) {
  return impl_->InitReply(fd, iov, count);
}
bool UringChannel::Stop(std::chrono::steady_clock::time_point deadline) {
  return impl_->Stop(deadline);
}
uint64_t UringChannel::served() const { return impl_->served(); }
bool UringChannel::started() const { return impl_->started(); }

std::span<std::byte> UringChannel::ReplyBuffer() {
  Entry* e = tl_entry;
  if (e == nullptr) return {};
  return {reinterpret_cast<std::byte*>(e->payload), e->payload_size};
}

}  // namespace fedfs::fuse
