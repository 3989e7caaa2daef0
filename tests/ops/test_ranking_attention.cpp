// test_ranking_attention.cpp — the HSTU attention on ranking layouts, and the ranking pieces
// composed into one differentiable pipeline.
//
// The dense reference builds its mask from token TYPES of the ranking layout (contextual /
// history / candidate, from ranking_layout's counts), written from SPEC §2 for the ranking
// case: every row sees the contextual columns and contextual rows see all contextual and
// history columns (unless the contextual mask is disabled: then they are a causal prefix);
// history is causal; a candidate token sees all non-candidate tokens and the candidate tokens
// of its own group of g up to itself.
//
// Asserts:
//  - the CPU attention on ranking layouts (contextual mask on / disabled / no contextual
//    tokens; target_group_size 1, 2, 4) matches the dense reference;
//  - a token of a candidate changes only the later target rows of its own group (never history
//    rows); with g = 1 or 2 a candidate's action token (its label) changes no other row, while
//    with g > 2 a group holds several candidates and later items see earlier labels (why
//    target_group_size must be 1 or 2 with interleaved action tokens);
//  - tokens -> attention -> candidate rows -> multi-task BCE, backpropagated by hand through
//    every op's backward, matches float64 finite differences for the contextual, item and
//    action embeddings.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/harness.h"
#include "core/context.h"
#include "ops/hstu_attention.h"
#include "ops/jagged.h"
#include "ops/losses.h"

namespace hstu::test {
namespace {

Tensor i32_tensor(const std::vector<int32_t>& v) {
  const Tensor t = alloc(DType::kI32, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) set(t, static_cast<int64_t>(i), v[i]);
  return t;
}

// A ranking batch's token sequence and attention arguments (q = k = v are column blocks of one
// random f64 [T', 3*H*d] buffer).
struct RankingProblem {
  std::vector<int32_t> events, candidates;  // [B+1] event offsets, [B] candidate counts
  int32_t c = 0;                            // contextual tokens
  RankingLayout lay;
  HstuAttentionArgs args;
  Tensor qkv;

  RankingProblem(std::vector<int32_t> ev, std::vector<int32_t> nc, int32_t num_ctx, int g,
                 bool contextual_mask, int heads, int d)
      : events(std::move(ev)), candidates(std::move(nc)), c(num_ctx) {
    ranking_layout(events, candidates, c, true, 8192, lay);
    const int64_t t = lay.token_offsets.back(), hd = int64_t(heads) * d;
    qkv = alloc(DType::kF64, {t, 3 * hd});
    fill_uniform(qkv, -1, 1);
    args.q = qkv.cols(0, hd);
    args.k = qkv.cols(hd, 2 * hd);
    args.v = qkv.cols(2 * hd, 3 * hd);
    args.cu_seqlens = i32_tensor(lay.token_offsets);
    if (contextual_mask) args.num_contexts = i32_tensor(lay.num_contexts);
    args.num_targets = i32_tensor(lay.num_targets);
    args.max_seqlen = lay.max_seqlen;
    args.num_heads = heads;
    args.alpha = static_cast<float>(1.0 / std::sqrt(double(d)));
    args.scale = 1.0f / static_cast<float>(lay.max_seqlen);
    args.target_group_size = g;
  }
  int64_t tokens() const { return lay.token_offsets.back(); }
};

// The ranking mask from token types (see the file comment).
bool ranking_allowed(int i, int j, int len, int c, int nc2, int g, bool contextual_mask) {
  const int hist_end = len - nc2;
  const bool cand_i = i >= hist_end, cand_j = j >= hist_end;
  if (cand_j) return cand_i && j <= i && (i - hist_end) / g == (j - hist_end) / g;
  if (contextual_mask && (j < c || i < c)) return true;
  if (cand_i) return true;
  return j <= i;
}

std::vector<double> dense_reference(const RankingProblem& p, bool contextual_mask) {
  const HstuAttentionArgs& a = p.args;
  const int h = a.num_heads, d = a.head_dim_qk();
  std::vector<double> out(static_cast<size_t>(p.tokens()) * h * d, 0.0);
  for (size_t b = 0; b + 1 < p.lay.token_offsets.size(); ++b) {
    const int start = p.lay.token_offsets[b], len = p.lay.token_offsets[b + 1] - start;
    for (int head = 0; head < h; ++head) {
      for (int i = 0; i < len; ++i) {
        for (int j = 0; j < len; ++j) {
          if (!ranking_allowed(i, j, len, p.c, p.lay.num_targets[b], a.target_group_size,
                               contextual_mask))
            continue;
          long double qk = 0;
          for (int e = 0; e < d; ++e) {
            qk += static_cast<long double>(get(a.q, int64_t(start + i) * h * d + head * d + e)) *
                  get(a.k, int64_t(start + j) * h * d + head * d + e);
          }
          const long double s = a.alpha * qk, silu = s / (1 + std::exp(-s));
          for (int e = 0; e < d; ++e) {
            out[(size_t(start + i) * h + head) * d + e] += static_cast<double>(
                a.scale * silu * get(a.v, int64_t(start + j) * h * d + head * d + e));
          }
        }
      }
    }
  }
  return out;
}

TEST(RankingAttention, MasksMatchDenseReference) {
  struct Config {
    int c, g;
    bool contextual_mask;
  };
  const Config configs[] = {{3, 1, true}, {3, 2, true}, {3, 4, true}, {3, 1, false},
                            {0, 1, true}, {2, 3, true}, {1, 2, false}};
  for (const Config& cfg : configs) {
    SCOPED_TRACE(testing::Message()
                 << "C=" << cfg.c << " g=" << cfg.g << " contextual_mask=" << cfg.contextual_mask);
    ArenaScope scope;
    Ctx ctx = cpu_ctx();
    // Samples of 6, 1, 0 (empty), 9 events with 3, 0, 0, 5 candidates.
    RankingProblem p({0, 6, 7, 7, 16}, {3, 0, 0, 5}, cfg.c, cfg.g, cfg.contextual_mask, 2, 4);
    const Tensor o = alloc(DType::kF64, {p.tokens(), 8});
    poison(o);
    hstu_attention_fwd(ctx, p.args, o);
    const std::vector<double> want = dense_reference(p, cfg.contextual_mask);
    for (int64_t i = 0; i < o.numel(); ++i) {
      ASSERT_NEAR(get(o, i), want[i], 1e-13) << "element " << i << " seed " << test_seed();
    }
  }
}

// Output rows of `o` that differ from `base` (any column).
std::vector<int64_t> changed_rows(const Tensor& o, const Tensor& base) {
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < o.dim(0); ++r) {
    for (int64_t c = 0; c < o.dim(1); ++c) {
      if (get(o, r * o.dim(1) + c) != get(base, r * o.dim(1) + c)) {
        rows.push_back(r);
        break;
      }
    }
  }
  return rows;
}

TEST(RankingAttention, CandidatesAreScoredIndependently) {
  // One sample: C = 2, 3 history events, 4 candidates: tokens [c c | i a i a i a | 4 x (i a)],
  // candidate m's item token at 8 + 2m, its action token at 9 + 2m.
  for (int g : {1, 2, 4, 3}) {
    SCOPED_TRACE(testing::Message() << "g=" << g);
    ArenaScope scope;
    Ctx ctx = cpu_ctx();
    RankingProblem p({0, 7}, {4}, 2, g, true, 1, 3);
    const Tensor base = alloc(DType::kF64, {16, 3}), o = alloc(DType::kF64, {16, 3});
    hstu_attention_fwd(ctx, p.args, base);
    // Perturb one token's q, k, v and list which output rows change.
    const auto perturb = [&](int64_t token) {
      const Tensor saved = clone(p.qkv.rows(token, token + 1));
      fill_uniform(p.qkv.rows(token, token + 1), 2, 3);
      hstu_attention_fwd(ctx, p.args, o);
      for (int64_t e = 0; e < saved.numel(); ++e) set(p.qkv, token * 9 + e, get(saved, e));
      return changed_rows(o, base);
    };
    for (int m = 0; m < 4; ++m) {
      const int64_t item = 8 + 2 * m, action = 9 + 2 * m;
      // The action token (the label) changes itself and the later tokens of its group: only
      // itself for g = 1, 2; for g > 2 also later candidates' items (a label leak).
      const std::vector<int64_t> from_action = perturb(action);
      std::vector<int64_t> want;
      for (int64_t r = action; r < 16 && (r - 8) / g == (action - 8) / g; ++r) want.push_back(r);
      EXPECT_EQ(from_action, want) << "action of candidate " << m;
      if (g <= 2) {
        EXPECT_EQ(from_action, std::vector<int64_t>{action});
      }
      // The item token changes itself and, within its group, the later target tokens only.
      for (int64_t r : perturb(item)) {
        EXPECT_GE(r, item) << "item of candidate " << m << " changed an earlier row";
        EXPECT_EQ((r - 8) / g, (item - 8) / g) << "item of candidate " << m;
      }
    }
  }
}

TEST(RankingAttention, PipelineGradientsMatchFiniteDifferences) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t d = 6, k = 3, c = 2;
  const std::vector<int32_t> events = {0, 5, 8, 8, 12}, nc = {2, 1, 0, 3};
  const int64_t b = 4, t = 12;
  RankingLayout lay;
  ranking_layout(events, nc, static_cast<int32_t>(c), true, 8192, lay);
  const int64_t tt = lay.token_offsets.back(), n = lay.candidate_offsets.back();
  const Tensor ev_off = i32_tensor(events), tok_off = i32_tensor(lay.token_offsets);
  const Tensor cand_off = i32_tensor(lay.candidate_offsets);
  const Tensor ctx_emb = alloc(DType::kF64, {b * c, d}), item = alloc(DType::kF64, {t, d});
  const Tensor action = alloc(DType::kF64, {t, d});
  for (const Tensor& x : {ctx_emb, item, action}) fill_uniform(x, -1, 1);
  const Tensor labels = alloc(DType::kI32, {n});
  fill_int(labels, 0, 8);

  HstuAttentionArgs a;
  const Tensor x = alloc(DType::kF64, {tt, d}), out_off = alloc(DType::kI32, {b + 1});
  a.q = a.k = a.v = x;  // one head of width d; q = k = v = the token embeddings
  a.cu_seqlens = tok_off;
  a.num_contexts = i32_tensor(lay.num_contexts);
  a.num_targets = i32_tensor(lay.num_targets);
  a.max_seqlen = lay.max_seqlen;
  a.alpha = 0.7f;
  a.scale = 1.0f / static_cast<float>(lay.max_seqlen);
  const Tensor y = alloc(DType::kF64, {tt, d}), cand = alloc(DType::kF64, {n, d});
  const Tensor loss = alloc(DType::kF64, {1});
  const auto forward = [&] {
    ranking_tokens_fwd(ctx, ctx_emb, item, action, ev_off, static_cast<int32_t>(c), x, out_off);
    hstu_attention_fwd(ctx, a, y);
    gather_candidate_rows(ctx, y, tok_off, cand_off, 2, cand);
    bce_multitask(ctx, cand.cols(0, k), labels, loss, Tensor(), 1.0 / double(n));
    return get(loss, 0);
  };
  forward();
  // Backward by hand: BCE -> candidate rows -> attention (q, k, v all x) -> tokens.
  const Tensor dcand = alloc(DType::kF64, {n, d});
  fill_value(dcand, 0);
  bce_multitask(ctx, cand.cols(0, k), labels, loss, dcand.cols(0, k), 1.0 / double(n));
  const Tensor dy = alloc(DType::kF64, {tt, d});
  gather_candidate_rows_bwd(ctx, dcand, tok_off, cand_off, 2, dy);
  const Tensor dq = alloc(DType::kF64, {tt, d}), dk = alloc(DType::kF64, {tt, d});
  const Tensor dv = alloc(DType::kF64, {tt, d});
  hstu_attention_bwd(ctx, a, dy, dq, dk, dv, Tensor(), Tensor());
  const Tensor dx = alloc(DType::kF64, {tt, d});
  for (int64_t i = 0; i < dx.numel(); ++i) set(dx, i, get(dq, i) + get(dk, i) + get(dv, i));
  const Tensor d_ctx = alloc(DType::kF64, {b * c, d}), d_item = alloc(DType::kF64, {t, d});
  const Tensor d_action = alloc(DType::kF64, {t, d});
  ranking_tokens_bwd(ctx, dx, ev_off, static_cast<int32_t>(c), d_ctx, d_item, d_action);
  expect_grad_matches_fd(forward, ctx_emb, d_ctx, "d_ctx", 48);
  expect_grad_matches_fd(forward, item, d_item, "d_item", 72);
  expect_grad_matches_fd(forward, action, d_action, "d_action", 72);
  // Candidate action tokens reach no candidate row: their gradient is exactly zero.
  for (int64_t s = 0; s < b; ++s) {
    for (int64_t e = events[s + 1] - nc[s]; e < events[s + 1]; ++e) {
      for (int64_t col = 0; col < d; ++col) EXPECT_EQ(get(d_action, e * d + col), 0.0) << e;
    }
  }
}

}  // namespace
}  // namespace hstu::test
