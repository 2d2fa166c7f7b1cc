// PendingService (dirops/pending_service.h).
#include "dirops/pending_service.h"

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "common/rpc_methods.h"
#include "common/thread_name.h"
#include "common/wait.h"
#include "dirops/kv_keys.h"
#include "dirops/pending_apply.h"

namespace fedfs::ns {

namespace {

std::shared_ptr<spdlog::logger> Log() { return Logger("dirops"); }

m2m::Bytes ToWire(const std::string& s) {
  return m2m::ToBytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

// The payload as an 8-aligned string (the decoders read scalars in place).
std::string FromWire(const m2m::Bytes& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace

PendingService::PendingService(std::string self, Kv* kv, m2m::Transport* transport, ViewFn view,
                               NodeFs* local, Executor* blocking, PendingServiceOptions options,
                               PendingHooks hooks)
    : self_(std::move(self)),
      transport_(transport),
      view_(std::move(view)),
      local_(local),
      blocking_(blocking),
      options_(options),
      hooks_(std::move(hooks)),
      store_(kv),
      kv_(kv) {}

PendingService::~PendingService() { Stop(); }

Status PendingService::Load() {
  if (auto s = store_.Load(); !s) return s;
  auto rows = kv_->Scan(kvkeys::kForgottenPrefix);
  if (!rows) return Err(rows.error());
  for (const auto& [key, value] : *rows) {
    const std::string node = key.substr(kvkeys::kForgottenPrefix.size());
    {
      std::lock_guard lock(mu_);
      forgotten_.insert(node);
    }
    if (hooks_.forget) hooks_.forget(node);
  }
  const auto fenced = store_.Fenced();
  if (!fenced.empty()) {
    std::string names;
    for (const auto& n : fenced) names += (names.empty() ? "" : ", ") + n;
    Log()->warn("holding records of directory operations for member(s) {}: held dead until "
                "they apply them",
                names);
  }
  return Ok();
}

void PendingService::RegisterHandlers() {
  using Fn = std::function<void(PendingService*, m2m::IncomingCall, m2m::Responder)>;
  auto on = [this](RpcMethod m, Fn fn) {
    transport_->Handle(MethodId(m), [this, fn](m2m::IncomingCall call, m2m::Responder r) {
      // Kv writes and file system work: off the transport's context.
      blocking_->Post([this, fn, call = std::move(call), r = std::move(r)]() mutable {
        std::shared_lock serving(gate_);
        if (closed_) {
          r.Fail(Error{ESHUTDOWN, "the pending records' service is stopping"});
          return;
        }
        fn(this, std::move(call), std::move(r));
      });
    });
  };
  on(RpcMethod::kNsPendingPut, &PendingService::HandlePut);
  on(RpcMethod::kNsPendingGet, &PendingService::HandleGet);
  on(RpcMethod::kNsPendingDone, [](PendingService* p, m2m::IncomingCall c, m2m::Responder r) {
    p->HandleDone(std::move(c), std::move(r), /*forget=*/false);
  });
  on(RpcMethod::kNsPendingForget, [](PendingService* p, m2m::IncomingCall c, m2m::Responder r) {
    p->HandleDone(std::move(c), std::move(r), /*forget=*/true);
  });
  transport_->Handle(MethodId(RpcMethod::kNsPendingNotify),
                     [this](m2m::IncomingCall, m2m::Responder r) {
                       {
                         std::lock_guard lock(mu_);
                         apply_asked_ = true;
                       }
                       cv_.notify_all();
                       r.Reply({});
                     });
}

void PendingService::Start() {
  {
    std::lock_guard lock(mu_);
    if (thread_.joinable()) return;
    stopping_ = false;
    // Records this node coordinated are put on every other node again for
    // a while (a crash may have come before the copies; the view fills as
    // membership hears from the others).
    own_until_ = std::chrono::steady_clock::now() + kOwnResend;
  }
  thread_ = std::thread([this] { Loop(); });
  NameThread(thread_, "pending");
}

void PendingService::Stop() {
  {
    std::unique_lock closing(gate_);  // waits for the requests being served
    closed_ = true;
  }
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> PendingService::LiveOthers() const {
  std::vector<std::string> out;
  auto view = view_();
  if (!view) return out;
  for (const auto& [n, addr] : view->live) {
    if (n != self_) out.push_back(n);
  }
  return out;
}

std::vector<std::string> PendingService::AllOthers() const {
  std::vector<std::string> out = LiveOthers();
  auto view = view_();
  if (!view) return out;
  for (const auto& [n, addr] : view->dead) {
    if (n != self_) out.push_back(n);
  }
  return out;
}

std::map<std::string, Error> PendingService::CallAll(const std::vector<std::string>& nodes,
                                                      uint16_t method, const std::string& payload,
                                                      std::map<std::string, m2m::Bytes>* replies) {
  std::map<std::string, Error> errors;
  auto view = view_();
  std::vector<std::pair<std::string, std::string>> targets;  // (node, address)
  for (const auto& n : nodes) {
    std::string addr;
    if (view) {
      if (auto it = view->live.find(n); it != view->live.end()) addr = it->second;
      if (auto it = view->dead.find(n); it != view->dead.end()) addr = it->second;
    }
    if (addr.empty()) {
      errors[n] = Error{EHOSTDOWN, "node " + n + " is not a member"};
      continue;
    }
    targets.emplace_back(n, addr);
  }
  if (targets.empty()) return errors;
  // In parallel; a wait that suspends a fiber in the simulator (common/wait.h).
  const m2m::Bytes body = ToWire(payload);
  const auto results = WaitForAll<Result<m2m::Bytes>>(
      targets.size(), [&](size_t i, m2m::Callback<m2m::Bytes> done) {
        transport_->GetEndpoint(targets[i].second)
            ->Call(method, body, options_.rpc_timeout, std::move(done));
      });
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!results[i]) {
      errors[targets[i].first] = results[i].error();
    } else if (replies != nullptr) {
      (*replies)[targets[i].first] = *results[i];
    }
  }
  return errors;
}

void PendingService::Replicate(const std::vector<PendingOp>& ops) {
  if (ops.empty()) return;
  std::vector<std::string> targets;
  for (const auto& n : LiveOthers()) targets.push_back(n);
  const auto errors = CallAll(targets, MethodId(RpcMethod::kNsPendingPut), EncodePendingList(ops));
  std::lock_guard lock(mu_);
  for (const auto& n : targets) {
    if (!errors.contains(n)) {
      stats_.replicated += ops.size();
      continue;
    }
    Log()->warn("records of op {} not copied to {} yet: {}", ops.front().op_id, n,
                errors.at(n).ToString());
    for (const auto& op : ops) unreplicated_[n].insert({op.node, op.seq});
  }
}

void PendingService::RetryCopies() {
  std::map<std::string, std::set<std::pair<std::string, uint64_t>>> todo;
  {
    std::lock_guard lock(mu_);
    todo = unreplicated_;
  }
  const auto live = LiveOthers();
  for (const auto& [target, keys] : todo) {
    if (std::find(live.begin(), live.end(), target) == live.end()) continue;
    std::vector<PendingOp> ops;
    for (const auto& op : store_.For("")) {
      if (keys.contains({op.node, op.seq})) ops.push_back(op);
    }
    bool ok = true;
    if (!ops.empty()) {
      ok = CallAll({target}, MethodId(RpcMethod::kNsPendingPut), EncodePendingList(ops)).empty();
    }
    if (!ok) continue;
    std::lock_guard lock(mu_);
    stats_.replicated += ops.size();
    auto it = unreplicated_.find(target);
    if (it == unreplicated_.end()) continue;
    for (const auto& k : keys) it->second.erase(k);
    if (it->second.empty()) unreplicated_.erase(it);
  }
}

void PendingService::PutOwnAgain() {
  std::vector<PendingOp> ops;
  for (auto& op : store_.For("")) {
    if (op.coordinator == self_) ops.push_back(std::move(op));
  }
  if (ops.empty()) return;
  std::vector<std::string> targets;
  {
    std::lock_guard lock(mu_);
    for (const auto& n : LiveOthers()) {
      if (!own_acked_.contains(n)) targets.push_back(n);
    }
  }
  if (targets.empty()) return;
  const auto errors = CallAll(targets, MethodId(RpcMethod::kNsPendingPut), EncodePendingList(ops));
  std::lock_guard lock(mu_);
  for (const auto& n : targets) {
    if (!errors.contains(n)) own_acked_.insert(n);
  }
}

void PendingService::HandlePut(m2m::IncomingCall call, m2m::Responder r) {
  auto ops = DecodePendingList(FromWire(call.payload));
  if (!ops) {
    Log()->warn("refused pending records from {}: {}", call.peer.remote_addr,
                ops.error().ToString());
    r.Fail(ops.error());
    return;
  }
  // This node applies records of its own only when it asks for them.
  std::set<std::string> nodes;
  std::vector<PendingOp> kept;
  for (auto& op : *ops) {
    if (op.node == self_) continue;
    nodes.insert(op.node);
    kept.push_back(std::move(op));
  }
  if (auto s = store_.Put(kept); !s) {
    r.Fail(s.error());
    return;
  }
  {
    std::lock_guard lock(mu_);
    stats_.put_received += kept.size();
  }
  for (const auto& n : nodes) {
    if (hooks_.fence) hooks_.fence(n);
  }
  r.Reply({});
}

void PendingService::HandleGet(m2m::IncomingCall call, m2m::Responder r) {
  auto ask = DecodePendingAsk(FromWire(call.payload));
  if (!ask) {
    r.Fail(ask.error());
    return;
  }
  r.Reply(ToWire(EncodePendingList(store_.For(ask->first))));
}

void PendingService::HandleDone(m2m::IncomingCall call, m2m::Responder r, bool forget) {
  auto ask = DecodePendingAsk(FromWire(call.payload));
  if (!ask) {
    r.Fail(ask.error());
    return;
  }
  const auto& [node, seq] = *ask;
  if (forget) {
    if (node == self_) {
      r.Fail(Error{EINVAL, "this node cannot be forgotten by its own order"});
      return;
    }
    auto dropped = ForgetHere(node);
    if (!dropped) {
      r.Fail(dropped.error());
      return;
    }
    Log()->warn("member {} forgotten (told by {}): {} pending record(s) dropped", node,
                call.peer.remote_addr, *dropped);
    r.Reply({});
    return;
  }
  if (auto s = store_.Erase(node, seq); !s) {
    r.Fail(s.error());
    return;
  }
  if (!store_.Holds(node)) {
    Log()->info("member {} applied its pending directory operations: no longer held dead", node);
  }
  r.Reply({});
}

void PendingService::OnHeldContact(const std::string& node) {
  if (!store_.Holds(node)) return;
  auto view = view_();
  std::string addr;
  if (view) {
    if (auto it = view->dead.find(node); it != view->dead.end()) addr = it->second;
    if (auto it = view->live.find(node); it != view->live.end()) addr = it->second;
  }
  if (addr.empty()) return;
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    last_contact_[node] = now;
    auto& last = last_notified_[node];
    if (now - last < options_.notify_gap) return;
    last = now;
    ++stats_.notified;
  }
  transport_->GetEndpoint(addr)->Call(MethodId(RpcMethod::kNsPendingNotify), {},
                                      options_.rpc_timeout, [node](const Result<m2m::Bytes>& reply) {
                                        if (!reply) {
                                          Log()->debug("telling {} of its pending records: {}",
                                                       node, reply.error().ToString());
                                        }
                                      });
}

bool PendingService::Returning(const std::string& node) const {
  if (!store_.Holds(node)) return false;
  std::lock_guard lock(mu_);
  auto it = last_contact_.find(node);
  return it != last_contact_.end() &&
         std::chrono::steady_clock::now() - it->second < std::chrono::seconds(2);
}

Status PendingService::ApplyOwn() {
  std::lock_guard applying(apply_mu_);
  std::map<std::string, m2m::Bytes> replies;
  // Every member, those this node holds dead too: after a partition each
  // side may hold records for the other (and hold it dead); asking only the
  // live would leave both waiting.
  const auto nodes = AllOthers();
  const auto errors =
      CallAll(nodes, MethodId(RpcMethod::kNsPendingGet), EncodePendingAsk(self_, 0), &replies);
  for (const auto& [n, e] : errors) {
    Log()->debug("asking {} for this node's pending records: {}", n, e.ToString());
  }
  std::map<uint64_t, PendingOp> ops;  // by seq
  for (const auto& [n, bytes] : replies) {
    auto list = DecodePendingList(FromWire(bytes));
    if (!list) {
      Log()->warn("pending records from {}: {}", n, list.error().ToString());
      continue;
    }
    for (auto& op : *list) {
      if (op.node == self_) ops.emplace(op.seq, std::move(op));
    }
  }
  if (ops.empty()) return Ok();
  // What this node applied before is not applied again: a node that was
  // away while this one applied still holds those records and tells it.
  uint64_t applied_upto = 0;
  if (auto v = kv_->Get(kvkeys::PendingAppliedKey()); v && v->size() == sizeof applied_upto) {
    std::memcpy(&applied_upto, v->data(), sizeof applied_upto);
  }
  const size_t fresh = static_cast<size_t>(
      std::count_if(ops.begin(), ops.end(), [&](const auto& e) { return e.first > applied_upto; }));
  if (fresh > 0) {
    Log()->warn("applying {} directory operation(s) made while this node was dead", fresh);
  }
  uint64_t upto = 0;
  Status result = Ok();
  for (const auto& [seq, op] : ops) {
    if (seq <= applied_upto) {
      upto = seq;
      continue;
    }
    Status s = ApplyPendingOp(*local_, op);
    if (s) {
      std::string v(sizeof seq, '\0');
      std::memcpy(v.data(), &seq, sizeof seq);
      s = kv_->Put(kvkeys::PendingAppliedKey(), v, /*sync=*/true);
    }
    if (!s) {
      Log()->error("{}: cannot apply: {} (tried again when told)", op.Describe(),
                   s.error().ToString());
      std::lock_guard lock(mu_);
      ++stats_.apply_failures;
      result = s;
      break;
    }
    upto = seq;
    std::lock_guard lock(mu_);
    ++stats_.applied;
  }
  if (upto == 0) return result;
  if (fresh > 0 && hooks_.applied) hooks_.applied();
  const auto done_errors =
      CallAll(nodes, MethodId(RpcMethod::kNsPendingDone), EncodePendingAsk(self_, upto));
  for (const auto& [n, e] : done_errors) {
    Log()->debug("telling {} that this node applied its records: {} (it tells again)", n,
                 e.ToString());
  }
  return result;
}

Result<uint64_t> PendingService::ForgetHere(const std::string& node) {
  const uint64_t held = store_.For(node).size();
  if (auto s = store_.Erase(node, UINT64_MAX); !s) return Err(s.error());
  if (auto s = kv_->Put(kvkeys::ForgottenKey(node), "", /*sync=*/true); !s) return Err(s.error());
  {
    std::lock_guard lock(mu_);
    forgotten_.insert(node);
  }
  if (hooks_.forget) hooks_.forget(node);
  return held;
}

Result<uint64_t> PendingService::Forget(const std::string& node) {
  if (node == self_) return Err(EINVAL, "a node cannot forget itself");
  auto view = view_();
  if (view && view->IsAlive(node)) {
    return Err(EBUSY, "member " + node + " is alive: stop it first");
  }
  auto dropped = ForgetHere(node);
  if (!dropped) return dropped;
  std::vector<std::string> others;
  for (const auto& n : LiveOthers()) {
    if (n != node) others.push_back(n);
  }
  const auto errors =
      CallAll(others, MethodId(RpcMethod::kNsPendingForget), EncodePendingAsk(node, 0));
  if (!errors.empty()) {
    std::string which;
    for (const auto& [n, e] : errors) {
      which += (which.empty() ? "" : ", ") + n + " (" + e.ToString() + ")";
    }
    return Err(EAGAIN, "forgotten here, but not told: " + which + " (forget it again)");
  }
  Log()->warn("member {} forgotten: {} pending record(s) dropped here, {} node(s) told", node,
              *dropped, others.size());
  return dropped;
}

std::set<std::string> PendingService::Forgotten() const {
  std::lock_guard lock(mu_);
  return forgotten_;
}

PendingService::Stats PendingService::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  for (const auto& [n, keys] : unreplicated_) s.unreplicated += keys.size();
  return s;
}

void PendingService::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.retry, [&] { return stopping_ || apply_asked_; });
    if (stopping_) break;
    const bool apply = apply_asked_;
    apply_asked_ = false;
    const bool copies = !unreplicated_.empty();
    const bool own = std::chrono::steady_clock::now() < own_until_;
    lock.unlock();
    if (apply) (void)ApplyOwn();
    if (copies) RetryCopies();
    if (own) PutOwnAgain();
    lock.lock();
  }
}

}  // namespace fedfs::ns
