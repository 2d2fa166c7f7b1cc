// FsCallbacks (files/remote_node_fs.h): the client side of kFsAttrChanged,
// one per transport.
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "common/executor.h"
#include "common/logging.h"
#include "common/rpc_methods.h"
#include "files/fs_wire.h"
#include "files/remote_node_fs.h"

namespace fedfs::ns {

namespace fb = fswire::fb;

struct FsCallbacks::State : std::enable_shared_from_this<State> {
  OnChanged on_changed;
  OnLost on_lost;
  OnPinned on_pinned;
  ReleasePinned release_pinned;
  Executor* runner = nullptr;
  std::mutex mu;
  std::unordered_map<uint64_t, std::string> nodes;  // session -> node, guarded by mu
  std::atomic<uint64_t> received{0};
  std::atomic<uint64_t> refused{0};

  static m2m::Bytes EmptyReply() {
    flatbuffers::FlatBufferBuilder b(32);
    fb::FsReplyBuilder rb(b);
    rb.add_version(fswire::kVersion);
    b.Finish(rb.Finish());
    return fswire::Finish(b);
  }

  void OnCall(const m2m::IncomingCall& call, m2m::Responder r) {
    const auto* a = fswire::Verify<fb::FsAttrChanged>(call.payload);
    const char* bad = nullptr;
    if (a == nullptr) {
      bad = "malformed FsAttrChanged";
    } else if (a->version() != fswire::kVersion) {
      bad = "unsupported fs wire version";
    } else if (a->handles() != nullptr && a->handles()->size() > (1u << 20)) {
      bad = "too many handles in FsAttrChanged";
    } else if ((a->pinned_watches() == nullptr) != (a->pinned_handles() == nullptr) ||
               (a->pinned_watches() != nullptr &&
                (a->pinned_watches()->size() != a->pinned_handles()->size() ||
                 a->pinned_watches()->size() > (1u << 20)))) {
      bad = "pinned watches and handles do not pair up in FsAttrChanged";
    }
    if (bad != nullptr) {
      refused.fetch_add(1, std::memory_order_relaxed);
      Logger("fs")->warn("refused callback from {} (conn {}): {}", call.peer.remote_addr,
                         call.peer.conn_id, bad);
      r.Fail(Error{EPROTO, bad});
      return;
    }
    std::unique_lock lock(mu);  // held while posting: the runner outlives nodes
    std::string node;
    if (auto it = nodes.find(a->session()); it != nodes.end()) node = it->second;
    if (node.empty() || a->handles() == nullptr) {
      lock.unlock();
      r.Reply(EmptyReply());
      return;
    }
    received.fetch_add(1, std::memory_order_relaxed);
    const DataRange data{a->data_offset(), a->data_length()};
    const bool ended = a->ended();
    Pinned pinned = fswire::PinnedOf(*a);
    OnPinned pin = on_pinned;
    ReleasePinned release = release_pinned;
    if (runner == nullptr) {
      lock.unlock();
      std::vector<Handle> unused;
      if (!pinned.empty() && pin) unused = pin(node, pinned);
      on_changed(node, fswire::HandlesOf(*a), data, ended);
      r.Reply(EmptyReply());
      if (!unused.empty() && release) release(node, unused);
      return;
    }
    // Answered after on_changed: a task dropped at shutdown destroys the
    // responder, which fails the call (the file's node then tells this
    // node nothing more, as for a callback that timed out).
    runner->Post([self = shared_from_this(), node = std::move(node),
                  handles = fswire::HandlesOf(*a), data, ended, pinned = std::move(pinned),
                  pin = std::move(pin), release = std::move(release), r = std::move(r)]() mutable {
      std::vector<Handle> unused;
      if (!pinned.empty() && pin) unused = pin(node, pinned);
      self->on_changed(node, handles, data, ended);
      r.Reply(EmptyReply());
      if (!unused.empty() && release) release(node, unused);
    });
  }
};

FsCallbacks::FsCallbacks(m2m::Transport* transport, OnChanged on_changed, Executor* runner)
    : state_(std::make_shared<State>()) {
  state_->on_changed = std::move(on_changed);
  state_->runner = runner;
  // The handler holds the state alive for as long as the transport keeps it.
  transport->Handle(MethodId(RpcMethod::kFsAttrChanged),
                    [state = state_](m2m::IncomingCall c, m2m::Responder r) {
                      state->OnCall(c, std::move(r));
                    });
}

FsCallbacks::~FsCallbacks() {
  std::lock_guard lock(state_->mu);
  state_->nodes.clear();
  state_->runner = nullptr;  // nothing is posted to it any more
}

void FsCallbacks::Add(uint64_t session, const std::string& node) {
  std::lock_guard lock(state_->mu);
  state_->nodes[session] = node;
}

void FsCallbacks::Remove(uint64_t session) {
  std::lock_guard lock(state_->mu);
  state_->nodes.erase(session);
}

void FsCallbacks::SetOnLost(OnLost on_lost) {
  std::lock_guard lock(state_->mu);
  state_->on_lost = std::move(on_lost);
}

void FsCallbacks::SetOnPinned(OnPinned on_pinned, ReleasePinned release) {
  std::lock_guard lock(state_->mu);
  state_->on_pinned = std::move(on_pinned);
  state_->release_pinned = std::move(release);
}

void FsCallbacks::Lost(const std::string& node, bool untold) {
  std::unique_lock lock(state_->mu);  // held while posting: the runner outlives nodes
  if (!state_->on_lost) return;
  if (state_->runner == nullptr) {
    OnLost f = state_->on_lost;
    lock.unlock();
    f(node, untold);
    return;
  }
  state_->runner->Post([self = state_, node, untold] { self->on_lost(node, untold); });
}

uint64_t FsCallbacks::received() const { return state_->received.load(); }
uint64_t FsCallbacks::refused() const { return state_->refused.load(); }

}  // namespace fedfs::ns
