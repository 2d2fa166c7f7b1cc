// The one registry of RPC method ids for the whole project.
//
// Every two-sided request carries a uint16 method id (m2m::Transport::Handle,
// Endpoint::Call). Ids are allocated here, in ranges per module, so that two
// modules never collide and a reader can tell from an id who serves it.
// Never reuse or renumber a released id: peers of different builds may meet
// during a rolling upgrade. Add new ids at the end of the module's range.
//
//   0            reserved (never valid)
//   1..15        membership (cluster/membership.h)
//   16..63       namespace: VD lookup, dirmerge, directory table coherence
//   64..95       data path: forwarded read/write/attributes
//   96..127      cooperative cache
//   128..159     migration
//   160..191     tools and benchmarks (fedfs-bench, test-only methods)
//   192..65535   unallocated
#pragma once

#include <cstdint>

namespace fedfs {

enum class RpcMethod : uint16_t {
  kInvalid = 0,

  // Membership (cluster/membership.fbs: MemberMessage in both directions).
  kMemberJoin = 1,       // a starting node asks a seed for the view
  kMemberHeartbeat = 2,  // periodic all-to-all exchange of views
  kMemberLeave = 3,      // reserved: graceful leave on shutdown

  kNamespaceFirst = 16,
  // Namespace, VD service (vd/vd_service.h; bodies: vd/vd.fbs).
  // Sub-range 16..31.
  kNsListLocal = 16,  // a node's local listing of P (dirmerge leaf)
  kNsVdGet = 17,      // VD(P) from its manager M(P)
  kNsVdUpdate = 18,   // a change of one entry of VD(P), sent to M(P)
  kNsConflicts = 19,  // the name conflicts of P, from M(P)
  kNsVdDrop = 20,     // drop resident VDs at or beneath P (sent to every live node)
  kNsDtInval = 21,    // invalidate directory-table entries of P (two-sided fallback
                      // when a VD's sharer list overflowed; see vd_service.h)
  kNsVdRecall = 22,   // M(P) -> the node P is lent to: give the lease back
  kNsVdRenew = 23,    // the node P is lent to -> M(P): extend the lease's term
  kNsVdGetName = 24,  // one entry of VD(P) from M(P) (a lookup in a stale DT copy)
  // Pending operations of dead members (dirops/pending_service.h; bodies:
  // dirops/dir_ops.fbs). Sub-range 32..39.
  kNsPendingPut = 32,     // a coordinator's records, to every live node
  kNsPendingGet = 33,     // a returning member asks for its records
  kNsPendingDone = 34,    // a member applied its records up to a seq
  kNsPendingNotify = 35,  // "you have records to apply"
  kNsPendingForget = 36,  // a member left for good: drop its records
  kDataFirst = 64,
  // Data path, file service (files/file_service.h; bodies: files/fs.fbs).
  // Sub-range 64..79.
  kFsHello = 64,  // a client session binds this connection and its buffer pool
  kFsMeta = 65,   // one NodeFs operation other than Read/Write (FsRequest.op)
  kFsData = 66,   // Read/Write (same FsRequest body; own id for traffic stats)
  kFsAttrChanged = 67,  // holder -> client: attributes of files it has open changed
  kCoopCacheFirst = 96,
  kMigrationFirst = 128,
  kMigStart = 128,    // J -> L: move a file held there (migration/migration.h)
  kMigPrepare = 129,  // L -> T: journal, copy into an unnamed file
  kMigPlace = 130,    // L -> T: link the copy at its name (hidden: incoming)
  kMigCommit = 131,   // L -> T: the move is committed; the name is T's
  kMigAbort = 132,    // L -> T: undo what T did
  kMigOutcome = 133,  // T -> L (recovery): was the move committed?
  kMigLargest = 134,  // J -> each node: its largest files (rebalance)
  kMigDelta = 135,    // L -> T: the file changed during the copy: its chunk hashes
  kMigCancel = 136,   // -> L: cancel the move of a path; L -> T: stop that move's copy
  kMigProgress = 137,  // -> L: the copy's progress of a path's move; L -> T: of that move
  kToolsFirst = 160,  // tools and benchmarks (160 was fedfs-bench's own file
                      // message before the simulator ran the file service)
};

// The id as passed to the transport.
constexpr uint16_t MethodId(RpcMethod m) { return static_cast<uint16_t>(m); }

}  // namespace fedfs
