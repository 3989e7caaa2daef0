// hstu_layer.cpp — forward and backward sequencing of one HSTU layer over the op families.
//
// Around the attention (cfg.fused, the default): SiLU(z) into the padded u|v|q|k layout and its
// backward with the uvqk bias gradient through uvqk_act.h (one pass each where that measured
// faster: the forward with padded heads, the backward with a dense layout), and the residual add
// as the output GEMM's C input (gemm_residual). The LayerNorms
// already write the GEMM operands (LN(x) -> xn, LN(O) * u * dropout -> y) in one pass each.
// cfg.fused = false runs the separate passes these replaced.
#include "model/hstu_layer.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/phase_timer.h"
#include "ops/activation.h"
#include "ops/gemm.h"
#include "ops/hstu_attention.h"
#include "ops/layernorm.h"
#include "ops/uvqk_act.h"

namespace hstu {

HstuLayer::HstuLayer(const HstuLayerConfig& cfg, int index) : cfg_(cfg), index_(index) {
  const char* unfused = std::getenv("HSTU_LAYER_UNFUSED");
  if (unfused != nullptr && std::strcmp(unfused, "1") == 0) cfg_.fused = false;
}

void HstuLayer::register_params(DenseParams& p) {
  const int64_t d = cfg_.hidden, hd = cfg_.hd();
  const std::string pre = "layers." + std::to_string(index_) + ".";
  const bool meta = cfg_.init == "meta";
  if (cfg_.ln_in_affine) {
    ids_.ln_in_w = p.add(pre + "input_layernorm.weight", {d}, false, Init::ones());
    ids_.ln_in_b = p.add(pre + "input_layernorm.bias", {d}, false, Init::zeros());
  }
  ids_.w_uvqk = p.add_linear(pre + "uvqk.weight", d, 4 * hd,
                             meta ? Init::normal(0.02) : Init::xavier_uniform());
  if (cfg_.uvqk_bias) ids_.b_uvqk = p.add(pre + "uvqk.bias", {4 * hd}, false, Init::zeros());
  if (cfg_.ln_out_affine) {
    ids_.ln_out_w = p.add(pre + "output_layernorm.weight", {hd}, false, Init::ones());
    ids_.ln_out_b = p.add(pre + "output_layernorm.bias", {hd}, false, Init::zeros());
  }
  ids_.w_o = p.add_linear(pre + "output.weight", hd, d, Init::xavier_uniform());
  if (cfg_.out_bias)  // nn.Linear's default bias init in Meta's layer: U(+-1/sqrt(fan_in))
    ids_.b_o =
        p.add(pre + "output.bias", {d}, false,
              meta ? Init::uniform(1.0 / std::sqrt(static_cast<double>(hd))) : Init::zeros());
  if (cfg_.rab) {
    ids_.rab_pos =
        p.add(pre + "rab.position", {2 * cfg_.rab_positions - 1}, false, Init::normal(0.02));
    ids_.rab_time = p.add(pre + "rab.time", {cfg_.rab_time_buckets + 1}, false, Init::normal(0.02));
  }
}

HstuLayerActs HstuLayer::allocate_acts(Arena& a, int64_t t, DType act) const {
  const int64_t d = cfg_.hidden, hd = cfg_.hd();
  const DType st = stats_dtype(act);
  HstuLayerActs s;
  s.ln_mean = a.alloc(st, {t});
  s.ln_rstd = a.alloc(st, {t});
  if (!cfg_.recompute_ln) s.xn = a.alloc(act, {t, d});
  s.z = a.alloc(act, {t, 4 * hd});
  if (!cfg_.recompute_silu) s.uvqk = a.alloc(act, {t, cfg_.uvqk_layout().width()});
  s.o = a.alloc(act, {t, hd});
  s.ln2_mean = a.alloc(st, {t});
  s.ln2_rstd = a.alloc(st, {t});
  s.y = a.alloc(act, {t, hd});
  // The output dropout's decisions, kept by the forward for the backward (ops/layernorm.h).
  if (cfg_.dropout > 0.0f) s.drop_keep = a.alloc(DType::kI32, {t, dropout_keep_words(hd)});
  return s;
}

HstuLayerScratch HstuLayer::allocate_scratch(Arena& a, int64_t t, DType act) const {
  const int64_t d = cfg_.hidden, hd = cfg_.hd();
  HstuLayerScratch s;
  if (cfg_.recompute_ln) s.xn = a.alloc(act, {t, d});
  const UvqkLayout lay = cfg_.uvqk_layout();
  if (cfg_.recompute_silu) s.uvqk = a.alloc(act, {t, lay.width()});
  s.d_y = a.alloc(act, {t, hd});
  s.d_o = a.alloc(act, {t, hd});
  s.d_uvqk = a.alloc(act, {t, lay.width()});
  if (!lay.dense()) s.d_z = a.alloc(act, {t, 4 * hd});
  s.d_xn = a.alloc(act, {t, d});
  return s;
}

Tensor HstuLayer::matrix(const DenseParams& p, int id) const {
  return p.compute(id);
}
Tensor HstuLayer::param(const DenseParams& p, int id) const {
  return id < 0 ? Tensor() : p.param(id);
}
Tensor HstuLayer::bias(const DenseParams& p, int id) const {
  return id < 0 ? Tensor() : p.compute(id);
}
Tensor HstuLayer::grad(const DenseParams& p, int id) const {
  return id < 0 ? Tensor() : p.grad(id);
}

// uvqk = SiLU(z): u as one block, v | q | k as 3H heads into their padded places (fused: one
// pass, uvqk_act.h; unfused: the generic activation op, two calls with a padded layout).
static void silu_fwd(Ctx& ctx, bool fused, const UvqkLayout& l, const Tensor& z,
                     const Tensor& uvqk) {
  if (fused) return uvqk_silu_fwd(ctx, l, z, uvqk);
  if (l.dense()) return activation_fwd(ctx, Activation::kSilu, z, uvqk);
  const int64_t hd = l.heads * l.head_dim;
  activation_fwd(ctx, Activation::kSilu, z.cols(0, hd), uvqk.cols(0, hd));
  activation_fwd(ctx, Activation::kSilu, z.cols(hd, 4 * hd), uvqk.cols(l.v0(), l.width()),
                 {3 * l.heads, l.head_dim});
}
// d_z = d_uvqk * SiLU'(z), from the padded layout back to the dense one (in place when dense).
static void silu_bwd(Ctx& ctx, const UvqkLayout& l, const Tensor& z, const Tensor& d_uvqk,
                     const Tensor& d_z) {
  if (l.dense()) return activation_bwd(ctx, Activation::kSilu, z, d_uvqk, d_z);
  const int64_t hd = l.heads * l.head_dim;
  activation_bwd(ctx, Activation::kSilu, z.cols(0, hd), d_uvqk.cols(0, hd), d_z.cols(0, hd));
  activation_bwd(ctx, Activation::kSilu, z.cols(hd, 4 * hd), d_uvqk.cols(l.v0(), l.width()),
                 d_z.cols(hd, 4 * hd), {3 * l.heads, l.head_dim});
}

// Attention arguments over the v, q, k blocks of a buffer in UvqkLayout.
// rab_buckets, plan: the step's precomputed time buckets and launch plan
// (HstuLayerScratch::rab_step, plan_step), or empty.
static HstuAttentionArgs attention_args(const HstuLayerConfig& c, const DenseParams& p,
                                        const HstuLayerParams& ids, const BatchTensors& b,
                                        const Tensor& uvqk, const Tensor& rab_buckets,
                                        const HstuAttentionPlan& plan) {
  const UvqkLayout l = c.uvqk_layout();
  HstuAttentionArgs a;
  a.v = uvqk.cols(l.v0(), l.q0());
  a.q = uvqk.cols(l.q0(), l.k0());
  a.k = uvqk.cols(l.k0(), l.width());
  a.dim_qk = a.dim_v = static_cast<int32_t>(c.head_dim);
  a.cu_seqlens = b.offsets.rows(0, b.batch_size + 1);
  if (c.contextual_mask && !b.num_contexts.empty())
    a.num_contexts = b.num_contexts.rows(0, b.batch_size);
  if (!b.num_targets.empty()) a.num_targets = b.num_targets.rows(0, b.batch_size);
  a.max_seqlen = b.max_seqlen;
  a.num_heads = static_cast<int32_t>(c.heads);
  a.alpha = c.alpha;
  a.scale = c.scale;
  a.causal = c.causal;
  a.target_group_size = c.target_group_size;
  a.max_attn_len = c.max_attn_len;
  a.plan = plan;
  if (c.rab) {
    a.rab_pos = p.param(ids.rab_pos);
    a.rab_time = p.param(ids.rab_time);
    a.ts_query = b.ts_query.rows(0, b.num_tokens);
    a.ts_key = b.ts_key.rows(0, b.num_tokens);
    a.rab_buckets = rab_buckets;
  }
  return a;
}

Tensor HstuLayer::uvqk_rows(const HstuLayerActs& acts, const HstuLayerScratch& scr,
                            int64_t rows) const {
  return first_rows(cfg_.recompute_silu ? scr.uvqk : acts.uvqk, rows);
}

bool HstuLayer::rab_buckets(Ctx& ctx, const DenseParams& p, const BatchTensors& b,
                            const HstuLayerActs& acts, const HstuLayerScratch& scr,
                            const Tensor& out) const {
  if (!cfg_.rab || b.num_tokens == 0) return false;
  const Tensor uvqk = uvqk_rows(acts, scr, b.num_tokens);
  return hstu_rab_buckets(ctx, attention_args(cfg_, p, ids_, b, uvqk, Tensor(), {}), out);
}

HstuAttentionPlan HstuLayer::attention_plan(Ctx& ctx, const DenseParams& p, const BatchTensors& b,
                                            const HstuLayerActs& acts, const HstuLayerScratch& scr,
                                            const Tensor& mem) const {
  if (b.num_tokens == 0) return {};
  const Tensor uvqk = uvqk_rows(acts, scr, b.num_tokens);
  return hstu_attention_plan(ctx, attention_args(cfg_, p, ids_, b, uvqk, scr.rab_step, {}), mem);
}

StepAttention::StepAttention(Ctx& ctx, const std::vector<HstuLayer>& layers, const DenseParams& p,
                             const BatchTensors& batch, const std::vector<HstuLayerActs>& acts,
                             HstuLayerScratch& scratch)
    : arena_(ctx.scratch), scr_(scratch) {
  scr_.rab_step = Tensor();
  scr_.plan_step = {};
  if (layers.empty() || ctx.cpu() || !arena_ || arena_->is_measuring()) return;
  mark_ = arena_->mark();
  held_ = true;
  // Each where it applies and fits, in the arena's free space: `make` fills the bytes it is
  // given and says whether the calls take them.
  const auto take = [&](int64_t need, auto&& make) {
    using R = decltype(make(Tensor()));
    if (need == 0 ||
        arena_->capacity() - arena_->used() < static_cast<size_t>(need) + Arena::kAlign)
      return R{};
    const size_t before = arena_->mark();
    R r = make(arena_->alloc(DType::kU8, {need}));
    if (r.empty()) arena_->reset(before);
    return r;
  };
  if (layers[0].config().rab)
    scr_.rab_step =
        take(hstu_rab_buckets_bytes(batch.batch_size, batch.max_seqlen), [&](const Tensor& out) {
          return layers[0].rab_buckets(ctx, p, batch, acts[0], scr_, out) ? out : Tensor();
        });
  scr_.plan_step =
      take(hstu_attention_plan_bytes(batch.batch_size, batch.max_seqlen, batch.num_tokens),
           [&](const Tensor& mem) {
             return layers[0].attention_plan(ctx, p, batch, acts[0], scr_, mem);
           });
}

StepAttention::~StepAttention() {
  scr_.rab_step = Tensor();
  scr_.plan_step = {};
  if (held_) arena_->reset(mark_);
}

void HstuLayer::forward(Ctx& ctx, const DenseParams& p, const BatchTensors& b, const Tensor& x_in,
                        const Tensor& x_out, HstuLayerActs& acts, HstuLayerScratch& scr,
                        bool training, uint64_t dropout_seed) const {
  const int64_t t = b.num_tokens, hd = cfg_.hd();
  const Tensor xn = first_rows(cfg_.recompute_ln ? scr.xn : acts.xn, t);
  const Tensor z = first_rows(acts.z, t);
  const Tensor uvqk = uvqk_rows(acts, scr, t);
  const Tensor o = first_rows(acts.o, t), y = first_rows(acts.y, t);
  phase(ctx, "fwd.ln_in");
  layernorm_fwd(ctx, x_in, param(p, ids_.ln_in_w), param(p, ids_.ln_in_b), cfg_.eps, xn,
                first_rows(acts.ln_mean, t), first_rows(acts.ln_rstd, t));
  phase(ctx, "fwd.gemm_uvqk");
  gemm(ctx, GemmDesc{}, xn, matrix(p, ids_.w_uvqk), z, bias(p, ids_.b_uvqk));
  phase(ctx, "fwd.silu");
  silu_fwd(ctx, cfg_.fused, cfg_.uvqk_layout(), z, uvqk);
  phase(ctx, "fwd.attn");
  hstu_attention_fwd(ctx, attention_args(cfg_, p, ids_, b, uvqk, scr.rab_step, scr.plan_step), o);
  const DropoutSpec drop{training ? cfg_.dropout : 0.0f, dropout_seed, b.dropout_offset(hd)};
  phase(ctx, "fwd.ln_mul_dropout");
  ln_mul_dropout_fwd(ctx, o, uvqk.cols(0, hd), param(p, ids_.ln_out_w), param(p, ids_.ln_out_b),
                     cfg_.eps, drop, first_rows(acts.drop_keep, t), y, first_rows(acts.ln2_mean, t),
                     first_rows(acts.ln2_rstd, t));
  phase(ctx, "fwd.gemm_out");
  if (cfg_.fused) {  // x_in is the GEMM's C input: no copy of it into x_out first
    gemm_residual(ctx, GemmDesc{}, y, matrix(p, ids_.w_o), x_in, x_out, bias(p, ids_.b_o));
    return;
  }
  copy_tensor(x_out, x_in, ctx.stream);
  gemm(ctx, GemmDesc{false, false, 1.0f, 1.0f}, y, matrix(p, ids_.w_o), x_out, bias(p, ids_.b_o));
}

void HstuLayer::backward(Ctx& ctx, const DenseParams& p, const BatchTensors& b, const Tensor& x_in,
                         const HstuLayerActs& acts, HstuLayerScratch& scr, const Tensor& dx,
                         bool training, uint64_t dropout_seed) const {
  const int64_t t = b.num_tokens, hd = cfg_.hd();
  const Tensor z = first_rows(acts.z, t), o = first_rows(acts.o, t), y = first_rows(acts.y, t);
  const Tensor ln_mean = first_rows(acts.ln_mean, t), ln_rstd = first_rows(acts.ln_rstd, t);
  // Recompute what the forward did not keep.
  phase(ctx, "bwd.recompute");
  Tensor xn = first_rows(acts.xn, t);
  if (cfg_.recompute_ln) {
    xn = first_rows(scr.xn, t);
    layernorm_fwd(ctx, x_in, param(p, ids_.ln_in_w), param(p, ids_.ln_in_b), cfg_.eps, xn, ln_mean,
                  ln_rstd);
  }
  Tensor uvqk = first_rows(acts.uvqk, t);
  if (cfg_.recompute_silu) {
    uvqk = first_rows(scr.uvqk, t);
    silu_fwd(ctx, cfg_.fused, cfg_.uvqk_layout(), z, uvqk);
  }
  const Tensor d_y = first_rows(scr.d_y, t), d_o = first_rows(scr.d_o, t);
  const UvqkLayout lay = cfg_.uvqk_layout();
  const Tensor d_uvqk = first_rows(scr.d_uvqk, t), d_xn = first_rows(scr.d_xn, t);
  const Tensor d_z = lay.dense() ? d_uvqk : first_rows(scr.d_z, t);
  // x_out = x_in + y @ W_o + b_o: the residual passes dx through unchanged.
  phase(ctx, "bwd.gemm_out");
  gemm(ctx, GemmDesc{false, true, 1.0f, 0.0f}, dx, matrix(p, ids_.w_o), d_y);
  gemm(ctx, GemmDesc{true, false, 1.0f, 1.0f}, y, dx, grad(p, ids_.w_o));
  if (ids_.b_o >= 0) bias_grad(ctx, dx, grad(p, ids_.b_o), true);
  // y = Dropout(u * LN(O)).
  const DropoutSpec drop{training ? cfg_.dropout : 0.0f, dropout_seed, b.dropout_offset(hd)};
  phase(ctx, "bwd.ln_mul_dropout");
  ln_mul_dropout_bwd(ctx, o, uvqk.cols(0, hd), param(p, ids_.ln_out_w), param(p, ids_.ln_out_b),
                     first_rows(acts.ln2_mean, t), first_rows(acts.ln2_rstd, t), drop,
                     first_rows(acts.drop_keep, t), d_y, d_o, d_uvqk.cols(0, hd),
                     grad(p, ids_.ln_out_w), grad(p, ids_.ln_out_b));
  // Attention: gradients of v, q, k land in their column blocks of d_uvqk.
  phase(ctx, "bwd.attn");
  hstu_attention_bwd(ctx, attention_args(cfg_, p, ids_, b, uvqk, scr.rab_step, scr.plan_step), d_o,
                     d_uvqk.cols(lay.q0(), lay.k0()), d_uvqk.cols(lay.k0(), lay.width()),
                     d_uvqk.cols(lay.v0(), lay.q0()), grad(p, ids_.rab_pos),
                     grad(p, ids_.rab_time));
  // SiLU, then the uvqk projection.
  phase(ctx, "bwd.silu");
  if (cfg_.fused)  // with the uvqk bias gradient (in the same pass where that measured faster)
    uvqk_silu_bwd(ctx, lay, z, d_uvqk, d_z, grad(p, ids_.b_uvqk), true);
  else
    silu_bwd(ctx, lay, z, d_uvqk, d_z);
  phase(ctx, "bwd.gemm_uvqk");
  gemm(ctx, GemmDesc{true, false, 1.0f, 1.0f}, xn, d_z, grad(p, ids_.w_uvqk));
  if (ids_.b_uvqk >= 0 && !cfg_.fused) bias_grad(ctx, d_z, grad(p, ids_.b_uvqk), true);
  gemm(ctx, GemmDesc{false, true, 1.0f, 0.0f}, d_z, matrix(p, ids_.w_uvqk), d_xn);
  phase(ctx, "bwd.ln_in");
  // Input LayerNorm: accumulate into dx, which already holds the residual gradient.
  layernorm_bwd(ctx, x_in, param(p, ids_.ln_in_w), ln_mean, ln_rstd, d_xn, dx, true,
                grad(p, ids_.ln_in_w), grad(p, ids_.ln_in_b));
}

}  // namespace hstu
