// bench_attention.cpp — `hstu bench attention` (see bench_attention.h): validate once against
// the CPU reference, then time forward and backward with CUDA events (warm-up, median of >= 20
// repetitions) over a sweep of shapes and print ms, TFLOPS and the ratio to FlashAttention-2 on
// H100 (FA3 paper figures; performance-references.md §2) and to NVIDIA's HSTU kernel (§1.2).
//
// The decisions: inputs live in fused [T, u|v|q|k] buffers in the HSTU layer's UvqkLayout (heads
// padded to 16-byte strides) and q, k, v are column views, so the timed memory paths are the ones
// training uses. Each repetition is device time with a cold L2 (Triton's do_bench method): a
// memset of twice the L2 size runs first, the events bracket the op's kernels, and the op's
// host-side launch work overlaps the memset as it overlaps the previous op in a training step's
// stream (without it, short shapes would time the host's launch latency on an idle GPU).
#include "bench/bench_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/context.h"
#include "core/error.h"
#include "model/hstu_layer.h"
#include "ops/hstu_attention.h"

#if defined(HSTU_WITH_CUDA)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#endif

namespace hstu {

#if !defined(HSTU_WITH_CUDA)

int run_attention_bench(const std::vector<std::string>&) {
  std::printf("hstu bench attention: this binary was built without CUDA\n");
  return 1;
}

#else

namespace {

struct Shape {
  int B = 32, L = 4096, H = 4, d = 128;
  bool jagged = false;
};

// How a jagged shape draws its lengths: uniform in [L/2, L], uniform in [1, L], or a power law
// P(l) ~ l^-1.2 on [1, L] (recsys-examples' benchmark data draws zipf lengths; most are short).
enum class Lengths { kHalf, kUniform, kZipf };

const char* lengths_name(Lengths k) {
  return k == Lengths::kHalf ? "jagged" : (k == Lengths::kUniform ? "unif" : "zipf");
}

struct Options {
  std::vector<Shape> shapes;
  DType dtype = DType::kBF16;
  bool causal = true, validate = true, fwd_only = false;
  bool rab = false;  // relative attention bias (positions + 128 time buckets) with its gradient
  bool own_plan = false;  // each call builds its own launch plan (hstu_attention_plan not passed)
  Lengths lengths = Lengths::kHalf;
  int warmup = 3, reps = 20;
  // auto: the dispatch's choice; sm80 / sm90: those kernels forced; both: each forward and
  // backward timed on sm90 (forced) and on sm80.
  std::string kernel = "auto";
};

// Sets the dispatch's overrides: "sm80" (HSTU_ATTN_SM80=1), "sm90" (HSTU_ATTN_SM90=1: the sm_90a
// forward and backward wherever they can run, also where the dispatch would keep sm80) or "auto"
// (neither).
void force_kernel(const std::string& k) {
  unsetenv("HSTU_ATTN_SM80");
  unsetenv("HSTU_ATTN_SM90");
  if (k == "sm80") setenv("HSTU_ATTN_SM80", "1", 1);
  if (k == "sm90") setenv("HSTU_ATTN_SM90", "1", 1);
}

// TFLOPS of FlashAttention-2 on H100 SXM, bf16 (FA3 paper figures as transcribed in
// performance-references.md §2) at L = 512, 1k, 2k, 4k, 8k, 16k; 0 = not published.
double fa2_tflops(bool bwd, int d, bool causal, int L) {
  static const double kFwdCausal128[] = {191, 260, 298, 319, 333, 335};
  static const double kFwdCausal256[] = {208, 251, 278, 293, 297, 298};
  static const double kFwdFull64[] = {282, 306, 318, 321, 322, 324};
  static const double kFwdFull128[] = {309, 350, 362, 368, 370, 370};
  static const double kFwdFull256[] = {275, 313, 321, 323, 324, 326};
  static const double kBwd64[] = {198, 238, 264, 0, 0, 0};
  static const double kBwd128[] = {214, 260, 291, 310, 318, 322};  // non-causal figure
  if (L < 512) return 0;
  const int i = std::min(5, static_cast<int>(std::log2(L / 512.0) + 1e-9));
  const int db = d <= 64 ? 64 : (d <= 128 ? 128 : 256);
  if (bwd) return db == 64 ? kBwd64[i] : (db == 128 ? kBwd128[i] : 0);
  if (causal) return db == 128 ? kFwdCausal128[i] : (db == 256 ? kFwdCausal256[i] : 0);
  return db == 64 ? kFwdFull64[i] : (db == 128 ? kFwdFull128[i] : kFwdFull256[i]);
}

// NVIDIA's CUTLASS HSTU kernel on H100, bf16, causal, B = 32, 4 heads (performance-references.md
// §1.2), at L = 128 .. 16k; 0 = not published for this head dim.
double nv_hstu_tflops(bool bwd, int d, int L) {
  static const double kFwd64[] = {24, 55, 128, 207, 333, 416, 470, 477};
  static const double kBwd64[] = {32, 67, 135, 223, 314, 383, 404, 423};
  static const double kFwd128[] = {41, 102, 182, 329, 457, 528, 525, 561};
  static const double kBwd128[] = {38, 85, 161, 276, 384, 440, 468, 486};
  static const double kFwd256[] = {66, 111, 245, 409, 537, 622, 624, 637};
  static const double kBwd256[] = {46, 86, 163, 256, 321, 360, 379, 385};
  if (L < 128 || (d != 64 && d != 128 && d != 256)) return 0;
  const int i = std::min(7, static_cast<int>(std::log2(L / 128.0) + 1e-9));
  if (d == 64) return bwd ? kBwd64[i] : kFwd64[i];
  if (d == 128) return bwd ? kBwd128[i] : kFwd128[i];
  return bwd ? kBwd256[i] : kFwd256[i];
}

std::vector<int> make_lengths(const Shape& s, Lengths kind, std::mt19937_64& g) {
  std::vector<int> len(s.B, s.L);
  if (!s.jagged) return len;
  if (kind == Lengths::kZipf) {
    std::vector<double> w(s.L);
    for (int l = 1; l <= s.L; ++l) w[l - 1] = std::pow(double(l), -1.2);
    std::discrete_distribution<int> z(w.begin(), w.end());
    for (int& l : len) l = 1 + z(g);
    return len;
  }
  std::uniform_int_distribution<int> u(kind == Lengths::kHalf ? std::max(1, s.L / 2) : 1, s.L);
  for (int& l : len) l = u(g);
  return len;
}

uint16_t to_bits(DType t, float x) {
  if (t == DType::kBF16) return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x;
  return static_cast<__half_raw>(__float2half_rn(x)).x;
}
float from_bits(DType t, uint16_t b) {
  if (t == DType::kBF16) {
    __nv_bfloat16_raw r;
    r.x = b;
    return __bfloat162float(__nv_bfloat16(r));
  }
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}

// Device buffers of one problem: fused inputs and gradients, d_o, o, offsets.
struct DeviceProblem {
  Arena mem;
  Arena scratch;
  Tensor uvqk, duvqk, o, d_o, cu;
  HstuAttentionArgs args;
  Tensor dq, dk, dv;
  std::vector<int> len;
  int64_t T = 0;

  DeviceProblem(const Shape& s, const std::vector<int>& lengths, DType dt, bool causal,
                bool rab = false)
      : len(lengths) {
    for (int l : len) T += l;
    const UvqkLayout lay{s.H, s.d};
    const int64_t hd = int64_t(s.H) * s.d, W = lay.width();
    const int hdp = s.d <= 32 ? 32 : (s.d <= 64 ? 64 : (s.d <= 128 ? 128 : 256));
    const size_t bytes = size_t(T) * (2 * W + 2 * hd) * 2 + 4 * (len.size() + 1) + 64 * 1024;
    mem = Arena(Device::kCUDA, bytes + 8 * Arena::kAlign, "bench-attention");
    // dQ accumulator (atomic mode) + the rest (the sm90 tile-order lists) + with rab the fused
    // backward's dS tiles, as the trainer sizes them. The rab's time buckets are the step's, in
    // scratch_rab (add_rab), as a model step passes them.
    const int max_len = *std::max_element(len.begin(), len.end());
    const size_t rab_ds =
        rab ? size_t(hstu_attention_rab_scratch_bytes(int64_t(len.size()), s.H, max_len, s.d)) : 0;
    scratch = Arena(Device::kCUDA, size_t(T) * s.H * hdp * 4 + rab_ds + (1 << 20), "bench-scratch");
    uvqk = mem.alloc(dt, {T, W});
    duvqk = mem.alloc(dt, {T, W});
    o = mem.alloc(dt, {T, hd});
    d_o = mem.alloc(dt, {T, hd});
    cu = mem.alloc(DType::kI32, {static_cast<int64_t>(len.size()) + 1});
    std::vector<int32_t> cuh(1, 0);
    for (int l : len) cuh.push_back(cuh.back() + l);
    copy_bytes(cu.data, Device::kCUDA, cuh.data(), Device::kCPU, cuh.size() * 4);
    args.v = uvqk.cols(lay.v0(), lay.q0());
    args.q = uvqk.cols(lay.q0(), lay.k0());
    args.k = uvqk.cols(lay.k0(), W);
    args.dim_qk = args.dim_v = s.d;
    dv = duvqk.cols(lay.v0(), lay.q0());
    dq = duvqk.cols(lay.q0(), lay.k0());
    dk = duvqk.cols(lay.k0(), W);
    args.cu_seqlens = cu;
    args.max_seqlen = max_len;
    args.num_heads = s.H;
    args.alpha = 1.0f / std::sqrt(static_cast<float>(s.d));
    args.scale = 1.0f / static_cast<float>(args.max_seqlen);
    args.causal = causal;
    const int64_t plan_bytes = hstu_attention_plan_bytes(int64_t(len.size()), args.max_seqlen, T);
    plan_mem = Arena(Device::kCUDA, size_t(plan_bytes) + Arena::kAlign, "bench-plan");
    plan_buf = plan_mem.alloc(DType::kU8, {plan_bytes});
  }
  // The step's launch plan in plan_buf, as a model step builds it: once for all its layers and
  // passes (hstu_attention_plan; the calls then take args.plan). Empty where the calls take none
  // (full-length batches, the sm80 kernels).
  HstuAttentionPlan compute_plan(Ctx& ctx) const {
    HstuAttentionArgs a = args;
    a.plan = {};
    return hstu_attention_plan(ctx, a, plan_buf);
  }
  Arena plan_mem;
  Tensor plan_buf;

  // Relative attention bias as the paper's configs use it: a position table of 2 max_len - 1
  // entries, 128 log time buckets, timestamps in sessions (gaps of seconds, or days apart).
  Tensor d_rab_pos, d_rab_time;
  void add_rab(std::mt19937_64& g) {
    const int64_t np = 2 * int64_t(args.max_seqlen) - 1, nt = 129;
    std::vector<float> pos(np), tim(nt);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (float& x : pos) x = u(g);
    for (float& x : tim) x = u(g);
    std::vector<int64_t> ts;
    std::exponential_distribution<double> days(1.0 / (2 * 86400.0));
    std::uniform_int_distribution<int> secs(0, 120);
    for (int l : len) {
      int64_t t = 978300000;  // ML-1M's first year
      for (int k = 0; k < l; ++k) {
        t += (g() % 2) ? secs(g) : static_cast<int64_t>(days(g));
        ts.push_back(t);
      }
    }
    const int64_t bucket_bytes =
        hstu_rab_buckets_bytes(static_cast<int64_t>(len.size()), args.max_seqlen);
    scratch_rab =
        Arena(Device::kCUDA, size_t(np + nt) * 8 + ts.size() * 8 + size_t(bucket_bytes) + 64 * 1024,
              "bench-rab");
    Tensor p = scratch_rab.alloc(DType::kF32, {np}), t = scratch_rab.alloc(DType::kF32, {nt});
    Tensor tsd = scratch_rab.alloc(DType::kI64, {T});
    d_rab_pos = scratch_rab.alloc(DType::kF32, {np});
    d_rab_time = scratch_rab.alloc(DType::kF32, {nt});
    copy_bytes(p.data, Device::kCUDA, pos.data(), Device::kCPU, pos.size() * 4);
    copy_bytes(t.data, Device::kCUDA, tim.data(), Device::kCPU, tim.size() * 4);
    copy_bytes(tsd.data, Device::kCUDA, ts.data(), Device::kCPU, ts.size() * 8);
    HSTU_CUDA_CHECK(cudaMemset(d_rab_pos.data, 0, np * 4));
    HSTU_CUDA_CHECK(cudaMemset(d_rab_time.data, 0, nt * 4));
    args.rab_pos = p;
    args.rab_time = t;
    args.ts_query = tsd;
    args.ts_key = tsd;
    rab_buckets = scratch_rab.alloc(DType::kU8, {bucket_bytes});
  }
  // The step's time buckets (u8 [B, S, S]) into rab_buckets, as a model step computes them: once
  // for all its layers and passes (hstu_rab_buckets; the calls then take args.rab_buckets).
  // False where the call takes no precomputed buckets.
  bool compute_rab_buckets(Ctx& ctx) const {
    HstuAttentionArgs a = args;
    a.rab_buckets = Tensor();
    return hstu_rab_buckets(ctx, a, rab_buckets);
  }
  Tensor rab_buckets;
  Arena scratch_rab;
};

// Fills a device tensor with random values in [-1, 1] by tiling a 1M-element host block.
void fill_random(const Tensor& t, DType dt, std::mt19937_64& g) {
  static std::vector<uint16_t> block;
  if (block.empty()) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    block.resize(size_t(1) << 20);
    for (auto& b : block) b = to_bits(dt, u(g));
  }
  const size_t n = static_cast<size_t>(t.numel()) * 2;
  for (size_t off = 0; off < n; off += block.size() * 2) {
    const size_t len = std::min(n - off, block.size() * 2);
    HSTU_CUDA_CHECK(
        cudaMemcpy(static_cast<char*>(t.data) + off, block.data(), len, cudaMemcpyHostToDevice));
  }
}

double median_ms(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The L2 flush buffer: twice the device's L2 size, written before every timed repetition.
struct L2Flush {
  void* buf = nullptr;
  size_t bytes = 0;
  L2Flush() {
    int dev = 0, l2 = 0;
    HSTU_CUDA_CHECK(cudaGetDevice(&dev));
    HSTU_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    bytes = std::max<size_t>(size_t(2) * l2, size_t(64) << 20);
    HSTU_CUDA_CHECK(cudaMalloc(&buf, bytes));
  }
  ~L2Flush() { cudaFree(buf); }
  void run() const { HSTU_CUDA_CHECK(cudaMemsetAsync(buf, 0, bytes)); }
};

template <typename F>
double time_ms(F&& f, int warmup, int reps) {
  static const L2Flush flush;
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t a, b;
  HSTU_CUDA_CHECK(cudaEventCreate(&a));
  HSTU_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    flush.run();
    HSTU_CUDA_CHECK(cudaEventRecord(a));
    f();
    HSTU_CUDA_CHECK(cudaEventRecord(b));
    HSTU_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    HSTU_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median_ms(ms);
}

// Host f32 copy of a device view of 16-bit floats.
std::vector<float> download(const Tensor& t, DType dt) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<uint16_t> raw(size_t(rows) * cols);
  HSTU_CUDA_CHECK(cudaMemcpy2D(raw.data(), cols * 2, t.data, t.row_stride * 2, cols * 2, rows,
                               cudaMemcpyDeviceToHost));
  std::vector<float> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) out[i] = from_bits(dt, raw[i]);
  return out;
}

// One jagged problem with contexts and targets, GPU vs the CPU reference (f32 on the same
// rounded inputs): max |gpu - ref| / max |ref| per output, bf16-level bound.
bool validate(DType dt, int d, std::mt19937_64& g) {
  const Shape s{3, 300, 2, d, true};
  const std::vector<int> len = {1, 157, 300};
  DeviceProblem dp(s, len, dt, true);
  const UvqkLayout lay{s.H, d};
  const int64_t T = dp.T, hd = int64_t(s.H) * d, W = lay.width();
  // Random rounded inputs on the host, uploaded.
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> uvqk(size_t(T) * W), dout(size_t(T) * hd);
  for (auto& b : uvqk) b = to_bits(dt, u(g));
  for (auto& b : dout) b = to_bits(dt, u(g));
  copy_bytes(dp.uvqk.data, Device::kCUDA, uvqk.data(), Device::kCPU, uvqk.size() * 2);
  copy_bytes(dp.d_o.data, Device::kCUDA, dout.data(), Device::kCPU, dout.size() * 2);
  const std::vector<int32_t> nctx = {0, 5, 3}, ntgt = {0, 4, 10};
  Tensor ctx_d = dp.mem.alloc(DType::kI32, {3}), tgt_d = dp.mem.alloc(DType::kI32, {3});
  copy_bytes(ctx_d.data, Device::kCUDA, nctx.data(), Device::kCPU, 12);
  copy_bytes(tgt_d.data, Device::kCUDA, ntgt.data(), Device::kCPU, 12);
  dp.args.num_contexts = ctx_d;
  dp.args.num_targets = tgt_d;

  Ctx gctx;
  gctx.device = Device::kCUDA;
  gctx.scratch = &dp.scratch;
  gctx.deterministic = false;
  hstu_attention_fwd(gctx, dp.args, dp.o);
  hstu_attention_bwd(gctx, dp.args, dp.d_o, dp.dq, dp.dk, dp.dv, Tensor(), Tensor());
  HSTU_CUDA_CHECK(cudaDeviceSynchronize());

  // CPU reference.
  Arena host(Device::kCPU, size_t(T) * (W * 2 + hd * 2) * 4 + 4096, "bench-validate");
  Tensor huvqk = host.alloc(DType::kF32, {T, W}), hdo = host.alloc(DType::kF32, {T, hd});
  for (size_t i = 0; i < uvqk.size(); ++i)
    static_cast<float*>(huvqk.data)[i] = from_bits(dt, uvqk[i]);
  for (size_t i = 0; i < dout.size(); ++i)
    static_cast<float*>(hdo.data)[i] = from_bits(dt, dout[i]);
  Tensor ho = host.alloc(DType::kF32, {T, hd}), hgrad = host.alloc(DType::kF32, {T, W});
  std::vector<int32_t> cuh(1, 0);
  for (int l : len) cuh.push_back(cuh.back() + l);
  HstuAttentionArgs ha = dp.args;
  ha.v = huvqk.cols(lay.v0(), lay.q0());
  ha.q = huvqk.cols(lay.q0(), lay.k0());
  ha.k = huvqk.cols(lay.k0(), W);
  ha.cu_seqlens = Tensor(cuh.data(), DType::kI32, Device::kCPU, {4});
  ha.num_contexts = Tensor(const_cast<int32_t*>(nctx.data()), DType::kI32, Device::kCPU, {3});
  ha.num_targets = Tensor(const_cast<int32_t*>(ntgt.data()), DType::kI32, Device::kCPU, {3});
  Ctx cctx = cpu_ctx();
  hstu_attention_fwd(cctx, ha, ho);
  const Tensor hdq = hgrad.cols(lay.q0(), lay.k0()), hdk = hgrad.cols(lay.k0(), W),
               hdv = hgrad.cols(lay.v0(), lay.q0());
  hstu_attention_bwd(cctx, ha, hdo, hdq, hdk, hdv, Tensor(), Tensor());

  // Max error over the heads' first d columns (head padding is never written).
  auto rel = [&](const Tensor& gpu, const Tensor& ref) {
    const std::vector<float> a = download(gpu, dt);
    const int64_t stride = head_stride(ref, s.H);
    double err = 0, mx = 0;
    for (int64_t r = 0; r < T; ++r)
      for (int64_t c = 0; c < ref.shape[1]; ++c) {
        if (c % stride >= d) continue;
        const double e = static_cast<const float*>(ref.data)[r * ref.row_stride + c];
        const double x = a[size_t(r) * ref.shape[1] + c];
        err = std::isnan(x) ? INFINITY : std::max(err, std::fabs(x - e));
        mx = std::max(mx, std::fabs(e));
      }
    return err / std::max(mx, 1e-30);
  };
  const double eo = rel(dp.o, ho), eq = rel(dp.dq, hdq), ek = rel(dp.dk, hdk), ev = rel(dp.dv, hdv);
  const double bound = 3e-2;  // a few bf16 ulps of the largest output
  const bool ok = eo < bound && eq < bound && ek < bound && ev < bound;
  std::printf("validate d=%d %s: max rel error o %.2e dq %.2e dk %.2e dv %.2e (bound %.0e): %s\n",
              d, dtype_name(dt), eo, eq, ek, ev, bound, ok ? "PASS" : "FAIL");
  return ok;
}

Options parse(const std::vector<std::string>& args) {
  Options o;
  bool only_jagged = false, only_full = false, sweep = false;
  std::vector<Shape> chosen;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> std::string {
      HSTU_CHECK(i + 1 < args.size(), "bench attention: ", a, " needs a value");
      return args[++i];
    };
    if (a == "--shape") {
      const std::string v = next();
      Shape one;
      HSTU_CHECK(std::sscanf(v.c_str(), "%d,%d,%d,%d", &one.B, &one.L, &one.H, &one.d) == 4 &&
                     one.B > 0 && one.L > 0 && one.H > 0 && one.d > 0 && one.d <= 256,
                 "bench attention: --shape takes B,L,H,d (d <= 256), got '", v, "'");
      chosen.push_back(one);
    } else if (a == "--jagged") {
      only_jagged = true;
    } else if (a == "--full") {
      only_full = true;
    } else if (a == "--lengths") {
      const std::string v = next();
      HSTU_CHECK(v == "half" || v == "uniform" || v == "zipf",
                 "bench attention: --lengths half|uniform|zipf, got ", v);
      o.lengths =
          v == "half" ? Lengths::kHalf : (v == "uniform" ? Lengths::kUniform : Lengths::kZipf);
    } else if (a == "--sweep") {
      sweep = true;
    } else if (a == "--dtype") {
      const std::string v = next();
      HSTU_CHECK(v == "bf16" || v == "fp16", "bench attention: --dtype bf16|fp16, got ", v);
      o.dtype = v == "bf16" ? DType::kBF16 : DType::kF16;
    } else if (a == "--non-causal") {
      o.causal = false;
    } else if (a == "--warmup") {
      o.warmup = std::stoi(next());
    } else if (a == "--reps") {
      o.reps = std::stoi(next());
    } else if (a == "--no-validate") {
      o.validate = false;
    } else if (a == "--fwd-only") {
      o.fwd_only = true;
    } else if (a == "--rab") {
      o.rab = true;
    } else if (a == "--own-plan") {
      o.own_plan = true;
    } else if (a == "--kernel") {
      o.kernel = next();
      HSTU_CHECK(
          o.kernel == "auto" || o.kernel == "sm80" || o.kernel == "sm90" || o.kernel == "both",
          "bench attention: --kernel auto|sm80|sm90|both, got ", o.kernel);
    } else {
      HSTU_THROW("bench attention: unknown option '", a, "'");
    }
  }
  std::vector<Shape> base;
  if (!chosen.empty()) {
    base = chosen;
  } else if (sweep) {  // NVIDIA's published grid (performance-references.md §1.2) plus d 32
    for (int d : {32, 64, 128, 256})
      for (int L = 128; L <= 16384; L *= 2) base.push_back({32, L, 4, d});
  } else {  // the targets' shapes first, then head-dim and length sweeps
    base = {{32, 4096, 4, 128}, {128, 200, 2, 25},  {128, 200, 2, 50},
            {32, 1024, 4, 128}, {32, 2048, 4, 128}, {32, 4096, 4, 64},
            {32, 4096, 4, 256}, {8, 8192, 4, 128},  {128, 512, 4, 128}};
  }
  for (const Shape& s : base) {
    if (!only_jagged) o.shapes.push_back(s);
    if (!only_full) {
      Shape j = s;
      j.jagged = true;
      o.shapes.push_back(j);
    }
  }
  return o;
}

}  // namespace

int run_attention_bench(const std::vector<std::string>& args) {
  const Options opt = parse(args);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("hstu bench attention: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  HSTU_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "HSTU attention on %s (%d SMs), %s, %s%s; device time, cold L2, median of %d reps after %d "
      "warm-up\n",
      prop.name, prop.multiProcessorCount, dtype_name(opt.dtype),
      opt.causal ? "causal" : "non-causal",
      opt.rab
          ? ", rab (positions + 128 time buckets, the step's buckets precomputed) with gradients"
          : "",
      opt.reps, opt.warmup);
  std::printf(
      "FLOPs FlashAttention-style: fwd = 4 H d sum(L_b^2)%s, bwd = 2.5 fwd. Baselines "
      "(H100 bf16): FA2 = FlashAttention-2 (FA3 paper), NV = NVIDIA CUTLASS HSTU (B=32, "
      "4 heads).\n",
      opt.causal ? " / 2" : "");
  force_kernel(opt.kernel == "both" ? "sm90" : opt.kernel);
  if (opt.kernel == "both")
    std::printf(
        "--kernel both: each row runs the sm90 forward and backward (HSTU_ATTN_SM90=1; on other "
        "GPUs, and for backward calls sm90 does not serve, sm80), the next line the sm80 ones "
        "(HSTU_ATTN_SM80=1)\n");
  std::mt19937_64 g(20240601);
  bool ok = true;
  if (opt.validate) {
    ok = validate(opt.dtype, 64, g) && ok;
    ok = validate(opt.dtype, 25, g) && ok;
  }
  std::printf(
      "\n%-5s %-6s %-3s %-4s %-6s | %-8s %-7s %-5s %-5s | %-8s %-7s %-5s %-5s | %-8s %-7s | %-8s\n",
      "B", "L", "H", "d", "lens", "fwd ms", "TFLOPS", "/FA2", "/NV", "bwd ms", "TFLOPS", "/FA2",
      "/NV", "bwdA ms", "TFLOPS", "f+b ms");
  for (const Shape& s : opt.shapes) {
    const std::vector<int> len = make_lengths(s, opt.lengths, g);
    DeviceProblem dp(s, len, opt.dtype, opt.causal, opt.rab);
    fill_random(dp.uvqk, opt.dtype, g);
    fill_random(dp.d_o, opt.dtype, g);
    if (opt.rab) dp.add_rab(g);
    double sum_l2 = 0;
    for (int l : len) sum_l2 += double(l) * l;
    const double fwd_flops = 4.0 * s.H * s.d * sum_l2 * (opt.causal ? 0.5 : 1.0);
    const double bwd_flops = 2.5 * fwd_flops;
    Ctx det;
    det.device = Device::kCUDA;
    det.scratch = &dp.scratch;
    det.deterministic = true;
    Ctx atom = det;
    atom.deterministic = false;
    // TFLOPS of forward, deterministic and atomic-dQ backward on the kernels forced now.
    struct Tflops {
      double fwd_ms = NAN, bwd_ms = NAN, atomic_ms = NAN;
      double fwd = NAN, bwd = NAN, atomic = NAN;
    };
    auto time_kernels = [&] {
      Tflops t;
      t.fwd_ms = time_ms([&] { hstu_attention_fwd(det, dp.args, dp.o); }, opt.warmup, opt.reps);
      if (!opt.fwd_only) {
        for (Ctx* c : {&det, &atom})
          (c == &det ? t.bwd_ms : t.atomic_ms) = time_ms(
              [&] {
                hstu_attention_bwd(*c, dp.args, dp.d_o, dp.dq, dp.dk, dp.dv, dp.d_rab_pos,
                                   dp.d_rab_time);
              },
              opt.warmup, opt.reps);
      }
      t.fwd = fwd_flops / (t.fwd_ms * 1e9);
      t.bwd = bwd_flops / (t.bwd_ms * 1e9);
      t.atomic = bwd_flops / (t.atomic_ms * 1e9);
      return t;
    };
    // The timed calls take the step's buckets and launch plan (the model's way); their own
    // kernels are timed apart.
    double buckets_ms = NAN, plan_ms = NAN;
    if (opt.rab && dp.compute_rab_buckets(det)) {
      buckets_ms = time_ms([&] { dp.compute_rab_buckets(det); }, opt.warmup, opt.reps);
      dp.args.rab_buckets = dp.rab_buckets;
    }
    dp.args.plan = {};
    const HstuAttentionPlan plan = opt.own_plan ? HstuAttentionPlan{} : dp.compute_plan(det);
    if (!plan.empty()) {
      plan_ms = time_ms([&] { dp.compute_plan(det); }, opt.warmup, opt.reps);
      dp.args.plan = plan;  // the same bytes each rebuild writes
    }
    const Tflops t = time_kernels();
    auto ratio = [](double x, double base) {
      static char buf[4][16];
      static int k = 0;
      char* b = buf[k++ % 4];
      if (base > 0) {
        std::snprintf(b, 16, "%.2f", x / base);
      } else {
        std::snprintf(b, 16, "-");
      }
      return b;
    };
    const bool nv_ok = !s.jagged && s.B == 32 && s.H == 4 && opt.causal;
    std::printf(
        "%-5d %-6d %-3d %-4d %-6s | %-8.3f %-7.1f %-5s %-5s | %-8.3f %-7.1f %-5s %-5s | "
        "%-8.3f %-7.1f | %-8.3f\n",
        s.B, s.L, s.H, s.d, s.jagged ? lengths_name(opt.lengths) : "full", t.fwd_ms, t.fwd,
        ratio(t.fwd, s.jagged ? 0 : fa2_tflops(false, s.d, opt.causal, s.L)),
        ratio(t.fwd, nv_ok ? nv_hstu_tflops(false, s.d, s.L) : 0), t.bwd_ms, t.bwd,
        ratio(t.bwd, s.jagged ? 0 : fa2_tflops(true, s.d, opt.causal, s.L)),
        ratio(t.bwd, nv_ok ? nv_hstu_tflops(true, s.d, s.L) : 0), t.atomic_ms, t.atomic,
        t.fwd_ms + std::min(t.bwd_ms, t.atomic_ms));
    if (!std::isnan(buckets_ms))
      std::printf(
          "%-26s | rab time buckets %.3f ms: once per step for all layers and passes "
          "(hstu_rab_buckets), not in the times above\n",
          "", buckets_ms);
    if (!std::isnan(plan_ms))
      std::printf(
          "%-26s | launch plan %.3f ms: once per step for all layers and passes "
          "(hstu_attention_plan: the sm_90a launch orders), not in the times above\n",
          "", plan_ms);
    if (opt.kernel == "both") {
      force_kernel("sm80");
      const Tflops t80 = time_kernels();
      force_kernel("sm90");
      std::printf("%-26s | %-8.3f %-7.1f sm80 fwd; sm90 / sm80 = %.2fx", "", t80.fwd_ms, t80.fwd,
                  t.fwd / t80.fwd);
      if (!opt.fwd_only)
        std::printf(" | %-8.3f %-7.1f sm80 bwd; sm90 / sm80 = %.2fx | %-8.3f %-7.1f sm80 bwdA",
                    t80.bwd_ms, t80.bwd, t.bwd / t80.bwd, t80.atomic_ms, t80.atomic);
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}

#endif

}  // namespace hstu
