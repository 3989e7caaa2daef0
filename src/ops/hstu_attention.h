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

// Every [T, ...] operand (q, k, v, o and the gradients) holds H heads at a fixed column stride,
// its own width / H (its "head stride"): head h of q is columns h*sq .. h*sq + dim_qk - 1 with
// sq = q.shape[1] / H >= dim_qk. The columns between a head's width and its stride are neither
// read nor written, so a producer may pad each head to a 16-byte boundary (the HSTU layer does,
// for the widths 25 and 50) and the CUDA kernels then move whole 16-byte chunks.
struct HstuAttentionArgs {
  Tensor q;                // [T, H*sq]
  Tensor k;                // [T, H*sk], sk >= dim_qk
  Tensor v;                // [T, H*sv], sv >= dim_v
  int32_t dim_qk = 0;      // head width of q and k; 0 = q's head stride
  int32_t dim_v = 0;       // head width of v and o; 0 = v's head stride
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
  int32_t head_dim_qk() const {
    return dim_qk > 0 ? dim_qk : static_cast<int32_t>(q.shape[1] / num_heads);
  }
  int32_t head_dim_v() const {
    return dim_v > 0 ? dim_v : static_cast<int32_t>(v.shape[1] / num_heads);
  }
};

// Columns between the starts of consecutive heads of an operand.
inline int64_t head_stride(const Tensor& x, int32_t heads) {
  return x.shape[1] / heads;
}

// Throws unless x is a 2-D [rows, H*s] operand whose head stride s holds `width` columns.
inline void check_heads(const Tensor& x, int64_t rows, int32_t heads, int32_t width,
                        const char* what) {
  HSTU_CHECK(x.ndim == 2 && x.shape[0] == rows && heads >= 1 && x.shape[1] % heads == 0 &&
                 x.shape[1] / heads >= width && width >= 1,
             "hstu_attention: ", what, " is ", x.str(), ", expected [", rows, ", ", heads,
             " heads x a stride of at least ", width, " columns]");
}

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
