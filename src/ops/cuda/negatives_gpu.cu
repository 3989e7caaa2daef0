// negatives_gpu.cu — uniform and in-batch negative sampling on the GPU, bit-identical to the CPU
// samplers: every element evaluates data/negatives_rng.h's formula for e = t * R + r.
//
// The one decision: one thread per element and no host round trip; the in-batch pool is sorted
// and deduplicated with CUB in ctx.scratch and its size is read by the kernel from the device.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>

#include "data/negatives_rng.h"
#include "ops/cuda/common.cuh"
#include "ops/negatives_gpu.h"

namespace hstu::cuda {
namespace {

__global__ void uniform_negatives_kernel(int32_t* out, int64_t ld, int64_t r, int64_t n,
                                         int64_t num_items, uint64_t seed, uint64_t step,
                                         uint64_t e0) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n) return;
  out[(e / r) * ld + e % r] =
      uniform_negative(seed, step, e0 + static_cast<uint64_t>(e), num_items);
}

// pool[0:count] is sorted and unique; a leading 0 (unsupervised tokens) is not part of the pool.
__global__ void in_batch_negatives_kernel(int32_t* out, int64_t ld, int64_t r, int64_t n,
                                          const int32_t* pool, const int32_t* count, uint64_t seed,
                                          uint64_t step, uint64_t e0) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n) return;
  const int32_t total = *count;
  const int32_t skip = total > 0 && pool[0] == 0 ? 1 : 0;
  const uint32_t size = static_cast<uint32_t>(total - skip);
  out[(e / r) * ld + e % r] =
      size == 0
          ? 0
          : pool[skip + in_batch_negative_index(seed, step, e0 + static_cast<uint64_t>(e), size)];
}

// pool[0:*count] sorted; an empty pool falls back to the uniform draw over the catalogue.
__global__ void pool_negatives_kernel(int32_t* out, int64_t ld, int64_t r, int64_t n,
                                      const int32_t* pool, const int32_t* count, int64_t num_items,
                                      uint64_t seed, uint64_t step, uint64_t e0) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n) return;
  const int32_t size = *count;
  const uint64_t g = e0 + static_cast<uint64_t>(e);
  out[(e / r) * ld + e % r] =
      size <= 0 ? uniform_negative(seed, step, g, num_items)
                : pool[key_negative_index(seed, step, g, static_cast<uint32_t>(size))];
}

// Checks neg_ids and the counter space; returns T * R.
int64_t check_negatives(const Tensor& neg_ids, uint64_t step, const char* op) {
  check_cuda_tensor(neg_ids, op);
  check_shape(neg_ids, {-1, -1}, op);
  HSTU_CHECK(neg_ids.dtype == DType::kI32, op, ": neg_ids must be i32, got ", neg_ids.str());
  HSTU_CHECK(neg_ids.dim(1) >= 1, op, ": need at least one negative per token");
  const int64_t n = neg_ids.dim(0) * neg_ids.dim(1);
  HSTU_CHECK(n < (int64_t(1) << 34) && step < (uint64_t(1) << 32), op,
             ": negative sampling counter space exceeded (T*R < 2^34, step < 2^32)");
  return n;
}

// CUB's temporary storage for sorting and deduplicating m target ids.
size_t pool_temp_bytes(int64_t m) {
  size_t sort_bytes = 0, unique_bytes = 0;
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes,
                                                 static_cast<const uint32_t*>(nullptr),
                                                 static_cast<uint32_t*>(nullptr), m, 0, 32));
  HSTU_CUDA_CHECK(
      cub::DeviceSelect::Unique(nullptr, unique_bytes, static_cast<const int32_t*>(nullptr),
                                static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), m));
  return std::max(sort_bytes, unique_bytes);
}

}  // namespace

size_t in_batch_negatives_scratch_bytes(int64_t targets) {
  return 2 * arena_bytes(4 * static_cast<size_t>(std::max<int64_t>(targets, 1))) + arena_bytes(4) +
         arena_bytes(pool_temp_bytes(targets));
}

void sample_uniform_negatives(Ctx& ctx, int64_t num_items, uint64_t seed, uint64_t step,
                              const Tensor& neg_ids, int64_t token_offset) {
  const int64_t n = check_negatives(neg_ids, step, "sample_uniform_negatives");
  HSTU_CHECK(num_items >= 2 && num_items <= (int64_t(1) << 32),
             "sample_uniform_negatives: num_items = ", num_items);
  if (n == 0) return;
  uniform_negatives_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream_of(ctx)>>>(
      neg_ids.as<int32_t>(), neg_ids.row_stride, neg_ids.dim(1), n, num_items, seed, step,
      static_cast<uint64_t>(token_offset * neg_ids.dim(1)));
  HSTU_CUDA_CHECK_LAUNCH();
}

void sample_in_batch_negatives(Ctx& ctx, const Tensor& targets, uint64_t seed, uint64_t step,
                               const Tensor& neg_ids, int64_t token_offset) {
  const int64_t n = check_negatives(neg_ids, step, "sample_in_batch_negatives");
  check_cuda_tensor(targets, "sample_in_batch_negatives targets");
  check_shape(targets, {-1}, "sample_in_batch_negatives targets");
  HSTU_CHECK(targets.dtype == DType::kI32, "sample_in_batch_negatives: targets must be i32");
  if (n == 0) return;
  const int64_t m = targets.dim(0);
  Scratch scratch(ctx, "sample_in_batch_negatives");
  Tensor sorted = scratch.alloc(DType::kI32, {std::max<int64_t>(m, 1)});
  Tensor pool = scratch.alloc(DType::kI32, {std::max<int64_t>(m, 1)});
  Tensor count = scratch.alloc(DType::kI32, {1});
  HSTU_CUDA_CHECK(cudaMemsetAsync(count.data, 0, sizeof(int32_t), stream_of(ctx)));
  if (m > 0) {
    // Ids are non-negative: sorting their bits as unsigned is exact.
    const auto* kin = static_cast<const uint32_t*>(targets.data);
    auto* kout = static_cast<uint32_t*>(sorted.data);
    size_t temp_bytes = pool_temp_bytes(m);
    Tensor temp =
        scratch.alloc(DType::kU8, {static_cast<int64_t>(std::max<size_t>(temp_bytes, 1))});
    HSTU_CUDA_CHECK(
        cub::DeviceRadixSort::SortKeys(temp.data, temp_bytes, kin, kout, m, 0, 32, stream_of(ctx)));
    temp_bytes = pool_temp_bytes(m);
    HSTU_CUDA_CHECK(cub::DeviceSelect::Unique(temp.data, temp_bytes, sorted.as<int32_t>(),
                                              pool.as<int32_t>(), count.as<int32_t>(), m,
                                              stream_of(ctx)));
  }
  in_batch_negatives_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream_of(ctx)>>>(
      neg_ids.as<int32_t>(), neg_ids.row_stride, neg_ids.dim(1), n, pool.as<int32_t>(),
      count.as<int32_t>(), seed, step, static_cast<uint64_t>(token_offset * neg_ids.dim(1)));
  HSTU_CUDA_CHECK_LAUNCH();
}

void sample_pool_negatives(Ctx& ctx, const Tensor& pool, const Tensor& count, int64_t num_items,
                           uint64_t seed, uint64_t step, const Tensor& neg_ids,
                           int64_t token_offset) {
  const int64_t n = check_negatives(neg_ids, step, "sample_pool_negatives");
  check_cuda_tensor(pool, "sample_pool_negatives pool");
  check_cuda_tensor(count, "sample_pool_negatives count");
  HSTU_CHECK(pool.dtype == DType::kI32 && count.dtype == DType::kI32 && count.numel() >= 1,
             "sample_pool_negatives: pool ", pool.str(), " / count ", count.str(),
             " must be i32 (count [1])");
  HSTU_CHECK(num_items >= 2 && num_items <= (int64_t(1) << 32),
             "sample_pool_negatives: num_items = ", num_items);
  if (n == 0) return;
  pool_negatives_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream_of(ctx)>>>(
      neg_ids.as<int32_t>(), neg_ids.row_stride, neg_ids.dim(1), n, pool.as<int32_t>(),
      count.as<int32_t>(), num_items, seed, step,
      static_cast<uint64_t>(token_offset * neg_ids.dim(1)));
  HSTU_CUDA_CHECK_LAUNCH();
}

}  // namespace hstu::cuda
