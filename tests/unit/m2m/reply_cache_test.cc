// m2m::ReplyCache (m2m/reply_cache.h): a request is served once per client
// and id; a resend that comes while it runs waits for its answer, one that
// comes after gets the kept answer (errors too); other clients and ids are
// served on their own; old answers are dropped past the bounds, never one
// in flight.
#include "m2m/reply_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace fedfs::m2m::testing {
namespace {

// What a Responder was answered.
struct Answers {
  std::vector<Result<Bytes>> got;
};

Responder Into(std::shared_ptr<Answers> a) {
  class Rec final : public Responder::Impl {
   public:
    explicit Rec(std::shared_ptr<Answers> a) : a_(std::move(a)) {}
    void Send(Result<Bytes> reply) override { a_->got.push_back(std::move(reply)); }

   private:
    std::shared_ptr<Answers> a_;
  };
  return Responder(std::make_unique<Rec>(std::move(a)));
}

Bytes B(uint8_t v) { return Bytes{std::byte{v}}; }

TEST(ReplyCache, ServedOnceAndEveryArrivalGetsTheFirstAnswer) {
  ReplyCache cache;
  int runs = 0;
  Callback<Bytes> pending;
  auto first = std::make_shared<Answers>(), during = std::make_shared<Answers>(),
       after = std::make_shared<Answers>();
  cache.ServeOnce("n1", 7, Into(first), [&](Callback<Bytes> done) {
    ++runs;
    pending = std::move(done);  // still running
  });
  cache.ServeOnce("n1", 7, Into(during), [&](Callback<Bytes>) { ++runs; });
  EXPECT_TRUE(during->got.empty());  // waits for the first one's answer
  pending(B(42));
  ASSERT_EQ(first->got.size(), 1u);
  ASSERT_EQ(during->got.size(), 1u);
  EXPECT_EQ(*during->got[0], B(42));
  cache.ServeOnce("n1", 7, Into(after), [&](Callback<Bytes>) { ++runs; });
  ASSERT_EQ(after->got.size(), 1u);
  EXPECT_EQ(*after->got[0], B(42));
  EXPECT_EQ(runs, 1);
  const auto s = cache.stats();
  EXPECT_EQ(s.served, 1u);
  EXPECT_EQ(s.duplicates, 2u);
}

TEST(ReplyCache, AnErrorIsKeptLikeAReply) {
  ReplyCache cache;
  int runs = 0;
  auto a = std::make_shared<Answers>(), b = std::make_shared<Answers>();
  auto serve = [&](Callback<Bytes> done) {
    ++runs;
    done(Err(EEXIST, "taken"));
  };
  cache.ServeOnce("n1", 1, Into(a), serve);
  cache.ServeOnce("n1", 1, Into(b), serve);
  EXPECT_EQ(runs, 1);
  ASSERT_EQ(b->got.size(), 1u);
  ASSERT_FALSE(b->got[0]);
  EXPECT_EQ(b->got[0].error().code, EEXIST);
}

TEST(ReplyCache, OtherClientsAndIdsAreServedOnTheirOwn) {
  ReplyCache cache;
  int runs = 0;
  auto serve = [&](Callback<Bytes> done) { done(B(static_cast<uint8_t>(++runs))); };
  auto a = std::make_shared<Answers>();
  cache.ServeOnce("n1", 1, Into(a), serve);
  cache.ServeOnce("n2", 1, Into(a), serve);
  cache.ServeOnce("n1", 2, Into(a), serve);
  EXPECT_EQ(runs, 3);
  ASSERT_EQ(a->got.size(), 3u);
  EXPECT_EQ(*a->got[2], B(3));
}

TEST(ReplyCache, OldAnswersGoPastTheBoundButNotOneInFlight) {
  ReplyCache cache(ReplyCacheOptions{.keep_for = std::chrono::hours(1), .max_entries = 2});
  int runs = 0;
  Callback<Bytes> pending;
  auto a = std::make_shared<Answers>();
  cache.ServeOnce("n1", 1, Into(a), [&](Callback<Bytes> done) {
    ++runs;
    pending = std::move(done);  // in flight
  });
  auto serve = [&](Callback<Bytes> done) {
    ++runs;
    done(B(1));
  };
  for (uint64_t id = 2; id < 10; ++id) cache.ServeOnce("n1", id, Into(a), serve);
  EXPECT_EQ(runs, 9);
  EXPECT_EQ(cache.stats().entries, 9u);  // the one in flight holds the rest back
  cache.ServeOnce("n1", 1, Into(a), serve);
  EXPECT_EQ(runs, 9);  // still known: waits
  pending(B(5));
  cache.ServeOnce("n1", 20, Into(a), serve);  // prunes: at most 2 kept
  EXPECT_LE(cache.stats().entries, 3u);
  cache.ServeOnce("n1", 2, Into(a), serve);  // long gone: served again
  EXPECT_EQ(runs, 11);
}

TEST(ReplyCache, ConnectionBrokenIsNotATimeout) {
  EXPECT_TRUE(ConnectionBroken(ECONNRESET));
  EXPECT_TRUE(ConnectionBroken(ENOTCONN));
  EXPECT_FALSE(ConnectionBroken(ETIMEDOUT));
  EXPECT_FALSE(ConnectionBroken(ENOENT));
}

}  // namespace
}  // namespace fedfs::m2m::testing
