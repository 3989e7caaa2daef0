// jagged_checks.h — the argument checks of the jagged ops (jagged.h) that both backends share:
// every tensor's shape, dtype and device (the backend's: CPU or CUDA), each error naming the
// argument. The offsets' values are not read here (CUDA never reads device offsets on the host);
// the CPU backend validates them on top (jagged_cpu.cpp).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hstu {

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
