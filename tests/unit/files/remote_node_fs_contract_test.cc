// The NodeFs contract suite (node_fs_contract.h) run against RemoteNodeFs:
// a FileService over LocalNodeFs on one transport, the RemoteNodeFs on
// another, over the fake network (real-time mode) and over UCX on loopback.
#include <memory>
#include <string>

#include "common/executor.h"
#include "m2m/auth.h"
#include "m2m/fake_network.h"
#include "m2m/ucx_transport.h"
#include "files/file_service.h"
#include "nodefs/local_node_fs.h"
#include "files/remote_node_fs.h"
#include "tests/unit/nodefs/node_fs_contract.h"

namespace fedfs::ns::testing {
namespace {

using namespace std::chrono_literals;

class RemoteEnv final : public NodeFsEnv {
 public:
  explicit RemoteEnv(bool ucx) {
    root_ = MakeTempDir("fedfs-remote-contract");
    auto l = LocalNodeFs::Open("server", root_);
    EXPECT_TRUE(l) << l.error().ToString();
    local_ = std::move(*l);
    if (!ucx) net_ = std::make_unique<m2m::FakeNetwork>();
    server_ = NewTransport();
    client_ = NewTransport();
    pool_ = std::make_unique<ThreadPool>(4, "fs-contract");
    service_ = std::make_unique<FileService>(FileServiceOptions{}, server_.get(), local_.get(),
                                             pool_.get());
    EXPECT_TRUE(service_->RegisterHandlers());
    auto sa = server_->Listen(ucx ? "127.0.0.1:0" : "server:0");
    auto ca = client_->Listen(ucx ? "127.0.0.1:0" : "client:0");
    EXPECT_TRUE(sa && ca);
    RemoteNodeFsOptions o;
    o.rpc_timeout = 10s;
    o.local_node = "client";
    o.local_address = *ca;
    o.slot_count = 4;
    remote_ = std::make_unique<RemoteNodeFs>("server", client_->GetEndpoint(*sa), client_.get(), o);
  }
  ~RemoteEnv() override {
    remote_.reset();
    client_->Shutdown();
    server_->Shutdown();
    pool_.reset();
    service_.reset();
    client_.reset();
    server_.reset();
    net_.reset();
    local_.reset();
    RemoveTree(root_);
  }
  NodeFs& fs() override { return *remote_; }
  std::string root() override { return root_; }

 private:
  std::unique_ptr<m2m::Transport> NewTransport() {
    m2m::TransportOptions t;
    t.cluster_key = m2m::Bytes(m2m::kClusterKeyBytes, std::byte{9});
    if (net_) return net_->NewTransport(t);
    // Built in one initializer: assigning the strings one by one draws a
    // false -Wmaybe-uninitialized from GCC 12 at -O3 (small-string copy).
    m2m::UcxOptions u{.tls = "tcp", .net_devices = "lo"};
    auto r = m2m::MakeUcxTransport(u, t);
    EXPECT_TRUE(r) << r.error().ToString();
    return std::move(*r);
  }

  std::string root_;
  std::unique_ptr<LocalNodeFs> local_;
  std::unique_ptr<m2m::FakeNetwork> net_;
  std::unique_ptr<m2m::Transport> server_, client_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<FileService> service_;
  std::unique_ptr<RemoteNodeFs> remote_;
};

INSTANTIATE_TEST_SUITE_P(
    Remote, NodeFsContract,
    ::testing::Values(
        NodeFsEnvFactory{"fake", [] { return std::unique_ptr<NodeFsEnv>(new RemoteEnv(false)); }},
        NodeFsEnvFactory{"ucx", [] { return std::unique_ptr<NodeFsEnv>(new RemoteEnv(true)); }}),
    NodeFsEnvName);

}  // namespace
}  // namespace fedfs::ns::testing
