// test_phase_timer.cpp — PhaseTimer on the CPU: segments are cut at marks, repeated names add up
// per step, and the report lists every phase with the median of its per-step totals.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/phase_timer.h"

namespace hstu {
namespace {

void busy_ms(double ms) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
  while (std::chrono::steady_clock::now() < until) {
  }
}

TEST(PhaseTimer, SegmentsAddUpPerStepAndReport) {
  PhaseTimer timer(Device::kCPU);
  Ctx ctx = cpu_ctx();
  ctx.phases = &timer;
  for (int step = 0; step < 3; ++step) {
    timer.begin_step(ctx.stream);
    for (int layer = 0; layer < 2; ++layer) {
      phase(ctx, "a");
      busy_ms(4);
      phase(ctx, "b");
      busy_ms(1);
    }
    timer.end_step(ctx.stream);
  }
  EXPECT_EQ(timer.steps(), 3);
  const std::string r = timer.report();
  // "a" ran 2 x 4 ms per step, "b" 2 x 1 ms: a is listed first, twice per step.
  const auto pa = r.find("\na "), pb = r.find("\nb ");
  ASSERT_NE(pa, std::string::npos) << r;
  ASSERT_NE(pb, std::string::npos) << r;
  EXPECT_LT(pa, pb) << r;
  double ms_a = 0;
  long long marks_a = 0;
  ASSERT_EQ(std::sscanf(r.c_str() + pa + 1, "a %lld %lf", &marks_a, &ms_a), 2) << r;
  EXPECT_EQ(marks_a, 2);
  EXPECT_GE(ms_a, 8.0);
  EXPECT_LT(ms_a, 80.0);  // generous: the box may be loaded
  EXPECT_NE(r.find("total"), std::string::npos);
}

TEST(PhaseTimer, NoTimerAttachedIsANoOp) {
  Ctx ctx = cpu_ctx();
  phase(ctx, "ignored");  // must not crash without a timer
  SUCCEED();
}

TEST(PhaseTimer, TooManyMarksIsAnError) {
  PhaseTimer timer(Device::kCPU, 4);
  timer.begin_step(nullptr);
  timer.mark("x", nullptr);
  timer.mark("y", nullptr);
  timer.mark("z", nullptr);
  EXPECT_THROW(timer.mark("w", nullptr), Error);
}

}  // namespace
}  // namespace hstu
