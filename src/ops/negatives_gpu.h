// negatives_gpu.h — negative sampling for the sampled-softmax loss on the GPU, drawing exactly
// the ids the CPU samplers (data/negatives.h) draw: both evaluate the per-element formula of
// data/negatives_rng.h, a pure function of (seed, step, t * R + r). CUDA-only entry points
// (namespace hstu::cuda), defined in cuda/negatives_gpu.cu in CUDA builds only.
//
// The one decision: nothing goes through the host. neg_ids is filled in place on ctx.stream;
// the in-batch pool (sorted unique non-zero targets) is built on the device with CUB and its size
// stays on the device, read by the sampling kernel.
#pragma once

#include <cstdint>

#include "core/context.h"
#include "core/tensor.h"

namespace hstu::cuda {

// neg_ids[T, R] (i32, CUDA) = uniform_negative(seed, step, (o + t) * R + r, num_items): ids in
// [1, num_items); o = token_offset, where the batch's tokens start in a data-parallel step's
// global batch. Requires T * R < 2^34, step < 2^32 and 2 <= num_items <= 2^32.
void sample_uniform_negatives(Ctx& ctx, int64_t num_items, uint64_t seed, uint64_t step,
                              const Tensor& neg_ids, int64_t token_offset = 0);

// neg_ids[T, R] = pool[in_batch_negative_index(seed, step, (o + t) * R + r, |pool|)] with pool the
// sorted unique non-zero ids of targets[N] (i32, CUDA; N need not equal T). Uses ctx.scratch.
// A batch without any supervised token has an empty pool: its negatives are all 0 (the CPU
// sampler rejects that case; here no host check is possible without a synchronisation).
void sample_in_batch_negatives(Ctx& ctx, const Tensor& targets, uint64_t seed, uint64_t step,
                               const Tensor& neg_ids, int64_t token_offset = 0);

// neg_ids[T, R] = pool[key_negative_index(seed, step, (o + t) * R + r, n)] with n = *count
// (pool i32 sorted ascending and count i32 [1] on the device: the ids whose keys a dynamic item
// table holds, cuda::present_pool); an empty pool draws uniform_negative(seed, step, ..,
// num_items) instead. The CPU reference is train/table_negatives.h sample_pool_negatives.
void sample_pool_negatives(Ctx& ctx, const Tensor& pool, const Tensor& count, int64_t num_items,
                           uint64_t seed, uint64_t step, const Tensor& neg_ids,
                           int64_t token_offset = 0);

}  // namespace hstu::cuda
