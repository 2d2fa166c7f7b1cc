// DirTable: this node's directory table (docs/namespace.md, "Directory
// table"): a fixed-capacity, TLB-like cache of the virtual directories that
// other nodes manage.
//
// Coherence without the sharer's CPU. Every slot has a 64-bit version word in
// memory registered with the transport (one array, `region()`). A miss
// reserves a slot, reads its word (the ticket), and asks the manager M(P) for
// VD(P), naming the slot; M(P) records this node as a sharer of P at that
// slot. When VD(P) changes, M(P) adds 1 to the word of every sharer with a
// one-sided FetchAdd and waits for those to complete before it acknowledges
// the change (a sharer that is sent a call for the change anyway, for its
// kernel's names, is invalidated by that call instead: Invalidate). An entry
// is valid while its word still holds the ticket's value
// and it was fetched in the current membership epoch, so a lookup after the
// acknowledgement misses and refetches. A bump that reaches a slot already
// reused for another path only costs that path a refetch.
//
// Names in a stale copy. A slot whose copy went stale keeps it, and a lookup
// of one name there fetches that name's entry only (kNsVdGetName: O(1) bytes,
// not O(entries)); the manager records the slot as for a whole fetch, and the
// entry is valid while the word holds the value it had when the name was
// asked for. A shared directory that many nodes change thus costs each
// lookup one small request, not a copy of the whole directory.
//
// Names only. A slot may hold, instead of a copy, a skeleton: the
// directory's holders and summary with no entries (a directory too large to
// copy whole, or a busy one, whose manager records this node for names
// only). It answers no name by itself; the names fetched into it answer
// them, valid while the word holds the value it had when each was asked for.
//
// Replacement: CLOCK over `max_entries` slots, also bounded by `max_bytes`
// (an estimate of the VDs' memory). Only directories managed elsewhere are
// kept here: a manager reads its own resident VDs directly.
//
// Threads: every method is thread-safe (one mutex; the words are read with
// acquire loads and bumped with atomic adds, since remote atomics land in them
// without any lock). Ownership: owns the words' registration; the transport
// must outlive this object.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "m2m/transport.h"
#include "vd/vd.h"

namespace fedfs::ns {

struct DirTableOptions {
  size_t max_entries = 4096;
  size_t max_bytes = size_t{64} << 20;
};

class DirTable {
 public:
  using VdPtr = std::shared_ptr<const VirtualDirectory>;

  // Registers the version words with `transport` (Allocate). A null transport
  // keeps them in plain memory (no remote invalidation; for tests).
  static Result<std::unique_ptr<DirTable>> Create(DirTableOptions options,
                                                  m2m::Transport* transport);
  ~DirTable();

  // What a miss sends to the manager: the slot reserved for the path and the
  // word's value when it was reserved.
  struct Ticket {
    std::string path;
    uint32_t slot = 0;
    uint64_t word = 0;
    uint64_t generation = 0;  // the slot's reuse count
  };

  // A hit: VD(path) if cached, unchanged since it was fetched, and fetched in
  // `epoch` (this node's membership epoch). Counts a hit or a miss.
  VdPtr Find(const std::string& path, uint64_t epoch);
  // A miss: the slot for `path` (its own if it has one, else a CLOCK victim).
  Ticket Reserve(const std::string& path);
  // Keeps `vd` in the ticket's slot, unless the slot was taken by another path
  // since. If the word moved since the ticket, the entry is born stale. A
  // valid copy there that deltas took past `vd`'s version (the answer left
  // the manager before them) is kept instead.
  void Install(const Ticket& ticket, VdPtr vd, uint64_t epoch);

  // A hit for one name: the whole copy if valid (as Find), else the entry of
  // `name` fetched since the copy went stale, if still valid. Counts a hit or
  // a miss.
  // *stale (optional): the miss found the copy invalidated (or a skeleton)
  // by a bump that no earlier miss reported: true once per change that
  // reached the slot, not at every lookup of a copy that stays stale.
  // *names_only (optional): the miss found a skeleton (see "Names only").
  VdPtr FindName(const std::string& path, const std::string& name, uint64_t epoch,
                 bool* stale = nullptr, bool* names_only = nullptr);
  // A miss for one name in a copy of `epoch` that went stale: the slot's
  // ticket, to fetch that name only. None: no such copy (fetch it whole).
  std::optional<Ticket> ReserveName(const std::string& path, uint64_t epoch);
  // Keeps `part` (a partial VD: the entry of `name` or none) in the ticket's
  // slot, valid while the word holds the ticket's value.
  void InstallName(const Ticket& ticket, const std::string& name, VdPtr part, uint64_t epoch);
  // A whole fetch (`ticket` from Reserve) answered for `name` only: the slot
  // keeps a skeleton of `part` (see "Names only"), and `part` for `name` if
  // the name exists or is the directory itself ("").
  void InstallNamesOnly(const Ticket& ticket, const std::string& name, VdPtr part,
                        uint64_t epoch);

  // After this node's own change of VD(path) at the manager moved it from
  // `prev_version` to `vd_version`: patches the cached copy (entries whose
  // real name is in `keys` replaced by `fresh`, holders replaced) when it is
  // at `prev_version`, else invalidates it.
  // A stale copy keeps the changed names' entries instead, when `sharer` (the
  // manager still records this node) and no other change reached the slot
  // since BeginOwnChange.
  // `holders`: none when they did not change (kept). `names_only`: the
  // manager records this node for names that exist only (not bumped when a
  // new name is created): a changed name that no longer exists is not kept.
  // `subdirs`: the directory's count of subdirectories after the change (a
  // manager of an older version does not say): with it, a stale copy keeps
  // the directory's summary (FindName with no name) too.
  void Patch(const std::string& path, uint64_t prev_version, uint64_t vd_version,
             const std::vector<std::string>& keys, std::vector<VdEntry> fresh,
             std::optional<std::vector<std::string>> holders, bool sharer = false,
             bool names_only = false, std::optional<uint64_t> subdirs = std::nullopt);

  // Another node's change of VD(path), told by its manager as a delta
  // (docs/namespace.md, "Changes as deltas"): patches the copy (as Patch)
  // and keeps it valid when it is a valid whole copy of membership epoch
  // `epoch` at `prev_version` that was read since its last kMaxUnusedDeltas
  // deltas. Without a valid copy (a fetch may be on its way) it is queued,
  // up to kMaxQueuedDeltas, and the slot bumped: the next whole Install
  // applies the queue past its version and is valid if no other bump came
  // since its ticket. A valid copy at `vd_version` or later has it already.
  // Else the copy is invalidated as a bump would. True:
  // kept (the manager keeps this node recorded, and tells it the next
  // change the same way).
  bool ApplyDelta(const std::string& path, uint64_t epoch, uint64_t prev_version,
                  uint64_t vd_version, const std::vector<std::string>& keys,
                  std::vector<VdEntry> fresh, std::vector<std::string> holders);
  // Deltas a copy takes without being read before it is dropped: a node that
  // stopped looking into a directory stops costing its changes a call.
  static constexpr uint32_t kMaxUnusedDeltas = 16;
  static constexpr size_t kMaxQueuedDeltas = 16;

  // The copy of `path` here, valid or stale (or a skeleton), if fetched in
  // `epoch`; for decisions that the manager checks again (VdService::Peek).
  VdPtr AnyCopy(const std::string& path, uint64_t epoch) const;

  // The holders of the copy of `path` here (stale or not); none without one.
  std::optional<std::vector<std::string>> CopyHolders(const std::string& path) const;

  // Brackets this node's own change of VD(path) at the manager, from before
  // it is sent until its reply was patched in: the manager does not bump the
  // reporter's word (it patches), so meanwhile Find misses for `path` and a
  // lookup asks the manager, which answers the state before or after the
  // change, never this older copy after another node saw the newer one.
  void BeginOwnChange(const std::string& path);
  void EndOwnChange(const std::string& path);

  // Local invalidation (bumps the word as a manager would).
  void Invalidate(const std::string& path);
  // Every cached path at or beneath `path`.
  void InvalidateSubtree(const std::string& path);
  void InvalidateAll();

  // For managers: word of slot s at offset 8 * s.
  const m2m::RegionDesc& region() const { return desc_; }
  size_t capacity() const { return slots_.size(); }

  struct Stats {
    uint64_t capacity = 0;
    uint64_t max_bytes = 0;
    uint64_t occupancy = 0;     // slots holding a valid-looking entry
    uint64_t bytes = 0;
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t stale = 0;         // misses that found an entry invalidated
    uint64_t evictions = 0;
    uint64_t bumps_received = 0;  // sum of the words minus local bumps
    uint64_t local_bumps = 0;
    uint64_t patches = 0;
    uint64_t name_hits = 0;      // hits (counted in hits too) on one name of a stale copy
    uint64_t name_installs = 0;  // names fetched or patched into stale copies
    uint64_t skeletons = 0;      // whole fetches answered for one name (see "Names only")
    uint64_t deltas_applied = 0;  // other nodes' changes patched in (ApplyDelta)
    uint64_t deltas_refused = 0;  // deltas that found no valid copy to patch (dropped)
    uint64_t deltas_queued = 0;   // deltas kept for a fetch on its way
  };
  Stats stats() const;

 private:
  // The entry of one name in a stale copy (see "Names in a stale copy").
  struct Named {
    VdPtr part;
    uint64_t expected = 0;
    uint64_t epoch = 0;
  };
  static constexpr size_t kMaxNamesPerSlot = 256;
  // A delta that found no valid copy, for the next whole Install.
  struct Queued {
    uint64_t epoch = 0;
    uint64_t prev_version = 0;
    uint64_t version = 0;
    std::vector<std::string> keys;
    std::vector<VdEntry> fresh;
    std::vector<std::string> holders;
    uint64_t bumped = 0;  // the slot's word after its bump; 0: not bumped,
                          // waiting for this node's own change (Patch)
  };
  static constexpr size_t kNamedBytes = 256;  // estimate per name kept

  struct Slot {
    std::string path;  // "" = free
    VdPtr vd;
    std::unordered_map<std::string, Named> names;
    uint64_t expected = 0;
    uint64_t stale_seen = 0;  // the word when a miss last reported the copy stale
    uint64_t epoch = 0;
    uint64_t generation = 0;
    size_t bytes = 0;
    bool referenced = false;
    uint32_t unused_deltas = 0;  // deltas applied since the copy was last read
    std::vector<Queued> queued;  // deltas for a fetch on its way (ApplyDelta)
  };

  DirTable(DirTableOptions options, std::unique_ptr<m2m::LocalRegion> region,
           std::vector<uint64_t> plain);
  uint64_t LoadWord(size_t s) const;
  void BumpLocked(size_t s);
  void DropLocked(size_t s);
  // Find (name null) and FindName, under mu_.
  VdPtr FindLocked(const std::string& path, const std::string* name, uint64_t epoch,
                   bool* stale, bool* names_only = nullptr);
  // Keeps `part` for `name` in slot `s` (bounded: stale names go first).
  void PutNameLocked(size_t s, const std::string& name, VdPtr part, uint64_t expected,
                     uint64_t epoch);
  // Patches slot's whole copy in place (or a copy of it while readers hold
  // it) to `vd_version`.
  void PatchCopyLocked(Slot& slot, uint64_t vd_version, const std::vector<std::string>& keys,
                       std::vector<VdEntry> fresh,
                       std::optional<std::vector<std::string>> holders);
  // Applies slot s's deltas queued behind this node's own change (Queued
  // with `bumped` 0) that follow its copy; drops the copy if one does not.
  void DrainAfterOwnLocked(size_t s);
  // Applies slot s's queued deltas past its copy's version after a whole
  // Install with a ticket of word `ticket_word` (see ApplyDelta).
  void ApplyQueuedLocked(size_t s, uint64_t ticket_word);
  size_t VictimLocked();
  bool ValidLocked(const Slot& slot, size_t s) const;
  static size_t SizeOf(const VirtualDirectory& vd);

  const DirTableOptions options_;
  std::unique_ptr<m2m::LocalRegion> region_;  // the words (or plain_)
  std::vector<uint64_t> plain_;
  uint64_t* words_ = nullptr;
  m2m::RegionDesc desc_;

  mutable std::mutex mu_;
  std::vector<Slot> slots_;                       // guarded by mu_
  std::unordered_map<std::string, size_t> index_;  // path -> slot; guarded by mu_
  // Own changes in flight, by path: how many, and the slot's word when the
  // first began (UINT64_MAX: no slot then). Guarded by mu_.
  struct OwnChange {
    size_t count = 0;
    uint64_t word = 0;
  };
  std::unordered_map<std::string, OwnChange> own_changes_;
  size_t hand_ = 0;
  size_t bytes_ = 0;
  Stats stats_;
};

}  // namespace fedfs::ns
