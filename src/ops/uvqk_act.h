// uvqk_act.h — SiLU of the HSTU layer's fused projection, between the dense GEMM layout and the
// attention's padded layout, one call each way (issue 16 item 2).
//
//   forward:  uvqk[T, W] = SiLU(z[T, 4Hd])                         (u | v | q | k, UvqkLayout)
//   backward: d_z[T, 4Hd] = d_uvqk[T, W] * SiLU'(z);  db[4Hd] (+)= column sums of d_z
//
// The backward's bias gradient is summed from the rounded d_z values it stores (what a separate
// bias_grad pass over d_z would read), in a fixed order (deterministic). On CUDA each direction
// runs the implementation that measured faster (cuda/uvqk_act.cu): with a dense layout the
// backward is one pass that replaces SiLU' and the uvqk bias gradient (one read of the [T, 4Hd]
// gradient less: 1 GiB in bf16 at B32 L4096 D1024); with padded heads the forward is one launch
// where the generic activation op needs two (u, then the 3H heads). Dtypes: z, uvqk, d_uvqk, d_z
// share the activation dtype (f32/f64 on CPU; bf16/f16/f32 on CUDA); db is f32 (f64 when z is
// f64).
#pragma once

#include <cstdint>

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

// Column layout of the activated projection SiLU(z) (the layer's acts.uvqk) and of its gradient
// (d_uvqk): u dense in [0, Hd); then v, q and k, each H heads at a stride of the head width
// rounded up to 8 elements, v starting at Hd rounded up to 8. Every head then starts on a
// 16-byte boundary, so the attention kernels move whole 16-byte chunks (the paper's widths 25 and
// 50 would otherwise be copied element by element); the padding columns are never read or
// written. With widths that are multiples of 8 this is the dense [T, 4Hd]. z and its gradient
// stay dense [T, 4Hd], the GEMMs' layout.
struct UvqkLayout {
  int64_t heads = 1, head_dim = 0;

  static int64_t round8(int64_t x) { return (x + 7) / 8 * 8; }
  int64_t hd() const { return heads * head_dim; }
  int64_t stride() const { return round8(head_dim); }  // head stride of v, q, k
  int64_t v0() const { return round8(heads * head_dim); }
  int64_t q0() const { return v0() + heads * stride(); }
  int64_t k0() const { return q0() + heads * stride(); }
  int64_t width() const { return k0() + heads * stride(); }
  bool dense() const { return width() == 4 * heads * head_dim; }
  // Column of the padded layout that holds dense column c of z (c < 4Hd).
  int64_t column(int64_t c) const {
    if (c < hd()) return c;
    const int64_t h = (c - hd()) / head_dim;
    return v0() + h * stride() + (c - hd() - h * head_dim);
  }
};

// uvqk = SiLU(z): z [T, 4Hd] (any row stride), uvqk [T, >= W] (padding columns untouched).
void uvqk_silu_fwd(Ctx& ctx, const UvqkLayout& layout, const Tensor& z, const Tensor& uvqk);

// d_z = d_uvqk * SiLU'(z), and db[4Hd] (= or += by accumulate_db) the column sums of d_z when db
// is given. d_z may be d_uvqk itself when the layout is dense (in place).
void uvqk_silu_bwd(Ctx& ctx, const UvqkLayout& layout, const Tensor& z, const Tensor& d_uvqk,
                   const Tensor& d_z, const Tensor& db, bool accumulate_db);

// The argument checks both backends share (shapes, dtypes, the layout), naming `op`.
void check_uvqk_act(const UvqkLayout& layout, const Tensor& z, const Tensor& padded,
                    const Tensor& dense_out, const Tensor& db, const char* op);

}  // namespace hstu
