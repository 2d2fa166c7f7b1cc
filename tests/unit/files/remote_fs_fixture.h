// The RemoteNodeFs test fixture: one FileService over a LocalNodeFs on a
// temp dir, and clients over the fake network (real-time mode) or UCX over
// TCP on loopback. Included by remote_node_fs_test.cc and
// remote_releases_test.cc (each has its own copy: an anonymous namespace).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "tests/tools/log_capture.h"
#include <spdlog/sinks/base_sink.h>

#include "common/executor.h"
#include "common/logging.h"
#include "common/rpc_methods.h"
#include "m2m/auth.h"
#include "m2m/fake_network.h"
#include "m2m/ucx_transport.h"
#include "files/file_service.h"
#include "files/fs_wire.h"
#include "nodefs/local_node_fs.h"
#include "files/remote_node_fs.h"

namespace fedfs::ns {
namespace {

namespace fb = fswire::fb;
using namespace std::chrono_literals;

// Captures the "fs" logger.
inline ::fedfs::testing::LogCapture& FsLogSinkGet() { return ::fedfs::testing::LogCapture::For("fs"); }

enum class Net { kFake, kUcx };

inline std::string NetName(const ::testing::TestParamInfo<Net>& p) {
  return p.param == Net::kFake ? "Fake" : "Ucx";
}

inline m2m::TransportOptions TOpts() {
  m2m::TransportOptions o;
  o.cluster_key = m2m::Bytes(m2m::kClusterKeyBytes, std::byte{7});
  o.connect_timeout = 3s;
  return o;
}

inline std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

// One server (FileService over LocalNodeFs on a temp dir) and clients.
class RemoteFsTest : public ::testing::TestWithParam<Net> {
 protected:
  void SetUp() override {
    FsLogSinkGet();
    // Disk-backed, like the mount suites' dirs (FEDFS_TEST_TMPDIR, else /var/tmp).
    const char* env = std::getenv("FEDFS_TEST_TMPDIR");
    std::string tmpl = std::string(env && *env ? env : "/var/tmp") + "/fedfs-remote-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    ASSERT_EQ(::chmod(root_.c_str(), 0755), 0);  // other users may traverse it
    auto l = LocalNodeFs::Open("server", root_);
    ASSERT_TRUE(l) << l.error().ToString();
    local_ = std::move(*l);
    if (GetParam() == Net::kFake) net_ = std::make_unique<m2m::FakeNetwork>();
    server_ = NewTransport();
    ASSERT_TRUE(server_);
    pool_ = std::make_unique<ThreadPool>(4, "fs-test");
    FileServiceOptions so;
    so.slot_count = 8;
    so.max_watches_per_session = 3;  // small: WatchedStatsAreToldOfChangesAndOfTheirEnd
    ServiceOptions(so);
    service_ = std::make_unique<FileService>(so, server_.get(), local_.get(), pool_.get());
    ASSERT_TRUE(service_->RegisterHandlers());
    auto a = server_->Listen(GetParam() == Net::kFake ? "server:0" : "127.0.0.1:0");
    ASSERT_TRUE(a) << a.error().ToString();
    server_addr_ = *a;
    client_ = NewClient();
    ASSERT_TRUE(client_.transport);
    remote_ = MakeRemote(client_);
  }

  // Changes the server's options before it starts (subclasses).
  virtual void ServiceOptions(FileServiceOptions& so) { (void)so; }

  void TearDown() override {
    remote_.reset();
    extra_remotes_.clear();
    for (auto* c : {&client_, &client2_}) {
      if (c->transport) c->transport->Shutdown();
    }
    if (server_) server_->Shutdown();
    pool_.reset();
    service_.reset();
    client_.transport.reset();
    client2_.transport.reset();
    server_.reset();
    net_.reset();
    local_.reset();
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }

  std::unique_ptr<m2m::Transport> NewTransport() {
    if (net_) return net_->NewTransport(TOpts());
    m2m::UcxOptions u;
    u.tls = "tcp";
    u.net_devices = "lo";
    auto t = m2m::MakeUcxTransport(u, TOpts());
    EXPECT_TRUE(t) << t.error().ToString();
    return t ? std::move(*t) : nullptr;
  }

  struct Client {
    std::unique_ptr<m2m::Transport> transport;
    std::string addr;
  };
  // `before_listen` installs handlers on the new transport (FsCallbacks).
  Client NewClient(const std::function<void(m2m::Transport*)>& before_listen = {}) {
    Client c;
    c.transport = NewTransport();
    if (!c.transport) return c;
    if (before_listen) before_listen(c.transport.get());
    auto a = c.transport->Listen(net_ ? "client:0" : "127.0.0.1:0");
    EXPECT_TRUE(a);
    if (a) c.addr = *a;
    return c;
  }
  // The FsAttrChanged a client took: (node, handles) each.
  struct Told {
    std::mutex mu;
    std::vector<std::pair<std::string, std::vector<Handle>>> calls;
    std::vector<DataRange> ranges;  // of each call
    DataRange range_at(size_t i) {
      std::lock_guard lock(mu);
      return ranges.at(i);
    }
    size_t count() {
      std::lock_guard lock(mu);
      return calls.size();
    }
    std::pair<std::string, std::vector<Handle>> at(size_t i) {
      std::lock_guard lock(mu);
      return calls.at(i);
    }
  };
  // A client whose transport takes FsAttrChanged (recorded in `told`), with
  // a RemoteNodeFs that asks for them; the server's LocalNodeFs reports its
  // own changes to the service.
  struct CallbackClient {  // members in the order they must outlive each other
    std::unique_ptr<Told> told = std::make_unique<Told>();
    std::unique_ptr<FsCallbacks> callbacks;
    Client client;
    std::unique_ptr<RemoteNodeFs> fs;
  };
  CallbackClient NewCallbackClient() {
    CallbackClient c;
    Told* told = c.told.get();
    c.client = NewClient([&](m2m::Transport* t) {
      c.callbacks = std::make_unique<FsCallbacks>(
          t, [told](const std::string& node, const std::vector<Handle>& handles, DataRange data,
                    bool) {
            std::lock_guard lock(told->mu);
            told->calls.emplace_back(node, handles);
            told->ranges.push_back(data);
          });
    });
    if (!c.client.transport || c.client.addr.empty()) {
      ADD_FAILURE() << "no callback client";
      return c;
    }
    local_->SetAttrObserver(service_.get());
    RemoteNodeFsOptions o;
    o.callbacks = c.callbacks.get();
    c.fs = MakeRemote(c.client, o);
    return c;
  }

  std::unique_ptr<RemoteNodeFs> MakeRemote(Client& c, RemoteNodeFsOptions o = {}) {
    o.local_node = "client";
    if (o.local_address.empty()) o.local_address = c.addr;
    o.slot_count = 4;
    if (o.rpc_timeout == 5000ms) o.rpc_timeout = 10s;
    return std::make_unique<RemoteNodeFs>("server", c.transport->GetEndpoint(server_addr_),
                                          c.transport.get(), o);
  }

  std::string P(const std::string& rel) { return root_ + rel; }

  std::string root_;
  std::unique_ptr<LocalNodeFs> local_;
  std::unique_ptr<m2m::FakeNetwork> net_;
  std::unique_ptr<m2m::Transport> server_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<FileService> service_;
  std::string server_addr_;
  Client client_, client2_;
  std::unique_ptr<RemoteNodeFs> remote_;
  std::vector<std::unique_ptr<RemoteNodeFs>> extra_remotes_;
  Cred me_{};  // root, umask 0
};

inline void ExpectSameStat(const struct stat& a, const struct stat& b) {
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_mode, b.st_mode);
  EXPECT_EQ(a.st_nlink, b.st_nlink);
  EXPECT_EQ(a.st_uid, b.st_uid);
  EXPECT_EQ(a.st_gid, b.st_gid);
  EXPECT_EQ(a.st_size, b.st_size);
  EXPECT_EQ(a.st_mtim.tv_sec, b.st_mtim.tv_sec);
  EXPECT_EQ(a.st_mtim.tv_nsec, b.st_mtim.tv_nsec);
}

inline struct stat Lstat(const std::string& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st;
}

inline int LstatErrno(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 ? 0 : errno;
}

}  // namespace
}  // namespace fedfs::ns
