// The mount helper, mount.fuse.fedfs (label "integration"; needs root,
// /dev/fuse and unshare(1)):
//  * the real mount(8) mounts the namespace from an fstab line with _netdev
//    and x-systemd.requires= (mount -T FSTAB DIR) and from
//    mount -t fuse.fedfs CONFIG DIR; the helper returns once the daemon is
//    ready, files written there land in the export root, and umount stops
//    the daemon cleanly. mount(8) finds helpers only in /sbin: the test runs
//    in a mount namespace of its own (unshare -m) where the helper is bound
//    over libfuse's mount.fuse3, which mount(8) falls back to for
//    fuse.<type>; nothing outside that namespace changes, and the daemon is
//    stopped by pid whatever happens;
//  * a wrong mountpoint, an unknown option and a daemon that cannot start
//    get a clear error and the right exit code (1, 1, 32).
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

class MountHelper : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "needs root (FUSE mounts, unshare)";
    cfg_ = c_.WriteConfig({.id = "n1", .listen = "127.0.0.1:" + std::to_string(FreePort())});
    // The helper runs fedfsd from the build tree, registered in the
    // cluster's own run directory.
    env_ = "export FEDFSD=" + std::string(FEDFS_FEDFSD_PATH) + " FEDFS_RUN_DIR=" + c_.dir() + "/run; ";
  }
  // Runs `script` as root in a mount namespace of its own with the helper
  // in place of mount.fuse3; the daemon it started is stopped at the end.
  CommandResult InNamespace(const std::string& script) {
    const std::string pidfile = c_.dir() + "/n1-state/fedfsd.pid";
    const std::string all =
        env_ + "set -u; trap 'umount -l " + c_.Mountpoint("n1") +
        " 2>/dev/null; [ -f " + pidfile + " ] && kill $(cat " + pidfile +
        ") 2>/dev/null; true' EXIT; mount --bind " + FEDFS_MOUNT_HELPER_PATH +
        " /usr/sbin/mount.fuse3 || exit 99; " + script;
    return RunCommand({"unshare", "-m", "--propagation", "private", "sh", "-c", all}, 60s);
  }
  Cluster c_;
  std::string cfg_;
  std::string env_;
};

// `script`'s checks, each printing one word; the daemon's exit is waited for.
std::string Checks(const std::string& mnt, const std::string& exp, const std::string& pidfile) {
  return "grep -q ' " + mnt + " fuse.fedfs ' /proc/self/mounts && echo mounted; "
         "echo hi > " + mnt + "/via-helper && [ \"$(cat " + exp + "/via-helper)\" = hi ] && echo written; "
         "pid=$(cat " + pidfile + "); kill -0 $pid && echo running; "
         "umount " + mnt + " && echo unmounted; "
         "for i in $(seq 1 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; "
         "kill -0 $pid 2>/dev/null || echo stopped; ";
}

TEST_F(MountHelper, AnFstabLineAndMountTypeFuseFedfsMountAndUmountStops) {
  const std::string mnt = c_.Mountpoint("n1");
  const std::string exp = c_.ExportRoot("n1");
  const std::string pidfile = c_.dir() + "/n1-state/fedfsd.pid";
  const std::string fstab = c_.WriteFile(
      "fstab", cfg_ + " " + mnt + " fuse.fedfs _netdev,x-systemd.requires=network-online.target,nofail 0 0\n");
  auto r = InNamespace("mount -T " + fstab + " " + mnt + " && echo fstab-ok; " + Checks(mnt, exp, pidfile) +
                       "mount -t fuse.fedfs -o _netdev " + cfg_ + " " + mnt + " && echo type-ok; " +
                       Checks(mnt, exp, pidfile));
  const std::string want = "fstab-ok\nmounted\nwritten\nrunning\nunmounted\nstopped\n"
                           "type-ok\nmounted\nwritten\nrunning\nunmounted\nstopped\n";
  EXPECT_EQ(r.out, want) << r.err << "\n" << ReadFileText(c_.dir() + "/n1-state/fedfsd.log");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string log = ReadFileText(c_.dir() + "/n1-state/fedfsd.log");
  EXPECT_NE(log.find("was unmounted from outside"), std::string::npos) << log;
  EXPECT_NE(log.find("[daemon] stopped"), std::string::npos) << log;
  EXPECT_FALSE(IsMounted(mnt)) << "the namespace's mount is not seen outside it";
}

TEST_F(MountHelper, RefusesWhatItCannotDoWithAClearError) {
  const std::string helper = FEDFS_MOUNT_HELPER_PATH;
  auto wrong = RunCommand({"sh", "-c", env_ + helper + " " + cfg_ + " /tmp"});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("mountpoint /tmp is not the one"), std::string::npos) << wrong.err;
  auto option = RunCommand({"sh", "-c", env_ + helper + " " + cfg_ + " " + c_.Mountpoint("n1") +
                                            " -o _netdev,ro,colour=blue"});
  EXPECT_EQ(option.exit_code, 1);
  EXPECT_NE(option.err.find("option 'ro' is not supported"), std::string::npos) << option.err;
  auto missing = RunCommand({"sh", "-c", env_ + helper + " " + c_.dir() + "/none.yaml /tmp"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("none.yaml"), std::string::npos) << missing.err;

  // The daemon cannot start (its listen port is taken by a running node
  // of the same config): exit 32 with the end of its log.
  c_.Start("n1", cfg_);
  ASSERT_TRUE(WaitFor([&] { return c_.AliveCount("n1") == 1; }, kNoHang)) << c_.Log("n1");
  std::string text = ReadFileText(cfg_);
  const std::string other_mnt = c_.dir() + "/other-mnt";
  ::mkdir(other_mnt.c_str(), 0755);
  text.replace(text.find("mountpoint: "), text.find('\n', text.find("mountpoint: ")) - text.find("mountpoint: "),
               "mountpoint: " + other_mnt);
  text.replace(text.find("control_socket: "),
               text.find('\n', text.find("control_socket: ")) - text.find("control_socket: "),
               "control_socket: " + c_.dir() + "/other.sock");
  text.replace(text.find("state_dir: "), text.find('\n', text.find("state_dir: ")) - text.find("state_dir: "),
               "state_dir: " + c_.dir() + "/other-state");
  const std::string other = c_.WriteFile("other.yaml", text);
  auto failed = RunCommand({"sh", "-c", env_ + helper + " " + other + " " + other_mnt}, 60s);
  EXPECT_EQ(failed.exit_code, 32) << failed.err;
  EXPECT_NE(failed.err.find("fedfsd exited before the namespace was mounted (exit 1)"), std::string::npos)
      << failed.err;
  EXPECT_NE(failed.err.find("already in use"), std::string::npos) << failed.err;
  EXPECT_FALSE(IsMounted(other_mnt));
}

}  // namespace
}  // namespace fedfs::testing
