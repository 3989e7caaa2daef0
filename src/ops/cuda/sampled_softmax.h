// cuda/sampled_softmax.h — the CUDA backend of the sampled-softmax retrieval loss
// (ops/sampled_softmax.h), defined in cuda/sampled_softmax.cu (CUDA builds only): what
// sampled_softmax.cpp dispatches to on a CUDA ctx. Private to src/ops/ (tests/gpu includes it to
// compare the backends); no CUDA types, so host code may include it.
#pragma once

#include "ops/sampled_softmax.h"

namespace hstu::cuda {
void sampled_softmax(Ctx&, const SampledSoftmaxSpec&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&);
}  // namespace hstu::cuda
