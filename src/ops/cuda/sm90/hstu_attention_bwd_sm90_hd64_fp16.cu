// hstu_attention_bwd_sm90_hd64_fp16.cu — instantiates the sm_90a HSTU attention backward (dK/dV
// and dQ kernels) for head widths padded to 64, fp16 (one bucket x dtype per file, so nvcc
// compiles them in parallel). The code is in attention_bwd_sm90_run.cuh; nothing here without the
// CUTLASS headers (CMake).
#include "ops/cuda/sm90/attention_bwd_sm90_run.cuh"

namespace hstu::cuda::attn {
template void run_bwd_sm90<__half, 64>(const HstuAttnParams&, int*, cudaStream_t, cudaStream_t);
}  // namespace hstu::cuda::attn
