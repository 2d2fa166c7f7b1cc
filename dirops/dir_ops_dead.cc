// DirOps with dead members (dirops/dir_ops.h, "Dead nodes"): the records of
// what each dead member must apply when it returns (dirops/pending.h).
#include "common/logging.h"
#include "dirops/dir_ops.h"
#include "dirops/dir_ops_record.h"
#include "dirops/kv_keys.h"
#include "dirops/pending_service.h"

namespace fedfs::ns {

std::vector<PendingOp> DirOps::PendingOpsFor(const Record& r, const ClusterView& view) const {
  std::vector<PendingOp> ops;
  if (dead_sink_ == nullptr) return ops;
  const uint64_t now_ms = PendingNowMs();
  for (const auto& [node, addr] : view.dead) {
    PendingOp op;
    op.seq = r.id;
    op.op_id = r.id;
    op.node = node;
    op.kind = r.kind == Record::Kind::kRename ? PendingOp::Kind::kRename : PendingOp::Kind::kRmdir;
    op.from = r.from;
    if (r.kind == Record::Kind::kRename) {
      op.to = r.to;
      op.templates = r.templates;
    }
    op.coordinator = node_id_;
    op.time_ms = now_ms;
    ops.push_back(std::move(op));
  }
  if (!ops.empty()) {
    Logger("dirops")->warn("{}: {} member(s) dead; they apply it when they return",
                           r.Describe(), ops.size());
  }
  return ops;
}

Status DirOps::SaveActing(const Record& r, const std::vector<PendingOp>& ops) {
  if (ops.empty()) return Save(r);
  KvBatch batch;
  batch.Put(kvkeys::DirOpsJournalKey(r.id), EncodeRecord(r));
  PendingStore::AddTo(&batch, ops);
  auto s = kv_->Apply(batch, /*sync=*/true);
  if (!s) Logger("dirops")->error("journal write of {}: {}", r.Describe(), s.error().ToString());
  return s;
}

void DirOps::DropPending(const Record& r) {
  if (dead_sink_ == nullptr) return;
  if (auto s = dead_sink_->store().EraseOp(r.id); !s) {
    Logger("dirops")->error("{}: dropping its records for dead members: {}", r.Describe(),
                            s.error().ToString());
  }
}

}  // namespace fedfs::ns
