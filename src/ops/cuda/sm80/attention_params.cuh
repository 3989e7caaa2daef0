// attention_params.cuh — the one plain parameter struct every HSTU attention kernel takes, and
// the per-head-dim tile configurations.
//
// The shaping decision: kernels see raw pointers, explicit row strides and the jagged offsets
// (FlashAttention's vocabulary: cu_seqlens, max_seqlen, head stride), never a Tensor; everything
// that varies per call at run time (masks, window, alignment, deterministic mode) is a field, and
// only the head-dim bucket, the dtype and has_rab become template parameters.
#pragma once

#include <cstdint>

#include "ops/detail/attn_tile_order.h"

namespace hstu::cuda::attn {

// Time-bucket thresholds carried in the params (tables with more buckets use the exact
// double-precision bucket function on the device).
constexpr int kMaxTimeTable = 256;
// Time tables (rab_time) of at most this many entries may use precomputed u8 buckets; the kernels
// then hold the table in shared memory (in the thresholds' place: 256 floats < 257 int64).
constexpr int kMaxBktTable = 256;
// Row pitch (bytes) of the precomputed bucket tensor is a multiple of this: 16-byte copies.
constexpr int kBktAlign = 16;

// Fixed-point scale of the rab-gradient accumulators (int64, two's complement): integer atomics
// are associative, so d_rab is bit-identical run to run whatever the order of the adds.
// Resolution 2^-40 ~ 9.1e-13, range +-2^23 ~ 8.4e6 (intermediate wrap-around cancels out).
constexpr double kRabFixedScale = 1099511627776.0;  // 2^40

// One [T, H heads] operand: element c of head h of row t sits at
// ptr + t * row_stride + h * head_stride + c (in elements). vec: ptr, row_stride and head_stride
// are all 16-byte aligned, so tiles move in 16-byte chunks; the partial last chunk of a head
// (widths such as 25) is zero-filled by the copy on load and written element by element on store,
// so the columns between a head's width and its stride are never touched.
struct HeadsView {
  void* ptr = nullptr;  // inputs are stored here too (the kernels never write them)
  int64_t row_stride = 0, head_stride = 0;
  bool vec = false;
  template <typename T>
  __host__ __device__ T* head(int64_t row, int h) const {
    return static_cast<T*>(ptr) + row * row_stride + h * head_stride;
  }
};

struct HstuAttnParams {
  HeadsView q, k, v, d_o;   // inputs
  HeadsView o, dq, dk, dv;  // outputs

  int d_qk = 0, d_v = 0;  // true head widths (<= the kernel's padded kHeadDim)
  int num_heads = 1, batch = 0, max_seqlen = 0;
  int64_t total_tokens = 0;

  // ---- jagged layout and masks (see hstu_attend in hstu_attention.h)
  const int32_t* cu_seqlens = nullptr;    // [B+1]
  const int32_t* num_contexts = nullptr;  // [B] or null
  const int32_t* num_targets = nullptr;   // [B] or null
  int target_group_size = 1;
  int window = 0;  // max_attn_len; 0 = none
  bool causal = true;
  float alpha = 1.f, scale = 1.f;

  // ---- relative attention bias (see hstu_attention.h)
  const float* rab_pos = nullptr;   // [rab_pos_len]
  const float* rab_time = nullptr;  // [rab_time_len] = NB + 1
  const int64_t* ts_query = nullptr;
  const int64_t* ts_key = nullptr;
  int rab_pos_len = 0, rab_time_len = 0;
  // time_thr[k] = smallest |dt| whose bucket is >= k (k = 1..NB), when NB < kMaxTimeTable.
  bool time_table = false;
  int64_t time_thr[kMaxTimeTable + 1] = {};
  // Precomputed time buckets (rab_buckets.cuh), or null: the kernels then compute each bucket
  // from the timestamps. rab_bkt[(b * rab_bkt_stride + i) * rab_bkt_stride + j] = time bucket of
  // (query i, key j) of sequence b (0 outside the sequence and in tiles nothing attends to);
  // u8, so only for tables of <= kMaxBktTable entries.
  const uint8_t* rab_bkt = nullptr;
  int64_t rab_bkt_stride = 0;  // multiple of kBktAlign, >= max_seqlen

  // ---- sm_90a launch order (attn_tile_order.h; the sm80 kernels ignore it): null = the grid
  // order (blockIdx = (block, head, sequence)); else a 1-D grid of tile_order_n x num_heads CTAs,
  // CTA x taking entry x / num_heads, head x % num_heads, built for resident blocks of
  // tile_order_bm rows (checked by each launcher against its kernel's).
  const SeqTile* tile_order = nullptr;
  int64_t tile_order_n = 0;
  int tile_order_bm = 0;

  // ---- sm_80 launch order: false = blockIdx (block, head, sequence); true = (head, sequence,
  // block), so the heaviest block of every (sequence, head) launches before any second-heaviest
  // one (attention_launch.cuh: sm80_grid, cta_coords; the dispatcher's sm80_block_major).
  bool block_major = false;

  // ---- backward
  float* dq_accum = nullptr;                 // fp32 [T, H, kHeadDim] (atomic-dQ mode only)
  int64_t dq_accum_head_stride = 0;          // = kHeadDim
  unsigned long long* drab_accum = nullptr;  // fixed point [rab_pos_len + rab_time_len] or null
  float* d_rab_pos = nullptr;
  float* d_rab_time = nullptr;
  // The fused sm_90a backward's rab form: its dS tiles (attention_sm90.h, sm90_bwd_rab_ds_bytes),
  // or null (no gradient asked for).
  void* rab_ds = nullptr;

  // ---- the persistent sm_90a forward's tile counter (one int), or null: that kernel then runs
  // one CTA per tile. The launcher zeroes it first unless fwd_tile_counter_zero says it is zero
  // already (a launch plan's: zeroed when the plan is built, and every launch leaves it zero).
  // Last, so that the other kernels' parameters keep their offsets.
  int* fwd_tile_counter = nullptr;
  bool fwd_tile_counter_zero = false;
};

// Tile configuration of one kernel. kBlockM query rows x kBlockN key rows per tile, kNWarps warps;
// each warp owns 16 kMT rows of the "resident" operand (queries in fwd / dq, keys in dkdv).
template <int kBlockM_, int kBlockN_, int kNWarps_, int kStages_, int kSplitD_ = 1, int kMT_ = 1,
          int kMinCtas_ = 0>
struct TileCfg {
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kStages = kStages_;    // buffers of the streamed operand (1 or 2)
  static constexpr int kSplitD = kSplitD_;    // dkdv: warps sharing one 16-key slab, split over d
  static constexpr int kMT = kMT_;            // fwd: 16-row m atoms per warp (B fragments reused)
  static constexpr int kMinCtas = kMinCtas_;  // CTAs per SM the registers must allow (0: any)
};

// NOTE: tiles start from NVIDIA's Ampere HSTU kernels (fwd 128 x 64, bwd 64 x 128 with 8 warps),
// shrunk where shared memory (A100: 163 KB) or registers (dK + dV accumulators) run out.
// Forward: FA2's layout (4 warps x 32 query rows, kMT = 2) reuses every K/V fragment for two
// m atoms and measured 1.23x (MT2, 32-key blocks) over 8 warps x 16 rows at d = 128 on an H200
// (B=32, L=4096, H=4, causal: 201 vs 164 TFLOPS; 216 with the tanh sigmoid, bf16). The rab
// forward keeps the 8-warp layout (fewer registers next to the rab gathers).
// At d = 128 the 64-key block wins despite register spills (ptxas): on an H100, same call, 256 vs
// 230 TFLOPS (32-key blocks) and 243 for 64-key blocks computed as two 32-key steps (no spills,
// more instructions per key). A three-stage K/V pipeline measured no gain (202 vs 201 TFLOPS;
// 0.036 vs 0.035 ms at 128 x 200, 2 x 32): the second CTA per SM hides the loads.
// kMinCtas: ptxas allocates registers differently for __launch_bounds__(n) (kMinCtas = 0) and
// (n, 1), with the same limit. Measured on one H200, B=32, L=4096, 4 x 128: the forward is
// faster without the minimum (298 vs 294 TFLOPS; spill stores 44 B vs 144 B); the atomic dK/dV
// kernel spills less with it (60 B vs 108 B) and ran at 200 TFLOPS so (not timed without).
template <int kHeadDim>
struct AttnTiles;
template <>
struct AttnTiles<32> {
  // Short sequences at this width (the MovieLens configs: 2 x 25, length 200) are latency-bound:
  // small CTAs let more of them run at once. Measured on an H100 at 128 x 200, 2 x 25 (fwd /
  // bwd-deterministic ms): 128x64 8 warps 0.059 / 0.138 -> these tiles 0.046 / 0.125; with rab the
  // 64-key forward tile is faster (0.116 vs 0.136 for 32-key).
  // The forward keeps 8 CTAs per SM (<= 128 registers): 128 x 200 x 2 heads is 1024 CTAs, one
  // wave on 132 SMs; at 140 registers (7 CTAs) it took two (H200: 0.022 -> 0.027 ms).
  using Fwd = TileCfg<64, 32, 2, 2, 1, 2, 8>;   // smem  12 KB; 2 warps x 32 rows
  using FwdRab = TileCfg<64, 64, 4, 2>;         // smem  20 KB (+ rab)
  using Dkdv = TileCfg<32, 64, 4, 2, 1, 1, 4>;  // smem  24 KB (+ rab); <= 128 registers
  // 128 registers with ~100 B of spills beat 3 CTAs per SM (H200, rab bwd: 0.205 vs 0.24 ms).
  using DkdvRab = Dkdv;
  using Dq = TileCfg<64, 64, 4, 2>;  // smem  24 KB
  // The bias added from the staged buckets (rab_pair) took 168 registers (3 CTAs per SM).
  using DqRab = TileCfg<64, 64, 4, 2, 1, 1, 4>;
};
template <>
struct AttnTiles<64> {
  using Fwd = TileCfg<128, 64, 4, 2, 1, 2>;        // smem  48 KB; 4 warps x 32 rows
  using FwdRab = TileCfg<128, 64, 8, 2, 1, 1, 2>;  // smem  48 KB; two CTAs per SM
  using Dkdv = TileCfg<64, 64, 4, 2>;              // smem  56 KB
  using DkdvRab = Dkdv;
  using Dq = TileCfg<64, 64, 4, 2>;  // smem  48 KB
  using DqRab = Dq;
};
template <>
struct AttnTiles<128> {
  using Fwd = TileCfg<128, 64, 4, 2, 1, 2>;      // smem  96 KB; 4 warps x 32 rows, 64-key blocks
  using FwdRab = TileCfg<128, 64, 8, 2>;         // smem  96 KB
  using Dkdv = TileCfg<64, 128, 8, 2, 1, 1, 1>;  // smem 144 KB; kMinCtas: see above
  using DkdvRab = TileCfg<32, 128, 8, 2>;        // smem 104 KB (+ rab): fewer registers
  using Dq = TileCfg<64, 64, 4, 2>;              // smem  96 KB
  using DqRab = TileCfg<64, 32, 4, 2>;           // smem  64 KB (+ 12 KB rab): two CTAs per SM
};
template <>
struct AttnTiles<256> {
  using Fwd = TileCfg<128, 32, 8, 2>;  // smem 128 KB
  using FwdRab = Fwd;
  using Dkdv = TileCfg<32, 64, 8, 2, 2>;  // smem 132 KB; 4 key slabs x 2 halves of d
  using DkdvRab = Dkdv;
  using Dq = TileCfg<64, 32, 4, 2>;  // smem 128 KB
  using DqRab = Dq;
};

}  // namespace hstu::cuda::attn
