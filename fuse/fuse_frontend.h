// The FUSE 3 low-level frontend: mounts a Vfs (vfs/vfs.h) at a
// mountpoint and serves the kernel's requests with a bounded pool of worker
// threads (fuse/worker_loop.h) or, when the kernel offers it, per-CPU
// io_uring queues (fuse/uring_channel.h).
//
// Ownership: a FuseMount owns the FUSE session and the thread that runs the
// loop; it does not own the Vfs, which must outlive it. fuse_lowlevel.h is
// included only in fuse/*.cc: nothing FUSE leaks out of this header.
//
// Every request is answered with what the Vfs returns (errno on failure);
// std::bad_alloc becomes ENOMEM; no reply is sent while a lock is held (the
// frontend holds none). Credentials come from the request (uid, gid, umask
// with FUSE_CAP_DONT_MASK, supplementary groups from fuse_req_getgroups).
//
// Threads: Mount and Unmount are called by one owner thread (the daemon's
// main thread); the workers call the Vfs concurrently.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <thread>

#include "common/result.h"
#include "metrics/metrics.h"
#include "vd/kernel_cache.h"
#include "vfs/vfs.h"

struct fuse_session;

namespace fedfs::fuse {

// The kernel's caches of one mount (vd/kernel_cache.h): enabled by the
// FUSE INIT handshake when the kernel speaks protocol 7.44 or later.
class KernelNotifier final : public ns::KernelCache {
 public:
  bool Coherent() const override { return coherent_.load(std::memory_order_acquire); }
  void InvalidateNames() override;
  bool InvalidateAttrs(uint64_t ino) override;
  void InvalidateData(uint64_t ino, uint64_t offset, uint64_t length) override;
  uint64_t NamesEpoch() const override { return names_epoch_.load(std::memory_order_acquire); }
  // Not counted while names are not cached (no drop needs them then).
  void NamesFrom(const std::string& dir, const std::string& name) override {
    if (Coherent()) marks_.Mark(dir, name);
  }
  void InvalidateNamesOf(const std::string& dir,
                         const std::vector<std::string>* names = nullptr) override {
    if (marks_.Marked(dir, names)) InvalidateNames();
  }

  void Enable(bool epoch_supported);   // from the INIT handshake
  void Attach(struct fuse_session* se);
  void Detach();  // returns once no notification is being written

 private:
  std::atomic<bool> coherent_{false};
  mutable std::shared_mutex mu_;          // guards session_ against Detach
  struct fuse_session* session_ = nullptr;
  std::atomic<uint64_t> names_epoch_{0};  // InvalidateNames calls
  ns::KernelNameMarks marks_;             // directories named since the last one
};

// A mount's requests by operation: how many, how long each took to answer
// (a histogram, the handler's whole run), how many were answered with an
// error. Written by the workers, read by any thread (docs/metrics.md:
// fedfs_fuse_op_duration_seconds, fedfs_fuse_op_errors_total).
class OpMetrics {
 public:
  static constexpr std::array<std::string_view, 32> kNames = {
      "lookup",  "forget",     "getattr",  "setattr",    "readlink",  "mknod",    "mkdir",
      "unlink",  "rmdir",      "symlink",  "rename",     "link",      "open",     "read",
      "write",   "flush",      "release",  "fsync",      "opendir",   "readdir",  "releasedir",
      "fsyncdir", "statfs",    "setxattr", "getxattr",   "listxattr", "removexattr", "create",
      "getlk",   "setlk",      "flock",    "fallocate"};
  struct Op {
    metrics::Histogram latency;
    std::atomic<uint64_t> errors{0};
  };
  // The operation named kNames[i].
  Op& at(size_t i) { return ops_[i]; }
  // The families above, one series per operation.
  void Collect(metrics::Exposition& e) const;

 private:
  std::array<Op, kNames.size()> ops_;
};

struct FuseOptions {
  std::string mountpoint;            // required, an existing directory
  bool allow_other = true;           // -o allow_other (needs root or user_allow_other)
  bool default_permissions = true;   // -o default_permissions: the kernel checks modes
  unsigned max_threads = 16;         // upper bound of FUSE worker threads
  // The mount's read-ahead window, set once the INIT handshake is done (the
  // kernel caps it at 128 KiB when it answers INIT). Measured: sequential
  // reads of a file on another node over TCP loopback, 267 -> 397 MB/s with
  // 1024 against 128 (one round trip per request). 0: left as it is.
  unsigned read_ahead_kb = 1024;
  // After a request, one worker keeps reading the device this long before
  // it sleeps (fuse/worker_loop.h). 0: never.
  unsigned spin_us = 50;
  // Take requests over io_uring when the kernel offers it
  // (fuse/uring_channel.h); false: /dev/fuse only.
  bool io_uring = true;
  // The kernel drops cached file pages only when told to
  // (KernelCache::InvalidateData; FUSE_CAP_EXPLICIT_INVAL_DATA), not on
  // every change of a file's size or mtime (FUSE_CAP_AUTO_INVAL_DATA,
  // libfuse's default): for a daemon that tells it of every change.
  bool explicit_inval_data = false;
  std::string fsname = "fedfs";      // -o fsname= (shown by mount/df)
  // Where requests are counted and timed (outlives the mount); null: not.
  OpMetrics* metrics = nullptr;
  // Called once, on the loop's thread, when the mount was removed from
  // outside (umount, fusermount3 -u) rather than by Unmount.
  std::function<void()> on_unmounted;
};

// Ok if `mountpoint` can be mounted on: an existing directory that is not a
// dead FUSE mount. A dead mount (stat gives ENOTCONN) gives ENOTCONN with the
// one-line message "mountpoint M is a stale FUSE mount (a previous fedfsd
// crashed?); clear it with: fusermount3 -u M".
Status CheckMountpoint(const std::string& mountpoint);

// Clears a stale mount of FedFS's own at `mountpoint` (a FUSE mount of type
// fuse.fedfs whose daemon is gone: stat gives ENOTCONN) by detaching it
// (umount2 MNT_DETACH; needs CAP_SYS_ADMIN). Ok, and *cleared set, when it
// did; Ok when there is nothing stale there. A stale mount of another file
// system is left alone: EBUSY naming its type.
Status ClearStaleMount(const std::string& mountpoint, bool* cleared);

class FuseMount {
 public:
  // Checks the mountpoint, creates the session, mounts and starts the loop.
  // On failure nothing is mounted; the error's context is one line.
  static Result<std::unique_ptr<FuseMount>> Mount(const FuseOptions& options, ns::Vfs* vfs);

  ~FuseMount();  // Unmount()
  FuseMount(const FuseMount&) = delete;
  FuseMount& operator=(const FuseMount&) = delete;

  // Stops the workers (each finishes the request it serves), closes the
  // device, which ends the connection (a process still using the mount gets
  // ENOTCONN), and unmounts lazily. A worker still blocked in a request after
  // 3 s: the connection is aborted, the mount detached and the worker left
  // to the process's exit. Idempotent.
  void Unmount();

  const std::string& mountpoint() const { return options_.mountpoint; }
  // The connection's name under /sys/fs/fuse/connections (the kernel's
  // device number of the mount); empty if it could not be found.
  const std::string& connection_id() const { return conn_id_; }

  // This mount's kernel caches. Shared so that it can outlive the mount:
  // after Unmount its calls do nothing.
  std::shared_ptr<KernelNotifier> kernel_cache() { return notifier_; }

  struct Ctx;  // the session's userdata (fuse_frontend.cc)

 private:
  explicit FuseMount(FuseOptions options);
  // Aborts the FUSE connection (fusectl's abort file; fusectl is mounted
  // first if it is not), logging `why` at warning level if `loud`. False if
  // that was impossible.
  bool Abort(const char* why, bool loud);

  FuseOptions options_;
  struct fuse_session* session_ = nullptr;
  struct State;
  std::unique_ptr<State> state_;
  std::thread loop_;
  std::string conn_id_;  // /sys/fs/fuse/connections/<id>
  std::string bdi_;      // /sys/class/bdi/<bdi_>: "major:minor"
  std::shared_ptr<KernelNotifier> notifier_ = std::make_shared<KernelNotifier>();
  std::unique_ptr<Ctx> ctx_;
};

}  // namespace fedfs::fuse
