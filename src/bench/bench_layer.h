// bench_layer.h — `hstu bench layer`: one HSTU layer (recsys-examples' variant: learnable
// LayerNorms, uvqk bias, alpha = 1/sqrt(d), dropout 0.2) forward + backward on full-length
// sequences, timed after warm-up (median), with recsys-examples' FLOP accounting and the ratio to
// its published layer latencies (H100, B=32, D=1024, H=4, d=256).
#pragma once

#include <string>
#include <vector>

namespace hstu {

// args (after "layer"): --shape B,L,D,H,d (repeatable; default: 32x{1024,2048,4096,8192}, D=1024,
// 4 heads of 256), --device cpu|cuda (default: cuda when available), --reps N (10),
// --recompute (input LayerNorm and SiLU recomputation), --phases (the median GPU time of each
// phase of the layer, i.e. of its kernels, after the table row), --unfused (the element-wise
// passes around the attention unfused: HstuLayerConfig.fused = false). Returns 0 on success.
int run_layer_bench(const std::vector<std::string>& args);

}  // namespace hstu
