// The VD service's wire codec (vd/vd_service.h; messages in
// vd/vd.fbs): the bodies of kNsListLocal, kNsVdGet, kNsVdUpdate,
// kNsConflicts, kNsVdDrop and kNsDtInval requests and replies, to and from
// the types the service works with.
//
// Contract of every Decode*: the payload is untrusted bytes from the
// network. It is accepted only if it is a size-prefixed VdMessage that the
// FlatBuffers verifier accepts, of version kVersion, whose body is the one
// expected, with every required field present; anything else is EPROTO with
// the reason as context (never a crash, whatever the bytes). The payload may
// sit at any address (an unaligned one is copied). A decoded value owns its
// data (nothing points into the payload). Beyond that:
//  * DecodePathRequest: a sharer slot must have an rkey, a non-zero length
//    that is a multiple of 8, and the slot's word inside that length;
//  * DecodeUpdateRequest: 1..kMaxChangesPerUpdate changes of a known kind,
//    each with a name and a node (validating names is the service's work),
//    a kUnlink with its caller (at most kMaxGroups groups), a kRename with
//    its caller and its new name;
//  * DecodeVd, DecodeUpdateReply: entries strictly sorted by name (lookups
//    rely on it); DecodeVd counts the subdirectories;
//  * a lease (DecodeUpdateReply): every holder with a node id, each once.
// Encode*(x) gives bytes that the matching Decode* turns back into x.
// Pure functions; any thread. Internal to fedfs_ns_vd (and its fuzz target).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "m2m/transport.h"
#include "cluster/cluster.h"
#include "nodefs/node_fs.h"
#include "vd/vd.h"
#include "vd/vd_service.h"

namespace fedfs::ns::vdcodec {

inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kMaxPayloadBytes = 1u << 30;
inline constexpr size_t kMaxChangesPerUpdate = 16;
inline constexpr size_t kMaxGroups = 65536;  // NGROUPS_MAX

// A directory-table slot named in a kNsVdGet.
struct SharerSlotData {
  uint32_t slot = 0;
  m2m::RegionDesc region;
};

// A change of VD(P) as its manager tells a sharer of it (kNsDtInval's
// `patch`; DirTable::ApplyDelta): the versions before and after, the keys
// of the changed names (vd_internal::RefreshKeys), their entries now, and
// the holders.
struct DtPatchData {
  uint64_t version = 0;
  uint64_t prev_version = 0;
  std::vector<std::string> keys;
  std::vector<VdEntry> fresh;
  std::vector<std::string> holders;
};

// A path request (kNsListLocal, kNsVdGet, kNsConflicts, kNsVdDrop,
// kNsDtInval): the path, the sender's id and membership epoch; kNsVdGet may
// name the sender's DT slot and ask to be notified of changes.
struct PathRequestData {
  std::string path;
  std::string from;
  uint64_t epoch = 0;
  std::optional<SharerSlotData> sharer;
  bool notify = false;
  uint64_t lease = 0;  // kNsVdRecall, kNsVdRenew: the lease
  std::string name;    // kNsVdGetName: the visible name asked for
  uint64_t holders_hash = 0;  // kNsVdGetName: the requester's holders (0: none)
  bool names = false;         // kNsVdGetName: a names-only sharer record
  // kNsDtInval: the change as a delta to apply to the sharer's copy.
  std::optional<DtPatchData> patch;
};

// A kNsVdUpdate request.
struct UpdateRequestData {
  std::string path;
  std::string from;
  uint64_t epoch = 0;
  std::vector<VdChange> changes;  // never empty
  bool lease_ok = false;          // the sender may be lent VD(P)
  uint64_t holders_hash = 0;      // the holders the sender has (0: none)
  uint64_t request_id = 0;        // the same in a resend (0: none)
};

// VD(P) lent to a reporter (vd/vd_service.h, "Leases"): every copy of
// every name, by holder (each holder of P once, possibly with no entries).
struct LeaseData {
  uint64_t id = 0;
  uint64_t epoch = 0;
  std::vector<std::pair<std::string, std::vector<DirEntry>>> copies;
};

// A kNsVdRecall reply.
struct RecalledData {
  bool held = false;
  uint64_t version = 0;
};

// What one applied change did (kNsVdUpdate reply).
struct UpdateOutcome {
  uint64_t version = 0;  // after the change; 0: VD(P) was not resident
  uint64_t prev_version = 0;
  std::vector<std::string> keys;
  std::vector<VdEntry> fresh;
  std::vector<std::string> holders;
  std::optional<LeaseData> lease;  // VD(P) lent to the reporter
  bool sharer = false;  // the reporter is recorded as a sharer of P
  bool same_holders = false;  // `holders` left out: the reporter's
  // A kLockRead's answer (VdService::LockRead): the partial VD of the name
  // asked for (its entry or none, the holders, the subdirectories) and
  // whether the sender now holds the name.
  bool read = false;
  std::shared_ptr<const VirtualDirectory> read_vd;
  bool held = false;
  bool names_sharer = false;  // `sharer` is a names-only record
  bool added = false;  // a kAddNew's entry was added (else only claimed)
  // A kUnlink's answer (VdService::Unlink): the file's node unlinked it
  // and the removal was applied (with `read`, `read_vd` and `held`);
  // `parent`: the directory's attributes at that node right after.
  bool unlinked = false;
  std::optional<struct stat> parent;
  bool renamed = false;  // a kRename's answer (with `read`, `read_vd`)
  // The VD's count of subdirectories after the change (with `keys`; none
  // from a manager of an older version).
  std::optional<uint64_t> subdirs;
};

// `from` and `epoch` are view.self and view.epoch.
m2m::Bytes EncodePathRequest(const std::string& path, const ClusterView& view,
                             const SharerSlotData* sharer = nullptr, bool notify = false,
                             const std::string& name = {}, uint64_t holders_hash = 0,
                             bool names = false);
// `changes` is never empty.
m2m::Bytes EncodeUpdateRequest(const std::string& path, const std::vector<VdChange>& changes,
                               const ClusterView& view, bool lease_ok = false,
                               uint64_t holders_hash = 0, uint64_t request_id = 0);
// A kNsDtInval request carrying `patch` for the sharer to apply; `notify`:
// its kernel's names of P are dropped too.
m2m::Bytes EncodeDtPatch(const std::string& path, const ClusterView& view,
                         const DtPatchData& patch, bool notify);
// A kNsVdRecall request: a PathRequest naming the lease.
m2m::Bytes EncodeRecallRequest(const std::string& path, const ClusterView& view, uint64_t lease);
m2m::Bytes EncodeRecalled(const RecalledData& r);
m2m::Bytes EncodeListing(const std::vector<DirEntry>& entries);
// `uncached`: the receiver must not keep it (decodes as cacheable = false).
// A partial VD (kNsVdGetName) keeps its `subdirs`; a whole one's are counted.
// `same_holders`: the holders are left out (the receiver has them).
m2m::Bytes EncodeVd(const VirtualDirectory& vd, bool uncached = false, bool same_holders = false);
// A decoded VD that says `same_holders` (a partial one) has none: the
// caller fills them in.
bool SameHolders(const m2m::Bytes& payload);
m2m::Bytes EncodeConflicts(const std::vector<Conflict>& conflicts);
m2m::Bytes EncodeUpdateReply(const UpdateOutcome& o);

Result<PathRequestData> DecodePathRequest(const m2m::Bytes& payload);
Result<UpdateRequestData> DecodeUpdateRequest(const m2m::Bytes& payload);
Result<std::vector<DirEntry>> DecodeListing(const m2m::Bytes& payload);
Result<VdPtr> DecodeVd(const m2m::Bytes& payload);
Result<std::vector<Conflict>> DecodeConflicts(const m2m::Bytes& payload);
Result<UpdateOutcome> DecodeUpdateReply(const m2m::Bytes& payload);
Result<RecalledData> DecodeRecalled(const m2m::Bytes& payload);

}  // namespace fedfs::ns::vdcodec
