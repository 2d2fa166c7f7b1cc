// Runs the transport contract suite against the fake network in real-time
// mode (a dispatcher thread, blocking *Sync helpers from test threads): once
// with zero latency and once with the tcp-lan model (latency and jitter).
#include "m2m/fake_network.h"
#include "tests/unit/m2m/transport_contract.h"

namespace fedfs::m2m::testing {
namespace {

class FakeContractEnv final : public ContractEnv {
 public:
  explicit FakeContractEnv(LinkModel link) : net_(Options(link)) {}

  std::unique_ptr<Transport> NewTransport(const Bytes& cluster_key) override {
    TransportOptions o;
    o.cluster_key = cluster_key;
    return net_.NewTransport(o);
  }
  std::string ListenAddress() override { return "fake:0"; }
  void Kill(Transport&, const std::string& addr) override {
    ASSERT_TRUE(net_.Kill(addr)) << "no fake node at " << addr;
  }

 private:
  static FakeNetworkOptions Options(LinkModel link) {
    FakeNetworkOptions o;
    o.mode = SchedulerMode::kRealTime;
    o.seed = 42;
    o.link = link;
    return o;
  }
  FakeNetwork net_;
};

INSTANTIATE_TEST_SUITE_P(
    Fake, TransportContract,
    ::testing::Values(
        ContractEnvFactory{"Fake",
                           [] { return std::make_unique<FakeContractEnv>(LinkModel::Zero()); }},
        ContractEnvFactory{"FakeTcpLan",
                           [] { return std::make_unique<FakeContractEnv>(LinkModel::TcpLan()); }}),
    ContractEnvName);

}  // namespace
}  // namespace fedfs::m2m::testing
