// test_checked.cpp — the overflow-checked size helpers of core/checked.h: exact results in range,
// and an hstu::Error naming the quantity (not a wrapped value) at the int64 / int32 limits.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "common/test_util.h"
#include "core/checked.h"

namespace hstu {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(Checked, InRangeResultsAreExact) {
  EXPECT_EQ(checked_mul(1 << 20, 1 << 20, "x"), int64_t{1} << 40);
  EXPECT_EQ(checked_mul(-3, 7, "x"), -21);
  EXPECT_EQ(checked_mul(kMax, 1, "x"), kMax);
  EXPECT_EQ(checked_mul(kMax, 0, "x"), 0);
  EXPECT_EQ(checked_add(kMax - 1, 1, "x"), kMax);
  EXPECT_EQ(checked_add(kMin, -0, "x"), kMin);
  EXPECT_EQ(checked_i32(INT32_MAX, "x"), INT32_MAX);
  EXPECT_EQ(checked_i32(INT32_MIN, "x"), INT32_MIN);
}

TEST(Checked, OverflowIsAnErrorNamingTheQuantity) {
  EXPECT_EQ(test::error_of([] { checked_mul(int64_t{1} << 32, int64_t{1} << 31, "token bytes"); }),
            "size overflow: token bytes = 4294967296 * 2147483648 does not fit in 64 bits");
  EXPECT_EQ(test::error_of([] { checked_mul(kMin, -1, "m"); }),
            "size overflow: m = -9223372036854775808 * -1 does not fit in 64 bits");
  EXPECT_EQ(test::error_of([] { checked_add(kMax, 1, "user_offsets"); }),
            "size overflow: user_offsets = 9223372036854775807 + 1 does not fit in 64 bits");
  EXPECT_EQ(test::error_of([] { checked_add(kMin, -1, "a"); }),
            "size overflow: a = -9223372036854775808 + -1 does not fit in 64 bits");
  EXPECT_EQ(test::error_of([] { checked_i32(int64_t{INT32_MAX} + 1, "rank cap"); }),
            "size overflow: rank cap = 2147483648 does not fit in 32 bits");
  EXPECT_EQ(test::error_of([] { checked_i32(int64_t{INT32_MIN} - 1, "id"); }),
            "size overflow: id = -2147483649 does not fit in 32 bits");
}

}  // namespace
}  // namespace hstu
