// Helpers of VdService's implementation (vd_service_impl.h): constants,
// the DT entry key, reply decoding, request and change checks. Internal to
// fedfs_ns_vd.
#pragma once

#include <dirent.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/logging.h"
#include "m2m/reply_cache.h"
#include "vd/vd_internal.h"
#include "vd/vd_service.h"
#include "vd/vd_wire.h"

namespace fedfs::ns {

using namespace vdcodec;  // the messages (vd/vd_wire.h)

namespace vd_detail {

// A client that hears ESTALE refreshes its view and retries this many times.
inline constexpr int kMaxStaleRetries = 3;

// vd/vd_service.h, "Lost messages": resent requests and invalidations.
using m2m::kMaxResends;
using m2m::ConnectionBroken;

// The context of the EAGAIN a node answers its own operation with when it
// found P lent to it but serves the operation after the lease ended (it
// neither manages nor holds P any more): the operation goes to M(P) instead
// (UpdateOutcomeOf).
inline constexpr std::string_view kLeaseEnded = "the lease ended: ";

inline std::shared_ptr<spdlog::logger> Log() {
  static auto logger = Logger("vd");
  return logger;
}

// The key a DT entry is bound to: the membership epoch, and whether it was
// fetched with `notify` (top bit; epochs never reach it).
inline uint64_t DtEpoch(uint64_t epoch, bool notify) {
  return notify ? epoch | (uint64_t{1} << 63) : epoch;
}

// Decodes a kNsVdGet/kNsVdGetName reply for this node: `quiet`, not for its
// kernel (fetched without notify while the kernel caches names); a partial
// VD whose holders were left out gets `have`, the requester's own.
inline Result<VdPtr> DecodeVdFor(const m2m::Bytes& b, bool quiet,
                                 const std::optional<std::vector<std::string>>& have) {
  auto vd = DecodeVd(b);
  if (vd) {
    auto* w = std::const_pointer_cast<VirtualDirectory>(*vd).get();
    if (quiet) w->kernel_may_cache = false;
    if (have && w->partial && SameHolders(b)) w->holders = *have;
  }
  return vd;
}

// A requester that the manager does not see as a live member (membership
// still converging) is served but not recorded (its copy is marked
// uncacheable, since no change would invalidate it): true if so, and its
// sharer slot and notify are dropped from `req`.
inline bool UnrecordUnknown(PathRequestData& req, const ClusterView& view) {
  const bool uncached = (req.sharer || req.notify) && !view.IsAlive(req.from);
  if (uncached) {
    req.sharer.reset();
    req.notify = false;
  }
  return uncached;
}

inline Status ValidateChange(const VdChange& c) {
  if (auto s = ValidateName(c.name); !s) return s;
  if (c.node.empty()) return Err(EINVAL, "VD change without a node");
  return Ok();
}

// Every change valid; claims and releases alone; at most kMaxChangesPerUpdate.
// A lock of one name and a claim of another, taken together (a rename within
// one directory: VdService::UpdateMany).
inline bool IsLockAndClaim(const std::vector<VdChange>& changes) {
  return changes.size() == 2 && changes[0].kind == VdChange::Kind::kLock &&
         changes[1].kind == VdChange::Kind::kClaim && changes[0].name != changes[1].name;
}

// Whether `changes`, applied to state `s`, only add names that had no copy
// (nor do the names their aliases collide with), none of them a directory,
// on nodes that already hold the directory: then every entry that existed
// is unchanged, and so are the directory's holders and subdirectories --
// all a names-only sharer keeps (SharerRec::names_only).
inline bool IsAdditive(const vd_internal::MergeState& s, const std::vector<VdChange>& changes) {
  for (const VdChange& c : changes) {
    if (c.kind != VdChange::Kind::kAdd || c.type == DT_DIR || c.type == DT_UNKNOWN) return false;
    if (std::find(s.holders.begin(), s.holders.end(), c.node) == s.holders.end()) return false;
    for (const std::string& k : vd_internal::RefreshKeys(c.name)) {
      if (s.copies.count(k) != 0) return false;
    }
  }
  return true;
}

inline Status ValidateChanges(const std::vector<VdChange>& changes) {
  if (changes.empty()) return Err(EINVAL, "VD update without a change");
  if (changes.size() > kMaxChangesPerUpdate) return Err(EINVAL, "VD update with too many changes");
  for (const VdChange& c : changes) {
    if (auto s = ValidateChange(c); !s) return s;
    const bool claim = c.kind == VdChange::Kind::kClaim || c.kind == VdChange::Kind::kRelease ||
                       c.kind == VdChange::Kind::kLock || c.kind == VdChange::Kind::kLockRead ||
                       c.kind == VdChange::Kind::kAddNew || c.kind == VdChange::Kind::kUnlink ||
                       c.kind == VdChange::Kind::kRename;
    if (c.kind == VdChange::Kind::kRename) {
      if (auto s = ValidateName(c.to); !s) return s;
      if (c.to == c.name) return Err(EINVAL, "a VD rename onto its own name");
      if (c.flags != 0 && c.flags != RENAME_NOREPLACE) return Err(EINVAL, "VD rename flags");
    }
    if (c.kind == VdChange::Kind::kAddNew && (c.type == DT_DIR || c.type == DT_UNKNOWN)) {
      return Err(EINVAL, "a VD add-new of a directory or of no type");
    }
    if (claim && changes.size() > 1 && !IsLockAndClaim(changes)) {
      return Err(EINVAL,
                 "a VD claim, add-new, unlink, rename, lock or release goes alone (or a lock "
                 "with one claim)");
    }
  }
  return Ok();
}

}  // namespace vd_detail

}  // namespace fedfs::ns
