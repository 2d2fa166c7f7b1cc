// The reads of a move's copy ahead of its writes (migration/copy_ahead.h):
// every chunk handed out once, in the file's order, the last one short, for
// any number of streams; a consumer that stops early ends the streams.
#include <gtest/gtest.h>

#include <string>

#include "migration/copy_ahead.h"
#include "nodefs/mem_node_fs.h"

namespace fedfs::ns {
namespace {

constexpr size_t kChunk = 4096;

struct File {
  MemNodeFs fs{"n1"};
  Handle h = 0;
  std::string bytes;
  explicit File(size_t size) {
    for (size_t i = 0; i < size; ++i) bytes.push_back(static_cast<char>('a' + (i * 7 + i / 13) % 26));
    auto c = fs.Create(Cred{}, "/f", O_RDWR, 0644);
    EXPECT_TRUE(c) << c.error().ToString();
    h = c->handle;
    if (size > 0) {
      auto w = fs.Write(h, 0, std::as_bytes(std::span(bytes.data(), bytes.size())));
      EXPECT_TRUE(w) << w.error().ToString();
    }
  }
};

TEST(CopyAhead, HandsOutEveryChunkOnceInOrderAndTheLastShort) {
  for (size_t size : {size_t{0}, kChunk - 1, kChunk, 5 * kChunk + 17, 8 * kChunk}) {
    for (int streams : {1, 2, 3}) {
      File f(size);
      CopyAhead ahead(&f.fs, f.h, kChunk, streams);
      std::string got;
      size_t chunks = 0;
      for (;;) {
        auto c = ahead.Next();
        ASSERT_TRUE(c) << c.error().ToString();
        ++chunks;
        got.append(reinterpret_cast<const char*>(c->data()), c->size());
        if (c->size() < kChunk) break;
      }
      EXPECT_EQ(got, f.bytes) << "size " << size << ", " << streams << " streams";
      EXPECT_EQ(chunks, size / kChunk + 1) << "size " << size << ", " << streams << " streams";
    }
  }
}

TEST(CopyAhead, AConsumerThatStopsEarlyEndsTheStreams) {
  File f(64 * kChunk);
  for (int streams : {1, 2, 4}) {
    CopyAhead ahead(&f.fs, f.h, kChunk, streams);
    auto c = ahead.Next();
    ASSERT_TRUE(c) << c.error().ToString();
    EXPECT_EQ(c->size(), kChunk);
  }  // the destructor joins the streams, each waiting for a free buffer
}

TEST(CopyAhead, AFailedReadIsHandedOutInItsPlace) {
  File f(3 * kChunk);
  ASSERT_TRUE(f.fs.Release(f.h));
  CopyAhead ahead(&f.fs, f.h, kChunk, 2);  // a handle no longer open
  auto c = ahead.Next();
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, EBADF);
}

}  // namespace
}  // namespace fedfs::ns
