// Two daemons in two network namespaces joined by a veth pair federate over
// UCX with tls=tcp and net_devices=<the namespace's veth>. Needs root (skips
// otherwise). Namespace, device names and the 10.x/24 subnet are unique per
// run; the fixture deletes the namespaces (which deletes the veth pair) even
// when the test fails.
#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

class NetnsFederation : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
    const int pid = ::getpid();
    ns_a_ = "fedfs" + std::to_string(pid) + "a";
    ns_b_ = "fedfs" + std::to_string(pid) + "b";
    veth_a_ = "fv" + std::to_string(pid) + "a";
    veth_b_ = "fv" + std::to_string(pid) + "b";
    const std::string net = "10." + std::to_string(100 + pid % 100) + "." +
                            std::to_string((pid / 100) % 250) + ".";
    ip_a_ = net + "1";
    ip_b_ = net + "2";
    created_ = true;
    for (const auto& cmd : std::vector<std::vector<std::string>>{
             {"ip", "netns", "add", ns_a_},
             {"ip", "netns", "add", ns_b_},
             {"ip", "link", "add", veth_a_, "type", "veth", "peer", "name", veth_b_},
             {"ip", "link", "set", veth_a_, "netns", ns_a_},
             {"ip", "link", "set", veth_b_, "netns", ns_b_},
             {"ip", "-n", ns_a_, "addr", "add", ip_a_ + "/24", "dev", veth_a_},
             {"ip", "-n", ns_b_, "addr", "add", ip_b_ + "/24", "dev", veth_b_},
             {"ip", "-n", ns_a_, "link", "set", veth_a_, "up"},
             {"ip", "-n", ns_b_, "link", "set", veth_b_, "up"},
             {"ip", "-n", ns_a_, "link", "set", "lo", "up"},
             {"ip", "-n", ns_b_, "link", "set", "lo", "up"}}) {
      auto r = RunCommand(cmd, 10s);
      ASSERT_EQ(r.exit_code, 0) << cmd[0] << " " << cmd[1] << " " << cmd[2] << ": " << r.err;
    }
  }
  void TearDown() override {
    cluster_.reset();  // stop the daemons before their namespaces go
    if (!created_) return;
    RunCommand({"ip", "netns", "del", ns_a_}, 10s);
    RunCommand({"ip", "netns", "del", ns_b_}, 10s);
    RunCommand({"ip", "link", "del", veth_a_}, 10s);  // only if it never moved
  }

  std::unique_ptr<Cluster> cluster_ = std::make_unique<Cluster>();
  bool created_ = false;
  std::string ns_a_, ns_b_, veth_a_, veth_b_, ip_a_, ip_b_;
};

TEST_F(NetnsFederation, TwoNamespacesFederateOverTcp) {
  Cluster& c = *cluster_;
  const std::string a = ip_a_ + ":7400", b = ip_b_ + ":7400";
  c.Start("na", c.WriteConfig({.id = "na", .listen = a, .net_devices = veth_a_}), ns_a_);
  c.Start("nb", c.WriteConfig({.id = "nb", .listen = b, .peers = {a}, .net_devices = veth_b_}),
          ns_b_);
  for (const char* id : {"na", "nb"}) {
    ASSERT_TRUE(WaitFor([&] { return c.SeesAlive(id, {"na", "nb"}); }, kNoHang))
        << id << ": " << c.Status(id).dump() << "\nna log:\n" << c.Log("na") << "\nnb log:\n"
        << c.Log("nb");
  }
  auto m = c.Member("na", "nb");
  EXPECT_EQ(m["addr"], b);
  EXPECT_TRUE(WaitFor([&] { return c.Member("na", "nb")["rtt_us"].get<int64_t>() >= 0; }, kNoHang));
  // Cut the link: each marks the other dead; restore it: back alive.
  ASSERT_EQ(RunCommand({"ip", "-n", ns_a_, "link", "set", veth_a_, "down"}).exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return c.Member("na", "nb")["state"] == "dead"; }, kNoHang));
  EXPECT_TRUE(WaitFor([&] { return c.Member("nb", "na")["state"] == "dead"; }, kNoHang));
  ASSERT_EQ(RunCommand({"ip", "-n", ns_a_, "link", "set", veth_a_, "up"}).exit_code, 0);
  for (const char* id : {"na", "nb"}) {
    EXPECT_TRUE(WaitFor([&] { return c.SeesAlive(id, {"na", "nb"}); }, kNoHang))
        << id << ": " << c.Status(id).dump();
  }
}

}  // namespace
}  // namespace fedfs::testing
