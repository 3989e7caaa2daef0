// cublaslt_plans.cpp — builds and caches cuBLASLt GEMM plans; creates/destroys the BLAS state
// that lives in ctx.blas (declared in ops/cuda_runtime_state.h). Host code, built with CUDA only.
//
// The one decision: a row-major C = op(A) @ op(B) is handed to column-major cuBLASLt as
// C^T = op(B)^T @ op(A)^T — the operands swap and no data is transposed.
#include "ops/cuda/cublaslt_plans.h"

#include <cuda_runtime.h>

#include <memory>

#include "core/cuda_check.h"
#include "ops/cuda_runtime_state.h"

namespace hstu::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      HSTU_THROW("cuBLASLt GEMMs take f32, bf16 or f16 tensors, got ", dtype_name(t));
  }
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  HSTU_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}
template <typename T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, T v) {
  HSTU_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)));
}

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  Preference() { HSTU_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
};

// Asks the heuristic for the best algorithm; false when it has none for this configuration.
// NOTE (ML-1M HSTU-large step, H200): restricting the split-K reduction to
// CUBLASLT_REDUCTION_SCHEME_INPLACE (to drop the separate splitKreduce kernels of the weight
// gradients, 6 + 12 us a layer) made the step 5.28 instead of 2.66 ms (bwd.gemm_uvqk 2.87 vs
// 0.22 ms a step): the heuristic's default stays.
bool pick_algo(const BlasState& s, const GemmPlanKey& key, GemmPlan& plan) {
  Preference pref;
  set_pref<uint64_t>(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, s.workspace_bytes);
  // cuBLASLt's A is our B and vice versa.
  set_pref<uint32_t>(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);
  set_pref<uint32_t>(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
  set_pref<uint32_t>(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                     key.ldr != 0 ? key.align_r : key.align_c);
  set_pref<uint32_t>(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(s.handle, plan.desc, plan.layout_a, plan.layout_b,
                                     plan.c_layout(), plan.layout_c, pref.p, 1, &result, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS)
    return false;
  plan.algo = result.algo;
  return true;
}

}  // namespace

size_t GemmPlanKeyHash::operator()(const GemmPlanKey& k) const {
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldc, k.ldr}) mix(static_cast<uint64_t>(v));
  mix(static_cast<uint64_t>(k.a) | static_cast<uint64_t>(k.b) << 8 |
      static_cast<uint64_t>(k.c) << 16 | static_cast<uint64_t>(k.bias) << 24);
  mix(static_cast<uint64_t>(k.trans_a) | k.trans_b << 1 | k.has_bias << 2 | k.accumulate << 3 |
      k.tf32 << 4 | k.exact << 5);
  mix(static_cast<uint64_t>(k.align_a) | static_cast<uint64_t>(k.align_b) << 16 |
      static_cast<uint64_t>(k.align_c) << 32 | static_cast<uint64_t>(k.align_bias) << 48);
  mix(k.align_r);
  return static_cast<size_t>(h);
}

GemmPlan::~GemmPlan() {
  if (layout_r) cublasLtMatrixLayoutDestroy(layout_r);
  if (layout_c) cublasLtMatrixLayoutDestroy(layout_c);
  if (layout_b) cublasLtMatrixLayoutDestroy(layout_b);
  if (layout_a) cublasLtMatrixLayoutDestroy(layout_a);
  if (desc) cublasLtMatmulDescDestroy(desc);
}

const GemmPlan& BlasState::plan(const GemmPlanKey& key, const void* bias_ptr) {
  if (auto it = plans.find(key); it != plans.end()) return *it->second;

  auto plan = std::make_unique<GemmPlan>();
  const cublasComputeType_t compute =
      key.a == DType::kF32 && key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  HSTU_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
  // Column-major view: D^T[n,m] = op(B)^T[n,k] @ op(A)^T[k,m]. A row-major matrix stored
  // [r, c] with row stride ld is the column-major [c, r] matrix with leading dimension ld.
  const cublasOperation_t op_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  HSTU_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->layout_a, cuda_type(key.b),
                                               key.trans_b ? key.k : key.n,
                                               key.trans_b ? key.n : key.k, key.ldb));
  HSTU_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->layout_b, cuda_type(key.a),
                                               key.trans_a ? key.m : key.k,
                                               key.trans_a ? key.k : key.m, key.lda));
  HSTU_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan->layout_c, cuda_type(key.c), key.n, key.m, key.ldc));
  if (key.ldr != 0)  // gemm_residual: C is another matrix of D's type and shape
    HSTU_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&plan->layout_r, cuda_type(key.c), key.n, key.m, key.ldr));

  bool ok = false;
  if (key.has_bias) {
    // The bias runs along cuBLASLt's rows (= our columns n), broadcast over its columns.
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
             static_cast<int32_t>(cuda_type(key.bias)));
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr);
    ok = pick_algo(*this, key, *plan);
    plan->bias_in_epilogue = ok;
    if (!ok) {  // e.g. an f32 bias with a 16-bit output: add the bias in a separate kernel.
      // NOTE: a fresh descriptor — the bias attributes left on the old one (its data type
      // in particular) make the heuristic refuse even the plain GEMM.
      cublasLtMatmulDescDestroy(plan->desc);
      HSTU_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
      set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
      set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
    }
  }
  if (!ok) ok = pick_algo(*this, key, *plan);
  HSTU_CHECK(ok, "cuBLASLt has no algorithm for GEMM m=", key.m, " n=", key.n, " k=", key.k,
             " lda=", key.lda, " ldb=", key.ldb, " ldc=", key.ldc, " A ", dtype_name(key.a), " B ",
             dtype_name(key.b), " C ", dtype_name(key.c), " (alignments ", key.align_a, "/",
             key.align_b, "/", key.align_c, " bytes)");
  ++plans_created;
  return *plans.emplace(key, std::move(plan)).first->second;
}

int64_t gemm_size_bucket(int64_t x) {
  if (x <= 128) return x;
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  const int64_t step = p / 8;
  return (x + step - 1) / step * step;
}

void set_plan_sizes(const GemmPlan& plan, const GemmPlanKey& key, int64_t m, int64_t n, int64_t k) {
  const auto set = [](cublasLtMatrixLayout_t l, uint64_t rows, uint64_t cols) {
    HSTU_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows)));
    HSTU_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  };
  // The same column-major view as BlasState::plan.
  set(plan.layout_a, key.trans_b ? k : n, key.trans_b ? n : k);
  set(plan.layout_b, key.trans_a ? m : k, key.trans_a ? k : m);
  set(plan.layout_c, n, m);
  if (plan.layout_r) set(plan.layout_r, n, m);
}

BlasState& blas_state(const Ctx& ctx) {
  HSTU_CHECK(ctx.blas != nullptr,
             "ctx.blas is null: create it once with hstu::cuda::create_blas_state() "
             "(ops/cuda_runtime_state.h) before running CUDA GEMMs");
  return *static_cast<BlasState*>(ctx.blas);
}

void* create_blas_state(size_t workspace_bytes) {
  auto s = std::make_unique<BlasState>();
  HSTU_CUBLAS_CHECK(cublasLtCreate(&s->handle));
  s->workspace_bytes = workspace_bytes;
  if (workspace_bytes > 0) {
    const cudaError_t err = cudaMalloc(&s->workspace, workspace_bytes);
    if (err != cudaSuccess) {
      cublasLtDestroy(s->handle);
      HSTU_THROW("allocating the ", workspace_bytes,
                 "-byte cuBLASLt workspace: ", cudaGetErrorString(err));
    }
  }
  return s.release();
}

void destroy_blas_state(void* state) {
  if (!state) return;
  std::unique_ptr<BlasState> s(static_cast<BlasState*>(state));
  s->plans.clear();
  if (s->workspace) cudaFree(s->workspace);
  if (s->handle) cublasLtDestroy(s->handle);
}

int64_t gemm_plans_created(const void* state) {
  return state ? static_cast<const BlasState*>(state)->plans_created : 0;
}

void set_gemm_allow_tf32(void* state, bool allow) {
  HSTU_CHECK(state != nullptr, "set_gemm_allow_tf32 on a null BLAS state");
  static_cast<BlasState*>(state)->allow_tf32 = allow;
}

}  // namespace hstu::cuda
