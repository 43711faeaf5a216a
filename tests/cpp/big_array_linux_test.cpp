// big_array tests that change Linux settings: THP for this process (prctl) or machine-wide (sysfs).
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>

#include "memcost/big_array.hpp"
#include "test_support.hpp"

using namespace memcost;
using namespace memcost::test;

// THP disabled for this process (prctl): the mapping still asks for huge pages, the kernel gives
// base pages, and the report must say what was given, not what was asked.
TEST(BigArray, ReportsTheBasePagesItGotWhenThpWasAskedFor) {
  if (!thp_usable()) GTEST_SKIP() << "THP is not usable here: a thp request falls back before mapping";
  ASSERT_EQ(prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0), 0);
  struct Restore {
    ~Restore() { prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0); }
  } restore;
  auto a = make_big_array<std::uint64_t>(8 * MiB, zero, {.pages = pages::thp});
  EXPECT_TRUE(a.report().read_back);
  EXPECT_EQ(a.report().page_kind, "base");
  EXPECT_LT(a.huge_fraction(), 0.5);
  ASSERT_FALSE(a.report().fallbacks.empty());
  EXPECT_NE(a.report().fallbacks.back().find("thp: mapped for transparent huge pages"), std::string::npos);

  auto later = make_big_array<std::uint64_t>(8 * MiB, zero, {.pages = pages::thp, .strict = false, .prefault = prefault::async});
  later.wait();
  EXPECT_TRUE(later.report().read_back);
  EXPECT_EQ(later.report().page_kind, "base");
}

// THP switched to "never" machine-wide for the test (as root), and set back after.
class WithThpNever : public ::testing::Test {
 protected:
  static constexpr const char* kEnabled = "/sys/kernel/mm/transparent_hugepage/enabled";
  void SetUp() override {
    std::ifstream current(kEnabled);
    std::string modes;
    if (!current || !std::getline(current, modes)) GTEST_SKIP() << "this kernel has no THP settings";
    auto open = modes.find('['), close = modes.find(']');
    if (open == std::string::npos || close == std::string::npos) GTEST_SKIP() << "unexpected THP setting: " << modes;
    original_ = modes.substr(open + 1, close - open - 1);
    if (!write("never")) GTEST_SKIP() << "setting THP to never needs root";
    changed_ = true;
  }
  void TearDown() override {
    if (changed_) {
      EXPECT_TRUE(write(original_));
    }
  }
  static bool write(const std::string& mode) {
    std::ofstream file(kEnabled);
    file << mode;
    file.flush();
    return static_cast<bool>(file);
  }

 private:
  std::string original_;
  bool changed_ = false;
};

TEST_F(WithThpNever, AThpRequestReportsTheBasePagesItGot) {
  auto a = make_big_array<std::uint64_t>(8 * MiB, zero, {.pages = pages::thp});
  EXPECT_EQ(a.report().page_kind, "base");
  EXPECT_LT(a.huge_fraction(), 0.5);
  EXPECT_FALSE(a.report().fallbacks.empty());
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](std::uint64_t v) { return v == 0; }));
  EXPECT_THROW((void)make_big_array<std::uint64_t>(8 * MiB, zero, {.pages = pages::thp, .strict = true}), big_array_error);
}

