// The journal record and the messages of migration (migration.fbs).
#include <unistd.h>

#include <cstring>

#include "common/path.h"
#include "migration/migration_internal.h"
#include "migration_generated.h"
#include "dirops/kv_keys.h"

namespace fedfs::ns {

namespace fb = fedfs::ns::migwire;

namespace {

template <class T>
const T* VerifyAs(std::span<const std::byte> bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < sizeof(flatbuffers::uoffset_t) || bytes.size() > (1u << 24)) return nullptr;
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 8;
  opts.max_tables = 4096;
  flatbuffers::Verifier v(data, bytes.size(), opts);
  if (!v.VerifyBuffer<T>(nullptr)) return nullptr;
  return flatbuffers::GetRoot<T>(data);
}

m2m::Bytes Bytes(flatbuffers::FlatBufferBuilder& b) {
  const auto* p = reinterpret_cast<const std::byte*>(b.GetBufferPointer());
  return m2m::Bytes(p, p + b.GetSize());
}

std::string Str(const flatbuffers::String* s) { return s == nullptr ? std::string() : s->str(); }

}  // namespace

std::string Migration::Rec::Key() const { return kvkeys::MigrationKey(out(), peer, id); }

Migration::Staged::~Staged() {
  if (fd >= 0) ::close(fd);
}

m2m::Bytes EncodeMoveRecord(const Migration::Rec& r) {
  flatbuffers::FlatBufferBuilder b(256);
  auto path = b.CreateString(r.path);
  auto peer = b.CreateString(r.peer);
  b.Finish(fb::CreateMoveRecord(b, kMigrationWireVersion, r.id,
                                static_cast<fb::MoveState>(r.state), path, peer, r.dev, r.ino,
                                r.type));
  return Bytes(b);
}

Result<Migration::Rec> DecodeMoveRecord(std::string_view bytes) {
  m2m::Bytes aligned(reinterpret_cast<const std::byte*>(bytes.data()),
                     reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size());
  const auto* r = VerifyAs<fb::MoveRecord>(aligned);
  if (r == nullptr) return Err(EPROTO, "malformed migration record");
  if (r->version() != kMigrationWireVersion) return Err(EPROTO, "unknown migration record version");
  if (static_cast<uint8_t>(r->state()) > Migration::Rec::kPlaced) {
    return Err(EPROTO, "migration record: bad state");
  }
  Migration::Rec out;
  out.id = r->id();
  out.state = static_cast<Migration::Rec::State>(r->state());
  out.path = Str(r->path());
  out.peer = Str(r->peer());
  out.dev = r->dev();
  out.ino = r->ino();
  out.type = r->type();
  if (auto s = ValidateGlobalPath(out.path); !s || out.path == "/") {
    return Err(EPROTO, "migration record: bad path");
  }
  return out;
}

m2m::Bytes EncodeMsg(const MoveMsg& m) {
  flatbuffers::FlatBufferBuilder b(256);
  auto path = b.CreateString(m.path);
  auto from = b.CreateString(m.from);
  auto to = b.CreateString(m.to);
  std::vector<flatbuffers::Offset<fb::Template>> ps;
  for (const auto& t : m.parents) ps.push_back(fb::CreateTemplate(b, t.mode, t.uid, t.gid));
  auto parents = b.CreateVector(ps);
  std::vector<flatbuffers::Offset<fb::FileSize>> fs;
  for (const auto& [p, size] : m.files) fs.push_back(fb::CreateFileSize(b, b.CreateString(p), size));
  auto files = b.CreateVector(fs);
  std::vector<uint64_t> hs;
  hs.reserve(m.hashes.size() * 2);
  for (const ChunkHashValue& h : m.hashes) {
    hs.push_back(h.low);
    hs.push_back(h.high);
  }
  auto hashes = b.CreateVector(hs);
  fb::MoveMessageBuilder mb(b);
  mb.add_version(kMigrationWireVersion);
  mb.add_id(m.id);
  mb.add_path(path);
  mb.add_from(from);
  mb.add_to(to);
  mb.add_size(m.size);
  mb.add_mode(m.mode);
  mb.add_uid(m.uid);
  mb.add_gid(m.gid);
  mb.add_atime_ns(m.atime_ns);
  mb.add_mtime_ns(m.mtime_ns);
  mb.add_parents(parents);
  mb.add_state(m.state);
  mb.add_bytes(m.bytes);
  mb.add_trigger(m.trigger);
  mb.add_files(files);
  mb.add_dry_run(m.dry_run);
  mb.add_chunk(m.chunk);
  mb.add_max_rate(m.max_rate);
  mb.add_hashes(hashes);
  b.Finish(mb.Finish());
  return Bytes(b);
}

Result<MoveMsg> DecodeMsg(const m2m::Bytes& payload) {
  const auto* r = VerifyAs<fb::MoveMessage>(payload);
  if (r == nullptr) return Err(EPROTO, "malformed migration message");
  if (r->version() != kMigrationWireVersion) return Err(EPROTO, "unknown migration version");
  MoveMsg m;
  m.id = r->id();
  m.path = Str(r->path());
  m.from = Str(r->from());
  m.to = Str(r->to());
  m.size = r->size();
  m.mode = r->mode();
  m.uid = r->uid();
  m.gid = r->gid();
  m.atime_ns = r->atime_ns();
  m.mtime_ns = r->mtime_ns();
  m.state = r->state();
  m.bytes = r->bytes();
  m.trigger = r->trigger();
  m.dry_run = r->dry_run();
  if (m.trigger >= kMoveTriggers) return Err(EPROTO, "migration message: unknown trigger");
  if (r->parents() != nullptr) {
    if (r->parents()->size() > 256) return Err(EPROTO, "migration message: too many parents");
    for (const fb::Template* t : *r->parents()) {
      m.parents.push_back(NodeFs::DirTemplate{static_cast<mode_t>(t->mode() & 07777),
                                              static_cast<uid_t>(t->uid()),
                                              static_cast<gid_t>(t->gid())});
    }
  }
  m.chunk = r->chunk();
  m.max_rate = r->max_rate();
  if (r->hashes() != nullptr) {
    const auto* h = r->hashes();
    if (h->size() % 2 != 0 || h->size() / 2 > kMaxDeltaChunks) {
      return Err(EPROTO, "migration message: bad chunk hashes");
    }
    // Copied out bytewise: a crafted buffer may misalign the vector's
    // elements (the verifier checks its length's alignment only).
    const auto* p = reinterpret_cast<const uint8_t*>(h->Data());
    for (flatbuffers::uoffset_t i = 0; i < h->size(); i += 2) {
      uint64_t low = 0, high = 0;
      std::memcpy(&low, p + i * sizeof(uint64_t), sizeof low);
      std::memcpy(&high, p + (i + 1) * sizeof(uint64_t), sizeof high);
      m.hashes.push_back(ChunkHashValue{flatbuffers::EndianScalar(low),
                                        flatbuffers::EndianScalar(high)});
    }
  }
  if (!m.hashes.empty() && m.chunk == 0) return Err(EPROTO, "migration message: hashes of no chunk");
  if (r->files() != nullptr) {
    if (r->files()->size() > kMaxLargest) return Err(EPROTO, "migration message: too many files");
    for (const fb::FileSize* f : *r->files()) {
      std::string p = Str(f->path());
      if (auto s = ValidateGlobalPath(p); !s || p == "/") {
        return Err(EPROTO, "migration message: bad path of a file");
      }
      m.files.emplace_back(std::move(p), f->size());
    }
  }
  if (!m.path.empty()) {
    if (auto s = ValidateGlobalPath(m.path); !s || m.path == "/") {
      return Err(EPROTO, "migration message: bad path");
    }
  }
  if (m.from.size() > 255 || m.to.size() > 255) return Err(EPROTO, "migration message: node id");
  return m;
}

}  // namespace fedfs::ns
