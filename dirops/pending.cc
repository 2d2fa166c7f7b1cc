// Pending operations of dead members (dirops/pending.h).
#include "dirops/pending.h"

#include <algorithm>
#include <ctime>

#include <flatbuffers/flatbuffers.h>

#include "cluster/node_addr.h"
#include "common/logging.h"
#include "common/path.h"
#include "dir_ops_generated.h"
#include "dirops/kv_keys.h"

namespace fedfs::ns {

namespace wire = fedfs::ns::dirwire;

namespace {

std::shared_ptr<spdlog::logger> Log() { return Logger("dirops"); }

flatbuffers::Offset<wire::PendingRecord> Build(flatbuffers::FlatBufferBuilder& b,
                                               const PendingOp& op) {
  std::vector<flatbuffers::Offset<wire::Template>> templates;
  for (const auto& t : op.templates) {
    templates.push_back(wire::CreateTemplate(b, t.mode, t.uid, t.gid, t.id));
  }
  return wire::CreatePendingRecord(b, kPendingRecordVersion, op.seq, op.op_id,
                                   b.CreateString(op.node), static_cast<wire::OpKind>(op.kind),
                                   b.CreateString(op.from), b.CreateString(op.to),
                                   b.CreateVector(templates), b.CreateString(op.coordinator),
                                   op.time_ms);
}

Result<PendingOp> Read(const wire::PendingRecord* m) {
  if (m == nullptr) return Err(EPROTO, "pending record missing");
  if (m->version() != kPendingRecordVersion) {
    return Err(EPROTO, "pending record version " + std::to_string(m->version()));
  }
  if (m->node() == nullptr || !daemon::IsValidNodeId(m->node()->string_view())) {
    return Err(EPROTO, "pending record without a valid node id");
  }
  if (m->coordinator() == nullptr || !daemon::IsValidNodeId(m->coordinator()->string_view())) {
    return Err(EPROTO, "pending record without a valid coordinator");
  }
  const auto kind = static_cast<uint8_t>(m->kind());
  if (kind > 1) return Err(EPROTO, "pending record of kind " + std::to_string(kind));
  if (m->from() == nullptr || !ValidateGlobalPath(m->from()->string_view()) ||
      m->from()->string_view() == "/") {
    return Err(EPROTO, "pending record with a bad path");
  }
  PendingOp op;
  op.seq = m->seq();
  op.op_id = m->op_id();
  op.node = m->node()->str();
  op.kind = static_cast<PendingOp::Kind>(kind);
  op.from = m->from()->str();
  if (op.kind == PendingOp::Kind::kRename) {
    if (m->to() == nullptr || !ValidateGlobalPath(m->to()->string_view()) ||
        m->to()->string_view() == "/" || PathWithin(m->to()->string_view(), op.from)) {
      return Err(EPROTO, "pending rename with a bad destination");
    }
    op.to = m->to()->str();
  }
  if (m->templates()) {
    for (const auto* t : *m->templates()) {
      op.templates.push_back({static_cast<mode_t>(t->mode()), t->uid(), t->gid(), t->id()});
    }
  }
  op.coordinator = m->coordinator()->str();
  op.time_ms = m->time_ms();
  return op;
}

template <typename T>
const T* Verified(std::string_view bytes) {
  flatbuffers::Verifier v(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (!v.VerifySizePrefixedBuffer<T>(nullptr)) return nullptr;
  return flatbuffers::GetSizePrefixedRoot<T>(bytes.data());
}

std::string Bytes(const flatbuffers::FlatBufferBuilder& b) {
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

}  // namespace

uint64_t PendingNowMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

bool PendingOp::operator==(const PendingOp& o) const {
  auto same = [](const NodeFs::DirTemplate& a, const NodeFs::DirTemplate& b) {
    return a.mode == b.mode && a.uid == b.uid && a.gid == b.gid && a.id == b.id;
  };
  return seq == o.seq && op_id == o.op_id && node == o.node && kind == o.kind && from == o.from &&
         to == o.to && coordinator == o.coordinator && time_ms == o.time_ms &&
         std::equal(templates.begin(), templates.end(), o.templates.begin(), o.templates.end(),
                    same);
}

std::string PendingOp::Describe() const {
  std::string s = "pending op " + std::to_string(op_id) + " for " + node + ": ";
  s += kind == Kind::kRename ? "rename " + from + " -> " + to : "rmdir " + from;
  return s;
}

std::string EncodePendingOp(const PendingOp& op) {
  flatbuffers::FlatBufferBuilder b(256);
  b.FinishSizePrefixed(Build(b, op));
  return Bytes(b);
}

Result<PendingOp> DecodePendingOp(std::string_view bytes) {
  const auto* m = Verified<wire::PendingRecord>(bytes);
  if (m == nullptr) return Err(EPROTO, "pending record fails verification");
  return Read(m);
}

std::string EncodePendingList(const std::vector<PendingOp>& ops) {
  flatbuffers::FlatBufferBuilder b(256);
  std::vector<flatbuffers::Offset<wire::PendingRecord>> records;
  for (const auto& op : ops) records.push_back(Build(b, op));
  b.FinishSizePrefixed(wire::CreatePendingList(b, b.CreateVector(records)));
  return Bytes(b);
}

Result<std::vector<PendingOp>> DecodePendingList(std::string_view bytes) {
  const auto* m = Verified<wire::PendingList>(bytes);
  if (m == nullptr) return Err(EPROTO, "pending list fails verification");
  std::vector<PendingOp> out;
  if (m->records()) {
    for (const auto* r : *m->records()) {
      auto op = Read(r);
      if (!op) return Err(op.error());
      out.push_back(std::move(*op));
    }
  }
  return out;
}

std::string EncodePendingAsk(const std::string& node, uint64_t seq) {
  flatbuffers::FlatBufferBuilder b(64);
  b.FinishSizePrefixed(wire::CreatePendingAsk(b, b.CreateString(node), seq));
  return Bytes(b);
}

Result<std::pair<std::string, uint64_t>> DecodePendingAsk(std::string_view bytes) {
  const auto* m = Verified<wire::PendingAsk>(bytes);
  if (m == nullptr || m->node() == nullptr || !daemon::IsValidNodeId(m->node()->string_view())) {
    return Err(EPROTO, "pending request fails verification");
  }
  return std::make_pair(m->node()->str(), m->seq());
}

Status PendingStore::Load() {
  auto rows = kv_->Scan(kvkeys::kPendingPrefix);
  if (!rows) return Err(rows.error());
  std::lock_guard lock(mu_);
  by_node_.clear();
  for (const auto& [key, value] : *rows) {
    auto op = DecodePendingOp(value);
    if (!op) {
      Log()->error("pending record {} cannot be read ({}): left alone", key,
                   op.error().ToString());
      continue;
    }
    by_node_[op->node][op->seq] = std::move(*op);
  }
  return Ok();
}

void PendingStore::AddTo(KvBatch* batch, const std::vector<PendingOp>& ops) {
  for (const auto& op : ops) batch->Put(kvkeys::PendingKey(op.node, op.seq), EncodePendingOp(op));
}

void PendingStore::Added(const std::vector<PendingOp>& ops) {
  std::lock_guard lock(mu_);
  for (const auto& op : ops) by_node_[op.node][op.seq] = op;
}

Status PendingStore::Put(const std::vector<PendingOp>& ops) {
  if (ops.empty()) return Ok();
  KvBatch batch;
  AddTo(&batch, ops);
  if (auto s = kv_->Apply(batch, /*sync=*/true); !s) return s;
  Added(ops);
  return Ok();
}

Status PendingStore::Erase(const std::string& node, uint64_t upto) {
  KvBatch batch;
  {
    std::lock_guard lock(mu_);
    auto it = by_node_.find(node);
    if (it == by_node_.end()) return Ok();
    for (const auto& [seq, op] : it->second) {
      if (seq <= upto) batch.Delete(kvkeys::PendingKey(node, seq));
    }
  }
  if (batch.ops.empty()) return Ok();
  if (auto s = kv_->Apply(batch, /*sync=*/true); !s) return s;
  std::lock_guard lock(mu_);
  auto it = by_node_.find(node);
  if (it == by_node_.end()) return Ok();
  for (auto s = it->second.begin(); s != it->second.end() && s->first <= upto;) {
    s = it->second.erase(s);
  }
  if (it->second.empty()) by_node_.erase(it);
  return Ok();
}

Status PendingStore::EraseOp(uint64_t op_id) {
  // From the Kv, not the index: an operation's records are written with its
  // journal record and indexed only once it succeeded (Added).
  auto rows = kv_->Scan(kvkeys::kPendingPrefix);
  if (!rows) return Err(rows.error());
  std::vector<PendingOp> gone;
  for (const auto& [key, value] : *rows) {
    auto op = DecodePendingOp(value);
    if (op && op->op_id == op_id) gone.push_back(std::move(*op));
  }
  if (gone.empty()) return Ok();
  KvBatch batch;
  for (const auto& op : gone) batch.Delete(kvkeys::PendingKey(op.node, op.seq));
  if (auto s = kv_->Apply(batch, /*sync=*/true); !s) return s;
  std::lock_guard lock(mu_);
  for (const auto& op : gone) {
    auto it = by_node_.find(op.node);
    if (it == by_node_.end()) continue;
    it->second.erase(op.seq);
    if (it->second.empty()) by_node_.erase(it);
  }
  return Ok();
}

std::vector<PendingOp> PendingStore::For(const std::string& node) const {
  std::lock_guard lock(mu_);
  std::vector<PendingOp> out;
  for (const auto& [n, ops] : by_node_) {
    if (!node.empty() && n != node) continue;
    for (const auto& [seq, op] : ops) out.push_back(op);
  }
  return out;
}

bool PendingStore::Holds(const std::string& node) const {
  std::lock_guard lock(mu_);
  return by_node_.contains(node);
}

std::set<std::string> PendingStore::Fenced() const {
  std::lock_guard lock(mu_);
  std::set<std::string> out;
  for (const auto& [n, ops] : by_node_) out.insert(n);
  return out;
}

uint64_t PendingStore::MaxSeq() const {
  std::lock_guard lock(mu_);
  uint64_t m = 0;
  for (const auto& [n, ops] : by_node_) {
    if (!ops.empty()) m = std::max(m, ops.rbegin()->first);
  }
  return m;
}

}  // namespace fedfs::ns
