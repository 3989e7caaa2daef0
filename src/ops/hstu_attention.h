// hstu_attention.h — HSTU pointwise attention over a jagged batch, forward and backward.
//
// Per sequence, per head h, for query i and key j allowed by hstu_attend (below):
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
#include "core/host_device.h"
#include "core/tensor.h"

namespace hstu {

// ---- the mask -------------------------------------------------------------------------------

// hstu_attend: which key j a query i may attend to, inside one sequence of the jagged batch. One
// definition shared by the CPU reference, the CUDA kernels and the tests. A sequence of L
// tokens is laid out [contextual c | history h | targets t] (L = c + h + t):
//   - target columns (j >= L-t) are visible only to target rows of the same group of
//     `group_size` consecutive targets, causally within the group (g = 1: only itself);
//   - contextual rows (i < c) see every contextual and history column;
//   - every row sees every contextual column;
//   - otherwise causal (j <= i); target rows act as the first position after the history, so
//     they see the whole history;
//   - with a local window w > 0, history pairs (and targets, measured from position L-t) are
//     limited to i - j <= w;
//   - non-causal (only without targets): every row sees every context/history column.
// Passing c = 0 is how `disable_contextual_mask` makes contextual tokens a plain causal prefix.
//
// hstu_tile_kind classifies a whole tile of (query, key) pairs for the tiled kernels, so that only
// the tiles that need it pay for the per-element test.

HSTU_HD bool hstu_attend(int i, int j, int L, int c, int t, int group_size, int window,
                         bool causal) {
  const int hist_end = L - t;  // first target row/column
  if (j >= hist_end) {
    if (i < hist_end || j > i) return false;
    return (i - hist_end) / group_size == (j - hist_end) / group_size;
  }
  if (i < c || j < c) return true;
  if (!causal) return true;
  const int ie = i < hist_end ? i : hist_end;
  if (j > ie) return false;
  return window <= 0 || ie - j <= window;
}

// What hstu_attend says about the tile rows [r0, r0 + nr) x columns [c0, c0 + nc), looking only
// at its pairs inside the sequence (i, j < L; the kernels zero-fill the rest, which then adds
// nothing): kTileSkip — no pair visible; kTileFull — every pair visible; kTileCausal — a pair is
// visible exactly when j <= i; kTilePartial — anything else (test each pair). The answer is
// conservative: skip, full and causal are only claimed when certain.
enum HstuTileKind : int { kTileSkip = 0, kTilePartial = 1, kTileCausal = 2, kTileFull = 3 };

// hstu_tile_kind for any mask (hstu_tile_kind's plain-causal path gives the same kinds).
HSTU_HD int hstu_tile_kind_general(int r0, int nr, int c0, int nc, int L, int c, int t,
                                   int group_size, int window, bool causal) {
  if (r0 >= L || c0 >= L) return kTileSkip;
  const int r1 = (r0 + nr < L ? r0 + nr : L) - 1;  // inclusive, clipped to the sequence
  const int c1 = (c0 + nc < L ? c0 + nc : L) - 1;
  const int h = L - t, g = group_size, w = window;
  bool any = false;
  if (c1 >= h && r1 >= h) {  // target rows x target columns: same group, j <= i
    const int ri0 = r0 > h ? r0 : h, cj0 = c0 > h ? c0 : h;
    any = cj0 <= r1 && (cj0 - h) / g <= (r1 - h) / g && (ri0 - h) / g <= (c1 - h) / g;
  }
  if (!any && c0 < h) {
    if (c0 < c || r0 < c || !causal) {
      any = true;
    } else {  // all rows >= c, history columns [c0, cc1], causal: need j <= ie <= j + w
      const int cc1 = c1 < h - 1 ? c1 : h - 1;
      const int ie_min = r0 < h ? r0 : h, ie_max = r1 < h ? r1 : h;
      any = c0 <= ie_max && (w <= 0 || ie_min <= cc1 + w);
    }
  }
  if (!any) return kTileSkip;
  if (c1 >= h) return kTilePartial;  // target columns
  if (c1 < c || r1 < c || !causal) return kTileFull;
  const int rr0 = r0 > c ? r0 : c;  // first non-contextual row of the tile
  const int ie_min = rr0 < h ? rr0 : h, ie_max = r1 < h ? r1 : h;
  if (c1 <= ie_min && (w <= 0 || ie_max - c0 <= w)) return kTileFull;
  // History rows x history columns inside the window: plain causal.
  if (r0 >= c && c0 >= c && r1 < h && (w <= 0 || r1 - c0 <= w)) return kTileCausal;
  return kTilePartial;
}

HSTU_HD int hstu_tile_kind(int r0, int nr, int c0, int nc, int L, int c, int t, int group_size,
                           int window, bool causal) {
  // Plain causal attention (no contextual prefix, targets or window: most calls) in a few
  // compares. The GPU kernels classify every tile they visit, some twice, and the general form
  // took ~20% of the sm_90a forward's instructions per tile (ncu, d 128, session 19).
  if (causal && c == 0 && t == 0 && window <= 0) {
    if (r0 >= L || c0 >= L) return kTileSkip;
    const int r1 = (r0 + nr < L ? r0 + nr : L) - 1;  // inclusive, clipped to the sequence
    const int c1 = (c0 + nc < L ? c0 + nc : L) - 1;
    return c0 > r1 ? kTileSkip : (c1 <= r0 ? kTileFull : kTileCausal);
  }
  return hstu_tile_kind_general(r0, nr, c0, nc, L, c, t, group_size, window, causal);
}

// One past the last block of nc keys that query rows [r0, r0 + nr) can see. Under a causal mask
// a query at or past the contextual prefix sees no key after itself (history and target keys
// both need j <= i in hstu_attend), so the blocks past its last row's need no classification;
// otherwise (contextual rows see every key; non-causal) all ceil(L / nc) blocks.
HSTU_HD int hstu_key_block_end(int r0, int nr, int nc, int L, int c, bool causal) {
  const int n = (L + nc - 1) / nc;
  if (!causal || r0 < c) return n;
  const int last = (r0 + nr < L ? r0 + nr : L) - 1;
  return last / nc + 1 < n ? last / nc + 1 : n;
}

// ---- the op ---------------------------------------------------------------------------------

// A batch's launch plan (hstu_attention_plan): the sm_90a kernels' longest-first launch orders
// of a jagged batch (one for the forward, one for the backward) and the persistent forward's tile
// counter, in `mem` (u8, hstu_attention_plan_bytes), with the resident rows each order was built
// for (0: none).
struct HstuAttentionPlan {
  Tensor mem;
  int32_t fwd_rows = 0, bwd_rows = 0;
  bool empty() const { return fwd_rows == 0 && bwd_rows == 0; }
};

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
  // CUDA, optional: this batch's rab time buckets, filled by hstu_rab_buckets once for every
  // layer and pass of a step (u8, at least hstu_rab_buckets_bytes(B, max_seqlen)); empty: each
  // CUDA call computes its own into scratch. The CPU computes every pair's bucket and ignores it.
  Tensor rab_buckets;
  // CUDA, optional: this batch's launch plan (hstu_attention_plan), built once for every layer
  // and pass of a step; an empty one: each CUDA call that needs a launch order builds its own, as
  // does a call whose order the plan does not hold. Calls sharing a plan run one at a time (one
  // stream). The CPU ignores it.
  HstuAttentionPlan plan;

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

// The rab time buckets depend only on the batch (timestamps, lengths, mask) and the time table's
// length, not on the layer: a step computes them once (hstu_rab_buckets) and passes them to
// every layer's forward and backward as args.rab_buckets.
// Row pitch (bytes) of the buckets for sequences of at most max_seqlen tokens: max_seqlen
// rounded up to 16, so rows start on 16 bytes (the CUDA kernels' copy granule).
inline int64_t hstu_rab_bucket_stride(int64_t max_seqlen) {
  return (max_seqlen + 15) / 16 * 16;
}
// Bytes of the buckets of `batch` sequences of at most max_seqlen tokens: u8 [B, S, S], S =
// hstu_rab_bucket_stride(max_seqlen).
inline int64_t hstu_rab_buckets_bytes(int64_t batch, int64_t max_seqlen) {
  const int64_t s = hstu_rab_bucket_stride(max_seqlen);
  return batch * s * s;
}
// Fills `out` (u8, at least hstu_rab_buckets_bytes(B, args.max_seqlen)) with the time buckets of
// args' batch and returns true where the attention takes precomputed buckets (CUDA, rab with a
// time table of at most 256 entries); else returns false and leaves `out` alone. q, k, v as
// for the attention call (their shapes are checked, not read).
bool hstu_rab_buckets(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& out);

// The launch plan, like the rab buckets, depends only on the batch (lengths, head width, dtype,
// masks), not on the layer: each call would otherwise build its launch order and zero its tile
// counter itself (a launch or two before its kernel). Bytes of the plan of `batch` sequences of
// at most max_seqlen tokens, total_tokens in all (a bound that needs no lengths).
int64_t hstu_attention_plan_bytes(int64_t batch, int64_t max_seqlen, int64_t total_tokens);

// Scratch bytes the CUDA backward's fused rab form takes with rab gradients, on top of its dQ
// accumulator: every visited tile's dS of `batch` sequences of at most max_seqlen tokens and
// `heads` heads of width head_dim (padded head width 128 and up to 3200 tokens a sequence; 0
// elsewhere; one allocation: add the arena's alignment). Without that room the backward runs the
// split form (slower, no dS stored).
int64_t hstu_attention_rab_scratch_bytes(int64_t batch, int64_t heads, int64_t max_seqlen,
                                         int64_t head_dim);
// The launch plan of args' batch in `mem` (u8, at least hstu_attention_plan_bytes(B,
// args.max_seqlen, T), 16-byte aligned), for calls of these args (with args.rab_buckets when the
// calls will have them): its orders are those the calls take (the sm_90a kernels on a jagged
// batch); an empty plan, `mem` untouched, where they take none (the CPU, other GPUs,
// full-length batches). q, k, v as for the attention call (shapes checked, not read).
HstuAttentionPlan hstu_attention_plan(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& mem);

}  // namespace hstu
