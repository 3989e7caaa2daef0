// cpu/hstu_attention.cpp — CPU backend (and reference) of HSTU pointwise attention: jagged
// forward and backward, every mask of hstu_attend, Meta's relative attention bias; float (training)
// and double (gradient checks). The rab tables rab_pos / rab_time and their gradients have q's
// dtype (f32 with f32 q, f64 with f64 q); timestamps are i64. Leaving d_rab_pos empty skips the
// rab gradients (a frozen rab). Rows of q/k/v past cu_seqlens[B] are not touched.
//
// The shaping decision: one task per sequence, walking blocks of kRows query rows; for each block
// the keys are the union of its rows' allowed intervals, so masked-out pairs cost nothing beyond
// the block's ragged edge. A row's intervals are found by evaluating hstu_attend (the one mask
// definition) at the few columns where its predicate can change (0, c, L-t, i+1, the window
// edge, the bounds of i's target group). The mask and the rab are built once per block and shared
// by all heads (hence one task per sequence, not per head); the time bucket comes from a threshold
// table that agrees exactly with rab_time_bucket instead of a log per pair. The products run as
// register tiles (kRows rows x kVec columns) over head-transposed or padded copies of K and V.
// Gradients of K and V are accumulated per sequence; the rab gradients go to per-group partial
// buffers (groups fixed by the batch size, not by the thread count) summed in group order, so
// every output is bit-identical whatever the number of threads.
#include "ops/cpu/hstu_attention.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "ops/cpu/common.h"
#include "ops/detail/checks.h"

namespace hstu::cpu {
namespace {

constexpr int kRows = 4;  // query rows per block (register tile height)
template <typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // tile width: 4 f32 / 2 f64 columns
constexpr int kMaxRuns = 8;                             // intervals of one row (at most 4 occur)

int round_up(int x, int m) {
  return (x + m - 1) / m * m;
}

// Validated geometry of one call.
struct Geometry {
  int batch = 0, heads = 0, dqk = 0, dv = 0, max_len = 0;
  int64_t work = 0;              // ~ multiply-adds of the forward, to size the thread team
  const int32_t* cu = nullptr;   // [B+1]
  const int32_t* ctx = nullptr;  // [B] or null
  const int32_t* tgt = nullptr;  // [B] or null
  int c(int b) const { return ctx ? ctx[b] : 0; }
  int t(int b) const { return tgt ? tgt[b] : 0; }
};

Geometry validate(const Ctx& ctx, const HstuAttentionArgs& a) {
  HSTU_CHECK(ctx.cpu(), "cpu::hstu_attention called with a non-CPU context");
  HSTU_CHECK(a.num_heads >= 1, "num_heads ", a.num_heads);
  const int64_t T = a.q.shape[0];
  check_heads(a.q, T, a.num_heads, a.head_dim_qk(), "q");
  check_heads(a.k, T, a.num_heads, a.head_dim_qk(), "k");
  check_heads(a.v, T, a.num_heads, a.head_dim_v(), "v");
  for (const Tensor* x : {&a.k, &a.v}) detail::check_dtype(*x, a.q.dtype, "hstu_attention k/v");
  HSTU_CHECK(a.target_group_size >= 1, "target_group_size ", a.target_group_size);
  HSTU_CHECK(a.max_attn_len >= 0, "max_attn_len ", a.max_attn_len);
  HSTU_CHECK(a.cu_seqlens.ndim == 1 && a.cu_seqlens.shape[0] >= 1, "cu_seqlens ",
             a.cu_seqlens.str());
  detail::check_dtype(a.cu_seqlens, DType::kI32, "hstu_attention cu_seqlens");
  Geometry g;
  g.batch = static_cast<int>(a.cu_seqlens.shape[0] - 1);
  g.heads = a.num_heads;
  g.dqk = a.head_dim_qk();
  g.dv = a.head_dim_v();
  g.cu = a.cu_seqlens.as<int32_t>();
  for (const Tensor* x : {&a.num_contexts, &a.num_targets}) {
    if (x->empty()) continue;
    check_shape(*x, {g.batch}, "hstu_attention num_contexts/num_targets");
    detail::check_dtype(*x, DType::kI32, "hstu_attention num_contexts/num_targets");
  }
  g.ctx = a.num_contexts.empty() ? nullptr : a.num_contexts.as<int32_t>();
  g.tgt = a.num_targets.empty() ? nullptr : a.num_targets.as<int32_t>();
  HSTU_CHECK(g.cu[0] >= 0 && g.cu[g.batch] <= T, "cu_seqlens [", g.cu[0], "..", g.cu[g.batch],
             "] out of ", T, " rows");
  for (int b = 0; b < g.batch; ++b) {
    const int L = g.cu[b + 1] - g.cu[b];
    HSTU_CHECK(L >= 0, "cu_seqlens decreases at sequence ", b);
    HSTU_CHECK(g.c(b) >= 0 && g.t(b) >= 0 && g.c(b) + g.t(b) <= L, "sequence ", b, " of length ", L,
               " has ", g.c(b), " contextual and ", g.t(b), " target tokens");
    HSTU_CHECK(a.causal || g.t(b) == 0, "non-causal attention with targets (sequence ", b, ")");
    g.max_len = std::max(g.max_len, L);
    g.work += int64_t(L) * L * g.heads * (g.dqk + g.dv);
  }
  if (a.has_rab()) {
    for (const Tensor* x : {&a.rab_pos, &a.rab_time}) {
      HSTU_CHECK(x->ndim == 1 && x->shape[0] >= 1, "rab table ", x->str());
      detail::check_dtype(*x, a.q.dtype, "hstu_attention rab table (q's dtype)");
    }
    check_shape(a.ts_query, {T}, "hstu_attention ts_query");
    check_shape(a.ts_key, {T}, "hstu_attention ts_key");
    detail::check_dtype(a.ts_query, DType::kI64, "hstu_attention ts_query");
    detail::check_dtype(a.ts_key, DType::kI64, "hstu_attention ts_key");
  }
  return g;
}

// Contiguous key intervals [lo, lo+n) that query i attends to, in order.
struct Runs {
  int count = 0;
  int lo[kMaxRuns], n[kMaxRuns];
};

Runs allowed_runs(int i, int L, int c, int t, int g, int w, bool causal) {
  // Columns where one of hstu_attend's conditions can flip; its predicate is constant between.
  const int hist_end = L - t;
  const int ie = std::min(i, hist_end);
  const int gs = i >= hist_end ? hist_end + (i - hist_end) / g * g : hist_end;
  int cut[9] = {0, L, c, hist_end, i + 1, ie + 1, ie - w, gs, gs + g};
  for (int& x : cut) x = std::clamp(x, 0, L);
  std::sort(cut, cut + 9);
  const int ncut = static_cast<int>(std::unique(cut, cut + 9) - cut);
  Runs r;
  for (int k = 0; k + 1 < ncut; ++k) {
    if (!hstu_attend(i, cut[k], L, c, t, g, w, causal)) continue;
    if (r.count > 0 && r.lo[r.count - 1] + r.n[r.count - 1] == cut[k]) {
      r.n[r.count - 1] += cut[k + 1] - cut[k];
    } else {
      r.lo[r.count] = cut[k];
      r.n[r.count] = cut[k + 1] - cut[k];
      ++r.count;
    }
  }
  return r;
}

// rab_time_bucket without a log per pair. The bucket is non-decreasing in |dt|, so it is the
// number of thresholds th[1..NB] that |dt| reaches, th[b] being the smallest |dt| of bucket >= b —
// found by bisection with rab_time_bucket itself, so the two agree exactly. A lookup starts at the
// bucket of |dt|'s highest power of two; an octave spans ln 2 / 0.301 = 2.3 buckets, so it takes
// at most three steps.
class TimeBuckets {
 public:
  explicit TimeBuckets(int nb) : th_(nb + 2, UINT64_MAX) {
    const uint64_t top = uint64_t(1) << 63;  // the largest |dt|, that of INT64_MIN
    for (int e = 0; e < 64; ++e) first_[e] = bucket_of(uint64_t(1) << e, nb);
    uint64_t lo = 0;
    for (int b = 1; b <= nb && bucket_of(top, nb) >= b; ++b) {
      uint64_t hi = top;
      while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (bucket_of(mid, nb) >= b) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      th_[b] = lo;
    }
  }
  int operator()(int64_t dt) const {
    const uint64_t a = dt < 0 ? uint64_t(0) - uint64_t(dt) : uint64_t(dt);
    int b = a == 0 ? 0 : first_[63 - std::countl_zero(a)];
    while (a >= th_[b + 1]) ++b;
    return b;
  }

 private:
  static int bucket_of(uint64_t a, int nb) {
    return rab_time_bucket(a >> 63 ? INT64_MIN : static_cast<int64_t>(a), nb);
  }
  std::vector<uint64_t> th_;  // [NB+2]; th_[NB+1] (and unreachable ones) = UINT64_MAX
  int first_[64];             // bucket of 2^e
};

// Typed view of the rab of one call (null tables = no rab).
template <typename T>
struct Rab {
  const T* pos = nullptr;
  const T* time = nullptr;
  const int64_t* ts_q = nullptr;
  const int64_t* ts_k = nullptr;
  int npos = 0, nbuckets = 0;  // pos_w length 2P-1; time_w length NB+1, nbuckets = NB
  TimeBuckets bucket{0};

  explicit Rab(const HstuAttentionArgs& a) {
    if (!a.has_rab()) return;
    pos = a.rab_pos.as<T>();
    time = a.rab_time.as<T>();
    ts_q = a.ts_query.as<int64_t>();
    ts_k = a.ts_key.as<int64_t>();
    npos = static_cast<int>(a.rab_pos.shape[0]);
    nbuckets = static_cast<int>(a.rab_time.shape[0]) - 1;
    bucket = TimeBuckets(nbuckets);
  }
};

// One block of query rows [i0, i0+rows) of a sequence: its rows' intervals and their union, laid
// out as tile columns (each union interval starts at a multiple of kVec).
template <typename T>
struct Block {
  struct Interval {
    int lo, n, u;  // keys [lo, lo+n) sit in tile columns [u, u+n)
  };
  int i0 = 0, rows = 0, width = 0;  // width: tile columns in use (a multiple of kVec)
  Runs runs[kRows];
  Interval iv[kRows * kMaxRuns];
  int niv = 0;

  void build(int start_row, int L, int c, int t, const HstuAttentionArgs& a) {
    i0 = start_row;
    rows = std::min(kRows, L - i0);
    std::pair<int, int> all[kRows * kMaxRuns];  // (lo, end) of every row's intervals
    int nall = 0;
    for (int r = 0; r < rows; ++r) {
      runs[r] = allowed_runs(i0 + r, L, c, t, a.target_group_size, a.max_attn_len, a.causal);
      for (int k = 0; k < runs[r].count; ++k) {
        all[nall++] = {runs[r].lo[k], runs[r].lo[k] + runs[r].n[k]};
      }
    }
    std::sort(all, all + nall);
    niv = 0;
    width = 0;
    for (int k = 0; k < nall; ++k) {
      if (niv > 0 && all[k].first <= iv[niv - 1].lo + iv[niv - 1].n) {
        iv[niv - 1].n = std::max(iv[niv - 1].n, all[k].second - iv[niv - 1].lo);
      } else {
        iv[niv++] = {all[k].first, all[k].second - all[k].first, 0};
      }
    }
    for (int k = 0; k < niv; ++k) {
      iv[k].u = width;
      width += round_up(iv[k].n, kVec<T>);
    }
  }
  // Tile column of key j (j inside one of the union intervals).
  int column(int j) const {
    int k = 0;
    while (j >= iv[k].lo + iv[k].n) ++k;
    return iv[k].u + j - iv[k].lo;
  }
};

// Per-thread buffers, sized for the longest sequence of the call.
template <typename T>
struct Workspace {
  int ldt = 0, ld_tile = 0, dqkp = 0, dvp = 0;  // leading dims: transposed K/V, tiles; padded d
  std::vector<T> kt;                            // [H, dqk, ldt]  K of each head, transposed
  std::vector<T> vt;        // [H, dv, ldt]   V transposed (backward: for dP = dO V^T)
  std::vector<T> rows;      // [H, Lmax, dvp] V rows (forward) / [H, Lmax, dqkp] K rows (backward)
  std::vector<T> dk, dv;    // [H, Lmax, dqkp], [H, Lmax, dvp] (backward)
  std::vector<T> s, p2;     // tiles [kRows, ld_tile]: scores, then P; dP, then dS (backward)
  std::vector<T> mask;      // [kRows, ld_tile] 1 where allowed
  std::vector<T> rab;       // [kRows, ld_tile] rab of allowed entries
  std::vector<T> drab;      // [kRows, ld_tile] dS summed over heads (backward)
  std::vector<int> bucket;  // [kRows, ld_tile] time bucket of allowed entries
  std::vector<T> qb, ob;    // [kRows, dqkp] block rows of q; [kRows, dvp] of dO
  std::vector<T> acc;       // [kRows, max(dqkp, dvp)] output rows of the block

  Workspace(const Geometry& g, bool backward) {
    const size_t H = g.heads, L = g.max_len;
    ldt = round_up(g.max_len, kVec<T>) + kVec<T>;
    ld_tile = g.max_len + kRows * kMaxRuns * kVec<T>;
    dqkp = round_up(g.dqk, kVec<T>);
    dvp = round_up(g.dv, kVec<T>);
    kt.assign(H * g.dqk * ldt, T(0));
    vt.assign(backward ? H * g.dv * ldt : 0, T(0));
    rows.assign(H * L * (backward ? dqkp : dvp), T(0));
    dk.assign(backward ? H * L * dqkp : 0, T(0));
    dv.assign(backward ? H * L * dvp : 0, T(0));
    for (auto* t : {&s, &p2, &mask, &rab, &drab}) t->assign(size_t(kRows) * ld_tile, T(0));
    bucket.assign(size_t(kRows) * ld_tile, 0);
    qb.assign(size_t(kRows) * dqkp, T(0));
    ob.assign(size_t(kRows) * dvp, T(0));
    acc.assign(size_t(kRows) * std::max(dqkp, dvp), T(0));
  }
};

// Columns [c0, c0+d) (one head) of rows [start, start+L) of x: transposed into dst [d, ld] and/or
// as padded rows into rows_dst [L, ldr] (either may be null).
template <typename T>
void gather_head(const Tensor& x, int64_t start, int L, int64_t c0, int d, T* dst, int ld,
                 T* rows_dst, int ldr) {
  const auto src = detail::rows_of<const T>(x);
  for (int j = 0; j < L; ++j) {
    const T* row = src[start + j] + c0;
    if (dst) {
      for (int e = 0; e < d; ++e) dst[int64_t(e) * ld + j] = row[e];
    }
    if (rows_dst) std::copy(row, row + d, rows_dst + int64_t(j) * ldr);
  }
}

// Block rows of columns [c0, c0+d) (one head) of x into tile [kRows, ld] (rows past the block
// are zero).
template <typename T>
void gather_block(const Tensor& x, int64_t start, const Block<T>& blk, int64_t c0, int d, T* tile,
                  int ld) {
  const auto src = detail::rows_of<const T>(x);
  for (int r = 0; r < blk.rows; ++r) {
    const T* row = src[start + blk.i0 + r] + c0;
    std::copy(row, row + d, tile + int64_t(r) * ld);
  }
  for (int r = blk.rows; r < kRows; ++r)
    std::fill(tile + int64_t(r) * ld, tile + (r + 1) * ld, T(0));
}

// A 16-byte vector of T (GCC/Clang vector extension: one SSE register, the x86-64 baseline) with
// unaligned loads and stores. The tile kernels below hold one per block row in named variables
// (kRows = 4 written out), which keeps them in registers where an array would be spilled.
template <typename T>
struct Simd {
  typedef T V __attribute__((vector_size(16)));
  static V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(T* p, V v) { std::memcpy(p, &v, sizeof v); }
};
static_assert(kRows == 4, "the tile kernels are written out for 4 rows");

// out[r, u] = a[r, :d] . bt[:d, j]  for every tile column u of the block (a [kRows, lda],
// bt [d, ldb], out [kRows, ldo]).
template <typename T>
void tile_dot(const Block<T>& blk, const T* a, int lda, int d, const T* bt, int ldb, T* out,
              int ldo) {
  using S = Simd<T>;
  const T *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
  for (int k = 0; k < blk.niv; ++k) {
    for (int jb = 0; jb < blk.iv[k].n; jb += kVec<T>) {
      typename S::V c0{}, c1{}, c2{}, c3{};
      const T* b = bt + blk.iv[k].lo + jb;
      for (int e = 0; e < d; ++e, b += ldb) {
        const typename S::V bv = S::load(b);
        c0 += a0[e] * bv;
        c1 += a1[e] * bv;
        c2 += a2[e] * bv;
        c3 += a3[e] * bv;
      }
      T* o = out + blk.iv[k].u + jb;
      S::store(o, c0);
      S::store(o + ldo, c1);
      S::store(o + 2 * ldo, c2);
      S::store(o + 3 * ldo, c3);
    }
  }
}

// out[r, :dp] = sum_u p[r, u] * b[j(u), :dp]  (p [kRows, ldp], b rows [L, dp], out [kRows, dp];
// dp a multiple of kVec).
template <typename T>
void tile_times_rows(const Block<T>& blk, const T* p, int ldp, const T* b, int dp, T* out) {
  using S = Simd<T>;
  for (int eb = 0; eb < dp; eb += kVec<T>) {
    typename S::V c0{}, c1{}, c2{}, c3{};
    for (int k = 0; k < blk.niv; ++k) {
      const T* p0 = p + blk.iv[k].u;
      const T* bj = b + int64_t(blk.iv[k].lo) * dp + eb;
      for (int jj = 0; jj < blk.iv[k].n; ++jj, bj += dp) {
        const typename S::V bv = S::load(bj);
        c0 += p0[jj] * bv;
        c1 += p0[ldp + jj] * bv;
        c2 += p0[2 * ldp + jj] * bv;
        c3 += p0[3 * ldp + jj] * bv;
      }
    }
    S::store(out + eb, c0);
    S::store(out + dp + eb, c1);
    S::store(out + 2 * dp + eb, c2);
    S::store(out + 3 * dp + eb, c3);
  }
}

// g[j(u), :dp] += sum_r p[r, u] * a[r, :dp]  (p [kRows, ldp], a [kRows, dp], g rows [L, dp]).
template <typename T>
void tile_t_times_rows(const Block<T>& blk, const T* p, int ldp, const T* a, int dp, T* g) {
  using S = Simd<T>;
  for (int eb = 0; eb < dp; eb += kVec<T>) {
    const typename S::V a0 = S::load(a + eb), a1 = S::load(a + dp + eb),
                        a2 = S::load(a + 2 * dp + eb), a3 = S::load(a + 3 * dp + eb);
    for (int k = 0; k < blk.niv; ++k) {
      const T* p0 = p + blk.iv[k].u;
      T* gj = g + int64_t(blk.iv[k].lo) * dp + eb;
      for (int jj = 0; jj < blk.iv[k].n; ++jj, gj += dp) {
        S::store(gj, S::load(gj) + p0[jj] * a0 + p0[ldp + jj] * a1 + p0[2 * ldp + jj] * a2 +
                         p0[3 * ldp + jj] * a3);
      }
    }
  }
}

// Mask and rab tiles of a block (shared by all heads); the rab only on allowed entries.
template <typename T>
void block_mask_rab(const Block<T>& blk, const Rab<T>& rab, int64_t start, Workspace<T>& ws) {
  const int ld = ws.ld_tile;
  for (int r = 0; r < kRows; ++r) std::fill_n(ws.mask.data() + r * ld, blk.width, T(0));
  for (int r = 0; r < blk.rows; ++r) {
    const int i = blk.i0 + r;
    for (int k = 0; k < blk.runs[r].count; ++k) {
      const int lo = blk.runs[r].lo[k], n = blk.runs[r].n[k], u = r * ld + blk.column(lo);
      std::fill_n(ws.mask.data() + u, n, T(1));
      if (!rab.pos) continue;
      const int64_t tq = rab.ts_q[start + i];
      for (int jj = 0; jj < n; ++jj) {
        const int bk = rab.bucket(tq - rab.ts_k[start + lo + jj]);
        ws.bucket[u + jj] = bk;
        ws.rab[u + jj] = rab.pos[rab_pos_index(i, lo + jj, rab.npos)] + rab.time[bk];
      }
    }
  }
}

// Adds the block's rab gradient tile (dS summed over heads) into the pos / time partials. Keys
// of one row run in time order, so neighbours mostly share a bucket: runs of equal buckets are
// summed in a register before touching dtime (no store-to-load chain through memory).
template <typename T>
void scatter_rab_grad(const Block<T>& blk, const Rab<T>& rab, const Workspace<T>& ws, double* dpos,
                      double* dtime) {
  for (int r = 0; r < blk.rows; ++r) {
    const int i = blk.i0 + r;
    for (int k = 0; k < blk.runs[r].count; ++k) {
      const int lo = blk.runs[r].lo[k], n = blk.runs[r].n[k], u = r * ws.ld_tile + blk.column(lo);
      const T* d = ws.drab.data() + u;
      const int* bk = ws.bucket.data() + u;
      for (int jj = 0; jj < n; ++jj) dpos[rab_pos_index(i, lo + jj, rab.npos)] += d[jj];
      double sum = 0;
      for (int jj = 0; jj < n; ++jj) {
        if (jj > 0 && bk[jj] != bk[jj - 1]) {
          dtime[bk[jj - 1]] += sum;
          sum = 0;
        }
        sum += d[jj];
      }
      dtime[bk[n - 1]] += sum;
    }
  }
}

template <typename T>
void forward(const Ctx& ctx, const HstuAttentionArgs& a, const Geometry& g, const Tensor& o) {
  const Rab<T> rab(a);
  const T alpha = static_cast<T>(a.alpha), scale = static_cast<T>(a.scale);
  const auto out = detail::rows_of<T>(o);
#pragma omp parallel num_threads(detail::threads_for(ctx, g.work))
  {
    Workspace<T> ws(g, false);
    const int ld = ws.ld_tile;
    Block<T> blk;
#pragma omp for schedule(dynamic, 1)
    for (int b = 0; b < g.batch; ++b) {
      const int64_t start = g.cu[b];
      const int L = g.cu[b + 1] - g.cu[b];
      for (int h = 0; h < g.heads; ++h) {
        gather_head(a.k, start, L, h * head_stride(a.k, g.heads), g.dqk,
                    ws.kt.data() + size_t(h) * g.dqk * ws.ldt, ws.ldt, static_cast<T*>(nullptr), 0);
        gather_head(a.v, start, L, h * head_stride(a.v, g.heads), g.dv, static_cast<T*>(nullptr), 0,
                    ws.rows.data() + size_t(h) * g.max_len * ws.dvp, ws.dvp);
      }
      for (int i0 = 0; i0 < L; i0 += kRows) {
        blk.build(i0, L, g.c(b), g.t(b), a);
        block_mask_rab(blk, rab, start, ws);
        for (int h = 0; h < g.heads; ++h) {
          gather_block(a.q, start, blk, h * head_stride(a.q, g.heads), g.dqk, ws.qb.data(),
                       ws.dqkp);
          tile_dot(blk, ws.qb.data(), ws.dqkp, g.dqk, ws.kt.data() + size_t(h) * g.dqk * ws.ldt,
                   ws.ldt, ws.s.data(), ld);
          for (int r = 0; r < kRows; ++r) {
            T* s = ws.s.data() + r * ld;
            const T* m = ws.mask.data() + r * ld;
            const T* rb = ws.rab.data() + r * ld;
            if (rab.pos) {
              for (int u = 0; u < blk.width; ++u) s[u] += rb[u];
            }
            for (int u = 0; u < blk.width; ++u) {
              const T x = alpha * s[u];
              s[u] = m[u] != T(0) ? x / (T(1) + std::exp(-x)) : T(0);  // SiLU on allowed pairs
            }
          }
          tile_times_rows(blk, ws.s.data(), ld, ws.rows.data() + size_t(h) * g.max_len * ws.dvp,
                          ws.dvp, ws.acc.data());
          for (int r = 0; r < blk.rows; ++r) {
            T* oi = out[start + blk.i0 + r] + h * head_stride(o, g.heads);
            for (int e = 0; e < g.dv; ++e) oi[e] = scale * ws.acc[r * ws.dvp + e];
          }
        }
      }
    }
  }
}

template <typename T>
void backward(const Ctx& ctx, const HstuAttentionArgs& a, const Geometry& g, const Tensor& d_o,
              const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& d_rab_pos,
              const Tensor& d_rab_time) {
  const Rab<T> rab(a);
  const bool rab_grad = rab.pos && !d_rab_pos.empty();
  const T alpha = static_cast<T>(a.alpha), scale = static_cast<T>(a.scale);
  const auto dq_rows = detail::rows_of<T>(dq), dk_rows = detail::rows_of<T>(dk),
             dv_rows = detail::rows_of<T>(dv);
  // Fixed groups of sequences, each with its own rab-gradient partials: f64 [groups, 2P-1+NB+1].
  const int groups = rab_grad ? std::min(g.batch, 64) : g.batch;
  const int part_len = rab_grad ? rab.npos + rab.nbuckets + 1 : 0;
  std::vector<double> partial(size_t(groups) * part_len, 0.0);
#pragma omp parallel num_threads(detail::threads_for(ctx, 2 * g.work))
  {
    Workspace<T> ws(g, true);
    const int ld = ws.ld_tile;
    Block<T> blk;
#pragma omp for schedule(dynamic, 1)
    for (int grp = 0; grp < groups; ++grp) {
      double* dpos = partial.data() + size_t(grp) * part_len;
      double* dtime = dpos + rab.npos;
      const int b_end = static_cast<int>(int64_t(grp + 1) * g.batch / groups);
      for (int b = static_cast<int>(int64_t(grp) * g.batch / groups); b < b_end; ++b) {
        const int64_t start = g.cu[b];
        const int L = g.cu[b + 1] - g.cu[b];
        for (int h = 0; h < g.heads; ++h) {
          gather_head(a.k, start, L, h * head_stride(a.k, g.heads), g.dqk,
                      ws.kt.data() + size_t(h) * g.dqk * ws.ldt, ws.ldt,
                      ws.rows.data() + size_t(h) * g.max_len * ws.dqkp, ws.dqkp);
          gather_head(a.v, start, L, h * head_stride(a.v, g.heads), g.dv,
                      ws.vt.data() + size_t(h) * g.dv * ws.ldt, ws.ldt, static_cast<T*>(nullptr),
                      0);
          std::fill_n(ws.dk.data() + size_t(h) * g.max_len * ws.dqkp, size_t(L) * ws.dqkp, T(0));
          std::fill_n(ws.dv.data() + size_t(h) * g.max_len * ws.dvp, size_t(L) * ws.dvp, T(0));
        }
        for (int i0 = 0; i0 < L; i0 += kRows) {
          blk.build(i0, L, g.c(b), g.t(b), a);
          block_mask_rab(blk, rab, start, ws);
          if (rab_grad) {
            for (int r = 0; r < kRows; ++r) std::fill_n(ws.drab.data() + r * ld, blk.width, T(0));
          }
          for (int h = 0; h < g.heads; ++h) {
            const T* kt = ws.kt.data() + size_t(h) * g.dqk * ws.ldt;
            const T* vt = ws.vt.data() + size_t(h) * g.dv * ws.ldt;
            gather_block(a.q, start, blk, h * head_stride(a.q, g.heads), g.dqk, ws.qb.data(),
                         ws.dqkp);
            gather_block(d_o, start, blk, h * head_stride(d_o, g.heads), g.dv, ws.ob.data(),
                         ws.dvp);
            tile_dot(blk, ws.qb.data(), ws.dqkp, g.dqk, kt, ws.ldt, ws.s.data(), ld);
            tile_dot(blk, ws.ob.data(), ws.dvp, g.dv, vt, ws.ldt, ws.p2.data(), ld);
            // s <- P = scale * SiLU(S); p2 <- dS = dL/d(q.k + rab) = alpha*scale * dO.v * SiLU'(S).
            for (int r = 0; r < kRows; ++r) {
              T* s = ws.s.data() + r * ld;
              T* dp = ws.p2.data() + r * ld;
              const T* m = ws.mask.data() + r * ld;
              const T* rb = ws.rab.data() + r * ld;
              if (rab.pos) {
                for (int u = 0; u < blk.width; ++u) s[u] += rb[u];
              }
              for (int u = 0; u < blk.width; ++u) {
                const T x = alpha * s[u];
                const T sig = T(1) / (T(1) + std::exp(-x));
                const bool on = m[u] != T(0);
                s[u] = on ? scale * x * sig : T(0);
                dp[u] = on ? alpha * scale * dp[u] * sig * (T(1) + x * (T(1) - sig)) : T(0);
              }
              if (rab_grad) {
                T* dr = ws.drab.data() + r * ld;
                for (int u = 0; u < blk.width; ++u) dr[u] += dp[u];
              }
            }
            tile_times_rows(blk, ws.p2.data(), ld, ws.rows.data() + size_t(h) * g.max_len * ws.dqkp,
                            ws.dqkp, ws.acc.data());
            for (int r = 0; r < blk.rows; ++r) {
              std::copy_n(ws.acc.data() + r * ws.dqkp, g.dqk,
                          dq_rows[start + blk.i0 + r] + h * head_stride(dq, g.heads));
            }
            tile_t_times_rows(blk, ws.s.data(), ld, ws.ob.data(), ws.dvp,
                              ws.dv.data() + size_t(h) * g.max_len * ws.dvp);
            tile_t_times_rows(blk, ws.p2.data(), ld, ws.qb.data(), ws.dqkp,
                              ws.dk.data() + size_t(h) * g.max_len * ws.dqkp);
          }
          if (rab_grad) scatter_rab_grad(blk, rab, ws, dpos, dtime);
        }
        for (int h = 0; h < g.heads; ++h) {
          const T* dkh = ws.dk.data() + size_t(h) * g.max_len * ws.dqkp;
          const T* dvh = ws.dv.data() + size_t(h) * g.max_len * ws.dvp;
          for (int j = 0; j < L; ++j) {
            std::copy_n(dkh + int64_t(j) * ws.dqkp, g.dqk,
                        dk_rows[start + j] + h * head_stride(dk, g.heads));
            std::copy_n(dvh + int64_t(j) * ws.dvp, g.dv,
                        dv_rows[start + j] + h * head_stride(dv, g.heads));
          }
        }
      }
    }
  }
  if (!rab_grad) return;
  T* out_pos = d_rab_pos.as<T>();
  T* out_time = d_rab_time.as<T>();
  for (int k = 0; k < part_len; ++k) {
    double sum = 0;
    for (int grp = 0; grp < groups; ++grp) sum += partial[size_t(grp) * part_len + k];
    if (k < rab.npos) {
      out_pos[k] += static_cast<T>(sum);
    } else {
      out_time[k - rab.npos] += static_cast<T>(sum);
    }
  }
}

}  // namespace

void hstu_attention_fwd(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& o) {
  const Geometry g = validate(ctx, args);
  check_heads(o, args.q.shape[0], g.heads, g.dv, "o");
  detail::check_dtype(o, args.q.dtype, "hstu_attention o");
  detail::dispatch_float(args.q, "hstu_attention_fwd",
                         [&](auto t) { forward<decltype(t)>(ctx, args, g, o); });
}

void hstu_attention_bwd(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& d_o,
                        const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& d_rab_pos, const Tensor& d_rab_time) {
  const Geometry g = validate(ctx, args);
  const DType dt = args.q.dtype;
  const int64_t T = args.q.shape[0];
  check_heads(d_o, T, g.heads, g.dv, "d_o");
  check_heads(dq, T, g.heads, g.dqk, "dq");
  check_heads(dk, T, g.heads, g.dqk, "dk");
  check_heads(dv, T, g.heads, g.dv, "dv");
  for (const Tensor* x : {&d_o, &dq, &dk, &dv}) detail::check_dtype(*x, dt, "hstu_attention grads");
  if (args.has_rab() && !d_rab_pos.empty()) {
    check_shape(d_rab_pos, {args.rab_pos.shape[0]}, "hstu_attention d_rab_pos");
    check_shape(d_rab_time, {args.rab_time.shape[0]}, "hstu_attention d_rab_time");
    detail::check_dtype(d_rab_pos, dt, "hstu_attention d_rab_pos");
    detail::check_dtype(d_rab_time, dt, "hstu_attention d_rab_time");
  }
  detail::dispatch_float(args.q, "hstu_attention_bwd", [&](auto t) {
    backward<decltype(t)>(ctx, args, g, d_o, dq, dk, dv, d_rab_pos, d_rab_time);
  });
}

}  // namespace hstu::cpu
