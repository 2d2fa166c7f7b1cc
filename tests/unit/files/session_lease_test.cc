// Sessions as leases (files/file_service.h, session_lease): a client that
// renews (RemoteNodeFs with Timers, owned by a shared_ptr) keeps its handles
// through idle periods many leases long; one that vanished without a goodbye
// (here: a RemoteNodeFs that cannot renew and is left alone) loses its
// session after the lease, with its handles and the locks they held, and its
// next request works again in a new session (old handles: EBADF).
#include <sys/file.h>

#include <functional>
#include <thread>

#include "common/timers.h"
#include "tests/unit/files/remote_fs_fixture.h"

namespace fedfs::ns {
namespace {

constexpr auto kLease = 300ms;

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds bound) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

class SessionLeaseTest : public RemoteFsTest {
 protected:
  void ServiceOptions(FileServiceOptions& so) override { so.session_lease = kLease; }
  std::shared_ptr<RemoteNodeFs> MakeRenewing() {
    RemoteNodeFsOptions o;
    o.local_node = "client";
    o.local_address = client_.addr;
    o.slot_count = 4;
    o.rpc_timeout = 10s;
    o.timers = &timers_;
    return std::make_shared<RemoteNodeFs>("server", client_.transport->GetEndpoint(server_addr_),
                                          client_.transport.get(), o);
  }
  Timers timers_{"test-lease"};
};

TEST_P(SessionLeaseTest, ARenewedSessionKeepsItsHandlesWhileIdle) {
  auto fs = MakeRenewing();
  auto f = fs->Create(me_, "/kept", O_RDWR, 0644);
  ASSERT_TRUE(f) << f.error().ToString();
  const uint64_t session = fs->SessionCount();
  std::this_thread::sleep_for(4 * kLease);  // idle: only renewals
  EXPECT_EQ(service_->stats().sessions_expired, 0u);
  // Renewals continue the session: what the client caches from the server
  // stays valid (VfsImpl::AddFile keeps the kernel's pages on that).
  EXPECT_EQ(fs->SessionCount(), session);
  std::vector<std::byte> one(1, std::byte{7});
  auto w = fs->Write(f->handle, 0, one);
  ASSERT_TRUE(w) << w.error().ToString();
  ASSERT_TRUE(fs->Release(f->handle));
}

TEST_P(SessionLeaseTest, AVanishedClientsHandlesAndLocksAreReleasedAfterTheLease) {
  // remote_ cannot renew (no Timers): as a client that went silent.
  auto f = remote_->Create(me_, "/held", O_RDWR, 0644);
  ASSERT_TRUE(f) << f.error().ToString();
  ASSERT_TRUE(remote_->Flock(f->handle, 1, LOCK_EX | LOCK_NB));
  const int local = ::open(P("/held").c_str(), O_RDWR);
  ASSERT_GE(local, 0);
  EXPECT_EQ(::flock(local, LOCK_EX | LOCK_NB), -1) << "the client's lock holds";
  EXPECT_EQ(service_->stats().handles, 1u);
  // Ended within the lease and one sweep (a quarter of it).
  ASSERT_TRUE(WaitUntil([&] { return service_->stats().sessions_expired == 1; }, 10 * kLease));
  EXPECT_EQ(service_->stats().handles, 0u);
  EXPECT_EQ(service_->stats().sessions, 0u);
  EXPECT_EQ(::flock(local, LOCK_EX | LOCK_NB), 0) << "the lock went with the session";
  ::close(local);
  // The client's old handle is gone; new requests work in a new session.
  std::vector<std::byte> buf(1);
  auto r = remote_->Read(f->handle, 0, buf);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EBADF);
  EXPECT_TRUE(remote_->Stat(me_, "/held"));
}

INSTANTIATE_TEST_SUITE_P(Nets, SessionLeaseTest, ::testing::Values(Net::kFake, Net::kUcx),
                         NetName);

}  // namespace
}  // namespace fedfs::ns
