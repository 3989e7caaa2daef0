// hstu_attention.cu — CUDA backend of HSTU attention: argument checks, the params struct, scratch
// memory and the one dispatch point (padded head dim x dtype; has_rab is switched inside the
// launchers). Kernels live in sm80/attention_*.cuh and are instantiated per (pass, head-dim
// bucket, dtype) by files CMake generates from sm80/hstu_attention_instance.cu.in. On a
// compute-capability-9.0 GPU the forward of the 64/128/256 buckets runs the sm_90a kernel
// (sm90/attention_fwd_sm90.cuh) where it measured faster (sm90_fwd_supported; HSTU_ATTN_SM80=1 /
// HSTU_ATTN_SM90=1 force either); the backward of the 64/128/256 buckets likewise runs the
// sm_90a kernels (sm90/attention_bwd_sm90.cuh, with rab at 64/128: attention_bwd_sm90_rab.cuh;
// 256 without rab: attention_bwd_sm90_wide.cuh; sm90_bwd_supported; the fused-dQ form where
// faster (sm90_fused_faster: 64/128 by default, 256 when forced; with rab at 128 only, up to
// kSm90BwdRabFusedMaxSeqlen tokens), deterministic or, asked for no determinism, with unordered dQ
// adds; otherwise the split form, deterministic in both modes), other calls the sm80 kernels.
//
// The shaping decision: head widths are padded internally to the next of 32/64/128/256 (zero
// columns in shared memory), so one kernel per bucket serves every width — the paper's 25 and 50
// included. Each operand that is 16-byte aligned per row and per head (its head stride padded by
// the producer, see HstuAttentionArgs) moves in 16-byte chunks; others element by element.
//
// Determinism (ctx.deterministic): dK, dV and O are always written without atomics. dQ is
// computed by a separate query-major kernel in deterministic mode (bit-identical across runs, ~1.4x
// the backward FLOPs; it runs on a side stream beside the dK/dV kernel) or accumulated with fp32
// atomics in a scratch buffer otherwise (the fused sm_90a form: dQ added per key block in a fixed
// order, or unordered). The rab gradients are summed per warp in a fixed order
// and added as 64-bit fixed-point (2^-40) integers, which are order-independent in both modes.
//
// rab: each call first computes the time bucket of every (sequence, query, key) pair into
// scratch (sm80/rab_buckets.cuh: u8 [B, S, S], S = max_seqlen rounded up to 16), once for every
// head and, in the backward, for both kernels; the attention kernels then add the bias from
// tables in shared memory. Calls whose time table has more than 256 entries, or whose scratch
// has no room, compute the buckets inside the kernels per element (sm80 only), as does every
// call under HSTU_ATTN_RAB_BUCKETS=0 (tests and A/B benchmarks). A model step computes them once
// for all its layers and passes (hstu_rab_buckets -> args.rab_buckets); those calls skip theirs.
//
// Scratch (ctx.scratch): the rab buckets (B * S * S bytes) when they fit,
// 8 * (|rab_pos| + |rab_time|) bytes with rab gradients, plus
// 4 * T * H * Dpad bytes for the dQ accumulator when not deterministic (sm80) or with the fused
// sm_90a backward (+ 8 * B * H * ceil(max_seqlen / 64) semaphore bytes, and with rab gradients
// its dS tiles, sm90_bwd_rab_ds_bytes: 2 B H S^2 bytes rounded to its tiles; without that room the
// split form runs), and with the sm_90a kernels their launch order (attn_tile_order.h:
// 16 * (T / bm + B) bytes, bm = 64..192; without room the grid order) and the persistent
// forward's tile counter (one int; without room one CTA per tile), unless the call has the
// step's launch plan (args.plan, from hstu_attention_plan: both lists and the counter, built once
// for every layer and pass of a step).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include "ops/cuda/common.cuh"
#include "ops/cuda/hstu_attention.h"
#include "ops/cuda/sm80/attention_launch.cuh"
#include "ops/cuda/sm80/rab_buckets.cuh"
#include "ops/cuda/sm90/attention_sm90.h"
#include "ops/detail/checks.h"

namespace hstu::cuda {

namespace {

using attn::HstuAttnParams;

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && v[0] == '1' && v[1] == 0;
}

// The sm_80 kernels' launch order (attention_launch.cuh: sm80_grid): block-major for batches of
// sequences up to 512 tokens, where the grid is a few waves of CTAs of unequal causal work; the
// (block, head, sequence) order beyond, where it keeps each (sequence, head)'s K / V in L2
// together. Measured at the MovieLens shape only (docs/BENCHMARKS.md). HSTU_ATTN_SM80_ORDER=grid /
// =block forces either (A/B runs; read per call, the tests switch it).
bool sm80_block_major(int max_seqlen) {
  const char* v = std::getenv("HSTU_ATTN_SM80_ORDER");
  if (v && std::strcmp(v, "grid") == 0) return false;
  if (v && std::strcmp(v, "block") == 0) return max_seqlen <= (1 << 20);  // gridDim.z <= 65535
  return max_seqlen <= 512;
}

int head_dim_bucket(int d) {
  if (d <= 32) return 32;
  if (d <= 64) return 64;
  if (d <= 128) return 128;
  return 256;
}

void check_operand(const Tensor& t, DType dtype, int64_t rows, int heads, int width,
                   const char* what) {
  HSTU_CHECK(t.device == Device::kCUDA && t.dtype == dtype, "hstu_attention: ", what,
             " must be a CUDA tensor of ", dtype_name(dtype), ", got ", t.str());
  check_heads(t, rows, heads, width, what);
}

// The kernels' view of a checked operand.
attn::HeadsView heads_view(const Tensor& t, int heads) {
  attn::HeadsView v;
  v.ptr = const_cast<void*>(static_cast<const void*>(t.data));
  v.row_stride = t.row_stride;
  v.head_stride = head_stride(t, heads);
  v.vec = vec_alignment(t) >= 16 && (v.head_stride * dtype_size(t.dtype)) % 16 == 0;
  return v;
}

void check_1d(const Tensor& t, DType dtype, int64_t n, const char* what) {
  HSTU_CHECK(t.ndim == 1 && t.device == Device::kCUDA && t.dtype == dtype && t.contiguous(),
             "hstu_attention: ", what, " must be a contiguous 1-D CUDA ", dtype_name(dtype),
             " tensor, got ", t.str());
  HSTU_CHECK(n < 0 || t.shape[0] == n, "hstu_attention: ", what, " is ", t.str(), ", expected ", n,
             " elements");
}

// Thresholds of rab_time_bucket: thr[k] = smallest |dt| >= 1 whose bucket is >= k (k >= 1).
// Computed once per bucket count with the very function the CPU reference uses.
void time_thresholds(int nb, int64_t* thr) {
  static std::mutex mu;
  static int cached_nb = -1;
  static int64_t cached[attn::kMaxTimeTable + 1];
  std::lock_guard<std::mutex> lock(mu);
  if (cached_nb != nb) {
    cached[0] = 0;
    for (int k = 1; k <= nb; ++k) {
      int64_t lo = 1, hi = int64_t(1) << 62;
      if (rab_time_bucket(hi, nb) < k) {
        cached[k] = INT64_MAX;
        continue;
      }
      while (lo < hi) {  // smallest a with bucket(a) >= k
        const int64_t mid = lo + (hi - lo) / 2;
        if (rab_time_bucket(mid, nb) >= k) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      cached[k] = lo;
    }
    cached_nb = nb;
  }
  std::copy(cached, cached + nb + 1, thr);
}

// Validates the forward arguments and fills everything but the backward fields.
HstuAttnParams make_params(const HstuAttentionArgs& a) {
  const DType dt = a.q.dtype;
  HSTU_CHECK(dt == DType::kBF16 || dt == DType::kF16,
             "CUDA hstu_attention takes bf16 or fp16 q/k/v, got ", dtype_name(dt),
             " (fp32 attention runs on the CPU backend: --device cpu)");
  HSTU_CHECK(a.num_heads >= 1, "hstu_attention: num_heads ", a.num_heads);
  const int64_t T = a.q.shape[0];  // check_operand rejects a q that is not 2-D
  const int dqk = a.head_dim_qk(), dv = a.head_dim_v();
  check_operand(a.q, dt, T, a.num_heads, dqk, "q");
  check_operand(a.k, dt, T, a.num_heads, dqk, "k");
  check_operand(a.v, dt, T, a.num_heads, dv, "v");
  HSTU_CHECK(dqk <= 256 && dv <= 256,
             "hstu_attention: CUDA kernels support head widths 1..256, got q/k ", dqk, ", v ", dv);
  HSTU_CHECK(a.cu_seqlens.ndim == 1 && a.cu_seqlens.shape[0] >= 1,
             "hstu_attention: cu_seqlens must be [B+1], got ", a.cu_seqlens.str());
  check_1d(a.cu_seqlens, DType::kI32, -1, "cu_seqlens");
  const int64_t B = a.cu_seqlens.shape[0] - 1;
  HSTU_CHECK(B <= 65535, "hstu_attention: at most 65535 sequences per call, got ", B);
  if (!a.num_contexts.empty()) check_1d(a.num_contexts, DType::kI32, B, "num_contexts");
  if (!a.num_targets.empty()) check_1d(a.num_targets, DType::kI32, B, "num_targets");
  HSTU_CHECK(a.max_seqlen > 0 || T == 0 || B == 0,
             "hstu_attention: max_seqlen must be the longest sequence of the batch, got ",
             a.max_seqlen);
  HSTU_CHECK(a.target_group_size >= 1, "hstu_attention: target_group_size ", a.target_group_size);
  HSTU_CHECK(a.max_attn_len >= 0, "hstu_attention: max_attn_len ", a.max_attn_len);

  HstuAttnParams p;
  p.q = heads_view(a.q, a.num_heads);
  p.k = heads_view(a.k, a.num_heads);
  p.v = heads_view(a.v, a.num_heads);
  p.d_qk = dqk;
  p.d_v = dv;
  p.num_heads = a.num_heads;
  p.batch = static_cast<int>(B);
  p.max_seqlen = a.max_seqlen;
  p.total_tokens = T;
  p.cu_seqlens = static_cast<const int32_t*>(a.cu_seqlens.data);
  p.num_contexts =
      a.num_contexts.empty() ? nullptr : static_cast<const int32_t*>(a.num_contexts.data);
  p.num_targets = a.num_targets.empty() ? nullptr : static_cast<const int32_t*>(a.num_targets.data);
  p.target_group_size = a.target_group_size;
  p.window = a.max_attn_len;
  p.causal = a.causal;
  p.alpha = a.alpha;
  p.scale = a.scale;
  p.block_major = sm80_block_major(a.max_seqlen);
  if (a.has_rab()) {
    check_1d(a.rab_pos, DType::kF32, -1, "rab_pos");
    check_1d(a.rab_time, DType::kF32, -1, "rab_time");
    HSTU_CHECK(a.rab_pos.shape[0] >= 1 && a.rab_time.shape[0] >= 1,
               "hstu_attention: empty rab tables");
    HSTU_CHECK(a.rab_time.shape[0] <= 65536,
               "hstu_attention: the CUDA kernels take at most 65535 time buckets, got ",
               a.rab_time.shape[0] - 1);
    check_1d(a.ts_query, DType::kI64, T, "ts_query");
    check_1d(a.ts_key, DType::kI64, T, "ts_key");
    p.rab_pos = static_cast<const float*>(a.rab_pos.data);
    p.rab_time = static_cast<const float*>(a.rab_time.data);
    p.ts_query = static_cast<const int64_t*>(a.ts_query.data);
    p.ts_key = static_cast<const int64_t*>(a.ts_key.data);
    p.rab_pos_len = static_cast<int>(a.rab_pos.shape[0]);
    p.rab_time_len = static_cast<int>(a.rab_time.shape[0]);
    p.time_table = p.rab_time_len <= attn::kMaxTimeTable + 1;
    if (p.time_table) time_thresholds(p.rab_time_len - 1, p.time_thr);
  }
  return p;
}

template <typename T>
void fwd_bucket(int hdp, const HstuAttnParams& p, cudaStream_t s) {
  switch (hdp) {
    case 32:
      return attn::run_fwd<T, 32>(p, s);
    case 64:
      return attn::run_fwd<T, 64>(p, s);
    case 128:
      return attn::run_fwd<T, 128>(p, s);
    default:
      return attn::run_fwd<T, 256>(p, s);
  }
}
// The sm_90a forward (wgmma / TMA) for the buckets it serves; only called when
// sm90_fwd_supported() said yes, which needs a build with the kernels.
template <typename T>
void fwd_bucket_sm90(int hdp, const HstuAttnParams& p, cudaStream_t s) {
#if defined(HSTU_SM90_KERNELS)
  switch (hdp) {
    case 64:
      return attn::run_fwd_sm90<T, 64>(p, s);
    case 128:
      return attn::run_fwd_sm90<T, 128>(p, s);
    case 256:
      return attn::run_fwd_sm90<T, 256>(p, s);
    default:
      break;
  }
#endif
  HSTU_THROW("hstu_attention: no sm_90a forward kernel for head width bucket ", hdp);
}
template <typename T>
void bwd_bucket(int hdp, const HstuAttnParams& p, bool det, cudaStream_t s, cudaStream_t dq_s) {
  switch (hdp) {
    case 32:
      return attn::run_bwd<T, 32>(p, det, s, dq_s);
    case 64:
      return attn::run_bwd<T, 64>(p, det, s, dq_s);
    case 128:
      return attn::run_bwd<T, 128>(p, det, s, dq_s);
    default:
      return attn::run_bwd<T, 256>(p, det, s, dq_s);
  }
}

// The sm_90a backward (deterministic dK/dV + dQ kernels); only called when sm90_bwd_supported()
// said yes, which needs a build with the kernels.
template <typename T>
void bwd_bucket_sm90(int hdp, const HstuAttnParams& p, int* sem, cudaStream_t s,
                     cudaStream_t dq_s) {
#if defined(HSTU_SM90_KERNELS)
  switch (hdp) {
    case 64:
      return attn::run_bwd_sm90<T, 64>(p, sem, s, dq_s);
    case 128:
      return attn::run_bwd_sm90<T, 128>(p, sem, s, dq_s);
    case 256:
      return attn::run_bwd_sm90<T, 256>(p, sem, s, dq_s);
    default:
      break;
  }
#endif
  HSTU_THROW("hstu_attention: no sm_90a backward kernel for head width bucket ", hdp);
}

// Whether the sm_90a backward without rab takes the fused form (attention_bwd_sm90.cuh at head
// widths 64 / 128, attention_bwd_sm90_wide.cuh at 256): HSTU_ATTN_SM90_FUSED=1 /
// HSTU_ATTN_SM90_SPLIT=1 force either (tests and A/B benchmarks). Default: fused at 64 / 128
// (measured faster, H200); split at 256 (B32 L4096 H4, H200: split 351-359 TFLOPS, fused 320;
// jagged uniform lengths 373 against 310).
bool sm90_fused_faster(const HstuAttnParams& p, int hdp) {
  if (env_flag("HSTU_ATTN_SM90_FUSED")) return true;
  if (env_flag("HSTU_ATTN_SM90_SPLIT")) return false;
  (void)p;
  return hdp <= 128;
}

// The deterministic backward's second stream: the dQ kernel runs beside the dK/dV kernel. One
// non-blocking stream and a fork / join event pair per device, created on first use (the warm-up
// step) and kept for the process.
struct SideStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};
SideStream& side_stream() {
  static std::mutex mu;
  static SideStream per_device[64];
  int dev = 0;
  HSTU_CUDA_CHECK(cudaGetDevice(&dev));
  HSTU_CHECK(dev >= 0 && dev < 64, "hstu_attention: device ordinal ", dev, " out of range");
  std::lock_guard<std::mutex> lock(mu);
  SideStream& s = per_device[dev];
  if (!s.stream) {
    HSTU_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    HSTU_CUDA_CHECK(cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming));
    HSTU_CUDA_CHECK(cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming));
  }
  return s;
}

// d_rab_pos / d_rab_time += fixed-point accumulators * 2^-40.
__global__ void drab_finish_kernel(const __grid_constant__ HstuAttnParams p) {
  const int n = p.rab_pos_len + p.rab_time_len;
  for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x) {
    const double v =
        static_cast<double>(static_cast<long long>(p.drab_accum[k])) / attn::kRabFixedScale;
    float* dst = k < p.rab_pos_len ? p.d_rab_pos + k : p.d_rab_time + (k - p.rab_pos_len);
    *dst += static_cast<float>(v);
  }
}

// Whether this call's rab takes precomputed buckets from scratch: possible (u8 buckets), not
// switched off (HSTU_ATTN_RAB_BUCKETS=0), and room in a real CUDA scratch arena.
bool use_rab_buckets(const Ctx& ctx, const HstuAttnParams& p) {
  if (!attn::rab_buckets_possible(p)) return false;
  const char* env = std::getenv("HSTU_ATTN_RAB_BUCKETS");
  if (env && env[0] == '0' && env[1] == 0) return false;
  const Arena* a = ctx.scratch;
  if (!a || a->device() != Device::kCUDA || a->is_measuring()) return false;
  const size_t need = arena_bytes(hstu_rab_buckets_bytes(p.batch, p.max_seqlen));
  const size_t free_bytes = a->capacity() - a->used();
  if (free_bytes >= need) return true;
  static std::atomic<bool> warned{false};  // once per process: the run works, only slower
  if (!warned.exchange(true))
    std::fprintf(stderr,
                 "hstu: warning: hstu_attention: the rab time buckets need %zu bytes of scratch, "
                 "%zu are free; the attention kernels compute them per element instead (several "
                 "times slower; size ctx.scratch for B x round_up(max_seqlen, 16)^2 more bytes)\n",
                 need, free_bytes);
  return false;
}

// Allocates the buckets in `scratch` and computes them on `stream` (use_rab_buckets said yes).
void compute_rab_buckets(Scratch& scratch, HstuAttnParams& p, cudaStream_t stream) {
  const int64_t S = attn::rab_bucket_stride(p.max_seqlen);
  const Tensor t = scratch.alloc(DType::kU8, {int64_t(p.batch) * S * S});
  p.rab_bkt = static_cast<const uint8_t*>(t.data);
  p.rab_bkt_stride = S;
  attn::launch_rab_buckets(p, stream);
}

// Points p at the bucket tensor b (u8 on the GPU, large enough for the batch; `who` names the
// caller and argument in the error).
void point_at_rab_buckets(const Tensor& b, HstuAttnParams& p, const char* who) {
  HSTU_CHECK(b.device == Device::kCUDA && b.dtype == DType::kU8 &&
                 b.numel() >= hstu_rab_buckets_bytes(p.batch, p.max_seqlen),
             who, " must be u8 on the GPU with at least ",
             hstu_rab_buckets_bytes(p.batch, p.max_seqlen), " bytes, got ", b.str());
  p.rab_bkt = static_cast<const uint8_t*>(b.data);
  p.rab_bkt_stride = attn::rab_bucket_stride(p.max_seqlen);
}

// Points p at the step's buckets (args.rab_buckets, from hstu_rab_buckets) when given and the
// call takes precomputed buckets; returns whether it did.
bool take_step_rab_buckets(const HstuAttentionArgs& args, HstuAttnParams& p) {
  if (args.rab_buckets.empty() || !attn::rab_buckets_possible(p)) return false;
  point_at_rab_buckets(args.rab_buckets, p, "hstu_attention: rab_buckets");
  return true;
}

// The entries of the sm_90a kernels' longest-first launch order (attn_tile_order.h) for
// resident blocks of bm rows where a call on p takes one, else 0: not for batches of full-length
// sequences (T = B max_seqlen: every key equal, the list would be the grid order with heads
// fastest, for one more launch), where sm90_tile_order_on says (by_default: false for the fp16
// forward; HSTU_ATTN_SM90_ORDER=grid / seq; sequences too long for the builder).
int64_t tile_order_wanted(const HstuAttnParams& p, int bm, bool by_default) {
  if (p.total_tokens >= int64_t(p.batch) * p.max_seqlen) return 0;
  if (!attn::sm90_tile_order_on(p.max_seqlen, bm, by_default)) return 0;
  return attn::tile_order_entries(p.batch, p.max_seqlen, p.total_tokens, bm);
}

// args.plan as the kernels read it (attn_tile_order.h: attention_plan_bytes): each order where
// the plan holds one for blocks of the rows the call's kernel has (null otherwise: the call builds
// its own), the counter where the plan holds any order.
struct PlanView {
  attn::SeqTile* fwd = nullptr;
  attn::SeqTile* bwd = nullptr;
  int* counter = nullptr;
};
PlanView plan_view(const HstuAttentionPlan& plan, const HstuAttnParams& p, int hdp) {
  if (plan.empty()) return {};
  const int64_t cap = attn::attention_plan_capacity(p.batch, p.max_seqlen, p.total_tokens);
  const int64_t bytes = attn::attention_plan_bytes(p.batch, p.max_seqlen, p.total_tokens);
  const Tensor& m = plan.mem;
  HSTU_CHECK(m.device == Device::kCUDA && m.dtype == DType::kU8 && m.contiguous() &&
                 m.numel() >= bytes && reinterpret_cast<uintptr_t>(m.data) % 16 == 0,
             "hstu_attention: plan.mem must be a contiguous, 16-byte aligned CUDA u8 tensor of at "
             "least ",
             bytes, " bytes (hstu_attention_plan_bytes), got ", m.str());
  auto* base = static_cast<attn::SeqTile*>(m.data);
  PlanView v;
  if (plan.fwd_rows == attn::sm90_fwd_block_rows(hdp)) v.fwd = base;
  if (plan.bwd_rows == attn::sm90_bwd_block_rows(hdp)) v.bwd = base + cap;
  v.counter = reinterpret_cast<int*>(base + 2 * cap);
  return v;
}

// The sm_90a kernels' launch order for resident blocks of bm rows where the call wants one
// (tile_order_wanted): the plan's list when the call has a plan (`planned`), else built on
// `stream` into scratch (16 bytes an entry, ~ (T / bm + B) entries; emplaced in `scratch` if not
// yet; without room in a real CUDA scratch arena the grid order); p pointed at it. Called before
// the backward's side stream forks (its dQ kernel reads it).
void order_sm90_tiles(Ctx& ctx, std::optional<Scratch>& scratch, HstuAttnParams& p, int bm,
                      bool by_default, const attn::SeqTile* planned, cudaStream_t stream) {
  const int64_t n = tile_order_wanted(p, bm, by_default);
  if (n <= 0) return;
  if (planned) {
    p.tile_order = planned;
  } else {
    const Arena* a = ctx.scratch;
    if (!a || a->device() != Device::kCUDA || a->is_measuring()) return;
    const size_t bytes = sizeof(attn::SeqTile) * size_t(n);
    if (a->capacity() - a->used() < arena_bytes(bytes)) return;
    if (!scratch) scratch.emplace(ctx, "hstu_attention");
    const Tensor t = scratch->alloc(DType::kU8, {int64_t(bytes)});
    auto* list = static_cast<attn::SeqTile*>(t.data);
    attn::sm90_build_tile_order(p, bm, list, n, stream);
    p.tile_order = list;
  }
  p.tile_order_n = n;
  p.tile_order_bm = bm;
}

// The persistent sm_90a forward's tile counter (attention_fwd_sm90.cuh; no rab, padded head
// widths 64 / 128, where sm90_fwd_persist_mode's rule takes the call): the plan's (`planned`,
// zero at every launch) or one int in scratch (emplaced in `scratch` if not yet), zeroed by the
// launcher. Without either (no room in a real CUDA scratch arena) none, and the call runs one CTA
// per tile.
void sm90_fwd_counter(Ctx& ctx, std::optional<Scratch>& scratch, HstuAttnParams& p, int hdp,
                      int* planned) {
  const int mode = attn::sm90_fwd_persist_mode();  // after order_sm90_tiles: p.tile_order set
  if (p.rab_pos || hdp > 128 || !(mode == 2 || (mode == 1 && p.tile_order))) return;
  if (planned) {
    p.fwd_tile_counter = planned;
    p.fwd_tile_counter_zero = true;
    return;
  }
  const Arena* a = ctx.scratch;
  if (!a || a->device() != Device::kCUDA || a->is_measuring()) return;
  if (a->capacity() - a->used() < arena_bytes(sizeof(int))) return;
  if (!scratch) scratch.emplace(ctx, "hstu_attention");
  p.fwd_tile_counter = static_cast<int*>(scratch->alloc(DType::kI32, {1}).data);
}

}  // namespace

HstuAttentionPlan hstu_attention_plan(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& mem) {
  HstuAttnParams p = make_params(args);
  if (p.batch == 0 || p.total_tokens == 0 || p.max_seqlen == 0) return {};
  take_step_rab_buckets(args, p);  // the calls' rab form (sm90 takes rab with buckets only)
  const int hdp = head_dim_bucket(std::max(p.d_qk, p.d_v));
  // The orders the calls take: the forward's where the sm_90a forward takes the call, the
  // backward's where the sm_90a backward may (its d_o assumed laid out as q: a call whose d_o is
  // not runs sm80 and reads no order).
  HstuAttentionPlan plan;
  const int fwd_bm = attn::sm90_fwd_block_rows(hdp), bwd_bm = attn::sm90_bwd_block_rows(hdp);
  HstuAttnParams pb = p;
  pb.d_o = p.q;
  const int64_t fwd_n = attn::sm90_fwd_supported(p, hdp)
                            ? tile_order_wanted(p, fwd_bm, args.q.dtype == DType::kBF16)
                            : 0;
  const int64_t bwd_n = attn::sm90_bwd_supported(pb, hdp) ? tile_order_wanted(p, bwd_bm, true) : 0;
  if (fwd_n > 0) plan.fwd_rows = fwd_bm;
  if (bwd_n > 0) plan.bwd_rows = bwd_bm;
  if (plan.empty()) return {};
  plan.mem = mem;
  const PlanView v = plan_view(plan, p, hdp);
  const cudaStream_t stream = stream_of(ctx);
  if (fwd_n > 0) attn::sm90_build_tile_order(p, fwd_bm, v.fwd, fwd_n, stream);
  if (bwd_n > 0) attn::sm90_build_tile_order(p, bwd_bm, v.bwd, bwd_n, stream);
  HSTU_CUDA_CHECK(cudaMemsetAsync(v.counter, 0, sizeof(int), stream));
  return plan;
}

bool hstu_rab_buckets(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& out) {
  HstuAttnParams p = make_params(args);
  if (!attn::rab_buckets_possible(p)) return false;
  point_at_rab_buckets(out, p, "hstu_rab_buckets: out");
  attn::launch_rab_buckets(p, stream_of(ctx));
  return true;
}

void hstu_attention_fwd(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& o) {
  HstuAttnParams p = make_params(args);
  check_operand(o, args.q.dtype, p.total_tokens, p.num_heads, p.d_v, "o");
  p.o = heads_view(o, p.num_heads);
  if (p.batch == 0 || p.total_tokens == 0 || p.max_seqlen == 0) return;
  const int hdp = head_dim_bucket(std::max(p.d_qk, p.d_v));
  std::optional<Scratch> scratch;
  if (!take_step_rab_buckets(args, p) && use_rab_buckets(ctx, p)) {
    scratch.emplace(ctx, "hstu_attention_fwd");
    compute_rab_buckets(*scratch, p, stream_of(ctx));
  }
  if (attn::sm90_fwd_supported(p, hdp)) {  // Hopper: wgmma / TMA (HSTU_ATTN_SM80=1: never)
    // fp16: the grid order unless HSTU_ATTN_SM90_ORDER=seq (sm90_tile_order_on).
    const PlanView plan = plan_view(args.plan, p, hdp);
    order_sm90_tiles(ctx, scratch, p, attn::sm90_fwd_block_rows(hdp), args.q.dtype == DType::kBF16,
                     plan.fwd, stream_of(ctx));
    sm90_fwd_counter(ctx, scratch, p, hdp, plan.counter);
    if (args.q.dtype == DType::kBF16) {
      fwd_bucket_sm90<bf16>(hdp, p, stream_of(ctx));
    } else {
      fwd_bucket_sm90<f16>(hdp, p, stream_of(ctx));
    }
    return;
  }
  if (args.q.dtype == DType::kBF16) {
    fwd_bucket<bf16>(hdp, p, stream_of(ctx));
  } else {
    fwd_bucket<f16>(hdp, p, stream_of(ctx));
  }
}

void hstu_attention_bwd(Ctx& ctx, const HstuAttentionArgs& args, const Tensor& d_o,
                        const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& d_rab_pos, const Tensor& d_rab_time) {
  HstuAttnParams p = make_params(args);
  const DType dt = args.q.dtype;
  check_operand(d_o, dt, p.total_tokens, p.num_heads, p.d_v, "d_o");
  check_operand(dq, dt, p.total_tokens, p.num_heads, p.d_qk, "dq");
  check_operand(dk, dt, p.total_tokens, p.num_heads, p.d_qk, "dk");
  check_operand(dv, dt, p.total_tokens, p.num_heads, p.d_v, "dv");
  p.d_o = heads_view(d_o, p.num_heads);
  p.dq = heads_view(dq, p.num_heads);
  p.dk = heads_view(dk, p.num_heads);
  p.dv = heads_view(dv, p.num_heads);
  if (p.batch == 0 || p.total_tokens == 0 || p.max_seqlen == 0) return;
  const int hdp = head_dim_bucket(std::max(p.d_qk, p.d_v));
  const cudaStream_t stream = stream_of(ctx);
  const bool rab_grad = args.has_rab() && !d_rab_pos.empty();
  std::optional<Scratch> scratch_holder;
  // Before the sm90 choice and the side stream's fork.
  if (!take_step_rab_buckets(args, p) && use_rab_buckets(ctx, p)) {
    scratch_holder.emplace(ctx, "hstu_attention_bwd");
    compute_rab_buckets(*scratch_holder, p, stream);
  }
  // Hopper without rab (head widths 64 / 128 / 256): the fused form where it is the faster
  // (sm90_fused_faster; one kernel: dK, dV and each key block's partial dQ added to an fp32
  // accumulator by bulk reduce-adds, then a convert kernel), given the scratch: the accumulator
  // (4 T H Dpad bytes) and, deterministic, two int32 semaphores per (sequence, head, 64-query
  // block) that order the adds (the accumulator then needs no zeroing). Otherwise the split form
  // (the dK/dV kernel and a query-major dQ kernel on the side stream, no scratch), which is
  // deterministic whatever ctx asks. d 256 (attention_bwd_sm90_wide.cuh) has both forms too.
  const bool sm90 = attn::sm90_bwd_supported(p, hdp);
  // The tickets, then the persistent backward's tile counter (attention_sm90.h).
  const int64_t sem_n = attn::sm90_bwd_tickets(p.batch, p.num_heads, p.max_seqlen) + 1;
  // rab: the fused form at d 128 (attention_bwd_sm90.cuh, kRabFused) up to the length whose bias
  // tables fit in its shared memory; with gradients it stores every tile's dS in scratch for the
  // reduction kernel (sm90_bwd_rab_ds_bytes).
  const bool rab_fused = p.rab_pos && p.rab_bkt && attn::sm90_bwd_rab_fused_fits(hdp, p.max_seqlen);
  const int64_t rab_ds_bytes =
      rab_fused && rab_grad ? attn::sm90_bwd_rab_ds_bytes(p.batch, p.num_heads, p.max_seqlen) : 0;
  const size_t fused_bytes = 4 * size_t(p.total_tokens * p.num_heads * hdp) + 4 * size_t(sem_n) +
                             size_t(rab_ds_bytes) + 1024;  // + alignment of the allocations
  const bool sm90_fused = sm90 && (!p.rab_pos || rab_fused) && sm90_fused_faster(p, hdp) &&
                          ctx.scratch && ctx.scratch->device() == Device::kCUDA &&
                          !ctx.scratch->is_measuring() &&
                          ctx.scratch->capacity() - ctx.scratch->used() >= fused_bytes;
  const bool sm90_ordered = sm90_fused && ctx.deterministic;
  const bool det = ctx.deterministic || sm90;
  // Deterministic: the dQ kernel goes on the side stream, forked from and joined back to ours.
  const SideStream* side = det && !sm90_fused ? &side_stream() : nullptr;
  int* sem = nullptr;
  auto run = [&] {
    if (side) {
      HSTU_CUDA_CHECK(cudaEventRecord(side->fork, stream));
      HSTU_CUDA_CHECK(cudaStreamWaitEvent(side->stream, side->fork, 0));
    }
    if (sm90) {
      const cudaStream_t dq_s = side ? side->stream : stream;
      if (dt == DType::kBF16) {
        bwd_bucket_sm90<bf16>(hdp, p, sem, stream, dq_s);
      } else {
        bwd_bucket_sm90<f16>(hdp, p, sem, stream, dq_s);
      }
    } else if (dt == DType::kBF16) {
      bwd_bucket<bf16>(hdp, p, det, stream, side ? side->stream : stream);
    } else {
      bwd_bucket<f16>(hdp, p, det, stream, side ? side->stream : stream);
    }
    if (side) {
      HSTU_CUDA_CHECK(cudaEventRecord(side->join, side->stream));
      HSTU_CUDA_CHECK(cudaStreamWaitEvent(stream, side->join, 0));
    }
  };
  // The sm_90a kernels' launch order after the scratch the forms need (it is small and optional).
  auto order = [&] {
    if (sm90)
      order_sm90_tiles(ctx, scratch_holder, p, attn::sm90_bwd_block_rows(hdp), true,
                       plan_view(args.plan, p, hdp).bwd, stream);
  };
  if (!rab_grad && det && !sm90_fused) {  // no more scratch needed
    order();
    run();
    return;
  }
  if (!scratch_holder) scratch_holder.emplace(ctx, "hstu_attention_bwd");
  Scratch& scratch = *scratch_holder;
  if (rab_grad) {
    check_1d(d_rab_pos, DType::kF32, p.rab_pos_len, "d_rab_pos");
    check_1d(d_rab_time, DType::kF32, p.rab_time_len, "d_rab_time");
    const Tensor acc = scratch.alloc(DType::kI64, {p.rab_pos_len + p.rab_time_len});
    HSTU_CUDA_CHECK(cudaMemsetAsync(acc.data, 0, acc.nbytes(), stream));
    p.drab_accum = static_cast<unsigned long long*>(acc.data);
    p.d_rab_pos = static_cast<float*>(d_rab_pos.data);
    p.d_rab_time = static_cast<float*>(d_rab_time.data);
  }
  if (sm90_ordered) {
    const Tensor s = scratch.alloc(DType::kI32, {sem_n});
    HSTU_CUDA_CHECK(cudaMemsetAsync(s.data, 0, s.nbytes(), stream));
    sem = static_cast<int*>(s.data);
  }
  if (!det || sm90_fused) {
    const Tensor acc = scratch.alloc(DType::kF32, {p.total_tokens * p.num_heads * hdp});
    // The ordered fused form's first add to each element is a store (attention_bwd_sm90_dq.cuh).
    if (!sm90_ordered) HSTU_CUDA_CHECK(cudaMemsetAsync(acc.data, 0, acc.nbytes(), stream));
    p.dq_accum = static_cast<float*>(acc.data);
    p.dq_accum_head_stride = hdp;
  }
  if (sm90_fused && rab_ds_bytes > 0) {  // every visited tile written before it is read
    const Tensor ds = scratch.alloc(DType::kU8, {rab_ds_bytes});
    p.rab_ds = ds.data;
  }
  order();
  run();
  if (rab_grad) {
    const int n = p.rab_pos_len + p.rab_time_len;
    drab_finish_kernel<<<(n + 255) / 256, 256, 0, stream>>>(p);
    HSTU_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace hstu::cuda
