#include "vd/dir_table.h"

#include <algorithm>
#include <atomic>
#include <map>

#include "common/path.h"
#include "vd/vd_internal.h"

namespace fedfs::ns {

Result<std::unique_ptr<DirTable>> DirTable::Create(DirTableOptions options,
                                                   m2m::Transport* transport) {
  if (options.max_entries == 0) return Err(EINVAL, "directory table with 0 entries");
  if (options.max_entries > (size_t{1} << 24)) {
    return Err(EINVAL, "directory table of more than 2^24 entries");
  }
  std::unique_ptr<m2m::LocalRegion> region;
  std::vector<uint64_t> plain;
  if (transport != nullptr) {
    auto r = transport->Allocate(options.max_entries * sizeof(uint64_t));
    if (!r) return Err(r.error().code, "directory table words: " + r.error().context);
    region = std::move(*r);
  } else {
    plain.assign(options.max_entries, 0);
  }
  return std::unique_ptr<DirTable>(new DirTable(options, std::move(region), std::move(plain)));
}

DirTable::DirTable(DirTableOptions options, std::unique_ptr<m2m::LocalRegion> region,
                   std::vector<uint64_t> plain)
    : options_(options), region_(std::move(region)), plain_(std::move(plain)) {
  if (region_) {
    words_ = reinterpret_cast<uint64_t*>(region_->data());
    desc_ = region_->Export();
  } else {
    words_ = plain_.data();
  }
  slots_.resize(options_.max_entries);
  stats_.capacity = options_.max_entries;
  stats_.max_bytes = options_.max_bytes;
}

DirTable::~DirTable() = default;

uint64_t DirTable::LoadWord(size_t s) const {
  return std::atomic_ref<uint64_t>(words_[s]).load(std::memory_order_acquire);
}

void DirTable::BumpLocked(size_t s) {
  std::atomic_ref<uint64_t>(words_[s]).fetch_add(1, std::memory_order_acq_rel);
  ++stats_.local_bumps;
}

namespace {
int64_t HoldersBytes(const std::vector<std::string>& holders) {
  int64_t n = 0;
  for (const auto& h : holders) n += static_cast<int64_t>(sizeof(std::string) + h.size());
  return n;
}
}  // namespace

size_t DirTable::SizeOf(const VirtualDirectory& vd) {
  size_t n = sizeof(VirtualDirectory) + vd.path.size() +
             static_cast<size_t>(HoldersBytes(vd.holders));
  for (const auto& e : vd.entries) n += VdEntryBytes(e);
  return n;
}

bool DirTable::ValidLocked(const Slot& slot, size_t s) const {
  // A skeleton (partial) is never a valid whole copy.
  return slot.vd != nullptr && !slot.vd->partial && LoadWord(s) == slot.expected;
}

void DirTable::DropLocked(size_t s) {
  Slot& slot = slots_[s];
  if (!slot.path.empty()) index_.erase(slot.path);
  bytes_ -= slot.bytes + slot.names.size() * kNamedBytes;
  slot = Slot{.generation = slot.generation + 1};
}

void DirTable::PutNameLocked(size_t s, const std::string& name, VdPtr part, uint64_t expected,
                             uint64_t epoch) {
  Slot& slot = slots_[s];
  if (slot.names.size() >= kMaxNamesPerSlot && !slot.names.contains(name)) {
    const uint64_t word = LoadWord(s);
    const size_t before = slot.names.size();
    std::erase_if(slot.names, [&](const auto& kv) { return kv.second.expected != word; });
    if (slot.names.size() >= kMaxNamesPerSlot) slot.names.clear();
    bytes_ -= (before - slot.names.size()) * kNamedBytes;
  }
  auto [it, added] = slot.names.insert_or_assign(name, Named{std::move(part), expected, epoch});
  if (added) bytes_ += kNamedBytes;
  ++stats_.name_installs;
}

DirTable::VdPtr DirTable::FindName(const std::string& path, const std::string& name,
                                   uint64_t epoch, bool* stale, bool* names_only) {
  std::lock_guard lock(mu_);
  return FindLocked(path, &name, epoch, stale, names_only);
}

DirTable::VdPtr DirTable::FindLocked(const std::string& path, const std::string* name,
                                     uint64_t epoch, bool* stale, bool* names_only) {
  auto it = index_.find(path);
  if (it == index_.end() || (!own_changes_.empty() && own_changes_.contains(path))) {
    ++stats_.misses;
    return nullptr;
  }
  Slot& slot = slots_[it->second];
  const uint64_t word = LoadWord(it->second);
  if (slot.vd != nullptr && !slot.vd->partial && slot.epoch == epoch && word == slot.expected) {
    slot.referenced = true;
    slot.unused_deltas = 0;
    ++stats_.hits;
    return slot.vd;
  }
  if (auto n = name != nullptr ? slot.names.find(*name) : slot.names.end();
      n != slot.names.end() && n->second.epoch == epoch && n->second.expected == word) {
    slot.referenced = true;
    ++stats_.hits;
    ++stats_.name_hits;
    return n->second.part;
  }
  ++stats_.misses;
  if (slot.vd != nullptr) {
    ++stats_.stale;
    if (stale != nullptr) {
      if (word != slot.stale_seen) *stale = true;
      slot.stale_seen = word;
    }
    if (names_only != nullptr && slot.vd->partial) *names_only = true;
  }
  return nullptr;
}

std::optional<DirTable::Ticket> DirTable::ReserveName(const std::string& path, uint64_t epoch) {
  std::lock_guard lock(mu_);
  auto it = index_.find(path);
  if (it == index_.end()) return std::nullopt;
  const size_t s = it->second;
  const Slot& slot = slots_[s];
  if (slot.vd == nullptr || slot.epoch != epoch) return std::nullopt;
  return Ticket{path, static_cast<uint32_t>(s), LoadWord(s), slot.generation};
}

void DirTable::InstallName(const Ticket& t, const std::string& name, VdPtr part,
                           uint64_t epoch) {
  std::lock_guard lock(mu_);
  if (t.slot >= slots_.size()) return;
  Slot& slot = slots_[t.slot];
  if (slot.path != t.path || slot.generation != t.generation) return;  // reused since
  PutNameLocked(t.slot, name, std::move(part), t.word, epoch);
}

void DirTable::InstallNamesOnly(const Ticket& t, const std::string& name, VdPtr part,
                                uint64_t epoch) {
  std::lock_guard lock(mu_);
  if (t.slot >= slots_.size()) return;
  Slot& slot = slots_[t.slot];
  if (slot.path != t.path || slot.generation != t.generation) return;  // reused since
  // The answer without its entry (it holds at most the one asked for).
  auto skeleton = std::make_shared<VirtualDirectory>(*part);
  skeleton->entries = {};
  skeleton->kernel_may_cache = false;
  bytes_ -= slot.bytes;
  slot.bytes = SizeOf(*skeleton);
  bytes_ += slot.bytes;
  slot.vd = std::move(skeleton);
  ++stats_.skeletons;
  slot.expected = t.word;
  slot.stale_seen = t.word;
  slot.epoch = epoch;
  slot.referenced = true;
  // An absence is not kept: the creation of a name bumps nothing here.
  if (name.empty() || !part->entries.empty()) {
    PutNameLocked(t.slot, name, std::move(part), t.word, epoch);
  }
}

DirTable::VdPtr DirTable::Find(const std::string& path, uint64_t epoch) {
  std::lock_guard lock(mu_);
  return FindLocked(path, nullptr, epoch, nullptr);
}

size_t DirTable::VictimLocked() {
  // CLOCK: a referenced slot gets a second chance; free slots first.
  for (size_t n = 0; n < 2 * slots_.size() + 1; ++n) {
    const size_t s = hand_;
    hand_ = (hand_ + 1) % slots_.size();
    Slot& slot = slots_[s];
    if (slot.path.empty()) return s;
    if (slot.referenced && ValidLocked(slot, s)) {
      slot.referenced = false;
      continue;
    }
    return s;
  }
  return hand_;
}

DirTable::Ticket DirTable::Reserve(const std::string& path) {
  std::lock_guard lock(mu_);
  size_t s;
  if (auto it = index_.find(path); it != index_.end()) {
    s = it->second;
  } else {
    s = VictimLocked();
    if (!slots_[s].path.empty()) {
      ++stats_.evictions;
      DropLocked(s);
    }
    slots_[s].path = path;
    index_[path] = s;
  }
  return Ticket{path, static_cast<uint32_t>(s), LoadWord(s), slots_[s].generation};
}

void DirTable::Install(const Ticket& t, VdPtr vd, uint64_t epoch) {
  std::lock_guard lock(mu_);
  if (t.slot >= slots_.size()) return;
  Slot& slot = slots_[t.slot];
  if (slot.path != t.path || slot.generation != t.generation) return;  // reused since
  if (ValidLocked(slot, t.slot) && slot.vd->epoch == vd->epoch &&
      slot.vd->version > vd->version) {
    // The slot's copy stayed valid while this answer was on its way (a
    // lookup under the other kernel key, or during an own change) and took
    // deltas past it: the answer is older than what this node was told.
    // Kept as it is (a lookup under the answer's key asks again).
    slot.referenced = true;
    return;
  }
  bytes_ -= slot.bytes + slot.names.size() * kNamedBytes;
  slot.names.clear();  // the whole copy answers every name
  slot.bytes = SizeOf(*vd);
  bytes_ += slot.bytes;
  slot.vd = std::move(vd);
  slot.expected = t.word;
  slot.stale_seen = t.word;
  slot.epoch = epoch;
  slot.referenced = true;
  slot.unused_deltas = 0;
  ApplyQueuedLocked(t.slot, t.word);
  // The byte bound: evict other entries (CLOCK order) until under it.
  for (size_t n = 0; bytes_ > options_.max_bytes && n < slots_.size(); ++n) {
    const size_t s = VictimLocked();
    if (s == t.slot) continue;
    if (!slots_[s].path.empty()) {
      ++stats_.evictions;
      DropLocked(s);
    }
  }
}

void DirTable::Patch(const std::string& path, uint64_t prev_version, uint64_t vd_version,
                     const std::vector<std::string>& keys, std::vector<VdEntry> fresh,
                     std::optional<std::vector<std::string>> holders, bool sharer,
                     bool names_only, std::optional<uint64_t> subdirs) {
  std::lock_guard lock(mu_);
  auto it = index_.find(path);
  if (it == index_.end()) return;
  const size_t s = it->second;
  Slot& slot = slots_[s];
  if (ValidLocked(slot, s) && vd_version != 0 && slot.vd->version >= vd_version) {
    DrainAfterOwnLocked(s);
    return;  // fetched since, with the change in it
  }
  if (!ValidLocked(slot, s) || slot.vd->version != prev_version || vd_version == 0) {
    // No other change reached this slot since the change began, and the
    // manager records this node: the reply's entries are the names' state,
    // and the next change of P bumps the slot.
    auto own = own_changes_.find(path);
    const bool clean = own != own_changes_.end() && own->second.count == 1 &&
                       own->second.word == LoadWord(s) && slot.vd != nullptr;
    BumpLocked(s);  // also spoils a fetch in flight for this slot
    // Not news to this node's next miss (FindLocked's `stale`): its own
    // change is no sign that other nodes keep changing P.
    slot.stale_seen = LoadWord(s);
    std::erase_if(slot.queued, [](const Queued& q) { return q.bumped == 0; });
    if (!clean || !sharer || vd_version == 0) return;
    const uint64_t word = LoadWord(s);
    std::map<std::string, std::vector<VdEntry>> by_name;  // visible name -> its entry
    for (const std::string& k : keys) by_name[k];
    for (VdEntry& e : fresh) {
      std::string n = e.name;
      by_name[n].push_back(std::move(e));
    }
    auto partial = [&] {
      auto part = std::make_shared<VirtualDirectory>();
      part->path = path;
      part->version = vd_version;
      part->epoch = slot.vd->epoch;
      part->holders = holders ? *holders : slot.vd->holders;
      part->partial = true;
      part->kernel_may_cache = slot.vd->kernel_may_cache;  // fetched with notify or not
      // Without the manager's count, an estimate: the listing is refetched whole.
      part->subdirs = subdirs.value_or(slot.vd->subdirs);
      return part;
    };
    for (auto& [name, entries] : by_name) {
      if (names_only && entries.empty()) continue;  // an absence no bump would end
      auto part = partial();
      for (VdEntry& e : entries) part->entries.Put(std::move(e));
      PutNameLocked(s, name, std::move(part), word, slot.epoch);
    }
    // The directory's summary (its holders and subdirectories) as the change
    // left it: the GETATTR of P that the kernel sends after every change in
    // it needs no message then. Kept like the names, until the next change
    // that reaches the slot (for a names-only record, a change that is not
    // only new names: those leave the summary as it is).
    if (subdirs) PutNameLocked(s, std::string(), partial(), word, slot.epoch);
    return;
  }
  PatchCopyLocked(slot, vd_version, keys, std::move(fresh), std::move(holders));
  slot.unused_deltas = 0;
  ++stats_.patches;
  DrainAfterOwnLocked(s);
}

void DirTable::DrainAfterOwnLocked(size_t s) {
  Slot& slot = slots_[s];
  std::vector<Queued> later;
  for (Queued& q : slot.queued) {
    if (q.bumped == 0) later.push_back(std::move(q));
  }
  if (later.empty()) return;
  std::erase_if(slot.queued, [](const Queued& q) { return q.bumped == 0; });
  std::ranges::sort(later, {}, &Queued::version);
  for (Queued& q : later) {
    if (ValidLocked(slot, s) && q.version <= slot.vd->version) continue;
    if (!ValidLocked(slot, s) || q.epoch != slot.vd->epoch ||
        q.prev_version != slot.vd->version) {
      BumpLocked(s);  // a change between that never came: drop the copy
      ++stats_.deltas_refused;
      return;
    }
    PatchCopyLocked(slot, q.version, q.keys, std::move(q.fresh), std::move(q.holders));
    ++stats_.deltas_applied;
  }
}

void DirTable::PatchCopyLocked(Slot& slot, uint64_t vd_version,
                               const std::vector<std::string>& keys, std::vector<VdEntry> fresh,
                               std::optional<std::vector<std::string>> holders) {
  // In place when no reader holds this VD (under mu_, a use count of 1 is the
  // slot's own reference): a copy costs O(entries) per change.
  auto vd = slot.vd.use_count() == 1 ? std::const_pointer_cast<VirtualDirectory>(slot.vd)
                                     : std::make_shared<VirtualDirectory>(*slot.vd);
  int64_t delta = 0;  // the entries' bytes (O(change), not a SizeOf walk)
  vd_internal::PatchEntries(keys, std::move(fresh), &vd->entries, &vd->subdirs, &delta);
  if (holders) {
    delta += HoldersBytes(*holders) - HoldersBytes(vd->holders);
    vd->holders = std::move(*holders);
  }
  vd->version = vd_version;
  bytes_ -= slot.bytes;
  slot.bytes = static_cast<size_t>(static_cast<int64_t>(slot.bytes) + delta);
  bytes_ += slot.bytes;
  slot.vd = std::move(vd);
}

void DirTable::ApplyQueuedLocked(size_t s, uint64_t ticket_word) {
  Slot& slot = slots_[s];
  std::vector<Queued> queued = std::move(slot.queued);
  slot.queued.clear();
  if (queued.empty()) return;
  const uint64_t now = LoadWord(s);
  // Valid only if every bump since the ticket was a queued delta's.
  const auto ours = static_cast<uint64_t>(std::ranges::count_if(
      queued, [&](const Queued& q) { return q.bumped > ticket_word; }));
  if (now - ticket_word != ours) return;  // born stale
  std::ranges::sort(queued, {}, &Queued::version);
  uint64_t v = slot.vd->version;
  // Deltas behind this node's own change (not bumped) that do not follow
  // the copy wait for its reply (Patch, DrainAfterOwnLocked), as before.
  std::vector<Queued> later;
  for (Queued& q : queued) {
    if (q.epoch != slot.vd->epoch || q.version <= v) continue;  // in the copy already
    if (q.prev_version != v || !later.empty()) {
      if (q.bumped != 0) return;  // a change between: born stale
      later.push_back(std::move(q));
      continue;
    }
    PatchCopyLocked(slot, q.version, q.keys, std::move(q.fresh), std::move(q.holders));
    v = q.version;
    ++stats_.deltas_applied;
  }
  slot.queued = std::move(later);
  slot.expected = now;
  slot.stale_seen = now;
}

bool DirTable::ApplyDelta(const std::string& path, uint64_t epoch, uint64_t prev_version,
                          uint64_t vd_version, const std::vector<std::string>& keys,
                          std::vector<VdEntry> fresh, std::vector<std::string> holders) {
  std::lock_guard lock(mu_);
  auto it = index_.find(path);
  if (it == index_.end()) return false;  // nothing here to keep
  const size_t s = it->second;
  Slot& slot = slots_[s];
  if (vd_version <= prev_version) {
    BumpLocked(s);
    ++stats_.deltas_refused;
    return false;
  }
  if (ValidLocked(slot, s) && slot.vd->epoch == epoch && slot.vd->version >= vd_version) {
    ++slot.unused_deltas;
    return true;  // in the copy already (fetched after the change)
  }
  if (!ValidLocked(slot, s) && slot.queued.size() < kMaxQueuedDeltas) {
    // No valid copy: a fetch may be on its way, served before this change
    // or after it. Kept for it (Install), and the slot bumped meanwhile so
    // that nothing here answers from before the change.
    BumpLocked(s);
    slot.queued.push_back(Queued{epoch, prev_version, vd_version, keys, std::move(fresh),
                                 std::move(holders), LoadWord(s)});
    ++stats_.deltas_queued;
    return true;
  }
  if (ValidLocked(slot, s) && slot.vd->epoch == epoch && prev_version > slot.vd->version &&
      own_changes_.contains(path) && slot.queued.size() < kMaxQueuedDeltas) {
    // A change after this node's own, whose reply is not patched in yet:
    // kept for that Patch (lookups ask the manager meanwhile: FindLocked).
    slot.queued.push_back(Queued{epoch, prev_version, vd_version, keys, std::move(fresh),
                                 std::move(holders), 0});
    ++stats_.deltas_queued;
    return true;
  }
  if (!ValidLocked(slot, s) || slot.vd->epoch != epoch || slot.vd->version != prev_version ||
      slot.unused_deltas >= kMaxUnusedDeltas) {
    // Stale past its queue, of another epoch, missed a change, or not read
    // for a while: dropped as a bump would.
    BumpLocked(s);
    slot.queued.clear();
    ++stats_.deltas_refused;
    return false;
  }
  PatchCopyLocked(slot, vd_version, keys, std::move(fresh), std::move(holders));
  ++slot.unused_deltas;
  ++stats_.deltas_applied;
  return true;
}

DirTable::VdPtr DirTable::AnyCopy(const std::string& path, uint64_t epoch) const {
  std::lock_guard lock(mu_);
  auto it = index_.find(path);
  if (it == index_.end()) return nullptr;
  const Slot& slot = slots_[it->second];
  return slot.epoch == epoch ? slot.vd : nullptr;
}

std::optional<std::vector<std::string>> DirTable::CopyHolders(const std::string& path) const {
  std::lock_guard lock(mu_);
  auto it = index_.find(path);
  if (it == index_.end() || slots_[it->second].vd == nullptr) return std::nullopt;
  return slots_[it->second].vd->holders;
}

void DirTable::BeginOwnChange(const std::string& path) {
  std::lock_guard lock(mu_);
  OwnChange& o = own_changes_[path];
  if (o.count++ == 0) {
    auto it = index_.find(path);
    o.word = it == index_.end() ? UINT64_MAX : LoadWord(it->second);
  }
}

void DirTable::EndOwnChange(const std::string& path) {
  std::lock_guard lock(mu_);
  auto it = own_changes_.find(path);
  if (it != own_changes_.end() && --it->second.count == 0) {
    own_changes_.erase(it);
    // Deltas kept for a reply that was never patched in (the change failed):
    // applied if they follow the copy, else the copy goes.
    if (auto s = index_.find(path); s != index_.end()) DrainAfterOwnLocked(s->second);
  }
}

void DirTable::Invalidate(const std::string& path) {
  std::lock_guard lock(mu_);
  if (auto it = index_.find(path); it != index_.end()) BumpLocked(it->second);
}

void DirTable::InvalidateSubtree(const std::string& path) {
  std::lock_guard lock(mu_);
  for (const auto& [p, s] : index_) {
    if (PathWithin(p, path)) BumpLocked(s);
  }
}

void DirTable::InvalidateAll() {
  std::lock_guard lock(mu_);
  for (const auto& [p, s] : index_) BumpLocked(s);
}

DirTable::Stats DirTable::stats() const {
  std::lock_guard lock(mu_);
  Stats out = stats_;
  out.bytes = bytes_;
  uint64_t sum = 0;
  for (size_t s = 0; s < slots_.size(); ++s) {
    sum += LoadWord(s);
    if (ValidLocked(slots_[s], s)) ++out.occupancy;
  }
  out.bumps_received = sum - stats_.local_bumps;
  return out;
}

}  // namespace fedfs::ns
