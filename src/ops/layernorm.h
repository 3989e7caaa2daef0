// layernorm.h — LayerNorm over the last dim, and the fused output path of the HSTU layer
// y = Dropout(u * LayerNorm(o)).
//
// Statistics (mean, rstd per row) are saved by the forward and reused by the backward; they are
// f32 (f64 when x is f64, for gradient checks). Weight and bias are optional: an empty Tensor
// means a non-affine LayerNorm (Meta's research layer). Dropout masks come from Philox (seed,
// offset); the fused op's forward may also keep them as bits for its backward (1 bit an element),
// which then reads them instead of drawing them again: the draws were the fused backward's
// largest instruction cost. Dtypes: x, y, u, dy, dx share the
// activation dtype (f32/f64 on CPU; bf16/f16/f32 on CUDA); w, b, dw, db are f32 parameters
// (f64 when x is f64).
#pragma once

#include <cstdint>

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

// y[T,D] = (x - mean) * rstd (* w[D] + b[D]); saves mean[T], rstd[T].
void layernorm_fwd(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                   const Tensor& y, const Tensor& mean, const Tensor& rstd);
// dx (= or +=, by accumulate_dx) from dy; dw[D], db[D] are accumulated (+=) when given.
void layernorm_bwd(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dy, const Tensor& dx, bool accumulate_dx,
                   const Tensor& dw, const Tensor& db);

struct DropoutSpec {
  float p = 0.0f;       // drop probability; kept values are scaled by 1/(1-p)
  uint64_t seed = 0;    // Philox key
  uint64_t offset = 0;  // Philox counter base; element i uses philox_uniform(seed, offset, i)
};

// The fused op's dropout decisions as bits: keep [T, dropout_keep_words(E)] i32 (contiguous),
// bit c % 32 of word c / 32 of row t set when element (t, c) is kept (dropout_keep). Empty: the
// backward draws the mask again. With p = 0 the ops neither write nor read it.
inline int64_t dropout_keep_words(int64_t cols) {
  return (cols + 31) / 32;
}
// The checks both backends share: keep is empty or [rows, dropout_keep_words(cols)] i32,
// contiguous, on `device`; naming `op`.
void check_dropout_keep(const Tensor& keep, int64_t rows, int64_t cols, Device device,
                        const char* op);

// y[T,E] = Dropout(u[T,E] * LN(o[T,E]; w, b)); u may be a strided view. Saves mean, rstd, and
// the dropout decisions into keep when given (above).
void ln_mul_dropout_fwd(Ctx& ctx, const Tensor& o, const Tensor& u, const Tensor& w,
                        const Tensor& b, float eps, const DropoutSpec& drop, const Tensor& keep,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd);
// do_, du overwritten (du may be a strided view); dw, db accumulated when given. keep: the
// forward's decisions (the same drop spec), or empty to draw them again.
void ln_mul_dropout_bwd(Ctx& ctx, const Tensor& o, const Tensor& u, const Tensor& w,
                        const Tensor& b, const Tensor& mean, const Tensor& rstd,
                        const DropoutSpec& drop, const Tensor& keep, const Tensor& dy,
                        const Tensor& do_, const Tensor& du, const Tensor& dw, const Tensor& db);

// Plain dropout (input embeddings): y = x * keep / (1-p); in place allowed (y == x).
void dropout_fwd(Ctx& ctx, const Tensor& x, const DropoutSpec& drop, const Tensor& y);
void dropout_bwd(Ctx& ctx, const Tensor& dy, const DropoutSpec& drop, const Tensor& dx);

}  // namespace hstu
