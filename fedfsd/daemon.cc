#include "fedfsd/daemon.h"

#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "cluster/cluster.h"
#include "cluster/membership_control.h"
#include "common/executor.h"
#include "common/logging.h"
#include "coopcache/cache_control.h"
#include "dirops/dir_ops.h"
#include "dirops/kv.h"
#include "dirops/pending_control.h"
#include "fedfsd/config.h"
#include "fedfsd/daemon_metrics.h"
#include "fedfsd/privileges.h"
#include "files/files_control.h"
#include "fuse/fuse_frontend.h"
#include "m2m/auth.h"
#include "m2m/counting_transport.h"
#include "m2m/faulty_transport.h"
#include "metrics/endpoint.h"
#include "node/node.h"
#include "nodefs/local_node_fs.h"
#include "vd/vd_control.h"
#include "vfs/vfs_control.h"
#include "migration/migration_control.h"
#include "watch/local_watch.h"
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

// ClusterView over Membership snapshots, rebuilt only when the snapshot
// changes. Current() is called from any thread (the progress context too):
// it holds its mutex only to swap two pointers.
class MembershipClusterView final : public ns::ClusterViewSource {
 public:
  explicit MembershipClusterView(const Membership* m) : membership_(m) {}

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
    std::lock_guard lock(mu_);
    last_snapshot_ = std::move(snap);
    view_ = v;
    return v;
  }

 private:
  const Membership* membership_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const MembershipView> last_snapshot_;  // guarded by mu_
  mutable std::shared_ptr<const ns::ClusterView> view_;           // guarded by mu_
};

ns::PlacementOptions PlacementFrom(const PlacementConfig& c) {
  ns::PlacementOptions p;
  p.policy = c.policy;
  for (const auto& r : c.rules) p.rules.push_back({r.prefix, r.policy, r.node});
  return p;
}

}  // namespace

Daemon::Daemon() : fuse_ops_(std::make_unique<fuse::OpMetrics>()) {}

Status CheckMountpointUsable(const DaemonOptions& o) {
  if (!o.fuse.mount) return Ok();
  return fuse::CheckMountpoint(o.mountpoint);
}

Status ClearStaleMountpoint(const DaemonOptions& o, bool* cleared) {
  *cleared = false;
  if (!o.fuse.mount) return Ok();
  return fuse::ClearStaleMount(o.mountpoint, cleared);
}

// Start, step by step: each step builds one part from the options, and on
// failure returns the one-line error; Start then stops what exists.

Status Daemon::LoadClusterKey(const DaemonOptions& o) {
  auto key = m2m::LoadClusterKeyFile(o.cluster_key_file);
  if (!key) return Err(key.error().code, key.error().ToString());
  cluster_key_ = std::move(*key);
  return Ok();
}

Status Daemon::DropPrivileges(const DaemonOptions& o) {
  // Before any thread exists: capabilities are per thread (privileges.h).
  const auto hp = ParseHostPort(o.listen);
  auto dropped = DropCapabilities({.bind_privileged_port = hp && hp->port < 1024});
  if (!dropped) return Err(dropped.error().code, "capabilities: " + dropped.error().context);
  Logger("daemon")->info("capabilities: kept {} of the process's, dropped {}{}",
                         dropped->kept.size(), dropped->dropped,
                         dropped->bounding_reduced ? " (bounding set too)"
                                                   : " (bounding set unchanged)");
  return Ok();
}

Status Daemon::StartTransport(const DaemonOptions& o) {
#ifdef FEDFS_HAVE_UCX
  m2m::UcxOptions ucx;
  ucx.tls = o.transport.tls;
  ucx.net_devices = o.transport.net_devices;
  ucx.spin_us = o.transport.spin_us;
  ucx.spin_pending_us = o.transport.spin_pending_us;
  // (The bootstrap listener binds with SO_REUSEADDR: a restarted daemon gets
  // its port back at once, although the connections of its previous life
  // linger in TIME_WAIT for a minute.)
  m2m::TransportOptions topts;
  topts.cluster_key = std::move(cluster_key_);
  topts.max_message_bytes = o.transport.max_message_bytes;
  topts.connect_timeout = o.timeouts.connect;
  auto transport = m2m::MakeUcxTransport(ucx, topts);
  if (!transport) {
    return Err(transport.error().code,
               "cannot start the UCX transport: " + transport.error().ToString());
  }
  std::unique_ptr<m2m::Transport> inner = std::move(*transport);
  // Fault runs only (docs/faults.md): FEDFS_TEST_FAULTS="drop=0.01,..." makes
  // this node's calls fail, arrive late or lose their connection.
  if (const char* faults = std::getenv("FEDFS_TEST_FAULTS"); faults != nullptr && *faults) {
    auto spec = m2m::ParseFaultSpec(faults);
    if (!spec) return Err(EINVAL, "FEDFS_TEST_FAULTS: " + spec.error().context);
    Logger("daemon")->warn("test hook: injecting transport faults ({})", spec->ToString());
    inner = std::make_unique<m2m::FaultyTransport>(std::move(inner), *spec);
  }
  // Counted by peer for the metrics (m2m/counting_transport.h).
  auto counting = std::make_unique<m2m::CountingTransport>(std::move(inner));
  counting_ = counting.get();
  transport_ = std::move(counting);
  return Ok();
#else
  return Err(ENOSYS, "fedfsd was built without a transport (fedfs_m2m_ucx missing)");
#endif
}

Status Daemon::StartMembership(const DaemonOptions& o) {
  // Peers reach us at the configured listen address (config validation
  // refuses wildcard addresses), so membership can advertise it before the
  // transport listens; the handlers must be installed before Listen.
  membership_ = std::make_unique<Membership>(MembershipOptionsFrom(o, o.listen), transport_.get());
  membership_->RegisterHandlers();
  cluster_ = std::make_unique<MembershipClusterView>(membership_.get());
  return Ok();
}

Status Daemon::OpenExportRoot(const DaemonOptions& o) {
  auto local = ns::LocalNodeFs::Open(o.node_id, o.export_root);
  if (!local) {
    return Err(local.error().code, "export root " + o.export_root + ": " + local.error().ToString());
  }
  // Every change FedFS makes in the export root (for this node's mount or
  // another node's) is announced to the autonomy watcher, which then skips
  // its echo: a late echo could otherwise report a name that came back.
  (*local)->SetChangeHook([watching = watching_](const std::string& path) {
    if (ns::LocalWatch* w = watching->load(std::memory_order_acquire)) {
      if (path != "/") w->Ignore(path);
    }
  });
  local_fs_ = std::move(*local);
  // The journal of multi-node directory operations.
  restarted_ = ::access((o.state_dir + "/CURRENT").c_str(), F_OK) == 0;
  auto kv = ns::OpenRocksDbKv({o.state_dir});
  if (!kv) return Err(kv.error().code, "state_dir " + o.state_dir + ": " + kv.error().ToString());
  kv_ = std::move(*kv);
  return Ok();
}

Status Daemon::StartNamespace(const DaemonOptions& o) {
  pool_ = std::make_unique<ThreadPool>(8, "blocking");
  callbacks_pool_ = std::make_unique<ThreadPool>(2, "callbacks");
  unlinks_pool_ = std::make_unique<ThreadPool>(4, "unlinks");
  node::NodeOptions no;
  no.node_id = o.node_id;
  no.address = o.listen;
  no.rpc_timeout = o.timeouts.rpc;
  no.dt_entries = o.directory_table.entries;
  no.dt_bytes = o.directory_table.bytes;
  no.lend_after = o.directory_table.lend_after;
  no.lease_term = o.directory_table.lease;
  no.whole_max_entries = o.directory_table.whole_max_entries;
  no.add_new = o.directory_table.add_new;
  no.deltas = o.directory_table.deltas;
  no.cache.size_bytes = o.coopcache.size;
  no.cache.block_bytes = o.coopcache.block;
  no.share_cache = o.coopcache.share;
  no.cache_forward = o.coopcache.forward;
  no.cache_min_free = o.coopcache.min_free;
  no.files.root_squash = o.security.root_squash;
  no.files.session_lease = o.timeouts.session_lease;
  no.files.cache_lease = o.timeouts.cache_lease;
  // Other nodes may cache this node's files from its previous process.
  if (restarted_ && o.timeouts.cache_lease.count() > 0) {
    no.files.grace = o.timeouts.cache_lease + std::chrono::milliseconds(200);
  }
  no.files.squash_uid = o.security.squash_uid;
  no.files.squash_gid = o.security.squash_gid;
  no.vfs.entry_timeout = o.fuse.entry_timeout_s;
  no.vfs.attr_timeout = o.fuse.attr_timeout_s;
  // The watcher reports direct changes of files' attributes at once; without
  // it they would show only when the kernel's copy times out.
  // Files held elsewhere are told of by their node the same way (its watcher
  // included), while open here or watched (a getattr's, a create's).
  if (o.autonomy.watch) {
    no.vfs.coherent_file_attr_timeout = 10;
    no.vfs.coherent_remote_open_attr_timeout = 10;
  }
  no.vfs.node_tag = static_cast<uint16_t>(o.node_tag);
  no.vfs.on_full.enabled = o.migration.on_full.enabled;
  no.vfs.on_full.max_size = o.migration.on_full.max_size;
  no.vfs.on_full.max_wait = o.migration.on_full.max_wait;
  no.vfs.on_full.min_free = o.migration.on_full.min_free;
  no.access = o.migration.on_access;
  no.placement = PlacementFrom(o.placement);
  no.remote_callbacks = o.fuse.kernel_cache;
  no.vfs.stream_after = o.coopcache.stream_after;
  no.vfs.keep_remote_pages = o.fuse.kernel_cache && o.fuse.keep_cache;
  no.vfs.deferred_open = o.fuse.deferred_open && o.fuse.kernel_cache && o.fuse.default_permissions;
  no.release_delay = std::chrono::milliseconds(20);
  no.dir_ops_hooks = ns::PauseHooksFromEnv();
  no.fence_member = [m = membership_.get()](const std::string& node) { m->Fence(node); };
  no.record_dead_members = o.directory_ops.record_dead_members;
  no.forget_member = [m = membership_.get()](const std::string& node) { m->Forget(node); };
  // The watcher starts after the services it reports to; until then (and
  // after Stop) `watching` is null.
  no.on_local_listing = [watching = watching_](const std::string& path) {
    if (ns::LocalWatch* w = watching->load(std::memory_order_acquire)) {
      // ENOTDIR: not a directory here (a symlink: a name conflict), so
      // nothing of this node is listed either.
      if (auto s = w->Watch(path); !s && s.error().code != ENOENT && s.error().code != ENOTDIR) {
        Logger("autonomy")->warn("cannot watch {}: {}", path, s.error().ToString());
      }
    }
  };
  node::NodeEnv env;
  env.transport = transport_.get();
  env.cluster = cluster_.get();
  env.local = local_fs_.get();
  env.kv = kv_.get();
  env.move = local_fs_.get();
  env.pool = pool_.get();
  env.callbacks = callbacks_pool_.get();
  env.unlinks = unlinks_pool_.get();
  env.tag_of = [m = membership_.get()](const std::string& node) { return m->TagOf(node); };
  auto n = node::Node::Create(std::move(no), std::move(env));
  if (!n) return Err(n.error().code, n.error().context);
  node_ = std::move(*n);
  // Members with records of what they missed are held dead until they
  // applied them (dirops/pending_service.h, "The fence").
  membership_->SetDeadHold(
      [p = &node_->pending()](const std::string& id) { return p->store().Holds(id); },
      [p = &node_->pending()](const std::string& id) { p->OnHeldContact(id); });
  // Changes of files that other nodes have open are told to them.
  local_fs_->SetAttrObserver(&node_->file_service());
  return Ok();
}

Status Daemon::Listen(const DaemonOptions& o) {
  auto listening = transport_->Listen(o.listen);
  if (!listening) {
    const Error& e = listening.error();
    if (e.code == EADDRINUSE || e.code == EBUSY) {
      return Err(EADDRINUSE, "address " + o.listen + " is already in use");
    }
    return Err(e.code, "cannot listen on " + o.listen + ": " + e.ToString());
  }
  Logger("daemon")->info("node {} listening on {} (tls={}, net_devices={})", o.node_id, *listening,
                         o.transport.tls,
                         o.transport.net_devices.empty() ? "all" : o.transport.net_devices);
  return Ok();
}

Status Daemon::StartControl(const DaemonOptions& o) {
  // Each part registers the commands about its state.
  control::Dispatcher commands;
  RegisterMembershipControl(commands, [m = membership_.get()] { return m->Snapshot(); });
  ns::RegisterVfsControl(commands, &node_->vfs());
  ns::RegisterMigrationControl(
      commands, node_->migration(),
      [vfs = &node_->vfs()](const std::string& path) { return vfs->Where(path); },
      [vfs = &node_->vfs()] {
        const auto s = vfs->RoomStats();
        return ns::RoomCounts{s.writes, s.creates};
      },
      ns::Migration::RebalanceOptions{.threshold = o.migration.rebalance.threshold,
                                      .min_size = o.migration.rebalance.min_size},
      o.node_id);
  ns::RegisterVdControl(commands, &node_->vd_service(), o.node_id);
  ns::RegisterPendingControl(commands, &node_->pending(), o.node_id);
  ns::RegisterFilesControl(commands, &node_->file_service(), &node_->fs_callbacks(), o.node_id,
                           [vfs = &node_->vfs()](control::FilesReply& r) {
                             const auto d = vfs->deferred_stats();
                             r.deferred_opens = d.opened;
                             r.deferred_used = d.used;
                             r.deferred_adopted = d.adopted;
                             r.deferred_stale = d.stale;
                           });
  coop::RegisterCacheControl(commands, {node_->cache(), node_->peers(), node_->forwarder(), node_->hints(),
                              node_->memory_guard()},
                             [fs = &node_->file_service()] {
                               const auto s = fs->stats();
                               return coop::HolderCounts{s.coop_redirects, s.coop_files,
                                                         s.coop_copies, s.coop_forward_asked,
                                                         s.coop_stored};
                             },
                             o.node_id);
  // The metrics read the commands above (a copy: the server takes these).
  metrics_ = NodeMetrics(MetricSources{.node_id = o.node_id,
                                       .commands = std::make_shared<control::Dispatcher>(commands),
                                       .fuse_ops = fuse_ops_.get(),
                                       .vds = &node_->vd_service(),
                                       .dir_ops = &node_->dir_ops(),
                                       .transport = counting_});
  if (!o.metrics.listen.empty()) {
    auto endpoint = metrics::Endpoint::Start(o.metrics.listen, metrics_.get());
    if (!endpoint) return Err(endpoint.error().code, endpoint.error().context);
    metrics_endpoint_ = std::move(*endpoint);
    Logger("daemon")->info("metrics at http://{}/metrics", metrics_endpoint_->address());
  }
  commands.Register([m = metrics_.get(), e = metrics_endpoint_.get()](
                        const control::Request&) -> Result<control::MetricsReply> {
    return control::MetricsReply{.address = e != nullptr ? e->address() : "", .text = m->Render()};
  });
  control_ = std::make_unique<control::ControlServer>(control::ControlOptions{o.control_socket},
                                                      std::move(commands));
  if (auto s = control_->Start(); !s) return Err(s.error().code, s.error().ToString());
  return Ok();
}

Status Daemon::StartWatcher(const DaemonOptions& o) {
  if (!o.autonomy.watch) return Ok();
  ns::LocalWatchOptions wo{.max_watches = o.autonomy.max_watches};
  node::Node* n = node_.get();
  wo.on_attr = [n, kernel_attrs = o.fuse.kernel_cache](const std::string& path) {
    n->LocalAttrsChanged(path, kernel_attrs);
  };
  auto watch = ns::LocalWatch::Start(
      o.export_root, std::move(wo),
      [n](std::vector<ns::LocalChange> changes) { n->ReportLocalChanges(std::move(changes)); },
      [n](std::vector<std::string> dirs) { n->DropLostDirs(std::move(dirs)); });
  if (!watch) {
    return Err(watch.error().code,
               "watching export root " + o.export_root + ": " + watch.error().ToString());
  }
  watch_ = std::move(*watch);
  watching_->store(watch_.get(), std::memory_order_release);
  if (auto s = watch_->Watch("/"); !s) {
    Logger("daemon")->warn("cannot watch the export root: {}", s.error().ToString());
  }
  return Ok();
}

Status Daemon::Mount(const DaemonOptions& o) {
  if (!o.fuse.mount) return Ok();
  fuse::FuseOptions fo;
  fo.mountpoint = o.mountpoint;
  fo.allow_other = o.fuse.allow_other;
  fo.default_permissions = o.fuse.default_permissions;
  fo.max_threads = o.fuse.max_threads;
  fo.read_ahead_kb = o.fuse.read_ahead_kb;
  fo.spin_us = o.fuse.spin_us;
  fo.io_uring = o.fuse.io_uring;
  fo.explicit_inval_data = o.fuse.kernel_cache;  // the node tells of every change
  fo.metrics = fuse_ops_.get();
  // umount of the namespace stops the daemon, cleanly, as SIGTERM does
  // (main.cc waits for it): what an fstab mount's umount means.
  fo.on_unmounted = [] { ::kill(::getpid(), SIGTERM); };
  auto mount = fuse::FuseMount::Mount(fo, &node_->vfs());
  if (!mount) return Err(mount.error().code, mount.error().context);
  mount_ = std::move(*mount);
  if (o.fuse.kernel_cache) {
    // (Names and attributes go out cacheable once the INIT handshake said
    // the kernel takes the invalidations.)
    kernel_ = mount_->kernel_cache();
    node_->SetKernelCache(kernel_.get());
  }
  return Ok();
}

std::string Daemon::FuseConnection() const { return mount_ ? mount_->connection_id() : ""; }

Result<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& o) {
  std::unique_ptr<Daemon> d(new Daemon());
  using Step = Status (Daemon::*)(const DaemonOptions&);
  for (Step step : {&Daemon::LoadClusterKey,
                    &Daemon::DropPrivileges,   // before any thread exists
                    &Daemon::StartTransport,   // the UCX transport (not listening yet)
                    &Daemon::StartMembership,  // its handlers, the cluster view
                    &Daemon::OpenExportRoot,   // LocalNodeFs, the journal's RocksDB
                    &Daemon::StartNamespace,   // the node's parts (node/node.h)
                    &Daemon::RecoverMoves,     // file moves of a past life: held first
                    &Daemon::Listen,           // peers may call from now on
                    &Daemon::StartControl,     // the control socket
                    &Daemon::StartWatcher,     // autonomy
                    &Daemon::StartMembershipProtocol,
                    &Daemon::RecoverJournal,   // directory operations of a past life
                    &Daemon::ApplyPending,     // what it missed while dead, before mounting
                    &Daemon::Mount}) {         // the FUSE mount
    if (Status s = ((*d).*step)(o); !s) {
      d->Stop();
      return Err(s.error());
    }
  }
  d->node_->StartAccessTrigger();  // moves files for their accesses (when on)
  Logger("daemon")->info("started: incarnation {:016x}, {} seed(s), heartbeat {} ms, failure timeout {} ms",
            d->membership_->incarnation(), o.peers.size(), o.timeouts.heartbeat_interval.count(),
            o.timeouts.failure_timeout.count());
  return d;
}

Status Daemon::StartMembershipProtocol(const DaemonOptions&) {
  membership_->Start();
  return Ok();
}

Status Daemon::RecoverMoves(const DaemonOptions&) {
  if (auto s = node_->RecoverMoves(); !s) {
    return Err(s.error().code, "file moves' journal: " + s.error().ToString());
  }
  return Ok();
}

Status Daemon::RecoverJournal(const DaemonOptions&) {
  // Test hook: a pause between listening and the rest of the recovery
  // (FEDFS_TEST_PAUSE_AT=daemon:listening+MS).
  static const ns::DirOpsHooks pause = ns::PauseHooksFromEnv();
  if (pause.at_step) pause.at_step("daemon:listening");
  if (auto s = node_->Recover(); !s) {
    return Err(s.error().code, "journal recovery: " + s.error().ToString());
  }
  return Ok();
}

Status Daemon::ApplyPending(const DaemonOptions& o) {
  // Directory operations made while this node was dead (docs/faults.md,
  // "Directory operations with dead members"): applied before the mount
  // lists anything. The others hold this node dead and tell it on contact
  // anyway; asking now closes the moment in between. Waits for the join
  // (at most the failure timeout; alone, or without records: not at all).
  if (o.peers.empty() || !o.directory_ops.record_dead_members) return Ok();
  const auto until = std::chrono::steady_clock::now() + o.timeouts.failure_timeout;
  while (cluster_->Current()->live.size() < 2 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (auto s = node_->pending().ApplyOwn(); !s) {
    Logger("daemon")->warn("applying what this node missed: {} (tried again when told)",
                           s.error().ToString());
  }
  return Ok();
}

Daemon::~Daemon() { Stop(); }

void Daemon::Stop() {
  // Nothing invalidates the kernel's caches from now on (the notifier itself
  // lives on in kernel_ for calls already in flight).
  if (node_) node_->SetKernelCache(nullptr);
  // The mount goes first, while the transport still serves its requests.
  if (mount_) {
    mount_->Unmount();
    mount_.reset();
  }
  // Scrapes read every part: they end before any part does.
  if (metrics_endpoint_) metrics_endpoint_->Stop();
  if (control_) control_->Stop();
  // The watcher reports to the VD service: it stops first.
  watching_->store(nullptr, std::memory_order_release);
  watch_.reset();
  // Remote sessions say goodbye while the transport is up.
  if (node_) node_->StopClients();
  kv_.reset();
  if (membership_) membership_->Stop();
  if (transport_) transport_->Shutdown();
  // No handler runs after Shutdown: drain the pools, then the services.
  callbacks_pool_.reset();
  unlinks_pool_.reset();
  pool_.reset();
  if (local_fs_) local_fs_->SetAttrObserver(nullptr);
  node_.reset();
}

}  // namespace fedfs::daemon
