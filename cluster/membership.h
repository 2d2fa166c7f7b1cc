// Membership: who is in the federation, who is alive, and the ring built
// from the live members (docs/membership.md).
//
// Protocol, in short. Each process picks an incarnation at start (wall-clock
// milliseconds << 16 | 16 random bits: unique per process and growing across
// restarts of a node). A starting node calls kMemberJoin on its seeds in order
// until one answers with its view; with no answer it runs as a one-node
// federation and keeps retrying with backoff. Every heartbeat_interval, each
// node sends kMemberHeartbeat to every member it knows, dead ones included
// (all-to-all: O(N^2) small messages per interval, fine for tens of nodes).
// Requests and replies carry the sender's id, address, incarnation, epoch
// and whole view. A member with no successful exchange for failure_timeout is
// marked Dead. The epoch grows by one at every change a node observes (new
// member, member dead, member back alive or with a new incarnation) and is
// merged by max from every message received, so all nodes converge on the
// highest epoch. Gossip rules: unknown members are learned from views; a
// member is marked Alive only on direct contact or a newer incarnation, never
// on hearsay about an older or equal incarnation; Dead comes only from this
// node's own failure detector (or a newer incarnation reported dead).
//
// Node tags. Every member announces its configured node_tag (the high 16 bits
// of the st_ino of its files, vfs/vfs.h) in every message, so all mounts
// number a file alike. Two alive members may not share a tag: the one that
// started later (larger incarnation; ties: larger id) is refused. A node
// keeps it out of its view (and answers its requests EEXIST, naming both
// nodes); if the later one was already in the view when the earlier one
// shows up, it is removed from the view. Each conflict is logged at error
// level, once per member incarnation. The refused node itself refuses the
// holder of its tag likewise, so it runs alone until it is restarted with
// another tag or the holder dies (docs/membership.md, "Node tags").
//
// Threads. All membership state belongs to one internal thread ("member").
// RPC handlers run on the transport's progress thread: they only verify and
// decode the message, then post it to the member thread, which merges it and
// answers the Responder. Completion callbacks likewise post their result.
// No lock is held across a transport call. Readers on any thread take
// Snapshot(): an immutable view + ring, republished after every change.
//
// Ownership. Membership does not own the transport. Order of teardown:
// Stop(), then the transport's Shutdown(), then destroy both (callbacks that
// arrive after Stop() are dropped).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cluster/options.h"
#include "cluster/ring.h"
#include "common/result.h"
#include "m2m/transport.h"

namespace fedfs::daemon {

inline constexpr uint16_t kMembershipWireVersion = 1;
// Upper bound on the members in one message (a bigger view is refused).
inline constexpr size_t kMaxViewMembers = 4096;

enum class MemberState : uint8_t { kAlive = 0, kDead = 1 };
const char* MemberStateName(MemberState s);  // "alive" / "dead"

// One member as it travels on the wire.
struct MemberRecord {
  std::string id;
  std::string addr;
  uint64_t incarnation = 0;
  MemberState state = MemberState::kAlive;
  // node_tag (1..65534; 0 = not announced). See "Node tags" above.
  uint16_t tag = 0;
};

// A decoded kMemberJoin / kMemberHeartbeat payload (requests and replies).
struct MemberMessage {
  MemberRecord sender;
  uint64_t epoch = 0;
  std::vector<MemberRecord> members;
};

// Encodes with FlatBuffers (cluster/membership.fbs). `version` is only ever
// changed by tests (to check that other versions are refused).
m2m::Bytes EncodeMemberMessage(const MemberMessage& m,
                               uint16_t version = kMembershipWireVersion);

// Verifies (FlatBuffers verifier) and decodes. EPROTO, with the reason as
// context, for anything malformed: bad buffer, wrong version, missing
// sender, invalid node id or address, too many members. Never crashes.
Result<MemberMessage> DecodeMemberMessage(std::span<const std::byte> payload);

// One member as this node sees it.
struct MemberInfo {
  std::string id;
  std::string addr;
  uint64_t incarnation = 0;
  MemberState state = MemberState::kAlive;
  // Last successful exchange (request received from it, or reply to ours).
  std::chrono::steady_clock::time_point last_heard{};
  // Heartbeat round-trip time, EWMA (alpha 1/4), microseconds; -1 unknown.
  int64_t rtt_us = -1;
  // Its node_tag as it announced it (0 = not announced).
  uint16_t tag = 0;
};

// An immutable snapshot for readers.
struct MembershipView {
  std::string self_id;
  uint64_t epoch = 0;
  std::map<std::string, MemberInfo> members;  // self included, by id
  std::shared_ptr<const Ring> ring;           // over the Alive members
};

class Membership {
 public:
  // `transport` must outlive this object's Stop() (see the header comment).
  Membership(MembershipOptions options, m2m::Transport* transport);
  ~Membership();  // Stop()
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Installs the kMemberJoin / kMemberHeartbeat handlers. Call before the
  // transport's Listen.
  void RegisterHandlers();

  // Members held dead (docs/faults.md, "Directory operations with dead
  // members"): while hold(id) is true, member `id` is never marked alive, on
  // contact or by hearsay; each contact from it calls on_held(id) (on the
  // member thread: it must not block). Before Start; both run on the member
  // thread.
  using HoldFn = std::function<bool(const std::string& id)>;
  using ContactFn = std::function<void(const std::string& id)>;
  void SetDeadHold(HoldFn hold, ContactFn on_held);
  // Marks `id` dead now if it is alive and held (a record for it arrived).
  // Any thread.
  void Fence(const std::string& id);
  // Removes `id` from the view for good: its messages and what others say
  // of it are ignored from then on (fedfsctl forget). Any thread.
  void Forget(const std::string& id);

  // Starts the member thread: joins through the seeds and heartbeats.
  void Start();

  // Stops the member thread; pending requests are answered ESHUTDOWN.
  // Idempotent.
  void Stop();

  // The current view; never null. Any thread.
  std::shared_ptr<const MembershipView> Snapshot() const;

  uint64_t incarnation() const { return incarnation_; }

  // The node_tag `node` announced (itself included), from the current
  // snapshot; 0 if the node is unknown or announced none. Any thread: this is
  // what the daemon wires into ns::VfsDeps::tag_of.
  uint16_t TagOf(const std::string& node) const;

 private:
  class Core;
  const uint64_t incarnation_;
  std::shared_ptr<Core> core_;
};

}  // namespace fedfs::daemon
