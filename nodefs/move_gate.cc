// MoveGate (nodefs/move_gate.h).
#include "nodefs/move_gate.h"

#include "nodefs/move_support.h"

namespace fedfs::ns {

MoveGate::State MoveGate::StateOf(const Key& k) const {
  std::lock_guard lock(mu_);
  auto it = gates_.find(k);
  return it == gates_.end() ? State::kNone : it->second;
}

Status MoveGate::Check(const Key& k, Pass& pass, bool changes) {
  std::unique_lock lock(mu_);
  auto it = gates_.find(k);
  if (it == gates_.end()) return Ok();
  if (it->second == State::kMoved) return Err(ESTALE, "file moved to another node");
  // Reads pass until the file moved: its bytes here are the new copy's
  // until that takes a write, which it holds until every node dropped what
  // it cached (migration/migration.h).
  if ((it->second == State::kFrozen || it->second == State::kHeld) && !changes) return Ok();
  pass.unlock();  // the move goes on while this operation waits
  auto done = [&] {
    auto i = gates_.find(k);
    return i == gates_.end() || i->second == State::kMoved;
  };
  if (const auto& until = GateDeadline()) {
    if (!cv_.wait_until(lock, *until, done)) {
      return Err(kErrMoveWait, "the file is being moved: ask again");
    }
  } else {
    cv_.wait(lock, done);
  }
  if (gates_.count(k) != 0) return Err(ESTALE, "file moved to another node");
  return Err(EAGAIN, "move undone: start again");
}

namespace {
template <class M>
void Set(M& gates, std::atomic<size_t>& gated, const MoveGate::Key& k, MoveGate::State st) {
  auto [it, added] = gates.try_emplace(k, st);
  if (added) gated.fetch_add(1, std::memory_order_acq_rel);
  it->second = st;
}
}  // namespace

void MoveGate::MarkHeld(const Key& k) {
  std::lock_guard lock(mu_);
  Set(gates_, gated_, k, State::kHeld);
}

void MoveGate::MarkMoved(const Key& k) {
  {
    std::lock_guard lock(mu_);
    Set(gates_, gated_, k, State::kMoved);
  }
  cv_.notify_all();
}

void MoveGate::Thaw(const Key& k) {
  {
    std::lock_guard lock(mu_);
    if (gates_.erase(k) != 0) gated_.fetch_sub(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
}

}  // namespace fedfs::ns
