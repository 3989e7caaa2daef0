// hstu_attention_bwd_hd256_bf16.cu — instantiates the HSTU attention backward for head widths
// padded to 256, bf16 inputs. One (head dim, dtype) pair per file so the kernels compile in
// parallel; the code is in src/ops/cuda/attention_bwd.cuh.
#include "ops/cuda/attention_bwd.cuh"

namespace hstu::cuda::attn {
template void run_bwd<__nv_bfloat16, 256>(const HstuAttnParams&, bool, cudaStream_t, cudaStream_t);
}  // namespace hstu::cuda::attn
