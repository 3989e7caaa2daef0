// uvqk_act.cu — CUDA SiLU between the layer's dense z [T, 4Hd] and its padded u|v|q|k layout,
// and its backward with the column sums of d_z (the uvqk bias gradient).
//
// Which pass runs where is what measured fastest (docs/BENCHMARKS.md, session 12):
//   forward, padded heads (widths 25, 50): this file's kernel, one launch where the generic
//     activation op needs two (u, then the heads): H100, ML-1M shape 14 vs 19 us a layer;
//   forward, dense layout: the generic element-wise kernel (one launch either way; it measured
//     0.193 vs 0.210 ms at 32 x 1024 x 4096 bf16);
//   backward, dense layout: this file's kernel, d_z and the bias gradient in one pass, one read
//     of d_z less than SiLU' + bias_grad (H100, 32 x 1024: 0.40 vs 0.26 + 0.18 ms; 32 x 4096:
//     1.46 vs 1.05 + 0.58 ms);
//   backward, padded heads: the staged activation kernels + bias_grad (this kernel took 45 vs
//     27 us a layer at the ML-1M shape: 2 row batches per thread, a latency-bound reduction).
// NOTE (session 24, H200, bench-large, 8 layers of z [82 K, 4096] bf16): the forward folded
// into the uvqk GEMM's epilogue (branch gemm-silu: one CUTLASS sm_90a GEMM storing z and SiLU of
// the rounded z, LinCombPerColBiasEltActAux; correct, its u|v|q|k bit-identical to this pass
// over its z) took the GEMM + SiLU phase 16.2 ms a step (cooperative 128 x 256 tiles, cluster
// 2 x 1) and 20.2-21.3 ms (pingpong 64 x 256 or 128 x 128 tiles) against 11.3 ms for cuBLASLt's
// GEMM and this pass: the 1.3 GB a layer it saves are worth less than cuBLASLt's mainloop. Not
// kept.
// NOTE (session 24, H200, bench-large): the backward folded into the passes that make d_uvqk
// (branch silu-bwd: the attention's epilogue stores times SiLU'(z), the LN * u * dropout
// backward reading z for u, then the bias sums alone; bit-identical values) replaced this pass's
// 5.3 ms a step by 1.46 ms of sums but cost the attention backward 5.8 ms (its d 256 epilogues
// wait for z, one CTA an SM) and the LN backward 1.15 ms (a 44-byte spill, MUFU work): 3 ms a
// step slower. Not kept; z prefetched into the freed stage buffers would be the next form.
//
// The kernel: a block is tx column lanes x ty row lanes; a thread owns V consecutive dense
// columns (V = 8 when the layout is dense and every view is 16-byte aligned, 1 otherwise) and
// walks rows, so the dense-to-padded column map (UvqkLayout::column) is computed once per thread
// and not per element, and the column sums need no atomics: each thread sums its rows, the ty
// lanes are added in smem in a fixed order, one partial row per block of >= 32 rows (at most 4
// blocks per SM), and a second kernel adds the blocks' partials in a fixed order
// (deterministic). kBatch rows are loaded before any is computed or stored, so several loads are
// in flight per thread, and d_z may be d_uvqk (dense layout: a thread reads and writes only its
// own elements).
//
// Bytes at B32 L4096 D1024 4x256 (T = 131072, 4Hd = 4096, bf16): the backward reads z and d_uvqk
// and writes d_z, 3 GiB, and the separate bias_grad pass (1 GiB more) is gone. Its 16-bit form
// holds a thread's rows in flight as 16-byte words (Loaded, batch_of: 8 rows of each operand).
#include "ops/cuda/activation.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemm.h"
#include "ops/cuda/uvqk_act.h"

namespace hstu::cuda {
namespace {

constexpr int kThreads = 512;

// The layout's column map on the device (UvqkLayout::column).
struct ColumnMap {
  int hd = 0, d = 1, v0 = 0, stride = 0;
  __device__ int64_t operator()(int64_t c) const {
    if (c < hd) return c;
    const int64_t h = (c - hd) / d;
    return v0 + h * stride + (c - hd - h * d);
  }
};

template <typename T>
struct UvqkArgs {
  const T* z = nullptr;
  int64_t ldz = 0;
  const T* pin = nullptr;  // backward: d_uvqk (padded)
  T* pout = nullptr;       // forward: uvqk (padded)
  int64_t ldp = 0;
  T* dz = nullptr;  // backward: d_z (dense; may be pin)
  int64_t lddz = 0;
  float* partial = nullptr;  // backward with a bias gradient: [gridDim.x, n]
  int64_t rows = 0, n = 0, rows_per_block = 0;
  ColumnMap map;
};

// Rows [blockIdx.x * rows_per_block, + rows_per_block) of the call; see the file comment.
template <int V, int kBatch, bool kBwd, typename T>
__global__ void __launch_bounds__(kThreads) uvqk_silu_kernel(UvqkArgs<T> a) {
  extern __shared__ float smem[];  // [ty][tx * V] (backward with partials only)
  const int tx = threadIdx.x, ty = threadIdx.y, nty = blockDim.y;
  const int64_t r0 = blockIdx.x * a.rows_per_block;
  const int64_t r1 = min(a.rows, r0 + a.rows_per_block);
  for (int64_t c0 = 0; c0 < a.n; c0 += static_cast<int64_t>(blockDim.x) * V) {
    const int64_t c = c0 + static_cast<int64_t>(tx) * V;
    const bool active = c < a.n;
    const int64_t pc = active ? a.map(c) : 0;  // V = 8: dense layout, pc == c
    float acc[V] = {};
    if (active) {
      for (int64_t rb = r0 + ty; rb < r1; rb += static_cast<int64_t>(nty) * kBatch) {
        Loaded<V, T> zv[kBatch], gv[kBwd ? kBatch : 1];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int64_t r = rb + static_cast<int64_t>(b) * nty;
          if (r < r1) {
            zv[b].template load<true>(a.z + r * a.ldz + c);
            if constexpr (kBwd) gv[b].template load<false>(a.pin + r * a.ldp + pc);
          }
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int64_t r = rb + static_cast<int64_t>(b) * nty;
          if (r >= r1) continue;
          float out[V];
#pragma unroll
          for (int j = 0; j < V; ++j) {
            if constexpr (kBwd) {
              // The stored (rounded) value is what the bias gradient sums.
              out[j] = to_f32(from_f32<T>(gv[b][j] * silu_grad_f(zv[b][j])));
              acc[j] += out[j];
            } else {
              out[j] = silu_f(zv[b][j]);
            }
          }
          if constexpr (kBwd)
            store_vec<V>(a.dz + r * a.lddz + c, out);
          else
            store_vec<V>(a.pout + r * a.ldp + pc, out);
        }
      }
    }
    if constexpr (kBwd) {
      if (a.partial != nullptr) {  // uniform over the block: the barriers are safe
#pragma unroll
        for (int j = 0; j < V; ++j) smem[(ty * blockDim.x + tx) * V + j] = acc[j];
        __syncthreads();
        if (ty == 0 && active) {
          for (int k = 1; k < nty; ++k)
#pragma unroll
            for (int j = 0; j < V; ++j) acc[j] += smem[(k * blockDim.x + tx) * V + j];
#pragma unroll
          for (int j = 0; j < V; ++j)
            if (c + j < a.n) a.partial[blockIdx.x * a.n + c + j] = acc[j];
        }
        __syncthreads();
      }
    }
  }
}

struct Geometry {
  bool vec8 = false;
  dim3 block;
};

Geometry geometry(const UvqkLayout& l, std::initializer_list<const Tensor*> ts,
                  int threads = kThreads) {
  Geometry g;
  const int64_t n = 4 * l.hd();
  g.vec8 = l.dense() && can_vec8(n, ts);
  const int64_t vecs = g.vec8 ? n / 8 : n;
  const int tx = static_cast<int>(std::min<int64_t>(256, (vecs + 31) / 32 * 32));
  g.block = dim3(tx, std::max(1, threads / tx));
  return g;
}

ColumnMap column_map(const UvqkLayout& l) {
  HSTU_CHECK(l.width() < (int64_t(1) << 31), "uvqk_silu: rows of ", l.width(), " columns");
  return {static_cast<int>(l.hd()), static_cast<int>(l.head_dim), static_cast<int>(l.v0()),
          static_cast<int>(l.stride())};
}

// Rows a block takes without partial sums: one batch per row lane.
int64_t plain_rows_per_block(const Geometry& g, int batch) {
  return static_cast<int64_t>(g.block.y) * batch;
}

// Rows a thread loads before it computes any (the loads in flight). The 8-wide 16-bit backward
// holds them as 16-byte words (Loaded): 8 rows of z and d_uvqk in 64 registers, 124 in all, so
// blocks of 256 still run 2 an SM. H200, bench-large step, ncu: 4 rows as fp32 (128 registers)
// moved 2.36 TB/s (1.94 GB in 0.82 ms), 8 as words 3.41 TB/s (1.80 GB in 0.53 ms).
template <int V, bool kBwd, typename T>
constexpr int batch_of() {
  return V == 8 ? (kBwd && Loaded<V, T>::kWord ? 8 : 4) : 16;
}

// The backward's row parts (one partial row of column sums each): at least kPartRows rows, at
// most 4 per SM, so that every SM has several blocks of loads in flight (bias_grad's 2 per SM of
// >= 128 rows measured 2 TB/s here: H200, 32 x 1024 x 4096 bf16).
constexpr int64_t kPartRows = 32;
constexpr int kBwdThreads = 256;
int64_t bwd_parts(int64_t rows) {
  const int64_t cap = 4 * static_cast<int64_t>(num_sms());
  return std::max<int64_t>(1, std::min(cap, (rows + kPartRows - 1) / kPartRows));
}

// db[c] (+)= sum over p of partial[p, c] in a fixed order: lane y of a 32 x 8 block sums parts
// y, y + 8, ... of column c, and lane 0 adds the 8 lane sums in order (deterministic).
__global__ void __launch_bounds__(256)
    colsum_reduce_kernel(const float* __restrict__ partial, int64_t parts, int64_t n, float* db,
                         bool accumulate) {
  __shared__ float lanes[8][32];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < n)
    for (int64_t p = threadIdx.y; p < parts; p += 8) s += partial[p * n + c];
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= n) return;
  float total = 0.0f;
#pragma unroll
  for (int y = 0; y < 8; ++y) total += lanes[y][threadIdx.x];
  db[c] = accumulate ? db[c] + total : total;
}

template <bool kBwd, typename T>
void launch(Ctx& ctx, const Geometry& g, const UvqkArgs<T>& a, int64_t blocks) {
  HSTU_CHECK(blocks < (int64_t(1) << 31), "uvqk_silu: ", a.rows, " rows");
  dispatch_vec(g.vec8, [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    const size_t smem = a.partial ? sizeof(float) * V * g.block.x * g.block.y : 0;
    uvqk_silu_kernel<V, batch_of<V, kBwd, T>(), kBwd, T>
        <<<static_cast<unsigned>(blocks), g.block, smem, stream_of(ctx)>>>(a);
    HSTU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

size_t uvqk_silu_bwd_scratch_bytes(int64_t rows, int64_t cols) {
  return rows == 0 ? 0 : arena_bytes(sizeof(float) * static_cast<size_t>(bwd_parts(rows) * cols));
}

void uvqk_silu_fwd(Ctx& ctx, const UvqkLayout& layout, const Tensor& z, const Tensor& uvqk) {
  check_uvqk_act(layout, z, uvqk, Tensor(), Tensor(), "uvqk_silu_fwd");
  check_cuda_tensor(z, "uvqk_silu_fwd z");
  check_cuda_tensor(uvqk, "uvqk_silu_fwd uvqk");
  const int64_t rows = z.dim(0), n = z.dim(1);
  if (rows == 0) return;
  // Dense: the same element-wise pass, which the generic kernel does a little faster (H100,
  // 32 x 1024 x 4096 bf16: 0.193 vs 0.210 ms).
  if (layout.dense()) return cuda::activation_fwd(ctx, Activation::kSilu, z, uvqk.cols(0, n));
  const Geometry g = geometry(layout, {&z, &uvqk});
  dispatch_io(z.dtype, "uvqk_silu_fwd z", [&](auto tag) {
    using T = typename decltype(tag)::type;
    UvqkArgs<T> a;
    a.z = static_cast<const T*>(z.data), a.ldz = z.row_stride;
    a.pout = static_cast<T*>(uvqk.data), a.ldp = uvqk.row_stride;
    a.rows = rows, a.n = n, a.map = column_map(layout);
    a.rows_per_block =
        plain_rows_per_block(g, g.vec8 ? batch_of<8, false, T>() : batch_of<1, false, T>());
    launch<false>(ctx, g, a, (rows + a.rows_per_block - 1) / a.rows_per_block);
  });
}

void uvqk_silu_bwd(Ctx& ctx, const UvqkLayout& layout, const Tensor& z, const Tensor& d_uvqk,
                   const Tensor& d_z, const Tensor& db, bool accumulate_db) {
  check_uvqk_act(layout, z, d_uvqk, d_z, db, "uvqk_silu_bwd");
  check_cuda_tensor(z, "uvqk_silu_bwd z");
  check_cuda_tensor(d_uvqk, "uvqk_silu_bwd d_uvqk");
  check_cuda_tensor(d_z, "uvqk_silu_bwd d_z");
  if (!db.empty()) check_cuda_tensor(db, "uvqk_silu_bwd db");
  const int64_t rows = z.dim(0), n = z.dim(1);
  if (rows == 0) {
    if (!db.empty() && !accumulate_db)
      HSTU_CUDA_CHECK(cudaMemsetAsync(db.data, 0, db.nbytes(), stream_of(ctx)));
    return;
  }
  if (!layout.dense()) {
    // Padded heads: the staged activation kernel on u and on the heads, then bias_grad, which
    // measured faster than this file's kernel (H100, ML-1M shape: 27 vs 45 us a layer; and
    // without its partial sums, then bias_grad: H200, bwd.silu 0.344 vs 0.207 ms a step).
    const int64_t hd = layout.hd();
    cuda::activation_bwd(ctx, Activation::kSilu, z.cols(0, hd), d_uvqk.cols(0, hd),
                         d_z.cols(0, hd));
    cuda::activation_bwd(ctx, Activation::kSilu, z.cols(hd, n),
                         d_uvqk.cols(layout.v0(), layout.width()), d_z.cols(hd, n),
                         {3 * layout.heads, layout.head_dim});
    if (!db.empty()) cuda::bias_grad(ctx, d_z, db, accumulate_db);
    return;
  }
  const Geometry g = geometry(layout, {&z, &d_uvqk, &d_z}, db.empty() ? kThreads : kBwdThreads);
  dispatch_io(z.dtype, "uvqk_silu_bwd z", [&](auto tag) {
    using T = typename decltype(tag)::type;
    UvqkArgs<T> a;
    a.z = static_cast<const T*>(z.data), a.ldz = z.row_stride;
    a.pin = static_cast<const T*>(d_uvqk.data), a.ldp = d_uvqk.row_stride;
    a.dz = static_cast<T*>(d_z.data), a.lddz = d_z.row_stride;
    a.rows = rows, a.n = n, a.map = column_map(layout);
    if (db.empty()) {
      a.rows_per_block =
          plain_rows_per_block(g, g.vec8 ? batch_of<8, true, T>() : batch_of<1, true, T>());
      return launch<true>(ctx, g, a, (rows + a.rows_per_block - 1) / a.rows_per_block);
    }
    // uvqk_silu_bwd_scratch_bytes (in the ops' scratch budget) covers this [parts, n] buffer.
    Scratch scratch(ctx, "uvqk_silu_bwd");
    const int64_t want = bwd_parts(rows);
    a.rows_per_block = (rows + want - 1) / want;
    const int64_t parts = (rows + a.rows_per_block - 1) / a.rows_per_block;
    Tensor partial = scratch.alloc(DType::kF32, {parts, n});
    a.partial = partial.as<float>();
    launch<true>(ctx, g, a, parts);
    colsum_reduce_kernel<<<static_cast<unsigned>((n + 31) / 32), dim3(32, 8), 0, stream_of(ctx)>>>(
        a.partial, parts, n, db.as<float>(), accumulate_db);
    HSTU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace hstu::cuda
