// The transport contract suite: one set of tests that every implementation of
// m2m::Transport must pass unchanged (UCX, fake network). An implementation
// joins by providing a ContractEnv factory and instantiating the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Ucx, TransportContract,
//                            ::testing::Values(ContractEnvFactory{"ucx", &MakeUcxEnv}),
//                            ContractEnvName);
#pragma once

#include <functional>
#include <ostream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "m2m/transport.h"

namespace fedfs::m2m::testing {

// One federation-in-a-test: makes transports that can reach each other.
class ContractEnv {
 public:
  virtual ~ContractEnv() = default;
  // A new transport with the given cluster key (not listening yet).
  virtual std::unique_ptr<Transport> NewTransport(const Bytes& cluster_key) = 0;
  // An address to pass to Listen() for a new transport (may pick a port).
  virtual std::string ListenAddress() = 0;
  // Makes `t` (listening at addr) behave like a dead process: it stops
  // answering anything, including one-sided operations. It is not used again.
  virtual void Kill(Transport& t, const std::string& addr) = 0;
};

struct ContractEnvFactory {
  std::string name;
  std::function<std::unique_ptr<ContractEnv>()> make;
};

// gtest prints a parameter with PrintTo: the factory's name, not its bytes.
inline void PrintTo(const ContractEnvFactory& f, std::ostream* os) { *os << f.name; }

inline std::string ContractEnvName(const ::testing::TestParamInfo<ContractEnvFactory>& info) {
  return info.param.name;
}

class TransportContract : public ::testing::TestWithParam<ContractEnvFactory> {};

}  // namespace fedfs::m2m::testing
