// cpu/jagged.cpp — CPU ranking token sequence (build / split back), and the candidate-row gather
// and its scatter.
//
// Every op is a row permutation, parallel over samples: each output row is written by exactly
// one thread, so results are exact copies and independent of the thread count. Shapes, dtypes
// and devices are checked by detail/checks.h (shared with CUDA); the offsets' values are
// validated here, on the host, before any row moves (first 0, non-decreasing, last = rows).
#include "ops/cpu/jagged.h"

#include <algorithm>
#include <cstring>

#include "ops/cpu/common.h"
#include "ops/detail/checks.h"

namespace hstu::cpu {
namespace {

using detail::Rows;
using detail::rows_of;

// The values of offsets whose shape detail/checks.h passed: first 0, non-decreasing, last = the
// `rows` rows of `rows_what`. Returns them.
const int32_t* checked_offsets(const Tensor& t, int64_t rows, const char* what,
                               const char* rows_what) {
  const int32_t* o = t.as<int32_t>();
  const int64_t batch = t.dim(0) - 1;
  HSTU_CHECK(o[0] == 0, what, "[0] = ", o[0], ", expected 0");
  for (int64_t b = 0; b < batch; ++b) {
    HSTU_CHECK(o[b + 1] >= o[b], what, " decrease at ", b, " (", o[b], " -> ", o[b + 1], ")");
  }
  HSTU_CHECK(o[batch] == rows, what, " end at ", o[batch], ", but ", rows_what, " has ", rows,
             " rows");
  return o;
}

template <typename T>
void copy_row(const T* src, T* dst, int64_t d) {
  std::memcpy(dst, src, static_cast<size_t>(d) * sizeof(T));
}

}  // namespace

void ranking_tokens_fwd(Ctx& ctx, const Tensor& ctx_emb, const Tensor& item_emb,
                        const Tensor& action_emb, const Tensor& offsets, int32_t num_contextual,
                        const Tensor& out, const Tensor& out_offsets) {
  const RankingTokenShape a = check_ranking_tokens_fwd(
      ctx_emb, item_emb, action_emb, offsets, num_contextual, out, out_offsets, Device::kCPU);
  const int32_t* off =
      checked_offsets(offsets, a.events, "ranking tokens offsets", "ranking tokens item rows");
  int32_t* oo = out_offsets.as<int32_t>();
  for (int64_t b = 0; b <= a.batch; ++b) oo[b] = static_cast<int32_t>(b * a.c + a.k * off[b]);
  detail::dispatch_float(item_emb, "ranking_tokens_fwd", [&]<typename T>(T) {
    const Rows<const T> cr = a.c > 0 ? rows_of<const T>(ctx_emb) : Rows<const T>{};
    const Rows<const T> ir = rows_of<const T>(item_emb);
    const Rows<const T> ar = a.k == 2 ? rows_of<const T>(action_emb) : Rows<const T>{};
    const Rows<T> yr = rows_of<T>(out);
#pragma omp parallel for schedule(dynamic, 4) \
    num_threads(detail::threads_for(ctx, out.dim(0) * a.d))
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t o = off[b], n = off[b + 1] - o, base = oo[b];
      for (int64_t c = 0; c < a.c; ++c) copy_row(cr[b * a.c + c], yr[base + c], a.d);
      for (int64_t i = 0; i < n; ++i) {
        copy_row(ir[o + i], yr[base + a.c + a.k * i], a.d);
        if (a.k == 2) copy_row(ar[o + i], yr[base + a.c + 2 * i + 1], a.d);
      }
    }
  });
}

void ranking_tokens_bwd(Ctx& ctx, const Tensor& d_out, const Tensor& offsets,
                        int32_t num_contextual, const Tensor& d_ctx, const Tensor& d_item,
                        const Tensor& d_action) {
  const RankingTokenShape a = check_ranking_tokens_bwd(d_out, offsets, num_contextual, d_ctx,
                                                       d_item, d_action, Device::kCPU);
  const int32_t* off =
      checked_offsets(offsets, a.events, "ranking tokens offsets", "ranking tokens item rows");
  detail::dispatch_float(d_item, "ranking_tokens_bwd", [&]<typename T>(T) {
    const Rows<T> cr = a.c > 0 ? rows_of<T>(d_ctx) : Rows<T>{};
    const Rows<T> ir = rows_of<T>(d_item);
    const Rows<T> ar = a.k == 2 ? rows_of<T>(d_action) : Rows<T>{};
    const Rows<const T> yr = rows_of<const T>(d_out);
#pragma omp parallel for schedule(dynamic, 4) \
    num_threads(detail::threads_for(ctx, d_out.dim(0) * a.d))
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t o = off[b], n = off[b + 1] - o, base = b * a.c + a.k * o;
      for (int64_t c = 0; c < a.c; ++c) copy_row(yr[base + c], cr[b * a.c + c], a.d);
      for (int64_t i = 0; i < n; ++i) {
        copy_row(yr[base + a.c + a.k * i], ir[o + i], a.d);
        if (a.k == 2) copy_row(yr[base + a.c + 2 * i + 1], ar[o + i], a.d);
      }
    }
  });
}

namespace {

// The validated offsets of gather_candidate_rows / _bwd (whose shapes check_gather_candidate_rows
// passed): x [T', D] is the sequence side, out [N, D] the candidate side.
struct CandidateArgs {
  const int32_t* tok = nullptr;
  const int32_t* cand = nullptr;
  int64_t batch = 0;
};

CandidateArgs checked_candidates(const Tensor& x, const Tensor& tok_offsets,
                                 const Tensor& cand_offsets, int32_t stride, const Tensor& out,
                                 const char* op) {
  CandidateArgs a;
  a.batch = tok_offsets.dim(0) - 1;
  a.tok = checked_offsets(tok_offsets, x.dim(0), "candidate rows token offsets",
                          "candidate rows sequence");
  a.cand = checked_offsets(cand_offsets, out.dim(0), "candidate rows candidate offsets",
                           "candidate rows");
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t nc = a.cand[b + 1] - a.cand[b], len = a.tok[b + 1] - a.tok[b];
    HSTU_CHECK(int64_t{stride} * nc <= len, op, ": sample ", b, " has ", nc, " candidates of ",
               stride, " tokens in ", len, " tokens");
  }
  return a;
}

}  // namespace

void gather_candidate_rows(Ctx& ctx, const Tensor& x, const Tensor& tok_offsets,
                           const Tensor& cand_offsets, int32_t stride, const Tensor& out) {
  check_gather_candidate_rows(x, tok_offsets, cand_offsets, stride, out, Device::kCPU);
  const CandidateArgs a =
      checked_candidates(x, tok_offsets, cand_offsets, stride, out, "gather_candidate_rows");
  const int64_t d = x.dim(1);
  detail::dispatch_float(x, "gather_candidate_rows", [&]<typename T>(T) {
    const Rows<const T> xr = rows_of<const T>(x);
    const Rows<T> yr = rows_of<T>(out);
#pragma omp parallel for schedule(dynamic, 4) num_threads(detail::threads_for(ctx, out.dim(0) * d))
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t nc = a.cand[b + 1] - a.cand[b], first = a.tok[b + 1] - stride * nc;
      for (int64_t j = 0; j < nc; ++j) copy_row(xr[first + stride * j], yr[a.cand[b] + j], d);
    }
  });
}

void gather_candidate_rows_bwd(Ctx& ctx, const Tensor& d_out, const Tensor& tok_offsets,
                               const Tensor& cand_offsets, int32_t stride, const Tensor& dx) {
  check_gather_candidate_rows_bwd(d_out, tok_offsets, cand_offsets, stride, dx, Device::kCPU);
  const CandidateArgs a =
      checked_candidates(dx, tok_offsets, cand_offsets, stride, d_out, "gather_candidate_rows_bwd");
  const int64_t d = dx.dim(1);
  detail::dispatch_float(dx, "gather_candidate_rows_bwd", [&]<typename T>(T) {
    const Rows<const T> yr = rows_of<const T>(d_out);
    const Rows<T> xr = rows_of<T>(dx);
#pragma omp parallel for schedule(dynamic, 4) num_threads(detail::threads_for(ctx, dx.dim(0) * d))
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t nc = a.cand[b + 1] - a.cand[b], first = a.tok[b + 1] - stride * nc;
      for (int64_t r = a.tok[b]; r < a.tok[b + 1]; ++r) std::fill_n(xr[r], d, T(0));
      for (int64_t j = 0; j < nc; ++j) copy_row(yr[a.cand[b] + j], xr[first + stride * j], d);
    }
  });
}

}  // namespace hstu::cpu
