// cast.cu — CUDA dtype conversion between f32, bf16 and f16 tensors (row-strided views).
//
// The one decision: one element-wise kernel per dtype pair through the shared launcher, with
// 16-byte vector access on aligned buffers; rounding is CUDA's round-to-nearest-even
// (__float2bfloat16_rn / __float2half_rn), which the CPU cast reproduces bit for bit.
#include "ops/cuda/cast.h"
#include "ops/cuda/common.cuh"

namespace hstu::cuda {
namespace {

template <typename TS, typename TD>
struct CastOp {
  const TS* src;
  int64_t lds;
  TD* dst;
  int64_t ldd;
  template <int V>
  __device__ void apply(int64_t r, int64_t c) const {
    float v[V];
    load_vec<V>(src + r * lds + c, v);
    store_vec<V>(dst + r * ldd + c, v);
  }
};

}  // namespace

void cast(Ctx& ctx, const Tensor& src, const Tensor& dst) {
  check_cuda_tensor(src, "cast src");
  check_cuda_tensor(dst, "cast dst");
  bool same = src.ndim == dst.ndim;
  for (int i = 0; same && i < src.ndim; ++i) same = src.dim(i) == dst.dim(i);
  HSTU_CHECK(same, "cast: shapes differ (", src.str(), " -> ", dst.str(), ")");
  const Rows2d rc = rows2d({&src, &dst});
  dispatch_vec(can_vec8_2d(rc, {&src, &dst}), [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    dispatch_io(src.dtype, "cast src", [&](auto ts) {
      using TS = typename decltype(ts)::type;
      dispatch_io(dst.dtype, "cast dst", [&](auto td) {
        using TD = typename decltype(td)::type;
        launch_ew2d<V>(ctx, rc,
                       CastOp<TS, TD>{static_cast<const TS*>(src.data), pitch(src, rc),
                                      static_cast<TD*>(dst.data), pitch(dst, rc)});
      });
    });
  });
}

}  // namespace hstu::cuda
