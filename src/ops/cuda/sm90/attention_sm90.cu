// attention_sm90.cu — which HSTU attention calls the sm_90a kernels take (attention_sm90.h):
// the device's compute capability (cached per device), the HSTU_ATTN_SM80=1 override and the
// operands' TMA constraints; and the builder of their longest-first launch order
// (attn_tile_order.h). Compiles without CUTLASS; the kernels themselves are in
// attention_fwd_sm90.cuh and attention_bwd_sm90.cuh.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/cuda/sm90/attention_sm90.h"

namespace hstu::cuda::attn {

namespace {

bool env_is_1(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "1") == 0;
}

// A switch with a default: 0 for "0", 1 for "1", -1 when unset or anything else.
int env_switch(const char* name) {
  const char* v = std::getenv(name);
  if (v && std::strcmp(v, "0") == 0) return 0;
  return env_is_1(name) ? 1 : -1;
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
// memory beside the tiles: 12 bytes per token of max_seqlen. The dK/dV kernel at d 128 and 4096
// tokens takes 232192 of a CTA's 232448 bytes (BwdTraits::kSmemBytes + BwdRabSmem::bytes, counted
// with the traits; the warps' diagonal sums share their stages to get there); the launch checks
// the exact size.
bool sm90_bwd_rab_fits(const HstuAttnParams& p, int padded_head_dim) {
  if (!p.rab_pos) return true;
  return padded_head_dim <= 128 && p.rab_bkt != nullptr && p.max_seqlen <= 4096;
}

// The backward (split form; H200, bf16, causal, deterministic, TFLOPS sm90 / sm80): 32 x 4096 x
// 4 x 128 339.8 / 175.5 (1.94x; vs the sm80 atomic-dQ backward 199.7: 1.70x), 32 x 4096 x 4 x 64
// 197.8 / 157.0 (1.26x; atomic 185.3: 1.07x). Shorter sequences at d 128 (H100, gpu_check.sh,
// full / jagged): 1.94x / 1.80x at 32 x 2048 x 4, 1.68x / 1.53x at 32 x 1024 x 4, 1.52x / 1.36x
// at 128 x 512 x 4. d 64 was measured at 4096 tokens only. So sm90 from 512 tokens at d 128 and
// from 2048 at d 64; HSTU_ATTN_SM90=1 forces it. With the fused-dQ form (session 15, H200) d 64
// runs 206 TFLOPS against the sm80 kernels' ~157 at 32 x 4096, and a jagged batch of uniform
// lengths 1..4096 (its longest below 4096, so the old threshold of 4096 sent it to sm80) 199
// against 144: the threshold is now 2048, below which d 64 has not been measured.
// d 256 (attention_bwd_sm90_wide.cuh; 64-row tiles; measured when the warpgroups split the output
// columns): 32 x 4096 x 4 x 256 281.6 / 114.5 on an H200 (2.46x; atomic-dQ sm80 131.4: 2.14x),
// 290.0 / 117.2 on an H100 (2.47x); the warpgroups now split by operand, 1.6 % faster at 4096
// and 3 % at 1024 / 512 tokens (H200). The sm80 side was NOT measured below 4096 tokens at d 256:
// sm90 from 512 tokens as at d 128 (whose margin shrank to 1.52x at 512), on the strength of the
// 2.5x here (sm90 at 128 x 512 x 4 x 256: 202 TFLOPS, H200).
// With rab (attention_bwd_sm90_rab.cuh; bf16, causal, deterministic, positions + 128 time
// buckets with gradients, sm90 / sm80 ms): H100, 32 x 1024 x 4 x 128 1.183 / 1.453 (1.23x),
// 32 x 1024 x 4 x 64 1.071 / 0.965 (0.90x). Session 18 (H200, the 32-bit bucket slices, the
// folded diagonal stage): d 64 sm90 / sm80 ms 0.591 / 0.940 at 32 x 1024 x 4, 1.986 / 3.413 at
// 32 x 2048, 7.210 / 13.019 at 32 x 4096, 0.152 / 0.172 at 128 x 200 x 2. So rab keeps the
// lengths above at d 128 and takes sm90 at every length at d 64.
bool sm90_bwd_faster(const HstuAttnParams& p, int padded_head_dim) {
  if (env_is_1("HSTU_ATTN_SM90")) return true;
  if (p.rab_pos && padded_head_dim <= 64) return true;
  return p.max_seqlen >= (padded_head_dim <= 64 ? 2048 : 512);
}

// TMA: 16-byte aligned base and strides (vec), coordinates in int32.
bool tma_operands_ok(const HstuAttnParams& p) {
  return p.q.vec && p.k.vec && p.v.vec && p.total_tokens < (int64_t(1) << 31);
}

}  // namespace

namespace {

// The list of attn_tile_order.h (tile_order_reference is its host twin): one CTA. Counts the
// sequences per key (resident blocks, clamped to keys - 1), the first entry of each key's
// sequences (keys descending), then, in chunks of blockDim.x sequences in batch order, each
// sequence's rank among the earlier ones of its key (__match_any_sync within a warp, per-warp
// counts in shared memory across warps): its entries are base[k] + k rank .. + k - 1. Every
// position is fixed by the lengths alone, so the list is the same every run.
__global__ void __launch_bounds__(1024)
    tile_order_kernel(const int32_t* __restrict__ cu, int batch, int bm, int keys,
                      SeqTile* __restrict__ out, int64_t entries) {
  extern __shared__ int smem[];
  int* cnt = smem;              // [keys] sequences of key k
  int* base = cnt + keys;       // [keys] first entry of key k's sequences
  int* seen = base + keys;      // [keys] sequences of key k in earlier chunks
  int* wc = seen + keys;        // [32][keys] sequences of key k in warp w of this chunk
  int* total = wc + 32 * keys;  // [1] entries in use
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthreads = blockDim.x;
  const int nwarps = nthreads / 32;
  auto key_of = [&](int len) { return min(seq_blocks(len, bm), keys - 1); };
  for (int k = tid; k < keys; k += nthreads) cnt[k] = seen[k] = 0;
  __syncthreads();
  for (int b = tid; b < batch; b += nthreads) atomicAdd(&cnt[key_of(cu[b + 1] - cu[b])], 1);
  __syncthreads();
  if (tid == 0) {
    long long acc = 0;
    for (int k = keys - 1; k >= 0; --k) {
      base[k] = static_cast<int>(acc);
      acc += static_cast<long long>(k) * cnt[k];
    }
    *total = static_cast<int>(acc < entries ? acc : entries);
  }
  __syncthreads();
#pragma unroll 1
  for (int c0 = 0; c0 < batch; c0 += nthreads) {  // uniform trip count: every lane matches
    for (int i = tid; i < 32 * keys; i += nthreads) wc[i] = 0;
    __syncthreads();
    const int b = c0 + tid;
    const bool valid = b < batch;
    int start = 0, len = 0, k = keys;  // keys: no sequence's key
    if (valid) {
      start = cu[b];
      len = cu[b + 1] - start;
      k = key_of(len);
    }
    const unsigned same = __match_any_sync(0xffffffffu, k);
    const int rank = __popc(same & ((1u << lane) - 1u));
    if (valid && rank == 0) wc[warp * keys + k] = __popc(same);
    __syncthreads();
    if (valid && k > 0) {
      int r = seen[k] + rank;
      for (int w = 0; w < warp; ++w) r += wc[w * keys + k];
      const long long off = base[k] + static_cast<long long>(k) * r;
      for (int j = 0; j < k; ++j)
        if (off + j < entries) out[off + j] = SeqTile{b, j, start, len};
    }
    __syncthreads();
    for (int kk = tid; kk < keys; kk += nthreads) {
      int sum = 0;
      for (int w = 0; w < nwarps; ++w) sum += wc[w * keys + kk];
      seen[kk] += sum;
    }
    __syncthreads();
  }
  for (long long t = *total + tid; t < entries; t += nthreads) out[t] = SeqTile{-1, 0, 0, 0};
}

}  // namespace

bool sm90_tile_order_on(int max_seqlen, int bm, bool by_default) {
  const char* v = std::getenv("HSTU_ATTN_SM90_ORDER");
  if (v && std::strcmp(v, "grid") == 0) return false;
  if (!by_default && !(v && std::strcmp(v, "seq") == 0)) return false;
  return tile_order_smem_bytes(tile_order_keys(max_seqlen, bm)) + 4 <= kTileOrderMaxSmem;
}

void sm90_build_tile_order(const HstuAttnParams& p, int bm, SeqTile* out, int64_t entries,
                           cudaStream_t stream) {
  if (entries <= 0) return;
  const int keys = tile_order_keys(p.max_seqlen, bm);
  const int64_t smem = tile_order_smem_bytes(keys) + 4;
  HSTU_CHECK(smem <= kTileOrderMaxSmem, "sm90 tile order: max_seqlen ", p.max_seqlen, " needs ",
             smem, " bytes of shared memory (sm90_tile_order_on says no)");
  const int threads = std::min(1024, std::max(128, (p.batch + 31) / 32 * 32));
  tile_order_kernel<<<1, threads, static_cast<int>(smem), stream>>>(p.cu_seqlens, p.batch, bm, keys,
                                                                    out, entries);
  HSTU_CUDA_CHECK(cudaGetLastError());
}

int sm90_fwd_persist_mode() {
  const int s = env_switch("HSTU_ATTN_SM90_PERSIST");
  return s < 0 ? 1 : 2 * s;
}

bool sm90_bwd_persist(const HstuAttnParams& p) {
  const int s = env_switch("HSTU_ATTN_SM90_BWD_PERSIST");
  if (s >= 0) return s == 1;
  return p.total_tokens * p.num_heads >= int64_t{2} * sm90_bwd_block_rows(64) * sm90_sm_count();
}

int sm90_sm_count() {
  static std::mutex mu;
  static int sms[64] = {};  // 0 = not asked yet
  int dev = 0;
  HSTU_CUDA_CHECK(cudaGetDevice(&dev));
  int n = 0;
  if (dev >= 0 && dev < 64) {
    std::lock_guard<std::mutex> lock(mu);
    n = sms[dev];
  }
  if (n == 0) {
    HSTU_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (dev >= 0 && dev < 64) {
      std::lock_guard<std::mutex> lock(mu);
      sms[dev] = n;
    }
  }
  return n;
}

namespace {
std::atomic<int64_t> g_persist_launches[3] = {0, 0, 0};  // by Sm90Pass
}  // namespace

int64_t sm90_persist_launches(Sm90Pass pass) {
  return g_persist_launches[static_cast<int>(pass)].load();
}

void sm90_count_persist_launch(Sm90Pass pass) {
  g_persist_launches[static_cast<int>(pass)].fetch_add(1);
}

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
