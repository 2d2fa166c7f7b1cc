// One file written through several nodes' mounts at once, on real daemons
// (label "integration"; needs root and /dev/fuse): three fedfsd processes,
// each mounting the namespace under the test's temporary directory.
//
//  * O_APPEND from three nodes: every record lands whole at the holder's end
//    of file, none lost, none split (each write(2) reaches the holder as one
//    request: vfs/vfs_files.cc, AppendOnly), and every writer's kernel then
//    knows the file's size.
//  * An O_APPEND handle, written directly, can still be mapped shared.
//  * Writers of disjoint ranges on three nodes: every block as written.
//
// Each test owns a Cluster, which stops the daemons by pid, unmounts and
// removes its temporary directory whatever happens.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SharedFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string e = c_.StartMounted(3, &ids_);
    ASSERT_TRUE(e.empty()) << e;
  }
  std::string M(const std::string& id, const std::string& rel) const {
    return c_.Mountpoint(id) + rel;
  }

  Cluster c_;
  std::vector<std::string> ids_;
};

// Three processes' worth of appenders, one per node, each appending 2,000
// records of 50 bytes to one file held on n1 (the reproduction:
// before, about a hundred records came out split around another's).
TEST_F(SharedFile, AppendsFromThreeNodesLandWhole) {
  constexpr int kRecords = 2000;
  constexpr size_t kLen = 50;
  {
    std::ofstream(M("n1", "/log")).flush();
  }
  std::vector<int> fds;
  for (const auto& id : ids_) {
    const int fd = ::open(M(id, "/log").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    ASSERT_GE(fd, 0) << id << ": " << std::strerror(errno);
    fds.push_back(fd);
  }
  std::vector<std::thread> writers;
  std::vector<int> failed(fds.size(), 0);
  for (size_t w = 0; w < fds.size(); ++w) {
    writers.emplace_back([&, w] {
      for (int k = 0; k < kRecords; ++k) {
        char rec[kLen + 1];
        std::snprintf(rec, sizeof rec, "%c %06d %040d\n", static_cast<char>('A' + w), k, 0);
        if (::write(fds[w], rec, kLen) != static_cast<ssize_t>(kLen)) ++failed[w];
      }
    });
  }
  for (auto& t : writers) t.join();
  const off_t total = static_cast<off_t>(kRecords * kLen * fds.size());
  for (size_t w = 0; w < fds.size(); ++w) {
    EXPECT_EQ(failed[w], 0) << ids_[w];
    // The writer's kernel learns the size others made.
    struct stat st {};
    ASSERT_EQ(::fstat(fds[w], &st), 0);
    EXPECT_EQ(st.st_size, total) << ids_[w];
    ASSERT_EQ(::close(fds[w]), 0);
  }
  for (const auto& id : ids_) {
    const std::string data = ReadAll(M(id, "/log"));
    ASSERT_EQ(data.size(), static_cast<size_t>(total)) << id;
    std::map<char, int> next;  // each writer's records, whole and in its order
    size_t bad = 0;
    for (size_t off = 0; off + kLen <= data.size(); off += kLen) {
      const std::string rec = data.substr(off, kLen);
      char tag = 0;
      int k = -1, zero = -1;
      if (std::sscanf(rec.c_str(), "%c %6d %40d", &tag, &k, &zero) != 3 || rec.back() != '\n' ||
          tag < 'A' || tag > 'C' || k != next[tag]) {
        if (++bad <= 3) ADD_FAILURE() << id << ": record at " << off << ": " << rec;
        continue;
      }
      ++next[tag];
    }
    EXPECT_EQ(bad, 0u) << id;
    for (char tag : {'A', 'B', 'C'}) EXPECT_EQ(next[tag], kRecords) << id << " " << tag;
  }
}

// An O_APPEND handle is written directly; mapping it shared still works
// (FUSE_DIRECT_IO_ALLOW_MMAP) and shows what the other nodes wrote.
TEST_F(SharedFile, AnAppendHandleCanBeMappedShared) {
  {
    std::ofstream(M("n2", "/m")) << std::string(4096, 'a');
  }
  {
    std::ofstream(M("n3", "/m"), std::ios::app) << std::string(4096, 'b');
  }
  const int fd = ::open(M("n1", "/m").c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  void* p = ::mmap(nullptr, 8192, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED) << std::strerror(errno);
  const auto* c = static_cast<const char*>(p);
  EXPECT_EQ(c[0], 'a');
  EXPECT_EQ(c[8191], 'b');
  ASSERT_EQ(::munmap(p, 8192), 0);
  ASSERT_EQ(::write(fd, "z", 1), 1);
  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(ReadAll(M("n2", "/m")), std::string(4096, 'a') + std::string(4096, 'b') + "z");
}

// Writers of disjoint 4 KiB blocks through three mounts at once: every
// block is the one its writer wrote.
TEST_F(SharedFile, DisjointWritersFromThreeNodesKeepEveryBlock) {
  constexpr int kBlocks = 600;
  constexpr size_t kBlock = 4096;
  {
    std::ofstream(M("n2", "/blocks")).flush();
  }
  std::vector<std::thread> writers;
  std::vector<int> failed(ids_.size(), 0);
  for (size_t w = 0; w < ids_.size(); ++w) {
    writers.emplace_back([&, w] {
      const int fd = ::open(M(ids_[w], "/blocks").c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) {
        failed[w] = -1;
        return;
      }
      for (int b = static_cast<int>(w); b < kBlocks; b += static_cast<int>(ids_.size())) {
        const std::string block(kBlock, static_cast<char>('a' + b % 26));
        if (::pwrite(fd, block.data(), kBlock, static_cast<off_t>(b) * kBlock) !=
            static_cast<ssize_t>(kBlock)) {
          ++failed[w];
        }
      }
      if (::close(fd) != 0) ++failed[w];
    });
  }
  for (auto& t : writers) t.join();
  for (size_t w = 0; w < ids_.size(); ++w) EXPECT_EQ(failed[w], 0) << ids_[w];
  for (const auto& id : ids_) {
    const std::string data = ReadAll(M(id, "/blocks"));
    ASSERT_EQ(data.size(), kBlocks * kBlock) << id;
    int wrong = 0;
    for (int b = 0; b < kBlocks; ++b) {
      if (data.compare(static_cast<size_t>(b) * kBlock, kBlock,
                       std::string(kBlock, static_cast<char>('a' + b % 26))) != 0) {
        ++wrong;
      }
    }
    EXPECT_EQ(wrong, 0) << id;
  }
}

}  // namespace
}  // namespace fedfs::testing
