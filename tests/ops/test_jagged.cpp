// test_jagged.cpp — the ranking jagged ops (ranking_tokens_fwd/_bwd, gather_candidate_rows/_bwd)
// and the host ranking layout.
//
// Asserts:
//  - the token sequence of a hand-made batch is exactly [ctx | item, action, ...] row by row
//    (with and without action tokens, with and without contextual tokens, an empty sample),
//    out_offsets are b*C + k*o_b, poisoned outputs are fully written, strided views work and
//    nothing is written outside them;
//  - both backward passes match float64 finite differences of <g, f(x)> and the candidate
//    scatter zeroes every non-candidate row of a poisoned dx;
//  - ranking_layout gives the recsys-examples positions (contextual 0..C-1, history counting on,
//    all candidate tokens the first post-history slot, clamped to NB-1), the same positions per
//    feature (which the op interleaves into the token positions), targets = k*nc and the
//    offsets the ops produce;
//  - bad offsets / shapes raise hstu::Error.
#include <gtest/gtest.h>

#include <vector>

#include "common/harness.h"
#include "core/context.h"
#include "ops/jagged.h"

namespace hstu::test {
namespace {

Tensor i32_tensor(const std::vector<int32_t>& v) {
  const Tensor t = alloc(DType::kI32, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) set(t, static_cast<int64_t>(i), v[i]);
  return t;
}

// Row r of a 2-D tensor equals row s of another.
void expect_row(const Tensor& a, int64_t r, const Tensor& b, int64_t s, const char* what) {
  const int64_t d = a.dim(1);
  for (int64_t c = 0; c < d; ++c) {
    ASSERT_EQ(get(a, r * d + c), get(b, s * d + c)) << what << " row " << r << " col " << c;
  }
}

struct TokenCase {
  std::vector<int32_t> offsets;  // event offsets [B+1]
  int32_t c;                     // contextual tokens per sample
  bool actions;
};

TEST(JaggedCpu, RankingTokensLayout) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t d = 5;
  const TokenCase cases[] = {
      {{0, 3, 3, 7}, 2, true}, {{0, 3, 3, 7}, 0, true}, {{0, 2, 6}, 3, false}, {{0, 4}, 0, false}};
  for (const TokenCase& tc : cases) {
    SCOPED_TRACE(testing::Message() << "C=" << tc.c << " actions=" << tc.actions);
    for (DType dt : {DType::kF32, DType::kF64}) {
      const int64_t b = static_cast<int64_t>(tc.offsets.size()) - 1, t = tc.offsets.back();
      const int64_t k = tc.actions ? 2 : 1, rows = b * tc.c + k * t;
      const Tensor offsets = i32_tensor(tc.offsets);
      const Tensor ctx_emb = tc.c > 0 ? alloc_strided(dt, b * tc.c, d, 1) : Tensor();
      const Tensor item = alloc_strided(dt, t, d, 2);
      const Tensor action = tc.actions ? alloc(dt, {t, d}) : Tensor();
      if (tc.c > 0) fill_uniform(ctx_emb, -1, 1);
      fill_uniform(item, -1, 1);
      if (tc.actions) fill_uniform(action, -1, 1);
      const Tensor out = alloc_strided(dt, rows, d, 1);
      const Tensor out_offsets = alloc(DType::kI32, {b + 1});
      fill_value(out_offsets, -7);
      ranking_tokens_fwd(ctx, ctx_emb, item, action, offsets, tc.c, out, out_offsets);
      EXPECT_TRUE(padding_intact(out, 1));
      for (int64_t s = 0; s < b; ++s) {
        const int64_t o = tc.offsets[s], base = s * tc.c + k * o;
        EXPECT_EQ(get(out_offsets, s), base);
        for (int64_t c = 0; c < tc.c; ++c) expect_row(out, base + c, ctx_emb, s * tc.c + c, "ctx");
        for (int64_t i = 0; i < tc.offsets[s + 1] - o; ++i) {
          expect_row(out, base + tc.c + k * i, item, o + i, "item");
          if (tc.actions) expect_row(out, base + tc.c + 2 * i + 1, action, o + i, "action");
        }
      }
      EXPECT_EQ(get(out_offsets, b), rows);
    }
  }
}

TEST(JaggedCpu, RankingTokensBackwardMatchesFiniteDifferences) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t d = 4, c = 2;
  const std::vector<int32_t> off = {0, 5, 6, 6, 10};
  const int64_t b = 4, t = 10, rows = b * c + 2 * t;
  const Tensor offsets = i32_tensor(off);
  const Tensor ctx_emb = alloc(DType::kF64, {b * c, d}), item = alloc(DType::kF64, {t, d});
  const Tensor action = alloc(DType::kF64, {t, d});
  for (const Tensor& x : {ctx_emb, item, action}) fill_uniform(x, -1, 1);
  const Tensor out = alloc(DType::kF64, {rows, d}), out_off = alloc(DType::kI32, {b + 1});
  const Tensor g = alloc(DType::kF64, {rows, d});
  fill_uniform(g, -1, 1);
  const auto loss = [&] {
    ranking_tokens_fwd(ctx, ctx_emb, item, action, offsets, c, out, out_off);
    return dot(g, out);
  };
  const Tensor d_ctx = alloc_strided(DType::kF64, b * c, d, 1);
  const Tensor d_item = alloc_strided(DType::kF64, t, d, 1);
  const Tensor d_action = alloc_strided(DType::kF64, t, d, 1);
  ranking_tokens_bwd(ctx, g, offsets, c, d_ctx, d_item, d_action);
  for (const Tensor& dx : {d_ctx, d_item, d_action}) EXPECT_TRUE(padding_intact(dx, 1));
  expect_grad_matches_fd(loss, ctx_emb, d_ctx, "d_ctx");
  expect_grad_matches_fd(loss, item, d_item, "d_item");
  expect_grad_matches_fd(loss, action, d_action, "d_action");
}

TEST(JaggedCpu, GatherCandidateRows) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t d = 3;
  // Three samples of 2 + 2*n tokens (C = 2, interleaved): n = 4, 1, 3 with 2, 1, 0 candidates.
  const std::vector<int32_t> tok = {0, 10, 14, 22}, cand = {0, 2, 3, 3};
  const Tensor tok_off = i32_tensor(tok), cand_off = i32_tensor(cand);
  for (DType dt : {DType::kF32, DType::kF64}) {
    const Tensor x = alloc_strided(dt, 22, d, 1);
    fill_uniform(x, -1, 1);
    const Tensor out = alloc_strided(dt, 3, d, 2);
    gather_candidate_rows(ctx, x, tok_off, cand_off, 2, out);
    EXPECT_TRUE(padding_intact(out, 2));
    expect_row(out, 0, x, 6, "sample 0 candidate 0");  // 10 - 2*2 = 6
    expect_row(out, 1, x, 8, "sample 0 candidate 1");
    expect_row(out, 2, x, 12, "sample 1 candidate 0");  // 14 - 2 = 12
    // Stride 1 (no action tokens): the last nc rows.
    const Tensor out1 = alloc(dt, {3, d});
    gather_candidate_rows(ctx, x, tok_off, cand_off, 1, out1);
    expect_row(out1, 0, x, 8, "stride 1");
    expect_row(out1, 1, x, 9, "stride 1");
    expect_row(out1, 2, x, 13, "stride 1");
  }
}

TEST(JaggedCpu, GatherCandidateRowsBackward) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const int64_t d = 3;
  const std::vector<int32_t> tok = {0, 10, 14, 22}, cand = {0, 2, 3, 3};
  const Tensor tok_off = i32_tensor(tok), cand_off = i32_tensor(cand);
  const Tensor x = alloc(DType::kF64, {22, d}), out = alloc(DType::kF64, {3, d});
  const Tensor g = alloc(DType::kF64, {3, d});
  fill_uniform(x, -1, 1);
  fill_uniform(g, -1, 1);
  const Tensor dx = alloc_strided(DType::kF64, 22, d, 1);  // poisoned: every row must be written
  gather_candidate_rows_bwd(ctx, g, tok_off, cand_off, 2, dx);
  EXPECT_TRUE(padding_intact(dx, 1));
  for (int64_t r = 0; r < 22; ++r) {
    const bool candidate = r == 6 || r == 8 || r == 12;
    for (int64_t c = 0; c < d && !candidate; ++c) {
      EXPECT_EQ(get(dx, r * d + c), 0.0) << "row " << r;
    }
  }
  const auto loss = [&] {
    gather_candidate_rows(ctx, x, tok_off, cand_off, 2, out);
    return dot(g, out);
  };
  expect_grad_matches_fd(loss, x, dx, "dx", 200);
}

TEST(JaggedCpu, RankingLayoutPositions) {
  // Two samples, C = 2, interleaved: sample 0 has 4 events, 2 candidates (L = 10, history ends
  // at token 6); sample 1 has 3 events, 0 candidates (L = 8).
  RankingLayout lay;
  const std::vector<int32_t> offsets = {0, 4, 7}, nc = {2, 0};
  ranking_layout(offsets, nc, 2, true, 8192, lay);
  EXPECT_EQ(lay.token_offsets, (std::vector<int32_t>{0, 10, 18}));
  EXPECT_EQ(lay.candidate_offsets, (std::vector<int32_t>{0, 2, 2}));
  EXPECT_EQ(lay.num_contexts, (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(lay.num_targets, (std::vector<int32_t>{4, 0}));
  EXPECT_EQ(lay.max_seqlen, 10);
  EXPECT_EQ(lay.positions,
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 6, 6, 6, 0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(lay.context_positions, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(lay.item_positions, (std::vector<int32_t>{2, 4, 6, 6, 2, 4, 6}));
  EXPECT_EQ(lay.action_positions, (std::vector<int32_t>{3, 5, 6, 6, 3, 5, 7}));
  // Clamped to NB - 1 = 3; no action tokens (k = 1): sample 0 is [c c i i | t t].
  ranking_layout(offsets, nc, 2, false, 4, lay);
  EXPECT_EQ(lay.token_offsets, (std::vector<int32_t>{0, 6, 11}));
  EXPECT_EQ(lay.num_targets, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(lay.positions, (std::vector<int32_t>{0, 1, 2, 3, 3, 3, 0, 1, 2, 3, 3}));
  EXPECT_EQ(lay.item_positions, (std::vector<int32_t>{2, 3, 3, 3, 2, 3, 3}));
  EXPECT_TRUE(lay.action_positions.empty());
  // No contextual tokens.
  ranking_layout(offsets, nc, 0, true, 8192, lay);
  EXPECT_EQ(lay.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 4, 4, 4, 0, 1, 2, 3, 4, 5}));
}

TEST(JaggedCpu, LayoutAgreesWithTheOps) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const std::vector<int32_t> offsets = {0, 4, 4, 9}, nc = {2, 0, 3};
  RankingLayout lay;
  ranking_layout(offsets, nc, 3, true, 8192, lay);
  const Tensor off = i32_tensor(offsets);
  const Tensor ctx_emb = alloc(DType::kF32, {9, 2}), item = alloc(DType::kF32, {9, 2});
  const Tensor action = alloc(DType::kF32, {9, 2}), out = alloc(DType::kF32, {27, 2});
  for (const Tensor& x : {ctx_emb, item, action}) fill_uniform(x, -1, 1);
  const Tensor out_off = alloc(DType::kI32, {4});
  ranking_tokens_fwd(ctx, ctx_emb, item, action, off, 3, out, out_off);
  for (int64_t b = 0; b <= 3; ++b) EXPECT_EQ(get(out_off, b), lay.token_offsets[b]);
  // The gathered candidate rows are the candidates' item embeddings.
  const Tensor cand = alloc(DType::kF32, {5, 2});
  gather_candidate_rows(ctx, out, out_off, i32_tensor(lay.candidate_offsets), 2, cand);
  const int64_t events[] = {2, 3, 6, 7, 8};
  for (int64_t j = 0; j < 5; ++j) expect_row(cand, j, item, events[j], "candidate item");
  // The per-feature positions, interleaved by the op, are the token positions.
  const auto column = [](const std::vector<int32_t>& v) {
    const Tensor t = alloc(DType::kF64, {static_cast<int64_t>(v.size()), 1});
    for (size_t i = 0; i < v.size(); ++i) set(t, static_cast<int64_t>(i), v[i]);
    return t;
  };
  const Tensor pos = alloc(DType::kF64, {27, 1});
  ranking_tokens_fwd(ctx, column(lay.context_positions), column(lay.item_positions),
                     column(lay.action_positions), off, 3, pos, out_off);
  for (int64_t r = 0; r < 27; ++r) EXPECT_EQ(get(pos, r), lay.positions[r]) << r;
}

TEST(JaggedCpu, RejectsBadArguments) {
  ArenaScope scope;
  Ctx ctx = cpu_ctx();
  const Tensor item = alloc(DType::kF32, {4, 2}), out = alloc(DType::kF32, {4, 2});
  const Tensor out_off = alloc(DType::kI32, {2});
  EXPECT_THROW(
      ranking_tokens_fwd(ctx, Tensor(), item, Tensor(), i32_tensor({1, 4}), 0, out, out_off),
      Error);  // offsets[0] != 0
  EXPECT_THROW(
      ranking_tokens_fwd(ctx, Tensor(), item, Tensor(), i32_tensor({0, 3}), 0, out, out_off),
      Error);  // offsets end at 3 but 4 item rows
  EXPECT_THROW(ranking_tokens_fwd(ctx, Tensor(), item, item, i32_tensor({0, 4}), 0, out, out_off),
               Error);  // actions need 8 output rows
  EXPECT_THROW(
      ranking_tokens_fwd(ctx, Tensor(), item, Tensor(), i32_tensor({0, 4}), 1, out, out_off),
      Error);  // C = 1 without contextual rows
  const Tensor cand = alloc(DType::kF32, {3, 2});
  EXPECT_THROW(gather_candidate_rows(ctx, item, i32_tensor({0, 4}), i32_tensor({0, 3}), 2, cand),
               Error);  // 3 candidates of 2 tokens do not fit 4 tokens
  EXPECT_THROW(
      gather_candidate_rows(ctx, item, i32_tensor({0, 3, 4}), i32_tensor({0, 2, 1}), 1, cand),
      Error);  // candidate offsets decrease
  RankingLayout lay;
  EXPECT_THROW(
      ranking_layout(std::vector<int32_t>{0, 2}, std::vector<int32_t>{3}, 0, true, 10, lay),
      Error);  // more candidates than events
}

}  // namespace
}  // namespace hstu::test
