// sampled_softmax.cu — CUDA fused sampled-softmax retrieval loss: logits of the positive and R
// negatives from the table (fp32, or a copy in q's dtype: TR; normalised on the fly), logsumexp,
// loss, dq and the table gradient, in one kernel with one warp per token (two kernels: narrow
// rows have their own, see the NOTE of session 16).
//
// The one decision: the [T, R, D] gather is never materialised; each warp streams its token's
// candidate rows once (logits, and dq against a fixed reference, each group of rows re-read from
// L1 / L2 right after its logits; twice when the candidates come in tiles) and keeps q, the
// candidate ids and the per-candidate logit, <q, x> and norm in shared memory. The table gradient
// through the normalisation,
//   d_table[x_j] += A_j q - B_j x_j,  A_j = c_j / (n_j tau),  B_j = A_j <q, x_j> / n_j^2
// (B_j = 0 where the norm is clamped; c_j = loss_scale * (softmax_j - [j == 0])), is added with
// fp32 atomics — or, with ctx.deterministic, recorded per (token, candidate) and summed by the
// sorted scatter (sorted_scatter.cuh) in one pass: A_p q rows per pair plus the key term
// -(sum of B) x_k per row k, so the result is bit-reproducible. The loss is a per-token buffer
// reduced by one block in a fixed order, into the f64 loss[1] on the device.
//
// Any number of candidates: when the R + 1 candidates' per-candidate arrays do not fit in shared
// memory (RetrievalArgs.num_negatives = -1 draws one negative per query of the batch, so R grows
// with the batch), they are processed in tiles of kTile: the logits pass keeps an online
// (running max, rescaled sum) logsumexp per lane, and the gradient pass recomputes each tile's
// logits (the same arithmetic, so the same values) before its coefficients, accumulating dq in
// a per-warp fp32 row in shared memory. One tile (the common case) runs exactly as before.
//
// NOTE: the kernel is latency-bound (a warp per token, rows from L2), so both passes take
// kGroup candidates at a time: their rows are loaded before any is used (several loads in
// flight), and the logits pass reduces the group's 2 * kGroup partial sums with one transposing
// butterfly (2 * kGroup + log2(16 / kGroup) shuffles instead of 10 * kGroup). Rows are read
// 2 wide up to D = 64 (D even, 8-byte aligned rows: D = 50 is one pass of 25 lanes), 8 wide
// beyond (D % 8 == 0, 16-byte aligned), else one element at a time.
// NOTE (ML-1M HSTU-large step, 14.5k tokens x 129 candidates x 50, H200, ncu, session 14): this
// kernel took 364 us (910 MB of L2 traffic); a one-pass variant of the deterministic gradient
// (dq accumulated with a running max during the logits pass, each row read once) took 356 us,
// so the row reads are not what bounds it, and the variant was not kept. (Session 16: the
// per-candidate `touched` byte stores, 1.87M a step into 3.7 KB of flags, were what bounded the
// narrow kernel below; mark_touched.)
// NOTE (session 15, H200): a dense form for small catalogues (logits q e^T for all [T, V] by a
// cuBLASLt GEMM, a coefficient matrix over it, dq and the table gradient as two more GEMMs;
// branch ssdense) was correct but slower: ML-1M step 2.89-2.99 vs 2.70-2.73 ms, its coefficient
// kernel 342 us and its three K = 56 / N = 56 GEMMs 360 us a step (docs/BENCHMARKS.md).
// NOTE (session 15, H200): the 2-wide kernel uses 96 registers (2 blocks of 256 an SM); compiled
// for 3 (80 registers) or 4 blocks (64, 52 bytes of spills) the ML-1M step measured the same
// (2.60-2.63 ms, all three), so occupancy alone does not bound it.
// NOTE (session 16): narrow rows (2-wide, 2 <= D <= 64, one tile) take
// sampled_softmax_narrow_kernel instead (described above it; HSTU_SS_KERNEL=warp keeps this kernel
// everywhere, the A/B switch). ncu had this kernel issue-bound at the ML-1M shape: 367 us of a 2.52
// ms step, 104.5 warp-instructions per (token, candidate), 0.54 issued per cycle per scheduler, 25
// of 32 lanes busy at D = 50, L2 910 MB at 25% of peak memory throughput. The narrow kernel puts 8
// candidates x 4 column quarters on a warp, keeps q in registers, reads each row once (dq
// accumulated during the logits pass against a fixed bound: no second pass) and uses MUFU rsqrt /
// ex2 in the loop. SASS (sm_90a, bf16, D = 50): its row loop is 298 instructions per 24 candidates
// (126 FFMA, 21 LDG.64, 12 SHFL), ~12.4 per candidate; this kernel's logits group loop is 416 per
// group of 8, and nvcc left warp_sum_many's butterfly in it as a runtime loop of dynamically
// indexed selects (139 instructions a trip), plus ~145 per group in the gradient loop: ~100 per
// candidate in all, as ncu counted. With the coefficient step and the per-token work the narrow
// kernel comes to ~18 per candidate (estimate 33M warp-instructions, ~50-65 us). Measured (H200,
// ncu, real clocks): 40M warp-instructions, 276-284 us while every candidate stored its touched
// flag, 126 us with mark_touched's read first (ML-1M step 2.40 -> 2.32 -> 2.17 ms, both A/Bs in
// one call each); it now waits on its row gathers (long scoreboard 7.6 cycles an instruction, L1
// hit rate 52%). 113 registers at D = 50 (2 blocks of 256 an SM, as this kernel's 96), no
// spills.
// NOTE (session 17, H200, bench-large: 81k tokens x 129 candidates x D 1024, bf16 q): the two
// passes over the rows read 68.8 GB from DRAM a step at a 9% L2 hit rate (a token's 516 KB of
// rows were evicted before its second pass), 16.06 ms; the one-pass form (re-reading each group
// of 4 rows right after its logits) 11.40 ms at a 40% L2 hit rate; the step 116.3 -> 111.3 ms
// (HSTU_SS_ONEPASS=0 / default, alternating in one call).
// NOTE (session 22, H200, bench-large): rows from the table's bf16 copy (TR = bf16; the model
// casts the table each step, RetrievalArgs.loss_rows_dtype) took the loss phase (this kernel, the
// sort and the piece sum) 17.3 -> 11.8 ms a step. A group of 8 rows for 16-bit copies (the same
// bytes in flight as 4 fp32 rows) spilled 104 bytes at 128 registers; not tried on a GPU.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ops/cuda/common.cuh"
#include "ops/cuda/sampled_softmax.h"
#include "ops/cuda/sorted_scatter.cuh"

namespace hstu::cuda {
namespace {

constexpr float kMaskedLogit = -5e4f;  // logit of a negative that collides with the positive
constexpr unsigned kFull = 0xffffffffu;

// Candidates whose rows are loaded together: 4 rows of 8 columns, or 8 narrower ones per lane.
template <int V>
constexpr int kGroup = V >= 8 ? 4 : 8;

// Candidates per tile when R + 1 do not fit in shared memory (16 KiB of per-candidate arrays
// per warp: several warps per block and per SM).
constexpr int64_t kTile = 1024;
// The one-pass dq of both kernels (the narrow kernel's comment): weights e^(l - ref) against a
// reference more than this above the largest logit would lose what matters, so the pass is then
// repeated with ref = that logit.
constexpr float kRefMargin = 60.0f;  // e^-60: weights further below the max do not matter

// Per-warp shared memory, in floats: q[dp], (acc: the dq accumulator [dp]; the warp kernel has it
// whenever it computes dq), then logit (later A_j), dot (later B_j), norm and candidate id,
// [pad4(tile)] each; every array starts 16-byte aligned for vector access.
__host__ __device__ constexpr int64_t pad4(int64_t n) {
  return (n + 3) / 4 * 4;
}
__host__ __device__ constexpr int64_t warp_smem_floats(int64_t d, int64_t tile, bool acc) {
  return pad4(d) * (acc ? 2 : 1) + 4 * pad4(tile);
}

// ---- V-wide access (V = 8, 2 or 1); p is aligned to V elements (16 bytes at most) ----------
// Global rows: common.cuh's load_vec / store_vec. Shared memory (per-warp arrays are 16-byte
// aligned, offsets multiples of V):
template <int V>
__device__ __forceinline__ void lds_vec(const float* p, float (&out)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V / 4; ++i) {
      const float4 r = reinterpret_cast<const float4*>(p)[i];
      out[4 * i] = r.x, out[4 * i + 1] = r.y, out[4 * i + 2] = r.z, out[4 * i + 3] = r.w;
    }
  } else if constexpr (V == 2) {
    const float2 r = *reinterpret_cast<const float2*>(p);
    out[0] = r.x, out[1] = r.y;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = p[i];
  }
}
template <int V>
__device__ __forceinline__ void sts_vec(float* p, const float (&in)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V / 4; ++i)
      reinterpret_cast<float4*>(p)[i] =
          make_float4(in[4 * i], in[4 * i + 1], in[4 * i + 2], in[4 * i + 3]);
  } else if constexpr (V == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(in[0], in[1]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = in[i];
  }
}

// dst[0:V] += v with fp32 atomics (one 8-byte vector atomic for V = 2 on sm_90).
// The V-wide chunks at column c of G rows, all loads issued before any is used.
template <int V, int G, typename TR>
__device__ __forceinline__ void load_group(const TR* const (&rows)[G], int64_t c,
                                           float (&x)[G][V]) {
#pragma unroll
  for (int u = 0; u < G; ++u) load_vec<V>(rows[u] + c, x[u]);
}
template <int V>
__device__ __forceinline__ void sts_zero(float* p) {
  const float z[V] = {};
  sts_vec<V>(p, z);
}
template <int V>
__device__ __forceinline__ void atomic_add_v(float* dst, const float (&v)[V]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kPair = V == 2;
#else
  constexpr bool kPair = false;
#endif
  if constexpr (kPair) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2*>(dst), make_float2(v[0], v[1]));
#endif
  } else {
    atomic_add_vec<V>(dst, v);
  }
}

// Sums each of v[0..N) over the warp with a transposing butterfly: at each step a lane keeps
// half of its values and sends the other half to its partner, so N values cost N - 1 + log2(32/N)
// shuffles. Returns the sum of value lane / (32 / N) (each in a fixed order: deterministic).
template <int N>
__device__ __forceinline__ float warp_sum_many(float (&v)[N], int lane) {
  static_assert(N >= 2 && N <= 32 && (N & (N - 1)) == 0, "N: a power of two up to 32");
#pragma unroll
  for (int n = N, o = 16; n > 1; n >>= 1, o >>= 1) {
    const bool upper = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? v[i] : v[i + n / 2];
      const float keep = upper ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(kFull, send, o);
    }
  }
  float s = v[0];
#pragma unroll
  for (int o = 16 / N; o > 0; o >>= 1) s += __shfl_xor_sync(kFull, s, o);
  return s;
}

struct SsArgs {
  const void* q = nullptr;  // [T, D], dtype TQ
  int64_t ldq = 0;
  const int32_t* targets = nullptr;  // [T]
  const int32_t* neg = nullptr;      // [T, R]
  int64_t ldn = 0;
  int32_t r = 0;
  int32_t tile = 0;             // candidates per shared-memory tile (R + 1: one tile)
  bool one_pass = true;         // one tile with dq: dq during the logits pass (the warp kernel)
  const void* table = nullptr;  // [V, D], dtype TR: f32, or q's dtype (a low-precision copy)
  int64_t ldt = 0;
  void* dq = nullptr;  // [T, D], dtype TQ; null: loss only
  int64_t lddq = 0;
  float* d_table = nullptr;  // atomics path
  int64_t lddt = 0;
  int32_t ldt32 = 0, lddt32 = 0;  // the narrow kernel's 32-bit row pitches (the host checks)
  uint8_t* touched = nullptr;
  // Deterministic path: per (token, candidate) records [T * (R+1)] instead of atomics.
  int32_t* pair_key = nullptr;
  float* pair_a = nullptr;
  float* pair_b = nullptr;
  float* token_loss = nullptr;  // [T]
  int64_t t = 0, d = 0;
  float tau = 1.0f, eps = 0.0f, loss_scale = 1.0f;
};

// touched[id] = 1. The flags are few (one per table row) and every token sets ~R + 1 of them, so
// after the first tokens nearly every store would rewrite a 1 into the same few L2 lines from all
// SMs; a load (L1 / L2 hit) skips those. Other SMs' stale copies only cause a redundant store of
// the same value. (Session 16, H200, ML-1M step: storing every flag 2.29-2.30 ms, this 2.17.)
__device__ __forceinline__ void mark_touched(const SsArgs& a, int32_t id) {
  if (a.touched[id] == 0) a.touched[id] = 1;
}

// Records pair p's id and coefficients (the deterministic path's pair_key / pair_a / pair_b)
// and keeps A_j, B_j in the warp's shared arrays (lg_j, dot_j) for the passes that follow.
__device__ __forceinline__ void put_coefs(const SsArgs& a, int64_t p, int32_t id, float ca,
                                          float cb, float& lg_j, float& dot_j) {
  if (a.pair_key) {
    a.pair_key[p] = id;
    a.pair_a[p] = ca;
    a.pair_b[p] = cb;
  }
  lg_j = ca;
  dot_j = cb;
}

template <int V, typename TQ, typename TR>
__global__ void __launch_bounds__(256) sampled_softmax_kernel(SsArgs a) {
  const TR* const table = static_cast<const TR*>(a.table);
  constexpr int G = kGroup<V>;
  constexpr int kSpan = 32 / G;  // lanes holding one candidate's sums after warp_sum_many
  extern __shared__ __align__(16) float smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int nj = a.r + 1, tile = a.tile;
  const bool tiled = tile < nj;
  // One tile with dq: dq accumulated during the logits pass (one read of the rows; below).
  const bool one_pass = !tiled && a.dq != nullptr && a.one_pass;
  const bool acc = tiled || one_pass;
  const int64_t d = a.d, tp = pad4(tile);
  float* qs = smem + warp * warp_smem_floats(d, tile, acc);
  float* gs = qs + pad4(d);              // tiled: dq of the tiles so far; one pass: S (fp32)
  float* lg = gs + (acc ? pad4(d) : 0);  // logit; A_j once the softmax is known
  float* dots = lg + tp;                 // <q, x_j>; then B_j
  float* nrm = dots + tp;
  int32_t* ids = reinterpret_cast<int32_t*>(nrm + tp);
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + warp;
  if (t >= a.t) return;  // whole warps leave; no block-wide barrier follows
  const int32_t tgt = a.targets[t];
  TQ* dq = a.dq ? static_cast<TQ*>(a.dq) + t * a.lddq : nullptr;
  if (tgt == 0) {  // unsupervised token: no loss, zero dq, inert records
    if (lane == 0) a.token_loss[t] = 0.0f;
    if (dq) {
      const float zero[V] = {};
      for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V)
        store_vec<V>(dq + c, zero);
    }
    if (a.pair_key)
      for (int j = lane; j < nj; j += 32) {
        a.pair_key[t * nj + j] = 0;
        a.pair_a[t * nj + j] = 0.0f;
        a.pair_b[t * nj + j] = 0.0f;
      }
    return;
  }
  const TQ* q = static_cast<const TQ*>(a.q) + t * a.ldq;
  float qq = 0.0f;  // ||q||^2 (the one-pass reference)
  for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V) {
    float v[V];
    load_vec<V>(q + c, v);
    sts_vec<V>(qs + c, v);
#pragma unroll
    for (int k = 0; k < V; ++k) qq += v[k] * v[k];
    if (one_pass) sts_zero<V>(gs + c);
  }
  const int32_t* neg = a.neg + t * a.ldn;

  // One pass (a single tile with dq; the narrow kernel's scheme, see its comment): S = sum over
  // live j > 0 of e^(l_j - ref) x_j / n_j in gs, each group's rows read again right after its
  // logits (from L1 / L2: the group's 4 rows were just loaded), so the table is streamed from
  // memory once, not twice; dq = (loss_scale / tau) e^(ref - lse) S + A_0 x_0 at the end.
  // S += w_u x_u over this lane's columns for the G rows (w_u the same in every lane).
  const auto add_rows = [&](const TR* const(&rows)[G], const float(&w)[G]) {
    for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V) {
      float sv[V], x[G][V];
      lds_vec<V>(gs + c, sv);
      load_group<V>(rows, c, x);
#pragma unroll
      for (int u = 0; u < G; ++u)
#pragma unroll
        for (int k = 0; k < V; ++k) sv[k] += w[u] * x[u][k];
      sts_vec<V>(gs + c, sv);
    }
  };
  float ref = sqrtf(warp_sum(qq)) / a.tau;  // >= every logit (Cauchy-Schwarz; n_j >= ||x_j||)

  // Logits of candidates base .. base + n - 1 into lg / dots / nrm / ids [0, n), G at a time.
  // Rows past the last candidate repeat the positive's (valid addresses, results dropped); a
  // masked negative's row is the positive's too.
  const auto tile_logits = [&](int base, int n) {
    for (int j = lane; j < n; j += 32) ids[j] = base + j == 0 ? tgt : neg[base + j - 1];
    __syncwarp();
    for (int j0 = 0; j0 < n; j0 += G) {
      const TR* rows[G];
#pragma unroll
      for (int u = 0; u < G; ++u) rows[u] = table + (j0 + u < n ? ids[j0 + u] : tgt) * a.ldt;
      float part[2 * G] = {};  // <q, x_u> at 2u, ||x_u||^2 at 2u + 1, over this lane's columns
      for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V) {
        float qv[V], x[G][V];
        lds_vec<V>(qs + c, qv);
        load_group<V>(rows, c, x);
#pragma unroll
        for (int u = 0; u < G; ++u)
#pragma unroll
          for (int k = 0; k < V; ++k) {
            part[2 * u] += qv[k] * x[u][k];
            part[2 * u + 1] += x[u][k] * x[u][k];
          }
      }
      // Candidate u's dot lands in lanes [u * kSpan, u * kSpan + kSpan / 2), its squared norm in
      // the next kSpan / 2 lanes.
      const float sum = warp_sum_many<2 * G>(part, lane);
      const float other = __shfl_xor_sync(kFull, sum, kSpan / 2);
      const int j = j0 + lane / kSpan;
      float wl = 0.0f;  // one pass: candidate j's weight e^(l_j - ref) / n_j (0: not in S)
      if (lane % kSpan == 0 && j < n) {
        const float nv = fmaxf(sqrtf(other), a.eps);
        const bool live = base + j == 0 || ids[j] != tgt;
        const float l = live ? sum / (nv * a.tau) : kMaskedLogit;
        lg[j] = l;
        dots[j] = sum;
        nrm[j] = nv;
        if (live && base + j > 0) wl = expf(l - ref) / nv;
      }
      if (one_pass) {
        float w[G];
#pragma unroll
        for (int u = 0; u < G; ++u) w[u] = __shfl_sync(kFull, wl, u * kSpan);
        add_rows(rows, w);
      }
    }
    __syncwarp();
  };

  float lse, pos_logit;
  if (!tiled) {
    tile_logits(0, nj);
    float mx = -INFINITY;
    for (int j = lane; j < nj; j += 32) mx = fmaxf(mx, lg[j]);
    mx = warp_max(mx);
    if (one_pass && mx < ref - kRefMargin) {  // far below the bound: S again against the max
      ref = mx;
      for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V) sts_zero<V>(gs + c);
      for (int j0 = 0; j0 < nj; j0 += G) {
        const TR* rows[G];
        float w[G];
#pragma unroll
        for (int u = 0; u < G; ++u) {
          const int j = j0 + u;
          const bool in = j > 0 && j < nj && ids[j] != tgt;  // live negatives
          rows[u] = table + (in ? ids[j] : tgt) * a.ldt;
          w[u] = in ? expf(lg[j] - ref) / nrm[j] : 0.0f;
        }
        add_rows(rows, w);
      }
    }
    float se = 0.0f;
    for (int j = lane; j < nj; j += 32) se += expf(lg[j] - mx);
    lse = mx + logf(warp_sum(se));
    pos_logit = lg[0];
  } else {
    // Online logsumexp: each lane keeps the max m of its candidates and sum exp(l - m).
    float m = -INFINITY, se = 0.0f;
    pos_logit = 0.0f;
    for (int base = 0; base < nj; base += tile) {
      const int n = min(tile, nj - base);
      tile_logits(base, n);
      if (base == 0) pos_logit = lg[0];
      for (int j = lane; j < n; j += 32) {
        const float x = lg[j];
        if (x > m) {
          se = se * expf(m - x) + 1.0f;
          m = x;
        } else {
          se += expf(x - m);
        }
      }
      __syncwarp();  // every lane has read this tile before the next one overwrites it
    }
    const float mx = warp_max(m);
    lse = mx + logf(warp_sum(m == -INFINITY ? 0.0f : se * expf(m - mx)));
  }
  if (lane == 0) a.token_loss[t] = lse - pos_logit;
  if (!dq) return;

  for (int base = 0; base < nj; base += tile) {
    const int n = min(tile, nj - base);
    if (tiled) tile_logits(base, n);  // the same arithmetic as the logits pass: the same values
    // Gradient coefficients, one candidate per lane (each lane rewrites only its own entries).
    for (int j = lane; j < n; j += 32) {
      const int jg = base + j;
      const int32_t id = ids[j];
      const bool live = jg == 0 || id != tgt;
      float ca = 0.0f, cb = 0.0f;
      if (live) {
        const float cj = a.loss_scale * (expf(lg[j] - lse) - (jg == 0 ? 1.0f : 0.0f));
        ca = cj / (nrm[j] * a.tau);
        cb = nrm[j] > a.eps ? ca * dots[j] / (nrm[j] * nrm[j]) : 0.0f;
        mark_touched(a, id);
      }
      put_coefs(a, t * nj + jg, id, ca, cb, lg[j], dots[j]);
    }
    __syncwarp();

    if (one_pass) {  // dq = (loss_scale / tau) e^(ref - lse) S + A_0 x_0
      const float c1 = a.loss_scale / a.tau * expf(ref - lse), c0 = lg[0];
      const TR* x0 = table + tgt * a.ldt;
      for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V) {
        float sv[V], x[V];
        lds_vec<V>(gs + c, sv);
        load_vec<V>(x0 + c, x);
#pragma unroll
        for (int k = 0; k < V; ++k) sv[k] = c1 * sv[k] + c0 * x[k];
        store_vec<V>(dq + c, sv);
      }
      if (!a.d_table) return;
    }
    // Tiled: dq = sum_j A_j x_j in candidate order (each lane owns its columns: no shared
    // accumulator; across tiles the running sum waits in gs). With atomics d_table[x_j] +=
    // A_j q - B_j x_j. G candidates' rows in flight.
    const bool last = base + n == nj;
    for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V) {
      float qv[V], g[V] = {};
      lds_vec<V>(qs + c, qv);
      if (base > 0) lds_vec<V>(gs + c, g);
      for (int j0 = 0; j0 < n; j0 += G) {
        float x[G][V];
#pragma unroll
        for (int u = 0; u < G; ++u)
          load_vec<V>(table + (j0 + u < n ? ids[j0 + u] : tgt) * a.ldt + c, x[u]);
        if (!one_pass)
#pragma unroll
          for (int u = 0; u < G; ++u) {
            const float ca = j0 + u < n ? lg[j0 + u] : 0.0f;  // masked: 0
#pragma unroll
            for (int k = 0; k < V; ++k) g[k] += ca * x[u][k];
          }
        if (!a.d_table) continue;
#pragma unroll
        for (int u = 0; u < G; ++u) {
          const int j = j0 + u;
          if (j >= n || (base + j > 0 && ids[j] == tgt)) continue;  // past the end, or masked
          const float ca = lg[j], cb = dots[j];
          float dx[V];
#pragma unroll
          for (int k = 0; k < V; ++k) dx[k] = ca * qv[k] - cb * x[u][k];
          atomic_add_v<V>(a.d_table + ids[j] * a.lddt + c, dx);
        }
      }
      if (one_pass) continue;  // dq stored above
      if (last) {
        store_vec<V>(dq + c, g);
      } else {
        sts_vec<V>(gs + c, g);
      }
    }
    __syncwarp();  // the next tile overwrites ids / lg / dots
  }
}

// ---- the narrow-row kernel (the default for 2 <= D <= 64, 2-wide rows, one tile) -------------
// Lanes = (candidate slot, column quarter): lane = 4 * slot + k, 8 candidates per warp step, and
// lane k of every slot holds the float2 chunks at columns 8 i + 2 k, i < NC = ceil(D / 8)
// (D = 50: 7 chunks, the last one only in lane k = 0). q's chunks stay in registers for the whole
// token; a candidate's <q, x> and ||x||^2 are reduced over its 4 lanes with 2 xor-shuffle levels
// (every lane of the slot gets both sums, bit-identical). kNarrowSteps steps (24 candidates) load
// their rows before any is used: 21 8-byte loads in flight per lane at D = 50.
// One pass over the rows: the logits go to shared memory as in the warp kernel, and dq is
// accumulated at the same time against a fixed reference ref >= every logit:
//   S = sum over live j > 0 of exp(l_j - ref) x_j / n_j,
//   dq = (loss_scale / tau) e^(ref - lse) S + A_0 x_0
// (A_0 = loss_scale (p_0 - 1) / (n_0 tau) as in the warp kernel, so p_0 x_0 / n_0 never cancels
// against x_0 / n_0 inside the vector). ref = ||q|| / tau bounds every logit (Cauchy-Schwarz,
// n_j >= ||x_j||), so nothing overflows; should the largest logit lie more than kRefMargin below
// it, the pass is repeated with ref = that max (a second read of the rows, rare: tau <~ ||q|| /
// 40 with typical rows), so no weight that matters underflows. Each lane sums its own slot's
// candidates (slot, slot + 8, ...) in order; the 8 slots are summed at the end by xor shuffles
// (4, 8, 16) in a fixed order: deterministic, though not the warp kernel's summation order (dq
// differs from it in the last bits, within the tests' tolerance of the CPU reference). The
// coefficient step (records, touched) is the warp kernel's, one candidate per lane; the atomic
// d_table path reads the rows a second time.
constexpr int kNarrowLanes = 4;                  // lanes per candidate
constexpr int kNarrowSlots = 32 / kNarrowLanes;  // candidates per warp step
constexpr int kNarrowSteps = 3;                  // steps whose rows are loaded together
constexpr int kNarrowSpan = kNarrowSlots * kNarrowSteps;

// MUFU approximations without the denormal fix-ups of rsqrtf / __expf (inputs and results
// flushed to zero): ~2 ulp relative.
__device__ __forceinline__ float rsqrt_ftz(float x) {
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float exp_ftz(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * 1.4426950408889634f));
  return r;
}

// The candidate's 2-wide chunks at columns 8 i + col (col = 2 k); the last chunk only where
// last_ok (columns past D read nothing and are zero).
template <int NC, typename T>
__device__ __forceinline__ void load_chunks(const T* row, bool last_ok, float (&x)[NC][2]) {
#pragma unroll
  for (int i = 0; i < NC; ++i) {
    if (i < NC - 1 || last_ok) {
      load_vec<2>(row + 8 * i, x[i]);
    } else {
      x[i][0] = 0.0f, x[i][1] = 0.0f;
    }
  }
}

template <int NC, typename TQ, typename TR>
__global__ void __launch_bounds__(256) sampled_softmax_narrow_kernel(SsArgs a) {
  const TR* const table = static_cast<const TR*>(a.table);
  extern __shared__ __align__(16) float smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int slot = lane / kNarrowLanes, col = 2 * (lane % kNarrowLanes);
  const int nj = a.r + 1, d = static_cast<int>(a.d);
  const int tp = static_cast<int>(pad4(nj));
  // The warp kernel's layout (q's slot unused): logit (later A_j), dot (later B_j), 1 / n_j (the
  // warp kernel keeps n_j there), id.
  float* lg = smem + warp * warp_smem_floats(a.d, nj, false) + pad4(a.d);
  float* dots = lg + tp;
  float* rnrm = dots + tp;
  int32_t* ids = reinterpret_cast<int32_t*>(rnrm + tp);
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + warp;
  if (t >= a.t) return;
  const int32_t tgt = a.targets[t];
  TQ* dq = a.dq ? static_cast<TQ*>(a.dq) + t * a.lddq : nullptr;
  if (tgt == 0) {  // unsupervised token: no loss, zero dq, inert records
    if (lane == 0) a.token_loss[t] = 0.0f;
    if (dq) {
      const float zero[2] = {};
      for (int c = 2 * lane; c < d; c += 64) store_vec<2>(dq + c, zero);
    }
    if (a.pair_key)
      for (int j = lane; j < nj; j += 32) {
        a.pair_key[t * nj + j] = 0;
        a.pair_a[t * nj + j] = 0.0f;
        a.pair_b[t * nj + j] = 0.0f;
      }
    return;
  }
  const int32_t* neg = a.neg + t * a.ldn;
  for (int j = lane; j < nj; j += 32) ids[j] = j == 0 ? tgt : neg[j - 1];
  const bool last_ok = 8 * (NC - 1) + col < d;
  float qv[NC][2];
  load_chunks<NC>(static_cast<const TQ*>(a.q) + t * a.ldq + col, last_ok, qv);
  float qq = 0.0f;
#pragma unroll
  for (int i = 0; i < NC; ++i) qq += qv[i][0] * qv[i][0] + qv[i][1] * qv[i][1];
  qq += __shfl_xor_sync(kFull, qq, 1);
  qq += __shfl_xor_sync(kFull, qq, 2);  // the same bits in every slot
  const float inv_tau = 1.0f / a.tau, inv_eps = 1.0f / a.eps;
  const bool grad = dq != nullptr;
  const int ldt = a.ldt32;
  __syncwarp();

  // One pass over the rows: logits into lg / dots / rnrm (store), the running max of the live
  // logits, and this lane's dq partial s against ref (also without dq: no branch in the loop).
  // NOTE: 1 / n_j and n_j from one rsqrt, the weights from ex2 (MUFU, ~2 ulp; the exponent's
  // rounding adds ~6e-8 |l - ref| relative): far inside the tests' tolerances, and no slow-path
  // branches in the loop.
  float s[NC][2];
  float* my_lg = lg + slot;
  // Candidates jb + 8 u + slot, u < U: rows loaded first (U * NC loads in flight per lane).
  const auto steps = [&](auto ucount, int jb, float ref, bool store, float& mx) {
    constexpr int U = decltype(ucount)::value;
    int32_t id[U];
    float x[U][NC][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = jb + u * kNarrowSlots + slot;
      id[u] = j < nj ? ids[j] : tgt;  // past the end: the positive's row, dropped
      load_chunks<NC>(table + (id[u] * ldt + col), last_ok, x[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = jb + u * kNarrowSlots + slot;
      float dot = 0.0f, nn = 0.0f;
#pragma unroll
      for (int i = 0; i < NC; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          dot += qv[i][e] * x[u][i][e];
          nn += x[u][i][e] * x[u][i][e];
        }
      dot += __shfl_xor_sync(kFull, dot, 1);
      nn += __shfl_xor_sync(kFull, nn, 1);
      dot += __shfl_xor_sync(kFull, dot, 2);
      nn += __shfl_xor_sync(kFull, nn, 2);
      // 1 / n_j = 1 / max(||x_j||, eps) (nn clamped to a normal number: rs finite). The same
      // value scales the dq weights here and A_j, B_j in the coefficient step.
      const float inv_n = fminf(rsqrt_ftz(fmaxf(nn, 1e-36f)), inv_eps);
      const bool in = j < nj;
      const bool live = in && (j == 0 || id[u] != tgt);
      const float l = live ? dot * inv_n * inv_tau : kMaskedLogit;
      if (live) mx = fmaxf(mx, l);
      if (store && in && col == 0) {
        float* p = my_lg + jb + u * kNarrowSlots;
        p[0] = l;
        p[tp] = dot;
        p[2 * tp] = inv_n;
      }
      const float w = live && j > 0 ? exp_ftz(l - ref) * inv_n : 0.0f;  // j = 0: at the end
#pragma unroll
      for (int i = 0; i < NC; ++i) {
        s[i][0] += w * x[u][i][0];
        s[i][1] += w * x[u][i][1];
      }
    }
  };
  const auto pass = [&](float ref, bool store) {
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < NC; ++i) s[i][0] = 0.0f, s[i][1] = 0.0f;
    int jb = 0;
    for (; jb + (kNarrowSteps - 1) * kNarrowSlots < nj; jb += kNarrowSpan)
      steps(std::integral_constant<int, kNarrowSteps>{}, jb, ref, store, mx);
    if (jb + kNarrowSlots < nj) {  // 9 to 16 left
      steps(std::integral_constant<int, 2>{}, jb, ref, store, mx);
    } else if (jb < nj) {  // 8 or fewer
      steps(std::integral_constant<int, 1>{}, jb, ref, store, mx);
    }
    return warp_max(mx);
  };
  float ref = sqrtf(qq) * inv_tau;  // >= every logit (Cauchy-Schwarz; n_j >= ||x_j||)
  const float mx = pass(ref, true);
  if (grad && mx < ref - kRefMargin) {  // far below the bound: weights relative to the max
    ref = mx;
    pass(ref, false);
  }
  __syncwarp();
  float se = 0.0f;
  for (int j = lane; j < nj; j += 32) se += expf(lg[j] - mx);
  const float lse = mx + logf(warp_sum(se));
  if (lane == 0) a.token_loss[t] = lse - lg[0];
  if (!grad) return;

  // Gradient coefficients, one candidate per lane (as the warp kernel, without its divisions).
  for (int j = lane; j < nj; j += 32) {
    const int32_t id = ids[j];
    const bool live = j == 0 || id != tgt;
    float ca = 0.0f, cb = 0.0f;
    if (live) {
      const float cj = a.loss_scale * (expf(lg[j] - lse) - (j == 0 ? 1.0f : 0.0f));
      const float inv_n = rnrm[j];  // from the pass: the dq weights' 1 / n_j
      ca = cj * inv_n * inv_tau;
      cb = inv_n < inv_eps ? ca * dots[j] * inv_n * inv_n : 0.0f;  // 1 / eps: clamped, B_j = 0
      mark_touched(a, id);
    }
    put_coefs(a, t * nj + j, id, ca, cb, lg[j], dots[j]);
  }

  // dq: the 8 slots' partials summed (xor 4, 8, 16: a fixed order), plus the positive's term
  // A_0 x_0 (kept out of s: no cancellation of p_0 x_0 / n_0 against x_0 / n_0 in the vector).
#pragma unroll
  for (int i = 0; i < NC; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int o = kNarrowLanes; o < 32; o *= 2) s[i][e] += __shfl_xor_sync(kFull, s[i][e], o);
  __syncwarp();
  if (slot == 0) {
    const float c1 = a.loss_scale * inv_tau * expf(ref - lse);
    const float c0 = lg[0];  // A_0 = loss_scale (p_0 - 1) / (n_0 tau), as the warp kernel
    float x0[NC][2];
    load_chunks<NC>(table + (tgt * ldt + col), last_ok, x0);
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      if (i < NC - 1 || last_ok) {
        const float g[2] = {c1 * s[i][0] + c0 * x0[i][0], c1 * s[i][1] + c0 * x0[i][1]};
        store_vec<2>(dq + 8 * i + col, g);
      }
    }
  }
  if (!a.d_table) return;

  // Atomics path: d_table[x_j] += A_j q - B_j x_j, the rows read again (live candidates only).
  const int lddt = a.lddt32;
  for (int j = slot; j < nj; j += kNarrowSlots) {
    const int32_t id = ids[j];
    if (j > 0 && id == tgt) continue;  // masked
    const float ca = lg[j], cb = dots[j];
    float x[NC][2];
    load_chunks<NC>(table + (id * ldt + col), last_ok, x);
    float* dst = a.d_table + (id * lddt + col);
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      if (i < NC - 1 || last_ok) {
        const float dx[2] = {ca * qv[i][0] - cb * x[i][0], ca * qv[i][1] - cb * x[i][1]};
        atomic_add_v<2>(dst + 8 * i, dx);
      }
    }
  }
}

// loss[0] = scale * sum of token_loss, summed in a fixed order by one block.
__global__ void __launch_bounds__(1024)
    loss_sum_kernel(const float* token_loss, int64_t t, double scale, double* loss) {
  __shared__ double part[1024];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < t; i += blockDim.x) s += token_loss[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = scale * part[0];
}

// Deterministic scatter source: A_p * q[token of p] per pair, plus the key term
// (sum over the key's pairs of -B_p) * table[key] (one pass for both halves of the gradient).
template <typename TQ, typename TR>
struct PairRows {
  const TQ* q;
  int64_t ldq;
  int32_t nj;
  const float* coef_a;
  const float* coef_b;
  const TR* table;
  int64_t ldt;
  __device__ const TQ* row(int32_t p) const { return q + (p / nj) * ldq; }
  __device__ float coef(int32_t p) const { return coef_a[p]; }
  __device__ float key_coef(int32_t p) const { return -coef_b[p]; }
  __device__ const TR* key_row(int32_t key) const { return table + key * ldt; }
};
static_assert(sorted_scatter::HasKeyTerm<PairRows<float, float>>);

// True when 2-wide access works on every listed tensor of `cols` columns (rows and base aligned
// to two elements).
bool can_vec2(int64_t cols, std::initializer_list<const Tensor*> ts) {
  if (cols % 2 != 0) return false;
  for (const Tensor* t : ts)
    if (!t->empty() && vec_alignment(*t) < static_cast<int>(2 * dtype_size(t->dtype))) return false;
  return true;
}

// HSTU_SS_KERNEL=warp: the warp-per-token kernel everywhere (the A/B switch; read at every call,
// host only). Otherwise the narrow kernel where it applies (`narrow` in sampled_softmax).
bool ss_kernel_warp() {
  const char* v = std::getenv("HSTU_SS_KERNEL");
  return v && std::strcmp(v, "warp") == 0;
}
// HSTU_SS_ONEPASS=0: the warp kernel reads a single tile's rows twice (logits, then dq), as before
// session 17 (the A/B switch; read at every call, host only).
bool ss_one_pass() {
  const char* v = std::getenv("HSTU_SS_ONEPASS");
  return !(v && std::strcmp(v, "0") == 0);
}

// Calls f(std::integral_constant<int, NC>{}) with NC = ceil(d / 8) in 1..8 (8 beyond).
template <int NC = 1, typename F>
void dispatch_chunks(int64_t d, F&& f) {
  if constexpr (NC == 8) {
    f(std::integral_constant<int, 8>{});
  } else if ((d + 7) / 8 == NC) {
    f(std::integral_constant<int, NC>{});
  } else {
    dispatch_chunks<NC + 1>(d, f);
  }
}

// Calls f(std::integral_constant<int, V>{}) with V = 8, 2 or 1.
template <typename F>
decltype(auto) dispatch_width(int width, F&& f) {
  if (width == 8) return f(std::integral_constant<int, 8>{});
  if (width == 2) return f(std::integral_constant<int, 2>{});
  return f(std::integral_constant<int, 1>{});
}

}  // namespace

size_t sampled_softmax_scratch_bytes(int64_t tokens, int64_t negatives, int64_t cols, bool det) {
  const int64_t pairs = tokens * (negatives + 1);
  size_t bytes = arena_bytes(sizeof(float) * static_cast<size_t>(tokens));
  if (det)
    bytes += 3 * arena_bytes(4 * static_cast<size_t>(pairs)) +
             sorted_scatter::sort_scratch_bytes(pairs) +
             sorted_scatter::row_sum_scratch_bytes(pairs, cols);
  return bytes;
}

void sampled_softmax(Ctx& ctx, const SampledSoftmaxSpec& spec, const Tensor& q,
                     const Tensor& targets, const Tensor& neg_ids, const Tensor& table,
                     const Tensor& loss, const Tensor& dq, const Tensor& d_table,
                     const Tensor& touched) {
  const char* op = "sampled_softmax";
  check_cuda_tensor(q, op);
  check_shape(q, {-1, -1}, "sampled_softmax q");
  const int64_t t = q.dim(0), d = q.dim(1);
  check_cuda_tensor(table, op);
  check_shape(table, {-1, d}, "sampled_softmax table");
  HSTU_CHECK(table.dtype == DType::kF32 || table.dtype == q.dtype,
             "sampled_softmax: the table must be f32 or q's dtype (", dtype_name(q.dtype),
             "), got ", table.str());
  const int64_t v = table.dim(0);
  check_cuda_tensor(targets, op);
  check_shape(targets, {t}, "sampled_softmax targets");
  check_cuda_tensor(neg_ids, op);
  check_shape(neg_ids, {t, -1}, "sampled_softmax neg_ids");
  HSTU_CHECK(targets.dtype == DType::kI32 && neg_ids.dtype == DType::kI32,
             "sampled_softmax: targets and neg_ids must be i32");
  check_cuda_tensor(loss, op);
  check_shape(loss, {1}, "sampled_softmax loss");
  HSTU_CHECK(loss.dtype == DType::kF64, "sampled_softmax: loss must be f64, got ", loss.str());
  HSTU_CHECK(spec.temperature > 0 && spec.eps > 0,
             "sampled_softmax: temperature and eps must be positive");
  const bool grad = !dq.empty();
  if (grad) {
    check_cuda_tensor(dq, op);
    check_shape(dq, {t, d}, "sampled_softmax dq");
    HSTU_CHECK(dq.dtype == q.dtype, "sampled_softmax: dq must have q's dtype, got ", dq.str());
    check_cuda_tensor(d_table, op);
    check_shape(d_table, {v, d}, "sampled_softmax d_table");
    HSTU_CHECK(d_table.dtype == DType::kF32, "sampled_softmax: d_table must be f32");
    check_cuda_tensor(touched, op);
    check_shape(touched, {v}, "sampled_softmax touched");
    HSTU_CHECK(touched.dtype == DType::kU8, "sampled_softmax: touched must be u8");
  }
  if (t == 0) {
    HSTU_CUDA_CHECK(cudaMemsetAsync(loss.data, 0, sizeof(double), stream_of(ctx)));
    return;
  }
  const int64_t r = neg_ids.dim(1), nj = r + 1;
  HSTU_CHECK(r < (int64_t(1) << 31) - 1, "sampled_softmax: ", r, " negatives per query");

  Scratch scratch(ctx, op);
  SsArgs a;
  a.q = q.data, a.ldq = q.row_stride;
  a.targets = targets.as<int32_t>();
  a.neg = neg_ids.as<int32_t>(), a.ldn = neg_ids.row_stride, a.r = static_cast<int32_t>(r);
  a.table = table.data, a.ldt = table.row_stride;
  a.t = t, a.d = d;
  a.tau = spec.temperature, a.eps = spec.eps;
  a.loss_scale = static_cast<float>(spec.loss_scale);
  Tensor token_loss = scratch.alloc(DType::kF32, {t});
  a.token_loss = token_loss.as<float>();
  const bool det = grad && ctx.deterministic;
  // The deterministic scatter records one (key, A, B) per (token, candidate) and sorts them with
  // 32-bit item indices; the atomic path has no such bound.
  HSTU_CHECK(!det || t * nj < (int64_t(1) << 31),
             "sampled_softmax: the deterministic table gradient records T * (R + 1) = ", t * nj,
             " (token, candidate) pairs, more than 2^31 - 1 (TrainerArgs.deterministic = false "
             "scatters with atomics instead; or a smaller TrainerArgs.train_batch_size)");
  Tensor pair_key, pair_a, pair_b;
  if (grad) {
    a.dq = dq.data, a.lddq = dq.row_stride;
    a.touched = touched.as<uint8_t>();
    if (det) {
      pair_key = scratch.alloc(DType::kI32, {t * nj});
      pair_a = scratch.alloc(DType::kF32, {t * nj});
      pair_b = scratch.alloc(DType::kF32, {t * nj});
      a.pair_key = pair_key.as<int32_t>();
      a.pair_a = pair_a.as<float>(), a.pair_b = pair_b.as<float>();
    } else {
      a.d_table = d_table.as<float>(), a.lddt = d_table.row_stride;
    }
  }
  // NOTE: each warp keeps about D + 4*(R+1) floats in shared memory; the block shrinks to stay
  // in the default 48 KiB and opts in beyond it only for very wide rows or many negatives. When
  // R + 1 candidates do not fit even then, they go in tiles of kTile (see the top of this file).
  int device = 0, smem_optin = 0;
  HSTU_CUDA_CHECK(cudaGetDevice(&device));
  HSTU_CUDA_CHECK(
      cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  HSTU_CHECK(spec.candidate_tile >= 0, "sampled_softmax: candidate_tile = ", spec.candidate_tile,
             " (>= 0; 0 = automatic)");
  int64_t tile = nj;
  if (spec.candidate_tile > 0) {
    tile = std::min(nj, spec.candidate_tile);
  } else if (sizeof(float) * static_cast<size_t>(warp_smem_floats(d, nj, grad)) >
             static_cast<size_t>(smem_optin)) {
    tile = kTile;
  }
  const bool tiled = tile < nj;
  a.tile = static_cast<int32_t>(tile);
  // NOTE: 2 wide up to D = 64 (a row in one pass of at most 32 lanes, groups of 8 candidates),
  // 8 wide beyond (fewer passes over the columns); 1 wide for odd or misaligned rows.
  const bool vec2 = can_vec2(d, {&q, &table, &dq, &d_table});
  const bool vec8 = can_vec8(d, {&q, &table, &dq, &d_table});
  const int width = vec2 && d <= 64 ? 2 : vec8 ? 8 : vec2 ? 2 : 1;
  // The narrow kernel: 2-wide rows of 2..64 columns, one tile, row offsets in 32 bits.
  const auto fits32 = [](const Tensor& m) {
    return m.empty() || m.dim(0) * m.row_stride < (int64_t(1) << 31) - 64;
  };
  const bool narrow = !ss_kernel_warp() && width == 2 && d >= 2 && d <= 64 && !tiled &&
                      fits32(table) && (det || !grad || fits32(d_table));
  // The warp kernel's dq accumulator: tiled, or one tile with dq (its one-pass form).
  a.one_pass = ss_one_pass();
  const bool acc = tiled || (grad && !narrow && a.one_pass);
  const size_t warp_bytes = sizeof(float) * static_cast<size_t>(warp_smem_floats(d, tile, acc));
  HSTU_CHECK(warp_bytes <= static_cast<size_t>(smem_optin), "sampled_softmax: rows of ", d,
             " columns with tiles of ", tile, " candidates need ", warp_bytes >> 10,
             " KiB of shared memory per warp, more than the device's ", smem_optin >> 10, " KiB");
  const int warps = static_cast<int>(std::clamp<size_t>((48 << 10) / warp_bytes, 1, 8));
  const size_t smem = warp_bytes * warps;
  const unsigned grid = static_cast<unsigned>((t + warps - 1) / warps);
  a.ldt32 = narrow ? static_cast<int32_t>(a.ldt) : 0;
  a.lddt32 = narrow ? static_cast<int32_t>(a.lddt) : 0;
  const auto launch = [&](auto kernel) {
    if (smem > (48 << 10))
      HSTU_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    kernel<<<grid, warps * 32, smem, stream_of(ctx)>>>(a);
    HSTU_CUDA_CHECK_LAUNCH();
  };
  dispatch_width(width, [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    dispatch_io(q.dtype, "sampled_softmax q", [&](auto tq) {
      using TQ = typename decltype(tq)::type;
      // The rows: the f32 table, or its copy in q's dtype (the caller's choice; model.cpp).
      const auto run = [&](auto tr) {
        using TR = typename decltype(tr)::type;
        if constexpr (V == 2) {
          if (narrow) {
            dispatch_chunks(d, [&](auto nc) {
              launch(sampled_softmax_narrow_kernel<decltype(nc)::value, TQ, TR>);
            });
          } else {
            launch(sampled_softmax_kernel<V, TQ, TR>);
          }
        } else {
          launch(sampled_softmax_kernel<V, TQ, TR>);
        }
        if (det) {
          const sorted_scatter::Sorted s =
              sorted_scatter::sort_keys(ctx, scratch, a.pair_key, t * nj, v);
          sorted_scatter::row_sum(
              ctx, s,
              PairRows<TQ, TR>{static_cast<const TQ*>(q.data), q.row_stride,
                               static_cast<int32_t>(nj), a.pair_a, a.pair_b,
                               static_cast<const TR*>(table.data), table.row_stride},
              d_table.as<float>(), d_table.row_stride, d,
              sorted_scatter::row_width(d, {&q, &table, &d_table}));
        }
      };
      if (table.dtype == DType::kF32) {
        run(TypeTag<float>{});
      } else if constexpr (!std::is_same_v<TQ, float>) {
        run(TypeTag<TQ>{});
      }
    });
  });
  loss_sum_kernel<<<1, 1024, 0, stream_of(ctx)>>>(a.token_loss, t, spec.loss_scale,
                                                  static_cast<double*>(loss.data));
  HSTU_CUDA_CHECK_LAUNCH();
}

}  // namespace hstu::cuda
