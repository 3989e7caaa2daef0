// test_gpu_ranking.cpp — the CUDA backend of generative ranking against the CPU reference on
// fresh random inputs: (1) the jagged row permutations (token sequence build / split, candidate
// gather / scatter), (2) the fused losses (multi-task BCE, cross-entropy), (3) a whole
// RankingModel training step and prediction, CPU fp32 vs CUDA bf16 / fp16.
//
// The shaping decision: each tolerance follows from what the two sides compute.
//  - The permutations copy bytes, so outputs must be bit-identical (poisoned outputs catch
//    unwritten rows).
//  - The losses compute in double from identical inputs on both sides; they differ only in the
//    last bits of libm's exp / log1p / log and in the summation order, so the loss is held to
//    2^-40 relative to sum(|x| + 1) (a float computation would miss it by ~2^16) and each
//    dlogits element to one rounding in its dtype: |gpu - ref| <= 2^(1-p) |ref| + max(the
//    dtype's subnormal spacing, scale 2^-48 (1 + max|x|)) (p = 24 / 8 / 11 for f32 / bf16 / f16;
//    the absolute term covers p - y cancelling to double precision where p ~ 1). Repeated runs
//    are bit-identical.
//  - The model compares a bf16 (or fp16) pipeline — every activation rounded to p significant
//    bits, GEMMs on rounded weights — with the fp32 one. The bound is the unit roundoff u = 2^-p
//    (p = 8 bf16, 11 fp16) times the number of roundings n on the path to the compared value:
//    6 per HSTU layer forward (LN, GEMM, SiLU, attention, LN*u, GEMM + residual) and 6 more
//    backward, plus 12 for the embeddings, tokens, L2 norm, head and loss; the linear worst case
//    n u, which random-sign rounding errors stay well below (the test prints the measured
//    errors; over ~700 random bf16 steps the gradient errors had a 1.7% median and stayed under
//    8.3% against a 14% bound, but for one batch at 16%). A gradient may also use 4x the error of
//    the naive yardstick — the fp32 CPU model on weights and tables rounded to the GPU dtype, on
//    the same batch — which grows on the rare batches whose gradients amplify rounding. The fp16
//    cases check that the differences shrink with u (they do, ~8x), i.e. that they are rounding
//    and not a logic difference (which would not depend on the precision).
//
// Includes the backend headers ops/cpu/jagged.h and ops/cuda/jagged.h (private to src/ops/
// otherwise): the jagged cases call each backend directly to compare the two.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/gpu_harness.h"
#include "common/harness.h"
#include "config/config.h"
#include "model/ranking_model.h"
#include "ops/cpu/jagged.h"
#include "ops/cuda/jagged.h"
#include "ops/losses.h"

namespace hstu::test {
namespace {

using gpu::bytes_of;
using gpu::check_exact;
using gpu::dev;
using gpu::is16;
using gpu::out_dev;
using gpu::rnd;

// A host f32 output [rows, d] poisoned with NaN.
Tensor out_host(int64_t rows, int64_t d) {
  Tensor t = alloc(DType::kF32, {rows, d});
  poison(t);
  return t;
}

int64_t rand_int(int64_t lo, int64_t hi) {  // [lo, hi]
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng());
}

// i32 host tensor [n] from values.
Tensor i32_host(const std::vector<int32_t>& v) {
  Tensor t = alloc(DType::kI32, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.data, v.data(), v.size() * sizeof(int32_t));
  return t;
}

// ---- (1) jagged permutations ----------------------------------------------------------------

struct JaggedCase {
  std::string name;
  int64_t batch = 1, max_events = 1, c = 0, d = 8;
  bool interleave = true;
  bool empties = false;  // some samples without events
  DType dtype = DType::kBF16;
  int64_t pad = 0;  // > 0: every row tensor is a strided column view
};
void PrintTo(const JaggedCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<JaggedCase> jagged_cases() {
  const DType bf = DType::kBF16, f32 = DType::kF32, f16 = DType::kF16;
  // clang-format off
  return {
      {"bf16_ctx3_actions", 5, 9, 3, 32, true, false, bf},
      {"bf16_no_ctx_actions", 4, 7, 0, 64, true, false, bf},
      {"bf16_ctx2_no_actions", 6, 5, 2, 16, false, false, bf},
      {"bf16_no_ctx_no_actions_empties", 7, 4, 0, 8, false, true, bf},
      {"bf16_ctx1_empties_strided", 9, 6, 1, 24, true, true, bf, 3},
      {"bf16_odd_width_strided", 3, 5, 2, 7, true, true, bf, 1},
      {"f32_ctx4_actions", 5, 11, 4, 40, true, true, f32},
      {"f32_odd_width_strided", 4, 6, 3, 13, true, false, f32, 2},
      {"f16_ctx2_actions", 3, 8, 2, 32, true, true, f16},
      {"bf16_large", 64, 200, 5, 128, true, true, bf},
      {"f32_single_sample", 1, 3, 2, 8, true, false, f32},
  };
  // clang-format on
}

class GpuRankingJagged : public ::testing::TestWithParam<JaggedCase> {};

TEST_P(GpuRankingJagged, PermutationsMatchCpuExactly) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  const JaggedCase& c = GetParam();
  const int64_t b = c.batch, k = c.interleave ? 2 : 1, d = c.d;
  // Jagged events per sample (some empty when c.empties) and candidates per sample (<= events,
  // some zero).
  std::vector<int32_t> off{0}, ncand;
  for (int64_t s = 0; s < b; ++s) {
    const int64_t n = c.empties && rand_int(0, 3) == 0 ? 0 : rand_int(1, c.max_events);
    off.push_back(static_cast<int32_t>(off.back() + n));
    ncand.push_back(static_cast<int32_t>(rand_int(0, n)));
  }
  const int64_t t = off.back(), bc = b * c.c, rows = bc + k * t;
  const Tensor offsets = i32_host(off);
  const Tensor ctx_emb = c.c > 0 ? rnd({bc, d}, c.dtype) : Tensor();
  const Tensor item = rnd({t, d}, c.dtype);
  const Tensor action = c.interleave ? rnd({t, d}, c.dtype) : Tensor();
  Ctx h = cpu_ctx();
  Ctx g = gpu::cuda_ctx();

  // Token sequence: forward.
  Tensor seq = out_host(rows, d);
  Tensor seq_off = alloc(DType::kI32, {b + 1});
  cpu::ranking_tokens_fwd(h, ctx_emb, item, action, offsets, static_cast<int32_t>(c.c), seq,
                          seq_off);
  const Tensor off_d = dev(offsets, DType::kI32);
  const Tensor ctx_d = c.c > 0 ? dev(ctx_emb, c.dtype, c.pad) : Tensor();
  const Tensor item_d = dev(item, c.dtype, c.pad);
  const Tensor action_d = c.interleave ? dev(action, c.dtype, c.pad) : Tensor();
  const Tensor seq_d = out_dev(c.dtype, {rows, d}, c.pad);
  const Tensor seq_off_d = out_dev(DType::kI32, {b + 1});
  cuda::ranking_tokens_fwd(g, ctx_d, item_d, action_d, off_d, static_cast<int32_t>(c.c), seq_d,
                           seq_off_d);
  check_exact(seq_d, seq, c.name + " tokens");
  check_exact(seq_off_d, seq_off, c.name + " token offsets");

  // Token sequence: backward (the inverse permutation).
  const Tensor d_seq = rnd({rows, d}, c.dtype);
  Tensor d_ctx = c.c > 0 ? out_host(bc, d) : Tensor(), d_item = out_host(t, d);
  Tensor d_action = c.interleave ? out_host(t, d) : Tensor();
  cpu::ranking_tokens_bwd(h, d_seq, offsets, static_cast<int32_t>(c.c), d_ctx, d_item, d_action);
  const Tensor d_ctx_d = c.c > 0 ? out_dev(c.dtype, {bc, d}, c.pad) : Tensor();
  const Tensor d_item_d = out_dev(c.dtype, {t, d}, c.pad);
  const Tensor d_action_d = c.interleave ? out_dev(c.dtype, {t, d}, c.pad) : Tensor();
  cuda::ranking_tokens_bwd(g, dev(d_seq, c.dtype, c.pad), off_d, static_cast<int32_t>(c.c), d_ctx_d,
                           d_item_d, d_action_d);
  if (c.c > 0) check_exact(d_ctx_d, d_ctx, c.name + " d_ctx");
  check_exact(d_item_d, d_item, c.name + " d_item");
  if (c.interleave) check_exact(d_action_d, d_action, c.name + " d_action");

  // Candidate rows: gather from the layer output and scatter back.
  std::vector<int32_t> coff{0};
  for (int32_t n : ncand) coff.push_back(coff.back() + n);
  const int64_t nc = coff.back();
  const Tensor cand_off = i32_host(coff);
  const Tensor x = rnd({rows, d}, c.dtype);
  Tensor cand = out_host(nc, d);
  cpu::gather_candidate_rows(h, x, seq_off, cand_off, static_cast<int32_t>(k), cand);
  const Tensor cand_off_d = dev(cand_off, DType::kI32), tok_off_d = dev(seq_off, DType::kI32);
  const Tensor cand_d = out_dev(c.dtype, {nc, d}, c.pad);
  cuda::gather_candidate_rows(g, dev(x, c.dtype, c.pad), tok_off_d, cand_off_d,
                              static_cast<int32_t>(k), cand_d);
  check_exact(cand_d, cand, c.name + " candidate rows");
  const Tensor d_cand = rnd({nc, d}, c.dtype);
  Tensor dx = out_host(rows, d);
  cpu::gather_candidate_rows_bwd(h, d_cand, seq_off, cand_off, static_cast<int32_t>(k), dx);
  const Tensor dx_d = out_dev(c.dtype, {rows, d}, c.pad);
  cuda::gather_candidate_rows_bwd(g, dev(d_cand, c.dtype, c.pad), tok_off_d, cand_off_d,
                                  static_cast<int32_t>(k), dx_d);
  check_exact(dx_d, dx, c.name + " candidate scatter");
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuRankingJagged, ::testing::ValuesIn(jagged_cases()),
                         [](const ::testing::TestParamInfo<JaggedCase>& i) {
                           return i.param.name;
                         });

// The dispatchers route a CUDA context to the kernels (no "CPU only" throw left).
TEST(GpuRankingJaggedDispatch, CudaContextRunsKernels) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  Ctx g = gpu::cuda_ctx();
  const Tensor off = dev(i32_host({0, 2, 3}), DType::kI32);
  const Tensor item = dev(rnd({3, 8}, DType::kBF16), DType::kBF16);
  const Tensor seq = out_dev(DType::kBF16, {3, 8}), seq_off = out_dev(DType::kI32, {3});
  EXPECT_NO_THROW(ranking_tokens_fwd(g, Tensor(), item, Tensor(), off, 0, seq, seq_off));
  const Tensor coff = dev(i32_host({0, 1, 2}), DType::kI32);
  const Tensor cand = out_dev(DType::kBF16, {2, 8});
  EXPECT_NO_THROW(gather_candidate_rows(g, seq, seq_off, coff, 1, cand));
  gpu::sync();
}

// ---- (2) losses -----------------------------------------------------------------------------

struct LossCase {
  std::string name;
  bool bce = true;
  int64_t n = 0, k = 1;  // rows, tasks / classes
  DType dtype = DType::kBF16;
  int64_t pad = 0;       // strided logits and dlogits
  bool grad = true;      // dlogits requested
  bool extreme = false;  // some logits at +-40 (stable forms)
};
void PrintTo(const LossCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<LossCase> loss_cases() {
  const DType bf = DType::kBF16, f32 = DType::kF32, f16 = DType::kF16;
  // clang-format off
  return {
      {"bce3_bf16", true, 300, 3, bf},
      {"bce3_f32", true, 300, 3, f32},
      {"bce1_f32", true, 77, 1, f32},
      {"bce8_bf16_strided", true, 129, 8, bf, 3},
      {"bce13_f32_wide_group", true, 250, 13, f32},
      {"bce31_bf16", true, 64, 31, bf},
      {"bce3_bf16_extreme", true, 500, 3, bf, 0, true, true},
      {"bce3_f16", true, 200, 3, f16},
      {"bce3_bf16_loss_only", true, 100, 3, bf, 0, false},
      {"bce3_f32_empty", true, 0, 3, f32},
      {"bce3_bf16_many_rows", true, 70000, 3, bf},
      {"ce5_bf16", false, 300, 5, bf},
      {"ce5_f32", false, 300, 5, f32},
      {"ce1_f32", false, 40, 1, f32},
      {"ce8_f32_strided", false, 97, 8, f32, 2},
      {"ce40_bf16", false, 150, 40, bf},
      {"ce300_f32", false, 33, 300, f32},
      {"ce5_bf16_extreme", false, 400, 5, bf, 0, true, true},
      {"ce5_f16_strided", false, 123, 5, f16, 1},
      {"ce5_f32_loss_only", false, 64, 5, f32, 0, false},
      {"ce5_bf16_empty", false, 0, 5, bf},
      {"ce5_f32_many_rows", false, 40000, 5, f32},
  };
  // clang-format on
}

// Precision p (significant bits) and the subnormal spacing of a dtype.
int precision_bits(DType t) {
  return t == DType::kBF16 ? 8 : (t == DType::kF16 ? 11 : 24);
}
double subnormal_spacing(DType t) {
  return t == DType::kBF16 ? std::ldexp(1.0, -133)
                           : (t == DType::kF16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -149));
}

// Logits (rounded to dt) and labels of a case.
void loss_inputs(const LossCase& c, Tensor& logits, Tensor& labels) {
  logits = rnd({c.n, c.k}, c.dtype, -8.0, 8.0);
  if (c.extreme)
    for (int64_t i = 0; i < logits.numel(); ++i)
      if (rand_int(0, 9) == 0) set(logits, i, rand_int(0, 1) ? 40.0 : -40.0);
  labels = alloc(DType::kI32, {c.n});
  for (int64_t r = 0; r < c.n; ++r) {
    // BCE: a bitmask over the K tasks plus bits above K, which the loss ignores.
    const int64_t v = c.bce ? rand_int(0, (int64_t(1) << c.k) - 1) | (rand_int(0, 3) << c.k)
                            : rand_int(0, c.k - 1);
    set(labels, r, static_cast<double>(c.bce && c.k >= 29 ? v & 0x7fffffff : v));
  }
}

// Runs the case's loss on `ctx` (CPU tensors or device tensors).
void run_loss(const LossCase& c, Ctx& ctx, const Tensor& logits, const Tensor& labels,
              const Tensor& loss, const Tensor& dlogits, double scale) {
  if (c.bce)
    bce_multitask(ctx, logits, labels, loss, dlogits, scale);
  else
    cross_entropy(ctx, logits, labels, loss, dlogits, scale);
}

class GpuRankingLoss : public ::testing::TestWithParam<LossCase> {};

TEST_P(GpuRankingLoss, MatchesCpuReference) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  const LossCase& c = GetParam();
  Tensor logits, labels;
  loss_inputs(c, logits, labels);
  const double scale = c.n > 0 ? 1.0 / static_cast<double>(c.n) : 1.0;
  Ctx h = cpu_ctx();
  Tensor loss = alloc(DType::kF64, {1});
  Tensor dlogits = c.grad ? out_host(c.n, c.k) : Tensor();
  run_loss(c, h, logits, labels, loss, dlogits, scale);

  Ctx g = gpu::cuda_ctx();
  const Tensor logits_d = dev(logits, c.dtype, c.pad), labels_d = dev(labels, DType::kI32);
  const Tensor loss_d = out_dev(DType::kF64, {1});
  const Tensor dlogits_d = c.grad ? out_dev(c.dtype, {c.n, c.k}, c.pad) : Tensor();
  run_loss(c, g, logits_d, labels_d, loss_d, dlogits_d, scale);
  gpu::sync();

  // Loss: double on both sides (see the file header).
  double mass = 0;
  for (int64_t i = 0; i < logits.numel(); ++i) mass += std::fabs(get(logits, i)) + 1.0;
  const double got = gpu::to_host(loss_d).as<double>()[0], ref = loss.as<double>()[0];
  EXPECT_LE(std::fabs(got - ref), std::ldexp(scale * mass, -40) + 1e-300)
      << c.name << ": loss gpu " << got << " vs cpu " << ref << " (seed " << test_seed() << ")";

  // dlogits: one rounding in the output dtype.
  if (c.grad) {
    const Tensor gd = gpu::to_host(dlogits_d);
    const double rel = std::ldexp(1.0, 1 - precision_bits(c.dtype));
    // sigmoid / softmax come from exp(x - lse) with an absolute double error of a few
    // ulp(|x|) ~ 2^-52 (1 + |x|), and (p - y) can cancel down to that level (p ~ 1 at the
    // label): an absolute scale 2^-48 (1 + max|x|) term.
    const double floor =
        std::max(subnormal_spacing(c.dtype), std::ldexp(scale * (1.0 + max_abs(logits)), -48));
    int64_t bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < dlogits.numel(); ++i) {
      const double r = get(dlogits, i), v = get(gd, i), err = std::fabs(v - r);
      worst = std::max(worst, std::isnan(err) ? INFINITY : err);
      if (!(err <= rel * std::fabs(r) + floor) && ++bad <= 5)
        ADD_FAILURE() << c.name << " dlogits[" << i << "]: gpu " << v << " vs cpu " << r;
    }
    EXPECT_EQ(bad, 0) << c.name << ": " << bad << " dlogits beyond one " << dtype_name(c.dtype)
                      << " rounding (max err " << worst << ", seed " << test_seed() << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuRankingLoss, ::testing::ValuesIn(loss_cases()),
                         [](const ::testing::TestParamInfo<LossCase>& i) { return i.param.name; });

// The same input gives bit-identical loss and dlogits (fixed-order reduction, no atomics).
TEST(GpuRankingLossDeterminism, RepeatedRunsAreBitIdentical) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  Ctx g = gpu::cuda_ctx();
  for (const bool bce : {true, false}) {
    const LossCase c{bce ? "bce" : "ce", bce, 90001, bce ? 3 : 5, DType::kBF16};
    Tensor logits, labels;
    loss_inputs(c, logits, labels);
    const Tensor x = dev(logits, c.dtype), y = dev(labels, DType::kI32);
    std::vector<unsigned char> loss_bytes[2], grad_bytes[2];
    for (int run = 0; run < 2; ++run) {
      const Tensor loss = out_dev(DType::kF64, {1});
      const Tensor grad = out_dev(c.dtype, {c.n, c.k});
      run_loss(c, g, x, y, loss, grad, 1.0 / static_cast<double>(c.n));
      loss_bytes[run] = bytes_of(loss);
      grad_bytes[run] = bytes_of(grad);
    }
    EXPECT_TRUE(loss_bytes[0] == loss_bytes[1]) << c.name << ": loss differs between runs";
    EXPECT_TRUE(grad_bytes[0] == grad_bytes[1]) << c.name << ": dlogits differ between runs";
  }
}

// An out-of-range label cannot be checked on the host without a sync: its row turns the loss NaN.
TEST(GpuRankingLossLabels, InvalidLabelGivesNanLoss) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  Ctx g = gpu::cuda_ctx();
  const Tensor x = dev(rnd({4, 5}, DType::kF32), DType::kF32);
  const Tensor y = dev(i32_host({0, 4, 5, 1}), DType::kI32);  // 5 is outside [0, 5)
  const Tensor loss = out_dev(DType::kF64, {1}), grad = out_dev(DType::kF32, {4, 5});
  cross_entropy(g, x, y, loss, grad, 0.25);
  gpu::sync();
  EXPECT_TRUE(std::isnan(gpu::to_host(loss).as<double>()[0]));
  const Tensor yb = dev(i32_host({1, -1, 2, 0}), DType::kI32);
  bce_multitask(g, x, yb, loss, Tensor(), 0.25);
  gpu::sync();
  EXPECT_TRUE(std::isnan(gpu::to_host(loss).as<double>()[0]));
}

// ---- (3) the whole model ----------------------------------------------------------------------

struct ModelCase {
  std::string name;
  bool bce = true;  // 3-task BCE vs 5-class cross-entropy
  bool final_ln = false;
  DType dtype = DType::kBF16;  // GPU activations (the CPU runs f32)
  // DatasetArgs.max_num_candidates = 0: every event scored, no attention targets, explicit
  // labels (recsys-examples' benchmark data).
  bool score_all = false;
};
void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.name;
}

Config tiny_config(const ModelCase& c) {
  Config cfg;
  cfg.task = "ranking";
  cfg.network.num_layers = 2;
  cfg.network.hidden_size = 32;
  cfg.network.num_attention_heads = 2;
  cfg.network.kv_channels = 16;
  cfg.network.hidden_dropout = 0.1;  // Philox masks: the same on both backends
  cfg.network.input_dropout = 0.1;
  cfg.network.num_position_buckets = 32;
  cfg.network.final_layernorm = c.final_ln;
  // gelu keeps the head smooth: at a ReLU kink an O(u) difference of a pre-activation flips the
  // unit's gradient by O(1), which no rounding bound covers.
  cfg.ranking.prediction_head_act_type = "gelu";
  cfg.dataset.max_history_seqlen = 10;
  cfg.dataset.max_num_candidates = c.score_all ? 0 : 4;
  cfg.ranking.prediction_head_arch =
      c.bce ? std::vector<int64_t>{24, 3} : std::vector<int64_t>{24, 5};
  cfg.ranking.num_tasks = c.bce ? 3 : 1;
  return cfg;
}

RankingShape tiny_shape(bool score_all = false) {
  RankingShape s;
  s.num_items = 60;
  s.num_actions = 8;
  s.contextual_cardinalities = {3, 5};
  s.max_batch = 6;
  s.max_events = 6 * 12;
  s.max_candidates = score_all ? s.max_events : 6 * 4;
  return s;
}

// A random batch of 6 samples: one without events, one without candidates, the rest jagged
// (score_all: every event of every sample scored, labels drawn apart from the actions).
SequenceBatch random_batch(bool bce, bool score_all = false) {
  SequenceBatch b;
  b.batch_size = 6;
  b.offsets = {0};
  for (int s = 0; s < 6; ++s) {
    // Sample 0 keeps a history (n > 4 >= its candidates), so action tokens get gradients.
    const int64_t n = s == 2 ? 0 : rand_int(s == 0 ? 6 : 1, 12);
    b.offsets.push_back(static_cast<int32_t>(b.offsets.back() + n));
    b.num_candidates.push_back(
        s == 4 ? 0
               : static_cast<int32_t>(rand_int(std::min<int64_t>(n, 1), std::min<int64_t>(n, 4))));
    b.max_seqlen = std::max<int32_t>(b.max_seqlen, static_cast<int32_t>(n));
    b.user_ids.push_back(s);
    b.contextual.push_back(static_cast<int32_t>(rand_int(0, 2)));
    b.contextual.push_back(static_cast<int32_t>(rand_int(0, 4)));
  }
  const int64_t t = b.offsets.back();
  for (int64_t i = 0; i < t; ++i) {
    b.item_ids.push_back(static_cast<int32_t>(rand_int(1, 59)));
    b.actions.push_back(static_cast<int32_t>(bce ? rand_int(0, 7) : rand_int(0, 4)));
  }
  b.timestamps.assign(static_cast<size_t>(t), 0);
  b.query_timestamps.assign(static_cast<size_t>(t), 0);
  if (score_all) {
    for (int s = 0; s < 6; ++s) b.num_candidates[s] = b.offsets[s + 1] - b.offsets[s];
    for (int64_t i = 0; i < t; ++i)
      b.labels.push_back(static_cast<int32_t>(bce ? rand_int(0, 7) : rand_int(0, 4)));
  }
  return b;
}

void zero_grads(RankingModel& m) {
  fill_zero(m.dense().flat_grads());
  for (EmbeddingTable* t : m.tables()) {
    fill_zero(t->grad);
    fill_zero(t->touched);
  }
}

// Host f32 copy of any f32 tensor (either device).
std::vector<float> host_f32(const Tensor& t) {
  EXPECT_EQ(t.dtype, DType::kF32);
  EXPECT_TRUE(t.contiguous());
  std::vector<float> v(static_cast<size_t>(t.numel()));
  copy_bytes(v.data(), Device::kCPU, t.data, t.device, v.size() * sizeof(float));
  return v;
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

// The compared gradients: (name, tensor) of a model.
std::vector<std::pair<std::string, Tensor>> grads_of(RankingModel& m) {
  std::vector<std::pair<std::string, Tensor>> g;
  DenseParams& p = m.dense();
  for (const char* n : {"position_embedding", "layers.0.uvqk.weight", "layers.1.output.weight",
                        "head.0.weight", "head.1.weight", "head.1.bias"}) {
    const int i = p.find(n);
    if (i >= 0) g.emplace_back(n, p.grad(i));
  }
  for (EmbeddingTable* t : m.tables()) g.emplace_back(t->name, t->grad);
  return g;
}

// Gradients of an ill-conditioned batch may exceed n u |g|; there the naive yardstick (weights
// and tables rounded, the fp32 model otherwise) grows with the conditioning too. The GPU also
// rounds every activation: its error measured 1.8x the naive one at the median (420 random
// steps, bf16 and fp16), so a factor 4.
constexpr double kNaiveFactor = 4.0;

class GpuRankingModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(GpuRankingModel, LowPrecisionStepMatchesCpuF32) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  const ModelCase& c = GetParam();
  const Config cfg = tiny_config(c);
  const RankingShape shape = tiny_shape(c.score_all);
  const SequenceBatch batch = random_batch(c.bce, c.score_all);
  const uint64_t seed = 1 + rng()() % 1000;

  RankingModel cpu_model(cfg, shape, Device::kCPU, DType::kF32);
  cpu_model.plan(seed);
  RankingModel gpu_model(cfg, shape, Device::kCUDA, c.dtype);
  gpu_model.plan(seed);
  Ctx h = cpu_ctx();
  Ctx g = gpu::cuda_ctx();

  cpu_model.upload(batch);
  gpu_model.upload(batch);
  ASSERT_EQ(cpu_model.num_candidates(), gpu_model.num_candidates());
  const int64_t nc = cpu_model.num_candidates();
  ASSERT_GT(nc, 0);
  EXPECT_EQ(cpu_model.labels(), gpu_model.labels());
  const double scale = 1.0 / static_cast<double>(nc);
  zero_grads(cpu_model);
  zero_grads(gpu_model);
  const double loss_cpu = cpu_model.train_step(h, 42, scale);
  const double loss_gpu = gpu_model.train_step(g, 42, scale);
  // The naive low-precision yardstick: the fp32 CPU model on weights and tables rounded to the
  // GPU's activation dtype, on this very batch (it inflates with the batch's conditioning).
  RankingModel naive_model(cfg, shape, Device::kCPU, DType::kF32);
  naive_model.plan(seed);
  gpu::round_host(naive_model.dense().flat_params(), c.dtype);
  for (EmbeddingTable* t : naive_model.tables()) gpu::round_host(t->weight, c.dtype);
  naive_model.upload(batch);
  zero_grads(naive_model);
  const double loss_naive = naive_model.train_step(h, 42, scale);

  // n u with n roundings on the path (file header): forward for the loss and logits, forward +
  // backward for the gradients.
  const double u = std::ldexp(1.0, -precision_bits(c.dtype));
  const double n_fwd = 12.0 + 6.0 * cfg.network.num_layers;
  const double n_bwd = 12.0 + 12.0 * cfg.network.num_layers;
  ASSERT_TRUE(std::isfinite(loss_gpu));
  EXPECT_LE(std::fabs(loss_gpu - loss_cpu), n_fwd * u * std::fabs(loss_cpu))
      << c.name << ": loss gpu " << loss_gpu << " vs cpu " << loss_cpu << " (seed " << test_seed()
      << ")";
  std::printf("[%s] loss cpu %.6f gpu %.6f (rel %.2e, bound %.2e) naive rel %.2e\n", c.name.c_str(),
              loss_cpu, loss_gpu, std::fabs(loss_gpu - loss_cpu) / std::fabs(loss_cpu), n_fwd * u,
              std::fabs(loss_naive - loss_cpu) / std::fabs(loss_cpu));

  const auto gc = grads_of(cpu_model), gg = grads_of(gpu_model), gn = grads_of(naive_model);
  ASSERT_EQ(gc.size(), gg.size());
  for (size_t i = 0; i < gc.size(); ++i) {
    const std::vector<float> a = host_f32(gc[i].second), b = host_f32(gg[i].second);
    const std::vector<float> nv = host_f32(gn[i].second);
    const double na = norm(a), nb = norm(b);
    std::vector<float> diff(a.size()), ndiff(a.size());
    for (size_t j = 0; j < a.size(); ++j) {
      diff[j] = b[j] - a[j];
      ndiff[j] = nv[j] - a[j];
    }
    const double nd = norm(diff), nn = norm(ndiff);
    std::printf("[%s] grad %-22s |cpu| %.4e |gpu| %.4e |gpu - cpu| / |cpu| %.2e naive %.2e\n",
                c.name.c_str(), gc[i].first.c_str(), na, nb, nd / std::max(na, 1e-30),
                nn / std::max(na, 1e-30));
    EXPECT_GT(na, 0.0) << gc[i].first << " has no gradient on the CPU";
    const double bound = std::max(n_bwd * u * na, kNaiveFactor * nn);
    EXPECT_LE(std::fabs(nb - na), bound) << c.name << " grad norm " << gc[i].first;
    EXPECT_LE(nd, bound) << c.name << " grad " << gc[i].first << " differs (naive " << nn
                         << ", seed " << test_seed() << ")";
  }

  // predict(): f32 logits on both, copied to the host the way the evaluator does.
  const Tensor lc = cpu_model.predict(h), lg = gpu_model.predict(g);
  ASSERT_EQ(lg.dtype, DType::kF32);
  ASSERT_EQ(lg.dim(0), nc);
  const std::vector<float> a = host_f32(lc), b = host_f32(lg);
  double amax = 0, emax = 0;
  for (size_t j = 0; j < a.size(); ++j) {
    amax = std::max(amax, std::fabs(static_cast<double>(a[j])));
    emax = std::max(emax, std::fabs(static_cast<double>(b[j]) - a[j]));
  }
  std::printf("[%s] logits max|cpu| %.4e max|gpu - cpu| %.2e\n", c.name.c_str(), amax, emax);
  EXPECT_LE(emax, n_fwd * u * std::max(amax, 1e-3)) << c.name << ": predict() logits differ";

  // The GPU step is bit-reproducible: the same batch again gives the same loss and gradients.
  std::vector<std::vector<unsigned char>> first;
  for (const auto& [name, t] : gg) first.push_back(bytes_of(t));
  zero_grads(gpu_model);
  const double again = gpu_model.train_step(g, 42, scale);
  EXPECT_EQ(std::memcmp(&again, &loss_gpu, sizeof(double)), 0) << c.name << ": loss not repeatable";
  for (size_t i = 0; i < gg.size(); ++i)
    EXPECT_TRUE(bytes_of(gg[i].second) == first[i])
        << c.name << ": " << gg[i].first << " gradient not repeatable";
}

INSTANTIATE_TEST_SUITE_P(
    Heads, GpuRankingModel,
    ::testing::Values(ModelCase{"bce3_bf16", true, false},
                      ModelCase{"bce3_final_ln_bf16", true, true},
                      ModelCase{"ce5_bf16", false, false},
                      ModelCase{"ce5_final_ln_bf16", false, true},
                      ModelCase{"bce3_f16", true, false, DType::kF16},
                      ModelCase{"bce3_final_ln_f16", true, true, DType::kF16},
                      ModelCase{"ce5_final_ln_f16", false, true, DType::kF16},
                      ModelCase{"bce3_score_all_bf16", true, false, DType::kBF16, true},
                      ModelCase{"ce5_score_all_bf16", false, false, DType::kBF16, true}),
    [](const ::testing::TestParamInfo<ModelCase>& i) { return i.param.name; });

// fp32 activations on CUDA are refused up front (the attention kernels take bf16 / fp16).
TEST(GpuRankingModelDtype, RejectsF32OnCuda) {
  HSTU_REQUIRE_GPU();
  const ModelCase c{"bce3", true, false, DType::kBF16};
  EXPECT_THROW(RankingModel(tiny_config(c), tiny_shape(), Device::kCUDA, DType::kF32), Error);
}

}  // namespace
}  // namespace hstu::test
