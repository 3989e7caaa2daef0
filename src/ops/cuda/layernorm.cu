// layernorm.cu — CUDA LayerNorm, the fused HSTU output path y = Dropout(u * LN(o)), and dropout.
//
// The one decision: one warp per row, fp32 math, the row re-read from L1/L2 instead of held in
// registers (any width works with one kernel per dtype pair; rows of up to kShortRow columns,
// latency-bound, and the backward's 8-wide rows up to 1024 (kShortRowBwd) are held in registers
// with every load issued up front), and dw/db reduced
// deterministically: each block owns a fixed chunk of rows, each warp accumulates its columns in
// its own shared-memory slice, the block sums the slices in warp order into a per-block partial
// in ctx.scratch, and reduce_partials sums the blocks in order. Dropout masks come from
// dropout_keep(seed, offset, row * cols + col, p), the same function the CPU reference calls;
// given a keep tensor (ops/layernorm.h), the fused forward also stores them as bits, a word per
// 32 columns assembled by the warp (store_keep_bits), and the fused backward reads those words
// (kBits: no Philox draws) instead of drawing the mask again.
#include "ops/cuda/common.cuh"
#include "ops/cuda/layernorm.h"

namespace hstu::cuda {
namespace {

constexpr int kWarpsFwd = 8;
constexpr int64_t kShortRow = 256;  // rows up to this width take the kernels' register path
// The LayerNorm backwards' register path for 8-wide vectors reaches rows of 1024 (kC = 4; the
// file comment's kernels otherwise). H200, bench-large step (D = 1024, 82k rows, bf16), per step
// of 8 layers: the fused LN * u * dropout backward 3.49 ms in session 22's register path (each
// chunk's loads behind the previous chunk's du store) -> 3.09-3.15 ms with the row's loads issued
// first and at most 168 registers (2 blocks an SM; uncapped, 178 registers and 1 block: 4.42 ms);
// the plain backward 2.17 ms in the loop form -> 2.00 with the shared-memory sums' reads ahead of
// their writes -> 1.90 in the register path (124 registers, 2 blocks an SM).
template <int V>
constexpr int64_t kShortRowBwd = V == 8 ? 1024 : kShortRow;

// Calls f(std::integral_constant<int, C>{}) with C = the chunks of 32 V elements a row of `cols`
// columns needs, rounded up to 1, 2, 4 or 8, for rows of at most kMaxCols columns (the kernels'
// kC: the row in registers), else C = 0 (the loop over any width). At kShortRow, V = 8 takes
// C = 0 or 1.
template <int V, int64_t kMaxCols = kShortRow, typename F>
decltype(auto) dispatch_chunks(int64_t cols, F&& f) {
  constexpr int64_t kMaxK = (kMaxCols + 32 * V - 1) / (32 * V);
  static_assert(kMaxK <= 8, "at most 8 chunks in registers");
  const int64_t k = cols <= kMaxCols ? (cols + 32 * V - 1) / (32 * V) : 0;
  if constexpr (kMaxK > 4)
    if (k > 4) return f(std::integral_constant<int, 8>{});
  if constexpr (kMaxK > 2)
    if (k > 2) return f(std::integral_constant<int, 4>{});
  if constexpr (kMaxK > 1)
    if (k > 1) return f(std::integral_constant<int, 2>{});
  if (k == 1) return f(std::integral_constant<int, 1>{});
  return f(std::integral_constant<int, 0>{});
}

struct DropArgs {
  float p = 0.0f;
  float scale = 1.0f;  // 1 / (1 - p)
  uint64_t seed = 0, offset = 0;
  // v after dropout, given its decision.
  __device__ __forceinline__ float kept(bool keep, float v) const {
    return keep ? v * scale : 0.0f;
  }
};

DropArgs drop_args(const DropoutSpec& d) {
  HSTU_CHECK(d.p >= 0.0f && d.p < 1.0f, "dropout probability must be in [0, 1), got ", d.p);
  return {d.p, 1.0f / (1.0f - d.p), d.seed, d.offset};
}

// Applies the dropout mask of elements i0.. to v (v *= keep / (1 - p)); returns the decisions as
// bits (bit j: element i0 + j kept; all set when p = 0).
template <int V>
__device__ __forceinline__ uint32_t apply_dropout(const DropArgs& d, uint64_t i0, float (&v)[V]) {
  static_assert(V <= 8, "a chunk's decisions fit a byte");
  if (d.p <= 0.0f) return (1u << V) - 1u;
  bool keep[V];
  dropout_keep_vec<V>(d.seed, d.offset, i0, d.p, keep);
  uint32_t bits = 0;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    v[j] = d.kept(keep[j], v[j]);
    bits |= keep[j] ? 1u << j : 0u;
  }
  return bits;
}

// v *= keep / (1 - p) with the decisions kept by the forward (bit j: element j).
template <int V>
__device__ __forceinline__ void apply_bits(const DropArgs& d, uint32_t bits, float (&v)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = d.kept((bits >> j) & 1u, v[j]);
}

// Stores a warp's decisions for 32 chunks of V elements (lane l's chunk starts at element
// c0 + l V of the row; its bits: apply_dropout's) into the row's keep words (ops/layernorm.h:
// bit c % 32 of word c / 32). Called by the whole warp; lanes past the row's end pass 0.
template <int V>
__device__ __forceinline__ void store_keep_bits(uint32_t* row_words, int64_t c0, uint32_t bits,
                                                int lane, int64_t n) {
  static_assert(V == 1 || V == 8, "the kernels' vector widths");
  if constexpr (V == 1) {  // c0 % 32 == 0: the warp's 32 elements are one word
    const uint32_t w = __ballot_sync(0xffffffffu, bits & 1u);
    if (lane == 0 && c0 < n) row_words[c0 / 32] = w;  // kC rounds up: a chunk may lie past n
  } else {                                            // c0 % 256 == 0: four lanes' bytes a word
    uint32_t w = bits << (8 * (lane & 3));
    w |= __shfl_xor_sync(0xffffffffu, w, 1);
    w |= __shfl_xor_sync(0xffffffffu, w, 2);
    const int64_t c = c0 + static_cast<int64_t>(lane) * V;
    if ((lane & 3) == 0 && c < n) row_words[c / 32] = w;
  }
}

// The V decisions of the chunk at column c from its keep word (word c / 32 of the row).
template <int V>
__device__ __forceinline__ uint32_t chunk_bits(uint32_t word, int64_t c) {
  return (word >> (c % 32)) & ((1u << V) - 1u);
}

// The keep decisions of a short row's elements for the kernels' register path with V = 1: lane l
// holds elements c = l + 32 i (i < kC) of row `row` (n columns), which are elements row * n + c
// of the dropout stream. dropout_keep draws a Philox call per element, each call's 4 words
// serving 4 elements: here each lane draws one of the row's calls and the lanes pass the words
// by shuffles, so a warp issues ceil(calls / 32) Philox calls a row instead of kC (the same
// decisions: the stream's (counter, word) of each element is unchanged).
template <int kC>
__device__ __forceinline__ void row_keep(const DropArgs& d, int64_t row, int64_t n, int lane,
                                         bool (&keep)[kC]) {
  const uint64_t e0 = static_cast<uint64_t>(row * n), k0 = e0 >> 2;
  constexpr int kRounds = (kC * 32 / 4 + 1 + 31) / 32;  // calls a row of <= 32 kC elements spans
#pragma unroll
  for (int ro = 0; ro < kRounds; ++ro) {
    const Philox4 r = philox4x32(d.seed, d.offset + k0 + 32 * ro + lane);
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const uint64_t e = e0 + lane + 32 * i;
      const int src = static_cast<int>((e >> 2) - k0) - 32 * ro;  // the lane holding e's call
      const int from = src & 31;
      const uint32_t w0 = __shfl_sync(0xffffffffu, r.x, from);
      const uint32_t w1 = __shfl_sync(0xffffffffu, r.y, from);
      const uint32_t w2 = __shfl_sync(0xffffffffu, r.z, from);
      const uint32_t w3 = __shfl_sync(0xffffffffu, r.w, from);
      if (src >= 0 && src < 32) {
        const uint32_t w = (e & 3) == 0 ? w0 : (e & 3) == 1 ? w1 : (e & 3) == 2 ? w2 : w3;
        keep[i] = u32_to_unit_float(w) >= d.p;
      }
    }
  }
}

// v *= keep / (1 - p) with precomputed decisions; returns them as a bit.
__device__ __forceinline__ uint32_t apply_keep(const DropArgs& d, bool keep, float (&v)[1]) {
  v[0] = d.kept(keep, v[0]);
  return keep ? 1u : 0u;
}

// LN affine parameters: f32, or the input's dtype (TX).
template <int V, typename TX>
__device__ __forceinline__ void load_param(const void* p, bool f32, int64_t c, float (&out)[V],
                                           float dflt) {
  if (p == nullptr) {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = dflt;
  } else if (f32) {
    load_vec<V>(static_cast<const float*>(p) + c, out);
  } else {
    load_vec<V>(static_cast<const TX*>(p) + c, out);
  }
}

struct LnFwdArgs {
  const void* x = nullptr;  // [rows, cols] (o for the fused op)
  int64_t ldx = 0;
  const void* u = nullptr;  // fused op only: [rows, cols], dtype of x
  int64_t ldu = 0;
  void* y = nullptr;
  int64_t ldy = 0;
  const void* w = nullptr;
  const void* b = nullptr;
  bool param_f32 = true;
  float* mean = nullptr;
  float* rstd = nullptr;
  int64_t rows = 0, cols = 0;
  float eps = 0.0f;
  DropArgs drop;
  uint32_t* keep = nullptr;  // fused op with p > 0: the decisions' words (ops/layernorm.h), or null
  int64_t keep_words = 0;    // words a row
};

// One warp per row. Statistics by the shifted-data method (sums of x - x[0]): one pass, and no
// cancellation unless the row's spread is tiny next to |mean - x[0]|. kC > 0: the row is at most
// kC chunks of 32 V elements, held in registers with its parameters (and u) from the first pass,
// all loads issued before the warp's reductions: one round trip to memory per row instead of
// two, the same arithmetic in the same order as kC = 0 (the loop over any width).
template <int V, int kC, typename TX, typename TY, bool kMul>
__global__ void __launch_bounds__(kWarpsFwd * 32) ln_fwd_kernel(LnFwdArgs a) {
  constexpr int kR = kC > 0 ? kC : 1;
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsFwd) + threadIdx.x / 32;
  if (row >= a.rows) return;
  const TX* x = static_cast<const TX*>(a.x) + row * a.ldx;
  const TX* u = kMul ? static_cast<const TX*>(a.u) + row * a.ldu : nullptr;
  const int64_t n = a.cols;
  const float shift = to_f32(x[0]);
  float s = 0.0f, ss = 0.0f;
  float xs[kR][V], ws[kR][V], bs[kR][V], us[kR][V];
  const auto add_stats = [&](const float(&v)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float d = v[j] - shift;
      s += d;
      ss += d * d;
    }
  };
  if constexpr (kC > 0) {
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int64_t c = (lane + 32 * static_cast<int64_t>(i)) * V;
      if (c >= n) continue;
      load_vec<V>(x + c, xs[i]);
      load_param<V, TX>(a.w, a.param_f32, c, ws[i], 1.0f);
      load_param<V, TX>(a.b, a.param_f32, c, bs[i], 0.0f);
      if constexpr (kMul) load_vec<V>(u + c, us[i]);
    }
#pragma unroll
    for (int i = 0; i < kC; ++i)
      if ((lane + 32 * static_cast<int64_t>(i)) * V < n) add_stats(xs[i]);
  } else {
    for (int64_t c = static_cast<int64_t>(lane) * V; c < n; c += 32 * V) {
      load_vec<V>(x + c, xs[0]);
      add_stats(xs[0]);
    }
  }
  s = warp_sum(s);
  ss = warp_sum(ss);
  const float md = s / static_cast<float>(n);
  const float var = fmaxf(ss / static_cast<float>(n) - md * md, 0.0f);
  const float mean = shift + md;
  const float rstd = rsqrtf(var + a.eps);
  if (lane == 0) {
    a.mean[row] = mean;
    a.rstd[row] = rstd;
  }
  TY* y = static_cast<TY*>(a.y) + row * a.ldy;
  // Short rows of 1-wide chunks draw their dropout decisions a row at a time (row_keep).
  constexpr bool kRowKeep = kMul && kC > 0 && V == 1;
  bool keep[kR];
  if constexpr (kRowKeep)
    if (a.drop.p > 0.0f) row_keep<kR>(a.drop, row, n, lane, keep);
  // y at c..c+V from the chunk's x, w, b (and u); chunk i of a short row (-1: the loop). Returns
  // the chunk's dropout decisions as bits (the fused op; else 0).
  const auto write = [&](int64_t c, int i, float(&v)[V], const float(&w)[V], const float(&b)[V],
                         const float(&uu)[V]) {
    uint32_t bits = 0;
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = (v[j] - mean) * rstd * w[j] + b[j];
    if constexpr (kMul) {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] *= uu[j];
      if constexpr (kRowKeep) {
        if (a.drop.p > 0.0f) bits = apply_keep(a.drop, keep[i], v);
      } else {
        bits = apply_dropout<V>(a.drop, static_cast<uint64_t>(row * n + c), v);
      }
    }
    store_vec<V>(y + c, v);
    return bits;
  };
  uint32_t* keep_row = kMul && a.keep ? a.keep + row * a.keep_words : nullptr;
  if constexpr (kC > 0) {
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int64_t c = (lane + 32 * static_cast<int64_t>(i)) * V;
      const uint32_t bits = c < n ? write(c, i, xs[i], ws[i], bs[i], us[i]) : 0u;
      if (keep_row) store_keep_bits<V>(keep_row, 32 * static_cast<int64_t>(i) * V, bits, lane, n);
    }
  } else {  // a warp-uniform loop: the decisions' words are stored by the whole warp
    for (int64_t c0 = 0; c0 < n; c0 += 32 * V) {
      const int64_t c = c0 + static_cast<int64_t>(lane) * V;
      uint32_t bits = 0;
      if (c < n) {
        load_vec<V>(x + c, xs[0]);
        load_param<V, TX>(a.w, a.param_f32, c, ws[0], 1.0f);
        load_param<V, TX>(a.b, a.param_f32, c, bs[0], 0.0f);
        if constexpr (kMul) load_vec<V>(u + c, us[0]);
        bits = write(c, -1, xs[0], ws[0], bs[0], us[0]);
      }
      if (keep_row) store_keep_bits<V>(keep_row, c0, bits, lane, n);
    }
  }
}

struct LnBwdArgs {
  const void* x = nullptr;  // LN input (o for the fused op)
  int64_t ldx = 0;
  const void* u = nullptr;  // fused op only
  int64_t ldu = 0;
  const void* dy = nullptr;
  int64_t lddy = 0;
  void* dx = nullptr;  // dx, or do_ for the fused op
  int64_t lddx = 0;
  void* du = nullptr;  // fused op only
  int64_t lddu = 0;
  const void* w = nullptr;
  const void* b = nullptr;
  bool param_f32 = true;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  int64_t rows = 0, cols = 0, rows_per_block = 0;
  bool accumulate_dx = false;
  float* partial = nullptr;  // [gridDim.x, 2, cols] (dw then db sums) or null
  int64_t slice = 0;         // a warp's dw (then db) slice in shared memory: slice_cols(cols)
  DropArgs drop;
  const uint32_t* keep = nullptr;  // fused op with p > 0: the forward's decisions, or null
  int64_t keep_words = 0;          // words a row
};

// Shared-memory slices of the dw/db sums: with 8-wide vectors lane l's element j of the
// 256-column chunk k sits at k * 256 + j * 32 + l (not at k * 256 + l * 8 + j), so a warp's 32
// read-modify-writes of one j hit 32 banks instead of 4 (an 8-way conflict, when the LayerNorm
// backward moved ~1 TB/s at D = 1024 on an H200); the slice is then cols rounded up to 256.
int64_t slice_cols(int64_t cols) {
  return cols % 8 == 0 ? (cols + 255) / 256 * 256 : cols;
}
// Slice index of column c (the layout above; V = 1 keeps columns in place).
template <int V>
__device__ __forceinline__ int64_t slice_index(int64_t c) {
  if constexpr (V == 8)
    return (c & ~int64_t(255)) + (c & 7) * 32 + ((c & 255) >> 3);
  else
    return c;
}

// The gradient reaching LN's output at (row, c..c+V), in place of g (on entry the gradient
// reaching y, loaded by the caller), and for the fused op du, written here; u: the fused op's u
// at those columns (unused otherwise). The dropout decisions: the forward's bits (`bits`, when
// kBits), else `keep` when drawn already (row_keep), else drawn here.
template <int V, typename TX, typename TG, bool kMul, bool kBits>
__device__ __forceinline__ void ln_out_grad(const LnBwdArgs& a, int64_t row, int64_t c,
                                            const float (&xhat)[V], const float (&w)[V],
                                            const float (&u)[V], bool write_du, uint32_t bits,
                                            const bool* keep, float (&g)[V]) {
  if constexpr (kMul) {
    if constexpr (kBits) {
      apply_bits<V>(a.drop, bits, g);
    } else if (keep == nullptr) {
      apply_dropout<V>(a.drop, static_cast<uint64_t>(row * a.cols + c), g);
    } else if (a.drop.p > 0.0f) {
#pragma unroll
      for (int j = 0; j < V; ++j) g[j] = a.drop.kept(keep[j], g[j]);
    }
    if (write_du) {
      float b[V], du[V];
      load_param<V, TX>(a.b, a.param_f32, c, b, 0.0f);
#pragma unroll
      for (int j = 0; j < V; ++j) du[j] = g[j] * (xhat[j] * w[j] + b[j]);
      store_vec<V>(static_cast<TG*>(a.du) + row * a.lddu + c, du);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] *= u[j];
  }
}

// A block of W warps owns rows [blockIdx.x * rows_per_block, +rows_per_block); warp w takes every
// W-th row. dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = g * w.
// kC > 0: rows of at most kC chunks of 32 V elements. The row's loads (x, dy, u; dx when
// accumulating) are all issued before any is used (chunk by chunk, each chunk's du store held the
// next chunk's loads back: the compiler cannot move a load above a store that may alias it), and
// the first pass keeps x as loaded and g in registers for the second (xhat recomputed, w read
// again), the same arithmetic in the same order as kC = 0 (the loop over any width).
// Registers of the 16-bit register path at kC = 4: 168 for the fused op, 128 for the plain one,
// as measured (kShortRowBwd): 2 blocks of 6 warps an SM each.
template <int kC, typename TX, typename TG, bool kMul>
constexpr int kBwdMaxRegs = kC == 4 && sizeof(TX) == 2 && sizeof(TG) == 2 ? (kMul ? 168 : 128)
                                                                          : 255;

template <int V, int kC, typename TX, typename TG, bool kMul, bool kBits>
__global__ void __launch_bounds__(256) __maxnreg__((kBwdMaxRegs<kC, TX, TG, kMul>))
    ln_bwd_kernel(LnBwdArgs a) {
  extern __shared__ float slices[];  // [W][2][a.slice] when a.partial
  constexpr int kR = kC > 0 ? kC : 1;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  const int64_t n = a.cols, sl = a.slice;
  float* dw_s = a.partial ? slices + static_cast<int64_t>(warp) * 2 * sl : nullptr;
  float* db_s = dw_s ? dw_s + sl : nullptr;
  if (dw_s)
    for (int64_t c = lane; c < 2 * sl; c += 32) dw_s[c] = 0.0f;
  __syncwarp();
  const int64_t r0 = blockIdx.x * a.rows_per_block;
  const int64_t r1 = min(a.rows, r0 + a.rows_per_block);
  for (int64_t row = r0 + warp; row < r1; row += nwarps) {
    const TX* x = static_cast<const TX*>(a.x) + row * a.ldx;
    const TX* u = kMul ? static_cast<const TX*>(a.u) + row * a.ldu : nullptr;
    const TG* dy = static_cast<const TG*>(a.dy) + row * a.lddy;
    TG* dx = static_cast<TG*>(a.dx) + row * a.lddx;
    const float mean = a.mean[row], rstd = a.rstd[row];
    float s1 = 0.0f, s2 = 0.0f;
    float gs[kR][V];
    // Short rows of 1-wide chunks draw their dropout decisions a row at a time (row_keep).
    constexpr bool kRowKeep = kMul && kC > 0 && V == 1;
    bool keep[kR];
    if constexpr (kRowKeep)
      if (!kBits && a.drop.p > 0.0f) row_keep<kR>(a.drop, row, n, lane, keep);
    const uint32_t* keep_row = kBits ? a.keep + row * a.keep_words : nullptr;
    // xhat, w and the gradient g reaching LN's output at c, from the chunk's loaded x, dy and u
    // (and its keep word kw, when the forward kept the decisions); chunk i of a short row (-1:
    // the loop), du written in the first pass.
    const auto chunk = [&](int64_t c, int i, bool first, const auto& xl, const auto& gl,
                           const auto& ul, uint32_t kw, float(&xh)[V], float(&w)[V], float(&g)[V]) {
      float uu[V] = {};
#pragma unroll
      for (int j = 0; j < V; ++j) {
        xh[j] = (xl[j] - mean) * rstd;
        g[j] = gl[j];
        if constexpr (kMul) uu[j] = ul[j];
      }
      load_param<V, TX>(a.w, a.param_f32, c, w, 1.0f);
      ln_out_grad<V, TX, TG, kMul, kBits>(a, row, c, xh, w, uu, first, chunk_bits<V>(kw, c),
                                          kRowKeep ? &keep[i] : nullptr, g);
    };
    const auto add_sums = [&](int64_t c, const float(&xh)[V], const float(&w)[V],
                              const float(&g)[V]) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float dxh = g[j] * w[j];
        s1 += dxh;
        s2 += dxh * xh[j];
      }
      if (dw_s) {  // every slice element read before any is written: the reads overlap
        constexpr int kStep = V == 8 ? 32 : 1;  // element j at slice_index(c) + j * kStep
        const int64_t s0 = slice_index<V>(c);
        float dw[V], db[V];
#pragma unroll
        for (int j = 0; j < V; ++j) {
          dw[j] = dw_s[s0 + j * kStep];
          db[j] = db_s[s0 + j * kStep];
        }
#pragma unroll
        for (int j = 0; j < V; ++j) {
          dw_s[s0 + j * kStep] = dw[j] + g[j] * xh[j];
          db_s[s0 + j * kStep] = db[j] + g[j];
        }
      }
    };
    // dx at c from the chunk's xhat, w, g (and, accumulating, dx's former value `old`).
    const auto write = [&](int64_t c, const float(&xh)[V], const float(&w)[V], const float(&g)[V],
                           const auto& old) {
      float d[V];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        d[j] = rstd * (g[j] * w[j] - s1 - xh[j] * s2);
        if (a.accumulate_dx) d[j] += old[j];
      }
      store_vec<V>(dx + c, d);
    };
    if constexpr (kC > 0) {
      // Held for the second pass: x as loaded (xhat recomputed) and g; w is read again (L1).
      Loaded<V, TX> xl[kC], ul[kMul ? kC : 1];
      Loaded<V, TG> gl[kC], dl[kMul ? 1 : kC];  // dl: dx's former values (the fused op writes)
      uint32_t kw[kBits ? kC : 1] = {};
#pragma unroll
      for (int i = 0; i < kC; ++i) {
        const int64_t c = (lane + 32 * static_cast<int64_t>(i)) * V;
        if (c >= n) continue;
        xl[i].template load<true>(x + c);
        gl[i].template load<true>(dy + c);
        if constexpr (kMul) {
          ul[i].template load<true>(u + c);
          if constexpr (kBits) kw[i] = __ldg(keep_row + c / 32);
        } else if (a.accumulate_dx) {
          dl[i].template load<false>(dx + c);
        }
      }
#pragma unroll
      for (int i = 0; i < kC; ++i) {
        const int64_t c = (lane + 32 * static_cast<int64_t>(i)) * V;
        if (c >= n) continue;
        float xh[V], w[V];
        chunk(c, i, true, xl[i], gl[i], ul[kMul ? i : 0], kw[kBits ? i : 0], xh, w, gs[i]);
        add_sums(c, xh, w, gs[i]);
      }
      s1 = warp_sum(s1) / static_cast<float>(n);
      s2 = warp_sum(s2) / static_cast<float>(n);
#pragma unroll
      for (int i = 0; i < kC; ++i) {
        const int64_t c = (lane + 32 * static_cast<int64_t>(i)) * V;
        if (c >= n) continue;
        float xh[V], w[V];
#pragma unroll
        for (int j = 0; j < V; ++j) xh[j] = (xl[i][j] - mean) * rstd;
        load_param<V, TX>(a.w, a.param_f32, c, w, 1.0f);
        write(c, xh, w, gs[i], dl[kMul ? 0 : i]);
      }
    } else {
      float xv[V], gv[V], uv[V], old[V];
      uint32_t kw = 0;
      const auto load = [&](int64_t c) {
        load_vec<V>(x + c, xv);
        load_vec<V>(dy + c, gv);
        if constexpr (kMul) load_vec<V>(u + c, uv);
        if constexpr (kBits) kw = __ldg(keep_row + c / 32);
      };
      float xh[V], w[V];
      for (int64_t c = static_cast<int64_t>(lane) * V; c < n; c += 32 * V) {
        load(c);
        chunk(c, -1, true, xv, gv, uv, kw, xh, w, gs[0]);
        add_sums(c, xh, w, gs[0]);
      }
      s1 = warp_sum(s1) / static_cast<float>(n);
      s2 = warp_sum(s2) / static_cast<float>(n);
      for (int64_t c = static_cast<int64_t>(lane) * V; c < n; c += 32 * V) {
        load(c);
        if (a.accumulate_dx) load_vec_rw<V>(dx + c, old);
        chunk(c, -1, false, xv, gv, uv, kw, xh, w, gs[0]);
        write(c, xh, w, gs[0], old);
      }
    }
  }
  if (!a.partial) return;
  __syncthreads();
  float* out = a.partial + blockIdx.x * 2 * n;
  for (int64_t c = threadIdx.x; c < 2 * n; c += blockDim.x) {
    const int64_t half = c < n ? 0 : 1;
    const int64_t idx = half * sl + slice_index<V>(c - half * n);
    float s = 0.0f;
    for (int w = 0; w < nwarps; ++w) s += slices[static_cast<int64_t>(w) * 2 * sl + idx];
    out[c] = s;
  }
}

struct LnBwdPlan {
  int warps = 8;
  size_t smem = 0;
  int64_t blocks = 0, rows_per_block = 0;
};

// NOTE: with dw/db partials each warp needs 2*cols floats of shared memory; the block shrinks
// to keep that within the default 48 KiB (opting in beyond it only for rows wider than 6144),
// and the grid is capped so the partials stay a small fraction of the traffic. Short rows
// (kShortRow columns or fewer) are latency-bound, not bandwidth-bound: their cap leaves each warp
// at most 2 rows (the partials then ~5% of the traffic: 8 floats a row against ~10 bytes an
// element).
// NOTE: for wider rows `resident` (> 0: the kernel's blocks that fit the device at once) rounds
// the grid down to whole waves of equal blocks: a partial last wave leaves most SMs idle while its
// blocks run as long as a full wave's. H200, bench-large (D = 1024, 82k rows): 660 blocks of 6
// warps with 528 resident took the time of 2 waves for 1.25 waves of work; in 528 blocks the
// plain backward 3.00 -> 2.17 ms a step, the fused one 3.95 -> 3.48. Short rows keep their
// blocks (latency-bound: rounding down made the ML-1M step 2.18 -> 2.23 ms). 0 gives the upper
// bound the scratch is sized by.
LnBwdPlan plan_ln_bwd(int64_t rows, int64_t cols, bool want_partials, int64_t resident = 0) {
  LnBwdPlan p;
  const size_t slice_bytes = want_partials ? 2 * sizeof(float) * slice_cols(cols) : 0;
  if (want_partials) p.warps = static_cast<int>(std::clamp<size_t>((48 << 10) / slice_bytes, 1, 8));
  p.smem = slice_bytes * p.warps;
  int64_t cap = want_partials ? static_cast<int64_t>(num_sms()) * std::max(1, 32 / p.warps) : rows;
  if (cols <= kShortRow) cap = std::max(cap, (rows + 2 * p.warps - 1) / (2 * p.warps));
  const int64_t want = (rows + p.warps - 1) / p.warps;
  int64_t blocks0 = std::max<int64_t>(1, std::min(cap, want));
  if (cols > kShortRow && resident > 0 && blocks0 > resident)
    blocks0 = blocks0 / resident * resident;
  p.rows_per_block = (rows + blocks0 - 1) / blocks0;
  p.blocks = (rows + p.rows_per_block - 1) / p.rows_per_block;
  return p;
}

bool params_f32(const Tensor& x, const Tensor& w, const Tensor& b, int64_t cols, const char* op) {
  bool f32 = true;
  for (const Tensor* p : {&w, &b}) {
    if (p->empty()) continue;
    check_cuda_tensor(*p, op);
    check_shape(*p, {cols}, op);
    HSTU_CHECK(p->dtype == DType::kF32 || p->dtype == x.dtype, op,
               ": weight/bias must be f32 or the input's dtype, got ", p->str());
    f32 = p->dtype == DType::kF32;
  }
  HSTU_CHECK(w.empty() || b.empty() || w.dtype == b.dtype, op, ": weight and bias dtypes differ");
  return f32;
}

void check_stats(const Tensor& mean, const Tensor& rstd, int64_t rows, const char* op) {
  for (const Tensor* t : {&mean, &rstd}) {
    check_cuda_tensor(*t, op);
    check_shape(*t, {rows}, op);
    HSTU_CHECK(t->dtype == DType::kF32, op, ": mean/rstd must be f32 on CUDA, got ", t->str());
  }
}

// keep (ops/layernorm.h) for the fused op only (u given); its words as the kernels read them.
void check_keep(const Tensor& keep, const Tensor& u, int64_t rows, int64_t cols, const char* op) {
  check_dropout_keep(keep, rows, cols, Device::kCUDA, op);
  HSTU_CHECK(keep.empty() || !u.empty(), op, ": keep bits are the fused op's");
}
uint32_t* keep_ptr(const Tensor& keep) {
  return reinterpret_cast<uint32_t*>(keep.as<int32_t>());
}

// Launches ln_fwd_kernel for LayerNorm (u empty) or the fused op (keep: its decisions' words,
// or empty).
void ln_fwd(Ctx& ctx, const Tensor& x, const Tensor& u, const Tensor& w, const Tensor& b, float eps,
            const DropArgs& drop, const Tensor& keep, const Tensor& y, const Tensor& mean,
            const Tensor& rstd, const char* op) {
  HSTU_CHECK(x.ndim == 2, op, ": input must be 2-D, got ", x.str());
  const int64_t rows = x.dim(0), cols = x.dim(1);
  check_cuda_tensor(x, op);
  check_cuda_tensor(y, op);
  check_shape(y, {rows, cols}, op);
  check_stats(mean, rstd, rows, op);
  check_keep(keep, u, rows, cols, op);
  LnFwdArgs a;
  a.param_f32 = params_f32(x, w, b, cols, op);
  if (rows == 0) return;
  HSTU_CHECK(cols > 0, op, ": rows of width 0");
  a.x = x.data, a.ldx = x.row_stride;
  a.y = y.data, a.ldy = y.row_stride;
  a.u = u.empty() ? nullptr : u.data, a.ldu = u.empty() ? 0 : u.row_stride;
  a.w = w.empty() ? nullptr : w.data;
  a.b = b.empty() ? nullptr : b.data;
  a.mean = mean.as<float>(), a.rstd = rstd.as<float>();
  a.rows = rows, a.cols = cols, a.eps = eps, a.drop = drop;
  if (!keep.empty() && drop.p > 0.0f) a.keep = keep_ptr(keep), a.keep_words = keep.dim(1);
  const unsigned grid = static_cast<unsigned>((rows + kWarpsFwd - 1) / kWarpsFwd);
  const bool vec8 = can_vec8(cols, {&x, &y, &u, &w, &b});
  dispatch_vec(vec8, [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    dispatch_chunks<V>(cols, [&](auto ctag) {
      constexpr int C = decltype(ctag)::value;
      dispatch_io(x.dtype, op, [&](auto tx) {
        using TX = typename decltype(tx)::type;
        if (!u.empty()) {
          ln_fwd_kernel<V, C, TX, TX, true><<<grid, kWarpsFwd * 32, 0, stream_of(ctx)>>>(a);
        } else {
          dispatch_io(y.dtype, op, [&](auto ty) {
            using TY = typename decltype(ty)::type;
            ln_fwd_kernel<V, C, TX, TY, false><<<grid, kWarpsFwd * 32, 0, stream_of(ctx)>>>(a);
          });
        }
      });
    });
  });
  HSTU_CUDA_CHECK_LAUNCH();
}

// Launches ln_bwd_kernel and the dw/db reduction. For the fused op `u`/`du` are given and
// `dx` is do_ (overwritten).
void ln_bwd(Ctx& ctx, const Tensor& x, const Tensor& u, const Tensor& w, const Tensor& b,
            const Tensor& mean, const Tensor& rstd, const DropArgs& drop, const Tensor& keep,
            const Tensor& dy, const Tensor& dx, bool accumulate_dx, const Tensor& du,
            const Tensor& dw, const Tensor& db, const char* op) {
  HSTU_CHECK(x.ndim == 2, op, ": input must be 2-D, got ", x.str());
  const int64_t rows = x.dim(0), cols = x.dim(1);
  for (const Tensor* t : {&x, &dy, &dx}) {
    check_cuda_tensor(*t, op);
    check_shape(*t, {rows, cols}, op);
  }
  HSTU_CHECK(dy.dtype == dx.dtype, op, ": dy and dx dtypes differ (", dy.str(), ", ", dx.str(),
             ")");
  check_stats(mean, rstd, rows, op);
  check_keep(keep, u, rows, cols, op);
  LnBwdArgs a;
  a.param_f32 = params_f32(x, w, b, cols, op);
  HSTU_CHECK(dw.empty() || !w.empty(), op, ": dw given for a LayerNorm without weight");
  for (const Tensor* t : {&dw, &db}) {
    if (t->empty()) continue;
    check_cuda_tensor(*t, op);
    check_shape(*t, {cols}, op);
    HSTU_CHECK(t->dtype == DType::kF32 && t->contiguous(), op, ": dw/db must be f32, got ",
               t->str());
  }
  if (rows == 0 || cols == 0) return;
  HSTU_CHECK(!accumulate_dx || u.empty(), op, ": the fused op overwrites do_");  // kernel's dl
  const bool want_partials = !dw.empty() || !db.empty();

  a.x = x.data, a.ldx = x.row_stride;
  a.u = u.empty() ? nullptr : u.data, a.ldu = u.empty() ? 0 : u.row_stride;
  a.dy = dy.data, a.lddy = dy.row_stride;
  a.dx = dx.data, a.lddx = dx.row_stride;
  a.du = du.empty() ? nullptr : du.data, a.lddu = du.empty() ? 0 : du.row_stride;
  a.w = w.empty() ? nullptr : w.data;
  a.b = b.empty() ? nullptr : b.data;
  a.mean = mean.as<float>(), a.rstd = rstd.as<float>();
  a.rows = rows, a.cols = cols, a.accumulate_dx = accumulate_dx, a.drop = drop;
  a.slice = slice_cols(cols);
  if (!keep.empty() && drop.p > 0.0f) a.keep = keep_ptr(keep), a.keep_words = keep.dim(1);

  const LnBwdPlan bound = plan_ln_bwd(rows, cols, want_partials);  // sizes the partials
  const int warps = bound.warps;
  const size_t smem = bound.smem;
  int64_t nblocks = bound.blocks;

  Scratch scratch(ctx, op);
  Tensor partial;
  if (want_partials) {
    partial = scratch.alloc(DType::kF32, {nblocks, 2, cols});
    a.partial = partial.as<float>();
  }
  const bool vec8 = can_vec8(cols, {&x, &u, &dy, &dx, &du, &w, &b});
  auto launch = [&](auto kernel) {
    if (smem > (48 << 10))
      HSTU_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    int per_sm = 0;
    HSTU_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, smem));
    const LnBwdPlan plan =
        plan_ln_bwd(rows, cols, want_partials, static_cast<int64_t>(per_sm) * num_sms());
    nblocks = plan.blocks;  // <= bound.blocks
    a.rows_per_block = plan.rows_per_block;
    kernel<<<static_cast<unsigned>(nblocks), warps * 32, smem, stream_of(ctx)>>>(a);
  };
  dispatch_vec(vec8, [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    if (!u.empty()) {
      dispatch_chunks<V, kShortRowBwd<V>>(cols, [&](auto ctag) {
        constexpr int C = decltype(ctag)::value;
        dispatch_io(x.dtype, op, [&](auto tx) {
          using TX = typename decltype(tx)::type;
          if (a.keep != nullptr)  // the forward's decisions read, not drawn again
            launch(ln_bwd_kernel<V, C, TX, TX, true, true>);
          else
            launch(ln_bwd_kernel<V, C, TX, TX, true, false>);
        });
      });
      return;
    }
    dispatch_chunks<V, kShortRowBwd<V>>(cols, [&](auto ctag) {
      constexpr int C = decltype(ctag)::value;
      dispatch_io(x.dtype, op, [&](auto tx) {
        using TX = typename decltype(tx)::type;
        dispatch_io(dy.dtype, op, [&](auto tg) {
          using TG = typename decltype(tg)::type;
          launch(ln_bwd_kernel<V, C, TX, TG, false, false>);
        });
      });
    });
  });
  HSTU_CUDA_CHECK_LAUNCH();
  if (!dw.empty() && !db.empty()) {
    reduce_partials(ctx, a.partial, nblocks, 2 * cols, 2 * cols, cols, dw.as<float>(),
                    db.as<float>(), true);
  } else if (!dw.empty()) {
    reduce_partials(ctx, a.partial, nblocks, 2 * cols, cols, cols, dw.as<float>(), nullptr, true);
  } else if (!db.empty()) {
    reduce_partials(ctx, a.partial + cols, nblocks, 2 * cols, cols, cols, db.as<float>(), nullptr,
                    true);
  }
}

void check_fused(const Tensor& o, const Tensor& u, const char* op) {
  HSTU_CHECK(o.ndim == 2, op, ": o must be 2-D, got ", o.str());
  check_cuda_tensor(u, op);
  check_shape(u, {o.dim(0), o.dim(1)}, op);
  HSTU_CHECK(u.dtype == o.dtype, op, ": u and o dtypes differ (", u.str(), ", ", o.str(), ")");
}

// y = x * keep / (1 - p) over a Rows2d grid.
template <typename TX, typename TY>
struct DropoutOp {
  const TX* x;
  int64_t ldx;
  TY* y;
  int64_t ldy;
  int64_t cols;
  DropArgs d;
  template <int V>
  __device__ void apply(int64_t r, int64_t c) const {
    float v[V];
    load_vec_rw<V>(x + r * ldx + c, v);  // x may alias y
    apply_dropout<V>(d, static_cast<uint64_t>(r * cols + c), v);
    store_vec<V>(y + r * ldy + c, v);
  }
};

void dropout(Ctx& ctx, const Tensor& x, const DropoutSpec& spec, const Tensor& y, const char* op) {
  check_cuda_tensor(x, op);
  check_cuda_tensor(y, op);
  bool same = x.ndim == y.ndim;
  for (int i = 0; same && i < x.ndim; ++i) same = x.dim(i) == y.dim(i);
  HSTU_CHECK(same, op, ": shapes differ (", x.str(), ", ", y.str(), ")");
  const DropArgs d = drop_args(spec);
  const Rows2d rc = rows2d({&x, &y});
  dispatch_vec(can_vec8_2d(rc, {&x, &y}), [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    dispatch_io(x.dtype, op, [&](auto tx) {
      using TX = typename decltype(tx)::type;
      dispatch_io(y.dtype, op, [&](auto ty) {
        using TY = typename decltype(ty)::type;
        launch_ew2d<V>(ctx, rc,
                       DropoutOp<TX, TY>{static_cast<const TX*>(x.data), pitch(x, rc),
                                         static_cast<TY*>(y.data), pitch(y, rc), rc.cols, d});
      });
    });
  });
}

}  // namespace

size_t layernorm_bwd_scratch_bytes(int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return 0;
  const LnBwdPlan p = plan_ln_bwd(rows, cols, true);
  return arena_bytes(sizeof(float) * static_cast<size_t>(p.blocks * 2 * cols));
}

void layernorm_fwd(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                   const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  ln_fwd(ctx, x, Tensor(), w, b, eps, DropArgs{}, Tensor(), y, mean, rstd, "layernorm_fwd");
}

void layernorm_bwd(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dy, const Tensor& dx, bool accumulate_dx,
                   const Tensor& dw, const Tensor& db) {
  ln_bwd(ctx, x, Tensor(), w, Tensor(), mean, rstd, DropArgs{}, Tensor(), dy, dx, accumulate_dx,
         Tensor(), dw, db, "layernorm_bwd");
}

void ln_mul_dropout_fwd(Ctx& ctx, const Tensor& o, const Tensor& u, const Tensor& w,
                        const Tensor& b, float eps, const DropoutSpec& drop, const Tensor& keep,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  check_fused(o, u, "ln_mul_dropout_fwd");
  HSTU_CHECK(y.dtype == o.dtype, "ln_mul_dropout_fwd: y must have o's dtype, got ", y.str());
  ln_fwd(ctx, o, u, w, b, eps, drop_args(drop), keep, y, mean, rstd, "ln_mul_dropout_fwd");
}

void ln_mul_dropout_bwd(Ctx& ctx, const Tensor& o, const Tensor& u, const Tensor& w,
                        const Tensor& b, const Tensor& mean, const Tensor& rstd,
                        const DropoutSpec& drop, const Tensor& keep, const Tensor& dy,
                        const Tensor& do_, const Tensor& du, const Tensor& dw, const Tensor& db) {
  const char* op = "ln_mul_dropout_bwd";
  check_fused(o, u, op);
  check_cuda_tensor(du, op);
  check_shape(du, {o.dim(0), o.dim(1)}, op);
  for (const Tensor* t : {&dy, &do_, &du})
    HSTU_CHECK(t->dtype == o.dtype, op, ": dy, do_ and du must have o's dtype, got ", t->str());
  ln_bwd(ctx, o, u, w, b, mean, rstd, drop_args(drop), keep, dy, do_, false, du, dw, db, op);
}

void dropout_fwd(Ctx& ctx, const Tensor& x, const DropoutSpec& drop, const Tensor& y) {
  dropout(ctx, x, drop, y, "dropout_fwd");
}

void dropout_bwd(Ctx& ctx, const Tensor& dy, const DropoutSpec& drop, const Tensor& dx) {
  dropout(ctx, dy, drop, dx, "dropout_bwd");
}

}  // namespace hstu::cuda
