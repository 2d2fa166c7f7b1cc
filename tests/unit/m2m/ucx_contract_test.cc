// Runs the shared transport contract suite (transport_contract_tests.cc)
// against the UCX transport over TCP on loopback.
#include "tests/unit/m2m/transport_contract.h"
#include "tests/unit/m2m/ucx_test_util.h"

namespace fedfs::m2m::testing {
namespace {

class UcxContractEnv : public ContractEnv {
 public:
  std::unique_ptr<Transport> NewTransport(const Bytes& cluster_key) override {
    return NewUcx(cluster_key);
  }
  // Listen() reports the real port.
  std::string ListenAddress() override { return "127.0.0.1:0"; }
  // A shut-down transport answers nothing, one-sided operations included.
  void Kill(Transport& t, const std::string& /*addr*/) override { t.Shutdown(); }
};

std::unique_ptr<ContractEnv> MakeUcxEnv() { return std::make_unique<UcxContractEnv>(); }

INSTANTIATE_TEST_SUITE_P(Ucx, TransportContract,
                         ::testing::Values(ContractEnvFactory{"ucx", &MakeUcxEnv}),
                         ContractEnvName);

}  // namespace
}  // namespace fedfs::m2m::testing
