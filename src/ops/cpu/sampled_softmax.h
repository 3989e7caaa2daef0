// cpu/sampled_softmax.h — the CPU backend of the sampled-softmax retrieval loss
// (ops/sampled_softmax.h), defined in cpu/sampled_softmax.cpp: what sampled_softmax.cpp dispatches
// to on a CPU ctx. Private to src/ops/ (tests/gpu includes it to compare the backends).
#pragma once

#include "ops/sampled_softmax.h"

namespace hstu::cpu {
void sampled_softmax(Ctx&, const SampledSoftmaxSpec&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&);
}  // namespace hstu::cpu
