// cublaslt_plans.h — the cuBLASLt GEMM plan cache behind ctx.blas (internal to the CUDA backend).
//
// A plan is everything cuBLASLt needs besides the pointers: the matmul descriptor (transposes,
// compute/scale types, epilogue), the three matrix layouts and the algorithm its heuristic picked
// for the exact shape, leading dimensions, dtypes and pointer alignments. Plans are built once
// per key and reused; the step loop only looks them up. The key is the row-major problem as the
// caller states it; the swap to cuBLASLt's column-major view happens when the plan is built.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "core/context.h"
#include "core/tensor.h"

namespace hstu::cuda {

// Row-major problem C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C (+ bias[n]), or with a
// separate C input R (ldr != 0): D[m,n] = alpha * op(A) @ op(B) + beta * R (+ bias[n]).
// The token-count sizes of a key (see gemm.cu) are buckets (gemm_size_bucket) unless `exact`: a
// jagged batch has a new token count nearly every step, and one plan per bucket keeps the
// heuristic query (measured: ~2.5 ms of host time per step of the default config) and the
// cache's growth out of the step loop. The plan's layouts get the exact sizes before each call.
struct GemmPlanKey {
  int64_t m = 0, n = 0, k = 0;
  bool exact = false;  // sizes as given: the fallback when a bucket's algorithm refuses a size
  int64_t lda = 0, ldb = 0, ldc = 0;  // row strides (elements)
  DType a = DType::kF32, b = DType::kF32, c = DType::kF32, bias = DType::kF32;
  bool trans_a = false, trans_b = false;
  bool has_bias = false;
  bool accumulate = false;  // beta != 0
  // Row stride of a separate C input (gemm_residual: D = op(A) op(B) + C, C not D); 0: C is D.
  int64_t ldr = 0;
  bool tf32 = false;
  uint16_t align_a = 0, align_b = 0, align_c = 0, align_bias = 0;  // pointer alignment (bytes)
  uint16_t align_r = 0;  // of the separate C input (ldr != 0)

  bool operator==(const GemmPlanKey& o) const = default;
};

struct GemmPlanKeyHash {
  size_t operator()(const GemmPlanKey& k) const;
};

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr;  // cuBLASLt's A (= our B, see gemm.cu)
  cublasLtMatrixLayout_t layout_b = nullptr;  // cuBLASLt's B (= our A)
  cublasLtMatrixLayout_t layout_c = nullptr;  // D, and C unless layout_r is set
  cublasLtMatrixLayout_t layout_r = nullptr;  // a separate C input (key.ldr != 0)
  cublasLtMatmulAlgo_t algo{};
  bool bias_in_epilogue = false;  // false with a bias: gemm.cu adds it with its own kernel
  cublasLtMatrixLayout_t c_layout() const { return layout_r ? layout_r : layout_c; }

  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan();
};

struct BlasState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  bool allow_tf32 = false;
  int64_t plans_created = 0;
  std::unordered_map<GemmPlanKey, std::unique_ptr<GemmPlan>, GemmPlanKeyHash> plans;

  // The plan for `key`, built on first use. `bias_ptr` is only used to tell cuBLASLt's
  // heuristic the bias pointer's alignment.
  const GemmPlan& plan(const GemmPlanKey& key, const void* bias_ptr);
};

// The bucket of a GEMM dimension: exact up to 128, then rounded up to a multiple of 1/8 of its
// power of two (at most 12.5% above the size).
int64_t gemm_size_bucket(int64_t x);

// Sets the exact sizes of a row-major C[m, n] = op(A) op(B) (inner size k) on the plan's layouts.
void set_plan_sizes(const GemmPlan& plan, const GemmPlanKey& key, int64_t m, int64_t n, int64_t k);

// ctx.blas as a BlasState (throws with advice when the trainer did not create one).
BlasState& blas_state(const Ctx& ctx);

}  // namespace hstu::cuda
