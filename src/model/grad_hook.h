// grad_hook.h — where a model's backward pass tells its caller which gradients are complete, so
// a data-parallel step can all-reduce them while the rest of the backward pass runs.
//
// Stages of a model with a stack of L layers, in the order the backward pass reaches them:
//   0        the output side is done (the loss head, the final LayerNorm);
//   k = 1..L the backward of layer L - k is done (its parameters "layers.<L-k>.*");
//   L + 1    the input side is done (position embeddings): the end of the backward pass.
#pragma once

#include <cstdint>
#include <string>

#include "core/context.h"

namespace hstu {

class GradHook {
 public:
  virtual ~GradHook() = default;
  // Every dense gradient of stage `stage` and earlier is final (on ctx.stream).
  virtual void stage_done(Ctx& ctx, int stage) = 0;
};

// The stage after which dense parameter `name`'s gradient is final, in a stack of `num_layers`.
int grad_stage(const std::string& name, int64_t num_layers);

}  // namespace hstu
