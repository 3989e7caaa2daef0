// test_hstu_attention.cpp — the CPU HSTU attention against a naive dense reference (forward),
// float64 finite differences (backward, rab gradients included) and thread-count invariance.
//
// The reference pads each sequence to [N, N], builds the dense score matrix, the mask from the
// test's own set construction (spec_mask, test_hstu_mask.cpp) and the dense rab from pos_w,
// time_w and the timestamps, all in long double; the op under test reads q, k, v as strided
// column views of one fused u | v | q | k buffer, exactly as the layer passes them, optionally
// with each head of v, q, k padded to a wider head stride (the padding holds random values the
// op must not read, and output padding must stay untouched).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/harness.h"
#include "core/context.h"
#include "ops/hstu_attention.h"

namespace hstu::test {

std::vector<uint8_t> spec_mask(int L, int c, int t, int g, int w, bool causal);  // test_hstu_mask

namespace {

enum class MaskKind {
  kCausal,
  kContext,
  kTargets,
  kTargetGroups,
  kContextTargets,
  kWindow,
  kNonCausal
};

const char* mask_name(MaskKind m) {
  switch (m) {
    case MaskKind::kCausal:
      return "causal";
    case MaskKind::kContext:
      return "context";
    case MaskKind::kTargets:
      return "targets";
    case MaskKind::kTargetGroups:
      return "target_groups";
    case MaskKind::kContextTargets:
      return "context_targets";
    case MaskKind::kWindow:
      return "window";
    case MaskKind::kNonCausal:
      return "non_causal";
  }
  return "?";
}
constexpr MaskKind kAllMasks[] = {
    MaskKind::kCausal,         MaskKind::kContext, MaskKind::kTargets,  MaskKind::kTargetGroups,
    MaskKind::kContextTargets, MaskKind::kWindow,  MaskKind::kNonCausal};

struct Shape {
  std::vector<int> lengths;
  int heads = 1, dqk = 4, dv = 4;
  bool rab = true;
  int pad = 0;  // extra columns per head of v, q, k (and of o in the forward test)
};

// One random jagged problem: the fused uvqk buffer with q, k, v views, the mask tensors, the rab.
struct Problem {
  HstuAttentionArgs args;
  Tensor uvqk;  // [T, H*dv + H*(dv+pad) + 2*H*(dqk+pad)]: u | v | q | k
  std::vector<int> len, ctx, tgt;
  int total = 0;

  Problem(const Shape& s, MaskKind mask, DType dt) : len(s.lengths) {
    const int B = static_cast<int>(len.size()), H = s.heads;
    for (int L : len) total += L;
    std::vector<int> cu(B + 1, 0);
    for (int b = 0; b < B; ++b) cu[b + 1] = cu[b] + len[b];
    const bool want_ctx = mask == MaskKind::kContext || mask == MaskKind::kContextTargets ||
                          mask == MaskKind::kWindow || mask == MaskKind::kNonCausal;
    const bool want_tgt = mask == MaskKind::kTargets || mask == MaskKind::kTargetGroups ||
                          mask == MaskKind::kContextTargets || mask == MaskKind::kWindow;
    std::uniform_int_distribution<int> coin(0, 3);
    for (int b = 0; b < B; ++b) {
      ctx.push_back(want_ctx ? std::min(coin(rng()), len[b]) : 0);
      tgt.push_back(want_tgt ? std::min(1 + coin(rng()), len[b] - ctx[b]) : 0);
    }
    HstuAttentionArgs& a = args;
    a.num_heads = H;
    a.causal = mask != MaskKind::kNonCausal;
    a.target_group_size = mask == MaskKind::kTargetGroups     ? 3
                          : mask == MaskKind::kContextTargets ? 2
                                                              : 1;
    a.max_attn_len = mask == MaskKind::kWindow ? 2 : 0;
    a.alpha = static_cast<float>(1.0 / std::sqrt(double(s.dqk)));
    a.max_seqlen = *std::max_element(len.begin(), len.end());
    a.scale = 1.0f / static_cast<float>(a.max_seqlen + 3);
    a.cu_seqlens = alloc(DType::kI32, {B + 1});
    for (int b = 0; b <= B; ++b) set(a.cu_seqlens, b, cu[b]);
    if (want_ctx) a.num_contexts = alloc(DType::kI32, {B});
    if (want_tgt) a.num_targets = alloc(DType::kI32, {B});
    for (int b = 0; b < B; ++b) {
      if (want_ctx) set(a.num_contexts, b, ctx[b]);
      if (want_tgt) set(a.num_targets, b, tgt[b]);
    }
    const int64_t hu = int64_t(H) * s.dv, hv = int64_t(H) * (s.dv + s.pad),
                  hqk = int64_t(H) * (s.dqk + s.pad);
    uvqk = alloc(dt, {total, hu + hv + 2 * hqk});
    fill_uniform(uvqk, -1, 1);
    a.v = uvqk.cols(hu, hu + hv);
    a.q = uvqk.cols(hu + hv, hu + hv + hqk);
    a.k = uvqk.cols(hu + hv + hqk, hu + hv + 2 * hqk);
    if (s.pad > 0) {
      a.dim_qk = s.dqk;
      a.dim_v = s.dv;
    }
    if (s.rab) {
      const int P = std::max(2, a.max_seqlen - 2);  // shorter than some sequences: clamping used
      a.rab_pos = alloc(dt, {2 * P - 1});
      a.rab_time = alloc(dt, {41});  // NB = 40: long gaps clamp
      fill_uniform(a.rab_pos, -0.5, 0.5);
      fill_uniform(a.rab_time, -0.5, 0.5);
      a.ts_key = alloc(DType::kI64, {total});
      a.ts_query = alloc(DType::kI64, {total});
      // Chronological timestamps with gaps from seconds to years; query = the next item's time.
      std::uniform_real_distribution<double> log_gap(0, 20);
      for (int b = 0; b < B; ++b) {
        int64_t now = 1'000'000'000;
        for (int i = 0; i < len[b]; ++i) {
          set(a.ts_key, cu[b] + i, static_cast<double>(now));
          now += static_cast<int64_t>(std::exp(log_gap(rng())));
          set(a.ts_query, cu[b] + i, static_cast<double>(now));
        }
      }
    }
  }
  int dqk() const { return args.head_dim_qk(); }
  int dv() const { return args.head_dim_v(); }
};

// Dense reference: O [T, H*dv] in long double, each sequence padded to [N, N].
std::vector<long double> dense_reference(const Problem& p) {
  const HstuAttentionArgs& a = p.args;
  const int H = a.num_heads, dqk = p.dqk(), dv = p.dv(), N = a.max_seqlen;
  const int64_t sq = head_stride(a.q, H), sk = head_stride(a.k, H), sv = head_stride(a.v, H);
  std::vector<long double> out(static_cast<size_t>(p.total) * H * dv, 0);
  int start = 0;
  for (size_t b = 0; b < p.len.size(); ++b) {
    const int L = p.len[b];
    // Padded mask [N, N]: the sequence's own mask in the top-left corner.
    std::vector<uint8_t> m(static_cast<size_t>(N) * N, 0);
    const auto ms = spec_mask(L, p.ctx[b], p.tgt[b], a.target_group_size, a.max_attn_len, a.causal);
    for (int i = 0; i < L; ++i) {
      for (int j = 0; j < L; ++j) m[size_t(i) * N + j] = ms[size_t(i) * L + j];
    }
    // Dense rab [N, N] (zero where padded).
    std::vector<long double> rab(static_cast<size_t>(N) * N, 0);
    if (a.has_rab()) {
      const int np = static_cast<int>(a.rab_pos.shape[0]), P = (np + 1) / 2;
      const int nb = static_cast<int>(a.rab_time.shape[0]) - 1;
      for (int i = 0; i < L; ++i) {
        for (int j = 0; j < L; ++j) {
          const double dt = get(a.ts_query, start + i) - get(a.ts_key, start + j);
          const int bucket = std::clamp(
              static_cast<int>(std::floor(std::log(std::max(std::fabs(dt), 1.0)) / 0.301)), 0, nb);
          rab[size_t(i) * N + j] =
              get(a.rab_pos, std::clamp(P - 1 + j - i, 0, np - 1)) + get(a.rab_time, bucket);
        }
      }
    }
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) {
          if (!m[size_t(i) * N + j]) continue;
          long double qk = 0;
          for (int e = 0; e < dqk; ++e) {
            qk += static_cast<long double>(get(a.q, (start + i) * H * sq + h * sq + e)) *
                  get(a.k, (start + j) * H * sk + h * sk + e);
          }
          const long double s = a.alpha * (qk + rab[size_t(i) * N + j]);
          const long double silu = s / (1 + std::exp(-s));
          for (int e = 0; e < dv; ++e) {
            out[(size_t(start + i) * H + h) * dv + e] +=
                a.scale * silu * get(a.v, (start + j) * H * sv + h * sv + e);
          }
        }
      }
    }
    start += L;
  }
  return out;
}

std::string describe(const Shape& s, MaskKind m, DType dt) {
  std::string r = std::string(mask_name(m)) + " " + dtype_name(dt) +
                  " H=" + std::to_string(s.heads) + " dqk=" + std::to_string(s.dqk) +
                  " dv=" + std::to_string(s.dv) + " pad=" + std::to_string(s.pad) +
                  (s.rab ? " rab" : " no-rab") + " lengths=";
  for (int L : s.lengths) r += std::to_string(L) + ",";
  return r + " seed=" + std::to_string(test_seed());
}

// Random lengths in [1, max_len], the first one forced to 1.
std::vector<int> random_lengths(int batch, int max_len) {
  std::uniform_int_distribution<int> d(1, max_len);
  std::vector<int> l(batch);
  for (int& x : l) x = d(rng());
  l[0] = 1;
  return l;
}

void check_forward(const Shape& s, MaskKind mask, DType dt) {
  ArenaScope scope;
  Problem p(s, mask, dt);
  const int so = s.dv + s.pad;  // o's head stride
  Tensor o = alloc(dt, {p.total, int64_t(s.heads) * so});
  poison(o);
  Ctx ctx = cpu_ctx();
  hstu_attention_fwd(ctx, p.args, o);
  const auto want = dense_reference(p);
  const double tol = dt == DType::kF64 ? 1e-12 : 2e-6;
  double worst = 0;
  for (int64_t t = 0; t < p.total; ++t)
    for (int h = 0; h < s.heads; ++h)
      for (int e = 0; e < so; ++e) {
        const double got = get(o, (t * s.heads + h) * so + e);
        if (e >= s.dv) {  // padding: never written
          ASSERT_TRUE(std::isnan(got)) << "o padding written, " << describe(s, mask, dt);
          continue;
        }
        const double ref = static_cast<double>(want[(t * s.heads + h) * s.dv + e]);
        const double err = std::fabs(got - ref) / (1 + std::fabs(ref));
        worst = std::isnan(err) ? INFINITY : std::max(worst, err);
      }
  EXPECT_LE(worst, tol) << describe(s, mask, dt);
}

}  // namespace

TEST(HstuAttentionCpu, ForwardMatchesDenseReference) {
  for (MaskKind mask : kAllMasks) {
    for (DType dt : {DType::kF32, DType::kF64}) {
      for (bool rab : {false, true}) {
        check_forward({random_lengths(6, 13), 2, 5, 5, rab}, mask, dt);  // dqk == dv
        check_forward({random_lengths(4, 9), 3, 4, 6, rab}, mask, dt);   // dqk != dv
        check_forward({random_lengths(3, 20), 1, 7, 3, rab}, mask, dt);
        check_forward({random_lengths(5, 11), 2, 5, 3, rab, 3}, mask, dt);  // padded heads
      }
    }
  }
}

TEST(HstuAttentionCpu, ForwardSkipsEmptySequences) {
  ArenaScope scope;
  Problem p({{3, 1, 4}, 2, 3, 3, true}, MaskKind::kContextTargets, DType::kF64);
  // Same rows, but an empty sequence inserted in the middle: cu [0, 3, 3, 4, 8].
  HstuAttentionArgs a = p.args;
  a.cu_seqlens = alloc(DType::kI32, {5});
  const int cu[] = {0, 3, 3, 4, 8};
  for (int b = 0; b < 5; ++b) set(a.cu_seqlens, b, cu[b]);
  a.num_contexts = alloc(DType::kI32, {4});
  a.num_targets = alloc(DType::kI32, {4});
  const int c[] = {p.ctx[0], 0, p.ctx[1], p.ctx[2]}, t[] = {p.tgt[0], 0, p.tgt[1], p.tgt[2]};
  for (int b = 0; b < 4; ++b) {
    set(a.num_contexts, b, c[b]);
    set(a.num_targets, b, t[b]);
  }
  Tensor o1 = alloc(DType::kF64, {8, 6}), o2 = alloc(DType::kF64, {8, 6});
  poison(o1);
  poison(o2);
  Ctx ctx = cpu_ctx();
  hstu_attention_fwd(ctx, p.args, o1);
  hstu_attention_fwd(ctx, a, o2);
  EXPECT_EQ(max_abs_diff(o1, o2), 0.0);
}

// Time gaps at every bucket boundary (both signs, +-2 around e^(0.301 b)) and the int64 extremes:
// the op's buckets must agree with the log formula of the dense reference on all of them.
TEST(HstuAttentionCpu, RabTimeBucketsExactAtBoundaries) {
  for (int nb : {40, 128}) {
    std::vector<int64_t> gaps = {0, 1, -1, INT64_MAX, INT64_MIN, (int64_t(1) << 53) + 1};
    for (int b = 0; b <= nb + 2; ++b) {
      const int64_t c = std::llround(std::exp(0.301 * b));
      for (int64_t d = -2; d <= 2; ++d) {
        gaps.push_back(c + d);
        gaps.push_back(-(c + d));
      }
    }
    ArenaScope scope;
    const int len = 50, batch = static_cast<int>((gaps.size() + len - 1) / len);
    Problem p({std::vector<int>(batch, len), 1, 2, 2, true}, MaskKind::kCausal, DType::kF64);
    p.args.rab_time = alloc(DType::kF64, {nb + 1});
    fill_uniform(p.args.rab_time, -1, 1);
    for (int64_t r = 0; r < p.total; ++r) {
      set(p.args.ts_key, r, 0);  // dt = ts_query[i] for every key of row i
      static_cast<int64_t*>(p.args.ts_query.data)[r] = gaps[r % gaps.size()];  // exact int64
    }
    Tensor o = alloc(DType::kF64, {p.total, 2});
    poison(o);
    Ctx ctx = cpu_ctx();
    hstu_attention_fwd(ctx, p.args, o);
    const auto want = dense_reference(p);
    for (int64_t i = 0; i < o.numel(); ++i) {
      ASSERT_NEAR(get(o, i), static_cast<double>(want[i]), 1e-12)
          << "NB=" << nb << " dt=" << gaps[(i / 2) % gaps.size()];
    }
  }
}

TEST(HstuAttentionCpu, BackwardMatchesFiniteDifferences) {
  for (MaskKind mask : kAllMasks) {
    for (const Shape& s :
         {Shape{random_lengths(4, 10), 2, 3, 3, true}, Shape{random_lengths(3, 8), 1, 4, 2, true},
          Shape{random_lengths(3, 7), 2, 3, 2, true, 2}}) {
      SCOPED_TRACE(describe(s, mask, DType::kF64));
      ArenaScope scope;
      Problem p(s, mask, DType::kF64);
      const HstuAttentionArgs& a = p.args;
      const int64_t T = p.total, hu = int64_t(s.heads) * s.dv, hv = a.v.shape[1];
      // o and its gradient are unpadded whatever the padding of q, k, v (the layer's layout).
      Tensor o = alloc(DType::kF64, {T, hu}), g = alloc(DType::kF64, {T, hu});
      fill_uniform(g, -1, 1);
      // Gradients land in a fused buffer too (strided views), like the layer's d_uvqk.
      Tensor duvqk = alloc(DType::kF64, {T, p.uvqk.shape[1]});
      poison(duvqk);
      const Tensor dv = duvqk.cols(hu, hu + hv), dq = duvqk.cols(hu + hv, hu + hv + a.q.shape[1]),
                   dk = duvqk.cols(hu + hv + a.q.shape[1], duvqk.shape[1]);
      // Head padding of the gradients starts at 0; its finite-difference gradient is 0 (the op
      // must not read q, k, v padding), so the checks below also fail if the op writes there.
      for (const Tensor* x : {&dq, &dk, &dv}) {
        const int64_t stride = head_stride(*x, s.heads), w = x == &dv ? s.dv : s.dqk;
        for (int64_t t = 0; t < T; ++t)
          for (int h = 0; h < s.heads; ++h)
            for (int64_t e = w; e < stride; ++e) set(*x, (t * s.heads + h) * stride + e, 0.0);
      }
      Tensor drp = alloc(DType::kF64, {a.rab_pos.shape[0]});
      Tensor drt = alloc(DType::kF64, {a.rab_time.shape[0]});
      fill_value(drp, 0);
      fill_value(drt, 0);
      Ctx ctx = cpu_ctx();
      hstu_attention_bwd(ctx, a, g, dq, dk, dv, drp, drt);
      const Tensor du = duvqk.cols(0, hu);  // not a gradient of this op: must stay poisoned
      for (int64_t i = 0; i < du.numel(); ++i)
        ASSERT_TRUE(std::isnan(get(du, i))) << "du[" << i << "]";
      const auto loss = [&] {
        hstu_attention_fwd(ctx, a, o);
        return dot(g, o);
      };
      expect_grad_matches_fd(loss, a.q, dq, "dq");
      expect_grad_matches_fd(loss, a.k, dk, "dk");
      expect_grad_matches_fd(loss, a.v, dv, "dv");
      expect_grad_matches_fd(loss, a.rab_pos, drp, "d_rab_pos");
      expect_grad_matches_fd(loss, a.rab_time, drt, "d_rab_time");
    }
  }
}

TEST(HstuAttentionCpu, BackwardIndependentOfThreadCountAndAccumulatesRab) {
  ArenaScope scope;
  const Shape s{random_lengths(37, 60), 2, 8, 8, true};
  Problem p(s, MaskKind::kContextTargets, DType::kF32);
  const int64_t T = p.total, hv = int64_t(s.heads) * s.dv, hqk = int64_t(s.heads) * s.dqk;
  Tensor g = alloc(DType::kF32, {T, hv});
  fill_uniform(g, -1, 1);
  struct Result {
    Tensor o, dq, dk, dv, drp, drt;
  };
  const auto run = [&](int threads) {
    Result r{alloc(DType::kF32, {T, hv}),
             alloc(DType::kF32, {T, hqk}),
             alloc(DType::kF32, {T, hqk}),
             alloc(DType::kF32, {T, hv}),
             alloc(DType::kF32, {p.args.rab_pos.shape[0]}),
             alloc(DType::kF32, {p.args.rab_time.shape[0]})};
    for (const Tensor* t : {&r.o, &r.dq, &r.dk, &r.dv}) poison(*t);
    fill_value(r.drp, 0);
    fill_value(r.drt, 0);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Ctx ctx = cpu_ctx();
    hstu_attention_fwd(ctx, p.args, r.o);
    hstu_attention_bwd(ctx, p.args, g, r.dq, r.dk, r.dv, r.drp, r.drt);
    omp_set_num_threads(saved);
    return r;
  };
  const Result one = run(1), two = run(2), three = run(3);
  const auto same_bits = [](const Tensor& x, const Tensor& y) {
    return std::memcmp(x.data, y.data, x.nbytes()) == 0;
  };
  for (const Result* r : {&two, &three}) {
    EXPECT_TRUE(same_bits(one.o, r->o));
    EXPECT_TRUE(same_bits(one.dq, r->dq));
    EXPECT_TRUE(same_bits(one.dk, r->dk));
    EXPECT_TRUE(same_bits(one.dv, r->dv));
    EXPECT_TRUE(same_bits(one.drp, r->drp));
    EXPECT_TRUE(same_bits(one.drt, r->drt));
  }
  EXPECT_GT(max_abs(one.drp), 0.0);
  // d_rab is accumulated: a second backward into the same buffers doubles it.
  Tensor dq = alloc(DType::kF32, {T, hqk}), dk = alloc(DType::kF32, {T, hqk}),
         dv = alloc(DType::kF32, {T, hv});
  Ctx ctx = cpu_ctx();
  hstu_attention_bwd(ctx, p.args, g, dq, dk, dv, one.drp, one.drt);
  for (int64_t i = 0; i < one.drp.numel(); ++i) {
    EXPECT_NEAR(get(one.drp, i), 2 * get(two.drp, i), 1e-6 * (1 + std::fabs(get(two.drp, i))));
  }
  for (int64_t i = 0; i < one.drt.numel(); ++i) {
    EXPECT_NEAR(get(one.drt, i), 2 * get(two.drt, i), 1e-6 * (1 + std::fabs(get(two.drt, i))));
  }
}

TEST(HstuAttentionCpu, RejectsInconsistentMasks) {
  ArenaScope scope;
  Problem p({{4, 5}, 1, 2, 2, false}, MaskKind::kTargets, DType::kF32);
  Tensor o = alloc(DType::kF32, {p.total, 2});
  Ctx ctx = cpu_ctx();
  HstuAttentionArgs a = p.args;
  a.causal = false;  // non-causal is defined only without targets
  EXPECT_THROW(hstu_attention_fwd(ctx, a, o), Error);
  a = p.args;
  set(a.num_targets, 0, 5);  // more targets than tokens
  EXPECT_THROW(hstu_attention_fwd(ctx, a, o), Error);
}

}  // namespace hstu::test
