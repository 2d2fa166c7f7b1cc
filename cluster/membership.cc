#include "cluster/membership.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <flatbuffers/flatbuffers.h>

#include "cluster/node_addr.h"
#include "common/logging.h"
#include "common/rpc_methods.h"
#include "common/thread_name.h"
#include "membership_generated.h"

namespace fedfs::daemon {

using Clock = std::chrono::steady_clock;

const char* MemberStateName(MemberState s) { return s == MemberState::kAlive ? "alive" : "dead"; }

// ---------------------------------------------------------------------------
// Wire codec

namespace {

flatbuffers::Offset<wire::Member> BuildMember(flatbuffers::FlatBufferBuilder& b,
                                              const MemberRecord& r) {
  auto id = b.CreateString(r.id);
  auto addr = b.CreateString(r.addr);
  return wire::CreateMember(b, id, addr, r.incarnation,
                            r.state == MemberState::kAlive ? wire::MemberState::Alive
                                                           : wire::MemberState::Dead,
                            r.tag);
}

Result<MemberRecord> ReadMember(const wire::Member* m, const char* what) {
  if (m == nullptr) return Err(EPROTO, std::string("missing ") + what);
  if (m->id() == nullptr || !IsValidNodeId(m->id()->string_view())) {
    return Err(EPROTO, std::string(what) + ": invalid node id");
  }
  if (m->addr() == nullptr || !ParseHostPort(m->addr()->string_view())) {
    return Err(EPROTO, std::string(what) + " " + m->id()->str() + ": invalid address");
  }
  if (m->state() != wire::MemberState::Alive && m->state() != wire::MemberState::Dead) {
    return Err(EPROTO, std::string(what) + " " + m->id()->str() + ": invalid state");
  }
  if (m->tag() == 0xffff) {
    return Err(EPROTO, std::string(what) + " " + m->id()->str() + ": invalid node tag 65535");
  }
  MemberRecord r;
  r.id = m->id()->str();
  r.addr = m->addr()->str();
  r.incarnation = m->incarnation();
  r.state = m->state() == wire::MemberState::Alive ? MemberState::kAlive : MemberState::kDead;
  r.tag = m->tag();
  return r;
}

}  // namespace

m2m::Bytes EncodeMemberMessage(const MemberMessage& m, uint16_t version) {
  flatbuffers::FlatBufferBuilder b(256 + 96 * m.members.size());
  auto sender = BuildMember(b, m.sender);
  std::vector<flatbuffers::Offset<wire::Member>> members;
  members.reserve(m.members.size());
  for (const auto& r : m.members) members.push_back(BuildMember(b, r));
  auto vec = b.CreateVector(members);
  b.FinishSizePrefixed(wire::CreateMemberMessage(b, version, sender, m.epoch, vec));
  return m2m::ToBytes({b.GetBufferPointer(), b.GetSize()});
}

Result<MemberMessage> DecodeMemberMessage(std::span<const std::byte> payload) {
  // Sizes first: an empty payload would be copied below into a vector with
  // no storage (memcpy to a null pointer, undefined even for 0 bytes).
  if (payload.empty() || payload.size() > (64u << 20)) {
    return Err(EPROTO, "membership message of " + std::to_string(payload.size()) + " bytes");
  }
  // FlatBuffers reads scalars in place: work on an 8-aligned copy if needed.
  std::vector<uint64_t> aligned;
  const auto* data = reinterpret_cast<const uint8_t*>(payload.data());
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    aligned.resize((payload.size() + 7) / 8);
    std::memcpy(aligned.data(), payload.data(), payload.size());
    data = reinterpret_cast<const uint8_t*>(aligned.data());
  }
  flatbuffers::Verifier verifier(data, payload.size(), /*max_depth=*/8,
                                 /*max_tables=*/2 * kMaxViewMembers + 8);
  if (!wire::VerifySizePrefixedMemberMessageBuffer(verifier)) {
    return Err(EPROTO, "malformed membership message (verifier refused it)");
  }
  const wire::MemberMessage* m = wire::GetSizePrefixedMemberMessage(data);
  if (m->version() != kMembershipWireVersion) {
    return Err(EPROTO, "unsupported membership message version " + std::to_string(m->version()));
  }
  MemberMessage out;
  auto sender = ReadMember(m->sender(), "sender");
  if (!sender) return Err(sender.error());
  out.sender = std::move(*sender);
  out.epoch = m->epoch();
  if (m->members() != nullptr) {
    if (m->members()->size() > kMaxViewMembers) {
      return Err(EPROTO, "view of " + std::to_string(m->members()->size()) + " members");
    }
    out.members.reserve(m->members()->size());
    for (const wire::Member* e : *m->members()) {
      auto r = ReadMember(e, "member");
      if (!r) return Err(r.error());
      out.members.push_back(std::move(*r));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Membership core: everything below runs on the member thread unless noted.

namespace {

uint64_t NewIncarnation() {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  std::random_device rd;
  return (static_cast<uint64_t>(ms) << 16) | (rd() & 0xffffu);
}

}  // namespace

class Membership::Core : public std::enable_shared_from_this<Membership::Core> {
 public:
  using Task = std::move_only_function<void()>;

  Core(MembershipOptions o, m2m::Transport* t, uint64_t incarnation)
      : opts_(std::move(o)), transport_(t), log_(Logger("member")) {
    MemberInfo self;
    self.id = opts_.node_id;
    self.addr = opts_.advertise_addr;
    self.incarnation = incarnation;
    self.state = MemberState::kAlive;
    self.last_heard = Clock::now();
    self.rtt_us = 0;
    self.tag = opts_.node_tag;
    members_[self.id] = self;
    epoch_ = 1;
    for (const auto& s : opts_.seeds) {
      if (s != opts_.advertise_addr) seeds_.push_back(s);
    }
    joined_ = seeds_.empty();
    join_backoff_ = opts_.heartbeat_interval;
    Publish(/*ring_changed=*/true);
  }

  // Any thread. Runs `task` on the member thread; dropped after Stop.
  void Post(Task task) {
    {
      std::lock_guard lock(mu_);
      if (!stopped_) {
        queue_.push_back(std::move(task));
        cv_.notify_one();
        return;
      }
    }
    // `task` (and any Responder it holds) is destroyed here, outside mu_.
  }

  // Before Start.
  void SetDeadHold(HoldFn hold, ContactFn on_held) {
    hold_ = std::move(hold);
    on_held_ = std::move(on_held);
  }

  // Any thread: marks `id` dead now if it is alive and held.
  void Fence(const std::string& id) {
    Post([this, id] {
      auto it = members_.find(id);
      if (it == members_.end() || it->second.state != MemberState::kAlive || !Held(id)) return;
      it->second.state = MemberState::kDead;
      it->second.rtt_us = -1;
      Changed();
      log_->warn("member {} ({}) is held dead until it applies what it missed; epoch {}", id,
                 it->second.addr, epoch_);
    });
  }

  // Any thread: `id` leaves the view for good.
  void Forget(const std::string& id) {
    Post([this, id] {
      if (id == opts_.node_id || !forgotten_.insert(id).second) return;
      in_flight_.erase(id);
      if (members_.erase(id) != 0) {
        Changed();
        log_->warn("member {} forgotten: removed from the view for good; epoch {}", id, epoch_);
      }
    });
  }

  void Start() {
    std::lock_guard lock(mu_);
    if (started_ || stopped_) return;
    started_ = true;
    thread_ = std::thread([self = shared_from_this()] { self->Run(); });
    NameThread(thread_, "membership");
  }

  void Stop() {
    std::deque<Task> dropped;
    std::thread t;
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      dropped.swap(queue_);
      t = std::move(thread_);
      cv_.notify_one();
    }
    if (t.joinable()) t.join();
    dropped.clear();  // pending Responders answer EIO/ESHUTDOWN in their destructors
  }

  std::shared_ptr<const MembershipView> Snapshot() const {
    std::lock_guard lock(snap_mu_);
    return snapshot_;
  }

  // The handlers hold the core alive: they may run until the transport shuts down.
  void RegisterHandlers() {
    auto self = shared_from_this();
    transport_->Handle(MethodId(RpcMethod::kMemberJoin),
                       [self](m2m::IncomingCall c, m2m::Responder r) {
                         self->OnRequest(true, std::move(c), std::move(r));
                       });
    transport_->Handle(MethodId(RpcMethod::kMemberHeartbeat),
                       [self](m2m::IncomingCall c, m2m::Responder r) {
                         self->OnRequest(false, std::move(c), std::move(r));
                       });
  }

  // Progress thread: verify and hand over to the member thread.
  void OnRequest(bool join, m2m::IncomingCall call, m2m::Responder responder) {
    auto msg = DecodeMemberMessage(call.payload);
    if (!msg) {
      log_->warn("rejected {} from {}: {}", join ? "join" : "heartbeat", call.peer.remote_addr,
                 msg.error().context);
      responder.Fail(msg.error());
      return;
    }
    Post([this, join, m = std::move(*msg), r = std::move(responder),
          from = std::move(call.peer.remote_addr)]() mutable {
      HandleRequest(join, m, std::move(r), from);
    });
  }

 private:
  void Run() {
    auto next_tick = Clock::now();
    for (;;) {
      std::deque<Task> tasks;
      {
        std::unique_lock lock(mu_);
        cv_.wait_until(lock, next_tick, [&] { return stopped_ || !queue_.empty(); });
        if (stopped_) return;
        tasks.swap(queue_);
      }
      for (auto& t : tasks) t();
      tasks.clear();
      const auto now = Clock::now();
      if (now >= next_tick) {
        Tick(now);
        next_tick += opts_.heartbeat_interval;
        if (next_tick <= now) next_tick = now + opts_.heartbeat_interval;
      }
      Publish(ring_dirty_);
    }
  }

  MemberMessage BuildMessage() const {
    MemberMessage m;
    const MemberInfo& self = members_.at(opts_.node_id);
    m.sender = {self.id, self.addr, self.incarnation, MemberState::kAlive, self.tag};
    m.epoch = epoch_;
    m.members.reserve(members_.size());
    for (const auto& [id, info] : members_) {
      m.members.push_back({id, info.addr, info.incarnation, info.state, info.tag});
    }
    return m;
  }

  void Changed() {
    ++epoch_;
    ring_dirty_ = true;
  }

  // True if member a (incarnation, id) started before member b: the earlier
  // one keeps a shared node tag.
  static bool StartedFirst(uint64_t inc_a, const std::string& id_a, uint64_t inc_b,
                           const std::string& id_b) {
    return inc_a != inc_b ? inc_a < inc_b : id_a < id_b;
  }

  // Node tags (membership.h, "Node tags"): may `r`, alive, be in the view
  // next to the members already there? If an alive member with another id
  // holds r's tag, the one that started later loses: r is refused (false,
  // with the reason in *why), or the other member is removed from the view
  // (true). A conflict with this node itself always refuses r: whichever
  // started first, the two nodes stay apart.
  bool AdmitTag(const MemberRecord& r, const std::string& via, std::string* why) {
    if (r.tag == 0) return true;
    const MemberInfo* rival = nullptr;
    for (const auto& [id, m] : members_) {
      if (id != r.id && m.tag == r.tag && m.state == MemberState::kAlive) rival = &m;
    }
    if (rival == nullptr) return true;
    const bool rival_is_self = rival->id == opts_.node_id;
    const bool r_first = StartedFirst(r.incarnation, r.id, rival->incarnation, rival->id);
    if (!rival_is_self && r_first) {
      const std::string loser = rival->id;
      log_->error("node tag {} is used by both {} ({}) and {} ({}): {} started first and keeps it; "
                  "{} is removed from the view (give it another node_tag)",
                  r.tag, r.id, r.addr, loser, rival->addr, r.id, loser);
      tag_logged_.insert({loser, rival->incarnation});
      members_.erase(loser);
      in_flight_.erase(loser);
      Changed();
      return true;
    }
    *why = "node tag " + std::to_string(r.tag) + " of " + r.id + " is already used by " +
           rival->id + (rival_is_self ? " (this node)" : "");
    if (tag_logged_.insert({r.id, r.incarnation}).second) {
      if (rival_is_self && r_first) {
        log_->error("node tag {} of this node ({}) is already used by {} ({}), which started "
                    "first: this node stays out of the federation (give it another node_tag)",
                    r.tag, rival->id, r.id, r.addr);
      } else {
        log_->error("refused {} ({}, via {}): its node tag {} is already used by {} ({}){}", r.id,
                    r.addr, via, r.tag, rival->id, rival->addr,
                    rival_is_self ? ", this node" : "");
      }
    }
    return false;
  }

  // Direct contact with `s` (it sent us a request or answered ours).
  // Returns false if the message must be ignored; *refused then says why if
  // it is refused for its node tag.
  bool OnDirect(const MemberRecord& s, Clock::time_point now, std::string* refused) {
    if (s.id == opts_.node_id) return false;  // ourselves (or an impostor; see caller)
    if (forgotten_.contains(s.id)) return false;  // removed for good (Forget)
    auto it = members_.find(s.id);
    if (it != members_.end() && s.incarnation < it->second.incarnation) return false;
    if (!AdmitTag(s, s.id, refused)) return false;
    it = members_.find(s.id);  // AdmitTag may have removed another member
    if (it == members_.end()) {
      MemberInfo m{s.id, s.addr, s.incarnation,
                   Held(s.id) ? MemberState::kDead : MemberState::kAlive, now, -1, s.tag};
      members_.emplace(s.id, m);
      Changed();
      log_->info("member {} ({}) joined; epoch {}", s.id, s.addr, epoch_);
      return true;
    }
    MemberInfo& m = it->second;
    if (s.incarnation < m.incarnation) return false;  // a message from a past life
    if (Held(s.id)) {
      // Held dead (SetDeadHold): heard, told, not alive.
      if (s.incarnation > m.incarnation || m.state != MemberState::kDead) {
        m.incarnation = s.incarnation;
        m.tag = s.tag;
        m.rtt_us = -1;
        if (m.state != MemberState::kDead) {
          m.state = MemberState::kDead;
          Changed();
        }
        log_->warn("member {} ({}) is held dead until it applies what it missed; epoch {}",
                   s.id, s.addr, epoch_);
      }
      m.addr = s.addr;
      m.last_heard = now;
      if (on_held_) on_held_(s.id);
      return true;
    }
    if (s.incarnation > m.incarnation) {
      m.incarnation = s.incarnation;
      m.addr = s.addr;
      m.tag = s.tag;
      m.state = MemberState::kAlive;
      m.rtt_us = -1;
      Changed();
      log_->info("member {} ({}) restarted (new incarnation); epoch {}", s.id, s.addr, epoch_);
    } else if (m.state == MemberState::kDead) {
      m.state = MemberState::kAlive;
      m.addr = s.addr;
      Changed();
      log_->info("member {} ({}) is alive again; epoch {}", s.id, s.addr, epoch_);
    }
    m.addr = s.addr;
    m.last_heard = now;
    return true;
  }

  // Hearsay: another node's view.
  void MergeView(const MemberMessage& msg, Clock::time_point now) {
    for (const MemberRecord& r : msg.members) {
      if (r.id == opts_.node_id || r.id == msg.sender.id || forgotten_.contains(r.id)) continue;
      auto it = members_.find(r.id);
      std::string why;
      const bool newer = it == members_.end() || r.incarnation > it->second.incarnation;
      if (newer && r.state == MemberState::kAlive && !AdmitTag(r, msg.sender.id, &why)) continue;
      it = members_.find(r.id);  // AdmitTag may have removed another member
      if (it == members_.end()) {
        // Unknown: learn it. If reported alive, give it a full failure
        // timeout to answer our own heartbeats.
        members_.emplace(r.id, MemberInfo{r.id, r.addr, r.incarnation,
                                          Held(r.id) ? MemberState::kDead : r.state, now, -1,
                                          r.tag});
        Changed();
        log_->info("learned member {} ({}, {}) from {}; epoch {}", r.id, r.addr,
                   MemberStateName(r.state), msg.sender.id, epoch_);
        continue;
      }
      MemberInfo& m = it->second;
      if (r.incarnation > m.incarnation) {
        // A newer life of this member: adopt what the reporter says about it.
        m.incarnation = r.incarnation;
        m.addr = r.addr;
        m.tag = r.tag;
        m.state = Held(r.id) ? MemberState::kDead : r.state;
        m.last_heard = now;
        m.rtt_us = -1;
        Changed();
        log_->info("member {} ({}) has a new incarnation ({} per {}); epoch {}", r.id, r.addr,
                   MemberStateName(r.state), msg.sender.id, epoch_);
      }
      // Same or older incarnation: our own contact decides; ignore.
    }
    if (msg.epoch > epoch_) epoch_ = msg.epoch;
  }

  // EEXIST (with the reason) if the sender is refused for its node tag.
  Status Absorb(const MemberMessage& msg, Clock::time_point now) {
    if (msg.sender.id == opts_.node_id) {
      if (msg.sender.incarnation != members_.at(opts_.node_id).incarnation) {
        log_->warn("node {} claims our node id {}: ignored (two nodes with one id?)",
                   msg.sender.addr, opts_.node_id);
      }
      return Ok();
    }
    std::string refused;
    if (!OnDirect(msg.sender, now, &refused)) {
      if (!refused.empty()) return Err(EEXIST, refused);
      return Ok();
    }
    MergeView(msg, now);
    return Ok();
  }

  void HandleRequest(bool join, const MemberMessage& msg, m2m::Responder r,
                     const std::string& from) {
    if (msg.sender.id == opts_.node_id &&
        msg.sender.incarnation != members_.at(opts_.node_id).incarnation) {
      log_->warn("refused {} from {} ({}): it uses our node id", join ? "join" : "heartbeat", from,
                 msg.sender.addr);
      r.Fail(Error{EEXIST, "node id " + msg.sender.id + " is already in use"});
      return;
    }
    if (auto s = Absorb(msg, Clock::now()); !s) {
      r.Fail(s.error());
      return;
    }
    r.Reply(EncodeMemberMessage(BuildMessage()));
  }

  void Tick(Clock::time_point now) {
    // Failure detection.
    for (auto& [id, m] : members_) {
      if (id == opts_.node_id || m.state != MemberState::kAlive) continue;
      if (now - m.last_heard > opts_.failure_timeout) {
        m.state = MemberState::kDead;
        m.rtt_us = -1;
        Changed();
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(now - m.last_heard).count();
        log_->warn("member {} ({}) is dead: no heartbeat for {} ms; epoch {}", id, m.addr, ms,
                   epoch_);
      }
    }
    // Heartbeats, all-to-all, dead members included.
    const m2m::Bytes payload = EncodeMemberMessage(BuildMessage());
    const auto timeout = std::min(opts_.rpc_timeout, opts_.failure_timeout);
    for (auto& [id, m] : members_) {
      if (id == opts_.node_id || in_flight_.contains(id)) continue;
      in_flight_.insert(id);
      auto ep = transport_->GetEndpoint(m.addr);
      ep->Call(MethodId(RpcMethod::kMemberHeartbeat), payload, timeout,
               [self = shared_from_this(), id = id, sent = now](Result<m2m::Bytes> reply) mutable {
                 const auto received = Clock::now();
                 self->Post([self = self.get(), id = std::move(id), sent, received,
                             reply = std::move(reply)]() mutable {
                   self->OnHeartbeatReply(id, sent, received, std::move(reply));
                 });
               });
    }
    MaybeJoin(now);
  }

  void OnHeartbeatReply(const std::string& id, Clock::time_point sent, Clock::time_point received,
                        Result<m2m::Bytes> reply) {
    in_flight_.erase(id);
    auto it = members_.find(id);
    if (!reply) {
      if (it != members_.end() && it->second.state == MemberState::kAlive) {
        log_->debug("heartbeat to {} ({}) failed: {}", id, it->second.addr, reply.error().ToString());
      }
      return;
    }
    auto msg = DecodeMemberMessage(*reply);
    if (!msg) {
      log_->warn("rejected heartbeat reply from {}: {}", id, msg.error().context);
      return;
    }
    (void)Absorb(*msg, received);  // a refusal is logged by AdmitTag
    it = members_.find(msg->sender.id);
    if (it != members_.end() && msg->sender.id == id &&
        it->second.incarnation == msg->sender.incarnation) {
      const int64_t us =
          std::chrono::duration_cast<std::chrono::microseconds>(received - sent).count();
      int64_t& rtt = it->second.rtt_us;
      rtt = rtt < 0 ? us : (3 * rtt + us) / 4;
    }
  }

  void MaybeJoin(Clock::time_point now) {
    if (joined_ || join_in_flight_ || now < next_join_) return;
    join_in_flight_ = true;
    const std::string seed = seeds_[join_index_];
    auto ep = transport_->GetEndpoint(seed);
    ep->Call(MethodId(RpcMethod::kMemberJoin), EncodeMemberMessage(BuildMessage()),
             opts_.rpc_timeout,
             [self = shared_from_this(), seed](Result<m2m::Bytes> reply) mutable {
               self->Post([self = self.get(), seed, reply = std::move(reply)]() mutable {
                 self->OnJoinReply(seed, std::move(reply));
               });
             });
  }

  void OnJoinReply(const std::string& seed, Result<m2m::Bytes> reply) {
    join_in_flight_ = false;
    Result<MemberMessage> msg = reply ? DecodeMemberMessage(*reply) : Err(reply.error());
    if (msg) {
      if (auto s = Absorb(*msg, Clock::now()); !s) msg = Err(s.error());
    }
    if (!msg && msg.error().code == EEXIST) {
      // The seed refused us (or we it) for the node tag: say so at every
      // attempt, not only at debug level; keep retrying (the holder may die).
      log_->error("join through {} refused: {}", seed, msg.error().context);
    }
    if (msg) {
      joined_ = true;
      log_->info("joined the federation through {} ({}): {} members, epoch {}", seed,
                 msg->sender.id, members_.size(), epoch_);
      return;
    }
    last_join_error_ = seed + ": " + msg.error().ToString();
    log_->debug("join through {} failed: {}", seed, msg.error().ToString());
    join_index_ = (join_index_ + 1) % seeds_.size();
    if (join_index_ == 0) {
      // A whole round over the seeds failed: run alone, retry later.
      log_->warn("no seed answered (last: {}); running as a {}-member federation, retrying in {} ms",
                 last_join_error_, members_.size(), join_backoff_.count());
      next_join_ = Clock::now() + join_backoff_;
      join_backoff_ = std::min(join_backoff_ * 2, opts_.join_backoff_max);
    }
  }

  void Publish(bool ring_changed) {
    auto view = std::make_shared<MembershipView>();
    view->self_id = opts_.node_id;
    view->epoch = epoch_;
    view->members = members_;
    if (ring_changed || !ring_) {
      std::vector<std::string> alive;
      for (const auto& [id, m] : members_) {
        if (m.state == MemberState::kAlive) alive.push_back(id);
      }
      ring_ = std::make_shared<const Ring>(std::move(alive), opts_.ring.vnodes);
      ring_dirty_ = false;
    }
    view->ring = ring_;
    std::lock_guard lock(snap_mu_);
    snapshot_ = std::move(view);
  }

  bool Held(const std::string& id) const { return id != opts_.node_id && hold_ && hold_(id); }

  const MembershipOptions opts_;
  m2m::Transport* const transport_;
  HoldFn hold_;          // set before Start
  ContactFn on_held_;    // likewise
  const std::shared_ptr<spdlog::logger> log_;

  // Member-thread state (no lock: only the member thread touches it, and the
  // constructor before the thread starts).
  std::map<std::string, MemberInfo> members_;
  uint64_t epoch_ = 0;
  bool ring_dirty_ = false;
  std::shared_ptr<const Ring> ring_;
  std::set<std::string> in_flight_;  // members with a heartbeat outstanding
  std::set<std::string> forgotten_;  // ignored from now on (Forget)
  // (id, incarnation) of members refused for their node tag, logged once.
  std::set<std::pair<std::string, uint64_t>> tag_logged_;
  std::vector<std::string> seeds_;
  bool joined_ = false;
  bool join_in_flight_ = false;
  size_t join_index_ = 0;
  Clock::time_point next_join_{};
  Millis join_backoff_{200};
  std::string last_join_error_;

  // Task queue. Lock order: mu_ and snap_mu_ are leaves (never nested).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // GUARDED_BY(mu_)
  bool started_ = false;    // GUARDED_BY(mu_)
  bool stopped_ = false;    // GUARDED_BY(mu_)
  std::thread thread_;      // GUARDED_BY(mu_)

  mutable std::mutex snap_mu_;
  std::shared_ptr<const MembershipView> snapshot_;  // GUARDED_BY(snap_mu_)
};

Membership::Membership(MembershipOptions options, m2m::Transport* transport)
    : incarnation_(NewIncarnation()),
      core_(std::make_shared<Core>(std::move(options), transport, incarnation_)) {}

Membership::~Membership() { Stop(); }

void Membership::RegisterHandlers() { core_->RegisterHandlers(); }

void Membership::SetDeadHold(HoldFn hold, ContactFn on_held) {
  core_->SetDeadHold(std::move(hold), std::move(on_held));
}
void Membership::Fence(const std::string& id) { core_->Fence(id); }
void Membership::Forget(const std::string& id) { core_->Forget(id); }
void Membership::Start() { core_->Start(); }
void Membership::Stop() { core_->Stop(); }

std::shared_ptr<const MembershipView> Membership::Snapshot() const { return core_->Snapshot(); }

uint16_t Membership::TagOf(const std::string& node) const {
  auto snap = core_->Snapshot();
  auto it = snap->members.find(node);
  return it == snap->members.end() ? 0 : it->second.tag;
}

}  // namespace fedfs::daemon
