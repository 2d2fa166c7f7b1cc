// The cache lease (files/file_service.h, "Cut-off clients"): a client cut
// off from a file's node drops what it caches of that node's files by itself
// (FsCallbacks::Lost) before the node acknowledges a change it could not
// tell the client of; after the cut heals, the client's first request learns
// that it is told no more (Lost with `untold`). A renewing idle client never
// lapses, and a change told in time waits for no lease. Over the fake
// network (Partition cuts the link).
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "common/timers.h"
#include "tests/unit/files/remote_fs_fixture.h"

namespace fedfs::ns {
namespace {

constexpr auto kCacheLease = 2000ms;

bool WaitUntilTrue(const std::function<bool()>& pred, std::chrono::milliseconds bound) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

class CacheLeaseTest : public RemoteFsTest {
 protected:
  void ServiceOptions(FileServiceOptions& so) override {
    so.cache_lease = kCacheLease;
    so.callback_timeout = 200ms;
  }

  // A renewing client that takes callbacks; what it loses is recorded.
  struct Lost {
    std::mutex mu;
    std::vector<std::pair<std::chrono::steady_clock::time_point, bool>> calls;  // when, untold
    size_t count() {
      std::lock_guard lock(mu);
      return calls.size();
    }
  };
  // `split`: requests through the fixture's first client transport, the
  // callbacks to another one (inline data only), so that Partition(client2_,
  // server) cuts the connection back alone.
  void MakeClient(bool split = false) {
    client2_ = NewClient([&](m2m::Transport* t) {
      callbacks_ = std::make_unique<FsCallbacks>(
          t, [this](const std::string&, const std::vector<Handle>&, DataRange, bool) {
            told_.fetch_add(1);
          });
    });
    ASSERT_FALSE(client2_.addr.empty());
    callbacks_->SetOnLost([this](const std::string& node, bool untold) {
      EXPECT_EQ(node, "server");
      std::lock_guard lock(lost_.mu);
      lost_.calls.emplace_back(std::chrono::steady_clock::now(), untold);
    });
    local_->SetAttrObserver(service_.get());
    RemoteNodeFsOptions o;
    o.local_node = "client";
    o.local_address = client2_.addr;
    o.slot_count = split ? 0 : 4;
    o.rpc_timeout = 10s;
    o.callbacks = callbacks_.get();
    o.timers = &timers_;
    m2m::Transport* t = split ? client_.transport.get() : client2_.transport.get();
    fs_ = std::make_shared<RemoteNodeFs>("server", t->GetEndpoint(server_addr_), t, o);
  }
  void TearDown() override {
    fs_.reset();
    RemoteFsTest::TearDown();
  }
  // A change through the server's own file system (told to the client).
  std::chrono::steady_clock::duration TimedLocalWrite(const std::string& path) {
    auto h = local_->Open(me_, path, O_RDWR);
    EXPECT_TRUE(h) << h.error().ToString();
    if (!h) return {};
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::byte> one(1, std::byte{9});
    auto w = local_->Write(h->handle, 0, one, Writer{});
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_TRUE(w) << w.error().ToString();
    write_done_ = std::chrono::steady_clock::now();
    (void)local_->Release(h->handle);
    return took;
  }

  Timers timers_{"test-cache-lease"};
  std::unique_ptr<FsCallbacks> callbacks_;
  std::shared_ptr<RemoteNodeFs> fs_;
  std::atomic<uint64_t> told_{0};
  Lost lost_;
  std::chrono::steady_clock::time_point write_done_{};
};

TEST_P(CacheLeaseTest, ACutOffClientDropsItsCacheBeforeAChangeItWasNotToldOfIsAcknowledged) {
  MakeClient();
  auto f = fs_->Create(me_, "/f", O_RDWR, 0644);
  ASSERT_TRUE(f) << f.error().ToString();
  ASSERT_TRUE(f->attr_callbacks);
  const uint64_t session = fs_->SessionCount();
  net_->Partition(client2_.addr, server_addr_);
  TimedLocalWrite("/f");
  // The write waited for the client's lease, and the client had dropped
  // what it caches by then.
  EXPECT_EQ(service_->stats().callbacks_failed, 1u);
  EXPECT_EQ(service_->stats().lease_waits, 1u);
  ASSERT_EQ(lost_.count(), 1u);
  {
    std::lock_guard lock(lost_.mu);
    EXPECT_LT(lost_.calls[0].first, write_done_) << "the change was acknowledged first";
    EXPECT_FALSE(lost_.calls[0].second);
  }
  EXPECT_NE(fs_->SessionCount(), session);
  // Healed: the first request says Hello first and learns that the server
  // told it nothing more (its handles and watches are told no more).
  net_->Heal(client2_.addr, server_addr_);
  auto st = fs_->Stat(me_, "/f");
  ASSERT_TRUE(st) << st.error().ToString();
  EXPECT_EQ(st->st_size, 1);
  ASSERT_TRUE(WaitUntilTrue([&] { return lost_.count() == 2; }, 5s));
  std::lock_guard lock(lost_.mu);
  EXPECT_TRUE(lost_.calls[1].second);
}

TEST_P(CacheLeaseTest, AnIdleRenewingClientNeverLapsesAndAToldChangeWaitsForNoLease) {
  MakeClient();
  auto f = fs_->Create(me_, "/g", O_RDWR, 0644);
  ASSERT_TRUE(f) << f.error().ToString();
  const uint64_t session = fs_->SessionCount();
  std::this_thread::sleep_for(3 * kCacheLease);  // idle: renewals only
  EXPECT_EQ(lost_.count(), 0u);
  EXPECT_EQ(fs_->SessionCount(), session);
  TimedLocalWrite("/g");
  EXPECT_TRUE(WaitUntilTrue([&] { return told_.load() == 1; }, 5s));
  EXPECT_EQ(service_->stats().callbacks_failed, 0u);
  EXPECT_EQ(service_->stats().lease_waits, 0u);
  EXPECT_EQ(lost_.count(), 0u);
  ASSERT_TRUE(fs_->Release(f->handle));
}

// A callback that fails while the client reaches the server (its connection
// back broke, or it stalled): the client's requests keep being answered, so
// it never lapses by itself; its next request must learn that it is told no
// more (and drop what it caches) before it is served, or it would go on
// serving the bytes from before the change.
TEST_P(CacheLeaseTest, AClientNotToldOfAChangeLearnsItAtItsNextRequest) {
  MakeClient(/*split=*/true);
  auto f = fs_->Create(me_, "/h", O_RDWR, 0644);
  ASSERT_TRUE(f) << f.error().ToString();
  ASSERT_TRUE(f->attr_callbacks);
  // A busy client: a request every 20 ms, so no renewal is ever due.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> failed{0};
  std::thread busy([&] {
    while (!stop.load()) {
      if (!fs_->Stat(me_, "/h")) failed.fetch_add(1);
      std::this_thread::sleep_for(20ms);
    }
  });
  net_->Partition(client2_.addr, server_addr_);  // the connection back only
  TimedLocalWrite("/h");
  net_->Heal(client2_.addr, server_addr_);
  stop.store(true);
  busy.join();
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_EQ(service_->stats().callbacks_failed, 1u);
  // Its next request after the failed callback was refused until it said
  // Hello again, which told it (Lost, untold) before the change was
  // acknowledged.
  ASSERT_EQ(lost_.count(), 1u);
  {
    std::lock_guard lock(lost_.mu);
    EXPECT_LT(lost_.calls[0].first, write_done_) << "the change was acknowledged first";
    EXPECT_TRUE(lost_.calls[0].second);
  }
  // Told again from then on: a second change reaches it, and no lease waits.
  const uint64_t waits = service_->stats().lease_waits;
  auto g = fs_->Open(me_, "/h", O_RDONLY);
  ASSERT_TRUE(g) << g.error().ToString();
  EXPECT_TRUE(g->attr_callbacks);
  const uint64_t told = told_.load();
  TimedLocalWrite("/h");
  EXPECT_TRUE(WaitUntilTrue([&] { return told_.load() > told; }, 5s));
  EXPECT_EQ(service_->stats().lease_waits, waits);
  EXPECT_EQ(lost_.count(), 1u);
  ASSERT_TRUE(fs_->Release(g->handle));
  ASSERT_TRUE(fs_->Release(f->handle));
}

INSTANTIATE_TEST_SUITE_P(Nets, CacheLeaseTest, ::testing::Values(Net::kFake), NetName);

}  // namespace
}  // namespace fedfs::ns
