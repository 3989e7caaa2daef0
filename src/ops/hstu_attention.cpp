// hstu_attention.cpp — the entry points of the HSTU attention (ops/hstu_attention.h): each
// runs the backend of ctx.device, cpu/hstu_attention.h or (in CUDA builds) cuda/hstu_attention.h; a
// CPU-only build throws for a CUDA ctx and needs no CUDA symbol.
#include "ops/hstu_attention.h"

#include "ops/cpu/hstu_attention.h"
#include "ops/detail/attn_sm90_tiles.h"
#include "ops/detail/attn_tile_order.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/hstu_attention.h"
#endif

namespace hstu {

void hstu_attention_fwd(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& o) {
  if (ctx.cpu()) return cpu::hstu_attention_fwd(ctx, args, o);
  HSTU_CUDA_DISPATCH(return cuda::hstu_attention_fwd(ctx, args, o));
}
void hstu_attention_bwd(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& d_o,
                        const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& d_rab_pos, const Tensor& d_rab_time) {
  if (ctx.cpu()) return cpu::hstu_attention_bwd(ctx, args, d_o, dq, dk, dv, d_rab_pos, d_rab_time);
  HSTU_CUDA_DISPATCH(
      return cuda::hstu_attention_bwd(ctx, args, d_o, dq, dk, dv, d_rab_pos, d_rab_time));
}

bool hstu_rab_buckets(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& out) {
  if (ctx.cpu()) return false;  // the CPU reference computes every pair's bucket
  HSTU_CUDA_DISPATCH(return cuda::hstu_rab_buckets(ctx, args, out));
}

int64_t hstu_attention_plan_bytes(int64_t batch, int64_t max_seqlen, int64_t total_tokens) {
  return cuda::attn::attention_plan_bytes(batch, max_seqlen, total_tokens);
}

int64_t hstu_attention_rab_scratch_bytes(int64_t batch, int64_t heads, int64_t max_seqlen,
                                         int64_t head_dim) {
  const int padded = head_dim <= 64 ? 64 : (head_dim <= 128 ? 128 : 256);  // as the kernels pad
  if (!cuda::attn::sm90_bwd_rab_fused_fits(padded, static_cast<int>(max_seqlen))) return 0;
  return cuda::attn::sm90_bwd_rab_ds_bytes(batch, heads, static_cast<int>(max_seqlen));
}

HstuAttentionPlan hstu_attention_plan(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& mem) {
  if (ctx.cpu()) return {};  // the CPU reference has no launch order
  HSTU_CUDA_DISPATCH(return cuda::hstu_attention_plan(ctx, args, mem));
}

}  // namespace hstu
