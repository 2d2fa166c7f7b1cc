#include "common/logging.h"
#include "node/node.h"

#include <map>

#include "node/node_impl.h"

namespace fedfs::node {

namespace {

bool UsesMostFree(const ns::PlacementOptions& p) {
  if (p.policy == "most-free") return true;
  for (const auto& r : p.rules) {
    if (r.policy == "most-free") return true;
  }
  return false;
}

// The facade's view of the journaled multi-node directory operations.
class DirOpsAdapter final : public ns::DirOpsClient {
 public:
  explicit DirOpsAdapter(ns::DirOps* d) : d_(d) {}
  Status RenameDir(const ns::Cred& c, const std::string& from, const std::string& to,
                   unsigned flags, std::vector<std::string> holders) override {
    return d_->RenameDir(c, from, to, flags, std::move(holders));
  }
  Status RemoveDir(const ns::Cred& c, const std::string& path,
                   std::vector<std::string> holders) override {
    return d_->RemoveDir(c, path, std::move(holders));
  }
  Status ReplaceFile(const ns::Cred& c, const std::string& from, const std::string& from_node,
                     const std::string& to, const std::string& replaced,
                     const std::string& to_node) override {
    return d_->ReplaceFile(c, from, from_node, to, replaced, to_node);
  }
  bool RecordsDeadMembers() const override { return d_->RecordsDeadMembers(); }

 private:
  ns::DirOps* d_;
};

// N-chance forwarding's messages (coopcache/forwarder.h), through the
// facade's NodeFs of each node.
class NodeForwardPort final : public coop::ForwardPort {
 public:
  NodeForwardPort(ns::VfsImpl* vfs, ns::FileService* files, std::string self)
      : vfs_(vfs), files_(files), self_(std::move(self)) {}

  Result<std::optional<Target>> Evict(const coop::Forward& f) override {
    if (f.origin.holder == self_) {  // a block of this node's own file: dropped
      files_->ForgetOwnCopy(f.origin.dev, f.origin.ino, f.block, f.index, f.frame, f.tag);
      return std::nullopt;
    }
    ns::NodeFs* fs = vfs_->NodeFsFor(f.origin.holder);
    if (fs == nullptr) return Err(EHOSTDOWN, "node " + f.origin.holder + " unknown");
    auto r = fs->CoopEvict(Block(f));
    if (!r) return Err(r.error());
    if (!*r) return std::nullopt;
    return Target{(*r)->node, (*r)->version};
  }
  Result<Stored> Store(const std::string& target, const coop::Forward& f) override {
    ns::NodeFs* fs = vfs_->NodeFsFor(target);
    if (fs == nullptr) return Err(EHOSTDOWN, "node " + target + " unknown");
    ns::NodeFs::CoopBlock b = Block(f);
    b.node = f.origin.holder;
    b.recirc = f.origin.recirc + 1;
    b.bytes = f.bytes;
    auto r = fs->CoopStore(b);
    if (!r) return Err(r.error());
    return ns::PeerCopyOf(*r, f.block);
  }
  Status Moved(const coop::Forward& f, const Target& t, const Stored& at) override {
    ns::NodeFs* fs = vfs_->NodeFsFor(f.origin.holder);
    if (fs == nullptr) return Err(EHOSTDOWN, "node " + f.origin.holder + " unknown");
    ns::NodeFs::CoopBlock b = Block(f);
    b.frame = at.frame;
    b.tag = at.tag;
    b.node = t.node;
    b.version = t.version;
    return fs->CoopMoved(b);
  }

 private:
  static ns::NodeFs::CoopBlock Block(const coop::Forward& f) {
    ns::NodeFs::CoopBlock b;
    b.block = f.block;
    b.dev = f.origin.dev;
    b.ino = f.origin.ino;
    b.index = f.index;
    b.frame = f.frame;
    b.tag = f.tag;
    b.length = static_cast<uint32_t>(f.bytes.size());
    b.recirc = f.origin.recirc;
    return b;
  }
  ns::VfsImpl* const vfs_;
  ns::FileService* const files_;
  const std::string self_;
};

// The node's options of file moves, with the access trigger told of each
// file that arrives here (its cooldown and hysteresis).
ns::MigrationOptions MigrationOptionsOf(const NodeOptions& opt, ns::AccessTrigger* access) {
  ns::MigrationOptions mo = opt.migration;
  if (access != nullptr) {
    mo.arrived = [meter = &access->meter()](const std::string& path, const std::string& from) {
      meter->Arrived(path, from, ns::AccessMeter::Clock::now());
    };
  }
  return mo;
}

}  // namespace

std::shared_ptr<const ns::ClusterView> EpochView::Current() const {
  auto v = inner_->Current();
  uint64_t last = last_epoch_.load(std::memory_order_acquire);
  if (last == v->epoch) return v;  // the common path: no lock, no write
  // One thread wins each change of epoch and drops the names once.
  if (last_epoch_.compare_exchange_strong(last, v->epoch, std::memory_order_acq_rel) &&
      last != kNoEpoch) {
    Logger("vfs")->debug("membership epoch {}: the kernel's names are dropped", v->epoch);
    hooks_->DropNames();
  }
  return v;
}

Node::Node(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Node>> Node::Create(NodeOptions o, NodeEnv env) {
  if (env.transport == nullptr || env.cluster == nullptr || env.local == nullptr ||
      env.kv == nullptr || env.pool == nullptr) {
    return Err(EINVAL, "node " + o.node_id + ": incomplete environment");
  }
  auto impl = std::make_unique<Impl>();
  Impl& d = *impl;
  d.options = std::move(o);
  d.env = std::move(env);
  const NodeOptions& opt = d.options;
  m2m::Transport* tr = d.env.transport;
  d.cluster = std::make_unique<EpochView>(d.env.cluster, d.hooks);

  // The file-data cache.
  if (opt.cache.size_bytes > 0) {
    auto cache = coop::BlockCache::Create(opt.cache);
    if (!cache) return Err(cache.error().code, "coopcache: " + cache.error().context);
    d.cache = std::move(*cache);
    d.memory_guard = std::make_unique<coop::MemoryGuard>(
        d.cache.get(), coop::MemoryGuardOptions{.min_free_bytes = opt.cache_min_free,
                                                 .start_thread = opt.cache_guard});
    // Its memory, readable by the other nodes (docs/coopcache.md): without a
    // listen address no peer could reach it.
    if (!opt.address.empty() && opt.share_cache) {
      auto peers = coop::PeerFetch::Create(d.cache.get(), tr, opt.rpc_timeout);
      if (!peers) {
        Logger("node")->warn("coopcache: blocks are not shared with other nodes: {}",
                             peers.error().ToString());
      } else {
        d.peers = std::move(*peers);
      }
    }
  }

  // The access trigger of file moves: its meter counts from the start.
  Impl* const me = impl.get();
  if (opt.access.enabled && d.env.move != nullptr) {
    d.access = std::make_unique<ns::AccessTrigger>(
        opt.access, opt.node_id, [me](const std::string& path, const std::string& to) -> Status {
          ns::Migration* m = me->migration.get();
          if (m == nullptr) return Err(ESHUTDOWN, "file moves are off");
          auto o = m->Move(path, to, ns::MoveTrigger::kAccess);
          if (!o) return Err(o.error());
          return Ok();
        });
  }

  // The file operations other nodes make here (and their forwarded blocks).
  ns::FileServiceOptions fso = opt.files;
  if (d.peers != nullptr && opt.cache_forward > 0) {
    fso.cache = d.cache.get();
    fso.self_cache = {opt.node_id, opt.address, d.peers->data_region(), d.peers->tags_region()};
  }
  fso.on_change = [hooks = d.hooks](const std::string& path) { hooks->DropAttrs(path); };
  fso.membership_epoch = [view = d.cluster.get()] { return view->Current()->epoch; };
  if (d.access) {
    fso.on_access = [meter = &d.access->meter()](const std::string& path, const std::string& node,
                                                 uint64_t bytes) { meter->Count(path, node, bytes); };
  }
  d.file_service = std::make_unique<ns::FileService>(fso, tr, d.env.local, d.env.pool);
  if (auto s = d.file_service->RegisterHandlers(); !s) {
    return Err(s.error().code, "file service: " + s.error().ToString());
  }
  // This node's side of the holders' callbacks: the kernel drops what it caches.
  d.fs_callbacks = std::make_unique<ns::FsCallbacks>(
      tr,
      [hooks = d.hooks](const std::string& node, const std::vector<ns::Handle>& handles,
                        ns::DataRange data, bool ended) {
        hooks->RemoteAttrsChanged(node, handles, data, ended);
      },
      d.env.callbacks);
  d.fs_callbacks->SetOnLost([hooks = d.hooks](const std::string& node, bool untold) {
    hooks->RemoteSessionLost(node, untold);
  });
  d.fs_callbacks->SetOnPinned(
      [hooks = d.hooks](const std::string& node, const ns::FsCallbacks::Pinned& pinned) {
        return hooks->RemotePinned(node, pinned);
      },
      [hooks = d.hooks](const std::string& node, const std::vector<ns::Handle>& handles) {
        hooks->ReleaseUnadopted(node, handles);
      });

  // VDs, their managers and the directory table.
  ns::VdServiceOptions vdo;
  vdo.rpc_timeout = opt.rpc_timeout;
  vdo.dt_entries = opt.dt_entries;
  vdo.dt_bytes = opt.dt_bytes;
  vdo.lend_after = opt.lend_after;
  vdo.lease_term = opt.lease_term;
  vdo.whole_max_entries = opt.whole_max_entries;
  vdo.add_new = opt.add_new;
  vdo.deltas = opt.deltas;
  vdo.on_local_listing = opt.on_local_listing;
  vdo.annotate_listing = [self = impl.get()](const std::string& path,
                                             std::vector<ns::DirEntry>* entries) {
    if (ns::Migration* m = self->annotate.load(std::memory_order_acquire)) {
      m->Annotate(path, entries);
    }
  };
  if (d.env.unlinks != nullptr) {
    vdo.unlink_at = [self = impl.get()](
                        const ns::Cred& c, const std::string& holder, const std::string& path,
                        const std::string& origin,
                        std::move_only_function<void(Result<std::optional<struct stat>>)> done) {
      self->env.unlinks->Post(
          [self, c, holder, path, origin, done = std::move(done)]() mutable {
            done(self->UnlinkFor(c, holder, path, origin));
          });
    };
    vdo.rename_at = [self = impl.get()](const ns::Cred& c, const std::string& holder,
                                        const std::string& from, const std::string& to,
                                        unsigned flags, const std::string& origin,
                                        std::move_only_function<void(Status)> done) {
      self->env.unlinks->Post(
          [self, c, holder, from, to, flags, origin, done = std::move(done)]() mutable {
            done(self->RenameFor(c, holder, from, to, flags, origin));
          });
    };
    // The manager waits for the file's node, which may wait for its
    // callbacks and cache lease (RemoteNodeFs::ChangeSlack), plus margin.
    vdo.unlink_timeout = 2 * opt.rpc_timeout + opt.files.cache_lease + std::chrono::seconds(2);
  }
  d.vd_service =
      std::make_unique<ns::VdService>(vdo, tr, d.cluster.get(), d.env.local, d.env.pool);
  d.vd_service->RegisterHandlers();
  d.vd_client = std::make_unique<VdServiceClient>(d.vd_service.get(), opt.node_id);

  // The facade.
  ns::VfsDeps deps;
  deps.cluster = d.cluster.get();
  deps.local = d.env.local;
  deps.vds = d.vd_client.get();
  deps.tag_of = d.env.tag_of;
  deps.cache = d.cache.get();
  deps.peers = d.peers.get();
  if (d.peers != nullptr && opt.cache_forward > 0) d.hints = std::make_unique<coop::Hints>();
  deps.hints = d.hints.get();
  ns::RemoteNodeFsOptions::CoopRegions coop;
  if (d.peers != nullptr) {
    coop.block = d.cache->block_size();
    coop.data = d.peers->data_region();
    coop.tags = d.peers->tags_region();
  }
  // Without kernel caches nothing is cached that a callback could drop.
  if (opt.release_delay.count() > 0) d.timers = std::make_unique<Timers>("releases");
  deps.make_remote = [tr, rpc = opt.rpc_timeout, self = opt.node_id, addr = opt.address,
                      callbacks = opt.remote_callbacks ? d.fs_callbacks.get() : nullptr,
                      timers = d.timers.get(), delay = opt.release_delay, coop](
                         const std::string& node, const std::string& peer_addr) {
    ns::RemoteNodeFsOptions ro;
    ro.rpc_timeout = rpc;
    ro.timers = timers;
    ro.release_delay = delay;
    ro.local_node = self;
    ro.local_address = addr;
    ro.callbacks = callbacks;
    ro.coop = coop;
    return std::static_pointer_cast<ns::NodeFs>(
        std::make_shared<ns::RemoteNodeFs>(node, tr->GetEndpoint(peer_addr), tr, ro));
  };
  Impl* self_ptr = impl.get();
  deps.place = [placement = opt.placement, most_free = UsesMostFree(opt.placement), self_ptr](
                   const ns::ClusterView& view, const std::string& path,
                   bool) -> Result<std::string> {
    std::map<std::string, uint64_t> free_bytes;
    if (most_free && self_ptr->vfs) free_bytes = self_ptr->vfs->FreeBytes();
    return ns::ChoosePlacement(placement, view, path, free_bytes);  // EHOSTDOWN fails the create
  };
  ns::VfsOptions vo = opt.vfs;
  if (d.access) {
    vo.on_local_access = [meter = &d.access->meter(), self = opt.node_id](const std::string& path,
                                                                         uint64_t bytes) {
      meter->Count(path, self, bytes);
    };
  }
  d.vfs = std::make_unique<ns::VfsImpl>(vo, std::move(deps));
  // The file-data cache is kept exact by the holders' callbacks whether or
  // not a kernel caches too (SetKernelCache wires the facade for the
  // kernel's sake): without this, a node with no mount -- the simulator's --
  // kept serving blocks that another node had since written.
  if (d.cache != nullptr) d.hooks->SetVfs(d.vfs.get());
  {
    std::unique_lock lock(d.unlink_mu);
    d.unlink_vfs = d.vfs.get();
  }
  if (d.peers != nullptr && opt.cache_forward > 0) {
    d.forward_port =
        std::make_unique<NodeForwardPort>(d.vfs.get(), d.file_service.get(), opt.node_id);
    d.forwarder = std::make_unique<coop::Forwarder>(
        coop::ForwarderOptions{.max_recirc = opt.cache_forward,
                               .hints = d.hints.get(),
                               .runner = opt.cache_forward_on_pool ? d.env.pool : nullptr},
        d.cache->block_size(),
        d.forward_port.get());
    d.cache->SetEvictSink([fw = d.forwarder.get()](const coop::Evicted& e) { fw->OnEvict(e); });
  }

  // The journaled multi-node directory operations.
  {
    ns::VfsImpl* vfs = d.vfs.get();
    ns::VdService* vds = d.vd_service.get();
    const ns::ClusterViewSource* cluster = d.cluster.get();
    d.dir_ops = std::make_unique<ns::DirOps>(
        opt.node_id, d.env.kv, [vfs](const std::string& n) { return vfs->NodeFsFor(n); },
        [cluster] { return cluster->Current(); },
        [vds](const std::string& dir, const ns::VdChange& ch) {
          return ns::UpdateVdSync(*vds, dir, ch);
        },
        opt.dir_ops, opt.dir_ops_hooks);
    // What dead members must apply when they return.
    d.pending = std::make_unique<ns::PendingService>(
        opt.node_id, d.env.kv, tr, [cluster] { return cluster->Current(); }, d.env.local,
        d.env.pool, ns::PendingServiceOptions{.rpc_timeout = opt.rpc_timeout},
        ns::PendingHooks{.fence = opt.fence_member,
                         .applied =
                             [vds, hooks = d.hooks] {
                               // Names and VDs built from this node's old names.
                               hooks->DropNames();
                               if (auto s = ns::DropSubtreeSync(*vds, "/"); !s) {
                                 Logger("node")->warn("dropping VDs after applying: {}",
                                                      s.error().ToString());
                               }
                             },
                         .forget = opt.forget_member});
    if (auto s = d.pending->Load(); !s) {
      return Err(s.error().code, "pending records: " + s.error().ToString());
    }
    d.pending->RegisterHandlers();
    if (opt.record_dead_members) d.dir_ops->SetPending(d.pending.get());
    d.dir_ops_client = std::make_unique<DirOpsAdapter>(d.dir_ops.get());
    d.vfs->SetDirOps(d.dir_ops_client.get());
    // File moves.
    if (d.env.move != nullptr) {
      d.migration = std::make_unique<ns::Migration>(
          opt.node_id, d.env.kv, tr, d.env.local, d.env.move,
          [vfs](const std::string& n) { return vfs->NodeFsFor(n); },
          [cluster] { return cluster->Current(); },
          [vds](const std::string& dir, std::vector<ns::VdChange> changes) {
            return ns::UpdateManyVdSync(*vds, dir, std::move(changes));
          },
          [fs = d.file_service.get(), hooks = d.hooks](dev_t dev, ino_t ino,
                                                       const std::string& path, bool switched) {
            if (switched) {
              hooks->DropNames();
              return;
            }
            fs->AttrsChanged(dev, ino, ns::DataRange{});
            hooks->DropAttrs(path);
          },
          d.env.pool, MigrationOptionsOf(opt, d.access.get()), opt.dir_ops_hooks);
      d.migration->RegisterHandlers();
      d.vfs->SetMover([m = d.migration.get()](const std::string& holder, const std::string& path,
                                              const std::string& to) -> Status {
        auto o = m->MoveAt(holder, path, to, ns::MoveTrigger::kFull);
        if (!o) return Err(o.error());
        return Ok();
      });
      d.annotate.store(d.migration.get(), std::memory_order_release);
    }
  }
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

Node::~Node() {
  StopClients();
  SetKernelCache(nullptr);
  impl_->vd_client.reset();
  impl_->vd_service.reset();
  impl_->file_service.reset();
  impl_->fs_callbacks.reset();
}

Status Node::Recover() {
  impl_->pending->Start();
  return impl_->dir_ops->Recover();
}

void Node::StartAccessTrigger() {
  if (impl_->access) impl_->access->Start();
}

Status Node::RecoverMoves() {
  if (impl_->migration) return impl_->migration->Recover();
  return Ok();
}

Result<std::optional<struct stat>> Node::Impl::UnlinkFor(const ns::Cred& c,
                                                        const std::string& holder,
                                                        const std::string& path,
                                                        const std::string& origin) {
  return AtHolder(
      c, holder, origin,
      [&](ns::NodeFs* fs, const ns::Cred& as) { return fs->UnlinkSeeingParent(as, path); },
      [&](ns::RemoteNodeFs* fs) { return fs->UnlinkFor(c, path, origin); });
}

Status Node::Impl::RenameFor(const ns::Cred& c, const std::string& holder,
                             const std::string& from, const std::string& to, unsigned flags,
                             const std::string& origin) {
  return AtHolder(
      c, holder, origin,
      [&](ns::NodeFs* fs, const ns::Cred& as) { return fs->Rename(as, from, to, flags); },
      [&](ns::RemoteNodeFs* fs) { return fs->RenameFor(c, from, to, flags, origin); });
}

void Node::StopClients() {
  {
    std::unique_lock lock(impl_->unlink_mu);  // waits for the unlinks made for others
    impl_->unlink_vfs = nullptr;
  }
  if (impl_->vfs) impl_->vfs->SetMover(nullptr);
  if (impl_->access) impl_->access->Stop();  // its move in progress completes
  if (impl_->migration) impl_->migration->Stop();  // waits for its moves in progress
  if (impl_->vfs) impl_->vfs->SetDirOps(nullptr);
  impl_->dir_ops_client.reset();
  impl_->dir_ops.reset();
  if (impl_->pending) impl_->pending->Stop();
  impl_->hooks->SetVfs(nullptr);
  if (impl_->forwarder) {
    impl_->cache->SetEvictSink(nullptr);
    impl_->forwarder->Stop();
  }
  impl_->vfs.reset();
  // Waits for a late release being sent; drops the others (the sessions'
  // goodbyes release their handles).
  impl_->timers.reset();
}

ns::VfsImpl& Node::vfs() { return *impl_->vfs; }
ns::VdService& Node::vd_service() { return *impl_->vd_service; }
ns::FileService& Node::file_service() { return *impl_->file_service; }
ns::FsCallbacks& Node::fs_callbacks() { return *impl_->fs_callbacks; }
ns::DirOps& Node::dir_ops() { return *impl_->dir_ops; }
ns::PendingService& Node::pending() { return *impl_->pending; }
ns::Migration* Node::migration() { return impl_->migration.get(); }  // stopped after StopClients
coop::BlockCache* Node::cache() { return impl_->cache.get(); }
coop::PeerFetch* Node::peers() { return impl_->peers.get(); }
coop::Forwarder* Node::forwarder() { return impl_->forwarder.get(); }
coop::Hints* Node::hints() { return impl_->hints.get(); }
coop::MemoryGuard* Node::memory_guard() { return impl_->memory_guard.get(); }
const ns::ClusterViewSource& Node::cluster() const { return *impl_->cluster; }

void Node::SetKernelCache(ns::KernelCache* kernel) {
  KernelHooks& h = *impl_->hooks;
  if (kernel == nullptr) {
    // Nothing invalidates the kernel's caches from now on.
    h.kernel.store(nullptr, std::memory_order_release);
    h.SetVfs(nullptr);
    if (impl_->vd_service) impl_->vd_service->SetKernelCache(nullptr);
    if (impl_->vfs) impl_->vfs->SetKernelCache(nullptr);
    return;
  }
  // From now on names and attributes go out cacheable, and every path that
  // may make them stale invalidates them.
  h.kernel.store(kernel, std::memory_order_release);
  h.SetVfs(impl_->vfs.get());
  impl_->vd_service->SetKernelCache(kernel);
  impl_->vfs->SetKernelCache(kernel);
}

}  // namespace fedfs::node
