// The journal record of a directory operation (dirops/dir_ops_record.h).
#include "dirops/dir_ops_record.h"

#include <algorithm>

#include <flatbuffers/flatbuffers.h>

#include "common/path.h"
#include "dir_ops_generated.h"

namespace fedfs::ns {

namespace wire = fedfs::ns::dirwire;

// Strings are written with their length, never through c_str(): a NUL
// inside one (DecodeRecord accepts it in a node name) would cut it short.
std::string EncodeRecord(const DirOps::Record& r) {
  flatbuffers::FlatBufferBuilder b(512);
  std::vector<flatbuffers::Offset<wire::SavedDir>> saved;
  for (const auto& [node, s] : r.saved) {
    saved.push_back(wire::CreateSavedDir(b, b.CreateString(node), s.mode, s.uid, s.gid));
  }
  std::vector<flatbuffers::Offset<wire::Template>> templates;
  for (const auto& t : r.templates) {
    templates.push_back(wire::CreateTemplate(b, t.mode, t.uid, t.gid, t.id));
  }
  std::vector<flatbuffers::Offset<flatbuffers::String>> holders, done;
  for (const auto& h : r.holders) holders.push_back(b.CreateString(h));
  for (const auto& d : r.done) done.push_back(b.CreateString(d));
  std::vector<uint32_t> groups(r.cred.groups.begin(), r.cred.groups.end());
  auto root = wire::CreateDirOpRecord(
      b, kDirOpsRecordVersion, r.id, static_cast<wire::OpKind>(r.kind),
      static_cast<wire::OpState>(r.state), b.CreateString(r.from), b.CreateString(r.to), r.flags,
      r.cred.uid, r.cred.gid, b.CreateVector(groups), r.cred.umask, b.CreateVector(holders),
      b.CreateVector(done), b.CreateVector(saved), b.CreateVector(templates), r.dir_id,
      b.CreateString(r.from_node), b.CreateString(r.to_node), b.CreateString(r.replaced), r.src_ino,
      r.dst_ino);
  b.FinishSizePrefixed(root);
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

Result<DirOps::Record> DecodeRecord(std::string_view bytes) {
  flatbuffers::Verifier v(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (!wire::VerifySizePrefixedDirOpRecordBuffer(v)) {
    return Err(EPROTO, "journal record fails verification");
  }
  const auto* m = wire::GetSizePrefixedDirOpRecord(bytes.data());
  if (m->version() != kDirOpsRecordVersion) {
    return Err(EPROTO, "journal record version " + std::to_string(m->version()));
  }
  if (static_cast<uint8_t>(m->kind()) > 2 || static_cast<uint8_t>(m->state()) > 2 ||
      m->from() == nullptr || !ValidateGlobalPath(m->from()->string_view())) {
    return Err(EPROTO, "journal record with bad kind/state/path");
  }
  DirOps::Record r;
  r.id = m->id();
  r.kind = static_cast<DirOps::Record::Kind>(m->kind());
  r.state = static_cast<DirOps::Record::State>(m->state());
  r.from = m->from()->str();
  if (r.kind != DirOps::Record::Kind::kRmdir) {
    if (m->to() == nullptr || !ValidateGlobalPath(m->to()->string_view())) {
      return Err(EPROTO, "journal record with bad destination");
    }
    r.to = m->to()->str();
  }
  if (r.kind == DirOps::Record::Kind::kReplace &&
      (m->replaced() == nullptr || !ValidateGlobalPath(m->replaced()->string_view()) ||
       m->from_node() == nullptr || m->to_node() == nullptr)) {
    return Err(EPROTO, "journal record of a replace without its nodes or replaced path");
  }
  r.flags = m->flags();
  r.cred.uid = m->uid();
  r.cred.gid = m->gid();
  r.cred.umask = m->umask();
  if (m->groups()) r.cred.groups.assign(m->groups()->begin(), m->groups()->end());
  if (m->holders()) {
    for (const auto* h : *m->holders()) r.holders.push_back(h->str());
  }
  std::sort(r.holders.begin(), r.holders.end());
  if (m->done()) {
    for (const auto* d : *m->done()) r.done.insert(d->str());
  }
  if (m->saved()) {
    for (const auto* s : *m->saved()) {
      if (s->node() == nullptr) return Err(EPROTO, "journal record: saved dir without node");
      r.saved[s->node()->str()] = {s->mode(), s->uid(), s->gid()};
    }
  }
  if (m->templates()) {
    for (const auto* t : *m->templates()) {
      r.templates.push_back({static_cast<mode_t>(t->mode()), t->uid(), t->gid(), t->id()});
    }
  }
  r.dir_id = m->dir_id();
  if (m->from_node()) r.from_node = m->from_node()->str();
  if (m->to_node()) r.to_node = m->to_node()->str();
  if (m->replaced()) r.replaced = m->replaced()->str();
  r.src_ino = m->src_ino();
  r.dst_ino = m->dst_ino();
  return r;
}

}  // namespace fedfs::ns
