// RemoteNodeFs (files/remote_node_fs.h): the client's half of N-chance
// forwarding (docs/coopcache.md; fs.fbs, Op kCoopEvict, kCoopStore,
// kCoopMoved).
#include <cstring>

#include "files/remote_node_fs_internal.h"

namespace fedfs::ns {

namespace fb = fswire::fb;
using namespace remote_detail;

Result<std::optional<NodeFs::CoopTarget>> RemoteNodeFs::CoopEvict(const CoopBlock& blk) {
  if (opts_.coop.block == 0 || blk.block != opts_.coop.block) {
    return Err(ENOTSUP, "no cache shared with this node");
  }
  auto r = Call({.op = fb::Op::kCoopEvict, .fwd = &blk}, FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  const auto* rep = Root(*r);
  if (rep->forward_node() == nullptr || rep->forward_node()->size() == 0) return std::nullopt;
  return CoopTarget{rep->forward_node()->str(), rep->forward_version()};
}

// The bytes go through a slot of the pool (the peer reads them one-sidedly
// straight into its cache's frame), inline without a pool.
Result<NodeFs::CoopCopyAt> RemoteNodeFs::CoopStore(const CoopBlock& blk) {
  const auto deadline = FEDFS_DEADLINE;
  if (!helloed_.load()) {  // it says the largest transfer it takes
    if (auto st = Hello(deadline); !st) return Err(st.error());
  }
  if (blk.bytes.empty() || blk.bytes.size() > blk.block || blk.bytes.size() > MaxIo()) {
    return Err(EINVAL, "forwarded block of a bad length");
  }
  Req q{.op = fb::Op::kCoopStore, .length = blk.bytes.size(), .fwd = &blk};
  int slot = -1;
  if (slots_ && blk.bytes.size() > opts_.inline_max) {
    auto got = slots_->Acquire(1, deadline);
    if (got.empty()) return Err(ETIMEDOUT, "no free buffer slot before the deadline");
    slot = got[0];
    std::memcpy(slots_->slot(slot), blk.bytes.data(), blk.bytes.size());
    q.slot = slot;
  } else {
    q.data = blk.bytes;
  }
  auto r = Call(q, deadline);
  if (slot >= 0) {
    const bool touched = !r && MaySlotBeTouched(r.error().code);
    slots_->Release(slot, touched, 2 * opts_.rpc_timeout + std::chrono::seconds(1));
  }
  if (!r) return Err(r.error());
  const auto* at = Root(*r)->stored();
  if (at == nullptr) return Err(EPROTO, "store reply without where");
  return fswire::CoopCopyFromWire(*at);
}

Status RemoteNodeFs::CoopMoved(const CoopBlock& blk) {
  auto r = Call({.op = fb::Op::kCoopMoved, .length = blk.length, .fwd = &blk}, FEDFS_DEADLINE);
  if (!r) return Err(r.error());
  return Ok();
}

}  // namespace fedfs::ns
