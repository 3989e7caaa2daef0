// hstu_mask.h — which key j a query i may attend to, inside one sequence of the jagged batch.
//
// One definition shared by the CPU reference, the CUDA kernels and the tests. A sequence of L
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
#pragma once

#include "core/philox.h"  // HSTU_HD

namespace hstu {

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

}  // namespace hstu
