// test_gpu_attention.cpp — the CUDA HSTU attention (forward, backward, rab gradients) against the
// fp32 CPU reference on fresh random jagged batches: every mask kind (causal, contexts, targets
// with group sizes 1 and 3, window, non-causal), rab on/off (with the time-bucket table and its
// exact fallback), head widths 25..256 (padded and unpadded, equal and unequal q/k and v widths),
// bf16 and fp16, 16-byte and scalar (misaligned) memory paths, heads padded to a 16-byte stride
// (the layer's layout for widths 25 and 50: padding never read or written), deterministic and
// atomic dQ.
//
// The shaping decision: the tolerance is "m x the error of a naive low-precision implementation"
// (gpu_harness.h; m = 2 forward, 5 backward). The naive implementation below is the textbook
// dense computation with every matmul output and point-wise result rounded to the input dtype
// (fp32 accumulation), i.e. what a framework's bf16 attention would produce; it runs on the same
// rounded inputs as the reference. GPU outputs are NaN-poisoned before every call, and q, k, v
// and their gradients are strided column views of fused [T, u|v|q|k] buffers, as in the layer.
//
// GpuAttentionSm90 runs the forward on the sm_90a kernels (H100/H200, HSTU_ATTN_SM90=1; skipped
// elsewhere) and on the sm80 kernels (HSTU_ATTN_SM80=1) over cases made for the sm_90a tiles (128 x
// 128 / 128 x 64): every head-width bucket 64/128/256 incl. partial widths, both dtypes, lengths 1,
// tile multiples and non-multiples, every mask feature and rab; the suite above also runs on
// sm_90a. GpuAttentionSm90Bwd runs the cases of that list the sm_90a backward takes (d 64 / 128
// / 256; rab with its gradients at 64 / 128; split and fused forms), and one it sends to sm80,
// on both backends. Both sm_90a suites run the default launch order (longest-first,
// ops/detail/attn_tile_order.h, except the fp16 forward's; skewed_* cases: one long sequence
// among many short ones) and the forced ones (HSTU_ATTN_SM90_ORDER=grid / seq), which must give
// the same bits;
// GpuAttentionTileOrder compares the order's device builder with its host reference.
// GpuAttentionRab runs rab cases (every head count 1..4, widths 25..256, all
// masks) with the precomputed time buckets and with the in-kernel ones: bit-identical, both near
// the reference; then forward and backward on sm_90a where it runs.
//
// Includes the backend header ops/cpu/hstu_attention.h (private to src/ops/ otherwise): the CPU
// reference is called directly, the CUDA kernels through the dispatcher.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/gpu_harness.h"
#include "common/harness.h"
#include "ops/cpu/hstu_attention.h"
#include "ops/cuda/sm90/attention_sm90.h"

namespace hstu::test {
namespace {

using gpu::round_to;
using HstuAttnParamsForTest = cuda::attn::HstuAttnParams;

struct Case {
  std::string name;
  DType dtype = DType::kBF16;
  int heads = 2, dqk = 64, dv = 64;
  std::vector<int> lengths;  // empty: random
  int max_len = 200;         // random lengths in [1, max_len]
  bool causal = true, contexts = false, targets = false;
  int group = 1, window = 0;
  bool rab = false;
  int time_buckets = 128;     // NB (rab_time has NB + 1 entries)
  int pad = 0;                // extra leading columns of the fused buffers (misalignment)
  bool padded_heads = false;  // heads of v, q, k (and their gradients) at a stride of 8 elements
  float alpha = 0;            // 0: 1/sqrt(dqk)
};
// Test listings (ctest, --gtest_list_tests) show the case name instead of raw bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

// One case: the name, dtype and widths, then `tweak` sets the rest (both case lists use it).
template <typename Tweak>
Case make_case(std::string name, DType dt, int dqk, int dv, Tweak&& tweak) {
  Case x;
  x.name = std::move(name);
  x.dtype = dt;
  x.dqk = dqk;
  x.dv = dv;
  tweak(x);
  return x;
}

std::vector<Case> cases() {
  constexpr DType kB = DType::kBF16, kH = DType::kF16;
  std::vector<Case> c;
  auto add = [&](const char* name, DType dt, int dqk, int dv, auto&& tweak) {
    c.push_back(make_case(name, dt, dqk, dv, tweak));
  };
  add("causal_d64_bf16", kB, 64, 64, [](Case& x) { x.lengths = {1, 7, 64, 129, 200, 33}; });
  add("context_d32_bf16", kB, 32, 32, [](Case& x) { x.contexts = true; });
  add("targets_g1_d50_bf16", kB, 50, 50, [](Case& x) { x.targets = true; });
  add("context_targets_g3_d25_fp16", kH, 25, 25, [](Case& x) {
    x.contexts = x.targets = true;
    x.group = 3;
  });
  add("window_d128_bf16", kB, 128, 128, [](Case& x) { x.window = 17; });
  add("noncausal_d64_fp16", kH, 64, 64, [](Case& x) { x.causal = false; });
  add("rab_meta_d25_bf16", kB, 25, 25, [](Case& x) {  // Meta's ML-1M shape: alpha 1, rab
    x.contexts = x.targets = x.rab = true;
    x.alpha = 1.0f;
  });
  add("rab_exact_buckets_d50_bf16", kB, 50, 50, [](Case& x) {  // > kMaxTimeTable buckets
    x.rab = true;
    x.time_buckets = 300;
    x.alpha = 1.0f;
  });
  add("targets_g3_d256_bf16", kB, 256, 256, [](Case& x) {
    x.heads = 1;
    x.max_len = 150;
    x.targets = true;
    x.group = 3;
  });
  add("rab_d256_fp16", kH, 256, 256, [](Case& x) {
    x.heads = 1;
    x.max_len = 150;
    x.rab = true;
  });
  add("context_window_rab_d128_fp16", kH, 128, 128, [](Case& x) {
    x.contexts = x.rab = true;
    x.window = 40;
  });
  add("dqk32_dv64_bf16", kB, 32, 64, [](Case& x) { x.contexts = true; });
  add("misaligned_d32_bf16", kB, 32, 32, [](Case& x) {  // scalar load/store path
    x.targets = true;
    x.pad = 1;
  });
  add("padded_heads_targets_d25_bf16", kB, 25, 25, [](Case& x) {  // the layer's ML-1M layout
    x.targets = x.padded_heads = true;
    x.alpha = 1.0f;
  });
  add("padded_heads_context_rab_d50_fp16", kH, 50, 50,
      [](Case& x) { x.contexts = x.rab = x.padded_heads = true; });
  add("padded_heads_dqk20_dv36_bf16", kB, 20, 36, [](Case& x) { x.heads = 3; });
  add("all_masks_rab_d64_bf16", kB, 64, 64, [](Case& x) {
    x.heads = 3;
    x.contexts = x.targets = x.rab = true;
    x.group = 3;
    x.window = 23;
    x.time_buckets = 40;  // saturates the last bucket
  });
  add("long_causal_d128_bf16", kB, 128, 128, [](Case& x) {
    x.heads = 1;
    x.lengths = {700, 333};
  });
  return c;
}

// One random jagged problem, on the host (f32, values already rounded to the case's dtype).
struct Problem {
  Case cs;
  int B = 0, T = 0, H = 0, W = 0, max_len = 0;
  int sqk = 0, sv = 0;             // head strides of q / k and v
  int64_t v0 = 0, q0 = 0, k0 = 0;  // first columns of v, q, k in the fused buffer
  std::vector<int> len, cu, ctx, tgt;
  Tensor uvqk, d_o;                    // host f32 [T, W], [T, H dv]
  Tensor q, k, v;                      // views of uvqk
  Tensor cu_t, ctx_t, tgt_t;           // host i32
  Tensor rab_pos, rab_time, tsq, tsk;  // host f32 / i64
  Tensor drab_pos0, drab_time0;        // initial values of the accumulated rab gradients
  float alpha = 1, scale = 1;

  explicit Problem(const Case& c) : cs(c) {
    std::mt19937_64& g = rng();
    if (c.lengths.empty()) {
      std::uniform_int_distribution<int> L(1, c.max_len), nb(3, 6);
      len.push_back(1);
      const int n = nb(g);
      for (int b = 1; b < n; ++b) len.push_back(L(g));
    } else {
      len = c.lengths;
    }
    B = static_cast<int>(len.size());
    H = c.heads;
    cu.assign(1, 0);
    for (int L : len) {
      cu.push_back(cu.back() + L);
      max_len = std::max(max_len, L);
    }
    T = cu.back();
    for (int L : len) {
      std::uniform_int_distribution<int> cd(0, std::min(L, 8));
      const int cc = c.contexts ? cd(g) : 0;
      std::uniform_int_distribution<int> td(0, std::min(L - cc, 10));
      const int tt = c.targets ? td(g) : 0;
      ctx.push_back(cc);
      tgt.push_back(tt);
    }
    const auto up8 = [&](int x) { return c.padded_heads ? (x + 7) / 8 * 8 : x; };
    sqk = up8(c.dqk);
    sv = up8(c.dv);
    v0 = c.pad + up8(H * c.dv);  // after u
    q0 = v0 + int64_t(H) * sv;
    k0 = q0 + int64_t(H) * sqk;
    W = static_cast<int>(k0 + int64_t(H) * sqk);
    uvqk = alloc(DType::kF32, {T, W});
    fill_uniform(uvqk, -1.0, 1.0);  // head padding too: random values the op must not read
    gpu::round_host(uvqk, c.dtype);
    v = uvqk.cols(v0, q0);
    q = uvqk.cols(q0, k0);
    k = uvqk.cols(k0, W);
    d_o = alloc(DType::kF32, {T, H * c.dv});
    fill_uniform(d_o, -1.0, 1.0);
    gpu::round_host(d_o, c.dtype);
    cu_t = alloc(DType::kI32, {B + 1});
    for (int b = 0; b <= B; ++b) set(cu_t, b, cu[b]);
    if (c.contexts) {
      ctx_t = alloc(DType::kI32, {B});
      for (int b = 0; b < B; ++b) set(ctx_t, b, ctx[b]);
    }
    if (c.targets) {
      tgt_t = alloc(DType::kI32, {B});
      for (int b = 0; b < B; ++b) set(tgt_t, b, tgt[b]);
    }
    alpha = c.alpha > 0 ? c.alpha : 1.0f / std::sqrt(static_cast<float>(c.dqk));
    scale = 1.0f / static_cast<float>(max_len + 11);
    if (c.rab) {
      // P smaller than some sequences, so the clamped ends of pos_w are exercised.
      const int P = std::max(2, max_len * 2 / 3);
      rab_pos = alloc(DType::kF32, {2 * P - 1});
      rab_time = alloc(DType::kF32, {c.time_buckets + 1});
      fill_uniform(rab_pos, -0.5, 0.5);
      fill_uniform(rab_time, -0.5, 0.5);
      tsk = alloc(DType::kI64, {T});
      tsq = alloc(DType::kI64, {T});
      std::uniform_int_distribution<int64_t> gap(0, 3000000), start(1000000000, 1700000000);
      int64_t* kk = static_cast<int64_t*>(tsk.data);
      int64_t* qq = static_cast<int64_t*>(tsq.data);
      for (int b = 0; b < B; ++b) {
        int64_t ts = start(g);
        for (int i = cu[b]; i < cu[b + 1]; ++i) {
          kk[i] = ts;
          ts += gap(g) / (1 + gap(g) % 50);  // heavy-ish tail of gaps, some zero
        }
        for (int i = cu[b]; i < cu[b + 1]; ++i) qq[i] = i + 1 < cu[b + 1] ? kk[i + 1] : ts;
      }
      drab_pos0 = alloc(DType::kF32, {2 * P - 1});
      drab_time0 = alloc(DType::kF32, {c.time_buckets + 1});
      fill_uniform(drab_pos0, -0.01, 0.01);
      fill_uniform(drab_time0, -0.01, 0.01);
    }
  }

  // Arguments over the given q, k, v views and index / rab tensors.
  HstuAttentionArgs args(const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& cu_,
                         const Tensor& ctx_, const Tensor& tgt_, const Tensor& pos_,
                         const Tensor& time_, const Tensor& tsq_, const Tensor& tsk_) const {
    HstuAttentionArgs a;
    a.q = q_;
    a.k = k_;
    a.v = v_;
    a.cu_seqlens = cu_;
    a.num_contexts = ctx_;
    a.num_targets = tgt_;
    a.max_seqlen = max_len;
    a.num_heads = H;
    a.dim_qk = cs.dqk;
    a.dim_v = cs.dv;
    a.alpha = alpha;
    a.scale = scale;
    a.causal = cs.causal;
    a.target_group_size = cs.group;
    a.max_attn_len = cs.window;
    a.rab_pos = pos_;
    a.rab_time = time_;
    a.ts_query = tsq_;
    a.ts_key = tsk_;
    return a;
  }
};

// Results of one implementation (host f32).
struct Outputs {
  Tensor o, dq, dk, dv, drab_pos, drab_time;
};

// The naive low-precision implementation (see the file comment). Dense per (sequence, head),
// the pairs one after another, each phase parallel over rows (a 4096-token sequence of one head
// is one pair: parallel over pairs it took minutes). The rab gradients are summed in (pair, row,
// column) order, so the result does not depend on the thread count.
Outputs naive_lowp(const Problem& pb) {
  const Case& c = pb.cs;
  const DType dt = c.dtype;
  auto rnd = [&](double x) { return static_cast<double>(round_to(dt, static_cast<float>(x))); };
  Outputs r;
  r.o = alloc(DType::kF32, {pb.T, pb.H * c.dv});
  r.dq = alloc(DType::kF32, {pb.T, pb.H * c.dqk});
  r.dk = alloc(DType::kF32, {pb.T, pb.H * c.dqk});
  r.dv = alloc(DType::kF32, {pb.T, pb.H * c.dv});
  std::vector<double> dpos, dtime;
  if (c.rab) {
    dpos.assign(pb.rab_pos.numel(), 0.0);
    dtime.assign(pb.rab_time.numel(), 0.0);
  }
  const int npos = c.rab ? static_cast<int>(pb.rab_pos.numel()) : 0;
  const int64_t* tq = c.rab ? static_cast<const int64_t*>(pb.tsq.data) : nullptr;
  const int64_t* tk = c.rab ? static_cast<const int64_t*>(pb.tsk.data) : nullptr;
  // Rows s0 .. s0 + L - 1, columns col0 .. col0 + w - 1 of t (one head) as f32 [L, w].
  auto gather = [](const Tensor& t, int s0, int L, int64_t col0, int w) {
    std::vector<float> g(size_t(L) * w);
    for (int i = 0; i < L; ++i)
      for (int e = 0; e < w; ++e)
        g[size_t(i) * w + e] = get(t, (s0 + i) * t.row_elems() + col0 + e);
    return g;
  };
  for (int bh = 0; bh < pb.B * pb.H; ++bh) {
    const int b = bh / pb.H, h = bh % pb.H;
    const int L = pb.len[b], s0 = pb.cu[b];
    const std::vector<float> q = gather(pb.q, s0, L, int64_t(h) * pb.sqk, c.dqk);
    const std::vector<float> k = gather(pb.k, s0, L, int64_t(h) * pb.sqk, c.dqk);
    const std::vector<float> v = gather(pb.v, s0, L, int64_t(h) * pb.sv, c.dv);
    const std::vector<float> go = gather(pb.d_o, s0, L, int64_t(h) * c.dv, c.dv);
    std::vector<double> x(size_t(L) * L), P(size_t(L) * L), dS(size_t(L) * L);
    std::vector<char> m(size_t(L) * L);
    auto dot = [](const float* a, const float* b_, int n) {
      float acc = 0;  // fp32 accumulation of exact bf16/fp16 products
      for (int e = 0; e < n; ++e) acc += a[e] * b_[e];
      return acc;
    };
#pragma omp parallel for schedule(dynamic, 8)
    for (int i = 0; i < L; ++i)
      for (int j = 0; j < L; ++j) {
        const size_t ij = size_t(i) * L + j;
        m[ij] = hstu_attend(i, j, L, pb.ctx[b], pb.tgt[b], c.group, c.window, c.causal);
        if (!m[ij]) continue;
        double s = rnd(dot(&q[size_t(i) * c.dqk], &k[size_t(j) * c.dqk], c.dqk));
        if (c.rab) {
          const int bk = rab_time_bucket(tq[s0 + i] - tk[s0 + j], c.time_buckets);
          s += get(pb.rab_pos, rab_pos_index(i, j, npos)) + get(pb.rab_time, bk);
        }
        x[ij] = rnd(pb.alpha * s);
        const double sig = 1.0 / (1.0 + std::exp(-x[ij]));
        P[ij] = rnd(x[ij] * sig * pb.scale);
      }
#pragma omp parallel for schedule(dynamic, 8)
    for (int i = 0; i < L; ++i)
      for (int e = 0; e < c.dv; ++e) {
        float acc = 0;
        for (int j = 0; j < L; ++j)
          if (m[size_t(i) * L + j])
            acc += static_cast<float>(P[size_t(i) * L + j] * v[size_t(j) * c.dv + e]);
        set(r.o, int64_t(s0 + i) * pb.H * c.dv + h * c.dv + e, rnd(acc));
      }
      // Backward.
#pragma omp parallel for schedule(dynamic, 8)
    for (int i = 0; i < L; ++i)
      for (int j = 0; j < L; ++j) {
        const size_t ij = size_t(i) * L + j;
        if (!m[ij]) {
          dS[ij] = 0;
          continue;
        }
        const double dp = rnd(dot(&go[size_t(i) * c.dv], &v[size_t(j) * c.dv], c.dv));
        const double sig = 1.0 / (1.0 + std::exp(-x[ij]));
        dS[ij] = rnd(pb.alpha * pb.scale * dp * sig * (1.0 + x[ij] * (1.0 - sig)));
      }
    if (c.rab) {
      for (int i = 0; i < L; ++i)
        for (int j = 0; j < L; ++j) {
          const size_t ij = size_t(i) * L + j;
          if (!m[ij]) continue;
          dpos[rab_pos_index(i, j, npos)] += dS[ij];
          dtime[rab_time_bucket(tq[s0 + i] - tk[s0 + j], c.time_buckets)] += dS[ij];
        }
    }
#pragma omp parallel for schedule(dynamic, 8)
    for (int j = 0; j < L; ++j) {
      for (int e = 0; e < c.dv; ++e) {
        float acc = 0;
        for (int i = 0; i < L; ++i)
          acc += static_cast<float>(P[size_t(i) * L + j] * go[size_t(i) * c.dv + e]);
        set(r.dv, int64_t(s0 + j) * pb.H * c.dv + h * c.dv + e, rnd(acc));
      }
      for (int e = 0; e < c.dqk; ++e) {
        float acc = 0;
        for (int i = 0; i < L; ++i)
          acc += static_cast<float>(dS[size_t(i) * L + j] * q[size_t(i) * c.dqk + e]);
        set(r.dk, int64_t(s0 + j) * pb.H * c.dqk + h * c.dqk + e, rnd(acc));
      }
    }
#pragma omp parallel for schedule(dynamic, 8)
    for (int i = 0; i < L; ++i)
      for (int e = 0; e < c.dqk; ++e) {
        float acc = 0;
        for (int j = 0; j < L; ++j)
          acc += static_cast<float>(dS[size_t(i) * L + j] * k[size_t(j) * c.dqk + e]);
        set(r.dq, int64_t(s0 + i) * pb.H * c.dqk + h * c.dqk + e, rnd(acc));
      }
  }
  if (c.rab) {
    r.drab_pos = clone(pb.drab_pos0);
    r.drab_time = clone(pb.drab_time0);
    for (int64_t i = 0; i < r.drab_pos.numel(); ++i)
      set(r.drab_pos, i, get(r.drab_pos, i) + dpos[i]);
    for (int64_t i = 0; i < r.drab_time.numel(); ++i)
      set(r.drab_time, i, get(r.drab_time, i) + dtime[i]);
  }
  return r;
}

// The fp32 CPU reference (the truth) on the same rounded inputs.
Outputs cpu_reference(const Problem& pb) {
  const Case& c = pb.cs;
  Ctx ctx = cpu_ctx();
  const HstuAttentionArgs a = pb.args(pb.q, pb.k, pb.v, pb.cu_t, pb.ctx_t, pb.tgt_t, pb.rab_pos,
                                      pb.rab_time, pb.tsq, pb.tsk);
  Outputs r;
  r.o = alloc(DType::kF32, {pb.T, pb.H * c.dv});
  r.dq = alloc(DType::kF32, {pb.T, pb.H * c.dqk});
  r.dk = alloc(DType::kF32, {pb.T, pb.H * c.dqk});
  r.dv = alloc(DType::kF32, {pb.T, pb.H * c.dv});
  if (c.rab) {
    r.drab_pos = clone(pb.drab_pos0);
    r.drab_time = clone(pb.drab_time0);
  }
  cpu::hstu_attention_fwd(ctx, a, r.o);
  cpu::hstu_attention_bwd(ctx, a, pb.d_o, r.dq, r.dk, r.dv, r.drab_pos, r.drab_time);
  return r;
}

// The CUDA implementation: inputs uploaded into fused device buffers, outputs poisoned first.
struct GpuRun {
  const Problem& pb;
  Tensor uvqk, duvqk, d_o, o, cu, ctx, tgt, pos, time, tsq, tsk, drab_pos, drab_time;
  Tensor q, k, v, dq, dk, dv;

  explicit GpuRun(const Problem& p) : pb(p) {
    const Case& c = pb.cs;
    uvqk = gpu::to_device(pb.uvqk, c.dtype);
    duvqk = gpu::to_device(pb.uvqk, c.dtype);  // same geometry; poisoned before each backward
    v = uvqk.cols(pb.v0, pb.q0);
    q = uvqk.cols(pb.q0, pb.k0);
    k = uvqk.cols(pb.k0, pb.W);
    dv = duvqk.cols(pb.v0, pb.q0);
    dq = duvqk.cols(pb.q0, pb.k0);
    dk = duvqk.cols(pb.k0, pb.W);
    d_o = gpu::to_device(pb.d_o, c.dtype);
    o = gpu::device_alloc(c.dtype, {pb.T, pb.H * c.dv});
    cu = gpu::to_device(pb.cu_t, DType::kI32);
    if (c.contexts) ctx = gpu::to_device(pb.ctx_t, DType::kI32);
    if (c.targets) tgt = gpu::to_device(pb.tgt_t, DType::kI32);
    if (c.rab) {
      pos = gpu::to_device(pb.rab_pos, DType::kF32);
      time = gpu::to_device(pb.rab_time, DType::kF32);
      tsq = gpu::to_device(pb.tsq, DType::kI64);
      tsk = gpu::to_device(pb.tsk, DType::kI64);
      drab_pos = gpu::to_device(pb.drab_pos0, DType::kF32);
      drab_time = gpu::to_device(pb.drab_time0, DType::kF32);
    }
  }
  HstuAttentionArgs args() const { return pb.args(q, k, v, cu, ctx, tgt, pos, time, tsq, tsk); }

  // step_buckets: the rab time buckets precomputed once (hstu_rab_buckets, as a model step does)
  // and passed to both calls as args.rab_buckets; else each call computes its own.
  Outputs run(bool deterministic, bool step_buckets = false) {
    Ctx cctx = gpu::cuda_ctx(deterministic);
    HstuAttentionArgs a = args();
    Tensor buckets;
    if (step_buckets) {
      buckets = gpu::device_alloc(DType::kU8,
                                  {hstu_rab_buckets_bytes(a.cu_seqlens.numel() - 1, a.max_seqlen)});
      EXPECT_TRUE(hstu_rab_buckets(cctx, a, buckets)) << "the case takes no precomputed buckets";
      a.rab_buckets = buckets;
    }
    gpu::poison(o);
    hstu_attention_fwd(cctx, a, o);
    gpu::poison(dq);
    gpu::poison(dk);
    gpu::poison(dv);
    if (pb.cs.rab) {  // accumulated: start from the initial values again
      gpu::upload(drab_pos, pb.drab_pos0);
      gpu::upload(drab_time, pb.drab_time0);
    }
    hstu_attention_bwd(cctx, a, d_o, dq, dk, dv, drab_pos, drab_time);
    gpu::sync();
    Outputs r;
    r.o = gpu::to_host(o);
    r.dq = unpad_heads(gpu::to_host(dq), pb.H, pb.cs.dqk, "dq");
    r.dk = unpad_heads(gpu::to_host(dk), pb.H, pb.cs.dqk, "dk");
    r.dv = unpad_heads(gpu::to_host(dv), pb.H, pb.cs.dv, "dv");
    if (pb.cs.rab) {
      r.drab_pos = gpu::to_host(drab_pos);
      r.drab_time = gpu::to_host(drab_time);
    }
    return r;
  }
};

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return false;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = get(a, i), y = get(b, i);
    if (!(x == y) && !(std::isnan(x) && std::isnan(y))) return false;
  }
  return true;
}

// Checks one GPU output against the reference: within m x the naive low-precision
// implementation's error (see the file comment). Prints the error ratio under `tag` (the path or
// mode), kept in the log for tuning the kernels.
void check_output(const Problem& pb, const char* what, const char* tag, const Tensor& out,
                  const Tensor& ref, const Tensor& naive, double m) {
  const double err = max_abs_diff(out, ref), nerr = max_abs_diff(naive, ref);
  std::printf("err %-40s %-10s %-7s gpu %.3e naive %.3e ratio %.2f (max|ref| %.3e)\n",
              pb.cs.name.c_str(), what, tag, err, nerr, nerr > 0 ? err / nerr : 0.0, max_abs(ref));
  gpu::expect_lowp_close(out, ref, naive, m, 1e-6 + 1e-4 * max_abs(ref), what);
}

class GpuAttention : public ::testing::TestWithParam<Case> {};

TEST_P(GpuAttention, MatchesCpuReference) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  const Problem pb(GetParam());
  const Outputs ref = cpu_reference(pb);
  const Outputs naive = naive_lowp(pb);
  GpuRun run(pb);
  constexpr double kFwdM = 2.0, kBwdM = 5.0;
  auto check = [&](const char* what, const Tensor& out, const Tensor& r, const Tensor& nv, double m,
                   bool det) { check_output(pb, what, det ? "det" : "atm", out, r, nv, m); };
  for (bool det : {true, false}) {
    SCOPED_TRACE(det ? "deterministic" : "atomic dQ");
    const Outputs out = run.run(det);
    check("o", out.o, ref.o, naive.o, kFwdM, det);
    check("dq", out.dq, ref.dq, naive.dq, kBwdM, det);
    check("dk", out.dk, ref.dk, naive.dk, kBwdM, det);
    check("dv", out.dv, ref.dv, naive.dv, kBwdM, det);
    if (pb.cs.rab) {
      check("d_rab_pos", out.drab_pos, ref.drab_pos, naive.drab_pos, kBwdM, det);
      check("d_rab_time", out.drab_time, ref.drab_time, naive.drab_time, kBwdM, det);
    }
    // Deterministic mode: a second run is bit-identical, and so are runs in either sm_80 launch
    // order (HSTU_ATTN_SM80_ORDER: each CTA computes the same block whatever its place).
    for (const char* order : {"", "grid", "block"}) {
      if (!det) break;
      SCOPED_TRACE(std::string("again, sm80 order ") + (*order ? order : "default"));
      if (*order) setenv("HSTU_ATTN_SM80_ORDER", order, 1);
      const Outputs again = run.run(true);
      unsetenv("HSTU_ATTN_SM80_ORDER");
      EXPECT_TRUE(bit_equal(out.o, again.o)) << "o differs between runs";
      EXPECT_TRUE(bit_equal(out.dq, again.dq)) << "dq differs between deterministic runs";
      EXPECT_TRUE(bit_equal(out.dk, again.dk)) << "dk differs between deterministic runs";
      EXPECT_TRUE(bit_equal(out.dv, again.dv)) << "dv differs between deterministic runs";
      if (pb.cs.rab) {
        EXPECT_TRUE(bit_equal(out.drab_pos, again.drab_pos)) << "d_rab_pos not deterministic";
        EXPECT_TRUE(bit_equal(out.drab_time, again.drab_time)) << "d_rab_time not deterministic";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuAttention, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

std::vector<Case> sm90_cases() {
  constexpr DType kB = DType::kBF16, kH = DType::kF16;
  const std::vector<int> edge = {1, 129, 300, 64, 192};  // 1, tile multiples and not
  std::vector<Case> c;
  auto add = [&](std::string name, DType dt, int d, auto&& tweak) {
    c.push_back(make_case(std::move(name), dt, d, d, [&](Case& x) {
      x.heads = 2;
      x.lengths = edge;
      x.padded_heads = true;  // widths such as 100 and 200 need the 16-byte head stride for TMA
      tweak(x);
    }));
  };
  for (DType dt : {kB, kH}) {
    const std::string t = dt == kB ? "_bf16" : "_fp16";
    for (int d : {64, 100, 128, 200, 256}) {
      if (dt == kH && (d == 100 || d == 200)) continue;
      const std::string w = "_d" + std::to_string(d) + t;
      add("causal" + w, dt, d, [](Case&) {});
      add("noncausal" + w, dt, d, [](Case& x) { x.causal = false; });
      add("context_targets_g3" + w, dt, d, [](Case& x) {
        x.contexts = x.targets = true;
        x.group = 3;
      });
      add("window_rab" + w, dt, d, [](Case& x) {
        x.window = 150;
        x.rab = true;
      });
      // Without rab: the sm_90a backward's window and full-mask cases (it sends rab to sm80).
      add("window_contexts" + w, dt, d, [](Case& x) {
        x.window = 150;
        x.contexts = true;
      });
    }
  }
  add("random_lengths_masks_norab_d64_fp16", kH, 64, [](Case& x) {
    x.lengths.clear();
    x.max_len = 600;
    x.contexts = x.targets = true;
    x.group = 2;
    x.window = 100;
  });
  add("long_causal_d128_bf16", kB, 128, [](Case& x) { x.lengths = {1000, 513, 2}; });
  // The fused dQ's ordered adds over many key blocks per query block, jagged, both widths.
  add("long_causal_d64_fp16", kH, 64, [](Case& x) { x.lengths = {1000, 513, 2, 700}; });
  add("random_lengths_masks_norab_d128_bf16", kB, 128, [](Case& x) {
    x.lengths.clear();
    x.max_len = 900;
    x.contexts = x.targets = true;
    x.group = 2;
    x.window = 300;
  });
  add("dqk64_dv128_bf16", kB, 64, [](Case& x) {
    x.dv = 128;
    x.contexts = true;
  });
  // The sm_90a backward at d 256 (attention_bwd_sm90_wide.cuh): jagged random lengths with
  // every mask but rab, several 64-row blocks per sequence, and unequal widths in the bucket.
  add("random_lengths_masks_norab_d256_bf16", kB, 256, [](Case& x) {
    x.lengths.clear();
    x.max_len = 700;
    x.contexts = x.targets = true;
    x.group = 3;
    x.window = 130;
  });
  add("long_causal_d256_fp16", kH, 256, [](Case& x) { x.lengths = {1000, 513, 2, 64}; });
  // The fused d 256 form's 32-query tiles and its dQ convert in 32-row blocks: lengths of 1, 33
  // and 97 rows (a tile cut at the end, a block with one row), beside a long one.
  add("odd_lengths_causal_d256_bf16", kB, 256, [](Case& x) { x.lengths = {97, 1, 33, 700}; });
  // Non-causal with contexts (targets need causal): 16, 3 and 2 visible blocks per CTA, even and
  // odd counts for the two F buffers of attention_bwd_sm90_wide.cuh.
  add("long_noncausal_contexts_d256_bf16", kB, 256, [](Case& x) {
    x.lengths = {1000, 191, 65};
    x.causal = false;
    x.contexts = true;
  });
  add("dqk136_dv256_targets_bf16", kB, 256, [](Case& x) {
    x.dqk = 136;
    x.targets = true;
    x.group = 2;
  });
  add("random_lengths_all_masks_d128_bf16", kB, 128, [](Case& x) {
    x.lengths.clear();
    x.max_len = 700;
    x.contexts = x.targets = x.rab = true;
    x.group = 2;
    x.window = 200;
  });
  // The longest-first launch order (attn_tile_order.h) on very skewed batches: one long
  // sequence among many of 1..16 tokens, every resident block size (192 / 128
  // forward rows, 128 / 64 backward rows).
  auto skewed = [](int long_len, int n_short) {
    std::vector<int> len = {3};
    for (int k = 0; k < n_short; ++k) len.push_back(1 + (7 * k + 3) % 16);
    len.insert(len.begin() + 1 + n_short / 2, long_len);
    return len;
  };
  add("skewed_causal_d128_bf16", kB, 128, [&](Case& x) { x.lengths = skewed(2048, 45); });
  add("skewed_causal_d64_fp16", kH, 64, [&](Case& x) { x.lengths = skewed(1600, 60); });
  add("skewed_targets_d256_bf16", kB, 256, [&](Case& x) {
    x.lengths = skewed(1100, 30);
    x.targets = true;
    x.group = 2;
  });
  // rab in the sm_90a backward (attention_bwd_sm90_rab.cuh): causal jagged batches, several
  // 128-key blocks per sequence, the last bucket saturated, non-causal.
  add("rab_causal_jagged_d64_bf16", kB, 64, [](Case& x) {
    x.lengths.clear();
    x.max_len = 520;
    x.rab = true;
  });
  add("rab_causal_d128_fp16", kH, 128, [](Case& x) {
    x.lengths = {700, 1, 257, 64, 130};
    x.rab = true;
    x.time_buckets = 40;
  });
  add("rab_noncausal_contexts_d128_bf16", kB, 128, [](Case& x) {
    x.causal = false;
    x.contexts = x.rab = true;
  });
  // rab at 4096 tokens, the longest the sm_90a backward takes: its position window and, at
  // d 128, a dK/dV kernel within 256 bytes of a CTA's shared memory (attention_sm90.cu).
  add("rab_causal_4096_d128_bf16", kB, 128, [](Case& x) {
    x.heads = 1;
    x.lengths = {4096, 130, 1};
    x.rab = true;
  });
  add("rab_causal_4096_d64_fp16", kH, 64, [](Case& x) {
    x.heads = 1;
    x.lengths = {1, 4096};
    x.rab = true;
  });
  return c;
}

class GpuAttentionSm90 : public ::testing::TestWithParam<Case> {};

// Whether the sm_90a backward takes a case of sm90_cases() (sm90_bwd_supported: buckets 64 / 128
// / 256, rab only up to 128, TMA-addressable operands: d_o is contiguous, so its head width must
// be a multiple of 8).
bool sm90_bwd_expected(const Case& c) {
  const int d = std::max(c.dqk, c.dv);
  return (!c.rab || d <= 128) && d > 32 && c.dv % 8 == 0 && c.pad == 0 && c.padded_heads;
}

// Whether the sm_90a forward of a case of sm90_cases() runs persistent under
// HSTU_ATTN_SM90_PERSIST=1 (no rab, padded head width 64 / 128; attention_fwd_sm90.cuh).
bool sm90_persist_expected(const Case& c) {
  return !c.rab && std::max(c.dqk, c.dv) <= 128;
}

TEST_P(GpuAttentionSm90, ForwardMatchesCpuReference) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  if (!cuda::attn::sm90_attention_available())
    GTEST_SKIP() << "no sm_90a attention here (not a 9.0 GPU, no kernels built, or HSTU_ATTN_SM80)";
  const Problem pb(GetParam());
  const Outputs ref = cpu_reference(pb);
  const Outputs naive = naive_lowp(pb);
  GpuRun run(pb);
  Ctx cctx = gpu::cuda_ctx(true);
  const HstuAttentionArgs a = run.args();
  Tensor out[2];
  // HSTU_ATTN_SM90=1: the sm_90a kernel also where the dispatch prefers sm80 (rab).
  setenv("HSTU_ATTN_SM90", "1", 1);
  for (int sm80 = 0; sm80 < 2; ++sm80) {
    if (sm80) setenv("HSTU_ATTN_SM80", "1", 1);
    gpu::poison(run.o);
    hstu_attention_fwd(cctx, a, run.o);
    gpu::sync();
    if (sm80) unsetenv("HSTU_ATTN_SM80");
    out[sm80] = gpu::to_host(run.o);
    const double err = max_abs_diff(out[sm80], ref.o), nerr = max_abs_diff(naive.o, ref.o);
    std::printf("err %-40s o %-4s gpu %.3e naive %.3e ratio %.2f (max|ref| %.3e)\n",
                pb.cs.name.c_str(), sm80 ? "sm80" : "sm90", err, nerr, nerr > 0 ? err / nerr : 0.0,
                max_abs(ref.o));
    SCOPED_TRACE(sm80 ? "sm80 forward" : "sm90 forward");
    gpu::expect_lowp_close(out[sm80], ref.o, naive.o, 2.0, 1e-6 + 1e-4 * max_abs(ref.o), "o");
  }
  gpu::poison(run.o);  // the sm90 forward is deterministic too
  hstu_attention_fwd(cctx, a, run.o);
  gpu::sync();
  EXPECT_TRUE(bit_equal(out[0], gpu::to_host(run.o))) << "sm90 o differs between runs";
  // The persistent form forced (HSTU_ATTN_SM90_PERSIST=1; the default takes it for calls with
  // the launch list only) runs where it applies (sm90_persist_expected): counted.
  const int64_t launches = cuda::attn::sm90_persist_launches(cuda::attn::Sm90Pass::kFwd);
  setenv("HSTU_ATTN_SM90_PERSIST", "1", 1);
  gpu::poison(run.o);
  hstu_attention_fwd(cctx, a, run.o);
  gpu::sync();
  unsetenv("HSTU_ATTN_SM90_PERSIST");
  EXPECT_EQ(cuda::attn::sm90_persist_launches(cuda::attn::Sm90Pass::kFwd) - launches,
            sm90_persist_expected(pb.cs) ? 1 : 0);
  EXPECT_TRUE(bit_equal(out[0], gpu::to_host(run.o))) << "sm90 o differs when persistent";
  // Both launch orders forced (HSTU_ATTN_SM90_ORDER; the default is longest-first for bf16 and
  // the grid order for fp16, attn_tile_order.h), each with the persistent form's three modes
  // (HSTU_ATTN_SM90_PERSIST: the default, 0 = one CTA per tile, 1 = always): every tile
  // is computed the same way whichever CTA takes it, so the same bits.
  for (const char* order : {"grid", "seq"}) {
    for (const char* persist : {"", "0", "1"}) {
      setenv("HSTU_ATTN_SM90_ORDER", order, 1);
      if (*persist) setenv("HSTU_ATTN_SM90_PERSIST", persist, 1);
      gpu::poison(run.o);
      hstu_attention_fwd(cctx, a, run.o);
      gpu::sync();
      unsetenv("HSTU_ATTN_SM90_PERSIST");
      unsetenv("HSTU_ATTN_SM90_ORDER");
      EXPECT_TRUE(bit_equal(out[0], gpu::to_host(run.o)))
          << "sm90 o differs in order " << order << ", HSTU_ATTN_SM90_PERSIST=" << persist;
    }
  }
  unsetenv("HSTU_ATTN_SM90");
}

// The persistent sm_90a forward (attention_fwd_sm90.cuh; no rab, padded head widths 64 / 128)
// against the one-CTA-per-tile kernel (HSTU_ATTN_SM90_PERSIST=0) on problems too large for the
// CPU reference: many more tiles than SMs (a CTA runs many tiles, its Q buffers and barrier
// phases cycle many times, the K / V pipeline runs on across tiles) and fewer; full-length and
// jagged batches (uniform lengths, one long sequence among many short ones: tiles of very
// different lengths, tiles past a sequence's end skipped in the grid order), every mask, both
// launch orders, both dtypes, widths 64, 48 and 100 (padded to 64 / 128) and 128. Both outputs
// must be finite everywhere (they are NaN-poisoned before each run) and bit-identical; the
// persistent runs must have launched the persistent kernel (its launch count). Then the step's
// launch plan: the forward twice and the backward on it, the same bits as without.
TEST(GpuAttentionSm90Persist, SameBitsAsOneCtaPerTile) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  if (!cuda::attn::sm90_attention_available())
    GTEST_SKIP() << "no sm_90a attention here (not a 9.0 GPU, no kernels built, or HSTU_ATTN_SM80)";
  struct Shape {
    const char* name;
    int heads, d;
    std::vector<int> lengths;
    bool causal = true, contexts = false, targets = false;
    int group = 1, window = 0;
  };
  std::mt19937 g(11);
  auto uniform = [&](int n, int hi) {
    std::vector<int> v(n);
    for (int& x : v) x = 1 + static_cast<int>(g() % hi);
    return v;
  };
  auto skewed = [](int long_len, int n_short) {
    std::vector<int> v;
    for (int k = 0; k < n_short; ++k) v.push_back(1 + (5 * k + 2) % 40);
    v.insert(v.begin() + n_short / 3, long_len);
    return v;
  };
  const std::vector<Shape> shapes = {
      {"full_4x2048_h4_d128", 4, 128, std::vector<int>(4, 2048)},
      {"full_4x2048_h8_d64", 8, 64, std::vector<int>(4, 2048)},
      {"full_1x300_h1_d128 (3 tiles)", 1, 128, {300}},
      {"full_2x200_h1_d64 (2 tiles)", 1, 64, {200, 200}},
      {"uniform_24x1..2048_h4_d128", 4, 128, uniform(24, 2048)},
      {"uniform_24x1..2048_h4_d64", 4, 64, uniform(24, 2048)},
      {"skewed_3000+200_h2_d128", 2, 128, skewed(3000, 200)},
      {"skewed_3000+200_h2_d64", 2, 64, skewed(3000, 200)},
      {"uniform_d100_ctx_tgt_window", 3, 100, uniform(16, 1500), true, true, true, 2, 300},
      {"uniform_d48_ctx_tgt_window", 3, 48, uniform(16, 1500), true, true, true, 3, 200},
      {"uniform_d128_noncausal_ctx", 2, 128, uniform(12, 1200), false, true},
      {"uniform_d64_targets_window", 2, 64, uniform(20, 1800), true, false, true, 1, 700},
  };
  setenv("HSTU_ATTN_SM90", "1", 1);  // short sequences too
  for (const Shape& sh : shapes) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      Case c;
      c.name = std::string(sh.name) + (dt == DType::kBF16 ? "_bf16" : "_fp16");
      c.dtype = dt;
      c.heads = sh.heads;
      c.dqk = c.dv = sh.d;
      c.lengths = sh.lengths;
      c.causal = sh.causal;
      c.contexts = sh.contexts;
      c.targets = sh.targets;
      c.group = sh.group;
      c.window = sh.window;
      c.padded_heads = true;  // TMA: 16-byte head strides for widths such as 100
      SCOPED_TRACE(c.name);
      // 24 problems in one test: the 1 GiB host and device test arenas rewind per shape.
      gpu::DeviceScope per_shape;
      const Problem pb(c);
      GpuRun run(pb);
      Ctx cctx = gpu::cuda_ctx(true);
      const HstuAttentionArgs a = run.args();
      for (const char* order : {"grid", "seq"}) {
        SCOPED_TRACE(order);
        setenv("HSTU_ATTN_SM90_ORDER", order, 1);
        Tensor one;
        for (const char* persist : {"0", "1"}) {
          if (*persist) setenv("HSTU_ATTN_SM90_PERSIST", persist, 1);
          const int64_t launches = cuda::attn::sm90_persist_launches(cuda::attn::Sm90Pass::kFwd);
          gpu::poison(run.o);
          hstu_attention_fwd(cctx, a, run.o);
          gpu::sync();
          const int64_t ran =
              cuda::attn::sm90_persist_launches(cuda::attn::Sm90Pass::kFwd) - launches;
          unsetenv("HSTU_ATTN_SM90_PERSIST");
          const Tensor o = gpu::to_host(run.o);
          int64_t bad = 0;
          for (int64_t i = 0; i < o.numel(); ++i) bad += std::isfinite(get(o, i)) ? 0 : 1;
          EXPECT_EQ(bad, 0) << "non-finite outputs, HSTU_ATTN_SM90_PERSIST=" << persist;
          EXPECT_EQ(ran, *persist == '0' ? 0 : 1) << "HSTU_ATTN_SM90_PERSIST=" << persist;
          if (*persist == '0') {
            one = o;
          } else {
            EXPECT_TRUE(bit_equal(one, o))
                << "persistent o differs from one CTA per tile, HSTU_ATTN_SM90_PERSIST=" << persist;
          }
        }
        unsetenv("HSTU_ATTN_SM90_ORDER");
      }
      // The step's launch plan (hstu_attention_plan, built once as a model step builds it): two
      // forwards and a backward that take it give the bits of calls that build their own. The
      // plan's counter is zeroed once and each persistent launch leaves it zero (fwd_next_tile),
      // so the second forward skips no tile (its outputs are NaN-poisoned first).
      const int64_t batch = static_cast<int64_t>(sh.lengths.size());
      const Tensor mem =
          gpu::device_alloc(DType::kU8, {hstu_attention_plan_bytes(batch, a.max_seqlen, pb.T)});
      const bool jagged = pb.T < batch * a.max_seqlen;
      const int hdp = sh.d <= 64 ? 64 : 128;
      HstuAttentionArgs ap = a;
      ap.plan = hstu_attention_plan(cctx, a, mem);
      // Orders for jagged batches only; the forward's for bf16 (the fp16 forward keeps the grid).
      EXPECT_EQ(ap.plan.fwd_rows,
                jagged && dt == DType::kBF16 ? cuda::attn::sm90_fwd_block_rows(hdp) : 0);
      EXPECT_EQ(ap.plan.bwd_rows, jagged ? cuda::attn::sm90_bwd_block_rows(hdp) : 0);
      if (jagged) {
        // Raw bytes on the heap (the host test arena holds the CPU problem; two [T, W] fp32 copies
        // of the largest jagged shape would not fit beside it).
        const auto bytes = [](const Tensor& t) {
          std::vector<unsigned char> v(t.nbytes());
          gpu::sync();
          HSTU_CUDA_CHECK(cudaMemcpy(v.data(), t.data, v.size(), cudaMemcpyDeviceToHost));
          return v;
        };
        const std::vector<unsigned char> o_own = bytes(run.o);  // every form above: the same bits
        gpu::poison(run.duvqk);  // also the columns between heads, which no backward writes
        hstu_attention_bwd(cctx, a, run.d_o, run.dq, run.dk, run.dv, run.drab_pos, run.drab_time);
        const std::vector<unsigned char> d_own = bytes(run.duvqk);
        for (int rep = 0; rep < 2; ++rep) {
          const int64_t launches = cuda::attn::sm90_persist_launches(cuda::attn::Sm90Pass::kFwd);
          gpu::poison(run.o);
          hstu_attention_fwd(cctx, ap, run.o);
          gpu::sync();
          EXPECT_EQ(cuda::attn::sm90_persist_launches(cuda::attn::Sm90Pass::kFwd) - launches,
                    dt == DType::kBF16 ? 1 : 0)
              << "the persistent forward runs on the plan's order and counter (bf16)";
          EXPECT_TRUE(o_own == bytes(run.o)) << "o differs with the plan, run " << rep;
        }
        gpu::poison(run.duvqk);
        hstu_attention_bwd(cctx, ap, run.d_o, run.dq, run.dk, run.dv, run.drab_pos, run.drab_time);
        EXPECT_TRUE(d_own == bytes(run.duvqk)) << "dq | dk | dv differ with the plan";
      }
    }
  }
  unsetenv("HSTU_ATTN_SM90");
}

// The cases of sm90_cases() the sm_90a backward takes, and one it sends to sm80 (rab at d 256).
std::vector<Case> sm90_bwd_cases() {
  std::vector<Case> c;
  for (const Case& x : sm90_cases())
    if (sm90_bwd_expected(x) || x.name == "window_rab_d256_bf16") c.push_back(x);
  return c;
}

class GpuAttentionSm90Bwd : public ::testing::TestWithParam<Case> {};

// The backward with HSTU_ATTN_SM90=1: the sm_90a kernels where sm90_bwd_supported() takes the
// call (buckets 64 / 128 / 256, rab up to 128; sm90_bwd_expected), the sm80 kernels otherwise
// (rab at d 256: that case then checks sm80 once more). rab at d 128 has a fused form (the bias
// added in the fused kernel, dS stored, the gradient reduced by its own kernel; its launches
// counted); rab at d 64 runs the split one again. With rab, d_rab_pos and d_rab_time are checked
// too.
// Runs: the split form (HSTU_ATTN_SM90_SPLIT=1) in deterministic mode and with atomic dQ asked
// for, the fused form (HSTU_ATTN_SM90_FUSED=1; at 64 / 128 / 256, with rab at 128) twice in
// deterministic mode (at 64 persistent, HSTU_ATTN_SM90_BWD_PERSIST=1: its launches counted), in
// the grid's launch order, one CTA a tile (HSTU_ATTN_SM90_BWD_PERSIST=0) in both launch orders,
// with the per-call default (persistent only from two tiles' worth of token-heads per SM: these
// problems are below it), and once with atomic dQ asked for (its unordered adds: checked against
// the reference only), and sm80
// (HSTU_ATTN_SM80=1, its error printed beside). The split form is deterministic in both modes and
// the fused one in deterministic mode: those runs are compared bit for bit with the form's first
// run (persistent or not, the adds run in the same ticket order: the same bits).
TEST_P(GpuAttentionSm90Bwd, MatchesCpuReference) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  if (!cuda::attn::sm90_attention_available())
    GTEST_SKIP() << "no sm_90a attention here (not a 9.0 GPU, no kernels built, or HSTU_ATTN_SM80)";
  const Problem pb(GetParam());
  const Outputs ref = cpu_reference(pb);
  const Outputs naive = naive_lowp(pb);
  GpuRun run(pb);
  constexpr double kBwdM = 5.0;
  struct Form {
    const char* name;
    const char* env;                // forces the form
    bool det;                       // ctx.deterministic
    bool same_as_first;             // bit-identical to the form's first run
    bool grid = false;              // HSTU_ATTN_SM90_ORDER=grid (else the longest-first order)
    const char* persist = nullptr;  // HSTU_ATTN_SM90_BWD_PERSIST (unset: the default)
  };
  const Form forms[11] = {
      {"sm90 split", "HSTU_ATTN_SM90_SPLIT", true, false},
      {"sm90 split, atomic asked", "HSTU_ATTN_SM90_SPLIT", false, true},
      {"sm90 split, grid order", "HSTU_ATTN_SM90_SPLIT", true, true, true},
      {"sm90 fused", "HSTU_ATTN_SM90_FUSED", true, false, false, "1"},
      {"sm90 fused again", "HSTU_ATTN_SM90_FUSED", true, true, false, "1"},
      {"sm90 fused, grid order", "HSTU_ATTN_SM90_FUSED", true, true, true, "1"},
      {"sm90 fused, one CTA a tile", "HSTU_ATTN_SM90_FUSED", true, true, false, "0"},
      {"sm90 fused, one CTA a tile, grid order", "HSTU_ATTN_SM90_FUSED", true, true, true, "0"},
      {"sm90 fused, the per-call default", "HSTU_ATTN_SM90_FUSED", true, true},
      {"sm90 fused, atomic asked", "HSTU_ATTN_SM90_FUSED", false, false},
      {"sm80", "HSTU_ATTN_SM80", true, false}};
  setenv("HSTU_ATTN_SM90", "1", 1);
  Outputs first;
  for (const Form& f : forms) {
    const bool sm80 = std::strcmp(f.name, "sm80") == 0;
    const bool fused = std::strncmp(f.name, "sm90 fused", 10) == 0;
    setenv(f.env, "1", 1);
    if (f.grid) setenv("HSTU_ATTN_SM90_ORDER", "grid", 1);
    if (f.persist) setenv("HSTU_ATTN_SM90_BWD_PERSIST", f.persist, 1);
    const int64_t persist_launches = cuda::attn::sm90_persist_launches(cuda::attn::Sm90Pass::kBwd);
    const int64_t rab_launches =
        cuda::attn::sm90_persist_launches(cuda::attn::Sm90Pass::kBwdRabFused);
    const Outputs out = run.run(f.det);
    const int64_t persisted =
        cuda::attn::sm90_persist_launches(cuda::attn::Sm90Pass::kBwd) - persist_launches;
    const int64_t rab_fused =
        cuda::attn::sm90_persist_launches(cuda::attn::Sm90Pass::kBwdRabFused) - rab_launches;
    unsetenv("HSTU_ATTN_SM90_BWD_PERSIST");
    unsetenv("HSTU_ATTN_SM90_ORDER");
    unsetenv(f.env);
    SCOPED_TRACE(f.name);
    // The persistent form runs exactly where it applies (the fused d 64 kernel, ordered adds)
    // and is asked for: switched on, or by default from two tiles' worth of token-heads per SM.
    const bool asked = f.persist
                           ? *f.persist == '1'
                           : int64_t{pb.T} * pb.H >= 2 * 128 * int64_t{cuda::attn::sm90_sm_count()};
    const bool persist_expected = fused && f.det && asked && sm90_bwd_expected(pb.cs) &&
                                  !pb.cs.rab && std::max(pb.cs.dqk, pb.cs.dv) <= 64;
    EXPECT_EQ(persisted, persist_expected ? 1 : 0);
    // The fused rab form runs exactly where fused is asked for, at padded head width 128 up to
    // its longest sequence.
    const int d = std::max(pb.cs.dqk, pb.cs.dv);
    const bool rab_fused_expected = fused && pb.cs.rab && sm90_bwd_expected(pb.cs) && d > 64 &&
                                    d <= 128 && pb.max_len <= cuda::attn::kSm90BwdRabFusedMaxSeqlen;
    EXPECT_EQ(rab_fused, rab_fused_expected ? 1 : 0);
    auto check = [&](const char* what, const Tensor& o, const Tensor& r, const Tensor& nv) {
      check_output(pb, what, sm80 ? "sm80" : (fused ? "sm90f" : "sm90"), o, r, nv, kBwdM);
    };
    check("dq", out.dq, ref.dq, naive.dq);
    check("dk", out.dk, ref.dk, naive.dk);
    check("dv", out.dv, ref.dv, naive.dv);
    if (pb.cs.rab) {
      check("d_rab_pos", out.drab_pos, ref.drab_pos, naive.drab_pos);
      check("d_rab_time", out.drab_time, ref.drab_time, naive.drab_time);
    }
    if (!f.same_as_first) {
      if (f.det) first = out;
    } else if (sm90_bwd_expected(pb.cs)) {  // the same sm_90a form again: same bits
      EXPECT_TRUE(bit_equal(first.dq, out.dq)) << "sm90 dq differs between runs";
      EXPECT_TRUE(bit_equal(first.dk, out.dk)) << "sm90 dk differs between runs";
      EXPECT_TRUE(bit_equal(first.dv, out.dv)) << "sm90 dv differs between runs";
      if (pb.cs.rab) {
        EXPECT_TRUE(bit_equal(first.drab_pos, out.drab_pos)) << "sm90 d_rab_pos differs";
        EXPECT_TRUE(bit_equal(first.drab_time, out.drab_time)) << "sm90 d_rab_time differs";
      }
    }
  }
  unsetenv("HSTU_ATTN_SM90");
}

// The device builder of the sm_90a launch order (attention_sm90.cu) against its host reference
// (attn_tile_order.h), for batches of one to several thousand sequences (several 1024-sequence
// chunks), every resident block size, and twice for the same bits. Runs wherever CUDA does.
TEST(GpuAttentionTileOrder, BuilderMatchesReference) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  std::mt19937 g(5);
  for (int batch : {1, 7, 32, 1000, 2500}) {
    for (int bm : {64, 128, 192}) {
      std::vector<int32_t> cu(batch + 1, 0);
      int mx = 1;
      for (int b = 0; b < batch; ++b) {
        const int len = (g() % 3 == 0) ? static_cast<int>(g() % 17)
                                       : static_cast<int>(g() % (batch > 100 ? 600 : 4097));
        cu[b + 1] = cu[b] + len;
        mx = std::max(mx, len);
      }
      const std::vector<cuda::attn::SeqTile> ref =
          cuda::attn::tile_order_reference(cu, mx, cu.back(), bm);
      const int64_t n = cuda::attn::tile_order_entries(batch, mx, cu.back(), bm);
      ASSERT_EQ(static_cast<int64_t>(ref.size()), n);
      gpu::DevVec<int32_t> dcu(cu), dout(4 * n);
      HstuAttnParamsForTest p;
      p.cu_seqlens = dcu.p;
      p.batch = batch;
      p.max_seqlen = mx;
      p.total_tokens = cu.back();
      for (int rep = 0; rep < 2; ++rep) {
        HSTU_CUDA_CHECK(cudaMemset(dout.p, 0x5a, 16 * size_t(n)));
        cuda::attn::sm90_build_tile_order(p, bm, reinterpret_cast<cuda::attn::SeqTile*>(dout.p), n,
                                          nullptr);
        gpu::sync();
        const std::vector<int32_t> got = dout.host();
        for (int64_t e = 0; e < n; ++e) {
          const cuda::attn::SeqTile& r = ref[e];
          ASSERT_TRUE(got[4 * e] == r.b && got[4 * e + 1] == r.j && got[4 * e + 2] == r.start &&
                      got[4 * e + 3] == r.len)
              << "batch " << batch << " bm " << bm << " entry " << e << ": (" << got[4 * e] << ", "
              << got[4 * e + 1] << ") vs (" << r.b << ", " << r.j << ")";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuAttentionSm90, ::testing::ValuesIn(sm90_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });
INSTANTIATE_TEST_SUITE_P(Cases, GpuAttentionSm90Bwd, ::testing::ValuesIn(sm90_bwd_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// rab cases for the precomputed time buckets (sm80/rab_buckets.cuh): every head count 1..4,
// head widths 25..256, jagged lengths (random, 1, tile multiples and not, longer than a 64-block),
// contexts, targets with groups, windows, non-causal, both dtypes.
std::vector<Case> rab_cases() {
  constexpr DType kB = DType::kBF16, kH = DType::kF16;
  std::vector<Case> c;
  auto add = [&](const char* name, DType dt, int d, int heads, auto&& tweak) {
    Case x;
    x.name = name;
    x.dtype = dt;
    x.dqk = x.dv = d;
    x.heads = heads;
    x.rab = true;
    x.padded_heads = true;
    tweak(x);
    c.push_back(x);
  };
  add("h1_d25_jagged_bf16", kB, 25, 1, [](Case& x) { x.max_len = 300; });
  add("h2_d25_ml_targets_bf16", kB, 25, 2, [](Case& x) {
    x.lengths = {200, 1, 64, 129, 200, 77};
    x.contexts = x.targets = true;
    x.alpha = 1.0f;
  });
  add("h3_d32_window_fp16", kH, 32, 3, [](Case& x) {
    x.window = 31;
    x.max_len = 260;
  });
  add("h4_d64_targets_g3_bf16", kB, 64, 4, [](Case& x) {
    x.targets = true;
    x.group = 3;
    x.lengths = {300, 128, 5, 257};
  });
  add("h2_d50_noncausal_fp16", kH, 50, 2, [](Case& x) { x.causal = false; });
  add("h4_d128_contexts_bf16", kB, 128, 4, [](Case& x) {
    x.contexts = true;
    x.lengths = {513, 200, 1, 64};
  });
  add("h1_d256_all_masks_bf16", kB, 256, 1, [](Case& x) {
    x.contexts = x.targets = true;
    x.group = 2;
    x.window = 60;
    x.max_len = 180;
  });
  add("h2_d64_few_buckets_bf16", kB, 64, 2, [](Case& x) {
    x.time_buckets = 40;  // saturates the last bucket
    x.lengths = {190, 333};
  });
  add("h2_d64_255_buckets_fp16", kH, 64, 2, [](Case& x) {
    x.time_buckets = 255;  // the largest table the u8 buckets take (256 entries)
    x.lengths = {100, 201};
  });
  // More than 32 query blocks per key block: the sm80 dK/dV kernel flushes its time-bucket
  // counters inside the loop (kHistTiles), not only at the end.
  add("h1_d25_long_bf16", kB, 25, 1, [](Case& x) { x.lengths = {1100, 3, 70}; });
  return c;
}

class GpuAttentionRab : public ::testing::TestWithParam<Case> {};

// The sm80 kernels with the precomputed buckets (the default) and with the buckets computed per
// element in the kernels (HSTU_ATTN_RAB_BUCKETS=0): both within the bound of the CPU reference,
// and bit-identical to each other in deterministic mode (same bias values, same gradient sums:
// the buckets are exactly the in-kernel ones). Then the sm_90a kernels (HSTU_ATTN_SM90=1, which
// take rab only with buckets; the backward at head widths 64 / 128 with 16-byte aligned heads,
// sm80 otherwise) against the reference where they run, twice: bit-identical.
TEST_P(GpuAttentionRab, BucketsMatchInKernelBucketsAndReference) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  const Problem pb(GetParam());
  const Outputs ref = cpu_reference(pb);
  const Outputs naive = naive_lowp(pb);
  GpuRun run(pb);
  auto check = [&](const char* what, const char* path, const Tensor& out, const Tensor& r,
                   const Tensor& nv, double m) { check_output(pb, what, path, out, r, nv, m); };
  setenv("HSTU_ATTN_SM80", "1", 1);
  for (bool det : {true, false}) {
    SCOPED_TRACE(det ? "deterministic" : "atomic dQ");
    Outputs out[2];
    for (int k = 0; k < 2; ++k) {
      if (k == 1) setenv("HSTU_ATTN_RAB_BUCKETS", "0", 1);
      out[k] = run.run(det);
      unsetenv("HSTU_ATTN_RAB_BUCKETS");
      const char* path = k == 0 ? "buckets" : "inline";
      SCOPED_TRACE(path);
      check("o", path, out[k].o, ref.o, naive.o, 2.0);
      check("dq", path, out[k].dq, ref.dq, naive.dq, 5.0);
      check("dk", path, out[k].dk, ref.dk, naive.dk, 5.0);
      check("dv", path, out[k].dv, ref.dv, naive.dv, 5.0);
      check("d_rab_pos", path, out[k].drab_pos, ref.drab_pos, naive.drab_pos, 5.0);
      check("d_rab_time", path, out[k].drab_time, ref.drab_time, naive.drab_time, 5.0);
    }
    EXPECT_TRUE(bit_equal(out[0].o, out[1].o)) << "o: buckets vs in-kernel buckets";
    EXPECT_TRUE(bit_equal(out[0].dk, out[1].dk)) << "dk: buckets vs in-kernel buckets";
    EXPECT_TRUE(bit_equal(out[0].dv, out[1].dv)) << "dv: buckets vs in-kernel buckets";
    EXPECT_TRUE(bit_equal(out[0].drab_pos, out[1].drab_pos)) << "d_rab_pos differs";
    EXPECT_TRUE(bit_equal(out[0].drab_time, out[1].drab_time)) << "d_rab_time differs";
    if (det) {
      EXPECT_TRUE(bit_equal(out[0].dq, out[1].dq)) << "dq: buckets vs in-kernel buckets";
      // A step's buckets, computed once for every layer and pass: the same bits.
      const Outputs st = run.run(true, /*step_buckets=*/true);
      EXPECT_TRUE(bit_equal(out[0].o, st.o)) << "o: step buckets vs per-call buckets";
      EXPECT_TRUE(bit_equal(out[0].dq, st.dq)) << "dq: step buckets vs per-call buckets";
      EXPECT_TRUE(bit_equal(out[0].dk, st.dk)) << "dk: step buckets vs per-call buckets";
      EXPECT_TRUE(bit_equal(out[0].dv, st.dv)) << "dv: step buckets vs per-call buckets";
      EXPECT_TRUE(bit_equal(out[0].drab_pos, st.drab_pos)) << "d_rab_pos: step buckets";
      EXPECT_TRUE(bit_equal(out[0].drab_time, st.drab_time)) << "d_rab_time: step buckets";
    }
  }
  unsetenv("HSTU_ATTN_SM80");
  const int d = std::max(pb.cs.dqk, pb.cs.dv);
  if (!cuda::attn::sm90_attention_available() || d <= 32) return;
  setenv("HSTU_ATTN_SM90", "1", 1);
  const Outputs s1 = run.run(true), s2 = run.run(true), s3 = run.run(true, true);
  unsetenv("HSTU_ATTN_SM90");
  SCOPED_TRACE("sm90");
  check("o", "sm90", s1.o, ref.o, naive.o, 2.0);
  check("dq", "sm90", s1.dq, ref.dq, naive.dq, 5.0);
  check("dk", "sm90", s1.dk, ref.dk, naive.dk, 5.0);
  check("dv", "sm90", s1.dv, ref.dv, naive.dv, 5.0);
  check("d_rab_pos", "sm90", s1.drab_pos, ref.drab_pos, naive.drab_pos, 5.0);
  check("d_rab_time", "sm90", s1.drab_time, ref.drab_time, naive.drab_time, 5.0);
  EXPECT_TRUE(bit_equal(s1.o, s2.o)) << "sm90 o differs between runs";
  EXPECT_TRUE(bit_equal(s1.dq, s2.dq)) << "sm90 dq differs between runs";
  EXPECT_TRUE(bit_equal(s1.dk, s2.dk)) << "sm90 dk differs between runs";
  EXPECT_TRUE(bit_equal(s1.dv, s2.dv)) << "sm90 dv differs between runs";
  EXPECT_TRUE(bit_equal(s1.drab_pos, s2.drab_pos)) << "sm90 d_rab_pos differs between runs";
  EXPECT_TRUE(bit_equal(s1.drab_time, s2.drab_time)) << "sm90 d_rab_time differs between runs";
  for (const auto& [name, x, y] :
       {std::tuple{"o", &s1.o, &s3.o}, std::tuple{"dq", &s1.dq, &s3.dq},
        std::tuple{"dk", &s1.dk, &s3.dk}, std::tuple{"dv", &s1.dv, &s3.dv},
        std::tuple{"d_rab_pos", &s1.drab_pos, &s3.drab_pos},
        std::tuple{"d_rab_time", &s1.drab_time, &s3.drab_time}})
    EXPECT_TRUE(bit_equal(*x, *y)) << "sm90 " << name << ": step buckets vs per-call buckets";
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuAttentionRab, ::testing::ValuesIn(rab_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// The naive low-precision implementation agrees with the CPU reference when it does not round:
// guards the tolerance baseline itself (a wrong naive model would make the bound meaningless).
TEST(GpuAttentionBaseline, NaiveModelMatchesReferenceInF32) {
  ArenaScope scope;  // host only: runs without a GPU too
  Case c;
  c.name = "f32";
  c.dtype = DType::kF32;
  c.dqk = c.dv = 24;
  c.contexts = c.targets = c.rab = true;
  c.group = 2;
  c.window = 9;
  c.max_len = 60;
  const Problem pb(c);
  const Outputs ref = cpu_reference(pb), naive = naive_lowp(pb);
  const double tol = 1e-4;
  EXPECT_LT(max_abs_diff(naive.o, ref.o), tol * (1 + max_abs(ref.o)));
  EXPECT_LT(max_abs_diff(naive.dq, ref.dq), tol * (1 + max_abs(ref.dq)));
  EXPECT_LT(max_abs_diff(naive.dk, ref.dk), tol * (1 + max_abs(ref.dk)));
  EXPECT_LT(max_abs_diff(naive.dv, ref.dv), tol * (1 + max_abs(ref.dv)));
  EXPECT_LT(max_abs_diff(naive.drab_pos, ref.drab_pos), tol * (1 + max_abs(ref.drab_pos)));
  EXPECT_LT(max_abs_diff(naive.drab_time, ref.drab_time), tol * (1 + max_abs(ref.drab_time)));
}

TEST(GpuAttentionErrors, RejectsF32Inputs) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  Case c;
  c.dtype = DType::kF32;
  c.dqk = c.dv = 16;
  c.lengths = {5};
  const Problem pb(c);
  GpuRun run(pb);
  Ctx cctx = gpu::cuda_ctx();
  EXPECT_THROW(hstu_attention_fwd(cctx, run.args(), run.o), Error);
}

}  // namespace
}  // namespace hstu::test
