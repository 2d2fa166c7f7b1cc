// libFuzzer target: the VD protocol's decoders (vd/vd_wire.h), which
// every kNsListLocal, kNsVdGet, kNsVdUpdate, kNsConflicts, kNsVdDrop and
// kNsDtInval request and reply goes through.
//
// Input: one byte choosing the decoder (mod 6), then the payload.
// Invariants: what a decoder accepts has the fields its contract promises
// (sharer slot inside its region, 1..16 changes of known kinds, entries
// sorted by name, subdirs counted); encoding the decoded value and decoding
// that again gives an equal value.
#include <dirent.h>

#include "fuzz_util.h"
#include "vd/vd_wire.h"

using namespace fedfs;
using namespace fedfs::ns;
using namespace fedfs::ns::vdcodec;

namespace {

enum Which : uint8_t { kPath, kUpdate, kListing, kVd, kConflicts, kUpdateReply, kCount };

m2m::Bytes Payload(const uint8_t* data, size_t size) {
  const auto* p = reinterpret_cast<const std::byte*>(data);
  return m2m::Bytes(p, p + size);
}

ClusterView View(const std::string& from, uint64_t epoch) {
  ClusterView v;
  v.self = from;
  v.epoch = epoch;
  return v;
}

bool Same(const VdChange& a, const VdChange& b) {
  return a.kind == b.kind && a.name == b.name && a.type == b.type && a.node == b.node &&
         a.id == b.id && a.cred.uid == b.cred.uid && a.cred.gid == b.cred.gid &&
         a.cred.groups == b.cred.groups && a.to == b.to && a.flags == b.flags;
}
bool Same(const VdEntry& a, const VdEntry& b) {
  return a.name == b.name && a.real_name == b.real_name && a.type == b.type &&
         a.holders == b.holders && a.alias == b.alias && a.id == b.id;
}
template <class A, class B, class F>
bool SameAll(const A& a, const B& b, F same) {
  if (a.size() != b.size()) return false;
  auto i = a.begin();
  auto j = b.begin();
  for (; i != a.end(); ++i, ++j) {
    if (!same(*i, *j)) return false;
  }
  return true;
}
bool SameEntry(const VdEntry& a, const VdEntry& b) { return Same(a, b); }

template <class C>
void CheckSorted(const C& entries) {
  const VdEntry* prev = nullptr;
  for (const VdEntry& e : entries) {
    if (prev != nullptr) FUZZ_CHECK(prev->name < e.name);
    prev = &e;
  }
}

void FuzzPath(const m2m::Bytes& payload) {
  auto r = DecodePathRequest(payload);
  if (!r) return;
  if (r->patch) {
    // A delta: versions in order, its entries sorted, and it encodes back.
    const DtPatchData& d = *r->patch;
    FUZZ_CHECK(d.version != 0 && d.version > d.prev_version);
    auto again = DecodePathRequest(EncodeDtPatch(r->path, View(r->from, r->epoch), d, r->notify));
    FUZZ_CHECK(again.has_value() && again->patch.has_value());
    FUZZ_CHECK(again->patch->version == d.version && again->patch->keys == d.keys &&
               again->patch->fresh.size() == d.fresh.size() &&
               again->patch->holders == d.holders && again->notify == r->notify);
    return;
  }
  if (r->sharer) {
    const SharerSlotData& s = *r->sharer;
    FUZZ_CHECK(!s.region.rkey.empty() && s.region.length > 0 && s.region.length % 8 == 0);
    FUZZ_CHECK(uint64_t{s.slot} * 8 + 8 <= s.region.length);
  }
  auto back = DecodePathRequest(EncodePathRequest(r->path, View(r->from, r->epoch),
                                                  r->sharer ? &*r->sharer : nullptr, r->notify,
                                                  r->name, r->holders_hash, r->names));
  FUZZ_CHECK(back.has_value());
  FUZZ_CHECK(back->path == r->path && back->from == r->from && back->epoch == r->epoch &&
             back->notify == r->notify && back->sharer.has_value() == r->sharer.has_value());
  FUZZ_CHECK(back->name == r->name && back->holders_hash == r->holders_hash &&
             back->names == r->names);
  if (r->sharer) {
    FUZZ_CHECK(back->sharer->slot == r->sharer->slot &&
               back->sharer->region.addr == r->sharer->region.addr &&
               back->sharer->region.length == r->sharer->region.length &&
               back->sharer->region.rkey == r->sharer->region.rkey);
  }
}

void FuzzUpdate(const m2m::Bytes& payload) {
  auto r = DecodeUpdateRequest(payload);
  if (!r) return;
  FUZZ_CHECK(!r->changes.empty() && r->changes.size() <= kMaxChangesPerUpdate);
  for (const VdChange& c : r->changes) {
    FUZZ_CHECK(static_cast<uint8_t>(c.kind) <= static_cast<uint8_t>(VdChange::Kind::kRename));
    // Only a kUnlink or kRename carries its caller, only a kRename its new name.
    if (c.kind != VdChange::Kind::kUnlink && c.kind != VdChange::Kind::kRename) {
      FUZZ_CHECK(c.cred.uid == 0 && c.cred.groups.empty());
    }
    if (c.kind != VdChange::Kind::kRename) FUZZ_CHECK(c.to.empty() && c.flags == 0);
    FUZZ_CHECK(c.cred.groups.size() <= kMaxGroups);
  }
  auto back = DecodeUpdateRequest(EncodeUpdateRequest(r->path, r->changes, View(r->from, r->epoch)));
  FUZZ_CHECK(back.has_value());
  FUZZ_CHECK(back->path == r->path && back->from == r->from && back->epoch == r->epoch);
  FUZZ_CHECK(SameAll(back->changes, r->changes,
                     [](const VdChange& a, const VdChange& b) { return Same(a, b); }));
}

void FuzzListing(const m2m::Bytes& payload) {
  auto r = DecodeListing(payload);
  if (!r) return;
  auto back = DecodeListing(EncodeListing(*r));
  FUZZ_CHECK(back.has_value());
  FUZZ_CHECK(SameAll(*back, *r, [](const DirEntry& a, const DirEntry& b) {
    return a.name == b.name && a.type == b.type && a.ino == b.ino && a.id == b.id;
  }));
}

void FuzzVd(const m2m::Bytes& payload) {
  auto r = DecodeVd(payload);
  if (!r) return;
  const VirtualDirectory& vd = **r;
  CheckSorted(vd.entries);
  size_t dirs = 0;
  for (const VdEntry& e : vd.entries) {
    dirs += e.type == DT_DIR;
    FUZZ_CHECK(vd.Find(e.name) != nullptr);
  }
  // A partial VD (kNsVdGetName) carries the whole VD's count of directories.
  FUZZ_CHECK(vd.partial || vd.subdirs == dirs);
  auto back = DecodeVd(EncodeVd(vd, !vd.cacheable));
  FUZZ_CHECK(back.has_value());
  const VirtualDirectory& b = **back;
  FUZZ_CHECK(b.path == vd.path && b.version == vd.version && b.epoch == vd.epoch &&
             b.holders == vd.holders && b.subdirs == vd.subdirs && b.cacheable == vd.cacheable);
  FUZZ_CHECK(SameAll(b.entries, vd.entries, SameEntry));
}

void FuzzConflicts(const m2m::Bytes& payload) {
  auto r = DecodeConflicts(payload);
  if (!r) return;
  auto back = DecodeConflicts(EncodeConflicts(*r));
  FUZZ_CHECK(back.has_value());
  FUZZ_CHECK(SameAll(*back, *r, [](const Conflict& a, const Conflict& b) {
    return a.name == b.name && a.copies == b.copies;
  }));
}

void FuzzUpdateReply(const m2m::Bytes& payload) {
  auto r = DecodeUpdateReply(payload);
  if (!r) return;
  CheckSorted(r->fresh);
  auto back = DecodeUpdateReply(EncodeUpdateReply(*r));
  FUZZ_CHECK(back.has_value());
  FUZZ_CHECK(back->version == r->version && back->prev_version == r->prev_version &&
             back->keys == r->keys && back->holders == r->holders);
  FUZZ_CHECK(SameAll(back->fresh, r->fresh, SameEntry));
  FUZZ_CHECK(back->sharer == r->sharer && back->names_sharer == r->names_sharer &&
             back->same_holders == r->same_holders && back->read == r->read &&
             back->held == r->held && back->added == r->added &&
             back->unlinked == r->unlinked && back->renamed == r->renamed &&
             back->parent.has_value() == r->parent.has_value() &&
             (back->read_vd != nullptr) == (r->read_vd != nullptr));
  // An unlink's answer carries the entry it removed.
  if (r->unlinked || r->renamed) FUZZ_CHECK(r->read && r->read_vd != nullptr);
  if (r->parent) {
    FUZZ_CHECK(back->parent->st_mode == r->parent->st_mode &&
               back->parent->st_mtim.tv_sec == r->parent->st_mtim.tv_sec &&
               back->parent->st_mtim.tv_nsec == r->parent->st_mtim.tv_nsec &&
               back->parent->st_nlink == r->parent->st_nlink);
  }
  if (r->read_vd) {
    FUZZ_CHECK(back->read_vd->path == r->read_vd->path &&
               back->read_vd->version == r->read_vd->version &&
               back->read_vd->holders == r->read_vd->holders);
    FUZZ_CHECK(SameAll(back->read_vd->entries, r->read_vd->entries, SameEntry));
  }
}

void MakeSeeds(fuzz::Seeds& s) {
  auto add = [&](const char* name, Which w, const m2m::Bytes& b) {
    s.Add(name, std::string(1, static_cast<char>(w)), b);
  };
  const ClusterView view = View("n1", 5);
  add("path_get", kPath, EncodePathRequest("/a/b", view));
  SharerSlotData slot;
  slot.slot = 3;
  slot.region.addr = 0x7f0000001000;
  slot.region.length = 4096;
  slot.region.rkey.assign(16, std::byte{0x42});
  add("path_get_sharer", kPath, EncodePathRequest("/a", view, &slot, true));
  add("update_add", kUpdate,
      EncodeUpdateRequest("/a", {{VdChange::Kind::kAdd, "f", DT_REG, "n2"}}, view));
  add("update_lock_claim", kUpdate,
      EncodeUpdateRequest("/a",
                          {{VdChange::Kind::kLock, "old", 0, "n1"},
                           {VdChange::Kind::kClaim, "new", 0, "n1"}},
                          view));
  add("listing", kListing,
      EncodeListing({{"d", DT_DIR, 12}, {"f", DT_REG, 13}, {"l", DT_LNK, 14}}));
  VirtualDirectory vd;
  vd.path = "/a";
  vd.version = 4;
  vd.epoch = 5;
  vd.holders = {"n1", "n2"};
  vd.entries = std::vector<VdEntry>{{"d", "", DT_DIR, {"n1", "n2"}, false},
                                    {"f", "", DT_REG, {"n2"}, false},
                                    {"f@n1", "f", DT_REG, {"n1"}, true}};
  vd.CountSubdirs();
  add("vd", kVd, EncodeVd(vd));
  add("vd_uncached", kVd, EncodeVd(vd, true));
  add("conflicts", kConflicts, EncodeConflicts({{"f", {{"n1", DT_REG}, {"n2", DT_DIR}}}}));
  UpdateOutcome o;
  o.version = 5;
  o.prev_version = 4;
  o.keys = {"f"};
  o.fresh = {{"f", "", DT_REG, {"n2"}, false}};
  o.holders = {"n1", "n2"};
  add("update_reply", kUpdateReply, EncodeUpdateReply(o));
  add("path_get_name", kPath, EncodePathRequest("/a", view, nullptr, false, "f", 77, true));
  DtPatchData delta{5, 4, {"f"}, {{"f", "", DT_REG, {"n2"}, false}}, {"n1", "n2"}};
  add("dt_patch", kPath, EncodeDtPatch("/a", view, delta, true));
  add("update_lock_read", kUpdate,
      EncodeUpdateRequest("/a", {{VdChange::Kind::kLockRead, "f", 0, "n1"}}, view));
  add("update_add_new", kUpdate,
      EncodeUpdateRequest("/a", {{VdChange::Kind::kAddNew, "f", DT_REG, "n2", 7}}, view));
  UpdateOutcome added = o;
  added.added = true;
  add("update_reply_added", kUpdateReply, EncodeUpdateReply(added));
  UpdateOutcome lr;
  lr.version = 6;
  lr.read = true;
  lr.held = true;
  lr.sharer = true;
  lr.names_sharer = true;
  auto part = std::make_shared<VirtualDirectory>();
  part->path = "/a";
  part->version = 6;
  part->holders = {"n1", "n2"};
  part->entries = std::vector<VdEntry>{{"f", "", DT_REG, {"n2"}, false}};
  lr.read_vd = part;
  add("update_reply_lock_read", kUpdateReply, EncodeUpdateReply(lr));
  VdChange unlink{VdChange::Kind::kUnlink, "f", 0, "n1"};
  unlink.cred = Cred{1000, 100, {100, 27}};
  add("update_unlink", kUpdate, EncodeUpdateRequest("/a", {unlink}, view, true, 9, 77));
  UpdateOutcome ul = lr;
  ul.unlinked = true;
  struct stat parent {};
  parent.st_mode = S_IFDIR | 0755;
  parent.st_nlink = 3;
  parent.st_mtim = {1234, 5678};
  ul.parent = parent;
  add("update_reply_unlinked", kUpdateReply, EncodeUpdateReply(ul));
  VdChange rename{VdChange::Kind::kRename, "f", 0, "n1"};
  rename.cred = Cred{1000, 100, {100}};
  rename.to = "g";
  rename.flags = 1;  // RENAME_NOREPLACE
  add("update_rename", kUpdate, EncodeUpdateRequest("/a", {rename}, view, true, 9, 78));
  UpdateOutcome rn = lr;
  rn.renamed = true;
  add("update_reply_renamed", kUpdateReply, EncodeUpdateReply(rn));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fuzz::MaybeWriteSeeds(*argc, *argv, MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Which which = static_cast<Which>(data[0] % kCount);
  const m2m::Bytes payload = Payload(data + 1, size - 1);
  switch (which) {
    case kPath: FuzzPath(payload); break;
    case kUpdate: FuzzUpdate(payload); break;
    case kListing: FuzzListing(payload); break;
    case kVd: FuzzVd(payload); break;
    case kConflicts: FuzzConflicts(payload); break;
    case kUpdateReply: FuzzUpdateReply(payload); break;
    default: break;
  }
  return 0;
}
