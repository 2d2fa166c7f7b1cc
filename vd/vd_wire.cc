// The VD service's wire codec (vd/vd_wire.h).
#include "vd/vd_wire.h"

#include <dirent.h>

#include <cstring>
#include <set>

#include <flatbuffers/flatbuffers.h>

#include "vd_generated.h"

namespace fedfs::ns::vdcodec {

namespace wire = fedfs::ns::vdwire;

namespace {

template <class T>
m2m::Bytes Finish(flatbuffers::FlatBufferBuilder& b, wire::Body type, flatbuffers::Offset<T> body) {
  b.FinishSizePrefixed(wire::CreateVdMessage(b, kVersion, type, body.Union()));
  return m2m::ToBytes({b.GetBufferPointer(), b.GetSize()});
}

flatbuffers::Offset<wire::Change> EncodeChange(flatbuffers::FlatBufferBuilder& b,
                                               const VdChange& c) {
  auto n = b.CreateString(c.name);
  auto node = b.CreateString(c.node);
  flatbuffers::Offset<wire::Cred> cred;
  flatbuffers::Offset<flatbuffers::String> to;
  uint32_t flags = 0;
  if (c.kind == VdChange::Kind::kUnlink || c.kind == VdChange::Kind::kRename) {
    cred = wire::CreateCred(b, c.cred.uid, c.cred.gid, b.CreateVector(c.cred.groups));
  }
  if (c.kind == VdChange::Kind::kRename) {
    to = b.CreateString(c.to);
    flags = c.flags;
  }
  return wire::CreateChange(b, static_cast<wire::ChangeKind>(c.kind), n, c.type, node, c.id,
                            cred, to, flags);
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> Strings(
    flatbuffers::FlatBufferBuilder& b, const std::vector<std::string>& v) {
  return b.CreateVectorOfStrings(v);
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::Entry>>> Entries(
    flatbuffers::FlatBufferBuilder& b, const auto& entries) {
  std::vector<flatbuffers::Offset<wire::Entry>> v;
  v.reserve(entries.size());
  for (const VdEntry& e : entries) {
    v.push_back(wire::CreateEntry(b, b.CreateString(e.name), b.CreateString(e.real_name), e.type,
                                  Strings(b, e.holders), e.alias, e.id));
  }
  return b.CreateVector(v);
}

// A verified message. FlatBuffers reads scalars in place, so the bytes are
// copied to 8-aligned storage when the payload is not aligned; otherwise msg()
// points into the payload, which must outlive this object.
class Decoded {
 public:
  // EPROTO unless `payload` is a well-formed VdMessage of our version whose
  // body is `expected`.
  static Result<Decoded> Open(const m2m::Bytes& payload, wire::Body expected) {
    Decoded d;
    if (payload.size() < 8 || payload.size() > kMaxPayloadBytes) {
      return Err(EPROTO, "VD message of " + std::to_string(payload.size()) + " bytes");
    }
    const auto* data = reinterpret_cast<const uint8_t*>(payload.data());
    if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
      d.aligned_.resize((payload.size() + 7) / 8);
      std::memcpy(d.aligned_.data(), payload.data(), payload.size());
      data = reinterpret_cast<const uint8_t*>(d.aligned_.data());
    }
    flatbuffers::Verifier verifier(data, payload.size(), /*max_depth=*/16,
                                   /*max_tables=*/1u << 26);
    if (!wire::VerifySizePrefixedVdMessageBuffer(verifier)) {
      return Err(EPROTO, "malformed VD message (verifier refused it)");
    }
    d.msg_ = wire::GetSizePrefixedVdMessage(data);
    if (d.msg_->version() != kVersion) {
      return Err(EPROTO, "unsupported VD message version " + std::to_string(d.msg_->version()));
    }
    if (d.msg_->body_type() != expected || d.msg_->body() == nullptr) {
      return Err(EPROTO, "VD message with an unexpected body type " +
                             std::to_string(static_cast<int>(d.msg_->body_type())));
    }
    return d;
  }
  const wire::VdMessage* msg() const { return msg_; }

 private:
  std::vector<uint64_t> aligned_;  // its heap buffer survives moves of `this`
  const wire::VdMessage* msg_ = nullptr;
};

Result<std::string> Need(const flatbuffers::String* s, const char* field) {
  if (s == nullptr) return Err(EPROTO, std::string("VD message without ") + field);
  return s->str();
}

Result<VdChange> DecodeChange(const wire::Change* c) {
  if (c == nullptr) return Err(EPROTO, "VD update without a change");
  VdChange out;
  switch (c->kind()) {
    case wire::ChangeKind::Add: out.kind = VdChange::Kind::kAdd; break;
    case wire::ChangeKind::Remove: out.kind = VdChange::Kind::kRemove; break;
    case wire::ChangeKind::Claim: out.kind = VdChange::Kind::kClaim; break;
    case wire::ChangeKind::Release: out.kind = VdChange::Kind::kRelease; break;
    case wire::ChangeKind::Lock: out.kind = VdChange::Kind::kLock; break;
    case wire::ChangeKind::LockRead: out.kind = VdChange::Kind::kLockRead; break;
    case wire::ChangeKind::AddNew: out.kind = VdChange::Kind::kAddNew; break;
    case wire::ChangeKind::Unlink: out.kind = VdChange::Kind::kUnlink; break;
    case wire::ChangeKind::Rename: out.kind = VdChange::Kind::kRename; break;
    default: return Err(EPROTO, "VD update with an unknown change kind");
  }
  if (out.kind == VdChange::Kind::kRename) {
    auto to = Need(c->to(), "change.to");
    if (!to) return Err(to.error());
    out.to = std::move(*to);
    out.flags = c->flags();
  }
  if (out.kind == VdChange::Kind::kUnlink || out.kind == VdChange::Kind::kRename) {
    const wire::Cred* cred = c->cred();
    if (cred == nullptr) return Err(EPROTO, "VD unlink without its caller");
    out.cred.uid = cred->uid();
    out.cred.gid = cred->gid();
    if (cred->groups() != nullptr) {
      if (cred->groups()->size() > kMaxGroups) return Err(EPROTO, "VD unlink with too many groups");
      out.cred.groups.assign(cred->groups()->begin(), cred->groups()->end());
    }
  }
  auto name = Need(c->name(), "change.name");
  if (!name) return Err(name.error());
  auto node = Need(c->node(), "change.node");
  if (!node) return Err(node.error());
  out.name = std::move(*name);
  out.node = std::move(*node);
  out.type = c->type();
  out.id = c->id();
  return out;
}

Result<std::vector<std::string>> DecodeStrings(
    const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v == nullptr) return out;
  out.reserve(v->size());
  for (const flatbuffers::String* s : *v) {
    if (s == nullptr) return Err(EPROTO, "VD message with a null string");
    out.push_back(s->str());
  }
  return out;
}

Result<std::vector<VdEntry>> DecodeEntries(
    const flatbuffers::Vector<flatbuffers::Offset<wire::Entry>>* v) {
  std::vector<VdEntry> out;
  if (v == nullptr) return out;
  out.reserve(v->size());
  for (const wire::Entry* e : *v) {
    VdEntry entry;
    auto name = Need(e->name(), "entry.name");
    if (!name) return Err(name.error());
    auto real = Need(e->real_name(), "entry.real_name");
    if (!real) return Err(real.error());
    auto h = DecodeStrings(e->holders());
    if (!h) return Err(h.error());
    entry.name = std::move(*name);
    entry.real_name = std::move(*real);
    entry.type = e->type();
    entry.holders = std::move(*h);
    entry.alias = e->alias();
    entry.id = e->type() == DT_DIR ? e->id() : 0;
    out.push_back(std::move(entry));
  }
  // Find() relies on the order: refuse entries that are not sorted.
  for (size_t i = 1; i < out.size(); ++i) {
    if (!(out[i - 1].name < out[i].name)) return Err(EPROTO, "VD entries not sorted by name");
  }
  return out;
}

}  // namespace

m2m::Bytes EncodePathRequest(const std::string& path, const ClusterView& view,
                             const SharerSlotData* sharer, bool notify, const std::string& name,
                             uint64_t holders_hash, bool names) {
  flatbuffers::FlatBufferBuilder b(256 + path.size());
  auto p = b.CreateString(path);
  auto f = b.CreateString(view.self);
  flatbuffers::Offset<wire::SharerSlot> sh;
  if (sharer != nullptr) {
    auto rkey = b.CreateVector(reinterpret_cast<const uint8_t*>(sharer->region.rkey.data()),
                               sharer->region.rkey.size());
    sh = wire::CreateSharerSlot(b, sharer->slot, sharer->region.addr, sharer->region.length, rkey);
  }
  flatbuffers::Offset<flatbuffers::String> n;
  if (!name.empty()) n = b.CreateString(name);
  return Finish(b, wire::Body::PathRequest,
                wire::CreatePathRequest(b, p, f, view.epoch, sh, notify, 0, n, holders_hash,
                                                names));
}

m2m::Bytes EncodeDtPatch(const std::string& path, const ClusterView& view,
                         const DtPatchData& patch, bool notify) {
  UpdateOutcome d;
  d.version = patch.version;
  d.prev_version = patch.prev_version;
  d.keys = patch.keys;
  d.fresh = patch.fresh;
  d.holders = patch.holders;
  const m2m::Bytes inner = EncodeUpdateReply(d);
  flatbuffers::FlatBufferBuilder b(256 + path.size() + inner.size());
  auto p = b.CreateString(path);
  auto f = b.CreateString(view.self);
  auto bytes = b.CreateVector(reinterpret_cast<const uint8_t*>(inner.data()), inner.size());
  wire::PathRequestBuilder r(b);
  r.add_path(p);
  r.add_from(f);
  r.add_epoch(view.epoch);
  r.add_notify(notify);
  r.add_patch(bytes);
  return Finish(b, wire::Body::PathRequest, r.Finish());
}

// `changes` is never empty.
m2m::Bytes EncodeUpdateRequest(const std::string& path, const std::vector<VdChange>& changes,
                               const ClusterView& view, bool lease_ok, uint64_t holders_hash,
                               uint64_t request_id) {
  flatbuffers::FlatBufferBuilder b(256 + path.size() + 64 * changes.size());
  auto p = b.CreateString(path);
  auto f = b.CreateString(view.self);
  auto first = EncodeChange(b, changes.front());
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::Change>>> more;
  if (changes.size() > 1) {
    std::vector<flatbuffers::Offset<wire::Change>> v;
    for (size_t i = 1; i < changes.size(); ++i) v.push_back(EncodeChange(b, changes[i]));
    more = b.CreateVector(v);
  }
  return Finish(b, wire::Body::UpdateRequest,
                wire::CreateUpdateRequest(b, p, f, view.epoch, first, more, lease_ok,
                                          holders_hash, request_id));
}

m2m::Bytes EncodeRecallRequest(const std::string& path, const ClusterView& view, uint64_t lease) {
  flatbuffers::FlatBufferBuilder b(128 + path.size());
  auto p = b.CreateString(path);
  auto f = b.CreateString(view.self);
  return Finish(b, wire::Body::PathRequest,
                wire::CreatePathRequest(b, p, f, view.epoch, 0, false, lease));
}

m2m::Bytes EncodeRecalled(const RecalledData& r) {
  flatbuffers::FlatBufferBuilder b(64);
  return Finish(b, wire::Body::Recalled, wire::CreateRecalled(b, r.held, r.version));
}

m2m::Bytes EncodeListing(const std::vector<DirEntry>& entries) {
  flatbuffers::FlatBufferBuilder b(64 + 48 * entries.size());
  std::vector<flatbuffers::Offset<wire::LocalEntry>> v;
  v.reserve(entries.size());
  for (const DirEntry& e : entries) {
    v.push_back(wire::CreateLocalEntry(b, b.CreateString(e.name), e.type, e.ino, e.move_id,
                                       e.move_role, e.id));
  }
  return Finish(b, wire::Body::Listing, wire::CreateListing(b, b.CreateVector(v)));
}

m2m::Bytes EncodeVd(const VirtualDirectory& vd, bool uncached, bool same_holders) {
  flatbuffers::FlatBufferBuilder b(128 + 64 * vd.entries.size());
  auto ev = Entries(b, vd.entries);
  auto p = b.CreateString(vd.path);
  auto h = Strings(b, same_holders ? std::vector<std::string>{} : vd.holders);
  return Finish(b, wire::Body::Vd,
                wire::CreateVd(b, p, vd.version, vd.epoch, h, ev, uncached, vd.partial,
                               vd.partial ? vd.subdirs : 0, same_holders && vd.partial));
}

bool SameHolders(const m2m::Bytes& payload) {
  auto d = Decoded::Open(payload, wire::Body::Vd);
  return d && d->msg()->body_as_Vd()->same_holders();
}

// noinline: g++ 12 otherwise reports a false -Wmaybe-uninitialized through
// std::expected when this is inlined into a move_only_function.
[[gnu::noinline]] m2m::Bytes EncodeConflicts(const std::vector<Conflict>& conflicts) {
  flatbuffers::FlatBufferBuilder b(128 + 64 * conflicts.size());
  std::vector<flatbuffers::Offset<wire::ConflictEntry>> v;
  v.reserve(conflicts.size());
  for (const Conflict& c : conflicts) {
    std::vector<flatbuffers::Offset<wire::Copy>> copies;
    for (const auto& [node, type] : c.copies) {
      copies.push_back(wire::CreateCopy(b, b.CreateString(node), type));
    }
    v.push_back(wire::CreateConflictEntry(b, b.CreateString(c.name), b.CreateVector(copies)));
  }
  return Finish(b, wire::Body::ConflictList, wire::CreateConflictList(b, b.CreateVector(v)));
}

m2m::Bytes EncodeUpdateReply(const UpdateOutcome& o) {
  flatbuffers::FlatBufferBuilder b(128 + 64 * o.fresh.size());
  auto keys = Strings(b, o.keys);
  auto entries = Entries(b, o.fresh);
  auto holders = Strings(b, o.same_holders ? std::vector<std::string>{} : o.holders);
  flatbuffers::Offset<wire::Lease> lease;
  if (o.lease) {
    std::vector<flatbuffers::Offset<wire::HolderCopies>> hv;
    for (const auto& [node, entries] : o.lease->copies) {
      std::vector<flatbuffers::Offset<wire::LocalEntry>> ev;
      ev.reserve(entries.size());
      for (const DirEntry& e : entries) {
        ev.push_back(wire::CreateLocalEntry(b, b.CreateString(e.name), e.type, 0, 0, 0, e.id));
      }
      hv.push_back(wire::CreateHolderCopies(b, b.CreateString(node), b.CreateVector(ev)));
    }
    lease = wire::CreateLease(b, o.lease->id, o.lease->epoch, b.CreateVector(hv));
  }
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> read;
  if (o.read && o.read_vd) {
    const m2m::Bytes part = EncodeVd(*o.read_vd, !o.read_vd->cacheable, false);
    read = b.CreateVector(reinterpret_cast<const uint8_t*>(part.data()), part.size());
  }
  std::optional<wire::DirStat> parent;
  if (o.parent) {
    const struct stat& st = *o.parent;
    parent.emplace(st.st_dev, st.st_ino, st.st_mode, st.st_nlink, st.st_uid, st.st_gid,
                   st.st_size, st.st_blksize, st.st_blocks, st.st_atim.tv_sec,
                   st.st_atim.tv_nsec, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ctim.tv_sec,
                   st.st_ctim.tv_nsec);
  }
  return Finish(b, wire::Body::UpdateReply,
                wire::CreateUpdateReply(b, o.version, o.prev_version, keys, entries, holders,
                                        lease, o.sharer, o.same_holders, o.read, read, o.held,
                                        o.names_sharer, o.added, o.unlinked,
                                        parent ? &*parent : nullptr, o.renamed,
                                        o.subdirs.value_or(0), o.subdirs.has_value()));
}

Result<PathRequestData> DecodePathRequest(const m2m::Bytes& payload) {
  auto d = Decoded::Open(payload, wire::Body::PathRequest);
  if (!d) return Err(d.error());
  const wire::PathRequest* r = d->msg()->body_as_PathRequest();
  PathRequestData out;
  auto path = Need(r->path(), "path");
  if (!path) return Err(path.error());
  out.path = std::move(*path);
  out.from = r->from() ? r->from()->str() : std::string();
  out.epoch = r->epoch();
  out.notify = r->notify();
  out.lease = r->lease();
  if (r->name() != nullptr) out.name = r->name()->str();
  out.holders_hash = r->holders_hash();
  out.names = r->names();
  if (const wire::SharerSlot* sh = r->sharer(); sh != nullptr) {
    if (sh->rkey() == nullptr || sh->rkey()->size() == 0 || sh->length() == 0 ||
        sh->length() % 8 != 0 || uint64_t{sh->slot()} * 8 + 8 > sh->length()) {
      return Err(EPROTO, "VD get with a malformed sharer slot");
    }
    SharerSlotData d;
    d.slot = sh->slot();
    d.region.addr = sh->addr();
    d.region.length = sh->length();
    d.region.rkey.resize(sh->rkey()->size());
    std::memcpy(d.region.rkey.data(), sh->rkey()->data(), sh->rkey()->size());
    out.sharer = std::move(d);
  }
  if (const auto* patch = r->patch(); patch != nullptr) {
    const auto* p = reinterpret_cast<const std::byte*>(patch->data());
    auto o = DecodeUpdateReply(m2m::Bytes(p, p + patch->size()));
    if (!o) return Err(o.error());
    if (o->version == 0 || o->version <= o->prev_version || o->read || o->lease) {
      return Err(EPROTO, "DT invalidation with a malformed delta");
    }
    out.patch = DtPatchData{};
    out.patch->version = o->version;
    out.patch->prev_version = o->prev_version;
    out.patch->keys = std::move(o->keys);
    out.patch->fresh = std::move(o->fresh);
    out.patch->holders = std::move(o->holders);
  }
  return out;
}

Result<UpdateRequestData> DecodeUpdateRequest(const m2m::Bytes& payload) {
  auto d = Decoded::Open(payload, wire::Body::UpdateRequest);
  if (!d) return Err(d.error());
  const wire::UpdateRequest* r = d->msg()->body_as_UpdateRequest();
  UpdateRequestData out;
  auto path = Need(r->path(), "path");
  if (!path) return Err(path.error());
  out.path = std::move(*path);
  out.from = r->from() ? r->from()->str() : std::string();
  out.epoch = r->epoch();
  out.lease_ok = r->lease_ok();
  out.holders_hash = r->holders_hash();
  out.request_id = r->request_id();
  auto first = DecodeChange(r->change());
  if (!first) return Err(first.error());
  out.changes.push_back(std::move(*first));
  if (r->more() != nullptr) {
    if (r->more()->size() + 1 > kMaxChangesPerUpdate) {
      return Err(EPROTO, "VD update with more than " + std::to_string(kMaxChangesPerUpdate) +
                             " changes");
    }
    for (const wire::Change* c : *r->more()) {
      auto more = DecodeChange(c);
      if (!more) return Err(more.error());
      out.changes.push_back(std::move(*more));
    }
  }
  return out;
}

Result<std::vector<DirEntry>> DecodeListing(const m2m::Bytes& payload) {
  auto d = Decoded::Open(payload, wire::Body::Listing);
  if (!d) return Err(d.error());
  std::vector<DirEntry> out;
  const auto* v = d->msg()->body_as_Listing()->entries();
  if (v == nullptr) return out;
  out.reserve(v->size());
  for (const wire::LocalEntry* e : *v) {
    auto name = Need(e->name(), "entry.name");
    if (!name) return Err(name.error());
    if (e->move_role() > DirEntry::kOutgoing) return Err(EPROTO, "entry.move_role out of range");
    out.push_back(DirEntry{std::move(*name), e->type(), e->ino(), e->move_id(),
                           static_cast<uint8_t>(e->move_role()), e->id()});
  }
  return out;
}

Result<VdPtr> DecodeVd(const m2m::Bytes& payload) {
  auto d = Decoded::Open(payload, wire::Body::Vd);
  if (!d) return Err(d.error());
  const wire::Vd* w = d->msg()->body_as_Vd();
  auto vd = std::make_shared<VirtualDirectory>();
  auto path = Need(w->path(), "vd.path");
  if (!path) return Err(path.error());
  vd->path = std::move(*path);
  vd->version = w->version();
  vd->epoch = w->epoch();
  auto holders = DecodeStrings(w->holders());
  if (!holders) return Err(holders.error());
  vd->holders = std::move(*holders);
  auto entries = DecodeEntries(w->entries());
  if (!entries) return Err(entries.error());
  vd->entries = std::move(*entries);
  vd->partial = w->partial();
  if (vd->partial) {
    if (vd->entries.size() > 1) return Err(EPROTO, "partial VD with more than one entry");
    vd->subdirs = static_cast<size_t>(w->subdirs());
  } else {
    vd->CountSubdirs();
  }
  vd->cacheable = !w->uncached();
  return VdPtr(std::move(vd));
}

Result<std::vector<Conflict>> DecodeConflicts(const m2m::Bytes& payload) {
  auto d = Decoded::Open(payload, wire::Body::ConflictList);
  if (!d) return Err(d.error());
  std::vector<Conflict> out;
  const auto* v = d->msg()->body_as_ConflictList()->conflicts();
  if (v == nullptr) return out;
  for (const wire::ConflictEntry* c : *v) {
    Conflict conflict;
    auto name = Need(c->name(), "conflict.name");
    if (!name) return Err(name.error());
    conflict.name = std::move(*name);
    if (c->copies() != nullptr) {
      for (const wire::Copy* copy : *c->copies()) {
        auto node = Need(copy->node(), "copy.node");
        if (!node) return Err(node.error());
        conflict.copies.emplace_back(std::move(*node), copy->type());
      }
    }
    out.push_back(std::move(conflict));
  }
  return out;
}

Result<UpdateOutcome> DecodeUpdateReply(const m2m::Bytes& payload) {
  auto d = Decoded::Open(payload, wire::Body::UpdateReply);
  if (!d) return Err(d.error());
  const wire::UpdateReply* r = d->msg()->body_as_UpdateReply();
  UpdateOutcome o;
  o.version = r->vd_version();
  o.prev_version = r->prev_version();
  auto keys = DecodeStrings(r->keys());
  if (!keys) return Err(keys.error());
  o.keys = std::move(*keys);
  auto fresh = DecodeEntries(r->entries());
  if (!fresh) return Err(fresh.error());
  o.fresh = std::move(*fresh);
  auto holders = DecodeStrings(r->holders());
  if (!holders) return Err(holders.error());
  o.holders = std::move(*holders);
  o.sharer = r->sharer();
  o.same_holders = r->same_holders();
  if (o.same_holders && !o.holders.empty()) {
    return Err(EPROTO, "VD update reply with holders it says it left out");
  }
  o.read = r->read();
  o.held = r->held();
  o.names_sharer = r->names_sharer();
  o.added = r->added();
  o.unlinked = r->unlinked();
  o.renamed = r->renamed();
  if (r->has_subdirs()) o.subdirs = r->subdirs();
  if ((o.unlinked || o.renamed) && !r->read()) {
    return Err(EPROTO, "VD unlink or rename answer without its entry");
  }
  if (const wire::DirStat* p = r->parent(); p != nullptr) {
    struct stat st {};
    st.st_dev = p->dev();
    st.st_ino = p->ino();
    st.st_mode = p->mode();
    st.st_nlink = p->nlink();
    st.st_uid = p->uid();
    st.st_gid = p->gid();
    st.st_size = p->size();
    st.st_blksize = p->blksize();
    st.st_blocks = p->blocks();
    st.st_atim = {p->atime_sec(), p->atime_nsec()};
    st.st_mtim = {p->mtime_sec(), p->mtime_nsec()};
    st.st_ctim = {p->ctime_sec(), p->ctime_nsec()};
    o.parent = st;
  }
  if (o.read) {
    const auto* part = r->read_vd();
    if (part == nullptr) return Err(EPROTO, "VD lock-read without its VD");
    const auto* p = reinterpret_cast<const std::byte*>(part->data());
    auto vd = DecodeVd(m2m::Bytes(p, p + part->size()));
    if (!vd) return Err(vd.error());
    if (!(*vd)->partial) return Err(EPROTO, "VD lock-read answers a whole VD");
    o.read_vd = std::move(*vd);
  }
  if (const wire::Lease* l = r->lease(); l != nullptr) {
    LeaseData lease;
    lease.id = l->id();
    lease.epoch = l->epoch();
    std::set<std::string> seen;
    if (l->copies() != nullptr) {
      for (const wire::HolderCopies* h : *l->copies()) {
        auto node = Need(h->node(), "lease.node");
        if (!node) return Err(node.error());
        if (!seen.insert(*node).second) return Err(EPROTO, "lease names a holder twice");
        std::vector<DirEntry> entries;
        if (h->entries() != nullptr) {
          entries.reserve(h->entries()->size());
          for (const wire::LocalEntry* e : *h->entries()) {
            auto name = Need(e->name(), "lease.entry.name");
            if (!name) return Err(name.error());
            DirEntry entry{std::move(*name), e->type(), 0};
            entry.id = e->id();
            entries.push_back(std::move(entry));
          }
        }
        lease.copies.emplace_back(std::move(*node), std::move(entries));
      }
    }
    o.lease = std::move(lease);
  }
  return o;
}

Result<RecalledData> DecodeRecalled(const m2m::Bytes& payload) {
  auto d = Decoded::Open(payload, wire::Body::Recalled);
  if (!d) return Err(d.error());
  const wire::Recalled* r = d->msg()->body_as_Recalled();
  return RecalledData{r->held(), r->version()};
}

}  // namespace fedfs::ns::vdcodec
