// Deferred opens (vfs/vfs_deferred.cc; files/file_service.h, "Deferred
// opens"; docs/namespace.md, "Opens without a round trip") on real daemons
// (label "integration"; needs root and /dev/fuse): three fedfsd processes,
// files made through n1's mount (held on n1), stat'ed and then opened
// read-only through n2's, so that n2 answers the opens without asking n1.
//
//  * Such opens and closes cost n1 no request; the first read opens the
//    file at n1 and reads the right bytes.
//  * The file's name going after the open (an unlink through n1's own
//    mount, through n3's, through n2's; a rename of it; a rename over it;
//    its directory renamed through n3) leaves the handle reading the file
//    it opened, as an open made at once would: n1 opens the file for n2
//    before the name goes and hands the handle over (the handle is
//    released at n1 with the close), or opens it by its file handle.
//  * A lock through such a handle is a lock at n1 (n3 sees it).
//
// The Cluster stops the daemons by pid, unmounts and removes its temporary
// directory whatever happens.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/tools/cluster.h"

namespace fedfs::testing {
namespace {

bool WriteFile(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  return ::close(fd) == 0 && ok;
}

// The bytes of `fd` from offset 0 (up to 1 MiB); the errno as "E<n>" if a
// read fails.
std::string ReadAll(int fd) {
  std::string out(1 << 20, '\0');
  const ssize_t n = ::pread(fd, out.data(), out.size(), 0);
  if (n < 0) return "E" + std::to_string(errno);
  out.resize(static_cast<size_t>(n));
  return out;
}

class DeferredOpen : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string e = c_.StartMounted(3, &ids_);
    ASSERT_TRUE(e.empty()) << e;
    m1_ = c_.Mountpoint("n1");
    m2_ = c_.Mountpoint("n2");
    m3_ = c_.Mountpoint("n3");
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }
  int64_t Files(const std::string& id, const char* field) const {
    auto j = c_.Ctl(id, {"files"});
    EXPECT_TRUE(j.is_object()) << "fedfsctl files on " << id;
    return j.is_object() ? j[field].get<int64_t>() : -1;
  }
  // `name` made through n1 (held there) with `data`, stat'ed through n2
  // (watched for n2 by n1), then opened read-only through n2.
  int OpenThroughN2(const std::string& name, const std::string& data) {
    EXPECT_TRUE(WriteFile(m1_ + name, data)) << name << ": " << std::strerror(errno);
    EXPECT_EQ(::access((c_.ExportRoot("n1") + name).c_str(), F_OK), 0) << name << " not held on n1";
    struct stat st {};
    EXPECT_EQ(::stat((m2_ + name).c_str(), &st), 0) << name << ": " << std::strerror(errno);
    EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
    const int64_t before = Files("n2", "deferred_opens");
    const int fd = ::open((m2_ + name).c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << name << ": " << std::strerror(errno);
    if (fd >= 0) fds_.push_back(fd);
    EXPECT_EQ(Files("n2", "deferred_opens"), before + 1) << "the open of " << name << " asked n1";
    return fd;
  }
  void Close(int fd) {
    std::erase(fds_, fd);
    EXPECT_EQ(::close(fd), 0);
  }
  // n1's open handles for other nodes come back to `handles` (a handle
  // released after a close travels within a short delay).
  void ExpectHandlesBackTo(int64_t handles) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (Files("n1", "handles") != handles && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(Files("n1", "handles"), handles) << "handles left open at n1";
  }

  Cluster c_;
  std::vector<std::string> ids_;
  std::string m1_, m2_, m3_;
  std::vector<int> fds_;
};

TEST_F(DeferredOpen, OpensAndClosesAskNothingAndTheFirstReadReadsTheFile) {
  const int fd = OpenThroughN2("/f", "hello, deferred");
  ASSERT_GE(fd, 0);
  const int64_t served = Files("n1", "served");
  for (int i = 0; i < 20; ++i) {
    const int g = ::open((m2_ + "/f").c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(g, 0) << std::strerror(errno);
    ASSERT_EQ(::close(g), 0);
  }
  EXPECT_EQ(Files("n1", "served"), served) << "opens and closes through n2 asked n1";
  EXPECT_EQ(ReadAll(fd), "hello, deferred");
  EXPECT_GE(Files("n2", "deferred_used"), 1);
  EXPECT_GT(Files("n1", "served"), served) << "the read asked nothing of n1";
  Close(fd);
}

TEST_F(DeferredOpen, AFileUnlinkedThroughItsOwnNodeStaysReadable) {
  const int64_t handles = Files("n1", "handles");
  const int fd = OpenThroughN2("/f", "still here");
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::unlink((m1_ + "/f").c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(ReadAll(fd), "still here");
  EXPECT_GE(Files("n1", "pinned"), 1);
  EXPECT_GE(Files("n2", "deferred_adopted"), 1);
  Close(fd);
  ExpectHandlesBackTo(handles);
}

TEST_F(DeferredOpen, AFileUnlinkedThroughAThirdNodeStaysReadable) {
  const int64_t handles = Files("n1", "handles");
  const int fd = OpenThroughN2("/f", "third node");
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::unlink((m3_ + "/f").c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(ReadAll(fd), "third node");
  Close(fd);
  ExpectHandlesBackTo(handles);
}

TEST_F(DeferredOpen, AFileUnlinkedThroughTheOpenersNodeStaysReadable) {
  const int fd = OpenThroughN2("/f", "own unlink");
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::unlink((m2_ + "/f").c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(ReadAll(fd), "own unlink");
  EXPECT_GE(Files("n2", "deferred_used"), 1);
  Close(fd);
}

TEST_F(DeferredOpen, RenamesOfTheFileAndOverItKeepTheFileOpened) {
  const int a = OpenThroughN2("/a", "file a");
  const int b = OpenThroughN2("/b", "file b");
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  // /a renamed away through n3; /b replaced by another file through n1.
  ASSERT_EQ(::rename((m3_ + "/a").c_str(), (m3_ + "/a2").c_str()), 0) << std::strerror(errno);
  ASSERT_TRUE(WriteFile(m1_ + "/c", "file c"));
  ASSERT_EQ(::rename((m1_ + "/c").c_str(), (m1_ + "/b").c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(ReadAll(a), "file a");
  EXPECT_EQ(ReadAll(b), "file b");
  EXPECT_EQ(Files("n2", "deferred_stale"), 0);
}

TEST_F(DeferredOpen, AFileWhoseDirectoryAnotherNodeRenamedIsOpenedWhereItIsNow) {
  ASSERT_EQ(::mkdir((m1_ + "/d").c_str(), 0755), 0) << std::strerror(errno);
  const int fd = OpenThroughN2("/d/f", "moved along");
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::rename((m3_ + "/d").c_str(), (m3_ + "/e").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::access((c_.ExportRoot("n1") + "/e/f").c_str(), F_OK), 0) << "not renamed on n1";
  EXPECT_EQ(ReadAll(fd), "moved along");
  EXPECT_EQ(Files("n2", "deferred_stale"), 0);
}

TEST_F(DeferredOpen, ALockThroughADeferredHandleIsHeldAtTheFilesNode) {
  const int fd = OpenThroughN2("/f", "locked");
  ASSERT_GE(fd, 0);
  struct flock l {};
  l.l_type = F_RDLCK;
  l.l_whence = SEEK_SET;
  ASSERT_EQ(::fcntl(fd, F_SETLK, &l), 0) << std::strerror(errno);
  const int other = ::open((m3_ + "/f").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(other, 0) << std::strerror(errno);
  fds_.push_back(other);
  // Another process's write lock conflicts (a child: POSIX locks are per
  // process).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    struct flock w {};
    w.l_type = F_WRLCK;
    w.l_whence = SEEK_SET;
    ::_exit(::fcntl(other, F_SETLK, &w) == 0 ? 0 : (errno == EAGAIN || errno == EACCES) ? 1 : 2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << "n3 took a write lock over n2's read lock";
  Close(fd);
}

}  // namespace
}  // namespace fedfs::testing
