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
//
// hstu_tile_kind classifies a whole tile of (query, key) pairs for the tiled kernels, so that only
// the tiles that need it pay for the per-element test.
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

// What hstu_attend says about the tile rows [r0, r0 + nr) x columns [c0, c0 + nc), looking only
// at its pairs inside the sequence (i, j < L; the kernels zero-fill the rest, which then adds
// nothing): kTileSkip — no pair visible; kTileFull — every pair visible; kTileCausal — a pair is
// visible exactly when j <= i; kTilePartial — anything else (test each pair). The answer is
// conservative: skip, full and causal are only claimed when certain.
enum HstuTileKind : int { kTileSkip = 0, kTilePartial = 1, kTileCausal = 2, kTileFull = 3 };

HSTU_HD int hstu_tile_kind(int r0, int nr, int c0, int nc, int L, int c, int t, int group_size,
                           int window, bool causal) {
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

}  // namespace hstu
