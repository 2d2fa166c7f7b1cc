// One contract suite for every Kv implementation (dirops/kv.h): MemKv and
// RocksDbKv; plus RocksDbKv's own cases (reopen, lock, directory creation).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "dirops/kv.h"
#include "dirops/kv_keys.h"

namespace fedfs::ns {
namespace {

// A temporary directory removed at scope exit, even on failure.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fedfs-kv-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct KvFactory {
  std::string name;
  std::function<std::unique_ptr<Kv>(const std::string& dir)> make;
};

class KvContract : public ::testing::TestWithParam<KvFactory> {
 protected:
  void SetUp() override {
    kv_ = GetParam().make(dir_.path() + "/db");
    ASSERT_NE(kv_, nullptr);
  }
  TempDir dir_;
  std::unique_ptr<Kv> kv_;
};

TEST_P(KvContract, PutGetDelete) {
  EXPECT_EQ(kv_->Get("a").error().code, ENOENT);
  ASSERT_TRUE(kv_->Put("a", "1", true));
  EXPECT_EQ(kv_->Get("a").value(), "1");
  ASSERT_TRUE(kv_->Put("a", "2", false));
  EXPECT_EQ(kv_->Get("a").value(), "2");
  ASSERT_TRUE(kv_->Delete("a", true));
  EXPECT_EQ(kv_->Get("a").error().code, ENOENT);
  EXPECT_TRUE(kv_->Delete("never", false));  // absent: still Ok
}

TEST_P(KvContract, BinaryKeysAndValues) {
  const std::string key("k\0x\xff", 4);
  const std::string value("\0\1\2\xfe", 4);
  ASSERT_TRUE(kv_->Put(key, value, true));
  EXPECT_EQ(kv_->Get(key).value(), value);
  EXPECT_EQ(kv_->Get(std::string("k", 1)).error().code, ENOENT);
}

TEST_P(KvContract, ScanPrefixInOrder) {
  for (const char* k : {"b/2", "a/1", "b/1", "b0", "c", "b/10"}) {
    ASSERT_TRUE(kv_->Put(k, std::string("v") + k, false));
  }
  auto r = kv_->Scan("b/");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].first, "b/1");
  EXPECT_EQ((*r)[1].first, "b/10");
  EXPECT_EQ((*r)[2].first, "b/2");
  EXPECT_EQ((*r)[2].second, "vb/2");
  EXPECT_EQ(kv_->Scan("").value().size(), 6u);
  EXPECT_TRUE(kv_->Scan("zz").value().empty());
}

TEST_P(KvContract, BatchIsAppliedInOrder) {
  ASSERT_TRUE(kv_->Put("x", "old", false));
  KvBatch b;
  b.Put("y", "1");
  b.Delete("x");
  b.Put("z", "1");
  b.Put("z", "2");
  ASSERT_TRUE(kv_->Apply(b, true));
  EXPECT_EQ(kv_->Get("x").error().code, ENOENT);
  EXPECT_EQ(kv_->Get("y").value(), "1");
  EXPECT_EQ(kv_->Get("z").value(), "2");
}

TEST_P(KvContract, JournalKeysSortNumerically) {
  for (uint64_t id : {uint64_t{300}, uint64_t{2}, uint64_t{0x10}, ~uint64_t{0}}) {
    ASSERT_TRUE(kv_->Put(kvkeys::DirOpsJournalKey(id), "r", false));
  }
  ASSERT_TRUE(kv_->Put("dirops/x", "other", false));
  auto r = kv_->Scan(kvkeys::kDirOpsJournalPrefix);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->size(), 4u);
  std::vector<uint64_t> ids;
  for (const auto& [k, v] : *r) ids.push_back(kvkeys::ParseDirOpsJournalKey(k).value());
  EXPECT_EQ(ids, (std::vector<uint64_t>{2, 0x10, 300, ~uint64_t{0}}));
  EXPECT_FALSE(kvkeys::ParseDirOpsJournalKey("dirops/j/12"));
  EXPECT_FALSE(kvkeys::ParseDirOpsJournalKey("dirops/j/000000000000002G"));
  EXPECT_EQ(kvkeys::DirOpsJournalKey(42), "dirops/j/000000000000002a");
}

INSTANTIATE_TEST_SUITE_P(
    All, KvContract,
    ::testing::Values(KvFactory{"Mem", [](const std::string&) -> std::unique_ptr<Kv> {
                                  return std::make_unique<MemKv>();
                                }},
                      KvFactory{"RocksDb",
                                [](const std::string& dir) -> std::unique_ptr<Kv> {
                                  auto kv = OpenRocksDbKv({dir});
                                  EXPECT_TRUE(kv) << kv.error().ToString();
                                  return kv ? std::move(*kv) : nullptr;
                                }}),
    [](const auto& info) { return info.param.name; });

TEST(RocksDbKv, ReopenKeepsDataAndCreatesParents) {
  TempDir dir;
  const std::string path = dir.path() + "/state/deeper/db";
  {
    auto kv = OpenRocksDbKv({path});
    ASSERT_TRUE(kv) << kv.error().ToString();
    ASSERT_TRUE((*kv)->Put("synced", "1", true));
    ASSERT_TRUE((*kv)->Put("unsynced", "2", false));
    ASSERT_TRUE((*kv)->Put("gone", "3", true));
    ASSERT_TRUE((*kv)->Delete("gone", true));
  }
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto kv = OpenRocksDbKv({path});
  ASSERT_TRUE(kv) << kv.error().ToString();
  EXPECT_EQ((*kv)->Get("synced").value(), "1");
  EXPECT_EQ((*kv)->Get("unsynced").value(), "2");
  EXPECT_EQ((*kv)->Get("gone").error().code, ENOENT);
}

TEST(RocksDbKv, SecondOpenIsBusy) {
  TempDir dir;
  auto a = OpenRocksDbKv({dir.path()});
  ASSERT_TRUE(a);
  auto b = OpenRocksDbKv({dir.path()});
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code, EBUSY) << b.error().ToString();
}

TEST(RocksDbKv, BadPaths) {
  TempDir dir;
  EXPECT_EQ(OpenRocksDbKv({""}).error().code, EINVAL);
  const std::string file = dir.path() + "/file";
  ASSERT_EQ(std::system(("touch " + file).c_str()), 0);
  auto r = OpenRocksDbKv({file + "/db"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ENOTDIR) << r.error().ToString();
}

}  // namespace
}  // namespace fedfs::ns
