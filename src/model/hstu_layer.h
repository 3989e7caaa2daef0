// hstu_layer.h — one HSTU layer: forward, explicit backward and its activation plan.
//
//   xn = LN(x);  z = xn @ W_uvqk (+ b);  [u | v | q | k] = SiLU(z)  (stored in UvqkLayout)
//   O  = HstuAttention(q, k, v)          y = Dropout(u * LN(O));  x' = x + y @ W_o (+ b_o)
//
// Every option of SPEC §2 (alpha, affine or non-affine LayerNorms, biases, divisor N, rab,
// masks, dropout) is a field of HstuLayerConfig. The forward saves exactly what the backward
// needs (LN statistics, z, u|v|q|k unless recomputed, O, y); the backward overwrites the
// gradient of x in place (dx_out in, dx_in out) and accumulates parameter gradients.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/context.h"
#include "model/batch_tensors.h"
#include "model/params.h"
#include "ops/hstu_attention.h"
#include "ops/uvqk_act.h"

namespace hstu {

// The column layout of SiLU(z) (acts.uvqk) and of its gradient: UvqkLayout, ops/uvqk_act.h.

struct HstuLayerConfig {
  int64_t hidden = 0;    // D
  int64_t heads = 1;     // H
  int64_t head_dim = 0;  // d (dqk = dv)
  float alpha = 1.0f;
  float scale = 1.0f;  // 1/N
  float eps = 1e-5f;
  bool ln_in_affine = true, ln_out_affine = true, uvqk_bias = true, out_bias = false;
  bool rab = false;
  int64_t rab_positions = 0;  // P: rab pos table has 2P-1 weights
  int64_t rab_time_buckets = 128;
  float dropout = 0.0f;
  bool causal = true;
  // false (NetworkArgs.disable_contextual_mask): contextual tokens are a plain causal prefix
  // instead of seeing every contextual and history token (hstu_attend with c = 0).
  bool contextual_mask = true;
  int32_t target_group_size = 1;
  int32_t max_attn_len = 0;
  bool recompute_ln = false, recompute_silu = false;
  // Fused element-wise passes around the attention (issue 16 item 2): SiLU into the padded
  // layout and its backward with the uvqk bias gradient through uvqk_act.h (one pass each where
  // that measured faster), and the residual as the output GEMM's C input (gemm_residual). false:
  // the separate passes they replaced (a reference and the "before" of the benchmarks);
  // HSTU_LAYER_UNFUSED=1 in the environment sets it for every layer.
  bool fused = true;
  std::string init = "recsys";  // recsys | meta

  int64_t hd() const { return heads * head_dim; }
  UvqkLayout uvqk_layout() const { return {heads, head_dim}; }
};

// Indices of the layer's parameters in DenseParams (-1 = absent).
struct HstuLayerParams {
  int ln_in_w = -1, ln_in_b = -1, w_uvqk = -1, b_uvqk = -1, ln_out_w = -1, ln_out_b = -1;
  int w_o = -1, b_o = -1, rab_pos = -1, rab_time = -1;
};

// Saved activations of one layer (capacity T_max rows; views narrowed per batch).
struct HstuLayerActs {
  Tensor ln_mean, ln_rstd;    // [T] stats of the input LayerNorm
  Tensor xn;                  // [T, D]   (empty when recompute_ln)
  Tensor z;                   // [T, 4Hd] pre-activation
  Tensor uvqk;                // [T, W]   SiLU(z) in UvqkLayout (empty when recompute_silu)
  Tensor o;                   // [T, Hd]  attention output
  Tensor ln2_mean, ln2_rstd;  // [T] stats of LN(O)
  Tensor y;                   // [T, Hd]  Dropout(u * LN(O)), the input of W_o
  Tensor drop_keep;  // [T, ceil(Hd / 32)] i32: the output dropout's decisions as bits (or empty)
};

// Scratch shared by all layers (forward recomputation and backward gradients).
struct HstuLayerScratch {
  Tensor xn, uvqk;  // [T, D], [T, W] recomputation targets
  Tensor d_y, d_o;  // [T, Hd]
  Tensor d_uvqk;    // [T, W]   gradient of SiLU(z), in UvqkLayout
  Tensor d_z;       // [T, 4Hd] gradient of z (empty with a dense layout: d_uvqk serves)
  Tensor d_xn;      // [T, D]
  // This step's rab time buckets (u8; HstuLayer::rab_buckets) and launch plan
  // (HstuLayer::attention_plan), shared by every layer's forward and backward attention; empty:
  // each attention call makes its own (ops/hstu_attention.h; StepAttention).
  Tensor rab_step;
  HstuAttentionPlan plan_step;
};

class HstuLayer {
 public:
  // cfg.fused is cleared when HSTU_LAYER_UNFUSED=1 is set in the environment.
  HstuLayer(const HstuLayerConfig& cfg, int index);

  // Registers this layer's parameters (names "layers.<i>.<param>").
  void register_params(DenseParams& params);
  HstuLayerActs allocate_acts(Arena& arena, int64_t max_tokens, DType act) const;
  HstuLayerScratch allocate_scratch(Arena& arena, int64_t max_tokens, DType act) const;

  // x_out[T,D] = layer(x_in[T,D]); saves activations into `acts`.
  void forward(Ctx& ctx, const DenseParams& p, const BatchTensors& batch, const Tensor& x_in,
               const Tensor& x_out, HstuLayerActs& acts, HstuLayerScratch& scratch, bool training,
               uint64_t dropout_seed) const;
  // dx: gradient of x_out on entry, gradient of x_in on return.
  void backward(Ctx& ctx, const DenseParams& p, const BatchTensors& batch, const Tensor& x_in,
                const HstuLayerActs& acts, HstuLayerScratch& scratch, const Tensor& dx,
                bool training, uint64_t dropout_seed) const;

  // Fills `out` (u8, hstu_rab_buckets_bytes(B, max_seqlen) bytes) with the rab time buckets of
  // `batch` for the attention of every layer of this configuration, forward and backward, and
  // returns true; false (out untouched) where the attention takes no precomputed buckets (no rab,
  // the CPU, a time table too large for u8). acts / scratch: this layer's buffers (the
  // attention's operand views, whose shapes are checked and contents not read).
  bool rab_buckets(Ctx& ctx, const DenseParams& p, const BatchTensors& batch,
                   const HstuLayerActs& acts, const HstuLayerScratch& scratch,
                   const Tensor& out) const;
  // The attention's launch plan for `batch` in `mem` (u8, hstu_attention_plan_bytes(B,
  // max_seqlen, T) bytes; ops/hstu_attention.h: hstu_attention_plan), for calls with
  // scratch.rab_step; empty (mem untouched) where the attention takes none. acts / scratch as for
  // rab_buckets.
  HstuAttentionPlan attention_plan(Ctx& ctx, const DenseParams& p, const BatchTensors& batch,
                                   const HstuLayerActs& acts, const HstuLayerScratch& scratch,
                                   const Tensor& mem) const;

  const HstuLayerConfig& config() const { return cfg_; }
  const HstuLayerParams& param_ids() const { return ids_; }

 private:
  // A GEMM weight in the compute dtype (bf16 copy on CUDA, the f32 master on CPU).
  Tensor matrix(const DenseParams& p, int id) const;
  // An f32 parameter (LayerNorm, rab); empty Tensor when id < 0.
  Tensor param(const DenseParams& p, int id) const;
  // A GEMM-epilogue bias in the compute dtype (cuBLASLt fuses a bias of the output's dtype).
  Tensor bias(const DenseParams& p, int id) const;
  Tensor grad(const DenseParams& p, int id) const;
  // The first `rows` rows of SiLU(z) in UvqkLayout: the scratch copy when it is recomputed, else
  // the kept activation.
  Tensor uvqk_rows(const HstuLayerActs& acts, const HstuLayerScratch& scr, int64_t rows) const;
  HstuLayerConfig cfg_;
  int index_;
  HstuLayerParams ids_;
};

// What the attention of one batch needs that does not depend on the layer, computed once for
// every layer's forward and backward attention of a pass instead of once per call: the rab time
// buckets (HstuLayer::rab_buckets -> scratch.rab_step) and the launch plan (HstuLayer::
// attention_plan -> scratch.plan_step). Held in ctx.scratch from construction to destruction,
// below the scratch every op takes meanwhile (the runtime sizes ctx.scratch for them beside the
// attention's own needs). Where one does not apply (no layers, the CPU, no rab / not the sm_90a
// kernels on a jagged batch, no room) it stays empty and the attention calls make their own, as
// without this. acts: the layers' buffers (layer 0's operand views give the shapes).
class StepAttention {
 public:
  StepAttention(Ctx& ctx, const std::vector<HstuLayer>& layers, const DenseParams& p,
                const BatchTensors& batch, const std::vector<HstuLayerActs>& acts,
                HstuLayerScratch& scratch);
  ~StepAttention();
  StepAttention(const StepAttention&) = delete;
  StepAttention& operator=(const StepAttention&) = delete;

 private:
  Arena* arena_;
  HstuLayerScratch& scr_;
  size_t mark_ = 0;
  bool held_ = false;
};

// Narrows a [T_max, ...] activation buffer to the batch's T rows (empty stays empty).
inline Tensor first_rows(const Tensor& t, int64_t n) {
  return t.empty() ? t : t.rows(0, n);
}

}  // namespace hstu
