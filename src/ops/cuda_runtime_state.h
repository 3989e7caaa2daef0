// cuda_runtime_state.h — the CUDA backend's long-lived state, created once by the trainer (or a
// test/bench) before the first step: the cuBLASLt handle, its workspace and the GEMM plan cache
// that go in ctx.blas, and the size of the ctx.scratch arena the CUDA ops need.
//
// The one decision: nothing here allocates per call. The BLAS state owns a fixed workspace
// (32 MiB by default) allocated at creation; plans are created on first use (the warm-up step)
// and counted, so a test can assert that the step loop creates none.
//
// A public header of CUDA-only entry points (namespace hstu::cuda): declarations only (no CUDA
// headers), so host code can include it; the definitions (cuda/cublaslt_plans.cpp,
// cuda/runtime_state.cu) exist only in CUDA builds (guard calls with HSTU_WITH_CUDA).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hstu::cuda {

// Creates the state that goes in ctx.blas: a cuBLASLt handle, a device workspace of
// `workspace_bytes` and an empty plan cache. Uses the current CUDA device.
void* create_blas_state(size_t workspace_bytes = size_t(32) << 20);
// Frees everything create_blas_state made (null is allowed).
void destroy_blas_state(void* state);
// GEMM plans (cuBLASLt descriptors + heuristic algorithm) created so far; constant once every
// shape of the step has been seen.
int64_t gemm_plans_created(const void* state);
// Lets fp32 GEMMs use TF32 tensor cores (off by default: fp32 GEMMs keep full fp32 precision).
// The setting is part of the plan key, so it applies to every later GEMM call.
void set_gemm_allow_tf32(void* state, bool allow);

// What sizes ctx.scratch for the CUDA ops other than attention.
struct OpsScratchNeeds {
  int64_t max_tokens = 0;        // rows of the largest [T, D] activation
  int64_t max_width = 0;         // widest row (D, or the widest GEMM output for bias_grad)
  int64_t max_table_rows = 0;    // largest embedding table (collect_touched_rows)
  int64_t item_dim = 0;          // width of item embeddings / queries (0: max_width)
  int64_t num_negatives = 0;     // R of the sampled softmax
  int64_t max_eval_users = 0;    // queries per retrieval_rank call (0: no retrieval evaluation)
  int64_t max_scatter_rows = 0;  // rows of the largest embedding_bwd besides the [T, D] inputs
                                 // (a sharded table's owner adds every rank's window rows)
  int64_t max_pool_targets = 0;  // targets of the in-batch negatives' pool (0: max_tokens)
  bool deterministic = true;     // ctx.deterministic (sorted scatter paths need more)
};
// Bytes of ctx.scratch that any single op call needs at most. retrieval_rank is counted with a
// history bitmap for 256 users at a time; it uses whatever more is free (fewer passes over the
// item table). Queries the current device.
size_t ops_scratch_bytes(const OpsScratchNeeds& needs);

}  // namespace hstu::cuda
