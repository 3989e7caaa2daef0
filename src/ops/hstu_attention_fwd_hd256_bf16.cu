// hstu_attention_fwd_hd256_bf16.cu — instantiates the HSTU attention forward for head widths
// padded to 256, bf16 inputs. One (head dim, dtype) pair per file so the kernels compile in
// parallel; the code is in src/ops/cuda/attention_fwd.cuh.
#include "ops/cuda/attention_fwd.cuh"

namespace hstu::cuda::attn {
template void run_fwd<__nv_bfloat16, 256>(const HstuAttnParams&, cudaStream_t);
}  // namespace hstu::cuda::attn
