// runtime_state.cu — device queries and the shared second stage of the deterministic column
// reductions (common.cuh), and the scratch-size budget of the CUDA ops (ops/cuda_runtime_state.h),
// the maximum over the families' own sizing functions.
//
// The one decision: every reduction that feeds a gradient is two-stage with a fixed partition
// (fixed row chunks per block, then the partials summed in a fixed order), so CUDA
// results are bit-reproducible run to run without atomics on floats.
#include <mutex>
#include <vector>

#include "ops/cuda/common.cuh"
#include "ops/cuda_runtime_state.h"

namespace hstu::cuda {
namespace {

// One warp per column: lane l adds parts l, l + 32, ... in ascending order, then a fixed
// butterfly adds the lanes (a fixed order: bit-reproducible). NOTE: a thread per column looping
// over every part was latency-bound where columns are few (bias_grad at ML-1M's width 50: 14 us
// for 114 parts on an H200, 3.4 us this way).
__global__ void reduce_partials_kernel(const float* __restrict__ partial, int64_t parts, int64_t ld,
                                       int64_t cols, int64_t split, float* out_a, float* out_b,
                                       bool accumulate) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= cols) return;  // whole warps leave
  float s = 0.0f;
  for (int64_t p = lane; p < parts; p += 32) s += partial[p * ld + c];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane != 0) return;
  float* out = c < split ? out_a + c : out_b + (c - split);
  *out = accumulate ? *out + s : s;
}

}  // namespace

int num_sms() {
  static std::mutex mu;
  static std::vector<int> cache;
  int dev = 0;
  HSTU_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(cache.size()) <= dev) cache.resize(dev + 1, 0);
  if (cache[dev] == 0)
    HSTU_CUDA_CHECK(cudaDeviceGetAttribute(&cache[dev], cudaDevAttrMultiProcessorCount, dev));
  return cache[dev];
}

void reduce_partials(Ctx& ctx, const float* partial, int64_t parts, int64_t ld, int64_t cols,
                     int64_t split, float* out_a, float* out_b, bool accumulate) {
  if (cols == 0) return;
  reduce_partials_kernel<<<static_cast<unsigned>((cols + 7) / 8), 256, 0, stream_of(ctx)>>>(
      partial, parts, ld, cols, split, out_a, out_b, accumulate);
  HSTU_CUDA_CHECK_LAUNCH();
}

size_t ops_scratch_bytes(const OpsScratchNeeds& n) {
  const int64_t t = n.max_tokens, d = n.max_width;
  const size_t per_op[] = {
      bias_grad_scratch_bytes(t, d),
      uvqk_silu_bwd_scratch_bytes(t, d),
      layernorm_bwd_scratch_bytes(t, d),
      embedding_bwd_scratch_bytes(std::max(t, n.max_scatter_rows), d, n.deterministic),
      collect_touched_scratch_bytes(n.max_table_rows),
      sampled_softmax_scratch_bytes(t, n.num_negatives, n.item_dim > 0 ? n.item_dim : d,
                                    n.deterministic),
      in_batch_negatives_scratch_bytes(std::max(t, n.max_pool_targets)),
      retrieval_rank_scratch_bytes(n.max_eval_users, n.max_table_rows),
      arena_bytes(sizeof(double)) + arena_bytes(sizeof(double) * 1024),  // sum_squares
  };
  size_t most = 0;
  for (size_t b : per_op) most = std::max(most, b);
  return most;
}

}  // namespace hstu::cuda
