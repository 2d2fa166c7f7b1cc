// What the FUSE frontend's files share beyond fuse_internal.h: the session's
// userdata (FuseMount::Ctx) and the request handlers' table.
//   fuse_frontend.cc  mount, unmount, the kernel-cache notifier, INIT
//   fuse_ops.cc       the low-level request handlers (errno rule: CallerErrno, common/errors.h)
// Files that include it define FUSE_USE_VERSION 312 before any FUSE header.
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <chrono>
#include <string>

#include "fuse/caller_groups.h"
#include "fuse/fuse_frontend.h"
#include "fuse/uring_channel.h"

namespace fedfs::fuse {

// The session's userdata: the Vfs, and the kernel-cache notifier that OpInit
// enables when the kernel can take its invalidations.
struct FuseMount::Ctx {
  ns::Vfs* vfs = nullptr;
  KernelNotifier* notifier = nullptr;
  OpMetrics* metrics = nullptr;  // FuseOptions::metrics
  bool explicit_inval_data = false;  // FuseOptions::explicit_inval_data
  // Set before the loop starts; the first request after INIT (whose reply
  // fixed the read-ahead window) applies it.
  std::string read_ahead_file;
  unsigned read_ahead_kb = 0;
  std::atomic<bool> read_ahead_pending{false};
  // Non-root callers' supplementary groups (fuse/caller_groups.h).
  CallerGroups groups{std::chrono::seconds(1), 4096};
  // Unmount has begun: lock waits give up (ENOLCK) so their workers end.
  std::atomic<bool> stopping{false};
  // Set before the loop starts when the kernel may take requests over
  // io_uring; replies go through it (fuse_session_custom_io).
  UringChannel* uring = nullptr;
  // The INIT handshake, which libfuse 3.14 cannot ask for everything in:
  // FrontendWritev adds FUSE_HANDLE_KILLPRIV_V2 and FUSE_DIRECT_IO_ALLOW_MMAP
  // to its reply, and hands it to the rings (UringChannel::InitReply), when
  // the kernel offered them.
  std::atomic<uint64_t> init_unique{0};       // the INIT request, until its reply
  std::atomic<bool> killpriv_offered{false};
  // The kernel lets a handle written directly (an O_APPEND open's) be
  // mapped shared (FUSE_DIRECT_IO_ALLOW_MMAP, 7.39): asked for when offered.
  std::atomic<bool> direct_mmap_offered{false};
  std::atomic<bool> uring_offered{false};
  std::atomic<bool> killpriv{false};          // asked for: see WriteKillsSetId
};

// The low-level operations table (fuse_ops.cc).
fuse_lowlevel_ops MakeOps();

}  // namespace fedfs::fuse
