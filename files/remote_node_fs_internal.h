// Internal to fedfs_ns_remote: what remote_node_fs.cc (sessions, metadata)
// and remote_io.cc (reads and writes) share. Not a contract.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "common/cooperative.h"
#include "common/rpc_methods.h"
#include "files/fs_wire.h"
#include "files/remote_node_fs.h"

// Each operation's deadline, in RemoteNodeFs's members.
#define FEDFS_DEADLINE (Clock::now() + opts_.rpc_timeout)

namespace fedfs::ns {

// How long a call keeps asking again while the server answers that a move
// holds the file (nodefs/move_support.h, kErrMoveWait).
inline constexpr std::chrono::minutes kMoveWaitMax{10};

namespace remote_detail {
namespace fb = fswire::fb;
}  // namespace remote_detail

struct RemoteNodeFs::Req {
  remote_detail::fb::Op op = remote_detail::fb::Op::kInvalid;
  const Cred* cred = nullptr;
  std::string_view path, path2, target;
  std::span<const std::byte> data;
  int32_t flags = 0;
  uint32_t mode = 0;
  uint64_t rdev = 0;
  std::optional<uint64_t> handle;
  uint64_t offset = 0, length = 0;
  int32_t slot = -1;
  uint64_t owner = 0;
  const LockRange* lock = nullptr;
  const SetAttrRequest* sa = nullptr;
  const std::vector<DirTemplate>* templates = nullptr;
  const std::vector<std::string>* names = nullptr;  // kStatMany
  bool watch = false;
  bool kill_setid = false;
  bool parent_attr = false;
  std::string_view for_node;  // FsRequest.for_node
  std::optional<uint64_t> expect_ino;  // FsRequest.expect_ino (kOpen)
  uint64_t expect_watch = 0;           // FsRequest.expect_watch (kOpen)
  const NodeFs::CoopAsk* coop = nullptr;
  const NodeFs::CoopBlock* fwd = nullptr;  // kCoopEvict, kCoopStore, kCoopMoved
};

// The client's registered slots, with per-slot quarantine after failures.
struct RemoteNodeFs::Slots {
  std::unique_ptr<m2m::LocalRegion> region;
  size_t slot_size = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> busy;                      // guarded by mu
  std::vector<Clock::time_point> usable_after;  // guarded by mu

  // Up to `want` slots (at least one, waiting until `deadline`); empty at the
  // deadline. A fiber of the simulator (common/cooperative.h) looks every
  // 20 µs of simulated time: a wait on `cv` would block the thread every
  // fiber runs on, and with it the release it waits for.
  std::vector<int> Acquire(size_t want, Clock::time_point deadline) {
    std::unique_lock lock(mu);
    std::vector<int> got;
    while (true) {
      const auto now = Clock::now();
      Clock::time_point wake = deadline;
      for (size_t i = 0; i < busy.size() && got.size() < want; ++i) {
        if (busy[i]) continue;
        if (usable_after[i] > now) {
          wake = std::min(wake, usable_after[i]);
          continue;
        }
        busy[i] = true;
        got.push_back(static_cast<int>(i));
      }
      if (!got.empty() || now >= deadline) return got;
      if (SuspendableContext() != nullptr) {
        lock.unlock();
        SleepFor(std::min<Clock::duration>(wake - now, std::chrono::microseconds(20)));
        lock.lock();
        continue;
      }
      cv.wait_until(lock, wake);
    }
  }
  void Release(int s, bool quarantine, Clock::duration q) {
    {
      std::lock_guard lock(mu);
      busy[s] = false;
      if (quarantine) usable_after[s] = Clock::now() + q;
    }
    cv.notify_all();
  }
  std::byte* slot(int s) { return region->data() + static_cast<size_t>(s) * slot_size; }
};

namespace remote_detail {

namespace fb = fswire::fb;

// Errors after which the server may still touch the request's slot.
inline bool MaySlotBeTouched(int code) {
  switch (code) {
    case ETIMEDOUT:
    case ECONNRESET:
    case EIO:
    case ESHUTDOWN:
    case EHOSTDOWN:
    case ECONNREFUSED:
    case EPROTO:
      return true;
    default:
      return false;
  }
}



// The request for `q` in `session`, with the client's budget, the handles it
// releases and its id (0: none; FsRequest.request_id).
m2m::Bytes Encode(const RemoteNodeFs::Req& q, uint64_t session, uint64_t budget_us,
                  const std::vector<uint64_t>& releases, uint64_t request_id = 0);

inline uint16_t MethodOf(fb::Op op) {
  return MethodId(op == fb::Op::kRead || op == fb::Op::kWrite || op == fb::Op::kCoopStore
                      ? RpcMethod::kFsData
                      : RpcMethod::kFsMeta);
}

inline Result<const fb::FsReply*> Parse(const m2m::Bytes& bytes) {
  const auto* r = fswire::Verify<fb::FsReply>(bytes);
  if (r == nullptr) return Err(EPROTO, "malformed FsReply");
  if (r->version() != fswire::kVersion) return Err(EPROTO, "unsupported fs wire version");
  return r;
}

inline std::chrono::nanoseconds Until(std::chrono::steady_clock::time_point deadline) {
  return std::max<std::chrono::nanoseconds>(deadline - SteadyNow(),
                                            std::chrono::nanoseconds(0));
}


inline const fb::FsReply* Root(const m2m::Bytes& b) {
  return flatbuffers::GetRoot<fb::FsReply>(b.data());
}

}  // namespace remote_detail
}  // namespace fedfs::ns
