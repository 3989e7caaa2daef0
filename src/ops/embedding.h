// embedding.h — embedding lookups, the input pre-processing x = E[id]*scale + P[pos], and sparse
// row-wise gradients and optimisers for embedding tables.
//
// Tables are fp32 [V, D]. Their gradient lives in a dense fp32 [V, D] buffer that only the
// touched rows ever make non-zero; `touched_rows` lists them, each optimiser updates exactly
// those rows and re-zeroes their gradient, so a step costs O(rows in the batch), not O(V).
#pragma once

#include <cstdint>

#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

// out[T,D] = table[ids[T]] * scale (+ pos_table[positions[T]] when given). out may be bf16/f16
// on CUDA (cast on write); ids are i32 in [0, V).
void embedding_fwd(Ctx& ctx, const Tensor& table, const Tensor& ids, float scale,
                   const Tensor& pos_table, const Tensor& positions, const Tensor& out);
// d_table[ids[t]] += dout[t] * scale; d_pos[positions[t]] += dout[t] (when d_pos given).
// Marks touched rows in `touched` (u8 [V]; 1 = has gradient).
void embedding_bwd(Ctx& ctx, const Tensor& dout, const Tensor& ids, float scale,
                   const Tensor& d_table, const Tensor& touched, const Tensor& positions,
                   const Tensor& d_pos);
// Collects the indices of rows with touched[r] != 0 into rows (i32 [V] capacity) in ascending
// order, writes their number to count (i32 [1] on the op's device) and clears `touched`. The
// count stays on the device, so the optimiser step needs no host round trip.
void collect_touched_rows(Ctx& ctx, const Tensor& touched, const Tensor& rows, const Tensor& count);

struct SparseOptimizerSpec {
  enum Kind { kAdam, kRowWiseAdagrad, kSgd } kind = kAdam;
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  int64_t step = 1;  // 1-based Adam step for bias correction (global step count)
  // As DenseOptimizerSpec::skip_if_nonfinite: f64 [k] on the table's device, or empty. When any
  // value is not finite the listed rows are not updated (weights and state unchanged), but their
  // gradients are still zeroed.
  Tensor skip_if_nonfinite;
};

// For each r in rows[0:count[0]]: update table[r] from grad[r] (and state), then zero grad[r].
// count is i32 [1] on the op's device (collect_touched_rows writes it).
// State: Adam -> m[V,D], v[V,D]; row-wise Adagrad -> state[V] (mean squared grad sum), passed
// as m (v unused); SGD none. rows[0:n] must be ascending and distinct, as collect_touched_rows
// returns them (rows are updated in parallel).
void sparse_optimizer_step(Ctx& ctx, const SparseOptimizerSpec& spec, const Tensor& table,
                           const Tensor& grad, const Tensor& rows, const Tensor& count,
                           const Tensor& m, const Tensor& v);

}  // namespace hstu
