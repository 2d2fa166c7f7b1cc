// VdService under lost messages (vd/vd_service.h, "Lost messages"): a change
// whose reply was lost is resent and answered the first answer, never
// applied again after another node's change; an invalidation whose
// connection broke is resent, so the sharer's copy never stays stale; a
// dirmerge's listing whose connection broke is asked for again.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "m2m/transport_decorator.h"
#include "tests/unit/vd/vd_federation.h"

namespace fedfs::ns::vd_test {
namespace {

// Loses, on purpose, the first reply this node gives to `method` (the caller
// gets ECONNRESET after the handler acted; `on_lost` runs first), and the
// reply of the first one-sided FetchAdd it makes (after the add happened).
class LosingTransport final : public m2m::TransportDecorator {
 public:
  LosingTransport(std::unique_ptr<m2m::Transport> inner, uint16_t method)
      : TransportDecorator(std::move(inner)), method_(method) {}

  void Handle(uint16_t method, m2m::RpcHandler handler) override {
    if (method != method_) return TransportDecorator::Handle(method, std::move(handler));
    TransportDecorator::Handle(
        method, [this, h = std::move(handler)](m2m::IncomingCall c, m2m::Responder r) mutable {
          if (reply_lost) return h(std::move(c), std::move(r));
          reply_lost = true;
          h(std::move(c), m2m::Responder(std::make_unique<Hold>(this, std::move(r))));
        });
  }
  std::shared_ptr<m2m::Endpoint> GetEndpoint(const std::string& addr) override {
    return std::make_shared<LosingEndpoint>(TransportDecorator::GetEndpoint(addr), this);
  }

  std::function<void()> on_lost;
  bool reply_lost = false, bump_lost = false;

 private:
  class Hold final : public m2m::Responder::Impl {
   public:
    Hold(LosingTransport* t, m2m::Responder r) : t_(t), r_(std::move(r)) {}
    void Send(Result<m2m::Bytes>) override {
      if (t_->on_lost) t_->on_lost();
      r_.Fail(Error{ECONNRESET, "reply lost (test)"});
    }

   private:
    LosingTransport* t_;
    m2m::Responder r_;
  };
  class LosingEndpoint final : public m2m::Endpoint {
   public:
    LosingEndpoint(std::shared_ptr<m2m::Endpoint> inner, LosingTransport* t)
        : inner_(std::move(inner)), t_(t) {}
    const std::string& address() const override { return inner_->address(); }
    void Connect(m2m::Timeout timeout, m2m::Callback<void> done) override {
      inner_->Connect(timeout, std::move(done));
    }
    void Call(uint16_t method, m2m::Bytes payload, m2m::Timeout timeout,
              m2m::Callback<m2m::Bytes> done) override {
      inner_->Call(method, std::move(payload), timeout, std::move(done));
    }
    Result<std::shared_ptr<m2m::RemoteRegion>> Import(const m2m::RegionDesc& desc) override {
      return inner_->Import(desc);
    }
    void Put(const void* src, size_t len, const m2m::RemoteRegion& dst, uint64_t offset,
             m2m::Timeout timeout, m2m::Callback<void> done) override {
      inner_->Put(src, len, dst, offset, timeout, std::move(done));
    }
    void Get(void* dst, size_t len, const m2m::RemoteRegion& src, uint64_t offset,
             m2m::Timeout timeout, m2m::Callback<void> done) override {
      inner_->Get(dst, len, src, offset, timeout, std::move(done));
    }
    void FetchAdd(const m2m::RemoteRegion& region, uint64_t offset, uint64_t add,
                  m2m::Timeout timeout, m2m::Callback<uint64_t> done) override {
      if (t_->bump_lost) return inner_->FetchAdd(region, offset, add, timeout, std::move(done));
      t_->bump_lost = true;
      inner_->FetchAdd(region, offset, add, timeout,
                       [done = std::move(done)](Result<uint64_t>) mutable {
                         done(Err(ECONNRESET, "reply lost (test)"));
                       });
    }
    void CompareSwap(const m2m::RemoteRegion& region, uint64_t offset, uint64_t expected,
                     uint64_t desired, m2m::Timeout timeout,
                     m2m::Callback<uint64_t> done) override {
      inner_->CompareSwap(region, offset, expected, desired, timeout, std::move(done));
    }
    void Disconnect() override { inner_->Disconnect(); }

   private:
    std::shared_ptr<m2m::Endpoint> inner_;
    LosingTransport* t_;
  };

  const uint16_t method_;
};

// n0 loses its first kNsVdUpdate reply and its first bump's reply.
struct LossyFederation {
  LosingTransport* n0 = nullptr;
  Federation f{3, VdServiceOptions{}, 1, m2m::LinkModel::Rdma(), -1,
               [this](int i, std::unique_ptr<m2m::Transport> t) -> std::unique_ptr<m2m::Transport> {
                 if (i != 0) return t;
                 auto l = std::make_unique<LosingTransport>(std::move(t),
                                                            MethodId(RpcMethod::kNsVdUpdate));
                 n0 = l.get();
                 return l;
               }};
};

TEST(VdLostMessages, AChangeWhoseReplyWasLostIsNotAppliedAgainAfterAnotherChange) {
  LossyFederation lf;
  Federation& f = lf.f;
  ASSERT_NE(lf.n0, nullptr);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(0, p));  // resident at n0
  // n1 reports z: n0 applies it, and its reply is lost. Before n1 hears
  // of the loss, z is removed and reported by n2.
  f.fs(1).AddFile(p + "/z");
  std::optional<Status> added, removed;
  lf.n0->on_lost = [&] {
    f.fs(1).Remove(p + "/z");
    f.svc(2).Update(p, Remove("n1", "z"), [&](Status s) { removed = s; });
  };
  f.svc(1).Update(p, Add("n1", "z"), [&](Status s) { added = s; });
  f.net().RunUntilIdle();
  ASSERT_TRUE(lf.n0->reply_lost);
  ASSERT_TRUE(added && removed);
  EXPECT_TRUE(*removed) << removed->error().ToString();
  EXPECT_TRUE(*added) << added->error().ToString();  // the resend's answer: the first one
  EXPECT_EQ(f.svc(1).stats().resends, 1u);
  EXPECT_EQ(f.svc(0).stats().duplicates_answered, 1u);
  // Applied once: z stays removed.
  auto vd = f.Get(0, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ((*vd)->Find("z"), nullptr);
  vd = f.Get(2, p);
  ASSERT_TRUE(vd);
  EXPECT_EQ((*vd)->Find("z"), nullptr);
}

TEST(VdLostMessages, AnInvalidationWhoseConnectionBrokeIsSentAgain) {
  LossyFederation lf;
  Federation& f = lf.f;
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  ASSERT_TRUE(f.Get(2, p));  // n2 caches VD(p)
  // n1's change: n0 bumps n2's slot; the bump's reply is lost.
  // (n0 loses this change's reply too: n1 sends it again.)
  f.fs(1).AddFile(p + "/z");
  ASSERT_TRUE(f.Update(1, p, Add("n1", "z")));
  EXPECT_TRUE(lf.n0->bump_lost);
  EXPECT_EQ(f.svc(0).stats().invalidations_resent, 1u);
  EXPECT_EQ(f.svc(0).stats().invalidations_failed, 0u);
  EXPECT_GE(f.svc(2).stats().dt.bumps_received, 1u);
  auto vd = f.Get(2, p);  // not the old copy
  ASSERT_TRUE(vd);
  EXPECT_NE((*vd)->Find("z"), nullptr);
}

// A dirmerge's listing whose connection broke is asked for again: the VD
// has every node's names and is kept, not served without that node's names
// (the history test under lost messages saw such a listing once).
TEST(VdLostMessages, AListingWhoseConnectionBrokeIsAskedForAgain) {
  LosingTransport* n1 = nullptr;
  Federation f{3, {}, 1, m2m::LinkModel::Rdma(), -1,
               [&](int i, std::unique_ptr<m2m::Transport> t) -> std::unique_ptr<m2m::Transport> {
                 if (i != 1) return t;
                 auto l = std::make_unique<LosingTransport>(std::move(t),
                                                            MethodId(RpcMethod::kNsListLocal));
                 n1 = l.get();
                 return l;
               }};
  ASSERT_NE(n1, nullptr);
  const std::string p = PathManagedBy(f, "n0");
  Populate(f, p);
  auto vd = f.Get(2, p);
  ASSERT_TRUE(vd) << vd.error().ToString();
  EXPECT_TRUE(n1->reply_lost);
  EXPECT_NE((*vd)->Find("f1"), nullptr);  // n1's names
  EXPECT_TRUE((*vd)->cacheable);
  EXPECT_EQ(f.svc(0).stats().resends, 1u);
  EXPECT_EQ(f.svc(0).stats().resident, 1u);
}

}  // namespace
}  // namespace fedfs::ns::vd_test
