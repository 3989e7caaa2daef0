// attention_primitives.cuh — the warp-level building blocks of the HSTU attention kernels:
// mma.sync m16n8k16 (bf16/fp16 -> fp32), ldmatrix, cp.async, the swizzled shared-memory tile
// layout, global <-> shared tile copies (16-byte or scalar), three warp GEMM shapes and SiLU.
//
// The shaping decision: every shared tile is [rows][kCols] row-major with 16-byte chunks XOR-
// swizzled by the row, so both ldmatrix and ldmatrix.trans of any 8x8 block are conflict-free and
// one address function (swz) serves every operand; a warp always owns 16 rows of its output and
// walks the contraction in steps of 16. Accumulator fragments (C layout) are re-packed into A
// fragments in registers (FlashAttention-2's trick), so P and dS never go through memory except
// for the one transposed use (dQ = dS K in the key-major backward).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace hstu::cuda::attn {

// ---- element types --------------------------------------------------------------------------

template <typename T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  // d += a * b  (A 16x16 row-major, B 16x8 col-major, fp32 accumulate)
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Mma<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// ---- PTX wrappers ---------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// 16-byte async copy global -> shared: src_bytes (0..16) bytes are read, the rest of the 16 bytes
// are zero-filled (src_bytes = 0 reads nothing).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- SiLU -----------------------------------------------------------------------------------

// SiLU(x) from h = x / 2 in the tanh form: x sigmoid(x) = h (1 + tanh h), with sigmoid(x) =
// 0.5 tanh(x / 2) + 0.5 — one MUFU op (tanh.approx, rel. error ~2^-11, the form NVIDIA's Hopper
// HSTU kernel uses) and one FMA per score; the halving folds into the caller's alpha.
__device__ __forceinline__ float silu_fast_half(float h) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  return fmaf(h, t, h);
}
// exp + fast reciprocal (two MUFU ops, ~2 ulp). The backward multiplies by
// SiLU'(x) = sig (1 + x (1 - sig)), where an error in sig is amplified by |x|: the sm80 backward,
// every fp16 one and every one with rab use this form.
// ex2.approx.ftz directly: __expf's form adds a compare and two predicated multiplies per call
// to keep results below 2^-126 exact, which 1 + e rounds away anyway (the same bits, three
// instructions fewer per score: the backward's pointwise step is instruction-bound).
__device__ __forceinline__ float sigmoid_accurate(float x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
}
// SiLU(x) = x sig and its derivative SiLU'(x) = sig (1 + x (1 - sig)) = sig + SiLU - SiLU sig
// (one add and one FMA from SiLU: an instruction fewer per score than the first form; finite where
// e overflows, as sig = 0 and SiLU = -0 there).
__device__ __forceinline__ void silu_and_grad(float x, float& silu, float& dsilu) {
  const float sig = sigmoid_accurate(x);
  silu = x * sig;
  dsilu = fmaf(-silu, sig, sig + silu);
}
// The same from h = x / 2 in the tanh form (one MUFU op instead of two, see silu_fast_half):
// sig = (1 + t) / 2 and SiLU = h (1 + t), t = tanh h; exact at t = +-1 (SiLU' 1 and 0).
__device__ __forceinline__ void silu_and_grad_fast_half(float h, float& silu, float& dsilu) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  const float sig = fmaf(0.5f, t, 0.5f);
  silu = fmaf(h, t, h);
  dsilu = fmaf(-silu, sig, sig + silu);
}
// NOTE: the bf16 forward uses the tanh form: +10% at d = 128 (H200) and an output error still
// below the naive bf16 error (measured ratio 0.64-0.78, bound 2). fp16 keeps the accurate form:
// its rounding (2^-11) is as fine as tanh.approx's error, so the bound would be at risk. The sm_90a
// bf16 backward without rab too (silu_and_grad_fast_half; session 20, H200): its pointwise step
// was bound by the MUFU pipe (two ops a score); B32 L4096 H4 TFLOPS d 64 264 -> 291-294, d 128
// ~411 -> 435-441, d 256 342 -> 359-361; the largest dq / dk / dv error ratio of the GPU suite's
// bf16 cases 1.22 (bound 5; 1.31 before).
constexpr bool kFastSigmoidBf16 = true;
// Whether the kernels of element type T take the tanh form (bf16 under kFastSigmoidBf16).
template <typename T>
constexpr bool kTanhSilu = (kFastSigmoidBf16 && std::is_same_v<T, __nv_bfloat16>);

// ---- shared-memory tile layout --------------------------------------------------------------

// Element offset of (r, c) in a swizzled [rows][kCols] tile of 16-bit elements: the 16-byte
// chunk index is XORed with a function of the row so that the 8 rows an ldmatrix phase reads
// fall into 8 different bank groups.
template <int kCols>
__device__ __forceinline__ int swz(int r, int c) {
  static_assert(kCols % 32 == 0, "tile widths are multiples of 32 elements");
  const int f = kCols >= 64 ? (r & 7) : ((r >> 1) & 3);
  return r * kCols + ((((c >> 3) ^ f)) << 3) + (c & 7);
}

// Copies a [kRows, kCols] tile from global (row 0 at g, row stride in elements) into swizzled
// shared memory, zero-filling rows >= rows and columns >= cols. vec: g and the stride are 16-byte
// aligned, so every chunk goes through cp.async; a chunk that straddles `cols` (widths such as
// 25) copies only its leading columns and the copy zero-fills the rest, so nothing past `cols` is
// read. Otherwise elements are read one by one. kVec: vec is known true at compile time, so the
// element-wise path (and the registers it would hold inside a kernel's main loop) is not compiled.
template <int kRows, int kCols, int kThreads, bool kVec, typename T>
__device__ __forceinline__ void load_tile(T* s, const T* g, int64_t stride, int rows, int cols,
                                          bool vec, int tid) {
  constexpr int kCpr = kCols / 8;  // chunks per row
  constexpr int kChunks = kRows * kCpr;
  if (kVec || vec) {
    // A thread copies one chunk column c of rows r0, r0 + kRowStep, ...: one running source
    // pointer, so no per-chunk 64-bit offsets are kept alive across a kernel's main loop.
    static_assert(kThreads % kCpr == 0, "whole rows per pass");
    constexpr int kRowStep = kThreads / kCpr;
    const int r0 = tid / kCpr, c = (tid % kCpr) * 8;
    const int col_bytes = c < cols ? min(8, cols - c) * int(sizeof(T)) : 0;
    const T* src = g + r0 * stride + c;
#pragma unroll
    for (int i = 0; i < (kRows + kRowStep - 1) / kRowStep; ++i) {
      const int r = r0 + i * kRowStep;
      if (kRows % kRowStep == 0 || r < kRows) {
        const int bytes = r < rows ? col_bytes : 0;
        cp_async_16(s + swz<kCols>(r, c), bytes ? src : g, bytes);
      }
      src += kRowStep * stride;
    }
  } else {
    const uint16_t* gr = reinterpret_cast<const uint16_t*>(g);
    for (int idx = tid; idx < kChunks; idx += kThreads) {
      const int r = idx / kCpr, c = (idx % kCpr) * 8;
      uint16_t e[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) e[k] = (r < rows && c + k < cols) ? gr[r * stride + c + k] : 0;
      uint4 v;
      v.x = e[0] | (uint32_t(e[1]) << 16);
      v.y = e[2] | (uint32_t(e[3]) << 16);
      v.z = e[4] | (uint32_t(e[5]) << 16);
      v.w = e[6] | (uint32_t(e[7]) << 16);
      *reinterpret_cast<uint4*>(s + swz<kCols>(r, c)) = v;
    }
  }
}

// Copies rows < rows, columns < cols of a shared tile to global memory: whole 16-byte chunks when
// vec (g and the stride 16-byte aligned) and the chunk lies inside `cols`, element by element
// otherwise. off(r, c): the element offset of (r, c) in s (c a multiple of 8; its 8 elements
// contiguous); swz<kCols> (the swizzled row-major tile) unless given.
template <int kRows, int kCols, int kThreads, typename T, typename Off>
__device__ __forceinline__ void store_tile(T* g, int64_t stride, const T* s, int rows, int cols,
                                           bool vec, int tid, Off off) {
  constexpr int kCpr = kCols / 8;
  constexpr int kChunks = kRows * kCpr;
  for (int idx = tid; idx < kChunks; idx += kThreads) {
    const int r = idx / kCpr, c = (idx % kCpr) * 8;
    if (r >= rows || c >= cols) continue;
    const uint4 v = *reinterpret_cast<const uint4*>(s + off(r, c));
    if (vec && c + 8 <= cols) {
      *reinterpret_cast<uint4*>(g + r * stride + c) = v;
    } else {
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      uint16_t* gr = reinterpret_cast<uint16_t*>(g) + r * stride + c;
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (c + k < cols) gr[k] = static_cast<uint16_t>(w[k / 2] >> (16 * (k % 2)));
    }
  }
}
template <int kRows, int kCols, int kThreads, typename T>
__device__ __forceinline__ void store_tile(T* g, int64_t stride, const T* s, int rows, int cols,
                                           bool vec, int tid) {
  store_tile<kRows, kCols, kThreads>(g, stride, s, rows, cols, vec, tid,
                                     [](int r, int c) { return swz<kCols>(r, c); });
}

// ---- warp GEMMs -----------------------------------------------------------------------------
// Accumulator fragment acc[mt][nt][e] of a warp holds row mt*16 + lane/4 + 8*(e/2), column
// nt*8 + 2*(lane%4) + (e%2) of the warp's output block.

// acc[MT][NT] += A[a_r0.., 0..K) * B[b_r0.., 0..K)^T, both operands K-contiguous in shared memory
// (A [m][k] with kColsA columns, B [n][k] with kColsB columns).
template <typename T, int MT, int NT, int K, int kColsA, int kColsB>
__device__ __forceinline__ void gemm_nt(float (&acc)[MT][NT][4], const T* sA, int a_r0, const T* sB,
                                        int b_r0, int lane) {
  static_assert(NT % 2 == 0 && K % 16 == 0, "gemm_nt shape");
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldsm_x4(a[mt], sA + swz<kColsA>(a_r0 + mt * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldsm_x4(b, sB + swz<kColsB>(b_r0 + np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                  kk * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        Mma<T>::mma(acc[mt][2 * np], a[mt], b[0], b[1]);
        Mma<T>::mma(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// acc[MT][NT] += A * B[b_k0.., b_n0..], A in registers (KS steps of 16), B stored [k][n] (N
// contiguous, kColsB columns) and read with ldmatrix.trans.
template <typename T, int MT, int NT, int KS, int kColsB>
__device__ __forceinline__ void gemm_rs(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][KS][4],
                                        const T* sB, int b_k0, int b_n0, int lane) {
  static_assert(NT % 2 == 0, "gemm_rs shape");
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldsm_x4_t(b, sB + swz<kColsB>(b_k0 + ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                    b_n0 + np * 16 + (lane >> 4) * 8));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        Mma<T>::mma(acc[mt][2 * np], a[mt][ks], b[0], b[1]);
        Mma<T>::mma(acc[mt][2 * np + 1], a[mt][ks], b[2], b[3]);
      }
    }
  }
}

// acc[MT][NT] += A * B with A stored transposed ([k][m], kColsA columns, read with
// ldmatrix.trans at columns a_m0..) and B stored [k][n] (kColsB columns, columns b_n0..).
template <typename T, int MT, int NT, int K, int kColsA, int kColsB>
__device__ __forceinline__ void gemm_tt(float (&acc)[MT][NT][4], const T* sAt, int a_m0,
                                        const T* sB, int b_n0, int lane) {
  static_assert(NT % 2 == 0 && K % 16 == 0, "gemm_tt shape");
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldsm_x4_t(a[mt], sAt + swz<kColsA>(kk * 16 + (lane & 7) + ((lane >> 4) << 3),
                                         a_m0 + mt * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldsm_x4_t(b, sB + swz<kColsB>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                    b_n0 + np * 16 + (lane >> 4) * 8));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        Mma<T>::mma(acc[mt][2 * np], a[mt], b[0], b[1]);
        Mma<T>::mma(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Re-packs fp32 values laid out like an accumulator (v[MT][NT][4]) into A fragments over the
// same columns: A step ks covers columns 16 ks .. 16 ks + 15 (accumulator atoms 2 ks, 2 ks + 1).
template <typename T, int MT, int NT>
__device__ __forceinline__ void acc_to_a(const float (&v)[MT][NT][4],
                                         uint32_t (&a)[MT][NT / 2][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int ks = 0; ks < NT / 2; ++ks) {
      a[mt][ks][0] = Mma<T>::pack(v[mt][2 * ks][0], v[mt][2 * ks][1]);
      a[mt][ks][1] = Mma<T>::pack(v[mt][2 * ks][2], v[mt][2 * ks][3]);
      a[mt][ks][2] = Mma<T>::pack(v[mt][2 * ks + 1][0], v[mt][2 * ks + 1][1]);
      a[mt][ks][3] = Mma<T>::pack(v[mt][2 * ks + 1][2], v[mt][2 * ks + 1][3]);
    }
}

// Writes an accumulator block (times mul, converted to T) into a swizzled shared tile at rows
// r0 + ..., columns c0 + ... (one 32-bit store per pair of columns).
template <typename T, int kCols, int MT, int NT>
__device__ __forceinline__ void acc_to_smem(T* s, const float (&acc)[MT][NT][4], int r0, int c0,
                                            float mul, int lane) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = r0 + mt * 16 + (lane >> 2) + hf * 8, c = c0 + nt * 8 + (lane & 3) * 2;
        *reinterpret_cast<uint32_t*>(s + swz<kCols>(r, c)) =
            Mma<T>::pack(acc[mt][nt][2 * hf] * mul, acc[mt][nt][2 * hf + 1] * mul);
      }
}

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
}

}  // namespace hstu::cuda::attn
