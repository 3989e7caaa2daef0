// jagged_checks.cpp — see jagged_checks.h.
#include "ops/jagged_checks.h"

#include "core/error.h"

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

}  // namespace hstu
