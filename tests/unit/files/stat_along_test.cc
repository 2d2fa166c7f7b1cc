// NodeFs::StatWatchedAlong over the file service (kStatMany, files/fs.fbs):
// the name asked for first, then up to `along` regular files after it
// (names without numbers: byte order and version order agree), each as a
// StatWatched answers it; requests that cannot be
// right are refused.
#include "tests/unit/files/remote_fs_fixture.h"

namespace fedfs::ns {
namespace {

class StatAlongTest : public RemoteFsTest {};

TEST_P(StatAlongTest, TheNameAskedForThenTheRegularFilesAfterItInByteOrder) {
  CallbackClient cc = NewCallbackClient();
  ASSERT_TRUE(cc.fs);
  ASSERT_TRUE(remote_->Mkdir(me_, "/d", 0755));
  for (const char* f : {"/d/b", "/d/a", "/d/e", "/d/c", "/d/f", "/d/g"}) {
    auto c = remote_->Create(me_, f, O_RDWR, 0644);
    ASSERT_TRUE(c) << c.error().ToString();
    ASSERT_TRUE(remote_->Release(c->handle));
  }
  ASSERT_TRUE(remote_->Mkdir(me_, "/d/d", 0755));  // not a regular file: skipped
  ASSERT_EQ(::truncate(P("/d/e").c_str(), 5), 0);

  auto r = cc.fs->StatWatchedAlong(me_, "/d", "b", 3);
  ASSERT_TRUE(r) << r.error().ToString();
  std::vector<std::string> names;
  for (const auto& [name, w] : *r) {
    names.push_back(name);
    ASSERT_TRUE(w) << name << ": " << w.error().ToString();
    ExpectSameStat(w->st, Lstat(P("/d/" + name)));
    EXPECT_TRUE(w->watch.has_value()) << name << " is not watched";
  }
  EXPECT_EQ(names, (std::vector<std::string>{"b", "c", "e", "f"}));

  // A name that is not there: its error first, the others still.
  auto gone = cc.fs->StatWatchedAlong(me_, "/d", "bb", 2);
  ASSERT_TRUE(gone) << gone.error().ToString();
  ASSERT_EQ(gone->size(), 3u);
  EXPECT_EQ((*gone)[0].first, "bb");
  ASSERT_FALSE((*gone)[0].second);
  EXPECT_EQ((*gone)[0].second.error().code, ENOENT);
  EXPECT_EQ((*gone)[1].first, "c");
  EXPECT_EQ((*gone)[2].first, "e");

  // None along: the name only; the last name: nothing after it.
  auto one = cc.fs->StatWatchedAlong(me_, "/d", "a", 0);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->size(), 1u);
  auto last = cc.fs->StatWatchedAlong(me_, "/d", "g", 64);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->size(), 1u);
}

TEST_P(StatAlongTest, MoreThanOneNameOrTooManyAlongAreRefused) {
  ASSERT_TRUE(remote_->Stat(me_, "/"));  // the session exists
  auto ep = client_.transport->GetEndpoint(server_addr_);
  auto ask = [&](std::vector<std::string> names, uint64_t along) {
    flatbuffers::FlatBufferBuilder b(128);
    auto p = b.CreateString("/");
    auto n = b.CreateVectorOfStrings(names);
    fb::FsRequestBuilder rb(b);
    rb.add_version(fswire::kVersion);
    rb.add_op(fb::Op::kStatMany);
    rb.add_path(p);
    rb.add_names(n);
    rb.add_length(along);
    b.Finish(rb.Finish());
    auto r = m2m::CallSync(*ep, MethodId(RpcMethod::kFsMeta), fswire::Finish(b), 5s);
    return r ? 0 : r.error().code;
  };
  const uint64_t refused = service_->stats().refused;
  EXPECT_EQ(ask({"a", "b"}, 1), EPROTO);
  EXPECT_EQ(ask({}, 1), EPROTO);
  EXPECT_EQ(ask({"a"}, fswire::kMaxStatMany + 1), EPROTO);
  EXPECT_EQ(ask({".."}, 1), EINVAL);
  EXPECT_EQ(ask({"a/b"}, 1), EINVAL);
  EXPECT_EQ(service_->stats().refused, refused + 5);
  // The service keeps serving.
  EXPECT_TRUE(remote_->Stat(me_, "/"));
}

INSTANTIATE_TEST_SUITE_P(Nets, StatAlongTest, ::testing::Values(Net::kFake, Net::kUcx), NetName);

}  // namespace
}  // namespace fedfs::ns
