// FsCallbacks (files/remote_node_fs.h): the client side of kFsAttrChanged,
// one per transport.
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "common/logging.h"
#include "common/rpc_methods.h"
#include "files/fs_wire.h"
#include "files/remote_node_fs.h"

namespace fedfs::ns {

namespace fb = fswire::fb;

struct FsCallbacks::State {
  OnChanged on_changed;
  std::mutex mu;
  std::unordered_map<uint64_t, std::string> nodes;  // session -> node, guarded by mu
  std::atomic<uint64_t> received{0};
  std::atomic<uint64_t> refused{0};

  void OnCall(const m2m::IncomingCall& call, m2m::Responder& r) {
    const auto* a = fswire::Verify<fb::FsAttrChanged>(call.payload);
    const char* bad = nullptr;
    if (a == nullptr) {
      bad = "malformed FsAttrChanged";
    } else if (a->version() != fswire::kVersion) {
      bad = "unsupported fs wire version";
    } else if (a->handles() != nullptr && a->handles()->size() > (1u << 20)) {
      bad = "too many handles in FsAttrChanged";
    }
    if (bad != nullptr) {
      refused.fetch_add(1, std::memory_order_relaxed);
      Logger("fs")->warn("refused callback from {} (conn {}): {}", call.peer.remote_addr,
                         call.peer.conn_id, bad);
      r.Fail(Error{EPROTO, bad});
      return;
    }
    std::string node;
    {
      std::lock_guard lock(mu);
      if (auto it = nodes.find(a->session()); it != nodes.end()) node = it->second;
    }
    if (!node.empty() && a->handles() != nullptr) {
      received.fetch_add(1, std::memory_order_relaxed);
      on_changed(node, fswire::HandlesOf(*a));
    }
    flatbuffers::FlatBufferBuilder b(32);
    fb::FsReplyBuilder rb(b);
    rb.add_version(fswire::kVersion);
    b.Finish(rb.Finish());
    r.Reply(fswire::Finish(b));
  }
};

FsCallbacks::FsCallbacks(m2m::Transport* transport, OnChanged on_changed)
    : state_(std::make_shared<State>()) {
  state_->on_changed = std::move(on_changed);
  // The handler holds the state alive for as long as the transport keeps it.
  transport->Handle(MethodId(RpcMethod::kFsAttrChanged),
                    [state = state_](m2m::IncomingCall c, m2m::Responder r) { state->OnCall(c, r); });
}

FsCallbacks::~FsCallbacks() {
  std::lock_guard lock(state_->mu);
  state_->nodes.clear();
}

void FsCallbacks::Add(uint64_t session, const std::string& node) {
  std::lock_guard lock(state_->mu);
  state_->nodes[session] = node;
}

void FsCallbacks::Remove(uint64_t session) {
  std::lock_guard lock(state_->mu);
  state_->nodes.erase(session);
}

uint64_t FsCallbacks::received() const { return state_->received.load(); }
uint64_t FsCallbacks::refused() const { return state_->refused.load(); }

}  // namespace fedfs::ns
