// Reads during moves (needs root and /dev/fuse): three daemons with
// mounts, a file opened and read by path through every mount while it moves
// from node to node ten times: every open finds it and every read returns
// its bytes. Reads used to fail now and then with ESTALE (a read at the
// file's old node between the commit and the switch was told the file
// moved while the manager still named the old node), and a move could stall
// for seconds (a reader's node held the kernel's page locks of a read
// waiting at the old node's gate while that node asked it to drop those
// pages); docs/migration.md, "What runs today".
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/migration_util.h"
#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

namespace fs = std::filesystem;

// Opens by path through every mount, while the file moves from node to node
// ten times: each finds it (the name is never missing in between) and reads
// its bytes.
TEST(MigrationReads, OpensThroughEveryMountFindTheFileWhileItMoves) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c_;
  std::vector<std::string> ids_;
  ASSERT_EQ(c_.StartMounted(3, &ids_), "");
  auto Root = [&](const std::string& id) { return c_.ExportRoot(id); };
  auto Mnt = [&](const std::string& id) { return c_.Mountpoint(id); };
  fs::create_directories(Root("n1") + "/m");
  const std::string content(64 * 1024, 'm');
  { std::ofstream(Root("n1") + "/m/f") << content; }
  ASSERT_EQ(ReadFileText(Mnt("n2") + "/m/f"), content);
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<std::string, int> failures;  // "node: call: error" -> count
  std::atomic<uint64_t> opens{0};
  std::vector<std::thread> readers;
  for (const std::string& id : ids_) {
    readers.emplace_back([&, id] {
      std::string buf(content.size() + 1, '\0');
      while (!stop.load()) {
        const int fd = ::open((Mnt(id) + "/m/f").c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
          const int e = errno;
          std::lock_guard lock(mu);
          ++failures[id + ": open: " + std::strerror(e)];
          continue;
        }
        const ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
        const int e = errno;
        ::close(fd);
        opens.fetch_add(1);
        if (n != static_cast<ssize_t>(content.size()) || buf.compare(0, content.size(), content) != 0) {
          std::lock_guard lock(mu);
          ++failures[id + ": read: " + (n < 0 ? std::strerror(e) : std::to_string(n) + " bytes")];
        }
      }
    });
  }
  int moved = 0;
  std::string errors;
  std::string at = "n1";
  for (int i = 0; i < 10; ++i) {
    const std::string to = ids_[static_cast<size_t>((i + 1) % 3)];
    const CommandResult r = Migrate(c_, ids_[static_cast<size_t>(i % 3)], "/m/f", to);
    if (r.exit_code == 0) {
      ++moved;
      at = to;
    } else {
      errors += r.out + r.err;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(moved, 10) << errors;
  std::string why;
  for (const auto& [what, n] : failures) why += what + " x" + std::to_string(n) + "\n";
  EXPECT_EQ(why, "") << opens.load() << " opens";
  EXPECT_GT(opens.load(), 30u);
  EXPECT_EQ(Holder(c_, "n2", "/m/f"), at);
}

}  // namespace
}  // namespace fedfs::testing
