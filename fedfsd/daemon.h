// The daemon's wiring: the one place that names concrete implementations
// (the UCX transport, LocalNodeFs, RemoteNodeFs, the VD and file services,
// VfsImpl, the FUSE frontend) and connects them with membership and the
// control socket. main.cc owns one Daemon; integration tests run the fedfsd
// binary.
//
// Threads: Start and Stop are called by the main thread. The transport, the
// membership, the control server, the blocking pool (services) and the FUSE
// loop each own their threads.
#pragma once

#include <atomic>
#include <memory>
#include <shared_mutex>
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
}
namespace ns {
class LocalNodeFs;
class FileService;
class FsCallbacks;
class VdService;
class LocalWatch;
class VfsImpl;
class VdClient;
class ClusterViewSource;
class DirOps;
class DirOpsClient;
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

 private:
  Daemon();

  // Destroyed in reverse order; Stop() orders the shutdown explicitly.
  // What callbacks made before the services exist (or after they stopped)
  // reach: the kernel's caches and the Vfs, null outside [mount, Stop).
  struct Hooks {
    std::atomic<ns::KernelCache*> kernel{nullptr};
    std::shared_mutex vfs_mu;  // held (shared) while `vfs` is used: Stop waits
    ns::VfsImpl* vfs = nullptr;
  };
  std::shared_ptr<Hooks> hooks_ = std::make_shared<Hooks>();
  std::shared_ptr<ns::KernelCache> kernel_;  // the mount's; outlives it
  std::unique_ptr<m2m::Transport> transport_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<ns::ClusterViewSource> cluster_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ns::LocalNodeFs> local_fs_;
  std::unique_ptr<ns::FileService> file_service_;
  std::unique_ptr<ns::FsCallbacks> fs_callbacks_;
  std::unique_ptr<ns::VdService> vd_service_;
  std::unique_ptr<ns::LocalWatch> watch_;
  // The watcher, for callbacks that may run before it starts or after it
  // stopped (then null).
  std::shared_ptr<std::atomic<ns::LocalWatch*>> watching_ =
      std::make_shared<std::atomic<ns::LocalWatch*>>(nullptr);
  std::unique_ptr<ns::VdClient> vd_client_;
  std::unique_ptr<ns::VfsImpl> vfs_;
  std::unique_ptr<ns::Kv> kv_;
  std::unique_ptr<ns::DirOps> dir_ops_;
  std::unique_ptr<ns::DirOpsClient> dir_ops_client_;
  std::unique_ptr<fuse::FuseMount> mount_;
  std::unique_ptr<control::ControlServer> control_;
};

}  // namespace fedfs::daemon
