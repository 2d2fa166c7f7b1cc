// Node's insides (node.h), shared by node.cc (building and wiring) and
// autonomy.cc (the watcher's reports). Not a contract: include node.h.
#pragma once

#include <atomic>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "common/timers.h"
#include "dirops/kv.h"
#include "coopcache/peer_fetch.h"
#include "files/file_service.h"
#include "files/remote_node_fs.h"
#include "node/node.h"
#include "node/vd_client.h"

namespace fedfs::node {

// What callbacks reach that may run before the mount exists or after Stop:
// the kernel's caches and the facade, both null unless the kernel caches
// (the facade is also wired when the node has a file-data cache).
struct KernelHooks {
  std::atomic<ns::KernelCache*> kernel{nullptr};
  std::shared_mutex vfs_mu;  // held (shared) while `vfs` is used: unwiring waits
  ns::VfsImpl* vfs = nullptr;

  // Drops the names the kernel caches for this node's mount, once one is wired.
  void DropNames() {
    if (ns::KernelCache* k = kernel.load(std::memory_order_acquire)) k->InvalidateNames();
  }
  // The kernel's cached attributes of global path `path` are stale.
  void DropAttrs(const std::string& path) {
    std::shared_lock lock(vfs_mu);
    if (vfs != nullptr) vfs->InvalidateAttrsOf(path);
  }
  // Node `node` told of changes of the files it holds open for us.
  void RemoteAttrsChanged(const std::string& node, const std::vector<ns::Handle>& handles,
                          ns::DataRange data, bool ended) {
    std::shared_lock lock(vfs_mu);
    if (vfs != nullptr) vfs->RemoteAttrsChanged(node, handles, data, ended);
  }
  // Node `node` opened files this node watches before their names went:
  // the handles not taken (no mount: released with the session).
  std::vector<ns::Handle> RemotePinned(const std::string& node,
                                       const std::vector<std::pair<ns::Handle, ns::Handle>>& pinned) {
    std::shared_lock lock(vfs_mu);
    if (vfs != nullptr) return vfs->RemotePinned(node, pinned);
    return {};
  }
  void ReleaseUnadopted(const std::string& node, const std::vector<ns::Handle>& handles) {
    std::shared_lock lock(vfs_mu);
    if (vfs != nullptr) vfs->ReleaseUnadopted(node, handles);
  }
  // What this node caches of node `node`'s files may be stale.
  void RemoteSessionLost(const std::string& node, bool untold) {
    std::shared_lock lock(vfs_mu);
    if (vfs != nullptr) vfs->RemoteSessionLost(node, untold);
  }
  // The facade, or nullptr: waits for the callbacks using the one before.
  void SetVfs(ns::VfsImpl* v) {
    std::unique_lock lock(vfs_mu);
    vfs = v;
  }
};

// The environment's cluster view, with one rule added: when the epoch changes
// (managers move, VDs are rebuilt, sharer records are lost) the kernel's
// names are dropped before the new view is used. Current() from any thread;
// it takes no lock.
class EpochView final : public ns::ClusterViewSource {
 public:
  EpochView(const ns::ClusterViewSource* inner, std::shared_ptr<KernelHooks> hooks)
      : inner_(inner), hooks_(std::move(hooks)) {}
  std::shared_ptr<const ns::ClusterView> Current() const override;

 private:
  static constexpr uint64_t kNoEpoch = ~uint64_t{0};
  const ns::ClusterViewSource* inner_;
  std::shared_ptr<KernelHooks> hooks_;
  mutable std::atomic<uint64_t> last_epoch_{kNoEpoch};  // of the last view handed out
};

struct Node::Impl {
  NodeOptions options;
  NodeEnv env;
  std::shared_ptr<KernelHooks> hooks = std::make_shared<KernelHooks>();
  std::unique_ptr<EpochView> cluster;
  std::unique_ptr<ns::FileService> file_service;
  std::unique_ptr<ns::FsCallbacks> fs_callbacks;
  std::unique_ptr<Timers> timers;  // late releases; null without release_delay
  std::unique_ptr<ns::VdService> vd_service;
  std::unique_ptr<VdServiceClient> vd_client;
  std::unique_ptr<coop::BlockCache> cache;  // before vfs, which uses it
  std::unique_ptr<coop::PeerFetch> peers;   // its memory shared (null: not)
  std::unique_ptr<coop::Hints> hints;       // where forwarded blocks went (null: off)
  std::unique_ptr<coop::MemoryGuard> memory_guard;  // the cache under pressure
  std::unique_ptr<ns::VfsImpl> vfs;
  // N-chance forwarding (null: off); stopped before vfs goes.
  std::unique_ptr<coop::ForwardPort> forward_port;
  std::unique_ptr<coop::Forwarder> forwarder;
  std::unique_ptr<ns::PendingService> pending;  // before dir_ops, which uses it
  std::unique_ptr<ns::DirOps> dir_ops;
  std::unique_ptr<ns::DirOpsClient> dir_ops_client;
  std::unique_ptr<ns::Migration> migration;
  // Moves files read or written mostly through another node (null: off).
  // Its meter is fed by the file service and the mount from construction;
  // it moves nothing before Start (Node::StartAccessTrigger).
  std::unique_ptr<ns::AccessTrigger> access;
  // What the VD service's listings consult (set once the object exists).
  std::atomic<ns::Migration*> annotate{nullptr};
  // The facade, for the unlinks this node makes for others (UnlinkFor);
  // null before it exists and from StopClients on, which waits for them.
  std::shared_mutex unlink_mu;
  ns::VfsImpl* unlink_vfs = nullptr;
  // As VdServiceOptions::unlink_at, run on env.unlinks.
  Result<std::optional<struct stat>> UnlinkFor(const ns::Cred& c, const std::string& holder,
                                               const std::string& path,
                                               const std::string& origin);
  // As VdServiceOptions::rename_at, run on env.unlinks.
  Status RenameFor(const ns::Cred& c, const std::string& holder, const std::string& from,
                   const std::string& to, unsigned flags, const std::string& origin);
  // A change made at the file's node `holder` for node `origin` (UnlinkFor,
  // RenameFor): `remote(fs)` at another node (FsRequest.for_node);
  // `local(fs, cred)` here, served as the file service serves another
  // node's change (the caller squashed, that node's sessions not told of
  // it: its kernel saw it), or through any other NodeFs.
  template <class Local, class Remote>
  auto AtHolder(const ns::Cred& c, const std::string& holder, const std::string& origin,
                Local local, Remote remote) -> decltype(local(nullptr, c)) {
    std::shared_lock lock(unlink_mu);
    if (unlink_vfs == nullptr) return Err(ESHUTDOWN, "the node is stopping");
    ns::NodeFs* fs = unlink_vfs->NodeFsFor(holder);
    if (fs == nullptr) return Err(EHOSTDOWN, "node " + holder + " is not alive");
    if (holder == options.node_id) {
      ns::FileService::ServingFor quiet(origin);
      return local(fs, origin == options.node_id ? c : ns::SquashCred(options.files, c));
    }
    if (auto* r = dynamic_cast<ns::RemoteNodeFs*>(fs)) return remote(r);
    return local(fs, c);
  }
};

}  // namespace fedfs::node
