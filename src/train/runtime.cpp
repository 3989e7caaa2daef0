// runtime.cpp — device selection and the per-run CUDA state.
#include "train/runtime.h"

#include <algorithm>

#include "core/cuda_check.h"
#include "core/device_info.h"
#include "core/error.h"
#if defined(HSTU_WITH_CUDA)
#include <cuda_runtime.h>

#include "ops/cuda_runtime_state.h"
#include "ops/hstu_attention.h"
#endif

namespace hstu {

Device resolve_device(const std::string& name) {
  if (name == "cpu") return Device::kCPU;
  const bool gpu = cuda_device_count() > 0;
  if (name == "cuda") {
#if !defined(HSTU_WITH_CUDA)
    HSTU_THROW("--device cuda: this hstu binary was built without CUDA (", HSTU_CPU_ONLY_REASON,
               ")");
#endif
    HSTU_CHECK(gpu, "--device cuda: no CUDA device is visible to this process");
    return Device::kCUDA;
  }
  HSTU_CHECK(name == "auto", "unknown device '", name, "' (cpu, cuda or auto)");
  return gpu ? Device::kCUDA : Device::kCPU;
}

Runtime::Runtime(Device device, const Config& cfg, const ModelShape& shape) {
  ctx_.device = device;
  ctx_.num_threads = static_cast<int>(cfg.trainer.num_threads);
  ctx_.deterministic = cfg.trainer.deterministic;
#if defined(HSTU_WITH_CUDA)
  if (device == Device::kCUDA) {
    // With CUDA graphs, a stream of our own: the legacy default stream cannot be captured. It is
    // a blocking stream, so copies on the legacy stream outside the step (initialisation,
    // evaluation read-backs) stay ordered with its work. Without graphs the step stays on the
    // legacy stream: launched kernel by kernel, the deterministic step measured 0.45 ms slower on
    // a created stream (ML-1M large on an H200, 4.1 vs 3.65 ms; docs/BENCHMARKS.md, session 7).
    if (cfg.trainer.cuda_graph) {
      cudaStream_t stream = nullptr;
      HSTU_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamDefault));
      ctx_.stream = stream;
    }
    ctx_.blas = cuda::create_blas_state();
    cuda::OpsScratchNeeds needs;
    const NetworkArgs& n = cfg.network;
    needs.max_tokens = shape.max_tokens;
    needs.max_width = std::max<int64_t>(4 * n.num_attention_heads * n.kv_channels, n.hidden_size);
    needs.max_table_rows = shape.num_items;
    needs.num_negatives = shape.num_negatives;
    needs.item_dim = n.hidden_size;
    needs.max_eval_users = std::max(shape.max_batch, shape.max_eval_queries);
    needs.max_scatter_rows = shape.max_scatter_rows;
    needs.max_pool_targets = shape.max_pool_targets;
    needs.deterministic = ctx_.deterministic;
    // Attention backward: an fp32 dQ accumulator (head dims padded up to 256 at most) and the
    // fixed-point rab-gradient accumulators; with rab, the u8 time buckets
    // [B, round_up(L, 16)^2] (L = a sample's most tokens), held by the retrieval model for a
    // whole pass (StepAttention, model/hstu_layer.h) or taken by each call (without room the
    // kernels compute them per element, several times slower).
    const int64_t dpad = std::min<int64_t>(256, std::max<int64_t>(32, n.kv_channels * 2));
    size_t attn = static_cast<size_t>(4 * shape.max_tokens * n.num_attention_heads * dpad) +
                  8 * static_cast<size_t>(2 * n.num_position_buckets + n.rab_num_time_buckets + 2);
    // The step's launch plan (the sm_90a kernels' two launch orders and a tile counter, held by
    // StepAttention for a whole pass, model/hstu_layer.h), and room for a call's own order and
    // counter beside it (a call whose order the plan does not hold: at most a plan's bytes, in
    // two allocations).
    const size_t plan = static_cast<size_t>(hstu_attention_plan_bytes(
        shape.max_batch, std::max<int64_t>(shape.max_tokens, 1), shape.max_tokens));
    attn += 2 * plan + 3 * Arena::kAlign;
    if (n.relative_attention_bias && shape.max_batch > 0) {
      const int64_t L = (shape.max_tokens + shape.max_batch - 1) / shape.max_batch;
      attn += static_cast<size_t>(hstu_rab_buckets_bytes(shape.max_batch, L)) + 256;
      // The fused rab backward's dS tiles (sm_90a, head width 128; 0 where it does not run).
      attn += static_cast<size_t>(hstu_attention_rab_scratch_bytes(
                  shape.max_batch, n.num_attention_heads, L, n.kv_channels)) +
              Arena::kAlign;
    }
    scratch_ = std::make_unique<Arena>(
        Device::kCUDA, cuda::ops_scratch_bytes(needs) + attn + (4u << 20), "scratch");
    ctx_.scratch = scratch_.get();
  }
#else
  (void)cfg;
  (void)shape;
#endif
}

Runtime::~Runtime() {
#if defined(HSTU_WITH_CUDA)
  if (ctx_.stream) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(ctx_.stream));
    cudaStreamDestroy(static_cast<cudaStream_t>(ctx_.stream));
  }
  if (ctx_.blas) cuda::destroy_blas_state(ctx_.blas);
#endif
}

void Runtime::synchronize() {
  synchronize_device(ctx_.device);
}

void synchronize_device(Device device) {
#if defined(HSTU_WITH_CUDA)
  if (device == Device::kCUDA) HSTU_CUDA_CHECK(cudaDeviceSynchronize());
#endif
}

}  // namespace hstu
