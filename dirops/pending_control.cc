// The "pending" and "forget" control commands (dirops/pending_control.h).
#include "dirops/pending_control.h"

#include "dirops/pending_service.h"

namespace fedfs::ns {

namespace {

control::PendingReply Status(PendingService& p, const std::string& self) {
  control::PendingReply r;
  r.node = self;
  for (const auto& n : p.store().Fenced()) r.held.push_back(n);
  for (const auto& n : p.Forgotten()) r.forgotten.push_back(n);
  const uint64_t now = PendingNowMs();
  for (const auto& op : p.store().For("")) {
    r.records.push_back({.node = op.node,
                         .seq = op.seq,
                         .op = op.op_id,
                         .kind = op.kind == PendingOp::Kind::kRename ? "rename" : "rmdir",
                         .from = op.from,
                         .to = op.to,
                         .coordinator = op.coordinator,
                         .age_ms = now > op.time_ms ? now - op.time_ms : 0});
  }
  const auto s = p.stats();
  r.put_received = s.put_received;
  r.replicated = s.replicated;
  r.notified = s.notified;
  r.applied = s.applied;
  r.apply_failures = s.apply_failures;
  r.unreplicated = s.unreplicated;
  return r;
}

}  // namespace

void RegisterPendingControl(control::Dispatcher& dispatcher, PendingService* pending,
                            const std::string& self) {
  if (pending == nullptr) return;
  dispatcher.Register([pending, self](const control::Request&) -> Result<control::PendingReply> {
    return Status(*pending, self);
  });
  dispatcher.Register([pending](const control::Request& q) -> Result<control::ForgetReply> {
    auto dropped = pending->Forget(q.node);
    if (!dropped) return Err(dropped.error().code, "forget " + q.node + ": " + dropped.error().ToString());
    return control::ForgetReply{.node = q.node, .dropped = *dropped};
  });
}

}  // namespace fedfs::ns
