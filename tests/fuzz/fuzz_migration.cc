// libFuzzer target: what file moves decode (migration/migration_internal.h):
// their messages from other nodes (kMigStart ... kMigOutcome) and their
// journal records read back from the Kv at recovery.
//
// Input: 1 byte choosing the decoder (even: message, odd: record), then the
// bytes. Invariants: an accepted message has a valid global path or none,
// node ids of at most 255 bytes, at most 256 parents with mode bits only,
// a known trigger;
// an accepted record a known state and a valid path; each re-encoded
// decodes back to equal fields.
#include <string>

#include "fuzz_util.h"
#include "common/path.h"
#include "migration/migration_internal.h"

using namespace fedfs;
using namespace fedfs::ns;

namespace {

void MakeSeeds(fuzz::Seeds& s) {
  MoveMsg m;
  m.id = 42;
  m.path = "/data/f";
  m.from = "n1";
  m.to = "n2";
  m.size = 1 << 20;
  m.mode = 0640;
  m.uid = 1000;
  m.gid = 100;
  m.atime_ns = 1;
  m.mtime_ns = 2;
  m.parents = {{0755, 0, 0}};
  s.Add("prepare", std::string_view("\0", 1), EncodeMsg(m));
  MoveMsg start;
  start.path = "/data/f";
  start.from = "n3";
  start.to = "n2";
  start.trigger = static_cast<uint8_t>(MoveTrigger::kFull);
  s.Add("start_full", std::string_view("\0", 1), EncodeMsg(start));
  MoveMsg a;
  a.from = "n2";
  a.state = 1;
  a.bytes = 7;
  s.Add("answer", std::string_view("\0", 1), EncodeMsg(a));
  Migration::Rec r;
  r.id = 42;
  r.state = Migration::Rec::kCommitted;
  r.path = "/data/f";
  r.peer = "n2";
  r.dev = 2049;
  r.ino = 12;
  r.type = 8;
  s.Add("record_committed", std::string_view("\1", 1), EncodeMoveRecord(r));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fuzz::MaybeWriteSeeds(*argc, *argv, MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool record = (data[0] & 1) != 0;
  if (record) {
    const std::string value(reinterpret_cast<const char*>(data + 1), size - 1);  // as the Kv returns it
    auto r = DecodeMoveRecord(value);
    if (!r) {
      FUZZ_CHECK(r.error().code == EPROTO);
      return 0;
    }
    FUZZ_CHECK(r->state <= Migration::Rec::kPlaced);
    FUZZ_CHECK(ValidateGlobalPath(r->path).has_value() && r->path != "/");
    const m2m::Bytes again = EncodeMoveRecord(*r);
    auto back = DecodeMoveRecord(
        std::string_view(reinterpret_cast<const char*>(again.data()), again.size()));
    FUZZ_CHECK(back.has_value());
    FUZZ_CHECK(back->id == r->id && back->state == r->state && back->path == r->path &&
               back->peer == r->peer && back->dev == r->dev && back->ino == r->ino &&
               back->type == r->type);
    return 0;
  }
  const m2m::Bytes payload(reinterpret_cast<const std::byte*>(data + 1),
                           reinterpret_cast<const std::byte*>(data + size));
  auto m = DecodeMsg(payload);
  if (!m) {
    FUZZ_CHECK(m.error().code == EPROTO);
    return 0;
  }
  if (!m->path.empty()) FUZZ_CHECK(ValidateGlobalPath(m->path).has_value() && m->path != "/");
  FUZZ_CHECK(m->from.size() <= 255 && m->to.size() <= 255);
  FUZZ_CHECK(m->parents.size() <= 256);
  for (const auto& t : m->parents) FUZZ_CHECK((t.mode & ~07777u) == 0);
  FUZZ_CHECK(m->trigger < kMoveTriggers);
  auto back = DecodeMsg(EncodeMsg(*m));
  FUZZ_CHECK(back.has_value());
  FUZZ_CHECK(back->id == m->id && back->path == m->path && back->from == m->from &&
             back->to == m->to && back->size == m->size && back->mode == m->mode &&
             back->uid == m->uid && back->gid == m->gid && back->atime_ns == m->atime_ns &&
             back->mtime_ns == m->mtime_ns && back->parents.size() == m->parents.size() &&
             back->state == m->state && back->bytes == m->bytes &&
             back->trigger == m->trigger && back->dry_run == m->dry_run &&
             back->files == m->files);
  return 0;
}
