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
#include <sys/stat.h>
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

// A read through a handle opened for writing on another node, made while
// the move stands between its gate turning Moved and every node's drop of
// the file (paused there): the read is told ESTALE at L and its handle is
// opened again at T, where the copy is frozen for writes until kMigCommit.
// That open used to wait for the thaw (an open for writing), holding the
// reader's kernel page locks, so L's drop of those pages waited until the
// callback timed out and the reader's node was told nothing more
// (Migration.FioVerify... took 60 s and then failed with ESTALE). The read
// now returns while the move is paused, and no callback fails.
TEST(MigrationReads, AReadWhoseHandleIsOpenedAgainAtTheTargetHoldsNoDropUp) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c_;
  std::vector<std::string> ids_;
  ::setenv("FEDFS_TEST_PAUSE_AT", "mig:marked+4000", 1);
  const std::string started = c_.StartMounted(3, &ids_);
  ::unsetenv("FEDFS_TEST_PAUSE_AT");
  ASSERT_EQ(started, "");
  fs::create_directories(c_.ExportRoot("n1") + "/m");
  const std::string content(1 << 20, 'r');
  { std::ofstream(c_.ExportRoot("n1") + "/m/f") << content; }
  const int fd = ::open((c_.Mountpoint("n2") + "/m/f").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  auto failed = [&] {
    auto j = c_.Ctl("n1", {"files"});
    EXPECT_TRUE(j.is_object()) << "fedfsctl files failed on n1";
    return j.is_object() ? j.value("callbacks_failed", uint64_t{0}) : 0;
  };
  const uint64_t failed0 = failed();
  CommandResult move;
  std::thread mover([&] { move = Migrate(c_, "n1", "/m/f", "n3"); });
  const bool paused =
      WaitFor([&] { return c_.Log("n1").find("paused at mig:marked") != std::string::npos; }, kNoHang);
  std::string got(4096, '\0');
  const ssize_t n = paused ? ::pread(fd, got.data(), got.size(), 768 * 1024) : -1;
  const int e = errno;
  const bool during = c_.Log("n1").find("resumed at mig:marked") == std::string::npos;
  mover.join();
  ::close(fd);
  ASSERT_TRUE(paused) << c_.Log("n1");
  ASSERT_EQ(n, 4096) << std::strerror(e);
  EXPECT_EQ(got, content.substr(0, 4096));
  EXPECT_TRUE(during) << "the read waited for the move";
  EXPECT_EQ(move.exit_code, 0) << move.out << move.err;
  EXPECT_EQ(failed(), failed0) << c_.Log("n1");
  EXPECT_EQ(Holder(c_, "n2", "/m/f"), "n3");
}

// A file written through n1 and read through n2 moves between the three
// nodes and back: every read through n2, by a new open and through a handle
// open across the moves, sees the last write (n2 keeps the kernel's pages
// of the file across opens while its node tells of every change). A handle
// open across a move used to fail with ESTALE once an open by path through
// the same node had given the moved file a new inode: the handle's inode,
// unlinked as replaced, had no path to be opened again by.
TEST(MigrationReads, KeptPagesSeeEveryWriteAcrossMovesThereAndBack) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for FUSE mounts";
  Cluster c_;
  std::vector<std::string> ids_;
  ASSERT_EQ(c_.StartMounted(3, &ids_), "");
  fs::create_directories(c_.ExportRoot("n1") + "/m");
  char v = 'a';
  const auto content = [](char x) { return std::string(64 * 1024, x); };
  { std::ofstream(c_.ExportRoot("n1") + "/m/f") << content(v); }
  const std::string at1 = c_.Mountpoint("n1") + "/m/f", at2 = c_.Mountpoint("n2") + "/m/f";
  int fd = -1;
  auto step = [&](const std::string& what) {
    for (int i = 0; i < 3; ++i) {
      ++v;
      {
        std::ofstream out(at1, std::ios::in | std::ios::out | std::ios::binary);
        out << content(v);
      }
      EXPECT_EQ(Digest(ReadFileText(at2)), Digest(content(v))) << what << ", write " << i;
      if (fd >= 0) {
        std::string got(64 * 1024, '\0');
        EXPECT_EQ(::pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()))
            << what << ", write " << i << ": " << std::strerror(errno);
        EXPECT_EQ(Digest(got), Digest(content(v)))
            << what << ", write " << i << ", a handle open since: read '" << got[0] << "', written '" << v << "'";
      }
    }
  };
  struct stat st {};
  ASSERT_EQ(::stat(at2.c_str(), &st), 0) << std::strerror(errno);
  step("at n1");
  fd = ::open(at2.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  for (const std::string to : {"n3", "n1", "n3", "n2", "n1"}) {
    const CommandResult r = Migrate(c_, "n1", "/m/f", to);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    step("moved to " + to);
    if (to == "n3") {
      ::close(fd);
      fd = -1;
    } else if (fd < 0) {
      fd = ::open(at2.c_str(), O_RDONLY | O_CLOEXEC);
    }
  }
  if (fd >= 0) ::close(fd);
}

}  // namespace
}  // namespace fedfs::testing
