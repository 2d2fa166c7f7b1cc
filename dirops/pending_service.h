// PendingService: the records of what dead members must apply, spread to
// every live node, and applied by a member when it returns (docs/faults.md,
// "Directory operations with dead members"; the records: dirops/pending.h).
//
// Messages (common/rpc_methods.h; bodies dirops/dir_ops.fbs):
//  * kNsPendingPut(PendingList): a coordinator's records, stored (synced)
//    before the answer. A record for a member this node sees alive fences it
//    (hooks.fence: membership holds it dead);
//  * kNsPendingGet(PendingAsk{node}) -> PendingList: the records held for
//    `node`;
//  * kNsPendingNotify: "you have records to apply": the receiver applies its
//    records (below), off the caller's path;
//  * kNsPendingDone(PendingAsk{node, seq}): `node` applied its records up to
//    `seq`: they are erased here; once none is left its fence lifts;
//  * kNsPendingForget(PendingAsk{node}): `node` left the federation for
//    good: its records are erased here.
//
// The fence. A node that holds records for a member treats it as dead:
// membership does not mark it alive on contact (fedfsd wires Holds() into
// Membership::SetDeadHold), so no dirmerge lists it, no ring places managers
// on it and its files answer EHOSTDOWN. Each contact from it (its heartbeats
// come on) calls OnHeldContact, which tells it, at most once per `notify_gap`,
// to apply. It then asks every member (alive or dead in its view: after a
// partition each side may hold the other dead) for its records, merges them
// by seq, applies them in order to its export root (ApplyPendingOp, as the
// daemon), calls hooks.applied (the daemon drops the names and VDs it built
// meanwhile), and sends kNsPendingDone to every member.
// Records it could not apply stay, and it is told again. It remembers the
// largest seq it applied (dirops/applied) and never applies a record up to
// it again: a node that was away meanwhile still holds those records and
// tells it (it answers Done without touching its export root).
//
// Replication. A coordinator's records are in its own store with the
// journal record of the operation (one batch); before the operation answers
// they are put on every live node (Replicate). A node that did not
// acknowledge is tried again by the background thread while it is alive; at
// Start every record this node coordinated is put again (a coordinator that
// crashed before its copies were made), for 30 s, to each node it sees alive.
//
// Threads: handlers decode on the transport's context and do their Kv
// writes and file system work on `blocking`. Replicate and ApplyOwn block
// (remote calls, synced writes): worker threads only. One background thread
// ("pending") runs retries and the applying of this node's own records.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster.h"
#include "common/executor.h"
#include "common/result.h"
#include "dirops/pending.h"
#include "m2m/transport.h"
#include "nodefs/node_fs.h"

namespace fedfs::ns {

// What DirOps needs of the service (a plain store in unit tests).
class PendingSink {
 public:
  virtual ~PendingSink() = default;
  virtual PendingStore& store() = 0;
  // The records of one finished operation, already in store(): copied to
  // every live node before this returns (failures retried later).
  virtual void Replicate(const std::vector<PendingOp>& ops) = 0;
  // Whether `node`, held dead for its records, made contact lately: it is
  // back and applying them (a coordinator waits for it rather than record
  // more for it). Default: never.
  virtual bool Returning(const std::string& node) const {
    (void)node;
    return false;
  }
};

struct PendingServiceOptions {
  std::chrono::milliseconds rpc_timeout{2000};
  // The background thread's period (retries of copies, of applying).
  std::chrono::milliseconds retry{1000};
  // Least time between two notifications of one member.
  std::chrono::milliseconds notify_gap{500};
};

struct PendingHooks {
  // A record for `node` arrived while it may be alive here: hold it dead.
  std::function<void(const std::string& node)> fence;
  // This node applied records to its export root: drop what was built from
  // its old names.
  std::function<void()> applied;
  // `node` was forgotten (here, by another node, or in a past life: Load):
  // remove it from the membership for good.
  std::function<void(const std::string& node)> forget;
};

class PendingService final : public PendingSink {
 public:
  using ViewFn = std::function<std::shared_ptr<const ClusterView>()>;

  // Every pointer outlives the service. `local` is this node's export root.
  PendingService(std::string self, Kv* kv, m2m::Transport* transport, ViewFn view,
                 NodeFs* local, Executor* blocking, PendingServiceOptions options = {},
                 PendingHooks hooks = {});
  ~PendingService() override;  // Stop()
  PendingService(const PendingService&) = delete;
  PendingService& operator=(const PendingService&) = delete;

  // Reads the store. Before RegisterHandlers' traffic and DirOps' Recover.
  [[nodiscard]] Status Load();
  void RegisterHandlers();
  // Starts the background thread; puts this node's records again.
  void Start();
  // Stops the background thread; requests from then on answer ESHUTDOWN
  // (waits for those being served: the Kv may go after this returns).
  // Idempotent.
  void Stop();

  PendingStore& store() override { return store_; }
  void Replicate(const std::vector<PendingOp>& ops) override;
  // Held, with a contact within the last 2 s.
  bool Returning(const std::string& node) const override;

  // Membership's hook: `node`, held dead here, made contact.
  void OnHeldContact(const std::string& node);
  // Applies this node's records now (what a notification starts). Ok when
  // none is left to apply.
  [[nodiscard]] Status ApplyOwn();
  // `node` leaves for good: its records are erased here and on every live
  // node, and each of them (this one too) remembers it as forgotten
  // (dirops/forgotten/<node> in the Kv) and removes it from its membership
  // (hooks.forget), now and at every start. EAGAIN naming the live nodes
  // not told (tell them again). Returns the records dropped here.
  [[nodiscard]] Result<uint64_t> Forget(const std::string& node);
  std::set<std::string> Forgotten() const;

  struct Stats {
    uint64_t put_received = 0;   // records stored from other coordinators
    uint64_t replicated = 0;     // copies acknowledged by other nodes
    uint64_t notified = 0;       // notifications sent
    uint64_t applied = 0;        // records this node applied to its export root
    uint64_t apply_failures = 0;
    size_t unreplicated = 0;     // copies not yet acknowledged
  };
  Stats stats() const;

 private:
  void HandlePut(m2m::IncomingCall call, m2m::Responder r);
  void HandleGet(m2m::IncomingCall call, m2m::Responder r);
  void HandleDone(m2m::IncomingCall call, m2m::Responder r, bool forget);
  // Erases `node`'s records, remembers it forgotten, calls hooks.forget.
  Result<uint64_t> ForgetHere(const std::string& node);
  // One call to every node in `nodes`, in parallel; the errors by node.
  std::map<std::string, Error> CallAll(const std::vector<std::string>& nodes, uint16_t method,
                                       const std::string& payload,
                                       std::map<std::string, m2m::Bytes>* replies = nullptr);
  std::vector<std::string> LiveOthers() const;
  // The other members, alive or dead in this node's view.
  std::vector<std::string> AllOthers() const;
  void Loop();
  void RetryCopies();
  void PutOwnAgain();

  static constexpr std::chrono::seconds kOwnResend{30};

  const std::string self_;
  m2m::Transport* const transport_;
  const ViewFn view_;
  NodeFs* const local_;
  Executor* const blocking_;
  const PendingServiceOptions options_;
  const PendingHooks hooks_;
  PendingStore store_;
  Kv* const kv_;

  // Lock order: mu_ is a leaf; never held across a remote call or a Kv write.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                                    // GUARDED_BY(mu_)
  bool apply_asked_ = false;                                 // GUARDED_BY(mu_)
  // target node -> the (node, seq) of records it has not acknowledged
  std::map<std::string, std::set<std::pair<std::string, uint64_t>>> unreplicated_;  // GUARDED_BY(mu_)
  std::map<std::string, std::chrono::steady_clock::time_point> last_notified_;  // GUARDED_BY(mu_)
  std::map<std::string, std::chrono::steady_clock::time_point> last_contact_;   // GUARDED_BY(mu_)
  Stats stats_;                                              // GUARDED_BY(mu_)
  std::set<std::string> forgotten_;                          // GUARDED_BY(mu_)
  // Until then, this node's own records are put again on every node not in
  // own_acked_ (Start).
  std::chrono::steady_clock::time_point own_until_{};          // GUARDED_BY(mu_)
  std::set<std::string> own_acked_;                            // GUARDED_BY(mu_)
  std::mutex apply_mu_;  // one ApplyOwn at a time; held across remote calls
  // Handlers serve under a shared lock while !closed_; Stop closes it.
  std::shared_mutex gate_;
  bool closed_ = false;  // GUARDED_BY(gate_)
  std::thread thread_;
};

}  // namespace fedfs::ns
