// The daemon's wiring: the one place that names concrete implementations
// (the UCX transport, LocalNodeFs, RocksDB, the FUSE frontend, inotify), builds
// them from the config and starts them; the node's parts and the policy
// between them are node/node.h's. main.cc owns one Daemon; integration tests
// run the fedfsd binary.
//
// Threads: Start and Stop are called by the main thread. The transport, the
// membership, the control server, the blocking pool (services) and the FUSE
// loop each own their threads.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "cluster/membership.h"
#include "common/result.h"
#include "control/server.h"
#include "fedfsd/options.h"
#include "m2m/transport.h"

namespace fedfs {
class ThreadPool;
namespace fuse {
class FuseMount;
class OpMetrics;
}
namespace m2m {
class CountingTransport;
}
namespace metrics {
class Registry;
class Endpoint;
}
namespace node {
class Node;
}
namespace ns {
class LocalNodeFs;
class LocalWatch;
class ClusterViewSource;
class Kv;
class KernelCache;
}  // namespace ns
}  // namespace fedfs

namespace fedfs::daemon {

// Checks that nothing listens on (or holds) the TCP address "host:port", by
// binding a probe socket (SO_REUSEADDR, like a listener) and closing it.
// EADDRINUSE with "address H:P is already in use"; EADDRNOTAVAIL when the host
// is not an address of this machine; the error context is one line.
Status CheckListenAddressFree(const std::string& listen);

// Checks that the mountpoint can be mounted on (when the config mounts): an
// existing directory and not a dead FUSE mount; for a stale mount the error's
// one-line context tells the user to run `fusermount3 -u <mountpoint>`.
Status CheckMountpointUsable(const DaemonOptions& options);

// fedfsd --clear-stale-mount: a stale mount of FedFS's own at the config's
// mountpoint (its daemon killed) is detached (fuse/fuse_frontend.h,
// ClearStaleMount); *cleared says whether there was one.
Status ClearStaleMountpoint(const DaemonOptions& options, bool* cleared);

class Daemon {
 public:
  // Creates the transport, listens, starts membership and the control
  // socket. On failure everything started is stopped again and the error's
  // context is one line naming what failed.
  static Result<std::unique_ptr<Daemon>> Start(const DaemonOptions& options);

  ~Daemon();  // Stop()

  // Unmounts the namespace, stops the control socket (and removes it),
  // membership, then the transport. Idempotent.
  void Stop();

  std::shared_ptr<const MembershipView> Snapshot() const { return membership_->Snapshot(); }

  // The mount's FUSE connection (fuse::FuseMount::connection_id); empty
  // without a mount or after Stop.
  std::string FuseConnection() const;

 private:
  Daemon();

  // The steps of Start, in order (daemon.cc).
  Status LoadClusterKey(const DaemonOptions& o);
  Status DropPrivileges(const DaemonOptions& o);
  Status StartTransport(const DaemonOptions& o);
  Status StartMembership(const DaemonOptions& o);
  Status OpenExportRoot(const DaemonOptions& o);
  Status StartNamespace(const DaemonOptions& o);
  Status Listen(const DaemonOptions& o);
  Status StartControl(const DaemonOptions& o);
  Status StartWatcher(const DaemonOptions& o);
  Status StartMembershipProtocol(const DaemonOptions& o);
  Status RecoverMoves(const DaemonOptions& o);
  Status RecoverJournal(const DaemonOptions& o);
  Status ApplyPending(const DaemonOptions& o);
  Status Mount(const DaemonOptions& o);

  // Destroyed in reverse order; Stop() orders the shutdown explicitly.
  m2m::Bytes cluster_key_;  // until the transport takes it
  std::shared_ptr<ns::KernelCache> kernel_;  // the mount's; outlives it
  std::unique_ptr<m2m::Transport> transport_;
  m2m::CountingTransport* counting_ = nullptr;  // transport_, counting by peer
  // The mount's requests, counted and timed (outlives the mount).
  std::unique_ptr<fuse::OpMetrics> fuse_ops_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<ns::ClusterViewSource> cluster_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ThreadPool> callbacks_pool_;  // the holders' change callbacks
  std::unique_ptr<ThreadPool> unlinks_pool_;    // unlinks made for other nodes (NodeEnv)
  std::unique_ptr<ns::LocalNodeFs> local_fs_;
  std::unique_ptr<ns::Kv> kv_;
  bool restarted_ = false;  // the state dir was there: a process of this node ran before
  std::unique_ptr<node::Node> node_;
  std::unique_ptr<ns::LocalWatch> watch_;
  // The watcher, for callbacks that may run before it starts or after it
  // stopped (then null).
  std::shared_ptr<std::atomic<ns::LocalWatch*>> watching_ =
      std::make_shared<std::atomic<ns::LocalWatch*>>(nullptr);
  std::unique_ptr<fuse::FuseMount> mount_;
  std::unique_ptr<control::ControlServer> control_;
  std::unique_ptr<metrics::Registry> metrics_;
  std::unique_ptr<metrics::Endpoint> metrics_endpoint_;
};

}  // namespace fedfs::daemon
