// test_step_graph.cpp — StepGraph where no graph can be captured (the GPU side, bit-identical
// graph and direct training steps, is tests/gpu/test_gpu_step_graph.cpp).
//
// Asserts: on the CPU, or with graphs disabled, every call runs its body once, directly, in call
// order, and the statistics and summary line say so; an exception from the body reaches the
// caller.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "core/step_graph.h"

namespace hstu {
namespace {

TEST(StepGraph, CpuContextRunsEveryStepDirectly) {
  for (bool enabled : {true, false}) {
    StepGraph graph(enabled);
    Ctx ctx = cpu_ctx();
    std::vector<int> ran;
    for (int i = 0; i < 3; ++i) graph.run(ctx, [&] { ran.push_back(i); });
    EXPECT_EQ(ran, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(graph.stats().direct_steps, 3);
    EXPECT_EQ(graph.stats().graph_steps, 0);
    EXPECT_EQ(graph.stats().instantiations, 0);
    EXPECT_TRUE(graph.stats().failure.empty());
    EXPECT_EQ(graph.describe(), "CUDA graph: not used");
  }
}

TEST(StepGraph, BodyErrorsReachTheCaller) {
  StepGraph graph(true);
  Ctx ctx = cpu_ctx();
  EXPECT_THROW(graph.run(ctx, [] { throw std::runtime_error("bad batch"); }), std::runtime_error);
}

}  // namespace
}  // namespace hstu
