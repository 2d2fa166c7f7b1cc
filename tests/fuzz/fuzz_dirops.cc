// libFuzzer target: the journal records of multi-node directory operations
// (dirops/dir_ops_record.h), decoded from the Kv at every recovery, and the
// records of what dead members must apply (dirops/pending.h), decoded from
// the Kv and from peers' kNsPending* messages.
//
// Input: the record bytes (as a Kv value or a message: 8-aligned).
// Invariants: a decoded journal record has a known kind and state, valid
// global paths (`to` for a rename and a replace, `replaced` for a replace),
// sorted holders; a decoded pending record has a valid node, coordinator and
// paths; each encodes back to bytes that decode to an equal record.
#include <linux/fs.h>

#include <string>

#include "fuzz_util.h"
#include "dirops/dir_ops_record.h"
#include "dirops/pending.h"
#include "common/path.h"

using namespace fedfs;
using namespace fedfs::ns;

namespace {

using Record = DirOps::Record;

bool Same(const Record& a, const Record& b) {
  if (a.id != b.id || a.kind != b.kind || a.state != b.state || a.from != b.from ||
      a.to != b.to || a.flags != b.flags || a.cred.uid != b.cred.uid ||
      a.cred.gid != b.cred.gid || a.cred.groups != b.cred.groups ||
      a.cred.umask != b.cred.umask || a.holders != b.holders || a.done != b.done ||
      a.saved.size() != b.saved.size() || a.templates.size() != b.templates.size() ||
      a.dir_id != b.dir_id || a.from_node != b.from_node || a.to_node != b.to_node ||
      a.replaced != b.replaced || a.src_ino != b.src_ino || a.dst_ino != b.dst_ino) {
    return false;
  }
  for (auto i = a.saved.begin(), j = b.saved.begin(); i != a.saved.end(); ++i, ++j) {
    if (i->first != j->first || i->second.mode != j->second.mode ||
        i->second.uid != j->second.uid || i->second.gid != j->second.gid) {
      return false;
    }
  }
  for (size_t i = 0; i < a.templates.size(); ++i) {
    if (a.templates[i].mode != b.templates[i].mode || a.templates[i].uid != b.templates[i].uid ||
        a.templates[i].gid != b.templates[i].gid || a.templates[i].id != b.templates[i].id) {
      return false;
    }
  }
  return true;
}

void MakeSeeds(fuzz::Seeds& s) {
  Record r;
  r.id = 17;
  r.kind = Record::Kind::kRename;
  r.state = Record::State::kValidating;
  r.from = "/a/src";
  r.to = "/b/dst";
  r.flags = RENAME_NOREPLACE;
  r.cred.uid = 1000;
  r.cred.gid = 1000;
  r.cred.groups = {1000, 27};
  r.cred.umask = 022;
  r.holders = {"n1", "n2", "n3"};
  s.Add("rename_validating", EncodeRecord(r));
  r.state = Record::State::kActing;
  r.done = {"n1"};
  r.saved["n2"] = {0755, 1000, 1000};
  r.templates = {{0755, 0, 0}, {0700, 1000, 1000}};
  s.Add("rename_acting", EncodeRecord(r));
  r.state = Record::State::kUndoing;
  s.Add("rename_undoing", EncodeRecord(r));
  Record d;
  d.id = 18;
  d.kind = Record::Kind::kRmdir;
  d.state = Record::State::kActing;
  d.from = "/gone";
  d.holders = {"n1", "n2"};
  d.done = {"n2"};
  d.saved["n2"] = {0750, 0, 0};
  s.Add("rmdir_acting", EncodeRecord(d));
  Record f;
  f.id = 19;
  f.kind = Record::Kind::kReplace;
  f.state = Record::State::kActing;
  f.from = "/p/src";
  f.to = "/p/dst";
  f.from_node = "n1";
  f.to_node = "n2";
  f.replaced = "/p/dst";
  f.src_ino = 12;
  f.dst_ino = 34;
  f.holders = {"n1", "n2"};
  s.Add("replace_acting", EncodeRecord(f));
  PendingOp p;
  p.seq = p.op_id = 20;
  p.node = "n3";
  p.from = "/a/src";
  p.to = "/b/dst";
  p.templates = {{0711, 0, 0, 5}};
  p.coordinator = "n1";
  p.time_ms = 1700000000000;
  s.Add("pending_rename", EncodePendingOp(p));
  PendingOp q = p;
  q.seq = q.op_id = 21;
  q.kind = PendingOp::Kind::kRmdir;
  q.to.clear();
  q.templates.clear();
  s.Add("pending_list", EncodePendingList({p, q}));
  s.Add("pending_ask", EncodePendingAsk("n3", 21));
}

// The pending records' decoders on the same bytes.
void CheckPending(const std::string& value) {
  auto check_op = [](const PendingOp& op) {
    FUZZ_CHECK(ValidateGlobalPath(op.from).has_value() && op.from != "/");
    if (op.kind == PendingOp::Kind::kRename) {
      FUZZ_CHECK(ValidateGlobalPath(op.to).has_value() && !PathWithin(op.to, op.from));
    } else {
      FUZZ_CHECK(op.kind == PendingOp::Kind::kRmdir && op.to.empty());
    }
    FUZZ_CHECK(!op.node.empty() && !op.coordinator.empty());
    (void)op.Describe();
  };
  if (auto op = DecodePendingOp(value)) {
    check_op(*op);
    auto back = DecodePendingOp(EncodePendingOp(*op));
    FUZZ_CHECK(back.has_value() && *back == *op);
  } else {
    FUZZ_CHECK(op.error().code == EPROTO);
  }
  if (auto list = DecodePendingList(value)) {
    for (const auto& op : *list) check_op(op);
    auto back = DecodePendingList(EncodePendingList(*list));
    FUZZ_CHECK(back.has_value() && *back == *list);
  }
  if (auto ask = DecodePendingAsk(value)) {
    auto back = DecodePendingAsk(EncodePendingAsk(ask->first, ask->second));
    FUZZ_CHECK(back.has_value() && *back == *ask);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fuzz::MaybeWriteSeeds(*argc, *argv, MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string value(reinterpret_cast<const char*>(data), size);  // as the Kv returns it
  CheckPending(value);
  auto r = DecodeRecord(value);
  if (!r) {
    FUZZ_CHECK(r.error().code == EPROTO);
    return 0;
  }
  FUZZ_CHECK(r->kind == Record::Kind::kRename || r->kind == Record::Kind::kRmdir ||
             r->kind == Record::Kind::kReplace);
  FUZZ_CHECK(static_cast<uint8_t>(r->state) <= static_cast<uint8_t>(Record::State::kUndoing));
  FUZZ_CHECK(ValidateGlobalPath(r->from).has_value());
  if (r->kind != Record::Kind::kRmdir) {
    FUZZ_CHECK(ValidateGlobalPath(r->to).has_value());
  } else {
    FUZZ_CHECK(r->to.empty());
  }
  if (r->kind == Record::Kind::kReplace) FUZZ_CHECK(ValidateGlobalPath(r->replaced).has_value());
  FUZZ_CHECK(std::is_sorted(r->holders.begin(), r->holders.end()));
  (void)r->Describe();

  const std::string again = EncodeRecord(*r);
  auto back = DecodeRecord(again);
  FUZZ_CHECK(back.has_value());
  FUZZ_CHECK(Same(*r, *back));
  return 0;
}
