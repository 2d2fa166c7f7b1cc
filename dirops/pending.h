// Pending operations of dead members (docs/faults.md, "Directory operations
// with dead members").
//
// A directory rename or rmdir that runs while a member of the federation is
// dead goes ahead among the live members (dirops/dir_ops.h, "Dead nodes")
// and leaves, for each dead member, a PendingOp: what that member must do to
// its own export root when it returns, so that nothing of the old names
// reappears through its listings. This header holds the record, its codec
// (also the wire form of the kNsPending* messages, dirops/pending_service.h)
// and the store of the records a node holds (its own and copies of every
// other coordinator's), kept in its Kv under kvkeys::PendingKey.
//
// Order: a member applies its records by `seq`. `seq` is the operation's
// journal id (wall-clock nanoseconds at the coordinator, made larger than any
// seq the coordinator already holds): operations that overlap take the same
// name lock at a manager, and each one's records are on every live node
// before it answers and lets the lock go, so the later one's coordinator
// holds the earlier one's records and picks a larger seq.
//
// Contract of the decoders: the bytes are whatever a Kv or a peer holds,
// possibly hostile; anything but a record this version writes (verified
// FlatBuffers, a valid node id and global paths, a known kind) is EPROTO,
// never a crash. Bytes must be 8-aligned (a std::string's are).
//
// Threads: PendingStore is thread-safe; its writes are synced Kv writes
// (call from worker threads); Holds/Fenced take only a leaf mutex.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "dirops/kv.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

inline constexpr uint16_t kPendingRecordVersion = 1;

struct PendingOp {
  enum class Kind : uint8_t { kRename = 0, kRmdir = 1 };
  uint64_t seq = 0;
  uint64_t op_id = 0;
  std::string node;  // the member that must apply it
  Kind kind = Kind::kRename;
  std::string from;
  std::string to;  // rename only
  std::vector<NodeFs::DirTemplate> templates;  // rename: ancestors of `to`
  std::string coordinator;
  uint64_t time_ms = 0;

  std::string Describe() const;
  bool operator==(const PendingOp& o) const;
};

// Wall-clock milliseconds (PendingOp::time_ms, and the age of a record).
uint64_t PendingNowMs();

// One record (a Kv value) and a list of them (kNsPendingPut's request,
// kNsPendingGet's reply).
std::string EncodePendingOp(const PendingOp& op);
Result<PendingOp> DecodePendingOp(std::string_view bytes);
std::string EncodePendingList(const std::vector<PendingOp>& ops);
Result<std::vector<PendingOp>> DecodePendingList(std::string_view bytes);
// kNsPendingGet/Done/Forget: a node id and a seq.
std::string EncodePendingAsk(const std::string& node, uint64_t seq);
Result<std::pair<std::string, uint64_t>> DecodePendingAsk(std::string_view bytes);

class PendingStore {
 public:
  // `kv` outlives the store. Nothing is read before Load.
  explicit PendingStore(Kv* kv) : kv_(kv) {}

  // Reads every record of the Kv into the index. A record that does not
  // decode is logged and left alone (as dirops' journal records are).
  [[nodiscard]] Status Load();

  // Adds the writes of `ops` to `batch` (the coordinator's journal write);
  // once the batch is applied, Added(ops) indexes them.
  static void AddTo(KvBatch* batch, const std::vector<PendingOp>& ops);
  void Added(const std::vector<PendingOp>& ops);
  // Stores records (a copy from a coordinator), synced; those already held
  // are written again (idempotent).
  [[nodiscard]] Status Put(const std::vector<PendingOp>& ops);
  // Removes the records of `node` with seq <= `upto` (all: UINT64_MAX), or
  // those of one operation (EraseOp: an operation undone; also those written
  // with AddTo and not yet Added).
  [[nodiscard]] Status Erase(const std::string& node, uint64_t upto);
  [[nodiscard]] Status EraseOp(uint64_t op_id);

  // The records of `node` by seq ("" = every node's, by node then seq).
  std::vector<PendingOp> For(const std::string& node) const;
  // Whether this node holds a record for `node` (its fence).
  bool Holds(const std::string& node) const;
  std::set<std::string> Fenced() const;
  // The largest seq held for any node (0: none).
  uint64_t MaxSeq() const;

 private:
  Kv* const kv_;
  mutable std::mutex mu_;  // leaf
  std::map<std::string, std::map<uint64_t, PendingOp>> by_node_;  // GUARDED_BY(mu_)
};

}  // namespace fedfs::ns
