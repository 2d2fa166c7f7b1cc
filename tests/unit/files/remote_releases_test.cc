// RemoteNodeFs::ReleaseLater (files/remote_node_fs.h, "Releases"): a late
// release travels with the session's next request, or in a release of its
// own after release_delay, or at once when release_batch are waiting; the
// server closes such handles before it runs the request. Without Timers,
// or for a RemoteNodeFs not owned by a shared_ptr, it is Release.
#include "tests/unit/files/remote_fs_fixture.h"

#include "common/timers.h"

namespace fedfs::ns {
namespace {

class RemoteReleasesTest : public RemoteFsTest {
 protected:
  std::shared_ptr<RemoteNodeFs> MakeShared(std::chrono::milliseconds delay, size_t batch) {
    RemoteNodeFsOptions o;
    o.local_node = "client";
    o.local_address = client_.addr;
    o.slot_count = 4;
    o.rpc_timeout = 10s;
    o.timers = &timers_;
    o.release_delay = delay;
    o.release_batch = batch;
    return std::make_shared<RemoteNodeFs>("server", client_.transport->GetEndpoint(server_addr_),
                                          client_.transport.get(), o);
  }
  Handle CreateFile(RemoteNodeFs& fs, const std::string& path) {
    auto f = fs.Create(me_, path, O_RDWR, 0644);
    EXPECT_TRUE(f) << f.error().ToString();
    return f ? f->handle : Handle{};
  }
  uint64_t Handles() { return service_->stats().handles; }
  uint64_t Served() { return service_->stats().served; }

  Timers timers_{"test-releases"};
};

TEST_P(RemoteReleasesTest, ALateReleaseTravelsWithTheNextRequest) {
  auto fs = MakeShared(1h, 64);
  const Handle h = CreateFile(*fs, "/a");
  ASSERT_EQ(Handles(), 1u);
  const uint64_t served = Served();
  ASSERT_TRUE(fs->ReleaseLater(h));
  EXPECT_EQ(Handles(), 1u) << "released at once";
  EXPECT_EQ(Served(), served) << "a request of its own";
  ASSERT_TRUE(fs->Stat(me_, "/a"));
  EXPECT_EQ(Handles(), 0u) << "not released with the stat";
  EXPECT_EQ(Served(), served + 1);
  // The handle is closed: the server no longer knows it.
  std::vector<std::byte> buf(4);
  auto r = fs->Read(h, 0, buf);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EBADF);
}

TEST_P(RemoteReleasesTest, ALateReleaseIsSentAfterTheDelayWithoutOtherRequests) {
  auto fs = MakeShared(50ms, 64);
  const Handle a = CreateFile(*fs, "/a");
  const Handle b = CreateFile(*fs, "/b");
  ASSERT_EQ(Handles(), 2u);
  const uint64_t served = Served();
  ASSERT_TRUE(fs->ReleaseLater(a));
  ASSERT_TRUE(fs->ReleaseLater(b));
  // The server closes the handles before it counts the request served:
  // both are waited for (the count stopped at the first under load once).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((Handles() != 0 || Served() == served) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(Handles(), 0u);
  std::this_thread::sleep_for(100ms);  // a second release, had there been one, is counted too
  EXPECT_EQ(Served(), served + 1) << "both in one release";
}

TEST_P(RemoteReleasesTest, AFullBatchIsSentAtOnce) {
  auto fs = MakeShared(1h, 4);
  std::vector<Handle> hs;
  for (int i = 0; i < 4; ++i) hs.push_back(CreateFile(*fs, "/f" + std::to_string(i)));
  ASSERT_EQ(Handles(), 4u);
  const uint64_t served = Served();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(fs->ReleaseLater(hs[i]));
  EXPECT_EQ(Handles(), 4u);
  ASSERT_TRUE(fs->ReleaseLater(hs[3]));
  EXPECT_EQ(Handles(), 0u);
  EXPECT_EQ(Served(), served + 1);
}

TEST_P(RemoteReleasesTest, ReleasesWaitingAtTheEndGoWithTheSession) {
  auto fs = MakeShared(1h, 64);
  ASSERT_TRUE(fs->ReleaseLater(CreateFile(*fs, "/a")));
  ASSERT_EQ(Handles(), 1u);
  fs.reset();  // its goodbye ends the session, which releases its handles
  EXPECT_EQ(Handles(), 0u);
}

TEST_P(RemoteReleasesTest, WithoutTimersOrASharedOwnerItIsRelease) {
  // Without Timers.
  RemoteNodeFsOptions o;
  auto plain = std::shared_ptr<RemoteNodeFs>(MakeRemote(client_, o));
  ASSERT_TRUE(plain->ReleaseLater(CreateFile(*plain, "/a")));
  EXPECT_EQ(Handles(), 0u);
  // With Timers, but owned by a unique_ptr (no one to keep it alive for the
  // timer): released at once.
  o.timers = &timers_;
  auto owned = MakeRemote(client_, o);
  ASSERT_TRUE(owned->ReleaseLater(CreateFile(*owned, "/b")));
  EXPECT_EQ(Handles(), 0u);
}

// A release request carrying more handles than the server takes is refused
// whole (nothing runs), as any malformed request.
TEST_P(RemoteReleasesTest, TooManyReleasesInOneRequestAreRefused) {
  auto fs = MakeShared(1h, 64);
  ASSERT_TRUE(fs->Stat(me_, "/"));  // the session exists
  flatbuffers::FlatBufferBuilder b(64);
  std::vector<uint64_t> many(fswire::kMaxReleases + 1, 12345);
  auto rel = b.CreateVector(many);
  fb::FsRequestBuilder rb(b);
  rb.add_version(fswire::kVersion);
  rb.add_op(fb::Op::kRelease);
  rb.add_releases(rel);
  b.Finish(rb.Finish());
  const uint64_t refused = service_->stats().refused;
  auto r = m2m::CallSync(*client_.transport->GetEndpoint(server_addr_),
                         MethodId(RpcMethod::kFsMeta), fswire::Finish(b), 5s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EPROTO);
  EXPECT_EQ(service_->stats().refused, refused + 1);
}

INSTANTIATE_TEST_SUITE_P(Nets, RemoteReleasesTest, ::testing::Values(Net::kFake, Net::kUcx),
                         NetName);

}  // namespace
}  // namespace fedfs::ns
