#include "files/name_windows.h"

#include <dirent.h>

#include <gtest/gtest.h>

#include <thread>

namespace fedfs::ns {
namespace {

std::vector<DirEntry> Entries(const std::vector<std::string>& names) {
  std::vector<DirEntry> out;
  for (const auto& n : names) out.push_back(DirEntry{.name = n, .type = DT_REG});
  return out;
}

class NameWindowsTest : public ::testing::Test {
 protected:
  NameWindows::ListFn List() {
    return [this]() -> Result<std::vector<DirEntry>> {
      ++lists_;
      auto e = Entries(names_);
      e.push_back(DirEntry{.name = "sub", .type = DT_DIR});  // not a regular file
      return e;
    };
  }
  std::vector<std::string> names_;
  int lists_ = 0;
};

TEST_F(NameWindowsTest, HalfInByteOrderHalfInVersionOrder) {
  for (int i = 0; i < 30; ++i) names_.push_back("p-" + std::to_string(i));
  NameWindows w;
  // Byte order after p-1: p-10, p-11, ...; version order: p-2, p-3, ...
  auto a = w.After("/d", "p-1", 6, List());
  EXPECT_EQ(a, (std::vector<std::string>{"p-10", "p-11", "p-12", "p-2", "p-3", "p-4"}));
  // Where the two overlap each name comes once, and the window stays full.
  auto b = w.After("/d", "p-25", 4, List());
  EXPECT_EQ(b, (std::vector<std::string>{"p-26", "p-27", "p-28", "p-29"}));
  // Past the end: version order has p-10..p-29 after p-9; byte order none.
  auto c = w.After("/d", "p-9", 3, List());
  EXPECT_EQ(c, (std::vector<std::string>{"p-10", "p-11", "p-12"}));
  EXPECT_TRUE(w.After("/d", "p-9", 0, List()).empty());
  EXPECT_TRUE(w.After("/d", "z", 5, List()).empty());
  EXPECT_EQ(lists_, 1);  // listed once, kept
  EXPECT_EQ(w.stats().listed, 1u);
  EXPECT_GE(w.stats().reused, 3u);
}

TEST_F(NameWindowsTest, AListingIsKeptForMaxAgeWhateverChanges) {
  names_ = {"a", "b"};
  NameWindows w({.max_age = std::chrono::milliseconds(100)});
  EXPECT_EQ(w.After("/d", "a", 4, List()), std::vector<std::string>{"b"});
  names_ = {"a", "b", "c"};
  EXPECT_EQ(w.After("/d", "a", 4, List()), std::vector<std::string>{"b"});  // kept
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_EQ(w.After("/d", "a", 4, List()), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(lists_, 2);
}

TEST_F(NameWindowsTest, BoundsAndErrors) {
  NameWindows w({.max_dirs = 2, .max_names = 3});
  names_ = {"a", "b", "c", "d"};
  EXPECT_TRUE(w.After("/big", "a", 4, List()).empty());  // more than max_names
  names_ = {"a", "b"};
  for (const char* d : {"/1", "/2", "/3"}) EXPECT_EQ(w.After(d, "a", 1, List()).size(), 1u);
  const int before = lists_;
  w.After("/3", "a", 1, List());  // kept
  EXPECT_EQ(lists_, before);
  w.After("/1", "a", 1, List());  // the oldest went
  EXPECT_EQ(lists_, before + 1);
  auto fails = [] { return Result<std::vector<DirEntry>>(Err(EACCES, "list")); };
  EXPECT_TRUE(w.After("/x", "a", 4, fails).empty());
}

}  // namespace
}  // namespace fedfs::ns
