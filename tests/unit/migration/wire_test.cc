// The messages of file moves (migration/migration_internal.h): what the
// newer fields carry across the wire, and what the decoder refuses.
#include <gtest/gtest.h>

#include <string>

#include "migration/migration_internal.h"

namespace fedfs::ns {
namespace {

TEST(MigrationWire, TriggerDryRunFilesAndHashesRoundTrip) {
  const MoveMsg m{.path = "/a/b",
                  .from = "n1",
                  .to = "n2",
                  .trigger = static_cast<uint8_t>(MoveTrigger::kRebalance),
                  .dry_run = true,
                  .max_rate = 50 << 20,
                  .chunk = 64 << 10,
                  .hashes = {ChunkHashValue{1, 2}, ChunkHashValue{3, 4}},
                  .files = {{"/big", 5u << 20}, {"/d/small", 1u << 20}}};
  auto back = DecodeMsg(EncodeMsg(m));
  ASSERT_TRUE(back.has_value()) << back.error().ToString();
  EXPECT_EQ(back->trigger, m.trigger);
  EXPECT_TRUE(back->dry_run);
  EXPECT_EQ(back->max_rate, m.max_rate);
  EXPECT_EQ(back->files, m.files);
  EXPECT_EQ(back->chunk, m.chunk);
  EXPECT_EQ(back->hashes, m.hashes);
}

TEST(MigrationWire, TheDecoderRefusesWhatNoNodeSends) {
  const MoveMsg good{.from = "n1"};
  struct Case {
    const char* name;
    void (*spoil)(MoveMsg&);
  };
  const Case cases[] = {
      {"an unknown trigger", [](MoveMsg& m) { m.trigger = kMoveTriggers; }},
      {"a file's path not global", [](MoveMsg& m) { m.files = {{"relative", 1}}; }},
      {"a file at /", [](MoveMsg& m) { m.files = {{"/", 1}}; }},
      {"hashes without a block size", [](MoveMsg& m) { m.hashes = {ChunkHashValue{1, 1}}; }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    MoveMsg m = good;
    k.spoil(m);
    auto r = DecodeMsg(EncodeMsg(m));
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, EPROTO);
  }
  ASSERT_TRUE(DecodeMsg(EncodeMsg(good)).has_value());
}

// A message that the FlatBuffers verifier accepts with its chunk hashes
// (a [ulong]) 4 bytes off their alignment (the verifier checks the length
// word's only): found by fuzz_migration, a misaligned load under UBSan
// before the hashes were copied out bytewise.
TEST(MigrationWire, HashesOfAMisalignedVector) {
  const uint8_t crafted[] = {
      48, 0, 0, 0, 44, 0, 36, 0, 32, 0, 0, 0, 28, 0, 24, 0,
      20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0,
      3, 0, 0, 0, 0, 0, 15, 0, 8, 0, 0, 0, 0, 0, 20, 0,
      44, 0, 0, 0, 32, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 1,
      28, 0, 0, 0, 28, 0, 0, 0, 32, 0, 0, 0, 36, 0, 0, 0,
      1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
      2, 0, 0, 0, 110, 50, 0, 0, 2, 0, 0, 0, 110, 51, 0, 0,
      7, 0, 0, 0, 47, 100, 97, 116, 97, 47, 47, 0,
  };
  const auto* p = reinterpret_cast<const std::byte*>(crafted);
  const m2m::Bytes payload(p, p + sizeof crafted);  // 8-aligned, as a received payload
  // Read (UBSan, in the sanitizer build, stops a misaligned load here),
  // then refused: hashes of no block size.
  auto m = DecodeMsg(payload);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code, EPROTO);
  EXPECT_NE(m.error().context.find("hashes of no chunk"), std::string::npos) << m.error().context;
}

TEST(MigrationWire, DeltaBlocksGrowSoThatOneMessageCoversAnyFile) {
  const uint64_t k64 = 64 << 10;
  EXPECT_EQ(DeltaBlock(0, k64), k64);
  EXPECT_EQ(DeltaBlock(uint64_t{1} << 30, k64), k64);  // 16,384 blocks
  EXPECT_EQ(DeltaBlock(kMaxDeltaChunks * k64, k64), k64);
  EXPECT_EQ(DeltaBlock(kMaxDeltaChunks * k64 + 1, k64), 2 * k64);
  const uint64_t big = uint64_t{1} << 40;  // 1 TiB
  const uint64_t b = DeltaBlock(big, k64);
  EXPECT_LE((big + b - 1) / b, kMaxDeltaChunks);
  EXPECT_GT((big + b / 2 - 1) / (b / 2), kMaxDeltaChunks);  // the smallest such block
}

TEST(MigrationWire, ChunkHashesTellBlocksApart) {
  std::string a(64 << 10, 'a'), b = a;
  b[12345] = 'b';
  const auto* pa = reinterpret_cast<const std::byte*>(a.data());
  const auto* pb = reinterpret_cast<const std::byte*>(b.data());
  EXPECT_EQ(ChunkHash(pa, a.size()), ChunkHash(pa, a.size()));
  EXPECT_NE(ChunkHash(pa, a.size()), ChunkHash(pb, b.size()));
  EXPECT_NE(ChunkHash(pa, a.size()), ChunkHash(pa, a.size() - 1));  // a shorter last block
}

}  // namespace
}  // namespace fedfs::ns
