#include "fedfsd/daemon.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dirent.h>

#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/executor.h"
#include "common/logging.h"
#include "fedfsd/config.h"
#include "fedfsd/privileges.h"
#include "fuse/fuse_frontend.h"
#include "m2m/auth.h"
#include "cluster/cluster.h"
#include "dirops/dir_ops.h"
#include "dirops/kv.h"
#include "files/file_service.h"
#include "nodefs/local_node_fs.h"
#include "watch/local_watch.h"
#include "common/path.h"
#include "vd/placement.h"
#include "files/remote_node_fs.h"
#include "vd/vd_service.h"
#include "vfs/vfs_impl.h"
#ifdef FEDFS_HAVE_UCX
#include "m2m/ucx_transport.h"
#endif

namespace fedfs::daemon {

Status CheckListenAddressFree(const std::string& listen) {
  auto hp = ParseHostPort(listen);
  if (!hp) return Err(EINVAL, "address " + listen + " is not host:port");
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(hp->port);
  if (int rc = ::getaddrinfo(hp->host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return Err(EADDRNOTAVAIL, "address " + listen + ": cannot resolve " + hp->host + ": " +
                                  ::gai_strerror(rc));
  }
  Status result = Ok();
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const int rc = ::bind(fd, ai->ai_addr, ai->ai_addrlen);
    const int err = errno;
    ::close(fd);
    if (rc == 0) {
      result = Ok();
      break;
    }
    if (err == EADDRINUSE) {
      result = Err(EADDRINUSE, "address " + listen + " is already in use");
    } else {
      result = Err(err, "cannot listen on " + listen + ": " + std::strerror(err));
    }
  }
  ::freeaddrinfo(res);
  return result;
}

namespace {

// Drops the names the kernel caches for this node's mount, once one is wired.
void DropKernelNames(const std::atomic<ns::KernelCache*>& kernel) {
  if (ns::KernelCache* k = kernel.load(std::memory_order_acquire)) k->InvalidateNames();
}

// ClusterView over Membership snapshots, rebuilt only when the snapshot
// changes. Current() is called from any thread (the progress context too):
// it holds its mutex only to swap two pointers.
class MembershipClusterView final : public ns::ClusterViewSource {
 public:
  // `kernel`: when the epoch changes (managers move, VDs are rebuilt, sharer
  // records are lost), the kernel's names are dropped before the new view is
  // used.
  MembershipClusterView(const Membership* m, std::shared_ptr<std::atomic<ns::KernelCache*>> kernel)
      : membership_(m), kernel_(std::move(kernel)) {}

  std::shared_ptr<const ns::ClusterView> Current() const override {
    auto snap = membership_->Snapshot();
    {
      std::lock_guard lock(mu_);
      if (snap == last_snapshot_ && view_) return view_;
    }
    auto v = std::make_shared<ns::ClusterView>();
    v->self = snap->self_id;
    v->epoch = snap->epoch;
    for (const auto& [id, m] : snap->members) {
      (m.state == MemberState::kAlive ? v->live : v->dead)[id] = m.addr;
    }
    v->ring = snap->ring ? snap->ring : std::make_shared<const Ring>(std::vector<std::string>{}, 1);
    bool new_epoch = false;
    {
      std::lock_guard lock(mu_);
      new_epoch = view_ && view_->epoch != v->epoch;
      last_snapshot_ = std::move(snap);
      view_ = v;
    }
    if (new_epoch) DropKernelNames(*kernel_);
    return v;
  }

 private:
  const Membership* membership_;
  std::shared_ptr<std::atomic<ns::KernelCache*>> kernel_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const MembershipView> last_snapshot_;  // guarded by mu_
  mutable std::shared_ptr<const ns::ClusterView> view_;           // guarded by mu_
};

// The Vfs's blocking view of the VD service.
class VdServiceClient final : public ns::VdClient {
 public:
  // `self`: this node, which holds the claims and locks it sends.
  VdServiceClient(ns::VdService* s, std::string self) : s_(s), self_(std::move(self)) {}
  Result<ns::VdPtr> Get(const std::string& path) override { return ns::GetVdSync(*s_, path); }
  Result<ns::VdPtr> GetFresh(const std::string& path) override {
    s_->ForgetCached(path);
    return ns::GetVdSync(*s_, path);
  }
  Status Add(const std::string& path, const std::string& name, uint8_t type,
             const std::string& node) override {
    ns::VdChange ch;
    ch.kind = ns::VdChange::Kind::kAdd;
    ch.name = name;
    ch.type = type;
    ch.node = node;
    return ns::UpdateVdSync(*s_, path, std::move(ch));
  }
  Status Remove(const std::string& path, const std::string& name,
                const std::string& node) override {
    ns::VdChange ch;
    ch.kind = ns::VdChange::Kind::kRemove;
    ch.name = name;
    ch.node = node;
    return ns::UpdateVdSync(*s_, path, std::move(ch));
  }
  Status DropSubtree(const std::string& path) override {
    return ns::DropSubtreeSync(*s_, path);
  }
  Status Claim(const std::string& path, const std::string& name) override {
    return WaitOutBusy(path, {ns::VdChange{ns::VdChange::Kind::kClaim, name, 0, self_}});
  }
  Status Lock(const std::string& path, const std::string& name) override {
    return WaitOutBusy(path, {ns::VdChange{ns::VdChange::Kind::kLock, name, 0, self_}});
  }
  Status LockAndClaim(const std::string& path, const std::string& lock,
                      const std::string& claim) override {
    Status s = WaitOutBusy(path, {ns::VdChange{ns::VdChange::Kind::kLock, lock, 0, self_},
                                  ns::VdChange{ns::VdChange::Kind::kClaim, claim, 0, self_}});
    // A manager of an older version takes them one at a time only.
    if (!s && s.error().code == EINVAL) return VdClient::LockAndClaim(path, lock, claim);
    return s;
  }
  void Release(const std::string& path, const std::string& name) override {
    if (auto s = ns::UpdateVdSync(*s_, path,
                                  ns::VdChange{ns::VdChange::Kind::kRelease, name, 0, self_});
        !s) {
      Logger("vfs")->debug("release of {} in {}: {}", name, path, s.error().ToString());
    }
  }
  Status Apply(const std::string& path, const std::vector<ns::VdEdit>& edits) override {
    std::vector<ns::VdChange> changes;
    for (const ns::VdEdit& e : edits) {
      changes.push_back(ns::VdChange{e.add ? ns::VdChange::Kind::kAdd : ns::VdChange::Kind::kRemove,
                                     e.name, e.type, e.node});
    }
    return ns::UpdateManyVdSync(*s_, path, std::move(changes));
  }

 private:
  // A claim or lock of a name another node holds for an operation that
  // changes it (EAGAIN) is retried with backoff (100 us doubling to 20 ms),
  // for longer than a crashed node's hold lives (4 x rpc_timeout).
  Status WaitOutBusy(const std::string& path, const std::vector<ns::VdChange>& changes) {
    auto backoff = std::chrono::microseconds(100);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      Status s = ns::UpdateManyVdSync(*s_, path, changes);
      if (s || s.error().code != EAGAIN || std::chrono::steady_clock::now() > deadline) return s;
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(20'000));
    }
  }

  ns::VdService* s_;
  std::string self_;
};

// Past this many changes in one directory within one batch of the watcher,
// the directory's VDs are dropped (one round) instead of updated once per
// change: every update makes the manager copy the whole VD, so a burst of N
// changes (a program unpacking an archive, a storm of creates) would cost it
// O(N^2) and stall the watcher's thread (the manager may be this node, served
// inline) until inotify's queue overflows.
constexpr size_t kBurstPerDir = 64;

// Autonomy (docs/namespace.md, "Autonomy"): turns what the watcher saw in the
// export root into VD updates at the managers. Runs on the watcher's thread.
// An event is checked against the directory as it is now, so a late event
// (the name came back, or went again) reports nothing false.
// This node's kernel did not see these changes happen: once the manager has
// applied one, the kernel's names are dropped (`kernel`, may hold null).
void ReportLocalChanges(ns::VdService* vds, ns::NodeFs* local, const std::string& self,
                        std::shared_ptr<std::atomic<ns::KernelCache*>> kernel,
                        std::vector<ns::LocalChange> changes) {
  auto log = Logger("autonomy");
  auto drop_names = [kernel] { DropKernelNames(*kernel); };
  std::unordered_map<std::string, size_t> per_dir;
  for (const ns::LocalChange& c : changes) ++per_dir[c.dir];
  for (const auto& [dir, n] : per_dir) {
    if (n <= kBurstPerDir) continue;
    // Rebuilt by dirmerge on next use, from the export roots as they are
    // then (the subtree too: directories made in the burst are covered).
    log->info("{} changes in {} behind FedFS' back: its VDs are rebuilt", n, dir);
    vds->DropSubtree(dir, [log, d = dir, drop_names](Status s) {
      if (!s) log->warn("drop of VDs under {}: {}", d, s.error().ToString());
      drop_names();
    });
  }
  for (ns::LocalChange& c : changes) {
    if (per_dir[c.dir] > kBurstPerDir) continue;  // dropped above
    const std::string path = ns::JoinPath(c.dir, c.name);
    auto st = local->Stat(ns::Cred{}, path);
    const bool add = c.kind == ns::LocalChange::Kind::kAdd;
    if (add != st.has_value()) continue;  // no longer so
    ns::VdChange ch;
    ch.kind = add ? ns::VdChange::Kind::kAdd : ns::VdChange::Kind::kRemove;
    ch.name = c.name;
    ch.type = add ? static_cast<uint8_t>(IFTODT(st->st_mode & S_IFMT)) : c.type;
    ch.node = self;
    SPDLOG_LOGGER_DEBUG(log, "{} {} in {} (behind FedFS' back)", add ? "add" : "remove", c.name,
                        c.dir);
    if (ch.type == DT_DIR) {
      // A directory appeared or went: the VDs of its subtree (built without
      // this node's copy, or with it) are rebuilt on their next use.
      vds->DropSubtree(path, [log, path, drop_names](Status s) {
        if (!s) log->warn("drop of VDs under {}: {}", path, s.error().ToString());
        drop_names();
      });
    }
    vds->Update(c.dir, std::move(ch), [log, path, drop_names](Status s) {
      if (!s) log->warn("report of {}: {}", path, s.error().ToString());
      drop_names();
    });
  }
}

// Directories whose changes may have been missed (inotify overflow, watch
// limit, the directory itself moved): their VDs everywhere are dropped and
// rebuilt by dirmerge on next use.
void DropLostDirs(ns::VdService* vds, std::shared_ptr<std::atomic<ns::KernelCache*>> kernel,
                  std::vector<std::string> dirs) {
  auto log = Logger("autonomy");
  if (dirs.size() > 64) dirs = {"/"};  // one broadcast instead of many
  for (const std::string& d : dirs) {
    log->info("changes under {} may have been missed: its VDs are rebuilt", d);
    vds->DropSubtree(d, [log, d, kernel](Status s) {
      if (!s) log->warn("drop of VDs under {}: {}", d, s.error().ToString());
      DropKernelNames(*kernel);
    });
  }
}

// The Vfs's view of the journaled multi-node directory operations.
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

 private:
  ns::DirOps* d_;
};

ns::PlacementOptions PlacementFrom(const PlacementConfig& c) {
  ns::PlacementOptions p;
  p.policy = c.policy;
  for (const auto& r : c.rules) p.rules.push_back({r.prefix, r.policy, r.node});
  return p;
}

bool UsesMostFree(const ns::PlacementOptions& p) {
  if (p.policy == "most-free") return true;
  for (const auto& r : p.rules) {
    if (r.policy == "most-free") return true;
  }
  return false;
}

const char* TypeName(uint8_t dt) {
  switch (dt) {
    case DT_DIR: return "dir";
    case DT_REG: return "file";
    case DT_LNK: return "symlink";
    case DT_FIFO: return "fifo";
    case DT_SOCK: return "socket";
    case DT_CHR: return "char";
    case DT_BLK: return "block";
    default: return "unknown";
  }
}

// The blocking form of VdService::Conflicts (control thread only).
Result<std::vector<ns::Conflict>> ConflictsSync(ns::VdService& s, const std::string& path) {
  auto promise = std::make_shared<std::promise<Result<std::vector<ns::Conflict>>>>();
  auto future = promise->get_future();
  s.Conflicts(path, [promise](Result<std::vector<ns::Conflict>> r) { promise->set_value(std::move(r)); });
  return future.get();
}

std::optional<std::string> HandleNamespaceRequest(const std::string& line, ns::VfsImpl* vfs,
                                                  ns::VdService* vds, const std::string& self);
std::optional<std::string> HandleFilesRequest(const std::string& line, const ns::FileService& fs,
                                              const ns::FsCallbacks& callbacks,
                                              const std::string& self);

}  // namespace

Daemon::Daemon() = default;

Status CheckMountpointUsable(const DaemonOptions& o) {
  if (!o.fuse.mount) return Ok();
  return fuse::CheckMountpoint(o.mountpoint);
}

Result<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& o) {
  auto log = Logger("daemon");
  auto key = m2m::LoadClusterKeyFile(o.cluster_key_file);
  if (!key) return Err(key.error().code, key.error().ToString());

  // Before any thread exists: capabilities are per thread (privileges.h).
  const auto hp = ParseHostPort(o.listen);
  auto dropped = DropCapabilities({.bind_privileged_port = hp && hp->port < 1024});
  if (!dropped) return Err(dropped.error().code, "capabilities: " + dropped.error().context);
  log->info("capabilities: kept {} of the process's, dropped {}{}", dropped->kept.size(),
            dropped->dropped, dropped->bounding_reduced ? " (bounding set too)" : " (bounding set unchanged)");

  std::unique_ptr<Daemon> d(new Daemon());
#ifdef FEDFS_HAVE_UCX
  m2m::UcxOptions ucx;
  ucx.tls = o.transport.tls;
  ucx.net_devices = o.transport.net_devices;
  ucx.spin_us = o.transport.spin_us;
  // (The bootstrap listener binds with SO_REUSEADDR: a restarted daemon gets
  // its port back at once, although the connections of its previous life
  // linger in TIME_WAIT for a minute.)
  m2m::TransportOptions topts;
  topts.cluster_key = std::move(*key);
  topts.max_message_bytes = o.transport.max_message_bytes;
  topts.connect_timeout = o.timeouts.connect;
  auto transport = m2m::MakeUcxTransport(ucx, topts);
  if (!transport) {
    return Err(transport.error().code, "cannot start the UCX transport: " + transport.error().ToString());
  }
  d->transport_ = std::move(*transport);
#else
  return Err(ENOSYS, "fedfsd was built without a transport (fedfs_m2m_ucx missing)");
#endif

  // Peers reach us at the configured listen address (config validation
  // refuses wildcard addresses), so membership can advertise it before the
  // transport listens; the handlers must be installed before Listen.
  d->membership_ = std::make_unique<Membership>(MembershipOptionsFrom(o, o.listen),
                                                d->transport_.get());
  d->membership_->RegisterHandlers();

  // The namespace: this node's export root, the services every node runs
  // (file operations for other nodes, VDs and their managers), the Vfs.
  const std::shared_ptr<std::atomic<ns::KernelCache*>> kernel(d->hooks_, &d->hooks_->kernel);
  d->cluster_ = std::make_unique<MembershipClusterView>(d->membership_.get(), kernel);
  d->pool_ = std::make_unique<ThreadPool>(8, "blocking");
  auto local = ns::LocalNodeFs::Open(o.node_id, o.export_root);
  if (!local) {
    d->Stop();
    return Err(local.error().code, "export root " + o.export_root + ": " + local.error().ToString());
  }
  // Every change FedFS makes in the export root (for this node's mount or
  // another node's) is announced to the autonomy watcher, which then skips
  // its echo: a late echo could otherwise report a name that came back.
  (*local)->SetChangeHook([watching = d->watching_](const std::string& path) {
    if (ns::LocalWatch* w = watching->load(std::memory_order_acquire)) {
      if (path != "/") w->Ignore(path);
    }
  });
  d->local_fs_ = std::move(*local);
  ns::FileServiceOptions fso;
  fso.root_squash = o.security.root_squash;
  fso.squash_uid = o.security.squash_uid;
  fso.squash_gid = o.security.squash_gid;
  fso.on_change = [hooks = d->hooks_](const std::string& path) {
    std::shared_lock lock(hooks->vfs_mu);
    if (hooks->vfs != nullptr) hooks->vfs->InvalidateAttrsOf(path);
  };
  d->file_service_ = std::make_unique<ns::FileService>(fso, d->transport_.get(),
                                                       d->local_fs_.get(), d->pool_.get());
  if (auto s = d->file_service_->RegisterHandlers(); !s) {
    d->Stop();
    return Err(s.error().code, "file service: " + s.error().ToString());
  }
  // Changes of files that other nodes have open are told to them.
  d->local_fs_->SetAttrObserver(d->file_service_.get());
  // This node's side of those callbacks: the kernel drops what it caches.
  d->fs_callbacks_ = std::make_unique<ns::FsCallbacks>(
      d->transport_.get(),
      [hooks = d->hooks_](const std::string& node, const std::vector<ns::Handle>& handles) {
        std::shared_lock lock(hooks->vfs_mu);
        if (hooks->vfs != nullptr) hooks->vfs->RemoteAttrsChanged(node, handles);
      });
  ns::VdServiceOptions vdo;
  vdo.rpc_timeout = o.timeouts.rpc;
  vdo.dt_entries = o.directory_table.entries;
  vdo.dt_bytes = o.directory_table.bytes;
  // The watcher starts after the services it reports to; until then (and
  // after Stop) `watching` is null.
  auto watching = d->watching_;
  vdo.on_local_listing = [watching](const std::string& path) {
    if (ns::LocalWatch* w = watching->load(std::memory_order_acquire)) {
      if (auto s = w->Watch(path); !s && s.error().code != ENOENT) {
        Logger("autonomy")->warn("cannot watch {}: {}", path, s.error().ToString());
      }
    }
  };
  d->vd_service_ = std::make_unique<ns::VdService>(vdo, d->transport_.get(), d->cluster_.get(),
                                                   d->local_fs_.get(), d->pool_.get());
  d->vd_service_->RegisterHandlers();
  d->vd_client_ = std::make_unique<VdServiceClient>(d->vd_service_.get(), o.node_id);

  ns::VfsOptions vo;
  vo.entry_timeout = o.fuse.entry_timeout_s;
  vo.attr_timeout = o.fuse.attr_timeout_s;
  // The watcher reports direct changes of files' attributes at once; without
  // it they would show only when the kernel's copy times out.
  if (o.autonomy.watch) vo.coherent_file_attr_timeout = 10;
  vo.node_tag = static_cast<uint16_t>(o.node_tag);
  ns::VfsDeps deps;
  deps.cluster = d->cluster_.get();
  deps.local = d->local_fs_.get();
  deps.vds = d->vd_client_.get();
  deps.tag_of = [m = d->membership_.get()](const std::string& node) { return m->TagOf(node); };
  m2m::Transport* tr = d->transport_.get();
  const Millis rpc = o.timeouts.rpc;
  // Without kernel caches nothing is cached that a callback could drop.
  deps.make_remote = [tr, rpc, self = o.node_id, addr = o.listen,
                      callbacks = o.fuse.kernel_cache ? d->fs_callbacks_.get() : nullptr](
                         const std::string& node, const std::string& peer_addr) {
    ns::RemoteNodeFsOptions ro;
    ro.rpc_timeout = rpc;
    ro.local_node = self;
    ro.local_address = addr;
    ro.callbacks = callbacks;
    return std::static_pointer_cast<ns::NodeFs>(std::make_shared<ns::RemoteNodeFs>(
        node, tr->GetEndpoint(peer_addr), tr, ro));
  };
  const ns::PlacementOptions placement = PlacementFrom(o.placement);
  const bool most_free = UsesMostFree(placement);
  Daemon* self_ptr = d.get();
  deps.place = [placement, most_free, self_ptr](const ns::ClusterView& view,
                                                const std::string& path, bool) -> Result<std::string> {
    std::map<std::string, uint64_t> free_bytes;
    if (most_free && self_ptr->vfs_) free_bytes = self_ptr->vfs_->FreeBytes();
    return ns::ChoosePlacement(placement, view, path, free_bytes);  // EHOSTDOWN fails the create
  };
  d->vfs_ = std::make_unique<ns::VfsImpl>(vo, std::move(deps));

  auto listening = d->transport_->Listen(o.listen);
  if (!listening) {
    const Error& e = listening.error();
    d->Stop();
    if (e.code == EADDRINUSE || e.code == EBUSY) {
      return Err(EADDRINUSE, "address " + o.listen + " is already in use");
    }
    return Err(e.code, "cannot listen on " + o.listen + ": " + e.ToString());
  }
  log->info("node {} listening on {} (tls={}, net_devices={})", o.node_id, *listening,
            o.transport.tls, o.transport.net_devices.empty() ? "all" : o.transport.net_devices);

  d->control_ = std::make_unique<ControlServer>(
      ControlOptions{o.control_socket}, [m = d->membership_.get()] { return m->Snapshot(); },
      [vfs = d->vfs_.get(), vds = d->vd_service_.get(), files = d->file_service_.get(),
       callbacks = d->fs_callbacks_.get(), self = o.node_id](const std::string& line) {
        if (auto r = HandleFilesRequest(line, *files, *callbacks, self)) return r;
        return HandleNamespaceRequest(line, vfs, vds, self);
      });
  if (auto s = d->control_->Start(); !s) {
    d->Stop();
    return Err(s.error().code, s.error().ToString());
  }
  // The journal of multi-node directory operations.
  auto kv = ns::OpenRocksDbKv({o.state_dir});
  if (!kv) {
    d->Stop();
    return Err(kv.error().code, "state_dir " + o.state_dir + ": " + kv.error().ToString());
  }
  d->kv_ = std::move(*kv);
  {
    ns::VfsImpl* vfs = d->vfs_.get();
    ns::VdService* vds = d->vd_service_.get();
    const ns::ClusterViewSource* cluster = d->cluster_.get();
    d->dir_ops_ = std::make_unique<ns::DirOps>(
        o.node_id, d->kv_.get(), [vfs](const std::string& n) { return vfs->NodeFsFor(n); },
        [cluster] { return cluster->Current(); },
        [vds](const std::string& dir, const ns::VdChange& ch) { return ns::UpdateVdSync(*vds, dir, ch); },
        ns::DirOpsOptions{}, ns::PauseHooksFromEnv());
    d->dir_ops_client_ = std::make_unique<DirOpsAdapter>(d->dir_ops_.get());
    d->vfs_->SetDirOps(d->dir_ops_client_.get());
  }

  if (o.autonomy.watch) {
    ns::VdService* vds = d->vd_service_.get();
    ns::NodeFs* local = d->local_fs_.get();
    ns::LocalWatchOptions wo{.max_watches = o.autonomy.max_watches};
    // A file's attributes changed behind FedFS' back: this node's kernel
    // and the nodes that have the file open drop what they cache.
    wo.on_attr = [hooks = d->hooks_, files = d->file_service_.get(),
                  kernel_cache = o.fuse.kernel_cache](const std::string& path) {
      if (kernel_cache) {
        std::shared_lock lock(hooks->vfs_mu);
        if (hooks->vfs != nullptr) hooks->vfs->InvalidateAttrsOf(path);
      }
      files->PathChanged(path);
    };
    auto watch = ns::LocalWatch::Start(
        o.export_root, std::move(wo),
        [vds, local, self = o.node_id, kernel](std::vector<ns::LocalChange> changes) {
          ReportLocalChanges(vds, local, self, kernel, std::move(changes));
        },
        [vds, kernel](std::vector<std::string> dirs) { DropLostDirs(vds, kernel, std::move(dirs)); });
    if (!watch) {
      d->Stop();
      return Err(watch.error().code, "watching export root " + o.export_root + ": " +
                                         watch.error().ToString());
    }
    d->watch_ = std::move(*watch);
    d->watching_->store(d->watch_.get(), std::memory_order_release);
    if (auto s = d->watch_->Watch("/"); !s) {
      log->warn("cannot watch the export root: {}", s.error().ToString());
    }
  }
  d->membership_->Start();
  if (auto s = d->dir_ops_->Recover(); !s) {
    d->Stop();
    return Err(s.error().code, "journal recovery: " + s.error().ToString());
  }
  if (o.fuse.mount) {
    fuse::FuseOptions fo;
    fo.mountpoint = o.mountpoint;
    fo.allow_other = o.fuse.allow_other;
    fo.default_permissions = o.fuse.default_permissions;
    fo.max_threads = o.fuse.max_threads;
    fo.read_ahead_kb = o.fuse.read_ahead_kb;
    fo.spin_us = o.fuse.spin_us;
    fo.io_uring = o.fuse.io_uring;
    auto mount = fuse::FuseMount::Mount(fo, d->vfs_.get());
    if (!mount) {
      d->Stop();
      return Err(mount.error().code, mount.error().context);
    }
    d->mount_ = std::move(*mount);
    if (o.fuse.kernel_cache) {
      // From now on names and attributes go out cacheable (once the INIT
      // handshake said the kernel takes the invalidations), and every path
      // that may make them stale invalidates them.
      auto k = d->mount_->kernel_cache();
      d->kernel_ = k;
      d->hooks_->kernel.store(k.get(), std::memory_order_release);
      {
        std::unique_lock lock(d->hooks_->vfs_mu);
        d->hooks_->vfs = d->vfs_.get();
      }
      d->vd_service_->SetKernelCache(k.get());
      d->vfs_->SetKernelCache(k.get());
    }
  }
  log->info("started: incarnation {:016x}, {} seed(s), heartbeat {} ms, failure timeout {} ms",
            d->membership_->incarnation(), o.peers.size(), o.timeouts.heartbeat_interval.count(),
            o.timeouts.failure_timeout.count());
  return d;
}

Daemon::~Daemon() { Stop(); }

void Daemon::Stop() {
  // Nothing invalidates the kernel's caches from now on (the notifier itself
  // lives on in kernel_ for calls already in flight).
  hooks_->kernel.store(nullptr, std::memory_order_release);
  {
    std::unique_lock lock(hooks_->vfs_mu);
    hooks_->vfs = nullptr;
  }
  if (vd_service_) vd_service_->SetKernelCache(nullptr);
  if (vfs_) vfs_->SetKernelCache(nullptr);
  // The mount goes first, while the transport still serves its requests.
  if (mount_) {
    mount_->Unmount();
    mount_.reset();
  }
  if (control_) control_->Stop();
  // The watcher reports to the VD service: it stops first.
  watching_->store(nullptr, std::memory_order_release);
  watch_.reset();
  // Remote sessions say goodbye while the transport is up.
  if (vfs_) vfs_->SetDirOps(nullptr);
  dir_ops_client_.reset();
  dir_ops_.reset();
  kv_.reset();
  vfs_.reset();
  if (membership_) membership_->Stop();
  if (transport_) transport_->Shutdown();
  // No handler runs after Shutdown: drain the pool, then the services.
  pool_.reset();
  vd_client_.reset();
  vd_service_.reset();
  if (local_fs_) local_fs_->SetAttrObserver(nullptr);
  file_service_.reset();
  fs_callbacks_.reset();
}

namespace {

// The "dt" answer: this node's directory table and its manager-side
// coherence counters (fedfsctl dt).
nlohmann::json DtStatus(ns::VdService& vds, const std::string& self) {
  using Json = nlohmann::json;
  const ns::VdService::Stats s = vds.stats();
  Json out{{"node", self},
           {"lookups", s.lookups},
           {"gets_sent", s.gets_sent},
           {"messages_per_lookup",
            s.lookups == 0 ? 0.0 : static_cast<double>(s.gets_sent) / static_cast<double>(s.lookups)},
           {"dt_invals_received", s.dt_invals_received},
           {"notifies_sent", s.notifies_sent},
           {"kernel_invalidations", s.kernel_invalidations},
           {"sharer_records", s.sharer_records},
           {"invalidations_sent", s.invalidations_sent},
           {"invalidations_failed", s.invalidations_failed},
           {"broadcasts_sent", s.broadcasts_sent},
           {"changes_invalidated", s.changes_invalidated},
           {"gets_served", s.gets_served},
           {"dirmerges", s.dirmerges},
           {"updates_applied", s.updates_applied},
           {"resident", s.resident},
           {"table", nullptr}};
  if (s.has_dt) {
    out["table"] = Json{{"capacity", s.dt.capacity},     {"max_bytes", s.dt.max_bytes},
                        {"occupancy", s.dt.occupancy},   {"bytes", s.dt.bytes},
                        {"hits", s.dt.hits},             {"misses", s.dt.misses},
                        {"stale", s.dt.stale},           {"evictions", s.dt.evictions},
                        {"bumps_received", s.dt.bumps_received},
                        {"local_bumps", s.dt.local_bumps}, {"patches", s.dt.patches}};
  }
  return out;
}

// The "files" answer (fedfsctl files): this node's file service (sessions
// of other nodes, their open handles, requests, change callbacks sent) and
// the callbacks it took for files it has open elsewhere. nullopt: not a
// "files" request.
std::optional<std::string> HandleFilesRequest(const std::string& line, const ns::FileService& fs,
                                              const ns::FsCallbacks& callbacks,
                                              const std::string& self) {
  using Json = nlohmann::json;
  Json req = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) return std::nullopt;
  auto cmd = req.find("cmd");
  if (cmd == req.end() || !cmd->is_string() || *cmd != "files") return std::nullopt;
  const ns::FileService::Stats s = fs.stats();
  return Json{{"node", self},
              {"sessions", s.sessions},
              {"handles", s.handles},
              {"watches", s.watches},
              {"served", s.served},
              {"refused", s.refused},
              {"callbacks_sent", s.callbacks_sent},
              {"callbacks_failed", s.callbacks_failed},
              {"callbacks_received", callbacks.received()},
              {"callbacks_refused", callbacks.refused()}}
      .dump();
}

std::optional<std::string> HandleNamespaceRequest(const std::string& line, ns::VfsImpl* vfs,
                                                  ns::VdService* vds, const std::string& self) {
  using Json = nlohmann::json;
  Json req = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) return std::nullopt;
  auto cmd = req.find("cmd");
  if (cmd == req.end() || !cmd->is_string() ||
      (*cmd != "where" && *cmd != "conflicts" && *cmd != "dt")) {
    return std::nullopt;
  }
  auto error = [](const std::string& m) { return Json{{"error", m}}.dump(); };
  if (*cmd == "dt") {
    if (vds == nullptr) return error("the namespace is not running");
    return DtStatus(*vds, self).dump();
  }
  auto p = req.find("path");
  if (p == req.end() || !p->is_string()) return error("missing \"path\"");
  const std::string raw = p->get<std::string>();
  if (raw.empty() || raw[0] != '/') return error("path must be absolute (start with /)");
  const std::string path = NormalizeControlPath(raw);
  if (vfs == nullptr || vds == nullptr) return error("the namespace is not running");
  if (*cmd == "where") {
    auto holders = vfs->Where(path);
    if (!holders) return error(path + ": " + holders.error().ToString());
    return Json{{"path", path}, {"holders", *holders}}.dump();
  }
  auto conflicts = ConflictsSync(*vds, path);
  if (!conflicts) return error(path + ": " + conflicts.error().ToString());
  Json list = Json::array();
  for (const auto& c : *conflicts) {
    Json copies = Json::array();
    for (const auto& [node, type] : c.copies) copies.push_back({{"node", node}, {"type", TypeName(type)}});
    list.push_back({{"name", c.name}, {"copies", copies}});
  }
  return Json{{"path", path}, {"conflicts", list}}.dump();
}

}  // namespace

}  // namespace fedfs::daemon
