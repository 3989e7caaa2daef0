// test_lr_schedule.cpp — constant, warmup_linear and warmup_cosine learning rates by step.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "common/test_util.h"
#include "train/lr_schedule.h"

namespace hstu {
namespace {

using test::error_of;

TEST(LrSchedule, Constant) {
  const LrSchedule s(parse_lr_schedule("constant"), 1e-3, 0);
  EXPECT_EQ(s.lr_at(0), 1e-3);
  EXPECT_EQ(s.lr_at(123456), 1e-3);
  const LrSchedule w(LrScheduleKind::kConstant, 1.0, 4);  // warmup applies to constant too
  EXPECT_EQ(w.lr_at(0), 0.25);
  EXPECT_EQ(w.lr_at(1), 0.5);
  EXPECT_EQ(w.lr_at(3), 1.0);
  EXPECT_EQ(w.lr_at(4), 1.0);
  EXPECT_EQ(w.lr_at(1000000), 1.0);
}

TEST(LrSchedule, WarmupLinear) {
  const LrSchedule s("warmup_linear", 2.0, 2, 6);
  const double want[] = {1.0, 2.0, 2.0, 1.5, 1.0, 0.5, 0.0, 0.0};
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(s.lr_at(i), want[i]) << "step " << i;
  EXPECT_EQ(s.lr_at(100), 0.0);
}

TEST(LrSchedule, WarmupCosine) {
  const LrSchedule s(parse_lr_schedule("warmup_cosine"), 1.0, 0, 4);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.5 * (1 + std::cos(std::numbers::pi / 4)));
  EXPECT_NEAR(s.lr_at(2), 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr_at(3), 0.5 * (1 + std::cos(3 * std::numbers::pi / 4)));
  EXPECT_EQ(s.lr_at(4), 0.0);
  const LrSchedule w(LrScheduleKind::kWarmupCosine, 1.0, 10, 110);
  EXPECT_DOUBLE_EQ(w.lr_at(4), 0.5);
  EXPECT_DOUBLE_EQ(w.lr_at(10), 1.0);
  EXPECT_NEAR(w.lr_at(60), 0.5, 1e-15);
  for (int i = 11; i < 110; ++i) EXPECT_LT(w.lr_at(i), w.lr_at(i - 1));  // strictly decaying
}

TEST(LrSchedule, Errors) {
  EXPECT_NE(error_of([] { parse_lr_schedule("cosine"); }).find("unknown lr_schedule \"cosine\""),
            std::string::npos);
  EXPECT_NE(error_of([] {
              LrSchedule(LrScheduleKind::kWarmupLinear, 1.0, 10, 10);
            }).find("total steps (10) > warmup_steps (10)"),
            std::string::npos);
  EXPECT_NE(error_of([] { LrSchedule(LrScheduleKind::kConstant, -1.0, 0); }).find(">= 0"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              LrSchedule(LrScheduleKind::kConstant, 1.0, 0).lr_at(-1);
            }).find("steps are >= 0"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu
