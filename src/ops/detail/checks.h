// checks.h — the argument checks that both backends of an op family share (private to
// src/ops/: the CPU and CUDA backends call them, nothing outside ops/ does): the head structure of
// the activations and of the attention operands, and every tensor's shape, dtype and device of
// the jagged ops (jagged.h), each error naming the argument. The jagged offsets' values are not
// read here (CUDA never reads device offsets on the host); the CPU backend validates them on top
// (cpu/jagged.cpp). Defined in activation.cpp and jagged.cpp (check_heads inline).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/activation.h"

namespace hstu {

// ---- activation.h ---------------------------------------------------------------------------

// Throws unless every tensor is a 2-D [rows, count * stride] view with stride >= width, of x's
// rows and dtype family; returns the width (heads.width, or x's head stride when 0).
int64_t check_act_heads(const ActHeads& heads, const Tensor& x,
                        std::initializer_list<const Tensor*> others, const char* op);

// ---- hstu_attention.h -----------------------------------------------------------------------

// Throws unless x is a 2-D [rows, H*s] operand whose head stride s holds `width` columns.
inline void check_heads(const Tensor& x, int64_t rows, int32_t heads, int32_t width,
                        const char* what) {
  HSTU_CHECK(x.ndim == 2 && x.shape[0] == rows && heads >= 1 && x.shape[1] % heads == 0 &&
                 x.shape[1] / heads >= width && width >= 1,
             "hstu_attention: ", what, " is ", x.str(), ", expected [", rows, ", ", heads,
             " heads x a stride of at least ", width, " columns]");
}

// ---- jagged.h -------------------------------------------------------------------------------

// The checked shapes of ranking_tokens_fwd / _bwd: B samples, T events (the item rows), C
// contextual tokens per sample, k tokens per event (2 with action rows), row width D.
struct RankingTokenShape {
  int64_t batch = 0, events = 0, c = 0, k = 1, d = 0;
};

// The arguments of ranking_tokens_fwd (out [B*C + k*T, D] and out_offsets i32 [B+1]) and of
// ranking_tokens_bwd (the same tensors, gradients, as its arguments name them).
RankingTokenShape check_ranking_tokens_fwd(const Tensor& ctx_emb, const Tensor& item_emb,
                                           const Tensor& action_emb, const Tensor& offsets,
                                           int32_t num_contextual, const Tensor& out,
                                           const Tensor& out_offsets, Device device);
RankingTokenShape check_ranking_tokens_bwd(const Tensor& d_out, const Tensor& offsets,
                                           int32_t num_contextual, const Tensor& d_ctx,
                                           const Tensor& d_item, const Tensor& d_action,
                                           Device device);

// The arguments of gather_candidate_rows (x [T', D] -> out [N, D]) and of
// gather_candidate_rows_bwd (d_out [N, D] -> dx [T', D]); returns B.
int64_t check_gather_candidate_rows(const Tensor& x, const Tensor& tok_offsets,
                                    const Tensor& cand_offsets, int32_t stride, const Tensor& out,
                                    Device device);
int64_t check_gather_candidate_rows_bwd(const Tensor& d_out, const Tensor& tok_offsets,
                                        const Tensor& cand_offsets, int32_t stride,
                                        const Tensor& dx, Device device);

}  // namespace hstu
