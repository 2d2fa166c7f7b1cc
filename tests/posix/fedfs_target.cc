#include "tests/posix/fedfs_target.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

constexpr int kNodes = 3;

std::string Tail(const std::string& text, size_t lines) {
  size_t pos = text.size();
  for (size_t n = 0; n <= lines && pos != std::string::npos && pos > 0; ++n) pos = text.rfind('\n', pos - 1);
  return pos == std::string::npos ? text : text.substr(pos + 1);
}

class FedfsTarget : public MountTarget {
 public:
  explicit FedfsTarget(FedfsPlacement p) : placement_(p) {}

  bool Init(std::string* why) {
    // Non-root test children must reach the mounts (the harness makes its
    // directory 0700).
    ::chmod(cluster_.dir().c_str(), 0755);
    // The file-data cache is on (docs/coopcache.md): every read of a file
    // held on another node goes through it.
    const std::string extra =
        std::string(placement_ == FedfsPlacement::kRemote
                        ? "placement: {policy: local, rules: [{prefix: /, node: n1}]}\n"
                        : "") +
        "coopcache: {size: 64MiB, block: 64KiB}\n";
    std::vector<std::string> addrs;
    for (int i = 0; i < kNodes; ++i) addrs.push_back("127.0.0.1:" + std::to_string(FreePort()));
    for (int i = 0; i < kNodes; ++i) {
      NodeConfig c;
      c.id = "n" + std::to_string(i);
      c.listen = addrs[i];
      if (i > 0) c.peers = {addrs[0]};
      c.extra_yaml = extra;
      cluster_.Start(c.id, cluster_.WriteConfig(c));
      ids_.push_back(c.id);
    }
    for (const auto& id : ids_) {
      const std::string m = cluster_.Mountpoint(id);
      if (!WaitFor([&] { return IsFuseMount(m) || !cluster_.Running(id); }, kNoHang) || !IsFuseMount(m)) {
        *why = "node " + id + " did not mount " + m + "; its log ends:\n" + Tail(cluster_.Log(id), 5);
        return false;
      }
    }
    for (const auto& id : ids_) {
      if (!WaitFor([&] { return cluster_.SeesAlive(id, ids_); }, kNoHang)) {
        *why = "node " + id + " does not see all members alive";
        return false;
      }
    }
    ::chmod(cluster_.Mountpoint("n0").c_str(), 0755);
    // The placement really is what the target claims: a probe file created
    // through n0's mount lands in n0's (local) or n1's (remote) export root.
    const std::string probe = "/.placement-probe";
    const int fd = ::open((view(0) + probe).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
      *why = "cannot create a probe file through " + view(0);
      return false;
    }
    ::close(fd);
    const std::string want = placement_ == FedfsPlacement::kLocal ? "n0" : "n1";
    struct stat st;
    const bool placed = ::stat((cluster_.ExportRoot(want) + probe).c_str(), &st) == 0;
    ::unlink((view(0) + probe).c_str());
    if (!placed) {
      *why = "a file created through n0's mount is not in " + want + "'s export root";
      return false;
    }
    return true;
  }

  std::string name() const override {
    return placement_ == FedfsPlacement::kLocal ? "fedfs-local" : "fedfs-remote";
  }
  size_t view_count() const override { return ids_.size(); }
  std::string view(size_t i) const override { return cluster_.Mountpoint(ids_[i % ids_.size()]); }
  std::string describe() const override {
    return name() + " (3 fedfsd, " +
           (placement_ == FedfsPlacement::kLocal ? "files on the creating node" : "files forced onto n1") +
           ", file-data cache on) at " + view(0);
  }

 private:
  FedfsPlacement placement_;
  Cluster cluster_;  // destroyed last: stops daemons by pid, clears mounts
  std::vector<std::string> ids_;
};

}  // namespace

std::unique_ptr<MountTarget> MakeFedfsTarget(FedfsPlacement placement, std::string* why) {
  auto t = std::make_unique<FedfsTarget>(placement);
  if (!t->Init(why)) return nullptr;
  return t;
}

}  // namespace fedfs::testing
