// bench_attention.h — `hstu bench attention`: the CUDA HSTU attention kernels (forward, backward
// in deterministic and atomic-dQ modes) over a sweep of (batch, length, heads, head dim), full-
// length and jagged, after one validation against the CPU reference.
//
// The one decision: FLOPs are counted FlashAttention-style (fwd = 4 H d sum_b L_b^2, halved when
// causal; bwd = 2.5 x fwd), so every TFLOPS figure is directly comparable with the FA2 / NVIDIA
// HSTU numbers of docs/BENCHMARKS.md and the performance reference, whose ratio is printed.
#pragma once

#include <string>
#include <vector>

namespace hstu {

// args (after "attention"):
//   --shape B,L,H,d   a shape to run instead of the default sweep (repeatable)
//   --jagged          lengths uniform in [L/2, L] (default: both full and jagged in the sweep)
//   --full            full-length sequences only
//   --dtype bf16|fp16 (default bf16)       --non-causal
//   --warmup N (3)    --reps N (20, median reported)      --no-validate   --fwd-only
//   --kernel auto|sm80|sm90|both  auto: the dispatch's choice; sm80: HSTU_ATTN_SM80=1 for the
//                     run; sm90: HSTU_ATTN_SM90=1 (the sm_90a forward wherever it can run); both:
//                     each forward on sm90, then again on sm80 (A/B, printed on the next line)
//   --rab             relative attention bias (positions + 128 time buckets), with its gradient
//   --own-plan        each call builds its own launch plan (a lone call); by default the calls
//                     take the step's (hstu_attention_plan, built once and timed apart, as the
//                     rab time buckets: a model step's way)
// Columns: bwd = deterministic mode (separate dQ kernel), bwdA = atomic-dQ mode, f+b = fwd + the
// faster backward. Returns 0, or 1 when the validation fails or CUDA is unavailable.
int run_attention_bench(const std::vector<std::string>& args);

}  // namespace hstu
