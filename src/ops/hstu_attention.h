// hstu_attention.h — HSTU pointwise attention over a jagged batch, forward and backward.
//
// Per sequence, per head h, for query i and key j allowed by hstu_attend (hstu_mask.h):
//   S[i,j] = alpha * (q_i . k_j + rab[i,j])
//   O_i    = scale * sum_j SiLU(S[i,j]) * v_j              (scale = 1/N, N the static divisor)
// No softmax, so no row statistics: the backward needs only q, k, v, dO (and rab).
// rab is Meta's relative attention bias, shared by all heads and computed on the fly (never
// materialised as [B, N, N]):
//   rab[i,j] = pos_w[P-1 + j - i] + time_w[bucket(ts_query[i] - ts_key[j])]
//   bucket(dt) = clamp(floor(ln(max(|dt|, 1)) / 0.301), 0, NB)
// with pos_w [2P-1] (P = the rab's max length; the index is clamped into range) and time_w [NB+1].
// q, k, v, dq, dk, dv may be strided column views into the fused uvqk activation.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/context.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace hstu {

struct HstuAttentionArgs {
  Tensor q;                // [T, H*dqk]
  Tensor k;                // [T, H*dqk]
  Tensor v;                // [T, H*dv]
  Tensor cu_seqlens;       // i32 [B+1], on the op's device
  Tensor num_contexts;     // i32 [B] or empty (no contextual prefix / mask disabled)
  Tensor num_targets;      // i32 [B] or empty (no targets)
  int32_t max_seqlen = 0;  // longest sequence of the batch (host value; sizes the grid)
  int32_t num_heads = 1;
  float alpha = 1.0f;
  float scale = 1.0f;  // 1/N
  bool causal = true;
  int32_t target_group_size = 1;
  int32_t max_attn_len = 0;  // local window; 0 = none
  // Relative attention bias; all empty = none.
  Tensor rab_pos;   // f32 [2P-1]
  Tensor rab_time;  // f32 [NB+1]
  Tensor ts_query;  // i64 [T]: timestamp of the item each position predicts
  Tensor ts_key;    // i64 [T]: timestamp of each position's own item

  bool has_rab() const { return !rab_pos.empty(); }
  int32_t head_dim_qk() const { return static_cast<int32_t>(q.shape[1] / num_heads); }
  int32_t head_dim_v() const { return static_cast<int32_t>(v.shape[1] / num_heads); }
};

// Time bucket of Meta's relative attention bias.
HSTU_HD int rab_time_bucket(int64_t dt, int num_buckets) {
  const double a = dt < 0 ? -static_cast<double>(dt) : static_cast<double>(dt);
  const double l = log(a < 1.0 ? 1.0 : a) / 0.301;
  const int b = static_cast<int>(l);
  return b < 0 ? 0 : (b > num_buckets ? num_buckets : b);
}
// Index into pos_w for query i, key j (both positions within the sequence), pos_w of length n.
HSTU_HD int rab_pos_index(int i, int j, int n) {
  const int p = (n + 1) / 2;  // P
  int idx = p - 1 + j - i;
  return idx < 0 ? 0 : (idx >= n ? n - 1 : idx);
}

// o[T, H*dv] overwritten (rows of every sequence, all heads).
void hstu_attention_fwd(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& o);
// dq, dk, dv overwritten; d_rab_pos, d_rab_time accumulated (+=) when rab is used.
void hstu_attention_bwd(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& d_o,
                        const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& d_rab_pos, const Tensor& d_rab_time);

namespace cpu {
void hstu_attention_fwd(Ctx&, const HstuAttentionArgs&, const Tensor&);
void hstu_attention_bwd(Ctx&, const HstuAttentionArgs&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const Tensor&, const Tensor&);
}  // namespace cpu
namespace cuda {
void hstu_attention_fwd(Ctx&, const HstuAttentionArgs&, const Tensor&);
void hstu_attention_bwd(Ctx&, const HstuAttentionArgs&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const Tensor&, const Tensor&);
}  // namespace cuda

inline void hstu_attention_fwd(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& o) {
  if (ctx.cpu()) return cpu::hstu_attention_fwd(ctx, args, o);
  HSTU_CUDA_DISPATCH(return cuda::hstu_attention_fwd(ctx, args, o));
}
inline void hstu_attention_bwd(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& d_o,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv,
                               const Tensor& d_rab_pos, const Tensor& d_rab_time) {
  if (ctx.cpu()) return cpu::hstu_attention_bwd(ctx, args, d_o, dq, dk, dv, d_rab_pos, d_rab_time);
  HSTU_CUDA_DISPATCH(
      return cuda::hstu_attention_bwd(ctx, args, d_o, dq, dk, dv, d_rab_pos, d_rab_time));
}

}  // namespace hstu
