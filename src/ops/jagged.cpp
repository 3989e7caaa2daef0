// jagged.cpp — the entry points of the ranking jagged ops (ops/jagged.h): each runs the backend of
// ctx.device, cpu/jagged.h or (in CUDA builds) cuda/jagged.h; a CPU-only build throws for a CUDA
// ctx and needs no CUDA symbol. Also the argument checks both backends share (detail/checks.h)
// and the host ranking layout (token offsets, targets, positions), which no backend computes.
#include "ops/jagged.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cpu/jagged.h"
#include "ops/detail/checks.h"
#if defined(HSTU_WITH_CUDA)
#include "ops/cuda/jagged.h"
#endif

namespace hstu {
namespace {

void check_device(const Tensor& t, Device device, const char* what) {
  HSTU_CHECK(t.device == device, what, " must be on the ",
             device == Device::kCPU ? "host (CPU backend)" : "CUDA device", ", got ", t.str());
}

// Throws unless t is i32 [B+1] (B >= 0) on `device`.
void check_offsets(const Tensor& t, Device device, const char* what) {
  check_device(t, device, what);
  check_shape(t, {-1}, what);
  HSTU_CHECK(t.dtype == DType::kI32, what, " must be i32, got ", t.str());
  HSTU_CHECK(t.dim(0) >= 1, what, " needs B+1 >= 1 entries, got ", t.str());
}

// Throws unless t is [rows, d] (-1 = any) of dtype dt on `device`.
void check_rows(const Tensor& t, int64_t rows, int64_t d, DType dt, Device device,
                const char* what) {
  check_device(t, device, what);
  check_shape(t, {rows, d}, what);
  HSTU_CHECK(t.dtype == dt, what, " is ", t.str(), ", expected ", dtype_name(dt));
}

// Throws unless t is a floating-point [*, *] tensor on `device`.
void check_float_rows(const Tensor& t, Device device, const char* what, const char* op) {
  check_device(t, device, what);
  check_shape(t, {-1, -1}, what);
  HSTU_CHECK(is_float(t.dtype), op, ": ", what, " must be floating point, got ", t.str());
}

// ctx / item / action rows -> the sequence rows `seq`, whichever way the op moves them.
RankingTokenShape check_tokens(const Tensor& ctx_emb, const Tensor& item_emb,
                               const Tensor& action_emb, const Tensor& offsets,
                               int32_t num_contextual, const Tensor& seq, Device device,
                               const char* op) {
  RankingTokenShape s;
  check_offsets(offsets, device, "ranking tokens offsets");
  s.batch = offsets.dim(0) - 1;
  s.c = num_contextual;
  s.k = action_emb.empty() ? 1 : 2;
  HSTU_CHECK(s.c >= 0, op, ": num_contextual = ", s.c);
  check_float_rows(item_emb, device, "ranking tokens item rows", op);
  s.events = item_emb.dim(0);
  s.d = item_emb.dim(1);
  const DType dt = item_emb.dtype;
  if (s.k == 2) check_rows(action_emb, s.events, s.d, dt, device, "ranking tokens action rows");
  if (s.c > 0) {
    check_rows(ctx_emb, s.batch * s.c, s.d, dt, device, "ranking tokens contextual rows");
  } else {
    HSTU_CHECK(ctx_emb.empty() || ctx_emb.dim(0) == 0, op,
               ": contextual rows given with num_contextual = 0");
  }
  check_rows(seq, s.batch * s.c + s.k * s.events, s.d, dt, device, "ranking tokens sequence rows");
  return s;
}

// x [T', D] is the sequence side, out [N, D] the candidate side, whichever way the op moves rows.
int64_t check_candidates(const Tensor& x, const Tensor& tok_offsets, const Tensor& cand_offsets,
                         int32_t stride, const Tensor& out, Device device, const char* op) {
  check_offsets(tok_offsets, device, "candidate rows token offsets");
  check_offsets(cand_offsets, device, "candidate rows candidate offsets");
  const int64_t batch = tok_offsets.dim(0) - 1;
  HSTU_CHECK(cand_offsets.dim(0) == batch + 1, op, ": ", cand_offsets.dim(0),
             " candidate offsets for ", batch + 1, " token offsets");
  HSTU_CHECK(stride >= 1, op, ": stride = ", stride);
  check_float_rows(x, device, "candidate rows sequence", op);
  check_rows(out, -1, x.dim(1), x.dtype, device, "candidate rows");
  return batch;
}

}  // namespace

RankingTokenShape check_ranking_tokens_fwd(const Tensor& ctx_emb, const Tensor& item_emb,
                                           const Tensor& action_emb, const Tensor& offsets,
                                           int32_t num_contextual, const Tensor& out,
                                           const Tensor& out_offsets, Device device) {
  const RankingTokenShape s = check_tokens(ctx_emb, item_emb, action_emb, offsets, num_contextual,
                                           out, device, "ranking_tokens_fwd");
  check_offsets(out_offsets, device, "ranking_tokens_fwd out_offsets");
  check_shape(out_offsets, {s.batch + 1}, "ranking_tokens_fwd out_offsets");
  HSTU_CHECK(out.dim(0) < (int64_t(1) << 31), "ranking_tokens_fwd: more than 2^31 tokens");
  return s;
}

RankingTokenShape check_ranking_tokens_bwd(const Tensor& d_out, const Tensor& offsets,
                                           int32_t num_contextual, const Tensor& d_ctx,
                                           const Tensor& d_item, const Tensor& d_action,
                                           Device device) {
  return check_tokens(d_ctx, d_item, d_action, offsets, num_contextual, d_out, device,
                      "ranking_tokens_bwd");
}

int64_t check_gather_candidate_rows(const Tensor& x, const Tensor& tok_offsets,
                                    const Tensor& cand_offsets, int32_t stride, const Tensor& out,
                                    Device device) {
  return check_candidates(x, tok_offsets, cand_offsets, stride, out, device,
                          "gather_candidate_rows");
}

int64_t check_gather_candidate_rows_bwd(const Tensor& d_out, const Tensor& tok_offsets,
                                        const Tensor& cand_offsets, int32_t stride,
                                        const Tensor& dx, Device device) {
  return check_candidates(dx, tok_offsets, cand_offsets, stride, d_out, device,
                          "gather_candidate_rows_bwd");
}

void ranking_tokens_fwd(Ctx& ctx, const Tensor& ctx_emb, const Tensor& item_emb,
                        const Tensor& action_emb, const Tensor& offsets, int32_t num_contextual,
                        const Tensor& out, const Tensor& out_offsets) {
  if (ctx.cpu())
    return cpu::ranking_tokens_fwd(ctx, ctx_emb, item_emb, action_emb, offsets, num_contextual, out,
                                   out_offsets);
  HSTU_CUDA_DISPATCH(return cuda::ranking_tokens_fwd(ctx, ctx_emb, item_emb, action_emb, offsets,
                                                     num_contextual, out, out_offsets));
}
void ranking_tokens_bwd(Ctx& ctx, const Tensor& d_out, const Tensor& offsets,
                        int32_t num_contextual, const Tensor& d_ctx, const Tensor& d_item,
                        const Tensor& d_action) {
  if (ctx.cpu())
    return cpu::ranking_tokens_bwd(ctx, d_out, offsets, num_contextual, d_ctx, d_item, d_action);
  HSTU_CUDA_DISPATCH(return cuda::ranking_tokens_bwd(ctx, d_out, offsets, num_contextual, d_ctx,
                                                     d_item, d_action));
}
void gather_candidate_rows(Ctx& ctx, const Tensor& x, const Tensor& tok_offsets,
                           const Tensor& cand_offsets, int32_t stride, const Tensor& out) {
  if (ctx.cpu()) return cpu::gather_candidate_rows(ctx, x, tok_offsets, cand_offsets, stride, out);
  HSTU_CUDA_DISPATCH(
      return cuda::gather_candidate_rows(ctx, x, tok_offsets, cand_offsets, stride, out));
}
void gather_candidate_rows_bwd(Ctx& ctx, const Tensor& d_out, const Tensor& tok_offsets,
                               const Tensor& cand_offsets, int32_t stride, const Tensor& dx) {
  if (ctx.cpu())
    return cpu::gather_candidate_rows_bwd(ctx, d_out, tok_offsets, cand_offsets, stride, dx);
  HSTU_CUDA_DISPATCH(
      return cuda::gather_candidate_rows_bwd(ctx, d_out, tok_offsets, cand_offsets, stride, dx));
}

void ranking_layout(std::span<const int32_t> offsets, std::span<const int32_t> num_candidates,
                    int32_t num_contextual, bool interleave, int64_t num_position_buckets,
                    RankingLayout& out) {
  HSTU_CHECK(!offsets.empty() && offsets[0] == 0, "ranking_layout: offsets must start at 0");
  const int64_t batch = static_cast<int64_t>(offsets.size()) - 1;
  HSTU_CHECK(static_cast<int64_t>(num_candidates.size()) == batch,
             "ranking_layout: ", num_candidates.size(), " candidate counts for ", batch,
             " samples");
  HSTU_CHECK(num_contextual >= 0, "ranking_layout: num_contextual = ", num_contextual);
  HSTU_CHECK(num_position_buckets >= 1,
             "ranking_layout: num_position_buckets = ", num_position_buckets);
  const int64_t k = interleave ? 2 : 1, c = num_contextual;
  out.token_offsets.resize(batch + 1);
  out.candidate_offsets.resize(batch + 1);
  out.num_contexts.assign(batch, num_contextual);
  out.num_targets.resize(batch);
  out.token_offsets[0] = out.candidate_offsets[0] = 0;
  out.max_seqlen = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = offsets[b + 1] - offsets[b], nc = num_candidates[b];
    HSTU_CHECK(n >= 0, "ranking_layout: offsets decrease at ", b);
    HSTU_CHECK(nc >= 0 && nc <= n, "ranking_layout: sample ", b, " has ", nc, " candidates in ", n,
               " events");
    const int64_t len = c + k * n;
    HSTU_CHECK(out.token_offsets[b] + len <= INT32_MAX, "ranking_layout: more than 2^31 tokens");
    out.token_offsets[b + 1] = static_cast<int32_t>(out.token_offsets[b] + len);
    out.candidate_offsets[b + 1] = static_cast<int32_t>(out.candidate_offsets[b] + nc);
    out.num_targets[b] = static_cast<int32_t>(k * nc);
    out.max_seqlen = std::max(out.max_seqlen, static_cast<int32_t>(len));
  }
  out.positions.resize(out.token_offsets[batch]);
  out.context_positions.resize(batch * c);
  out.item_positions.resize(offsets[batch]);
  out.action_positions.resize(interleave ? offsets[batch] : 0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = out.token_offsets[b + 1] - out.token_offsets[b];
    const int64_t hi = std::min(len - out.num_targets[b], num_position_buckets - 1);
    int32_t* pos = out.positions.data() + out.token_offsets[b];
    for (int64_t n = 0; n < len; ++n) pos[n] = static_cast<int32_t>(std::min(n, hi));
    std::copy_n(pos, c, out.context_positions.begin() + b * c);
    for (int64_t i = 0; i < offsets[b + 1] - offsets[b]; ++i) {
      out.item_positions[offsets[b] + i] = pos[c + k * i];
      if (interleave) out.action_positions[offsets[b] + i] = pos[c + 2 * i + 1];
    }
  }
}

}  // namespace hstu
