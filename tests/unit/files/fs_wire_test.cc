// The file service's wire helpers (files/fs_wire.h) on crafted buffers.
#include "files/fs_wire.h"

#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

namespace fedfs::ns {
namespace {

namespace fb = fswire::fb;

// Found by fuzz_file (tests/fuzz/corpus/fuzz_file/regress_attr_changed_misaligned):
// the verifier accepts an FsAttrChanged whose [uint64] handles start 4 bytes
// off 8-alignment (it checks only the 4-aligned length word), and
// FsCallbacks read them in place, a misaligned load (UBSan stops it).
// HandlesOf copies them instead.
TEST(FsWire, HandlesOfAMisalignedVector) {
  const uint8_t crafted[] = {
      16, 0, 0, 0,                    //  0: root table at 16
      10, 0, 8, 0, 0, 0, 0, 0, 4, 0,  //  4: vtable: version, session absent; handles at +4
      0, 0,                           // 14: padding
      12, 0, 0, 0,                    // 16: table: its vtable is 12 bytes before
      4, 0, 0, 0,                     // 20: handles: the vector 4 bytes on
      1, 0, 0, 0,                     // 24: one element
      1, 2, 3, 4, 5, 6, 7, 8,         // 28: the handle, at 4 mod 8
  };
  const auto* p = reinterpret_cast<const std::byte*>(crafted);
  const m2m::Bytes payload(p, p + sizeof crafted);  // 8-aligned, as a received payload
  const fb::FsAttrChanged* a = fswire::Verify<fb::FsAttrChanged>(payload);
  ASSERT_NE(a, nullptr) << "the verifier accepts it";
  ASSERT_NE(a->handles(), nullptr);
  ASSERT_EQ(a->handles()->size(), 1u);
  EXPECT_NE(reinterpret_cast<uintptr_t>(a->handles()->Data()) % 8, 0u);
  const std::vector<Handle> handles = fswire::HandlesOf(*a);
  ASSERT_EQ(handles.size(), 1u);
  EXPECT_EQ(handles[0], 0x0807060504030201u);
}

TEST(FsWire, PinnedOfPairsWatchesWithHandles) {
  flatbuffers::FlatBufferBuilder b(64);
  auto w = b.CreateVector(std::vector<uint64_t>{7, 9});
  auto h = b.CreateVector(std::vector<uint64_t>{70, 90});
  fb::FsAttrChangedBuilder ab(b);
  ab.add_version(fswire::kVersion);
  ab.add_pinned_watches(w);
  ab.add_pinned_handles(h);
  b.Finish(ab.Finish());
  const m2m::Bytes bytes = fswire::Finish(b);
  const auto* a = fswire::Verify<fb::FsAttrChanged>(bytes);
  ASSERT_NE(a, nullptr);
  const auto pinned = fswire::PinnedOf(*a);
  ASSERT_EQ(pinned.size(), 2u);
  EXPECT_EQ(pinned[0], std::make_pair(Handle{7}, Handle{70}));
  EXPECT_EQ(pinned[1], std::make_pair(Handle{9}, Handle{90}));
}

TEST(FsWire, HandlesOfNoneAndEmpty) {
  flatbuffers::FlatBufferBuilder b(64);
  fb::FsAttrChangedBuilder ab(b);
  ab.add_version(fswire::kVersion);
  b.Finish(ab.Finish());
  const m2m::Bytes none = fswire::Finish(b);
  const auto* a = fswire::Verify<fb::FsAttrChanged>(none);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(fswire::HandlesOf(*a).empty());

  flatbuffers::FlatBufferBuilder e(64);
  auto v = e.CreateVector(std::vector<uint64_t>{});
  fb::FsAttrChangedBuilder eb(e);
  eb.add_handles(v);
  e.Finish(eb.Finish());
  const m2m::Bytes empty = fswire::Finish(e);
  const auto* ae = fswire::Verify<fb::FsAttrChanged>(empty);
  ASSERT_NE(ae, nullptr);
  EXPECT_TRUE(fswire::HandlesOf(*ae).empty());
}

}  // namespace
}  // namespace fedfs::ns
