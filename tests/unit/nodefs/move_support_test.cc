// LocalNodeFs's side of file moves (nodefs/move_support.h): the gate of one
// file, and the unnamed staging file. Threads stand in for the operations
// that wait; every wait is bounded (a hang fails the test).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>

#include <gtest/gtest.h>

#include "nodefs/local_node_fs.h"
#include "node_fs_contract.h"

namespace fedfs::ns::testing {
namespace {

using namespace std::chrono_literals;

std::span<const std::byte> Bytes(const char* s) {
  return {reinterpret_cast<const std::byte*>(s), std::strlen(s)};
}

class MoveSupportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("fedfs-move-");
    auto fs = LocalNodeFs::Open("n0", root_);
    ASSERT_TRUE(fs.has_value());
    fs_ = std::move(*fs);
    auto c = fs_->Create(Cred{}, "/f", O_RDWR, 0644);
    ASSERT_TRUE(c.has_value());
    ASSERT_TRUE(fs_->Write(c->handle, 0, Bytes("abc")).has_value());
    ASSERT_TRUE(fs_->Release(c->handle).has_value());
    ASSERT_EQ(::stat((root_ + "/f").c_str(), &st_), 0);
  }
  void TearDown() override {
    fs_.reset();
    RemoveTree(root_);
  }
  std::string root_;
  std::unique_ptr<LocalNodeFs> fs_;
  struct stat st_ {};
};

TEST_F(MoveSupportTest, FrozenChangesWaitReadsPassThawRunsThem) {
  auto h = fs_->Open(Cred{}, "/f", O_RDONLY);
  ASSERT_TRUE(h.has_value());
  auto frozen = fs_->Freeze(st_.st_dev, st_.st_ino);
  ASSERT_TRUE(frozen.has_value());
  EXPECT_EQ(frozen->handles, 1u);  // the handle above
  EXPECT_EQ(frozen->lock_owners, 0u);
  EXPECT_EQ(fs_->Freeze(st_.st_dev, st_.st_ino).error().code, EBUSY);

  std::byte buf[8];
  EXPECT_EQ(fs_->Read(h->handle, 0, buf).value_or(0), 3u);  // reads pass
  auto ro = fs_->Open(Cred{}, "/f", O_RDONLY);               // so do read-only opens
  ASSERT_TRUE(ro.has_value());
  auto writer = std::async(std::launch::async, [&] {
    auto w = fs_->Open(Cred{}, "/f", O_WRONLY);
    if (!w) return w.error().code;
    auto n = fs_->Write(w->handle, 0, Bytes("X"));
    (void)fs_->Release(w->handle);
    return n ? 0 : n.error().code;
  });
  auto truncater = std::async(std::launch::async, [&] {
    SetAttrRequest r;
    r.size = 1;
    auto s = fs_->SetAttr(Cred{}, "/f", std::nullopt, r);
    return s ? 0 : s.error().code;
  });
  EXPECT_EQ(writer.wait_for(200ms), std::future_status::timeout);
  EXPECT_EQ(truncater.wait_for(10ms), std::future_status::timeout);
  struct stat now {};
  ASSERT_EQ(::stat((root_ + "/f").c_str(), &now), 0);
  EXPECT_EQ(now.st_size, 3);  // nothing changed while frozen

  fs_->Thaw(st_.st_dev, st_.st_ino);
  ASSERT_EQ(writer.wait_for(10s), std::future_status::ready);
  ASSERT_EQ(truncater.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(writer.get(), 0);
  EXPECT_EQ(truncater.get(), 0);
  (void)fs_->Release(h->handle);
  (void)fs_->Release(ro->handle);
}

TEST_F(MoveSupportTest, HeldPassesReadsAndMovedAnswersEstaleToWaitersAndLaterCalls) {
  auto h = fs_->Open(Cred{}, "/f", O_RDWR);
  ASSERT_TRUE(h.has_value());
  ASSERT_TRUE(fs_->Freeze(st_.st_dev, st_.st_ino).has_value());
  fs_->Hold(st_.st_dev, st_.st_ino);
  // Held: opens for reading and reads pass, this node's and another node's
  // (its server sets a gate deadline) alike: the bytes here are the new
  // copy's until it takes a write (migration/migration.h).
  {
    auto r = fs_->Open(Cred{}, "/f", O_RDONLY);
    ASSERT_TRUE(r.has_value());
    (void)fs_->Release(r->handle);
    std::byte b[8];
    EXPECT_TRUE(fs_->Read(h->handle, 0, b).has_value());
    const ScopedGateDeadline remote(std::chrono::steady_clock::now() + 30s);
    EXPECT_TRUE(fs_->Read(h->handle, 0, b).has_value());
  }
  // Changes wait, until the file moved: then ESTALE.
  auto writer = std::async(std::launch::async, [&] {
    auto n = fs_->Write(h->handle, 0, Bytes("X"));
    return n ? 0 : n.error().code;
  });
  auto truncating = std::async(std::launch::async, [&] {
    auto r = fs_->Open(Cred{}, "/f", O_WRONLY | O_TRUNC);
    if (r) (void)fs_->Release(r->handle);
    return r ? 0 : r.error().code;
  });
  EXPECT_EQ(writer.wait_for(200ms), std::future_status::timeout);
  EXPECT_EQ(truncating.wait_for(10ms), std::future_status::timeout);
  fs_->MarkMoved(st_.st_dev, st_.st_ino);
  ASSERT_EQ(writer.wait_for(10s), std::future_status::ready);
  ASSERT_EQ(truncating.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(writer.get(), ESTALE);
  EXPECT_EQ(truncating.get(), ESTALE);
  std::byte buf[8];
  EXPECT_EQ(fs_->Read(h->handle, 0, buf).error().code, ESTALE);
  EXPECT_EQ(fs_->Open(Cred{}, "/f", O_RDONLY).error().code, ESTALE);
  // Other files are not gated.
  auto other = fs_->Create(Cred{}, "/g", O_RDWR, 0644);
  ASSERT_TRUE(other.has_value());
  EXPECT_TRUE(fs_->Write(other->handle, 0, Bytes("ok")).has_value());
  (void)fs_->Release(other->handle);
  // Thawed while a handle of the moved file is open: it keeps answering
  // ESTALE; the gate goes with the last handle.
  fs_->Thaw(st_.st_dev, st_.st_ino);
  EXPECT_EQ(fs_->Read(h->handle, 0, buf).error().code, ESTALE);
  (void)fs_->Release(h->handle);
  auto again = fs_->Open(Cred{}, "/f", O_RDWR);
  ASSERT_TRUE(again.has_value()) << again.error().ToString();
  EXPECT_TRUE(fs_->Write(again->handle, 0, Bytes("Y")).has_value());
  (void)fs_->Release(again->handle);
}

// The last handle of a moved file released while the move goes on (before
// it unlinks the name and thaws) leaves the gate standing: the unlink must
// still find the file moved. (A gate dropped there let the unlink open the
// old file for other nodes' deferred opens, which then read its old bytes
// after the move: tests/integration/migration_reads_test.cc.)
TEST_F(MoveSupportTest, ALastHandleReleasedBeforeTheMoveEndsKeepsTheGate) {
  auto h = fs_->Open(Cred{}, "/f", O_RDONLY);
  ASSERT_TRUE(h.has_value());
  ASSERT_TRUE(fs_->Freeze(st_.st_dev, st_.st_ino).has_value());
  fs_->Hold(st_.st_dev, st_.st_ino);
  fs_->MarkMoved(st_.st_dev, st_.st_ino);
  ASSERT_TRUE(fs_->Release(h->handle).has_value());
  EXPECT_EQ(fs_->Open(Cred{}, "/f", O_RDONLY).error().code, ESTALE);
  fs_->Thaw(st_.st_dev, st_.st_ino);  // no handle left: the gate goes now
  auto again = fs_->Open(Cred{}, "/f", O_RDONLY);
  ASSERT_TRUE(again.has_value()) << again.error().ToString();
  (void)fs_->Release(again->handle);
}

TEST_F(MoveSupportTest, LocksAreCountedAndLockChangesWaitWhileFrozen) {
  auto h = fs_->Open(Cred{}, "/f", O_RDWR);
  ASSERT_TRUE(h.has_value());
  ASSERT_TRUE(fs_->SetLk(h->handle, 7, LockRange{F_WRLCK, 0, 1, 0}).has_value());
  auto frozen = fs_->Freeze(st_.st_dev, st_.st_ino);
  ASSERT_TRUE(frozen.has_value());
  EXPECT_EQ(frozen->lock_owners, 1u);
  auto unlock = std::async(std::launch::async, [&] {
    auto s = fs_->SetLk(h->handle, 7, LockRange{F_UNLCK, 0, 1, 0});
    return s ? 0 : s.error().code;
  });
  EXPECT_EQ(unlock.wait_for(200ms), std::future_status::timeout);
  fs_->Thaw(st_.st_dev, st_.st_ino);
  ASSERT_EQ(unlock.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(unlock.get(), 0);
  (void)fs_->Release(h->handle);
}

// The move's last step unlinks the moved file's copy while its gate still
// stands: files created meanwhile must not get its inode number (ext4 gives
// a freed one again at once) and meet the gate (ESTALE, the file left made;
// the kernel's retry then answered EEXIST). Its inode stays pinned until
// the gate goes. (On tmpfs, which never gives a number again, this passes
// either way.)
TEST_F(MoveSupportTest, AFileMadeWhileAMovedFilesGateStandsIsNotGated) {
  ASSERT_TRUE(fs_->Freeze(st_.st_dev, st_.st_ino).has_value());
  fs_->Hold(st_.st_dev, st_.st_ino);
  fs_->MarkMoved(st_.st_dev, st_.st_ino);
  ASSERT_TRUE(fs_->Unlink(Cred{}, "/f").has_value());  // the move's last step
  for (int i = 0; i < 20; ++i) {
    const std::string name = "/g" + std::to_string(i);
    auto c = fs_->Create(Cred{}, name, O_WRONLY | O_EXCL, 0644);
    ASSERT_TRUE(c.has_value()) << name << ": " << c.error().ToString();
    struct stat st {};
    ASSERT_EQ(::stat((root_ + name).c_str(), &st), 0);
    EXPECT_FALSE(st.st_dev == st_.st_dev && st.st_ino == st_.st_ino);
    EXPECT_TRUE(fs_->Write(c->handle, 0, Bytes("x")).has_value());
    ASSERT_TRUE(fs_->Release(c->handle).has_value());
  }
  fs_->Thaw(st_.st_dev, st_.st_ino);
  auto after = fs_->Create(Cred{}, "/h", O_WRONLY | O_EXCL, 0644);
  ASSERT_TRUE(after.has_value()) << after.error().ToString();
  ASSERT_TRUE(fs_->Release(after->handle).has_value());
}

TEST_F(MoveSupportTest, AnUnnamedFileIsInvisibleUntilLinkedAndNeverReplaces) {
  ASSERT_TRUE(fs_->Mkdir(Cred{}, "/d", 0755).has_value());
  auto fd = fs_->CreateUnnamed("/d");
  ASSERT_TRUE(fd.has_value()) << fd.error().ToString();
  ASSERT_EQ(::pwrite(*fd, "copy", 4, 0), 4);
  auto listed = fs_->ListDir(Cred{}, "/d");
  ASSERT_TRUE(listed.has_value());
  EXPECT_TRUE(listed->empty());
  auto linked = fs_->LinkUnnamed(*fd, "/d/c");
  ASSERT_TRUE(linked.has_value()) << linked.error().ToString();
  EXPECT_EQ(linked->st_size, 4);
  EXPECT_EQ(fs_->LinkUnnamed(*fd, "/f").error().code, EEXIST);  // never replaces
  ::close(*fd);
  struct stat st {};
  ASSERT_EQ(::stat((root_ + "/d/c").c_str(), &st), 0);
  EXPECT_EQ(st.st_ino, linked->st_ino);
  EXPECT_EQ(fs_->CreateUnnamed("/../x").error().code, EINVAL);  // beneath the root only
}

}  // namespace
}  // namespace fedfs::ns::testing
