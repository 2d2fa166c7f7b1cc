// The access trigger's meter (migration/access.h): which files move where,
// after how many windows, and what cooldown and hysteresis hold back.
#include <gtest/gtest.h>

#include "migration/access.h"

namespace fedfs::ns {
namespace {

using namespace std::chrono_literals;
using Candidate = AccessMeter::Candidate;

AccessOptions Opts() {
  AccessOptions o;
  o.enabled = true;
  o.share = 0.8;
  o.min_bytes = 100;
  o.window = 1s;
  o.windows = 2;
  o.cooldown = 60s;
  o.max_tracked = 3;
  return o;
}

class AccessMeterTest : public ::testing::Test {
 protected:
  // One window in which each (node, bytes) read /f, then its candidates.
  std::vector<Candidate> Window(std::vector<std::pair<std::string, uint64_t>> reads,
                                const std::string& path = "/f") {
    for (const auto& [node, bytes] : reads) m_.Count(path, node, bytes);
    now_ += 1s;
    return m_.EndWindow(now_);
  }
  AccessMeter m_{Opts(), "n1"};
  AccessMeter::Clock::time_point now_{};
};

TEST_F(AccessMeterTest, AFileReadMostlyThroughOneNodeMovesThereAfterTheWindowsInARow) {
  EXPECT_TRUE(Window({{"n2", 900}, {"n1", 100}}).empty());  // one window only
  EXPECT_EQ(Window({{"n2", 900}, {"n1", 100}}), (std::vector<Candidate>{{"/f", "n2", 900}}));
}

TEST_F(AccessMeterTest, TooSmallAShareTooFewBytesOrThisNodeMovesNothing) {
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(Window({{"n2", 700}, {"n1", 300}}).empty());  // 0.7 < 0.8
    EXPECT_TRUE(Window({{"n2", 99}}, "/small").empty());      // under min_bytes
    EXPECT_TRUE(Window({{"n1", 5000}}, "/mine").empty());     // read here
  }
}

TEST_F(AccessMeterTest, AWindowWithoutTheShareEndsTheStreak) {
  EXPECT_TRUE(Window({{"n2", 900}}).empty());
  EXPECT_TRUE(Window({}).empty());  // not read at all
  EXPECT_TRUE(Window({{"n2", 900}}).empty());
  EXPECT_TRUE(Window({{"n3", 900}}).empty());  // another node: a new streak
  EXPECT_EQ(Window({{"n3", 900}}), (std::vector<Candidate>{{"/f", "n3", 900}}));
}

TEST_F(AccessMeterTest, AnArrivedFileWaitsOutTheCooldownAndTwiceThatToGoBack) {
  m_.Arrived("/f", "n2", now_);  // came from n2
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Window({{"n3", 900}}).empty()) << i;  // cooldown
  now_ += 60s;
  // Past the cooldown: to n3 at once (its streak went on), not back to n2.
  EXPECT_EQ(Window({{"n3", 900}}), (std::vector<Candidate>{{"/f", "n3", 900}}));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Window({{"n2", 900}}).empty()) << i;  // hysteresis
  now_ += 60s;
  EXPECT_EQ(Window({{"n2", 900}}), (std::vector<Candidate>{{"/f", "n2", 900}}));
}

TEST_F(AccessMeterTest, AFileMovedOrNotIsNotTriedAgainWithinTheCooldown) {
  EXPECT_TRUE(Window({{"n2", 900}}).empty());
  EXPECT_EQ(Window({{"n2", 900}}).size(), 1u);
  m_.Held("/f", now_);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Window({{"n2", 900}}).empty()) << i;
  now_ += 60s;
  EXPECT_EQ(Window({{"n2", 900}}).size(), 1u);
}

TEST_F(AccessMeterTest, AtMostMaxTrackedFilesAreCountedPerWindow) {
  for (int i = 0; i < 10; ++i) m_.Count("/f" + std::to_string(i), "n2", 1000);
  EXPECT_EQ(m_.tracked(), 3u);
  now_ += 1s;
  EXPECT_TRUE(m_.EndWindow(now_).empty());
  EXPECT_EQ(m_.tracked(), 0u);
}

}  // namespace
}  // namespace fedfs::ns
