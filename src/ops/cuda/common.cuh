// common.cuh — device helpers shared by the CUDA kernels of the op families (not
// attention): dtype dispatch, fp32 conversion and 16-byte vector access, warp reductions, the
// launch context (stream, SM count, scratch) and the deterministic column-sum reduction.
//
// The one decision: every kernel computes in fp32 and reaches memory through `load_vec` /
// `store_vec`, templated on the element type and a vector width V (8, or 1 for views that are
// not 16-byte aligned or whose width is not a multiple of 8), so a kernel is written once for
// bf16 / fp16 / f32 and still moves 16 bytes per access on aligned production shapes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/arena.h"
#include "core/context.h"
#include "core/cuda_check.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace hstu::cuda {

// ---- dtypes ---------------------------------------------------------------------------------

using bf16 = __nv_bfloat16;
using f16 = __half;

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) for the element type of a floating I/O dtype (f32, bf16, f16).
template <typename F>
decltype(auto) dispatch_io(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::kF32:
      return f(TypeTag<float>{});
    case DType::kBF16:
      return f(TypeTag<bf16>{});
    case DType::kF16:
      return f(TypeTag<f16>{});
    default:
      HSTU_THROW(what, ": CUDA kernels take f32, bf16 or f16 tensors, got ", dtype_name(t));
  }
}

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(bf16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_f32(f16 v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else if constexpr (std::is_same_v<T, bf16>)
    return __float2bfloat16_rn(v);
  else
    return __float2half_rn(v);
}

// Two elements as one 4- or 8-byte access (p aligned to two elements); kRo: through the
// read-only cache.
template <bool kRo, typename P>
__device__ __forceinline__ P load_one(const P* q) {
  if constexpr (kRo)
    return __ldg(q);
  else
    return *q;
}
template <bool kRo, typename T>
__device__ __forceinline__ void load_pair(const T* p, float (&out)[2]) {
  float2 r;
  if constexpr (std::is_same_v<T, float>)
    r = load_one<kRo>(reinterpret_cast<const float2*>(p));
  else if constexpr (std::is_same_v<T, bf16>)
    r = __bfloat1622float2(load_one<kRo>(reinterpret_cast<const __nv_bfloat162*>(p)));
  else
    r = __half22float2(load_one<kRo>(reinterpret_cast<const __half2*>(p)));
  out[0] = r.x, out[1] = r.y;
}

// V consecutive elements at p as fp32, vector accesses through the read-only cache (tensors the
// kernel does not write). p must be aligned to min(16, V*sizeof(T)) bytes; V = 2 is one 4- or
// 8-byte access, widths of whole 16-byte chunks 16-byte accesses, others one element at a time.
template <int V, typename T>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[V]) {
  constexpr int kBytes = V * static_cast<int>(sizeof(T));
  if constexpr (V == 2) {
    load_pair<true>(p, out);
  } else if constexpr (kBytes % 16 == 0) {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p) + i);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kPer; ++j) out[i * kPer + j] = to_f32(e[j]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = to_f32(p[i]);
  }
}

// Same as load_vec without the read-only cache path: for tensors the kernel also writes
// (accumulated outputs, in-place views).
template <int V, typename T>
__device__ __forceinline__ void load_vec_rw(const T* p, float (&out)[V]) {
  constexpr int kBytes = V * static_cast<int>(sizeof(T));
  if constexpr (V == 2) {
    load_pair<false>(p, out);
  } else if constexpr (kBytes % 16 == 0) {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      const uint4 raw = reinterpret_cast<const uint4*>(p)[i];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kPer; ++j) out[i * kPer + j] = to_f32(e[j]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = to_f32(p[i]);
  }
}

// V elements from fp32 to p (aligned as for load_vec), rounded to nearest even.
template <int V, typename T>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[V]) {
  constexpr int kBytes = V * static_cast<int>(sizeof(T));
  if constexpr (V == 2) {
    if constexpr (std::is_same_v<T, float>)
      *reinterpret_cast<float2*>(p) = make_float2(in[0], in[1]);
    else if constexpr (std::is_same_v<T, bf16>)
      *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(in[0], in[1]);
    else
      *reinterpret_cast<__half2*>(p) = __floats2half2_rn(in[0], in[1]);
  } else if constexpr (kBytes % 16 == 0) {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      uint4 raw;
      T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int j = 0; j < kPer; ++j) e[j] = from_f32<T>(in[i * kPer + j]);
      reinterpret_cast<uint4*>(p)[i] = raw;
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = from_f32<T>(in[i]);
  }
}

// V elements of T as loaded: one 16-byte word while in flight when that is the vector (V = 8,
// 16-bit T), converted to fp32 where used; else fp32 (load_vec / load_vec_rw). For kernels that
// issue several vectors' loads before using any (a batch of rows, a row's chunks): the words are
// what a thread holds while its loads are in flight, 4 registers a vector instead of 8.
template <int V, typename T>
struct Loaded {
  static constexpr bool kWord = V * sizeof(T) == 16;
  std::conditional_t<kWord, uint4, float[V]> v;
  template <bool kReadOnly>
  __device__ __forceinline__ void load(const T* p) {
    if constexpr (kWord) {
      v = kReadOnly ? __ldg(reinterpret_cast<const uint4*>(p)) : *reinterpret_cast<const uint4*>(p);
    } else if constexpr (kReadOnly) {
      load_vec<V>(p, v);
    } else {
      load_vec_rw<V>(p, v);
    }
  }
  __device__ __forceinline__ float operator[](int j) const {
    if constexpr (kWord) {
      return to_f32(reinterpret_cast<const T*>(&v)[j]);
    } else {
      return v[j];
    }
  }
};

// dst[0:V] += v[0:V] with fp32 atomics.
template <int V>
__device__ __forceinline__ void atomic_add_vec(float* dst, const float (&v)[V]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kVector = V % 4 == 0;
#else
  constexpr bool kVector = false;
#endif
  if constexpr (kVector) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // NOTE: sm_90 has 16-byte vector atomics: a quarter of the atomic instructions.
#pragma unroll
    for (int j = 0; j < V; j += 4)
      atomicAdd(reinterpret_cast<float4*>(dst + j),
                make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]));
#endif
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) atomicAdd(dst + j, v[j]);
  }
}

// ---- reductions -----------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// ---- SiLU ------------------------------------------------------------------------------------

// SiLU and its derivative for the element-wise kernels (activation.cu, uvqk_act.cu), with the
// hardware exponential (ex2.approx: relative error ~2^-21 at |x| <= 20) and an IEEE-rounded
// reciprocal instead of expf and a division (~20 instructions an element, which left the
// ML-1M step's SiLU kernels issue-bound: ncu, session 15): relative error ~1e-6, far inside
// one bf16 rounding; exact limits (x / inf = -0 for very negative x, x for large x, NaN kept).
__device__ __forceinline__ float silu_f(float x) {
  return x * __frcp_rn(1.0f + __expf(-x));
}
__device__ __forceinline__ float silu_grad_f(float x) {
  const float s = __frcp_rn(1.0f + __expf(-x));
  return s * (1.0f + x * (1.0f - s));
}

// ---- launch context -------------------------------------------------------------------------

inline cudaStream_t stream_of(const Ctx& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}

// Streaming multiprocessors of the current device (cached per device).
int num_sms();

// Largest power of two (<= 16) dividing the tensor's address and its row pitch in bytes.
inline int vec_alignment(const Tensor& t) {
  if (t.empty()) return 16;
  uint64_t a = reinterpret_cast<uintptr_t>(t.data) | 16;
  if (t.ndim > 1) a |= static_cast<uint64_t>(t.row_stride) * dtype_size(t.dtype);
  return static_cast<int>(a & (~a + 1));
}
// True when 8-wide vector access works on every listed tensor of `cols` columns.
inline bool can_vec8(int64_t cols, std::initializer_list<const Tensor*> ts) {
  if (cols % 8 != 0) return false;
  for (const Tensor* t : ts)
    if (!t->empty() &&
        vec_alignment(*t) < static_cast<int>(std::min<size_t>(16, 8 * dtype_size(t->dtype))))
      return false;
  return true;
}

// Calls f(std::integral_constant<int, V>{}) with V = 8 or 1.
template <typename F>
decltype(auto) dispatch_vec(bool vec8, F&& f) {
  if (vec8) return f(std::integral_constant<int, 8>{});
  return f(std::integral_constant<int, 1>{});
}

inline void check_cuda_tensor(const Tensor& t, const char* what) {
  HSTU_CHECK(t.device == Device::kCUDA, what, " must be on the CUDA device, got ", t.str());
}

// Scratch memory from ctx.scratch, rewound when the op returns. Kernels using it are queued on
// ctx.stream, so the next op on that stream can reuse the bytes (stream order protects them).
class Scratch {
 public:
  explicit Scratch(Ctx& ctx, const char* op) : arena_(ctx.scratch) {
    HSTU_CHECK(arena_ != nullptr && arena_->device() == Device::kCUDA && !arena_->is_measuring(),
               op, " needs a CUDA scratch arena in ctx.scratch");
    mark_ = arena_->mark();
  }
  ~Scratch() { arena_->reset(mark_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Tensor alloc(DType t, std::initializer_list<int64_t> dims) { return arena_->alloc(t, dims); }
  // Bytes left in the arena.
  size_t available() const { return arena_->capacity() - arena_->used(); }

 private:
  Arena* arena_;
  size_t mark_ = 0;
};

// Bytes an arena allocation of `bytes` takes (rounded up to the arena's alignment).
inline size_t arena_bytes(size_t bytes) {
  return (std::max<size_t>(bytes, 1) + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign;
}

// Worst-case ctx.scratch use of each op family, defined next to the code that allocates it
// (ops_scratch_bytes in runtime_state.cu takes their maximum).
size_t bias_grad_scratch_bytes(int64_t rows, int64_t cols);                  // gemm.cu
size_t layernorm_bwd_scratch_bytes(int64_t rows, int64_t cols);              // layernorm.cu
size_t embedding_bwd_scratch_bytes(int64_t tokens, int64_t cols, bool det);  // embedding.cu
size_t collect_touched_scratch_bytes(int64_t table_rows);                    // embedding.cu
size_t sampled_softmax_scratch_bytes(int64_t tokens, int64_t negatives, int64_t cols,
                                     bool det);                     // sampled_softmax.cu
size_t in_batch_negatives_scratch_bytes(int64_t targets);           // negatives_gpu.cu
size_t retrieval_rank_scratch_bytes(int64_t users, int64_t items);  // retrieval_rank.cu
size_t uvqk_silu_bwd_scratch_bytes(int64_t rows, int64_t cols);     // uvqk_act.cu

// Grid size for kernels that split rows into a fixed number of chunks whose partial results are
// reduced in a fixed order (deterministic for a given device and problem size).
inline int64_t partial_blocks(int64_t rows, int64_t rows_per_block_min) {
  const int64_t cap = 2 * static_cast<int64_t>(num_sms());
  const int64_t want = (rows + rows_per_block_min - 1) / rows_per_block_min;
  return std::max<int64_t>(1, std::min(cap, want));
}

// out_a[c] (+)= sum_p partial[p * ld + c] for c < split, out_b[c - split] for c >= split, in a
// fixed order (a warp per column, lanes over the parts, then a butterfly: the second stage of
// every deterministic column reduction). partial is
// f32 in scratch; out_b may be null when split == cols.
void reduce_partials(Ctx& ctx, const float* partial, int64_t parts, int64_t ld, int64_t cols,
                     int64_t split, float* out_a, float* out_b, bool accumulate);

// ---- element-wise launches ------------------------------------------------------------------

// A tensor seen as rows x cols with a row pitch: contiguous tensors are one long row (so 1-D
// buffers vectorise), strided views keep their rows. Element (r, c) has flat index r*cols + c
// in both cases, which is the index dropout masks are drawn with.
struct Rows2d {
  int64_t rows = 0, cols = 0;
};
inline Rows2d rows2d(std::initializer_list<const Tensor*> ts) {
  const Tensor& t0 = **ts.begin();
  bool contiguous = true;
  for (const Tensor* t : ts) contiguous = contiguous && t->contiguous();
  if (contiguous) return {1, t0.numel()};
  return {t0.shape[0], t0.row_elems()};
}
// Row pitch of t under a Rows2d decomposition.
inline int64_t pitch(const Tensor& t, const Rows2d& rc) {
  return rc.rows == 1 ? rc.cols : t.row_stride;
}

// can_vec8 for tensors seen through a Rows2d decomposition (one long row needs no pitch check).
inline bool can_vec8_2d(const Rows2d& rc, std::initializer_list<const Tensor*> ts) {
  if (rc.cols % 8 != 0) return false;
  for (const Tensor* t : ts) {
    const uint64_t bytes = static_cast<uint64_t>(pitch(*t, rc)) * dtype_size(t->dtype);
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0 || (rc.rows > 1 && bytes % 16 != 0))
      return false;
  }
  return true;
}

// Grid for ew2d_kernel: each thread handles V consecutive columns of one row.
struct Ew2dLaunch {
  dim3 grid, block;
  int64_t col_blocks = 1;
};
inline Ew2dLaunch ew2d_launch(const Rows2d& rc, int V) {
  const int64_t vecs = (rc.cols + V - 1) / V;
  const int tx = static_cast<int>(std::min<int64_t>(256, (vecs + 31) / 32 * 32));
  const int ty = 256 / tx;
  Ew2dLaunch l;
  l.col_blocks = (vecs + tx - 1) / tx;
  const int64_t blocks = l.col_blocks * ((rc.rows + ty - 1) / ty);
  HSTU_CHECK(blocks < (int64_t(1) << 31), "element-wise op too large: ", rc.rows, " x ", rc.cols);
  l.grid = dim3(static_cast<unsigned>(blocks));
  l.block = dim3(tx, ty);
  return l;
}
// Calls op.template apply<V>(r, c) for every V-wide column group (r, c) of a rows x cols grid.
template <int V, typename Op>
__global__ void __launch_bounds__(256)
    ew2d_kernel(int64_t rows, int64_t cols, int64_t col_blocks, Op op) {
  // 32-bit division (blocks < 2^31, checked at launch): the 64-bit one is a long subroutine.
  const uint32_t ncb = static_cast<uint32_t>(col_blocks);
  const int64_t cb = blockIdx.x % ncb, rb = blockIdx.x / ncb;
  const int64_t r = rb * blockDim.y + threadIdx.y;
  const int64_t c = (cb * blockDim.x + threadIdx.x) * V;
  if (r >= rows || c >= cols) return;
  op.template apply<V>(r, c);
}
template <int V, typename Op>
void launch_ew2d(Ctx& ctx, const Rows2d& rc, const Op& op) {
  if (rc.rows == 0 || rc.cols == 0) return;
  const Ew2dLaunch l = ew2d_launch(rc, V);
  ew2d_kernel<V, Op><<<l.grid, l.block, 0, stream_of(ctx)>>>(rc.rows, rc.cols, l.col_blocks, op);
  HSTU_CUDA_CHECK_LAUNCH();
}

// ---- dropout masks --------------------------------------------------------------------------

// keep[j] = dropout_keep(seed, offset, i0 + j, p) for j < V. With V a multiple of 4 the caller
// guarantees i0 % 4 == 0, and each Philox call yields the 4 words of 4 consecutive elements.
template <int V>
__device__ __forceinline__ void dropout_keep_vec(uint64_t seed, uint64_t offset, uint64_t i0,
                                                 float p, bool (&keep)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int g = 0; g < V / 4; ++g) {
      const Philox4 r = philox4x32(seed, offset + (i0 >> 2) + g);
      keep[4 * g + 0] = u32_to_unit_float(r.x) >= p;
      keep[4 * g + 1] = u32_to_unit_float(r.y) >= p;
      keep[4 * g + 2] = u32_to_unit_float(r.z) >= p;
      keep[4 * g + 3] = u32_to_unit_float(r.w) >= p;
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) keep[j] = dropout_keep(seed, offset, i0 + j, p);
  }
}

}  // namespace hstu::cuda
