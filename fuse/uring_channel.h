// FUSE over io_uring (Linux 6.14+): the kernel hands requests to per-CPU
// queues of ring entries instead of /dev/fuse reads, and takes the reply and
// the next request in one io_uring_enter.
//
// Why: a request from a process on CPU c goes to queue c, whose threads are
// pinned to c. The process sleeps while its request is served, so the
// hand-over to the serving thread and back stays on one core: no wake-up of
// an idle core, which on a virtual machine costs more than many requests
// take to serve (docs/namespace.md, "Workers").
//
// How it fits libfuse 3.14, which predates it: requests are rebuilt into the
// /dev/fuse layout in place (the kernel leaves room-free headers apart from
// the payload; the payload buffer is preceded by a spare page, so no payload
// is copied) and handed to fuse_session_process_buf; replies come back
// through the session's custom writev (fuse_session_custom_io), which copies
// them into the entry. The INIT reply is the one place libfuse cannot say
// what we want: Writev sets FUSE_OVER_IO_URING in it when the kernel offered
// it. Forgets, interrupts and notifications still use /dev/fuse (the kernel
// sends the first two there), so the /dev/fuse loop keeps running.
//
// Used when the kernel offers it: the fuse module's switch
// /sys/module/fuse/parameters/enable_uring is on (it is off by default). If
// registering an entry fails, the kernel falls back to /dev/fuse by itself.
//
// Threads: `threads_per_queue` per CPU queue, each with one entry and its own
// ring, started after the INIT reply and pinned to the queue's CPU; while
// requests come they wait as SCHED_IDLE, watched so that a busy CPU cannot
// starve them (uring_channel.cc, SetIdle). A request that blocks (a lock wait)
// ties up one of its queue's threads; when all of a queue's threads are
// busy, further requests from that CPU wait in the kernel. Handlers must
// reply before they return (FedFS's do).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

struct fuse_session;
struct iovec;

namespace fedfs::fuse {

class UringChannel {
 public:
  // Null, with the reason in `why_not`, when the kernel does not offer it or
  // rings cannot be set up here. `se` must be mounted. Without CAP_SYS_NICE
  // the threads stay SCHED_OTHER (uring_channel.cc, SetIdle).
  static std::unique_ptr<UringChannel> Create(struct fuse_session* se, unsigned threads_per_queue,
                                              std::string* why_not);
  ~UringChannel();  // Stop()
  UringChannel(const UringChannel&) = delete;
  UringChannel& operator=(const UringChannel&) = delete;

  // The INIT request as read from /dev/fuse, before libfuse handles it.
  // True if the kernel offers FUSE over io_uring (the rings will be used).
  bool OnInitRequest(const void* buf, size_t size);

  // The reply to that INIT request, when it offered io_uring: libfuse 3.14
  // cannot ask for FUSE_OVER_IO_URING, so it is added here if the rings'
  // buffers hold the largest request the reply allows; once the kernel took
  // the reply, the rings start. -1 with errno on failure, like writev(2).
  ssize_t InitReply(int fd, const struct iovec* iov, int count);

  // The session's writev for every other reply: a reply to a request this
  // thread took from a ring goes into the ring's entry; anything else goes
  // to `fd`. -1 with errno on failure, like writev(2).
  ssize_t Writev(int fd, const struct iovec* iov, int count);

  // Ends the threads, each after the request it serves. False if some were
  // still busy at `deadline`: they are left running (detached), and what
  // they use must then stay allocated (the caller leaks this object).
  bool Stop(std::chrono::steady_clock::time_point deadline);

  // Requests served from rings so far.
  uint64_t served() const;
  // The kernel took FUSE_OVER_IO_URING and the queue threads were started.
  bool started() const;

  // The reply buffer of the request this thread serves from a ring (a READ
  // can read straight into it: Writev then copies nothing), else empty.
  static std::span<std::byte> ReplyBuffer();

 private:
  class Impl;
  explicit UringChannel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedfs::fuse
