// What the file-data cache's integration tests (coopcache_test.cc,
// coopcache_peer_test.cc, coopcache_forward_test.cc) share: random file
// contents, a whole-file read through a new open, a write at an offset, and
// a fixture of mounted daemons with their `fedfsctl cache` counters.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {

inline std::string Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& ch : s) ch = static_cast<char>('a' + rng() % 26);
  return s;
}

// The block cache's tests see every read in the daemon: the kernel drops
// its pages at each open (it keeps them by default: kernel_pages_test.cc).
inline const std::string kDaemonReads = "fuse: {keep_cache: false}\n";

// The whole file through a new open (with kDaemonReads, the kernel drops
// its pages at open).
inline std::string ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "<open: " + std::string(std::strerror(errno)) + ">";
  std::string out;
  char buf[100000];  // not a multiple of the block: reads straddle blocks
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      out = "<read: " + std::string(std::strerror(errno)) + ">";
      break;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

inline bool WriteAt(const std::string& path, off_t off, const std::string& data,
                    bool truncate = false) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
  if (fd < 0) return false;
  const bool ok = ::pwrite(fd, data.data(), data.size(), off) == static_cast<ssize_t>(data.size());
  return ::close(fd) == 0 && ok;
}

// `count` mounted daemons of `config` (Start), owned by the test: the
// Cluster stops them by pid and unmounts whatever happens.
class CoopClusterTest : public ::testing::Test {
 protected:
  void Start(int count, const std::string& config) {
    const std::string e = c_.StartMounted(count, &ids_, config);
    ASSERT_TRUE(e.empty()) << e;
  }
  std::string M(const std::string& id, const std::string& rel) const {
    return c_.Mountpoint(id) + rel;
  }
  // Field `field` of `fedfsctl cache` on `id` (0, and a failure, if it
  // does not answer).
  uint64_t Stat(const std::string& id, const char* field) const {
    auto j = c_.Ctl(id, {"cache"});
    EXPECT_TRUE(j.is_object()) << "fedfsctl cache failed on " << id;
    return j.is_object() ? j.value(field, uint64_t{0}) : 0;
  }

  Cluster c_;
  std::vector<std::string> ids_;
};

}  // namespace fedfs::testing
