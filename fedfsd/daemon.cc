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
#include "node/node.h"
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
  transport_ = std::move(*transport);
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
  auto kv = ns::OpenRocksDbKv({o.state_dir});
  if (!kv) return Err(kv.error().code, "state_dir " + o.state_dir + ": " + kv.error().ToString());
  kv_ = std::move(*kv);
  return Ok();
}

Status Daemon::StartNamespace(const DaemonOptions& o) {
  pool_ = std::make_unique<ThreadPool>(8, "blocking");
  node::NodeOptions no;
  no.node_id = o.node_id;
  no.address = o.listen;
  no.rpc_timeout = o.timeouts.rpc;
  no.dt_entries = o.directory_table.entries;
  no.dt_bytes = o.directory_table.bytes;
  no.files.root_squash = o.security.root_squash;
  no.files.squash_uid = o.security.squash_uid;
  no.files.squash_gid = o.security.squash_gid;
  no.vfs.entry_timeout = o.fuse.entry_timeout_s;
  no.vfs.attr_timeout = o.fuse.attr_timeout_s;
  // The watcher reports direct changes of files' attributes at once; without
  // it they would show only when the kernel's copy times out.
  if (o.autonomy.watch) no.vfs.coherent_file_attr_timeout = 10;
  no.vfs.node_tag = static_cast<uint16_t>(o.node_tag);
  no.placement = PlacementFrom(o.placement);
  no.remote_callbacks = o.fuse.kernel_cache;
  no.dir_ops_hooks = ns::PauseHooksFromEnv();
  // The watcher starts after the services it reports to; until then (and
  // after Stop) `watching` is null.
  no.on_local_listing = [watching = watching_](const std::string& path) {
    if (ns::LocalWatch* w = watching->load(std::memory_order_acquire)) {
      if (auto s = w->Watch(path); !s && s.error().code != ENOENT) {
        Logger("autonomy")->warn("cannot watch {}: {}", path, s.error().ToString());
      }
    }
  };
  node::NodeEnv env;
  env.transport = transport_.get();
  env.cluster = cluster_.get();
  env.local = local_fs_.get();
  env.kv = kv_.get();
  env.pool = pool_.get();
  env.tag_of = [m = membership_.get()](const std::string& node) { return m->TagOf(node); };
  auto n = node::Node::Create(std::move(no), std::move(env));
  if (!n) return Err(n.error().code, n.error().context);
  node_ = std::move(*n);
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
  control_ = std::make_unique<ControlServer>(
      ControlOptions{o.control_socket}, [m = membership_.get()] { return m->Snapshot(); },
      [n = node_.get(), self = o.node_id](const std::string& line) {
        if (auto r = HandleFilesRequest(line, n->file_service(), n->fs_callbacks(), self)) return r;
        return HandleNamespaceRequest(line, &n->vfs(), &n->vd_service(), self);
      });
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

Result<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& o) {
  std::unique_ptr<Daemon> d(new Daemon());
  using Step = Status (Daemon::*)(const DaemonOptions&);
  for (Step step : {&Daemon::LoadClusterKey,
                    &Daemon::DropPrivileges,   // before any thread exists
                    &Daemon::StartTransport,   // the UCX transport (not listening yet)
                    &Daemon::StartMembership,  // its handlers, the cluster view
                    &Daemon::OpenExportRoot,   // LocalNodeFs, the journal's RocksDB
                    &Daemon::StartNamespace,   // the node's parts (node/node.h)
                    &Daemon::Listen,           // peers may call from now on
                    &Daemon::StartControl,     // the control socket
                    &Daemon::StartWatcher,     // autonomy
                    &Daemon::StartMembershipProtocol,
                    &Daemon::RecoverJournal,   // directory operations of a past life
                    &Daemon::Mount}) {         // the FUSE mount
    if (Status s = ((*d).*step)(o); !s) {
      d->Stop();
      return Err(s.error());
    }
  }
  Logger("daemon")->info("started: incarnation {:016x}, {} seed(s), heartbeat {} ms, failure timeout {} ms",
            d->membership_->incarnation(), o.peers.size(), o.timeouts.heartbeat_interval.count(),
            o.timeouts.failure_timeout.count());
  return d;
}

Status Daemon::StartMembershipProtocol(const DaemonOptions&) {
  membership_->Start();
  return Ok();
}

Status Daemon::RecoverJournal(const DaemonOptions&) {
  if (auto s = node_->Recover(); !s) {
    return Err(s.error().code, "journal recovery: " + s.error().ToString());
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
  if (control_) control_->Stop();
  // The watcher reports to the VD service: it stops first.
  watching_->store(nullptr, std::memory_order_release);
  watch_.reset();
  // Remote sessions say goodbye while the transport is up.
  if (node_) node_->StopClients();
  kv_.reset();
  if (membership_) membership_->Stop();
  if (transport_) transport_->Shutdown();
  // No handler runs after Shutdown: drain the pool, then the services.
  pool_.reset();
  if (local_fs_) local_fs_->SetAttrObserver(nullptr);
  node_.reset();
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
