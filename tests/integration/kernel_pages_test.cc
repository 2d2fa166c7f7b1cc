// The kernel's page cache of files held on other nodes, kept across opens
// and dropped range by range (label "integration"; needs root and
// /dev/fuse): three fedfsd processes, a file held on n2 read through n1's
// mount, changed through n3's and n2's (docs/coopcache.md, "Kernel page
// cache").
//
//  * A second read through a new open reads nothing from the file's node:
//    the kernel kept its pages (`fuse.keep_cache`, on by default). With it
//    off, the same read moves the whole file again (so the counter used
//    here can see the difference).
//  * A write through another node is read back by n1's next read, through
//    a new open or an open handle, and through a shared mapping.
//  * A change drops only its range from n1's pages: mincore(2) on a mapping
//    shows every other page still cached, and reading the file again moves
//    only that range (with n2's autonomy watcher off, see below).
//
// Each test owns a Cluster, which stops the daemons by pid, unmounts and
// removes its temporary directory whatever happens.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/coopcache_util.h"
#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

constexpr size_t kPage = 4096;

// Bytes the file service of `id` read and wrote for other nodes.
uint64_t Moved(const Cluster& c, const std::string& id) {
  auto j = c.Ctl(id, {"files"});
  EXPECT_TRUE(j.is_object()) << "fedfsctl files failed on " << id;
  return j.is_object() ? j.value("data_bytes", uint64_t{0}) : 0;
}

// Which pages of the file open as `fd` (`size` bytes) the kernel caches.
std::vector<bool> Resident(int fd, size_t size) {
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    ADD_FAILURE() << "mmap: " << std::strerror(errno);
    return {};
  }
  std::vector<unsigned char> vec((size + kPage - 1) / kPage);
  const int rc = ::mincore(m, size, vec.data());
  const int e = errno;
  ::munmap(m, size);
  if (rc != 0) {
    ADD_FAILURE() << "mincore: " << std::strerror(e);
    return {};
  }
  std::vector<bool> out;
  for (unsigned char v : vec) out.push_back((v & 1) != 0);
  return out;
}

std::string PreadAll(int fd, size_t size) {
  std::string out(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

class KernelPages : public CoopClusterTest {
 protected:
  void SetUp() override { Start(3, ""); }
};

TEST_F(KernelPages, ASecondOpenReadsNothingFromTheFilesNode) {
  std::string data = Random(1 << 20, 1);
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 0, data));
  const uint64_t m0 = Moved(c_, "n2");
  ASSERT_TRUE(ReadFile(M("n1", "/f")) == data);
  const uint64_t m1 = Moved(c_, "n2");
  EXPECT_GE(m1 - m0, data.size());
  // n2's watcher reports n2's own write too, a moment later (it cannot tell
  // who wrote), and that report drops n1's pages whole once; when it came
  // after n1's first read (a slow run: seen under ASan), the next read
  // fetches the file again. From then on an open reads nothing.
  uint64_t before = m1;
  bool kept = false;
  for (int i = 0; i < 20 && !kept; ++i) {
    ASSERT_TRUE(ReadFile(M("n1", "/f")) == data);
    const uint64_t after = Moved(c_, "n2");
    kept = after == before;
    before = after;
    if (!kept) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(kept) << "every open read the file from its node again";

  // Changed through n3: n1's next open reads the change, and only about it.
  ASSERT_TRUE(WriteAt(M("n3", "/f"), 300000, "written on n3"));
  data.replace(300000, 13, "written on n3");
  const uint64_t m2 = Moved(c_, "n2");
  EXPECT_TRUE(ReadFile(M("n1", "/f")) == data) << "n1 read the file as it was before n3's write";
  // Through the holder's own mount, and grown.
  ASSERT_TRUE(WriteAt(M("n2", "/f"), static_cast<off_t>(data.size()), "tail"));
  data += "tail";
  EXPECT_TRUE(ReadFile(M("n1", "/f")) == data) << "n1 missed a write on the file's node";
  EXPECT_GT(Moved(c_, "n2"), m2);
  // Truncated through n3.
  ASSERT_EQ(::truncate(M("n3", "/f").c_str(), 200000), 0) << std::strerror(errno);
  data.resize(200000);
  EXPECT_TRUE(ReadFile(M("n1", "/f")) == data) << "n1 missed a truncate";
  // By a local program on n2 (autonomy): seen once the watcher reports it.
  ASSERT_TRUE(WriteAt(c_.ExportRoot("n2") + "/f", 1000, "local"));
  data.replace(1000, 5, "local");
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    seen = ReadFile(M("n1", "/f")) == data;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(seen) << "n1 kept the pages from before a local program's write";
}

// n1 and n3 write the same pages of a file held on n2, at once. Each
// node's drop of the other's change would wait in its kernel's page locks
// for its own write, whose answer waits for the other's drop
// (docs/coopcache.md, "Two writers"): then n2's callback to one of them
// timed out and that node was told nothing more. Neither waits now: no
// callback fails, and both read the file as n2 has it.
TEST_F(KernelPages, TwoNodesWritingTheSamePagesDoNotWaitForEachOther) {
  constexpr size_t kBlocks = 16;
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 0, std::string(kBlocks * kPage, 'x')));
  auto failed = [&] {
    auto j = c_.Ctl("n2", {"files"});
    EXPECT_TRUE(j.is_object()) << "fedfsctl files failed on n2";
    return j.is_object() ? j.value("callbacks_failed", uint64_t{0}) : 0;
  };
  const uint64_t failed0 = failed();
  const int fd1 = ::open(M("n1", "/f").c_str(), O_RDWR);
  const int fd3 = ::open(M("n3", "/f").c_str(), O_RDWR);
  ASSERT_GE(fd1, 0) << std::strerror(errno);
  ASSERT_GE(fd3, 0) << std::strerror(errno);
  ASSERT_EQ(PreadAll(fd1, kBlocks * kPage).size(), kBlocks * kPage);  // pages cached on both
  ASSERT_EQ(PreadAll(fd3, kBlocks * kPage).size(), kBlocks * kPage);
  auto writer = [&](int fd, char base, int* errors) {
    for (int i = 0; i < 1000; ++i) {
      // Part of a page: the kernel keeps a page a write fills only in part
      // locked until the write is answered.
      const std::string block(1000, static_cast<char>(base + i % 26));
      const off_t off = static_cast<off_t>((i % kBlocks) * kPage + 100);
      if (::pwrite(fd, block.data(), block.size(), off) != static_cast<ssize_t>(block.size())) {
        ++*errors;
      }
    }
  };
  int errors1 = 0, errors3 = 0;
  std::thread t1(writer, fd1, 'a', &errors1);
  std::thread t3(writer, fd3, 'A', &errors3);
  t1.join();
  t3.join();
  EXPECT_EQ(errors1, 0);
  EXPECT_EQ(errors3, 0);
  EXPECT_EQ(failed() - failed0, 0u) << "a node did not answer n2's callback in time";
  // A drop put off for a node's own write is made just after it: both
  // handles read what n2 has once the last of them is.
  const std::string want = ReadFile(c_.ExportRoot("n2") + "/f");
  bool same = false;
  for (int i = 0; i < 50 && !same; ++i) {
    same = PreadAll(fd1, kBlocks * kPage) == want && PreadAll(fd3, kBlocks * kPage) == want;
    if (!same) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(same) << "a writer kept pages from before the other's write";
  ::close(fd1);
  ::close(fd3);
}

// The range alone: n2's autonomy watcher off. With it on, inotify reports
// n2's own write of the file too (it cannot tell who wrote), and that report
// drops the file's pages whole a little later (docs/coopcache.md).
class KernelPagesUnwatched : public CoopClusterTest {
 protected:
  void SetUp() override { Start(3, "autonomy: {watch: false}\n"); }
};

// n1 holds the file open: a write through n3 drops those pages only, before
// n3's write returns.
TEST_F(KernelPagesUnwatched, AChangeDropsOnlyItsRangeFromTheKernelsPages) {
  constexpr size_t kSize = 1 << 20;
  std::string data = Random(kSize, 2);
  ASSERT_TRUE(WriteAt(M("n2", "/g"), 0, data));
  const int fd = ::open(M("n1", "/g").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_TRUE(PreadAll(fd, kSize) == data);
  auto before = Resident(fd, kSize);
  ASSERT_EQ(before.size(), kSize / kPage);
  size_t cached = 0;
  for (bool b : before) cached += b ? 1 : 0;
  EXPECT_EQ(cached, kSize / kPage) << "the read did not leave the file in the page cache";

  // Two pages' worth at 512 KiB + 100: three pages touched.
  const size_t off = (512 << 10) + 100;
  const std::string piece = Random(2 * kPage, 3);
  ASSERT_TRUE(WriteAt(M("n3", "/g"), static_cast<off_t>(off), piece));
  data.replace(off, piece.size(), piece);
  auto after = Resident(fd, kSize);
  ASSERT_EQ(after.size(), kSize / kPage);
  const size_t first = off / kPage, last = (off + piece.size() - 1) / kPage;
  for (size_t p = 0; p < after.size(); ++p) {
    if (p >= first && p <= last) {
      EXPECT_FALSE(after[p]) << "page " << p << " was written on n3 and is still cached on n1";
    } else {
      EXPECT_TRUE(after[p]) << "page " << p << " was not written and was dropped";
    }
  }
  // Read again: the change, and only the dropped pages moved.
  const uint64_t m0 = Moved(c_, "n2");
  EXPECT_TRUE(PreadAll(fd, kSize) == data) << "the open handle read stale data";
  const uint64_t moved = Moved(c_, "n2") - m0;
  EXPECT_GE(moved, piece.size());
  EXPECT_LE(moved, (last - first + 1) * kPage);

  // A shared mapping sees the next write once it returned.
  void* m = ::mmap(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED) << std::strerror(errno);
  const char* map = static_cast<const char*>(m);
  EXPECT_EQ(std::string(map + 4096, 5), data.substr(4096, 5));
  ASSERT_TRUE(WriteAt(M("n3", "/g"), 4096, "MAPPD"));
  data.replace(4096, 5, "MAPPD");
  EXPECT_EQ(std::string(map + 4096, 5), "MAPPD") << "the mapping kept the page from before";
  ::munmap(m, kSize);
  ::close(fd);
  EXPECT_TRUE(ReadFile(M("n1", "/g")) == data);
}

// n1 read the file and closed it: its node keeps telling n1 of changes (the
// lookup's watch), each change dropping its range only, so the next open
// keeps the other pages; two changes in a row, with nothing done on n1 in
// between, are both seen. A change of the membership epoch drops every name
// n1's kernel caches, and with the names the inodes of closed files and
// their pages (a node suspected for a moment under load does it): a round
// in which n1 did so is not judged, and played again with another file.
size_t NamesDropped(const Cluster& c, const std::string& id) {
  const std::string log = c.Log(id);
  size_t n = 0;
  for (size_t at = log.find("the kernel's names are dropped"); at != std::string::npos;
       at = log.find("the kernel's names are dropped", at + 1)) {
    ++n;
  }
  return n;
}

TEST_F(KernelPagesUnwatched, AClosedFilesPagesKeepWhatNoChangeTouched) {
  constexpr size_t kSize = 1 << 20;
  int judged = 0;
  for (int round = 0; round < 3 && judged == 0; ++round) {
    const std::string name = "/h" + std::to_string(round);
    const size_t drops0 = NamesDropped(c_, "n1");
    std::string data = Random(kSize, 5 + round);
    ASSERT_TRUE(WriteAt(M("n2", name), 0, data));
    ASSERT_TRUE(ReadFile(M("n1", name)) == data);
    const std::string one = Random(kPage, 6), two = Random(kPage, 7);
    ASSERT_TRUE(WriteAt(M("n3", name), 100 * kPage, one));
    ASSERT_TRUE(WriteAt(M("n3", name), 200 * kPage, two));
    data.replace(100 * kPage, kPage, one);
    data.replace(200 * kPage, kPage, two);
    const uint64_t m0 = Moved(c_, "n2");
    const int fd = ::open(M("n1", name).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    auto resident = Resident(fd, kSize);
    ASSERT_EQ(resident.size(), kSize / kPage);
    EXPECT_TRUE(PreadAll(fd, kSize) == data) << "a change of the closed file was missed";
    ::close(fd);
    if (NamesDropped(c_, "n1") != drops0) continue;  // not judged: see above
    ++judged;
    std::string wrong;
    for (size_t p = 0; p < resident.size(); ++p) {
      if (resident[p] != (p != 100 && p != 200)) wrong += " " + std::to_string(p);
    }
    EXPECT_EQ(wrong, "") << "pages resident or not as they should not be";
    const uint64_t moved = Moved(c_, "n2") - m0;
    EXPECT_GE(moved, 2 * kPage);
    EXPECT_LE(moved, 2 * kPage);
  }
  EXPECT_EQ(judged, 1) << "n1 dropped its names in every round:\n" << c_.Log("n1");
}

// n1 has the file open with its pages cached when the file's node n2 is
// killed and restarted; n3 writes the file at once. The restarted n2 does
// not know that n1 caches the file: it acknowledges the write only once
// the cache lease passed since its start (FileServiceOptions::grace), by
// when n1 has said Hello to it again, learnt that its session is new and
// dropped the file's pages. n1's open handle then never reads the bytes
// from before the write: it reads the new ones or fails (its handle died
// with n2's old process).
TEST_F(KernelPagesUnwatched, ARestartedFilesNodeWaitsOutTheCacheLeaseSoNoOldPageIsRead) {
  const std::string data = Random(64 * kPage, 8);
  ASSERT_TRUE(WriteAt(M("n2", "/r"), 0, data));
  const int fd = ::open(M("n1", "/r").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_TRUE(PreadAll(fd, data.size()) == data);
  ASSERT_EQ(c_.Stop("n2", SIGKILL), 128 + SIGKILL);
  c_.Start("n2", c_.dir() + "/n2.yaml");
  ASSERT_TRUE(WaitFor(
      [&] {
        return IsMounted(c_.Mountpoint("n2")) && c_.SeesAlive("n2", ids_) &&
               c_.SeesAlive("n3", ids_) && c_.SeesAlive("n1", ids_);
      },
      std::chrono::seconds(30)));
  const int wfd = ::open(M("n3", "/r").c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(wfd, 0) << std::strerror(errno);
  const ssize_t wn = ::pwrite(wfd, "NEW!", 4, 0);
  const int werr = errno;
  const int closed = ::close(wfd);
  ASSERT_EQ(wn, 4) << std::strerror(werr);
  ASSERT_EQ(closed, 0) << std::strerror(errno);
  std::string got(4, '\0');
  const ssize_t n = ::pread(fd, got.data(), got.size(), 0);
  ::close(fd);
  if (n == 4) {
    EXPECT_EQ(got, "NEW!") << "n1 read its kernel's page from before the acknowledged write";
  } else {
    EXPECT_LT(n, 0) << "a short read of " << n;
  }
  EXPECT_EQ(ReadFile(M("n1", "/r")).substr(0, 4), "NEW!");
}

class KernelPagesOff : public CoopClusterTest {
 protected:
  void SetUp() override { Start(2, kDaemonReads); }
};

TEST_F(KernelPagesOff, EveryOpenReadsTheFileAgain) {
  const std::string data = Random(1 << 20, 4);
  ASSERT_TRUE(WriteAt(M("n2", "/f"), 0, data));
  ASSERT_TRUE(ReadFile(M("n1", "/f")) == data);
  const uint64_t m0 = Moved(c_, "n2");
  ASSERT_TRUE(ReadFile(M("n1", "/f")) == data);
  EXPECT_GE(Moved(c_, "n2") - m0, data.size());
}

// A node keeps a watch of a file until the watcher's session ends, and the
// file's number may name another file once it is gone (ext4 gives a freed
// inode number to the next file made nearby). n1 had watched /a, held on
// n2, and kept its pages; /a went and /b got its number, so n2 answered
// n1's lookup of /b with /a's watch. A change of /b then dropped the pages
// of /a's inode only, and n1 read /b as it was (the chaos run's reads, one
// write behind, after a file moved back to a node it had left).
TEST_F(KernelPagesUnwatched, AWatchThatNamesAnotherFileNowDropsThatFilesPages) {
  const std::string a = Random(64 * 1024, 2);
  ASSERT_TRUE(WriteAt(M("n2", "/a"), 0, a));
  struct stat st {};
  ASSERT_EQ(::stat(M("n1", "/a").c_str(), &st), 0) << std::strerror(errno);  // n2 watches it for n1
  ASSERT_TRUE(ReadFile(M("n1", "/a")) == a);
  ASSERT_TRUE(WriteAt(M("n2", "/a"), 0, "told"));  // the watch told of once: kept for the pages
  ASSERT_TRUE(ReadFile(M("n1", "/a")).starts_with("told"));
  ASSERT_EQ(::stat((c_.ExportRoot("n2") + "/a").c_str(), &st), 0);
  const ino_t was = st.st_ino;
  ASSERT_EQ(::unlink(M("n2", "/a").c_str()), 0) << std::strerror(errno);
  // The next files made there, until one gets /a's number.
  std::string b;
  for (int i = 0; i < 64 && b.empty(); ++i) {
    const std::string name = "/b" + std::to_string(i);
    ASSERT_TRUE(WriteAt(M("n2", name), 0, Random(64 * 1024, 3)));
    ASSERT_EQ(::stat((c_.ExportRoot("n2") + name).c_str(), &st), 0);
    if (st.st_ino == was) b = name;
  }
  ASSERT_FALSE(b.empty()) << "no new file got the number of the one removed";
  ASSERT_EQ(::stat(M("n1", b).c_str(), &st), 0) << std::strerror(errno);  // n2 answers with /a's watch
  std::string data = ReadFile(M("n1", b));
  ASSERT_EQ(data.size(), 64u * 1024);
  ASSERT_TRUE(WriteAt(M("n2", b), 0, "changed on n2"));
  data.replace(0, 13, "changed on n2");
  EXPECT_TRUE(ReadFile(M("n1", b)) == data) << "n1 kept its pages of " << b << " from before the change";
}

}  // namespace
}  // namespace fedfs::testing
