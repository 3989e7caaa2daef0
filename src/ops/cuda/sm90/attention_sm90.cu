// attention_sm90.cu — which HSTU attention calls the sm_90a kernels take (attention_sm90.h):
// the device's compute capability (cached per device), the HSTU_ATTN_SM80=1 override and the
// operands' TMA constraints. Compiles without CUTLASS; the kernels themselves are in
// attention_fwd_sm90.cuh and attention_bwd_sm90.cuh.
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/cuda_check.h"
#include "ops/cuda/sm90/attention_sm90.h"

namespace hstu::cuda::attn {

namespace {

bool env_is_1(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "1") == 0;
}

bool device_is_sm90() {
  static std::mutex mu;
  static int cc[64] = {};  // major * 10 + minor, 0 = not asked yet
  int dev = 0;
  HSTU_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return false;
  std::lock_guard<std::mutex> lock(mu);
  if (cc[dev] == 0) {
    int major = 0, minor = 0;
    HSTU_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    HSTU_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    cc[dev] = major * 10 + minor;
  }
  return cc[dev] == 90;  // sm_90a code runs on 9.0 only
}

// Where the sm_90a forward measured slower than the sm80 one, the dispatch keeps sm80 unless
// HSTU_ATTN_SM90=1 forces it (tests and A/B benchmarks). H200, forward, bf16, causal, sm90 / sm80:
//   - short sequences: 128/192-row tiles of one CTA per SM waste most of their rows. d 64:
//     0.70x at 128 x 200 x 2, 0.71x at 128 x 256 x 2, 0.99x at 64 x 384 x 4, 1.38x at
//     32 x 2048 x 4; d 128: 1.04x at 128 x 256 x 4, 1.20x at 128 x 512 x 4; d 256: 1.64x at
//     64 x 256 x 4. So sm90 from 512 tokens at d <= 64 and from 256 above.
//   - rab: with the timestamps' buckets computed per element in the consumer (before session
//     12) 0.49x at 128 x 200 x 2 x 64, 1.13x at 32 x 1024 x 4 x 128, 1.20x at 32 x 4096 x 4 x 128.
//     Both kernels now read precomputed buckets and tables in shared memory (rab_buckets.cuh),
//     and the no-rab lengths apply: H200, rab forward sm90 / sm80 1.98x at 32 x 1024 x 4 x 128
//     (0.213 vs 0.423 ms), 0.92x at 128 x 200 x 2 x 64 (below the 512 tokens d 64 needs).
bool sm90_faster(const HstuAttnParams& p, int padded_head_dim) {
  if (env_is_1("HSTU_ATTN_SM90")) return true;
  return p.max_seqlen >= (padded_head_dim <= 64 ? 512 : 256);
}

// rab on sm90 needs the precomputed buckets and its position window in shared memory
// (attention_fwd_sm90.cuh, RabSmem: 4 bytes per token of max_seqlen beside the tiles; the d 256
// tiles leave the least room).
bool sm90_rab_fits(const HstuAttnParams& p, int padded_head_dim) {
  if (!p.rab_pos) return true;
  return p.rab_bkt != nullptr && p.max_seqlen <= (padded_head_dim >= 256 ? 2048 : 4096);
}

// rab in the backward (attention_bwd_sm90_rab.cuh): head widths 64 / 128 (not the d 256 kernel),
// the precomputed buckets, and the position window with its gradient accumulators in shared
// memory beside the tiles: 12 bytes per token of max_seqlen (the dK/dV kernel at d 128 reaches
// the 227 KB of a CTA at 3968 tokens by a count by hand, 0.25 KB to spare: 3840 keeps a margin;
// the launch checks the exact size).
bool sm90_bwd_rab_fits(const HstuAttnParams& p, int padded_head_dim) {
  if (!p.rab_pos) return true;
  return padded_head_dim <= 128 && p.rab_bkt != nullptr &&
         p.max_seqlen <= (padded_head_dim == 128 ? 3840 : 4096);
}

// The backward (split form; H200, bf16, causal, deterministic, TFLOPS sm90 / sm80): 32 x 4096 x
// 4 x 128 339.8 / 175.5 (1.94x; vs the sm80 atomic-dQ backward 199.7: 1.70x), 32 x 4096 x 4 x 64
// 197.8 / 157.0 (1.26x; atomic 185.3: 1.07x). Shorter sequences at d 128 (H100, gpu_check.sh,
// full / jagged): 1.94x / 1.80x at 32 x 2048 x 4, 1.68x / 1.53x at 32 x 1024 x 4, 1.52x / 1.36x
// at 128 x 512 x 4. d 64 was measured at 4096 tokens only. So sm90 from 512 tokens at d 128 and
// from 4096 at d 64; HSTU_ATTN_SM90=1 forces it.
// d 256 (attention_bwd_sm90_wide.cuh; 64-row tiles; measured when the warpgroups split the output
// columns): 32 x 4096 x 4 x 256 281.6 / 114.5 on an H200 (2.46x; atomic-dQ sm80 131.4: 2.14x),
// 290.0 / 117.2 on an H100 (2.47x); the warpgroups now split by operand, 1.6 % faster at 4096
// and 3 % at 1024 / 512 tokens (H200). The sm80 side was NOT measured below 4096 tokens at d 256:
// sm90 from 512 tokens as at d 128 (whose margin shrank to 1.52x at 512), on the strength of the
// 2.5x here (sm90 at 128 x 512 x 4 x 256: 202 TFLOPS, H200).
// With rab (attention_bwd_sm90_rab.cuh; bf16, causal, deterministic, positions + 128 time
// buckets with gradients, sm90 / sm80 ms): H100, 32 x 1024 x 4 x 128 1.183 / 1.453 (1.23x),
// 32 x 1024 x 4 x 64 1.071 / 0.965 (0.90x). So rab keeps the lengths above at d 128 and stays
// on sm80 at d 64 (not measured at 4096 tokens).
bool sm90_bwd_faster(const HstuAttnParams& p, int padded_head_dim) {
  if (env_is_1("HSTU_ATTN_SM90")) return true;
  if (p.rab_pos && padded_head_dim <= 64) return false;
  return p.max_seqlen >= (padded_head_dim <= 64 ? 4096 : 512);
}

// TMA: 16-byte aligned base and strides (vec), coordinates in int32.
bool tma_operands_ok(const HstuAttnParams& p) {
  return p.q.vec && p.k.vec && p.v.vec && p.total_tokens < (int64_t(1) << 31);
}

}  // namespace

bool sm90_attention_available() {
  if (!sm90_kernels_built()) return false;
  if (env_is_1("HSTU_ATTN_SM80")) return false;
  return device_is_sm90();
}

bool sm90_fwd_supported(const HstuAttnParams& p, int padded_head_dim) {
  if (padded_head_dim != 64 && padded_head_dim != 128 && padded_head_dim != 256) return false;
  // TMA: 16-byte aligned base and strides (vec), coordinates in int32.
  if (!tma_operands_ok(p)) return false;
  if (!sm90_rab_fits(p, padded_head_dim)) return false;  // rab: precomputed buckets only
  return sm90_faster(p, padded_head_dim) && sm90_attention_available();
}

bool sm90_bwd_supported(const HstuAttnParams& p, int padded_head_dim) {
  // d <= 32: no wgmma tile; stays on sm80.
  if (padded_head_dim != 64 && padded_head_dim != 128 && padded_head_dim != 256) return false;
  if (!tma_operands_ok(p) || !p.d_o.vec) return false;
  if (!sm90_bwd_rab_fits(p, padded_head_dim)) return false;
  return sm90_bwd_faster(p, padded_head_dim) && sm90_attention_available();
}

}  // namespace hstu::cuda::attn
