// MoveGate: the per-file gate of nodefs/move_support.h, kept by
// LocalNodeFs. Internal to fedfs_ns_local (and its tests).
//
// Operations that change a file hold a Pass (a shared lock) while they check
// the gate and change the file; Freeze takes the lock exclusively to install
// a gate, so it waits for the changes already running. `Any()` is false
// while no file is gated: then no operation needs to know which file it
// changes, and none waits.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "common/result.h"

namespace fedfs::ns {

class MoveGate {
 public:
  enum class State { kNone, kFrozen, kHeld, kMoved };
  using Key = std::pair<dev_t, ino_t>;
  using Pass = std::shared_lock<std::shared_mutex>;

  // Held by a changing operation from its check to its change.
  Pass Enter() { return Pass(pass_mu_); }
  // Some file is gated (relaxed hint; exact under a Pass).
  bool Any() const { return gated_.load(std::memory_order_acquire) != 0; }
  State StateOf(const Key& k) const;
  // For an operation on `k` holding `pass` (`changes`: it may change the
  // file): Ok to go on (the pass still held); ESTALE if moved; if it must
  // wait (frozen or held, and `changes`), releases the pass and waits until
  // the gate is gone (then EAGAIN: the caller starts again with a new pass)
  // or moved (ESTALE), or until this thread's GateDeadline (move_support.h)
  // if it has one (then kErrMoveWait).
  Status Check(const Key& k, Pass& pass, bool changes = true);
  // Installs a frozen gate once changes in flight are done. EBUSY if `k`
  // is gated already. `while_exclusive` runs with the lock held (to count
  // handles atomically with the freeze).
  template <class Fn>
  Status Freeze(const Key& k, Fn while_exclusive) {
    std::unique_lock x(pass_mu_);
    {
      std::lock_guard lock(mu_);
      if (gates_.count(k) != 0) return Err(EBUSY, "file is being moved");
      gates_[k] = State::kFrozen;
      gated_.fetch_add(1, std::memory_order_acq_rel);
    }
    while_exclusive();
    return Ok();
  }
  void MarkHeld(const Key& k);
  void MarkMoved(const Key& k);
  void Thaw(const Key& k);

 private:
  std::shared_mutex pass_mu_;
  mutable std::mutex mu_;  // leaf
  std::condition_variable cv_;
  std::map<Key, State> gates_;  // GUARDED_BY(mu_)
  std::atomic<size_t> gated_{0};
};

}  // namespace fedfs::ns
