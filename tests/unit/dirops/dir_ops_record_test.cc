// The journal record codec of directory operations (dirops/dir_ops_record.h).
#include "dirops/dir_ops_record.h"

#include <linux/fs.h>

#include <string>

#include <gtest/gtest.h>

namespace fedfs::ns {
namespace {

using Record = DirOps::Record;

void ExpectSame(const Record& a, const Record& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.from, b.from);
  EXPECT_EQ(a.to, b.to);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.cred.uid, b.cred.uid);
  EXPECT_EQ(a.cred.gid, b.cred.gid);
  EXPECT_EQ(a.cred.groups, b.cred.groups);
  EXPECT_EQ(a.cred.umask, b.cred.umask);
  EXPECT_EQ(a.holders, b.holders);
  EXPECT_EQ(a.done, b.done);
  ASSERT_EQ(a.saved.size(), b.saved.size());
  for (auto i = a.saved.begin(), j = b.saved.begin(); i != a.saved.end(); ++i, ++j) {
    EXPECT_EQ(i->first, j->first);
    EXPECT_EQ(i->second.mode, j->second.mode);
    EXPECT_EQ(i->second.uid, j->second.uid);
    EXPECT_EQ(i->second.gid, j->second.gid);
  }
  ASSERT_EQ(a.templates.size(), b.templates.size());
  for (size_t i = 0; i < a.templates.size(); ++i) {
    EXPECT_EQ(a.templates[i].mode, b.templates[i].mode);
    EXPECT_EQ(a.templates[i].uid, b.templates[i].uid);
    EXPECT_EQ(a.templates[i].gid, b.templates[i].gid);
  }
}

Record Sample() {
  Record r;
  r.id = 17;
  r.kind = Record::Kind::kRename;
  r.state = Record::State::kActing;
  r.from = "/a/src";
  r.to = "/b/dst";
  r.flags = RENAME_NOREPLACE;
  r.cred.uid = 1000;
  r.cred.gid = 1000;
  r.cred.groups = {1000, 27};
  r.cred.umask = 022;
  r.holders = {"n1", "n2", "n3"};
  r.done = {"n1"};
  r.saved["n2"] = {0750, 1000, 1000};
  r.templates = {{0755, 0, 0}, {0700, 1000, 1000}};
  return r;
}

TEST(DirOpsRecordCodec, RoundTrip) {
  const Record r = Sample();
  auto back = DecodeRecord(EncodeRecord(r));
  ASSERT_TRUE(back) << back.error().context;
  ExpectSame(r, *back);
}

// Found by fuzz_dirops (tests/fuzz/corpus/fuzz_dirops/regress_saved_node_nul):
// DecodeRecord accepts a NUL inside a saved directory's node name, and
// EncodeRecord wrote that name (and `from`, `to`) through c_str(), cutting
// it at the NUL: the record read back named another node.
TEST(DirOpsRecordCodec, NamesWithANulRoundTrip) {
  Record r = Sample();
  r.saved.clear();
  r.saved[std::string("\0" "2", 2)] = {0755, 0, 0};
  r.holders = {std::string("n\0" "1", 3), "n2"};
  r.done = {std::string("n\0" "1", 3)};
  auto back = DecodeRecord(EncodeRecord(r));
  ASSERT_TRUE(back) << back.error().context;
  ExpectSame(r, *back);
}

TEST(DirOpsRecordCodec, DamagedRecordsAreRefused) {
  const std::string good = EncodeRecord(Sample());
  for (size_t n = 0; n < good.size(); ++n) {
    auto r = DecodeRecord(std::string_view(good.data(), n));
    ASSERT_FALSE(r) << "truncated to " << n;
    EXPECT_EQ(r.error().code, EPROTO);
  }
}

}  // namespace
}  // namespace fedfs::ns
