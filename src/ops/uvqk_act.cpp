// uvqk_act.cpp — the entry points of the layer's fused SiLU (ops/uvqk_act.h): each runs the
// backend of ctx.device, cpu/uvqk_act.h or (in CUDA builds) cuda/uvqk_act.h; a CPU-only build
// throws for a CUDA ctx and needs no CUDA symbol. Also the argument check both backends share.
#include "ops/uvqk_act.h"

#include "ops/cpu/uvqk_act.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/uvqk_act.h"
#endif

namespace hstu {

void uvqk_silu_fwd(Ctx& ctx, const UvqkLayout& layout, const Tensor& z, const Tensor& uvqk) {
  if (ctx.cpu()) return cpu::uvqk_silu_fwd(ctx, layout, z, uvqk);
  HSTU_CUDA_DISPATCH(return cuda::uvqk_silu_fwd(ctx, layout, z, uvqk));
}

void uvqk_silu_bwd(Ctx& ctx, const UvqkLayout& layout, const Tensor& z, const Tensor& d_uvqk,
                   const Tensor& d_z, const Tensor& db, bool accumulate_db) {
  if (ctx.cpu()) return cpu::uvqk_silu_bwd(ctx, layout, z, d_uvqk, d_z, db, accumulate_db);
  HSTU_CUDA_DISPATCH(return cuda::uvqk_silu_bwd(ctx, layout, z, d_uvqk, d_z, db, accumulate_db));
}

void check_uvqk_act(const UvqkLayout& l, const Tensor& z, const Tensor& padded,
                    const Tensor& dense_out, const Tensor& db, const char* op) {
  HSTU_CHECK(l.heads >= 1 && l.head_dim >= 1, op, ": bad layout (", l.heads, " heads of width ",
             l.head_dim, ")");
  const int64_t n = 4 * l.hd();
  HSTU_CHECK(z.ndim == 2 && z.shape[1] == n, op, ": z is ", z.str(), ", expected [T, ", n,
             "] (4 x ", l.heads, " heads x ", l.head_dim, ")");
  const int64_t t = z.shape[0];
  HSTU_CHECK(padded.ndim == 2 && padded.shape[0] == t && padded.shape[1] >= l.width(), op,
             ": the padded u|v|q|k tensor is ", padded.str(), ", expected [", t, ", >= ", l.width(),
             "] (UvqkLayout)");
  HSTU_CHECK(padded.dtype == z.dtype, op, ": dtypes differ (z ", z.str(), ", u|v|q|k ",
             padded.str(), ")");
  if (!dense_out.empty()) {
    check_shape(dense_out, {t, n}, op);
    HSTU_CHECK(dense_out.dtype == z.dtype, op, ": d_z is ", dense_out.str(), ", z is ", z.str());
    HSTU_CHECK(dense_out.data != padded.data || l.dense(), op,
               ": d_z may alias d_uvqk only with a dense layout (head width ", l.head_dim, ")");
  }
  if (!db.empty()) {
    check_shape(db, {n}, op);
    HSTU_CHECK(db.dtype == stats_dtype(z.dtype), op, ": db is ", db.str(), ", expected ",
               dtype_name(stats_dtype(z.dtype)));
  }
}

}  // namespace hstu
