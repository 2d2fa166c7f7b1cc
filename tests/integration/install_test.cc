// The installed FedFS (deploy/CMakeLists.txt, docs/deploy.md; label
// "integration"): `cmake --install` into a prefix of the test's own puts the
// binaries, the mount helper, the systemd unit (naming that prefix's
// binaries, checked by systemd-analyze verify), the docs and an example
// config in place, and the installed binaries run; `cpack -G DEB` builds one
// package with the same files under /usr, depending on fuse3 and the
// libraries its binaries link, and its binaries run from the unpacked
// package. Nothing is installed on the machine itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

class Install : public ::testing::Test {
 protected:
  Cluster c_;  // a temporary directory that is removed at the end
};

TEST_F(Install, CmakeInstallPutsEverythingInThePrefix) {
  const std::string prefix = c_.dir() + "/usr";
  auto r = RunCommand({"cmake", "--install", FEDFS_BUILD_DIR, "--prefix", prefix}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* f : {"bin/fedfsd", "bin/fedfsctl", "sbin/mount.fuse.fedfs",
                        "lib/systemd/system/fedfsd@.service", "share/doc/fedfs/README.md",
                        "share/doc/fedfs/deploy.md", "share/doc/fedfs/metrics.md",
                        "share/doc/fedfs/examples/node.yaml.example"}) {
    EXPECT_TRUE(fs::exists(prefix + "/" + f)) << f;
  }
  const std::string unit = ReadFileText(prefix + "/lib/systemd/system/fedfsd@.service");
  EXPECT_NE(unit.find("ExecStart=" + prefix + "/bin/fedfsd --config " + prefix +
                      "/etc/fedfs/%i.yaml --clear-stale-mount"),
            std::string::npos)
      << unit;
  EXPECT_NE(unit.find("Type=notify"), std::string::npos);
  EXPECT_NE(unit.find("After=network-online.target"), std::string::npos);
  EXPECT_EQ(unit.find("@FEDFS_"), std::string::npos) << "an unfilled placeholder:\n" << unit;
  // systemd's own check of the unit, as an instance.
  fs::copy_file(prefix + "/lib/systemd/system/fedfsd@.service", c_.dir() + "/fedfsd@n1.service");
  auto v = RunCommand({"systemd-analyze", "verify", "--man=no", c_.dir() + "/fedfsd@n1.service"}, 60s);
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_EQ(v.err.find(c_.dir() + "/fedfsd@n1.service:"), std::string::npos) << v.err;

  // The installed binaries run; the helper finds the installed fedfsd.
  auto help = RunCommand({prefix + "/bin/fedfsd", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--check-config"), std::string::npos) << help.out;
  auto ctl = RunCommand({prefix + "/bin/fedfsctl", "--help"});
  EXPECT_EQ(ctl.exit_code, 0);
  EXPECT_NE(ctl.out.find("metrics"), std::string::npos) << ctl.out;
  auto mh = RunCommand({prefix + "/sbin/mount.fuse.fedfs", "--help"});
  EXPECT_EQ(mh.exit_code, 0);
  EXPECT_NE(mh.out.find("usage: mount.fuse.fedfs CONFIG MOUNTPOINT"), std::string::npos);
}

TEST_F(Install, ADebianPackageOfTheSameFiles) {
  auto r = RunCommand({"cpack", "-G", "DEB", "--config", std::string(FEDFS_BUILD_DIR) + "/CPackConfig.cmake",
                       "-B", c_.dir() + "/pkg"},
                      300s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string deb;
  for (const auto& e : fs::directory_iterator(c_.dir() + "/pkg")) {
    if (e.path().extension() == ".deb") deb = e.path().string();
  }
  ASSERT_NE(deb, "") << r.out;
  auto info = RunCommand({"dpkg-deb", "-f", deb, "Package", "Depends"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("Package: fedfs"), std::string::npos) << info.out;
  for (const char* dep : {"fuse3", "libfuse3-3", "libucx0", "librocksdb", "libsystemd0"}) {
    EXPECT_NE(info.out.find(dep), std::string::npos) << dep << " in " << info.out;
  }
  auto list = RunCommand({"dpkg-deb", "-c", deb});
  for (const char* f : {"./usr/bin/fedfsd", "./usr/bin/fedfsctl", "./usr/sbin/mount.fuse.fedfs",
                        "./usr/lib/systemd/system/fedfsd@.service", "./usr/share/doc/fedfs/deploy.md"}) {
    EXPECT_NE(list.out.find(f), std::string::npos) << f;
  }
  const std::string root = c_.dir() + "/unpacked";
  ASSERT_EQ(RunCommand({"dpkg-deb", "-x", deb, root}).exit_code, 0);
  const std::string unit = ReadFileText(root + "/usr/lib/systemd/system/fedfsd@.service");
  EXPECT_NE(unit.find("ExecStart=/usr/bin/fedfsd --config /etc/fedfs/%i.yaml --clear-stale-mount"),
            std::string::npos)
      << unit;
  auto help = RunCommand({root + "/usr/bin/fedfsd", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
}

}  // namespace
}  // namespace fedfs::testing
