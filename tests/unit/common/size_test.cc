// Sizes in bytes as the config and fedfsctl read them (common/size.h).
#include <gtest/gtest.h>

#include "common/size.h"

namespace fedfs {
namespace {

TEST(ParseByteSize, IntegersAndPowersOf1024) {
  EXPECT_EQ(ParseByteSize("0").value(), 0u);
  EXPECT_EQ(ParseByteSize("268435456").value(), 268435456u);
  EXPECT_EQ(ParseByteSize("4K").value(), 4096u);
  EXPECT_EQ(ParseByteSize("256MiB").value(), 256u << 20);
  EXPECT_EQ(ParseByteSize("256M").value(), 256u << 20);
  EXPECT_EQ(ParseByteSize("2GiB").value(), uint64_t{2} << 30);
  EXPECT_EQ(ParseByteSize("3T").value(), uint64_t{3} << 40);
}

TEST(ParseByteSize, RefusesWhatIsNotASize) {
  for (const char* bad : {"", "M", "1.5G", "-1", "12 M", "5PB", "5kb", "1Mi", "1234567890123456",
                          "16777216T"}) {
    auto r = ParseByteSize(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, EINVAL) << bad;
    }
  }
}

}  // namespace
}  // namespace fedfs
