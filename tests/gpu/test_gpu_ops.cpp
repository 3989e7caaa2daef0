// test_gpu_ops.cpp — the CUDA backend of every op family except attention, against the CPU
// reference on fresh random inputs: one table of cases (op, shapes including odd sizes and
// strided views, dtypes, tolerance with its reason), GPU outputs NaN-poisoned before every call.
//
// The shaping decision: tolerances follow gpu_harness.h. A 16-bit output must satisfy
//   max |gpu - ref| <= m * max |naive - ref| + tiny,   m = 2 forward, 5 backward,
// where ref is the fp32 CPU reference on the same (rounded) inputs and naive is ref rounded to
// the output dtype — the error of a kernel that computes exactly and rounds once, which any real
// bf16 implementation matches or exceeds. fp32 outputs are held to a relative bound stated per
// case (fp32 summation order). Integer outputs (ranks, touched rows, negatives), dropout masks
// and casts must match exactly, and the deterministic scatters must repeat bit for bit.
//
// Includes the backend headers ops/cpu/*.h and ops/cuda/*.h (private to src/ops/ otherwise):
// the test calls each backend directly to compare the two, and checks the cuBLASLt plan cache
// (ops/cuda/cublaslt_plans.h) itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/gpu_harness.h"
#include "common/harness.h"
#include "core/philox.h"
#include "data/negatives.h"
#include "data/negatives_rng.h"
#include "ops/cpu/activation.h"
#include "ops/cpu/cast.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/l2norm.h"
#include "ops/cpu/layernorm.h"
#include "ops/cpu/optimizer.h"
#include "ops/cpu/retrieval_rank.h"
#include "ops/cpu/sampled_softmax.h"
#include "ops/cuda/activation.h"
#include "ops/cuda/cast.h"
#include "ops/cuda/cublaslt_plans.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/l2norm.h"
#include "ops/cuda/layernorm.h"
#include "ops/cuda/optimizer.h"
#include "ops/cuda/retrieval_rank.h"
#include "ops/cuda/sampled_softmax.h"
#include "ops/cuda_runtime_state.h"
#include "ops/negatives_gpu.h"

namespace hstu::test {
namespace {

constexpr double kFwd = 2.0;  // m of the low-precision rule, forward outputs
constexpr double kBwd = 5.0;  // backward outputs (more rounded intermediates upstream)

enum class Op {
  kGemm,
  kBiasGrad,
  kLayerNorm,
  kLnMulDropout,
  kDropout,
  kActivation,
  kActHeads,
  kEmbedding,
  kTouchedRows,
  kSparseOpt,
  kL2Norm,
  kSampledSoftmax,
  kNegatives,
  kDenseOpt,
  kCast,
  kRetrievalRank,
  kRetrievalRankCounts,
};

// One row of the table. Fields an op does not use keep their defaults.
struct Case {
  std::string name;
  Op op = Op::kGemm;
  int64_t m = 0, n = 0, k = 0;  // op shape (rows, cols, inner / table rows / negatives / heads)
  DType dtype = DType::kBF16;   // GPU activation dtype (inputs; outputs too unless `out`)
  DType out = DType::kBF16;     // output dtype where the op allows a different one
  int64_t pad = 0;              // > 0: inputs and outputs are strided column views
  int64_t stride = 0;           // kActHeads: head stride of y / dy (0: width rounded up to 8)
  bool a = false, b = false;    // op flags (GEMM: trans_a/trans_b; LN: affine; ...)
  bool acc = false;             // accumulate / beta = 1
  float p = 0.0f;               // dropout probability
  int variant = 0;              // op-specific choice (activation, optimiser kind, bias dtype)
  bool det = true;              // ctx.deterministic
  double f32_rtol = 1e-5;       // fp32 outputs: max|gpu - ref| <= f32_rtol * max|ref|
  std::string why;              // the reason for the tolerance
};

// gtest prints a case by its name (in failure lists and --gtest_list_tests).
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

// ---- helpers --------------------------------------------------------------------------------

using gpu::bytes_of;
using gpu::check_exact;
using gpu::dev;
using gpu::is16;
using gpu::out_dev;
using gpu::rnd;

Tensor copy_host(const Tensor& t) {
  return clone(t);
}

// The comparison rule of the file header for a device output against the f32 reference.
// `got` is the host copy of a device output of dtype `dt`.
void check_host(const Tensor& got, DType dt, const Tensor& ref, double m, const Case& c,
                const std::string& what) {
  const std::string label = c.name + " " + what + " (" + c.why + ")";
  const double scale = std::max(max_abs(ref), 1e-30);
  if (is16(dt)) {
    Tensor naive = clone(ref);
    gpu::round_host(naive, dt);
    gpu::expect_lowp_close(got, ref, naive, m, 1e-6 * scale, label);
  } else {
    const double err = max_abs_diff(got, ref);
    EXPECT_LE(err, c.f32_rtol * scale) << label << ": max|gpu - ref| = " << err
                                       << ", max|ref| = " << scale << ", seed " << test_seed();
  }
}
void check(const Tensor& dev_out, const Tensor& ref, double m, const Case& c,
           const std::string& what) {
  gpu::sync();
  check_host(gpu::to_host(dev_out), dev_out.dtype, ref, m, c, what);
}

Ctx cpu() {
  return cpu_ctx();
}

// ---- runners --------------------------------------------------------------------------------

void run_gemm(const Case& c) {
  const int64_t m = c.m, n = c.n, k = c.k;
  GemmDesc desc;
  desc.trans_a = c.a, desc.trans_b = c.b;
  desc.beta = c.acc ? 1.0f : 0.0f;
  const Tensor a = c.a ? rnd({k, m}, c.dtype) : rnd({m, k}, c.dtype);
  const Tensor b = c.b ? rnd({n, k}, c.dtype) : rnd({k, n}, c.dtype);
  const Tensor c0 = rnd({m, n}, c.out);
  const DType bias_dt = c.variant == 2 ? DType::kF32 : c.out;
  const Tensor bias = c.variant ? rnd({n}, bias_dt) : Tensor();
  Tensor ref = copy_host(c0);
  Ctx h = cpu();
  cpu::gemm(h, desc, a, b, ref, bias);

  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor out = c.acc ? dev(c0, c.out, c.pad) : out_dev(c.out, {m, n}, c.pad);
  cuda::gemm(g, desc, dev(a, c.dtype, c.pad), dev(b, c.dtype), out,
             c.variant ? dev(bias, bias_dt) : Tensor());
  // An f32 bias with a 16-bit C may need the separate bias kernel: two roundings.
  check(out, ref, c.variant == 2 ? 3.0 : kFwd, c, "C");
}

void run_bias_grad(const Case& c) {
  const Tensor dy = rnd({c.m, c.n}, c.dtype);
  const Tensor db0 = rnd({c.n}, DType::kF32);
  Tensor ref = copy_host(db0);
  Ctx h = cpu();
  cpu::bias_grad(h, dy, ref, c.acc);
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor db = c.acc ? dev(db0, DType::kF32) : out_dev(DType::kF32, {c.n});
  cuda::bias_grad(g, dev(dy, c.dtype, c.pad), db, c.acc);
  check(db, ref, kBwd, c, "db");
}

void run_layernorm(const Case& c) {
  const int64_t t = c.m, d = c.n;
  const float eps = 1e-5f;
  const Tensor x = rnd({t, d}, c.dtype, -2.0, 3.0);  // off-centre: exercises the mean shift
  const Tensor w = c.a ? rnd({d}, DType::kF32, 0.5, 1.5) : Tensor();
  const Tensor b = c.a ? rnd({d}, DType::kF32) : Tensor();
  Tensor y = alloc(DType::kF32, {t, d}), mean = alloc(DType::kF32, {t}),
         rstd = alloc(DType::kF32, {t});
  Ctx h = cpu();
  cpu::layernorm_fwd(h, x, w, b, eps, y, mean, rstd);

  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor xd = dev(x, c.dtype, c.pad);
  const Tensor wd = c.a ? dev(w, DType::kF32) : Tensor(), bd = c.a ? dev(b, DType::kF32) : Tensor();
  const Tensor yd = out_dev(c.out, {t, d}, c.pad);
  const Tensor md = out_dev(DType::kF32, {t}), rd = out_dev(DType::kF32, {t});
  cuda::layernorm_fwd(g, xd, wd, bd, eps, yd, md, rd);
  check(yd, y, kFwd, c, "y");
  check(md, mean, kFwd, c, "mean");
  check(rd, rstd, kFwd, c, "rstd");

  // Backward from the CPU's statistics (both sides use the same saved values).
  const Tensor dy = rnd({t, d}, c.dtype);
  const Tensor dx0 = rnd({t, d}, c.dtype);
  Tensor dx = copy_host(dx0);
  const Tensor dw0 = rnd({d}, DType::kF32), db0 = rnd({d}, DType::kF32);
  Tensor dw = c.a ? copy_host(dw0) : Tensor(), db = c.a ? copy_host(db0) : Tensor();
  cpu::layernorm_bwd(h, x, w, mean, rstd, dy, dx, c.acc, dw, db);
  const Tensor dxd = c.acc ? dev(dx0, c.dtype, c.pad) : out_dev(c.dtype, {t, d}, c.pad);
  const Tensor dwd = c.a ? dev(dw0, DType::kF32) : Tensor(),
               dbd = c.a ? dev(db0, DType::kF32) : Tensor();
  cuda::layernorm_bwd(g, xd, wd, dev(mean, DType::kF32), dev(rstd, DType::kF32),
                      dev(dy, c.dtype, c.pad), dxd, c.acc, dwd, dbd);
  check(dxd, dx, kBwd, c, "dx");
  if (c.a) {
    check(dwd, dw, kBwd, c, "dw");
    check(dbd, db, kBwd, c, "db");
  }
}

// Expects exactly the elements dropout_keep drops to be zero in the device output.
void check_mask(const Tensor& dev_out, const DropoutSpec& d, const std::string& what) {
  gpu::sync();
  const Tensor got = gpu::to_host(dev_out);
  const int64_t cols = got.row_elems();
  int64_t bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const int64_t r = i / cols, col = i % cols;
    const bool kept = dropout_keep(d.seed, d.offset, static_cast<uint64_t>(r * cols + col), d.p);
    if (kept != (get(got, i) != 0.0) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: gpu " << get(got, i) << ", mask keeps " << kept;
  }
  EXPECT_EQ(bad, 0) << what << ": dropout mask differs from dropout_keep in " << bad << " places";
}

// The fused op on both backends; with dropout the forwards keep their decisions as bits (equal
// word for word), and the GPU backward that reads them equals the one that draws them again,
// bit for bit (both against the CPU's).
void run_ln_mul_dropout(const Case& c) {
  const int64_t t = c.m, e = c.n;
  const float eps = 1e-6f;
  const DropoutSpec drop{c.p, 1234567ull + static_cast<uint64_t>(t), 77};
  const Tensor o = rnd({t, e}, c.dtype), u = rnd({t, e}, c.dtype, 0.5, 1.5);
  const Tensor w = c.a ? rnd({e}, DType::kF32, 0.5, 1.5) : Tensor();
  const Tensor b = c.a ? rnd({e}, DType::kF32) : Tensor();
  Tensor y = alloc(DType::kF32, {t, e}), mean = alloc(DType::kF32, {t}),
         rstd = alloc(DType::kF32, {t});
  const bool kept = c.p > 0;
  const Tensor keep = kept ? alloc(DType::kI32, {t, dropout_keep_words(e)}) : Tensor();
  Ctx h = cpu();
  cpu::ln_mul_dropout_fwd(h, o, u, w, b, eps, drop, keep, y, mean, rstd);
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor od = dev(o, c.dtype), ud = dev(u, c.dtype, c.pad);
  const Tensor wd = c.a ? dev(w, DType::kF32) : Tensor(), bd = c.a ? dev(b, DType::kF32) : Tensor();
  const Tensor yd = out_dev(c.dtype, {t, e});
  const Tensor md = out_dev(DType::kF32, {t}), rd = out_dev(DType::kF32, {t});
  const Tensor keepd = kept ? out_dev(DType::kI32, {t, dropout_keep_words(e)}) : Tensor();
  cuda::ln_mul_dropout_fwd(g, od, ud, wd, bd, eps, drop, keepd, yd, md, rd);
  check(yd, y, kFwd, c, "y");
  check(md, mean, kFwd, c, "mean");
  check(rd, rstd, kFwd, c, "rstd");
  if (kept) {
    check_mask(yd, drop, c.name + " y mask");
    gpu::check_exact(keepd, keep, c.name + " keep bits");
  }

  const Tensor dy = rnd({t, e}, c.dtype);
  Tensor do_ = alloc(DType::kF32, {t, e}), du = alloc(DType::kF32, {t, e});
  const Tensor dw0 = rnd({e}, DType::kF32), db0 = rnd({e}, DType::kF32);
  Tensor dw = c.a ? copy_host(dw0) : Tensor(), db = c.a ? copy_host(db0) : Tensor();
  cpu::ln_mul_dropout_bwd(h, o, u, w, b, mean, rstd, drop, keep, dy, do_, du, dw, db);
  const Tensor dyd = dev(dy, c.dtype), meand = dev(mean, DType::kF32),
               rstdd = dev(rstd, DType::kF32);
  std::vector<std::vector<unsigned char>> runs[2];  // [read bits, draw again][do, du, dw, db]
  for (int run = 0; run < (kept ? 2 : 1); ++run) {
    const Tensor dod = out_dev(c.dtype, {t, e}), dud = out_dev(c.dtype, {t, e}, c.pad);
    const Tensor dwd = c.a ? dev(dw0, DType::kF32) : Tensor(),
                 dbd = c.a ? dev(db0, DType::kF32) : Tensor();
    cuda::ln_mul_dropout_bwd(g, od, ud, wd, bd, meand, rstdd, drop, run == 0 ? keepd : Tensor(),
                             dyd, dod, dud, dwd, dbd);
    const std::string how = run == 0 ? "" : " (mask drawn again)";
    check(dod, do_, kBwd, c, "do" + how);
    check(dud, du, kBwd, c, "du" + how);
    if (c.p > 0) check_mask(dud, drop, c.name + " du mask" + how);
    if (c.a) {
      check(dwd, dw, kBwd, c, "dw" + how);
      check(dbd, db, kBwd, c, "db" + how);
    }
    for (const Tensor* r : {&dod, &dud, &dwd, &dbd}) runs[run].push_back(gpu::bytes_of(*r));
  }
  if (!kept) return;
  for (size_t k = 0; k < runs[0].size(); ++k)
    EXPECT_TRUE(runs[0][k] == runs[1][k])
        << c.name << ": backward output " << k << " differs between the kept and the drawn mask";
}

void run_dropout(const Case& c) {
  const DropoutSpec drop{c.p, 99ull + static_cast<uint64_t>(c.m), 4096};
  const Tensor x = rnd({c.m, c.n}, c.dtype, 0.5, 1.5);  // never zero: zeros are the mask
  Tensor y = alloc(DType::kF32, {c.m, c.n});
  Ctx h = cpu();
  cpu::dropout_fwd(h, x, drop, y);
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor xd = dev(x, c.dtype, c.pad);
  const Tensor yd = c.acc ? xd : out_dev(c.dtype, {c.m, c.n}, c.pad);  // acc: in place
  cuda::dropout_fwd(g, xd, drop, yd);
  check(yd, y, kFwd, c, "y");
  check_mask(yd, drop, c.name + " mask");
  Tensor dx = alloc(DType::kF32, {c.m, c.n});
  cpu::dropout_bwd(h, x, drop, dx);
  const Tensor dxd = out_dev(c.dtype, {c.m, c.n});
  cuda::dropout_bwd(g, dev(x, c.dtype, c.pad), drop, dxd);
  check(dxd, dx, kBwd, c, "dx");
}

void run_activation(const Case& c) {
  const Activation act = static_cast<Activation>(c.variant);
  const Tensor x = rnd({c.m, c.n}, c.dtype, -4.0, 4.0);
  Tensor y = alloc(DType::kF32, {c.m, c.n});
  Ctx h = cpu();
  cpu::activation_fwd(h, act, x, y);
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor xd = dev(x, c.dtype, c.pad);
  const Tensor yd = out_dev(c.out, {c.m, c.n}, c.pad);
  cuda::activation_fwd(g, act, xd, yd);
  check(yd, y, kFwd, c, "y");
  const Tensor dy = rnd({c.m, c.n}, c.dtype);
  Tensor dx = alloc(DType::kF32, {c.m, c.n});
  cpu::activation_bwd(h, act, x, dy, dx);
  const Tensor dyd = dev(dy, c.dtype, c.pad);
  cuda::activation_bwd(g, act, xd, dyd, dyd);  // in place: dx aliases dy
  check(dyd, dx, kBwd, c, "dx");
  if (c.k == 0) return;
  // Head structure (the layer's SiLU into 16-byte-aligned heads): c.k heads of width n / k; y and
  // dy padded to a stride of 8 elements (padding NaN: never read, never written), x and dx dense.
  const int64_t heads = c.k, w = c.n / heads, stride = (w + 7) / 8 * 8;
  const Tensor yp = out_dev(c.out, {c.m, heads * stride});
  cuda::activation_fwd(g, act, xd, yp, {heads, w});
  gpu::sync();
  check_host(unpad_heads(gpu::to_host(yp), heads, w, "y"), c.out, y, kFwd, c, "y (heads)");
  Tensor dyp = alloc(DType::kF32, {c.m, heads * stride});
  poison(dyp);
  for (int64_t t = 0; t < c.m; ++t)
    for (int64_t i = 0; i < c.n; ++i)
      set(dyp, t * heads * stride + (i / w) * stride + i % w, get(dy, t * c.n + i));
  const Tensor dxd = out_dev(c.dtype, {c.m, c.n});
  cuda::activation_bwd(g, act, xd, gpu::to_device(dyp, c.dtype), dxd, {heads, w});
  check(dxd, dx, kBwd, c, "dx (heads)");
}

// The HSTU layer's head layouts in device buffers [m, off + heads * stride]: a view of `heads`
// heads of `stride` columns from column `off`, of which the first `width` hold values; the other
// columns hold a fill value (NaN: unwritten outputs; a number where act(NaN) = NaN would hide an
// in-place call writing them).
struct HeadLayout {
  int64_t off = 0, heads = 1, width = 0, stride = 0;
  int64_t cols() const { return off + heads * stride; }
};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// The buffer, with `vals` (host [m, heads * width]) in its heads when given.
Tensor head_buffer(DType dt, int64_t m, const HeadLayout& l, const Tensor* vals,
                   double fill = kNaN) {
  Tensor host = alloc(DType::kF32, {m, l.cols()});
  for (int64_t i = 0; i < host.numel(); ++i) set(host, i, fill);
  const int64_t n = l.heads * l.width;
  if (vals != nullptr)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < n; ++i)
        set(host, r * l.cols() + l.off + i / l.width * l.stride + i % l.width,
            get(*vals, r * n + i));
  return gpu::to_device(host, dt);
}
Tensor head_view(const Tensor& buf, const HeadLayout& l) {
  return buf.cols(l.off, l.cols());
}
// Every element of the device buffer: `ref` (host [m, heads * width]) inside the heads by the
// file's tolerance rule, still `fill` everywhere else (head padding, the columns before `off`).
void check_heads(const Tensor& buf, const HeadLayout& l, double fill, const Tensor& ref, double m,
                 const Case& c, const std::string& what) {
  gpu::sync();
  const Tensor got = gpu::to_host(buf);
  const int64_t rows = got.dim(0), n = l.heads * l.width;
  Tensor inside = alloc(DType::kF32, {rows, n});
  int64_t written = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t col = 0; col < l.cols(); ++col) {
      const double v = get(got, r * l.cols() + col);
      const int64_t hc = col - l.off, h = hc / l.stride, e = hc % l.stride;
      if (hc >= 0 && e < l.width)
        set(inside, r * n + h * l.width + e, v);
      else if (!(std::isnan(fill) ? std::isnan(v) : v == fill) && ++written <= 5)
        ADD_FAILURE() << c.name << " " << what << ": row " << r << " column " << col
                      << " lies outside the heads and was written (" << v << ")";
    }
  EXPECT_EQ(written, 0) << c.name << " " << what << ": elements outside the heads written";
  check_host(inside, buf.dtype, ref, m, c, what);
}

// Head-structured activations in the layer's layouts (the staged kernel: widths that are not
// multiples of 8, unaligned views): x and dx dense [m, k heads x n / k] at column `pad` of
// their buffers (the layer's z.cols(hd, 4 hd)), y and dy at head stride `stride` from column
// round8(pad) (uvqk's padded v | q | k). k = 0: a plain call, one head with y / dy at their own
// pitch. c.a: in place (y = x, dx = dy), both in the padded layout with -3 in the padding (a
// value every activation and gradient changes). x in c.dtype, y / dy / dx in c.out.
void run_act_heads(const Case& c) {
  const Activation act = static_cast<Activation>(c.variant);
  const bool plain = c.k == 0;
  const int64_t heads = plain ? 1 : c.k, w = c.n / heads;
  const ActHeads hs = plain ? ActHeads{} : ActHeads{heads, w};
  const HeadLayout dense{c.pad, heads, w, w};
  const HeadLayout padded{(c.pad + 7) / 8 * 8, heads, w,
                          plain ? w : (c.stride > 0 ? c.stride : (w + 7) / 8 * 8)};
  const Tensor x = rnd({c.m, c.n}, c.dtype, -4.0, 4.0), dy = rnd({c.m, c.n}, c.out);
  Tensor y = alloc(DType::kF32, {c.m, c.n}), dx = alloc(DType::kF32, {c.m, c.n});
  Ctx h = cpu();
  cpu::activation_fwd(h, act, x, y);
  cpu::activation_bwd(h, act, x, dy, dx);
  Ctx g = gpu::cuda_ctx(c.det);

  const double fill = c.a ? -3.0 : kNaN;  // of the outputs' padding
  const HeadLayout& xl = c.a ? padded : dense;
  const Tensor xbuf = head_buffer(c.dtype, c.m, xl, &x, fill);
  const Tensor ybuf = c.a ? xbuf : head_buffer(c.out, c.m, padded, nullptr);
  cuda::activation_fwd(g, act, head_view(xbuf, xl), head_view(ybuf, padded), hs);
  check_heads(ybuf, padded, fill, y, kFwd, c, "y");

  const Tensor xd = head_view(head_buffer(c.dtype, c.m, dense, &x), dense);
  const Tensor dybuf = head_buffer(c.out, c.m, padded, &dy, fill);
  const HeadLayout& dxl = c.a ? padded : dense;
  const Tensor dxbuf = c.a ? dybuf : head_buffer(c.out, c.m, dense, nullptr);
  cuda::activation_bwd(g, act, xd, head_view(dybuf, padded), head_view(dxbuf, dxl), hs);
  check_heads(dxbuf, dxl, fill, dx, kBwd, c, "dx");
}

void run_embedding(const Case& c) {
  const int64_t t = c.m, d = c.n, v = c.k, npos = 17;
  const float scale = std::sqrt(static_cast<float>(d));
  const Tensor table = rnd({v, d}, DType::kF32), pos = rnd({npos, d}, DType::kF32);
  Tensor ids = alloc(DType::kI32, {t}), positions = alloc(DType::kI32, {t});
  fill_int(ids, 0, v);
  fill_int(positions, 0, npos);
  const bool with_pos = c.a;
  Tensor out = alloc(DType::kF32, {t, d});
  Ctx h = cpu();
  cpu::embedding_fwd(h, table, ids, scale, with_pos ? pos : Tensor(),
                     with_pos ? positions : Tensor(), out);
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor idd = dev(ids, DType::kI32), pd = dev(positions, DType::kI32);
  const Tensor outd = out_dev(c.out, {t, d}, c.pad);
  cuda::embedding_fwd(g, dev(table, DType::kF32), idd, scale,
                      with_pos ? dev(pos, DType::kF32) : Tensor(), with_pos ? pd : Tensor(), outd);
  check(outd, out, kFwd, c, "out");

  const Tensor dout = rnd({t, d}, c.out);
  const Tensor dt0 = rnd({v, d}, DType::kF32), dp0 = rnd({npos, d}, DType::kF32);
  Tensor dt = copy_host(dt0), dp = copy_host(dp0), touched = alloc(DType::kU8, {v});
  fill_value(touched, 0);
  cpu::embedding_bwd(h, dout, ids, scale, dt, touched, with_pos ? positions : Tensor(),
                     with_pos ? dp : Tensor());
  const Tensor doutd = dev(dout, c.out, c.pad);
  const auto gpu_bwd = [&](Tensor& dtd, Tensor& dpd, Tensor& td) {
    dtd = dev(dt0, DType::kF32);
    dpd = dev(dp0, DType::kF32);
    Tensor zeros = alloc(DType::kU8, {v});
    fill_value(zeros, 0);
    td = dev(zeros, DType::kU8);
    cuda::embedding_bwd(g, doutd, idd, scale, dtd, td, with_pos ? pd : Tensor(),
                        with_pos ? dpd : Tensor());
  };
  Tensor dtd, dpd, td;
  gpu_bwd(dtd, dpd, td);
  check(dtd, dt, kBwd, c, "d_table");
  if (with_pos) check(dpd, dp, kBwd, c, "d_pos");
  check_exact(td, touched, c.name + " touched");
  if (c.det) {  // bit-reproducible: a second run gives the same bytes
    Tensor dtd2, dpd2, td2;
    gpu_bwd(dtd2, dpd2, td2);
    EXPECT_TRUE(bytes_of(dtd) == bytes_of(dtd2)) << c.name << ": deterministic d_table differs";
    if (with_pos) {
      EXPECT_TRUE(bytes_of(dpd) == bytes_of(dpd2)) << c.name << ": deterministic d_pos differs";
    }
  }
}

void run_touched_rows(const Case& c) {
  const int64_t v = c.m;
  Tensor touched = alloc(DType::kU8, {v});
  fill_int(touched, 0, 2);
  const Tensor td = dev(touched, DType::kU8);
  Tensor rows = alloc(DType::kI32, {v});
  Ctx h = cpu();
  Tensor count = alloc(DType::kI32, {1});
  cpu::collect_touched_rows(h, copy_host(touched), rows, count);
  const int64_t n = *count.as<int32_t>();
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor rd = out_dev(DType::kI32, {v}), cd = out_dev(DType::kI32, {1});
  cuda::collect_touched_rows(g, td, rd, cd);
  int32_t nd = -1;
  copy_bytes(&nd, Device::kCPU, cd.data, cd.device, sizeof nd);
  ASSERT_EQ(nd, n) << c.name << ": touched row count";
  check_exact(rd.rows(0, n), rows.rows(0, n), c.name + " rows");
  Tensor zeros = alloc(DType::kU8, {v});
  fill_value(zeros, 0);
  check_exact(td, zeros, c.name + " touched cleared");
}

void run_sparse_opt(const Case& c) {
  const int64_t v = c.m, d = c.n;
  SparseOptimizerSpec spec;
  spec.kind = static_cast<SparseOptimizerSpec::Kind>(c.variant);
  spec.lr = 0.05f;
  spec.step = 7;
  const Tensor table0 = rnd({v, d}, DType::kF32), grad0 = rnd({v, d}, DType::kF32);
  const Tensor m0 = spec.kind == SparseOptimizerSpec::kRowWiseAdagrad ? rnd({v}, DType::kF32, 0, 1)
                                                                      : rnd({v, d}, DType::kF32);
  const Tensor v0 = rnd({v, d}, DType::kF32, 0.0, 1.0);
  std::vector<int32_t> list;
  for (int32_t r = 0; r < v; ++r)
    if (r % 3 != 1) list.push_back(r);
  const int64_t n = static_cast<int64_t>(list.size());
  Tensor rows = alloc(DType::kI32, {n}), count = alloc(DType::kI32, {1});
  for (int64_t i = 0; i < n; ++i) set(rows, i, list[i]);
  *count.as<int32_t>() = static_cast<int32_t>(n);
  Tensor table = copy_host(table0), grad = copy_host(grad0), m = copy_host(m0), vv = copy_host(v0);
  Ctx h = cpu();
  const bool adam = spec.kind == SparseOptimizerSpec::kAdam;
  const bool ada = spec.kind == SparseOptimizerSpec::kRowWiseAdagrad;
  cpu::sparse_optimizer_step(h, spec, table, grad, rows, count, adam || ada ? m : Tensor(),
                             adam ? vv : Tensor());
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor td = dev(table0, DType::kF32), gd = dev(grad0, DType::kF32);
  const Tensor md = dev(m0, DType::kF32), vd = dev(v0, DType::kF32);
  cuda::sparse_optimizer_step(g, spec, td, gd, dev(rows, DType::kI32), dev(count, DType::kI32),
                              adam || ada ? md : Tensor(), adam ? vd : Tensor());
  check(td, table, kBwd, c, "table");
  check_exact(gd, grad, c.name + " grad (zeroed rows, others untouched)");
  if (adam || ada) check(md, m, kBwd, c, "m");
  if (adam) check(vd, vv, kBwd, c, "v");
}

void run_l2norm(const Case& c) {
  const int64_t t = c.m, d = c.n;
  // eps is large so a clamped row (row 0, norm ~0.05) keeps gradients of the usual scale.
  const float eps = 0.5f;
  Tensor x = rnd({t, d}, c.dtype);
  for (int64_t j = 0; j < d; ++j) set(x, j, gpu::round_to(c.dtype, 0.01f * get(x, j)));
  Tensor y = alloc(DType::kF32, {t, d}), norms = alloc(DType::kF32, {t});
  Ctx h = cpu();
  cpu::l2norm_fwd(h, x, eps, y, norms);
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor yd = out_dev(c.out, {t, d}, c.pad), nd = out_dev(DType::kF32, {t});
  cuda::l2norm_fwd(g, dev(x, c.dtype, c.pad), eps, yd, nd);
  check(yd, y, kFwd, c, "y");
  check(nd, norms, kFwd, c, "norms");
  // Backward from the CPU's y (in the GPU's dtype) and norms.
  gpu::round_host(y, c.out);
  const Tensor dy = rnd({t, d}, c.dtype), dx0 = rnd({t, d}, c.dtype);
  Tensor dx = copy_host(dx0);
  cpu::l2norm_bwd(h, y, norms, eps, dy, dx, c.acc);
  const Tensor dxd = c.acc ? dev(dx0, c.dtype, c.pad) : out_dev(c.dtype, {t, d}, c.pad);
  cuda::l2norm_bwd(g, dev(y, c.out), dev(norms, DType::kF32), eps, dev(dy, c.dtype, c.pad), dxd,
                   c.acc);
  check(dxd, dx, kBwd, c, "dx");
}

void run_sampled_softmax(const Case& c) {
  const int64_t t = c.m, d = c.n, r = c.k, v = 97;
  SampledSoftmaxSpec spec;
  spec.temperature = c.p > 0 ? c.p : 0.05f;  // p > 0: a sharper softmax (see the cases)
  spec.eps = 0.5f;  // large, so the clamped row 5 (norm ~0.1) has gradients of the usual scale
  spec.loss_scale = 1.0 / static_cast<double>(t);
  spec.candidate_tile = c.variant;  // > 0: the CUDA kernel's tiled path at a small R
  Tensor q = rnd({t, d}, DType::kF32);
  for (int64_t i = 0; i < t; ++i) {  // unit rows, as the L2-normalised encoder output
    double s = 0;
    for (int64_t j = 0; j < d; ++j) s += get(q, i * d + j) * get(q, i * d + j);
    for (int64_t j = 0; j < d; ++j) set(q, i * d + j, get(q, i * d + j) / std::sqrt(s));
  }
  gpu::round_host(q, c.dtype);
  Tensor table = rnd({v, d}, DType::kF32, -0.25, 0.25);  // row norms ~1 for d ~ 48
  for (int64_t j = 0; j < d; ++j) set(table, 5 * d + j, 0.1 * get(table, 5 * d + j));
  // c.b: the kernels read the table's copy in q's dtype (RetrievalArgs.loss_rows_dtype = auto),
  // against the CPU on the same rounded values.
  const DType table_dtype = c.b ? c.dtype : DType::kF32;
  gpu::round_host(table, table_dtype);
  Tensor targets = alloc(DType::kI32, {t}), neg = alloc(DType::kI32, {t, r});
  fill_int(targets, 1, v);
  fill_int(neg, 1, v);
  for (int64_t i = 0; i < t; i += 5) set(targets, i, 0);                          // unsupervised
  for (int64_t i = 1; i < t; i += 3) set(neg, i * r + (i % r), get(targets, i));  // collisions
  set(neg, r, 5);  // token 1 (supervised) sees the clamped row
  Tensor loss = alloc(DType::kF64, {1}), dq = alloc(DType::kF32, {t, d});
  const Tensor dt0 = rnd({v, d}, DType::kF32);
  Tensor dt = copy_host(dt0), touched = alloc(DType::kU8, {v});
  fill_value(touched, 0);
  Ctx h = cpu();
  cpu::sampled_softmax(h, spec, q, targets, neg, table, loss, dq, dt, touched);

  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor qd = dev(q, c.dtype, c.pad), tgd = dev(targets, DType::kI32);
  const Tensor negd = dev(neg, DType::kI32), tabd = dev(table, table_dtype);
  const auto gpu_run = [&](Tensor& lossd, Tensor& dqd, Tensor& dtd, Tensor& td) {
    lossd = out_dev(DType::kF64, {1});
    dqd = out_dev(c.dtype, {t, d}, c.pad);
    dtd = dev(dt0, DType::kF32);
    Tensor zeros = alloc(DType::kU8, {v});
    fill_value(zeros, 0);
    td = dev(zeros, DType::kU8);
    cuda::sampled_softmax(g, spec, qd, tgd, negd, tabd, lossd, dqd, dtd, td);
  };
  Tensor lossd, dqd, dtd, td;
  gpu_run(lossd, dqd, dtd, td);
  check(lossd, loss, kFwd, c, "loss");
  check(dqd, dq, kBwd, c, "dq");
  check(dtd, dt, kBwd, c, "d_table");
  check_exact(td, touched, c.name + " touched");
  if (c.det) {
    Tensor l2, q2, dt2, t2;
    gpu_run(l2, q2, dt2, t2);
    EXPECT_TRUE(bytes_of(dtd) == bytes_of(dt2)) << c.name << ": deterministic d_table differs";
    EXPECT_TRUE(bytes_of(lossd) == bytes_of(l2)) << c.name << ": loss differs between runs";
  }
  // Forward only (no dq): the same loss.
  const Tensor lf = out_dev(DType::kF64, {1});
  cuda::sampled_softmax(g, spec, qd, tgd, negd, tabd, lf, Tensor(), Tensor(), Tensor());
  check(lf, loss, kFwd, c, "loss (forward only)");
}

// variant 2: RetrievalArgs.num_negatives = -1, R = the batch's queries, written into the [T, R]
// prefix of a [T, T] capacity buffer (model/batch_tensors.h: negatives_view), against the CPU
// sampler the CPU step uses.
void run_negatives_per_query(const Case& c) {
  const int64_t t = c.m, items = c.k;
  const uint64_t seed = 0x5eedull + static_cast<uint64_t>(t), step = 777;
  Ctx g = gpu::cuda_ctx(c.det);
  SequenceBatch b;
  b.batch_size = 1;
  b.offsets = {0, static_cast<int32_t>(t)};
  Tensor targets = alloc(DType::kI32, {t});
  fill_int(targets, 0, items);  // zeros (unsupervised) and repeats
  for (int64_t i = 0; i < t; ++i) b.target_ids.push_back(static_cast<int32_t>(get(targets, i)));
  int64_t queries = 0;
  for (const int32_t id : b.target_ids) queries += id != 0;
  const int64_t r = negatives_per_query(-1, queries);
  ASSERT_GT(queries, 1);
  const std::vector<int32_t> want = sample_negatives("in_batch", b, items, r, seed, step);
  const Tensor cap = out_dev(DType::kI32, {t, t});
  const Tensor negd = cap.reshape({t * t}).rows(0, t * r).reshape({t, r});
  cuda::sample_in_batch_negatives(g, dev(targets, DType::kI32), seed, step, negd);
  Tensor wt = alloc(DType::kI32, {t, r});
  for (int64_t e = 0; e < t * r; ++e) set(wt, e, want[static_cast<size_t>(e)]);
  check_exact(negd, wt, c.name + " neg_ids");
}

void run_negatives(const Case& c) {
  if (c.variant == 2) return run_negatives_per_query(c);
  const int64_t t = c.m, r = c.n, items = c.k;
  const uint64_t seed = 0x5eedull + static_cast<uint64_t>(t), step = 12345;
  Ctx g = gpu::cuda_ctx(c.det);
  Tensor want = alloc(DType::kI32, {t, r});
  const Tensor negd = out_dev(DType::kI32, {t, r});
  if (c.variant == 0) {
    for (int64_t e = 0; e < t * r; ++e)
      set(want, e, uniform_negative(seed, step, static_cast<uint64_t>(e), items));
    cuda::sample_uniform_negatives(g, items, seed, step, negd);
  } else {
    Tensor targets = alloc(DType::kI32, {t});
    fill_int(targets, 0, items);  // zeros (unsupervised) and repeats
    std::vector<int32_t> pool;
    for (int64_t i = 0; i < t; ++i)
      if (get(targets, i) != 0) pool.push_back(static_cast<int32_t>(get(targets, i)));
    std::sort(pool.begin(), pool.end());
    pool.erase(std::unique(pool.begin(), pool.end()), pool.end());
    ASSERT_FALSE(pool.empty());
    for (int64_t e = 0; e < t * r; ++e)
      set(want, e,
          pool[in_batch_negative_index(seed, step, static_cast<uint64_t>(e),
                                       static_cast<uint32_t>(pool.size()))]);
    cuda::sample_in_batch_negatives(g, dev(targets, DType::kI32), seed, step, negd);
  }
  check_exact(negd, want, c.name + " neg_ids");
}

void run_dense_opt(const Case& c) {
  const int64_t n = c.m;
  DenseOptimizerSpec spec;
  spec.kind = static_cast<DenseOptimizerSpec::Kind>(c.variant);
  spec.lr = 0.01f;
  spec.weight_decay = 0.1f;
  spec.grad_scale = 0.5f;
  spec.step = 3;
  const Tensor p0 = rnd({n}, DType::kF32), g0 = rnd({n}, DType::kF32);
  const Tensor m0 = rnd({n}, DType::kF32), v0 = rnd({n}, DType::kF32, 0.0, 1.0);
  Tensor p = copy_host(p0), m = copy_host(m0), v = copy_host(v0);
  Ctx h = cpu();
  cpu::dense_optimizer_step(h, spec, p, g0, m, v);
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor pd = dev(p0, DType::kF32), md = dev(m0, DType::kF32), vd = dev(v0, DType::kF32);
  const Tensor gd = dev(g0, DType::kF32);
  cuda::dense_optimizer_step(g, spec, pd, gd, md, vd);
  check(pd, p, kBwd, c, "params");
  if (spec.kind != DenseOptimizerSpec::kSgd) {
    check(md, m, kBwd, c, "m");
    check(vd, v, kBwd, c, "v");
  }
  const double want = cpu::sum_squares(h, g0);
  const double got = cuda::sum_squares(g, gd);
  EXPECT_NEAR(got, want, 1e-12 * want) << c.name << ": sum_squares (f64 sums of the same squares)";
  EXPECT_EQ(got, cuda::sum_squares(g, gd)) << c.name << ": sum_squares not reproducible";

  // A second step clipped to 0.3 of the gradient norm, the norm read on the device.
  spec.step = 4;
  spec.clip_norm = 0.3 * std::sqrt(want);
  const Tensor sumsq_h = alloc(DType::kF64, {1}), sumsq_d = gpu::device_alloc(DType::kF64, {1});
  cpu::sum_squares_into(h, g0, sumsq_h);
  cuda::sum_squares_into(g, gd, sumsq_d);
  // Each backend reads the norm from its own memory.
  const auto on_cpu = [&] { spec.grad_sumsq = sumsq_h; };
  const auto on_gpu = [&] { spec.grad_sumsq = sumsq_d; };
  on_cpu();
  cpu::dense_optimizer_step(h, spec, p, g0, m, v);
  on_gpu();
  cuda::dense_optimizer_step(g, spec, pd, gd, md, vd);
  check(pd, p, kBwd, c, "params after a clipped step");
  if (spec.kind != DenseOptimizerSpec::kSgd) check(md, m, kBwd, c, "m after a clipped step");

  // A guarded step (TrainerArgs.nonfinite = "skip_step"): a NaN among the guard's values on the
  // device applies nothing; finite values apply the step as before.
  spec.step = 5;
  Tensor guard_h = alloc(DType::kF64, {2});
  guard_h.as<double>()[0] = 1.0;
  guard_h.as<double>()[1] = std::numeric_limits<double>::quiet_NaN();
  spec.skip_if_nonfinite = guard_h;
  const Tensor p_before = copy_host(p);
  on_cpu();
  cpu::dense_optimizer_step(h, spec, p, g0, m, v);
  EXPECT_EQ(max_abs_diff(p, p_before), 0.0) << c.name << ": a skipped CPU step moved the weights";
  spec.skip_if_nonfinite = dev(guard_h, DType::kF64);
  on_gpu();
  cuda::dense_optimizer_step(g, spec, pd, gd, md, vd);
  check(pd, p, kBwd, c, "params after a skipped step");
  guard_h.as<double>()[1] = 2.0;
  spec.skip_if_nonfinite = guard_h;
  on_cpu();
  cpu::dense_optimizer_step(h, spec, p, g0, m, v);
  spec.skip_if_nonfinite = dev(guard_h, DType::kF64);
  on_gpu();
  cuda::dense_optimizer_step(g, spec, pd, gd, md, vd);
  check(pd, p, kBwd, c, "params after a guarded finite step");
}

void run_cast(const Case& c) {
  // Random values plus the special cases of rounding: ties, overflow, subnormals, inf, NaN.
  Tensor src = rnd({c.m, c.n}, c.dtype, -3.0, 3.0);
  const float specials[] = {0.0f,      -0.0f,      1.0f + 0x1p-8f, 1.0f + 0x1p-11f,
                            65519.0f,  65520.0f,   70000.0f,       0x1p-20f,
                            -0x1p-25f, 0x1.8p-25f, 3.0e38f,        INFINITY,
                            -INFINITY, 1e-40f,     0x1.0101p0f,    -2.5e-3f};
  for (int64_t i = 0; i < std::min<int64_t>(16, src.numel()); ++i) set(src, i, specials[i]);
  set(src, std::min<int64_t>(16, src.numel() - 1), std::numeric_limits<float>::quiet_NaN());
  gpu::round_host(src, c.dtype);
  const DType dst_t = c.out;
  // CPU: the source in its own dtype (16-bit tensors hold raw bits), then the cast under test.
  Ctx h = cpu();
  Tensor hs = alloc(c.dtype, {c.m, c.n}), hd = alloc(dst_t, {c.m, c.n});
  cpu::cast(h, src, hs);  // exact: src is already representable in c.dtype
  cpu::cast(h, hs, hd);
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor sd = dev(src, c.dtype, c.pad);
  const Tensor dd = out_dev(dst_t, {c.m, c.n}, c.pad);
  cuda::cast(g, sd, dd);
  const std::vector<unsigned char> got = bytes_of(dd);
  const size_t es = dtype_size(dst_t);
  int64_t bad = 0;
  for (int64_t i = 0; i < c.m * c.n; ++i) {
    const unsigned char* want = static_cast<const unsigned char*>(hd.data) + i * es;
    const unsigned char* have = got.data() + i * es;
    const double wv = gpu::detail::decode(dst_t, want), hv = gpu::detail::decode(dst_t, have);
    const bool same = std::isnan(wv) ? std::isnan(hv) : std::memcmp(want, have, es) == 0;
    if (!same && ++bad <= 5)
      ADD_FAILURE() << c.name << "[" << i << "]: gpu " << hv << " vs cpu " << wv << " (source "
                    << get(src, i) << ")";
  }
  EXPECT_EQ(bad, 0) << c.name << ": CPU and GPU casts differ in " << bad << " elements";
}

// Inputs of the retrieval rank cases: multiples of 1/4 in [-1, 1], so every dot product is
// exact in fp32 (and bf16 holds the inputs exactly), scores tie often and both backends must
// apply the tie rule identically; a duplicated item, targets tied with it, histories holding the
// target and duplicate entries.
struct RankData {
  Tensor q, items, targets, offs, hids;
};

RankData rank_data(int64_t u, int64_t v, int64_t d) {
  RankData r;
  r.q = alloc(DType::kF32, {u, d});
  r.items = alloc(DType::kF32, {v, d});
  fill_int(r.q, -4, 5);
  fill_int(r.items, -4, 5);
  for (int64_t i = 0; i < r.q.numel(); ++i) set(r.q, i, get(r.q, i) / 4);
  for (int64_t i = 0; i < r.items.numel(); ++i) set(r.items, i, get(r.items, i) / 4);
  for (int64_t j = 0; j < d; ++j) set(r.items, 7 * d + j, get(r.items, 3 * d + j));  // a duplicate
  r.targets = alloc(DType::kI32, {u});
  fill_int(r.targets, 1, v);
  set(r.targets, 0, 3);  // item 7 ties with it and has the larger id: not above
  set(r.targets, 1, 7);  // item 3 ties with it and has the smaller id: above
  std::vector<int32_t> off{0}, hist;
  std::mt19937_64& gen = rng();
  for (int64_t i = 0; i < u; ++i) {
    const int len = static_cast<int>(gen() % 12);
    for (int j = 0; j < len; ++j) hist.push_back(static_cast<int32_t>(gen() % v));
    if (i % 4 == 0) hist.push_back(static_cast<int32_t>(get(r.targets, i)));  // target in history
    if (i % 5 == 0 && len > 0) hist.push_back(hist.back());                   // duplicate entry
    off.push_back(static_cast<int32_t>(hist.size()));
  }
  if (hist.empty()) hist.push_back(0);
  r.offs = alloc(DType::kI32, {u + 1});
  r.hids = alloc(DType::kI32, {static_cast<int64_t>(hist.size())});
  for (int64_t i = 0; i <= u; ++i) set(r.offs, i, off[i]);
  for (size_t i = 0; i < hist.size(); ++i) set(r.hids, static_cast<int64_t>(i), hist[i]);
  return r;
}

void run_retrieval_rank(const Case& c) {
  const int64_t u = c.m, v = c.n, d = c.k;
  const int32_t cap = 50;
  const RankData r = rank_data(u, v, d);
  Tensor ranks = alloc(DType::kI32, {u});
  Ctx h = cpu();
  cpu::retrieval_rank(h, r.q, r.items, r.targets, r.offs, r.hids, cap, ranks);
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor rd = out_dev(DType::kI32, {u});
  cuda::retrieval_rank(g, dev(r.q, c.dtype, c.pad), dev(r.items, c.dtype),
                       dev(r.targets, DType::kI32), dev(r.offs, DType::kI32),
                       dev(r.hids, DType::kI32), cap, rd);
  check_exact(rd, ranks, c.name + " ranks");
}

// retrieval_rank_counts over c.variant shards (ids dealt at random, row 0 in one of them): the
// CUDA counts equal the CPU counts exactly per shard, a NaN query gives the sentinel on both,
// and on the CPU 1 + the sum over the shards is the full-table rank.
void run_retrieval_rank_counts(const Case& c) {
  const int64_t u = c.m, v = c.n, d = c.k, w = c.variant;
  const int32_t cap = 50;
  const RankData r = rank_data(u, v, d);
  for (int64_t j = 0; j < d; ++j) set(r.q, 2 * d + j, std::nan(""));  // query 2: NaN target score
  Tensor ranks = alloc(DType::kI32, {u});
  Ctx h = cpu();
  cpu::retrieval_rank(h, r.q, r.items, r.targets, r.offs, r.hids, cap, ranks);
  Tensor trows = alloc(DType::kF32, {u, d});  // the targets' rows
  for (int64_t i = 0; i < u; ++i)
    for (int64_t j = 0; j < d; ++j)
      set(trows, i * d + j, get(r.items, int64_t(get(r.targets, i)) * d + j));
  std::vector<std::vector<int32_t>> shard_ids(static_cast<size_t>(w));
  std::mt19937_64& gen = rng();
  for (int32_t id = 0; id < v; ++id) shard_ids[gen() % static_cast<uint64_t>(w)].push_back(id);
  std::vector<int64_t> sum(static_cast<size_t>(u), 0);
  Ctx g = gpu::cuda_ctx(c.det);
  const Tensor qd = dev(r.q, c.dtype, c.pad), td = dev(trows, c.dtype);
  const Tensor tgd = dev(r.targets, DType::kI32), od = dev(r.offs, DType::kI32),
               hd = dev(r.hids, DType::kI32);
  for (int64_t s = 0; s < w; ++s) {
    const std::vector<int32_t>& ids = shard_ids[static_cast<size_t>(s)];
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n == 0) continue;
    Tensor rows = alloc(DType::kF32, {n, d}), idt = alloc(DType::kI32, {n});
    for (int64_t i = 0; i < n; ++i) {
      set(idt, i, ids[static_cast<size_t>(i)]);
      for (int64_t j = 0; j < d; ++j)
        set(rows, i * d + j, get(r.items, int64_t(ids[static_cast<size_t>(i)]) * d + j));
    }
    Tensor counts = alloc(DType::kI32, {u});
    cpu::retrieval_rank_counts(h, r.q, trows, r.targets, rows, idt, r.offs, r.hids, cap, counts);
    const Tensor cd = out_dev(DType::kI32, {u});
    cuda::retrieval_rank_counts(g, qd, td, tgd, dev(rows, c.dtype), dev(idt, DType::kI32), od, hd,
                                cap, cd);
    check_exact(cd, counts, c.name + " counts of shard " + std::to_string(s));
    for (int64_t i = 0; i < u; ++i) {
      const int64_t k = int64_t(get(counts, i));
      sum[static_cast<size_t>(i)] =
          k < 0 || sum[static_cast<size_t>(i)] < 0 ? -1 : sum[static_cast<size_t>(i)] + k;
    }
  }
  for (int64_t i = 0; i < u; ++i) {
    const int64_t k = sum[static_cast<size_t>(i)];
    const int64_t want = k < 0 ? cap + 2 : std::min<int64_t>(k, cap) + 1;
    EXPECT_EQ(want, int64_t(get(ranks, i))) << c.name << " user " << i;
  }
}

// ---- the table ------------------------------------------------------------------------------

std::vector<Case> cases() {
  std::vector<Case> t;
  const auto add = [&](Case c) { t.push_back(std::move(c)); };
  const DType bf = DType::kBF16, f16 = DType::kF16, f32 = DType::kF32;
  const std::string lowp = "m x naive bf16/fp16 rounding of the output";
  // clang-format off
  // GEMM: x @ W^T (+ bias) forward, dgrad, wgrad into fp32 with beta = 1; odd shapes; views.
  add({.name = "gemm_nt_bias_bf16", .op = Op::kGemm, .m = 128, .n = 96, .k = 64, .dtype = bf,
       .out = bf, .b = true, .variant = 1, .why = lowp});
  add({.name = "gemm_nt_f32bias_bf16", .op = Op::kGemm, .m = 64, .n = 40, .k = 32, .dtype = bf,
       .out = bf, .b = true, .variant = 2,
       .why = lowp + "; m = 3: an f32 bias may be added after a first rounding"});
  add({.name = "gemm_nn_strided_fp16", .op = Op::kGemm, .m = 70, .n = 48, .k = 56, .dtype = f16,
       .out = f16, .pad = 8, .why = lowp});
  add({.name = "gemm_tn_wgrad_acc_bf16_f32", .op = Op::kGemm, .m = 64, .n = 48, .k = 300,
       .dtype = bf, .out = f32, .a = true, .acc = true, .f32_rtol = 1e-5,
       .why = "fp32 accumulation order over K = 300: ~sqrt(K) 2^-24 |C| on each side"});
  // Token counts above 128 run on a plan built for their size bucket (gemm_size_bucket).
  add({.name = "gemm_nt_tokens_bias_bf16", .op = Op::kGemm, .m = 1001, .n = 100, .k = 50,
       .dtype = bf, .out = bf, .b = true, .variant = 1, .why = lowp + "; m in bucket 1024"});
  add({.name = "gemm_nn_tokens_odd_bf16", .op = Op::kGemm, .m = 333, .n = 50, .k = 100,
       .dtype = bf, .out = bf, .why = lowp + "; m in bucket 352"});
  add({.name = "gemm_odd_f32", .op = Op::kGemm, .m = 37, .n = 29, .k = 61, .dtype = f32, .out = f32,
       .b = true, .variant = 1, .f32_rtol = 5e-6,
       .why = "fp32 (no TF32) summation order over K = 61"});
  add({.name = "gemm_odd_bf16", .op = Op::kGemm, .m = 33, .n = 17, .k = 9, .dtype = bf, .out = bf,
       .why = lowp + " (odd leading dims: unaligned algorithms)"});
  add({.name = "gemm_tt_f32", .op = Op::kGemm, .m = 20, .n = 24, .k = 16, .dtype = f32, .out = f32,
       .a = true, .b = true, .f32_rtol = 2e-6, .why = "fp32 summation order"});

  add({.name = "bias_grad_bf16", .op = Op::kBiasGrad, .m = 1000, .n = 96, .dtype = bf,
       .f32_rtol = 1e-5, .why = "fp32 column sums of 1000 rows in another order"});
  add({.name = "bias_grad_acc_strided_f32", .op = Op::kBiasGrad, .m = 333, .n = 37, .dtype = f32,
       .pad = 3, .acc = true, .f32_rtol = 1e-5, .why = "fp32 column sums in another order"});

  // LayerNorm: aligned (vector path) and odd widths, affine or not, f32 -> bf16, strided views.
  add({.name = "layernorm_affine_bf16", .op = Op::kLayerNorm, .m = 200, .n = 256, .dtype = bf,
       .out = bf, .a = true, .f32_rtol = 2e-5,
       .why = lowp + "; f32 stats/dw/db: one-pass fp32 vs two-pass f64"});
  add({.name = "layernorm_plain_odd_f32", .op = Op::kLayerNorm, .m = 37, .n = 45, .dtype = f32,
       .out = f32, .acc = true, .f32_rtol = 2e-5,
       .why = "fp32 one-pass statistics vs the f64 two-pass reference"});
  add({.name = "layernorm_f32_to_bf16_strided", .op = Op::kLayerNorm, .m = 65, .n = 1024,
       .dtype = f32, .out = bf, .pad = 8, .a = true, .acc = true, .f32_rtol = 2e-5,
       .why = lowp + "; dx f32 vs f64"});
  // Short odd rows take the kernels' register path with 8 and 4 chunks per lane (layernorm.cu's
  // kC), more rows than one wave of warps, and the backward's short-row grid (<= 2 rows a warp).
  add({.name = "layernorm_short_c8_bf16", .op = Op::kLayerNorm, .m = 3000, .n = 250, .dtype = bf,
       .out = bf, .a = true, .acc = true, .f32_rtol = 2e-5,
       .why = lowp + "; f32 stats/dw/db: one-pass fp32 vs two-pass f64"});
  // 8-wide rows of 512 and 1000 (a partial last chunk) columns: the backward's register path
  // with 2 and 4 chunks a lane (kShortRowBwd; layernorm_wide_fp16: its loop form).
  add({.name = "layernorm_c4_partial_bf16", .op = Op::kLayerNorm, .m = 300, .n = 1000,
       .dtype = bf, .out = bf, .a = true, .acc = true, .f32_rtol = 2e-5,
       .why = lowp + "; f32 stats/dw/db: one-pass fp32 vs two-pass f64"});
  add({.name = "layernorm_c2_fp16", .op = Op::kLayerNorm, .m = 129, .n = 512, .dtype = f16,
       .out = f16, .a = true, .f32_rtol = 2e-5,
       .why = lowp + "; f32 stats/dw/db: one-pass fp32 vs two-pass f64"});
  add({.name = "layernorm_wide_fp16", .op = Op::kLayerNorm, .m = 9, .n = 7000, .dtype = f16,
       .out = f16, .a = true, .f32_rtol = 5e-5,
       .why = lowp + "; 7000-wide rows (opt-in shared memory for dw/db)"});

  add({.name = "ln_mul_dropout_p02_bf16", .op = Op::kLnMulDropout, .m = 150, .n = 128, .dtype = bf,
       .pad = 16, .a = true, .p = 0.2f, .f32_rtol = 2e-5, .why = lowp});
  add({.name = "ln_mul_dropout_p0_odd_f32", .op = Op::kLnMulDropout, .m = 33, .n = 50, .dtype = f32,
       .f32_rtol = 2e-5, .why = "fp32 vs the f64 reference"});
  // Short rows' dropout decisions drawn a row at a time (layernorm.cu's row_keep): rows whose
  // first element is not a multiple of 4 (n = 50), one to three rounds of Philox calls.
  add({.name = "ln_mul_dropout_short_c4_bf16", .op = Op::kLnMulDropout, .m = 20000, .n = 100,
       .dtype = bf, .pad = 6, .a = true, .p = 0.1f, .f32_rtol = 2e-5, .why = lowp});
  add({.name = "ln_mul_dropout_d50_p02_bf16", .op = Op::kLnMulDropout, .m = 5000, .n = 50,
       .dtype = bf, .pad = 14, .a = true, .p = 0.2f, .f32_rtol = 2e-5, .why = lowp});
  add({.name = "ln_mul_dropout_c8_p03_f32", .op = Op::kLnMulDropout, .m = 601, .n = 250,
       .dtype = f32, .a = true, .p = 0.3f, .f32_rtol = 2e-5, .why = "fp32 vs the f64 reference"});
  // 8-wide rows of 1024 and 384: the fused backward's register path with 4 and 2 chunks a lane.
  add({.name = "ln_mul_dropout_c4_p02_bf16", .op = Op::kLnMulDropout, .m = 300, .n = 1024,
       .dtype = bf, .a = true, .p = 0.2f, .f32_rtol = 2e-5, .why = lowp});
  // Rows enough for more blocks than fit the device at once (>= 132 SMs x 4 blocks x 6 warps):
  // the backward's grid rounded down to whole waves, each block more rows (plan_ln_bwd).
  add({.name = "layernorm_waves_bf16", .op = Op::kLayerNorm, .m = 9000, .n = 1024, .dtype = bf,
       .out = bf, .a = true, .acc = true, .f32_rtol = 2e-5,
       .why = lowp + "; f32 stats/dw/db: one-pass fp32 vs two-pass f64"});
  add({.name = "ln_mul_dropout_waves_p02_bf16", .op = Op::kLnMulDropout, .m = 9000, .n = 1024,
       .dtype = bf, .a = true, .p = 0.2f, .f32_rtol = 2e-5, .why = lowp});
  add({.name = "ln_mul_dropout_c2_p01_fp16", .op = Op::kLnMulDropout, .m = 97, .n = 384,
       .dtype = f16, .a = true, .p = 0.1f, .f32_rtol = 2e-5, .why = lowp});
  add({.name = "ln_mul_dropout_p01_fp16", .op = Op::kLnMulDropout, .m = 20, .n = 72, .dtype = f16,
       .a = true, .p = 0.1f, .f32_rtol = 2e-5, .why = lowp});
  // 1-wide rows of 70: kC rounded up to 4 chunks, the last past the row (its keep word not
  // written: the row has 3).
  add({.name = "ln_mul_dropout_c4_past_p025_bf16", .op = Op::kLnMulDropout, .m = 333, .n = 70,
       .dtype = bf, .a = true, .p = 0.25f, .f32_rtol = 2e-5, .why = lowp});
  // 8-wide rows of 2312 columns (9.03 chunks a lane): both fused kernels' loop form.
  add({.name = "ln_mul_dropout_wide_p02_bf16", .op = Op::kLnMulDropout, .m = 301, .n = 2312,
       .dtype = bf, .pad = 8, .a = true, .p = 0.2f, .f32_rtol = 2e-5, .why = lowp});

  add({.name = "dropout_bf16", .op = Op::kDropout, .m = 100, .n = 64, .dtype = bf, .p = 0.3f,
       .why = "mask exact; kept values x / (1 - p) rounded once"});
  add({.name = "dropout_inplace_odd_f32", .op = Op::kDropout, .m = 31, .n = 17, .dtype = f32,
       .acc = true, .p = 0.5f, .f32_rtol = 1e-7, .why = "mask exact; one fp32 multiply"});
  add({.name = "dropout_strided_fp16", .op = Op::kDropout, .m = 40, .n = 24, .dtype = f16, .pad = 4,
       .p = 0.1f, .why = "mask exact; kept values rounded once"});

  add({.name = "silu_strided_bf16", .op = Op::kActivation, .m = 64, .n = 96, .dtype = bf, .out = bf,
       .pad = 8, .variant = static_cast<int>(Activation::kSilu), .why = lowp});
  add({.name = "relu_odd_f32", .op = Op::kActivation, .m = 13, .n = 7, .dtype = f32, .out = f32,
       .variant = static_cast<int>(Activation::kRelu), .f32_rtol = 1e-7, .why = "exact in fp32"});
  add({.name = "silu_heads_25_bf16", .op = Op::kActivation, .m = 70, .n = 150, .k = 6,
       .dtype = bf, .out = bf, .variant = static_cast<int>(Activation::kSilu), .why = lowp});
  add({.name = "silu_heads_16_bf16", .op = Op::kActivation, .m = 33, .n = 96, .k = 6,
       .dtype = bf, .out = bf, .variant = static_cast<int>(Activation::kSilu), .why = lowp});
  add({.name = "gelu_fp16", .op = Op::kActivation, .m = 16, .n = 40, .dtype = f16, .out = f16,
       .variant = static_cast<int>(Activation::kGelu), .why = lowp});
  add({.name = "silu_f32_to_bf16", .op = Op::kActivation, .m = 8, .n = 24, .dtype = f32, .out = bf,
       .variant = static_cast<int>(Activation::kSilu), .f32_rtol = 1e-6,
       .why = lowp + "; f32 backward: expf vs std::exp"});
  // Head layouts of the staged kernel (widths not multiples of 8; whole buffers checked, so a
  // written padding column or a dropped partial chunk fails). Row counts are not multiples of
  // its rows per block. pad = 50 is the layer's z.cols(hd, 4 hd) for H * d = 50.
  add({.name = "act_heads_25_layer_bf16", .op = Op::kActHeads, .m = 203, .n = 150, .k = 6,
       .dtype = bf, .out = bf, .pad = 50, .variant = static_cast<int>(Activation::kSilu),
       .why = lowp});
  add({.name = "act_heads_50_layer_bf16", .op = Op::kActHeads, .m = 131, .n = 150, .k = 3,
       .dtype = bf, .out = bf, .pad = 50, .variant = static_cast<int>(Activation::kSilu),
       .why = lowp});
  add({.name = "act_heads_25_inplace_bf16", .op = Op::kActHeads, .m = 97, .n = 150, .k = 6,
       .dtype = bf, .out = bf, .a = true, .variant = static_cast<int>(Activation::kSilu),
       .why = lowp});
  add({.name = "act_heads_50_inplace_gelu_f32", .op = Op::kActHeads, .m = 45, .n = 100, .k = 2,
       .dtype = f32, .out = f32, .pad = 8, .a = true,
       .variant = static_cast<int>(Activation::kGelu), .f32_rtol = 2e-6,
       .why = "fp32 tanhf / expf vs std::tanh"});
  add({.name = "act_heads_25_unaligned_fp16", .op = Op::kActHeads, .m = 77, .n = 75, .k = 3,
       .dtype = f16, .out = f16, .pad = 3, .stride = 27,
       .variant = static_cast<int>(Activation::kSilu),
       .why = lowp + "; rows at varying offsets within 16 bytes"});
  add({.name = "act_heads_25_f32_to_bf16", .op = Op::kActHeads, .m = 150, .n = 150, .k = 6,
       .dtype = f32, .out = bf, .pad = 50, .variant = static_cast<int>(Activation::kSilu),
       .why = lowp});
  add({.name = "act_heads_12_relu_bf16", .op = Op::kActHeads, .m = 300, .n = 48, .k = 4,
       .dtype = bf, .out = bf, .pad = 16, .variant = static_cast<int>(Activation::kRelu),
       .why = lowp});
  add({.name = "act_plain_strided_50_bf16", .op = Op::kActHeads, .m = 129, .n = 50, .dtype = bf,
       .out = bf, .pad = 50, .variant = static_cast<int>(Activation::kSilu), .why = lowp});
  add({.name = "act_plain_odd_inplace_relu_f32", .op = Op::kActHeads, .m = 300, .n = 7,
       .dtype = f32, .out = f32, .pad = 1, .a = true,
       .variant = static_cast<int>(Activation::kRelu), .f32_rtol = 1e-7, .why = "exact in fp32"});

  // Embeddings: V small so ids repeat; atomics and the sorted deterministic path.
  add({.name = "embedding_pos_bf16_atomic", .op = Op::kEmbedding, .m = 300, .n = 64, .k = 40,
       .out = bf, .a = true, .det = false, .f32_rtol = 1e-5,
       .why = lowp + "; d_table: fp32 sums of repeated ids in another order"});
  add({.name = "embedding_pos_f32_det", .op = Op::kEmbedding, .m = 700, .n = 48, .k = 3, .out = f32,
       .a = true, .f32_rtol = 1e-5,
       .why = "fp32 sums of ~230 rows per id (spanning pieces) in another order"});
  add({.name = "embedding_odd_strided_bf16_det", .op = Op::kEmbedding, .m = 257, .n = 33, .k = 500,
       .out = bf, .pad = 5, .f32_rtol = 1e-5, .why = lowp});
  add({.name = "touched_rows", .op = Op::kTouchedRows, .m = 5003, .why = "exact"});
  add({.name = "sparse_adam", .op = Op::kSparseOpt, .m = 50, .n = 24, .variant = 0,
       .f32_rtol = 1e-6, .why = "fp32 update vs the f64 reference"});
  add({.name = "sparse_rowwise_adagrad", .op = Op::kSparseOpt, .m = 50, .n = 33, .variant = 1,
       .f32_rtol = 1e-6, .why = "fp32 update vs the f64 reference"});
  add({.name = "sparse_sgd", .op = Op::kSparseOpt, .m = 20, .n = 8, .variant = 2, .f32_rtol = 1e-6,
       .why = "fp32 update vs the f64 reference"});

  add({.name = "l2norm_bf16", .op = Op::kL2Norm, .m = 100, .n = 64, .dtype = bf, .out = bf,
       .f32_rtol = 1e-6, .why = lowp + "; norms fp32 vs f64"});
  add({.name = "l2norm_acc_strided_odd_f32", .op = Op::kL2Norm, .m = 21, .n = 50, .dtype = f32,
       .out = f32, .pad = 2, .acc = true, .f32_rtol = 2e-6, .why = "fp32 vs the f64 reference"});

  add({.name = "sampled_softmax_f32_atomic", .op = Op::kSampledSoftmax, .m = 60, .n = 64, .k = 32,
       .dtype = f32, .det = false, .f32_rtol = 2e-5,
       .why = "fp32 logits/softmax vs the f64 reference; atomics order"});
  add({.name = "sampled_softmax_bf16_det", .op = Op::kSampledSoftmax, .m = 45, .n = 48, .k = 20,
       .dtype = bf, .f32_rtol = 2e-5, .why = lowp + "; fp32 loss/d_table vs f64"});
  add({.name = "sampled_softmax_odd_strided_f32_det", .op = Op::kSampledSoftmax, .m = 37, .n = 50,
       .k = 7, .dtype = f32, .pad = 3, .f32_rtol = 2e-5, .why = "fp32 vs the f64 reference"});
  // The kernel's three widths: 8-wide (d = 128), 2-wide (d = 50, the ML-1M configs' width, with
  // R = 128 and 300 tokens so keys span many scatter pieces), 1-wide (odd strides above).
  add({.name = "sampled_softmax_d128_f32_det", .op = Op::kSampledSoftmax, .m = 40, .n = 128,
       .k = 16, .dtype = f32, .f32_rtol = 2e-5, .why = "fp32 vs the f64 reference"});
  add({.name = "sampled_softmax_d128_bf16_atomic", .op = Op::kSampledSoftmax, .m = 40, .n = 128,
       .k = 16, .dtype = bf, .det = false, .f32_rtol = 2e-5,
       .why = lowp + "; atomics order"});
  add({.name = "sampled_softmax_d50_r128_f32_det", .op = Op::kSampledSoftmax, .m = 300, .n = 50,
       .k = 128, .dtype = f32, .f32_rtol = 2e-5, .why = "fp32 vs the f64 reference"});
  // The warp kernel's one-pass dq (one tile): bench-large's width (d = 1024, 4 column passes a
  // lane), and tau = 0.005 at d = 128, where the largest logit lies > 60 below the reference
  // ||q|| / tau, so dq's pass over the rows runs again against the true max (the fallback).
  add({.name = "sampled_softmax_d1024_bf16_det", .op = Op::kSampledSoftmax, .m = 33, .n = 1024,
       .k = 40, .dtype = bf, .f32_rtol = 2e-5, .why = lowp + "; fp32 loss/d_table vs f64"});
  add({.name = "sampled_softmax_d128_sharp_f32_det", .op = Op::kSampledSoftmax, .m = 40,
       .n = 128, .k = 64, .dtype = f32, .p = 0.005f, .f32_rtol = 2e-4,
       .why = "fp32 logits of ~200 (rounding ~2e-5 each) through a sharp softmax vs f64"});

  // The narrow kernel (the default for 2-wide rows of 2..64 columns in one tile: lanes = 8
  // candidates x 4 column quarters, NC = ceil(d / 8) chunks a lane): d = 50 (NC = 7, a partial
  // last chunk) at the ML-1M shape in bf16, d = 32 / 48 / 64 / 8 / 2 (NC = 4, 6, 8, 1, 1),
  // strided q and dq (pad 2 keeps 2-wide access), f16 and the atomic d_table path, R small and
  // large. The d = 50 odd-strided case above runs the warp kernel (1 wide); so does
  // HSTU_SS_KERNEL=warp (GpuSampledSoftmax.NarrowMatchesWarpKernel below compares the two).
  add({.name = "sampled_softmax_narrow_d50_r128_bf16_det", .op = Op::kSampledSoftmax, .m = 300,
       .n = 50, .k = 128, .dtype = bf, .f32_rtol = 2e-5,
       .why = lowp + "; fp32 loss/d_table vs f64"});
  add({.name = "sampled_softmax_narrow_d50_r128_f16_atomic", .op = Op::kSampledSoftmax, .m = 200,
       .n = 50, .k = 128, .dtype = f16, .det = false, .f32_rtol = 2e-5,
       .why = lowp + "; atomics order"});
  add({.name = "sampled_softmax_narrow_d32_r5_f32_det", .op = Op::kSampledSoftmax, .m = 61,
       .n = 32, .k = 5, .dtype = f32, .f32_rtol = 2e-5, .why = "fp32 vs the f64 reference"});
  add({.name = "sampled_softmax_narrow_d48_strided_f32_det", .op = Op::kSampledSoftmax, .m = 53,
       .n = 48, .k = 40, .dtype = f32, .pad = 2, .f32_rtol = 2e-5,
       .why = "fp32 vs the f64 reference"});
  add({.name = "sampled_softmax_narrow_d64_strided_bf16_det", .op = Op::kSampledSoftmax, .m = 47,
       .n = 64, .k = 33, .dtype = bf, .pad = 2, .f32_rtol = 2e-5,
       .why = lowp + "; fp32 loss/d_table vs f64"});
  add({.name = "sampled_softmax_narrow_d8_f32_atomic", .op = Op::kSampledSoftmax, .m = 40, .n = 8,
       .k = 24, .dtype = f32, .det = false, .f32_rtol = 2e-5,
       .why = "fp32 vs the f64 reference; atomics order"});
  add({.name = "sampled_softmax_narrow_d2_f32_det", .op = Op::kSampledSoftmax, .m = 33, .n = 2,
       .k = 9, .dtype = f32, .f32_rtol = 2e-5, .why = "fp32 vs the f64 reference"});
  // tau = 0.005: the largest logit (~90) lies > 60 below the narrow kernel's reference ||q|| / tau
  // = 200, so its dq pass runs again against the true max (the fallback).
  add({.name = "sampled_softmax_narrow_d50_sharp_f32_det", .op = Op::kSampledSoftmax, .m = 60,
       .n = 50, .k = 64, .dtype = f32, .p = 0.005f, .f32_rtol = 2e-4,
       .why = "fp32 logits of ~200 (rounding ~2e-5 each) through a sharp softmax vs f64"});

  // Candidates in shared-memory tiles (variant = the tile; a partial last tile, and tiles that
  // are not a multiple of the row groups), and R past what one tile fits (in-batch negatives of
  // a large batch: R + 1 = 16001 at d = 64 needs 250 KiB per warp untiled), on both scatters.
  add({.name = "sampled_softmax_tiled_f32_det", .op = Op::kSampledSoftmax, .m = 37, .n = 64,
       .k = 300, .dtype = f32, .variant = 64, .f32_rtol = 2e-5,
       .why = "fp32 vs the f64 reference; online logsumexp over tiles"});
  add({.name = "sampled_softmax_tiled_d50_bf16_atomic", .op = Op::kSampledSoftmax, .m = 40,
       .n = 50, .k = 130, .dtype = bf, .variant = 50, .det = false, .f32_rtol = 2e-5,
       .why = lowp + "; atomics order; online logsumexp over tiles"});
  // The table's copy in q's dtype (b = true; what the model's loss reads on a GPU by default):
  // the warp kernel 8 wide at bench-large's width and 1 wide (odd strides), the narrow kernel,
  // the tiled path, both scatters, bf16 and f16.
  add({.name = "sampled_softmax_d1024_bf16_rows_det", .op = Op::kSampledSoftmax, .m = 33,
       .n = 1024, .k = 40, .dtype = bf, .b = true, .f32_rtol = 2e-5,
       .why = lowp + " (q and rows); fp32 loss/d_table vs f64"});
  add({.name = "sampled_softmax_d128_f16_rows_atomic", .op = Op::kSampledSoftmax, .m = 40,
       .n = 128, .k = 16, .dtype = f16, .b = true, .det = false, .f32_rtol = 2e-5,
       .why = lowp + " (q and rows); atomics order"});
  add({.name = "sampled_softmax_odd_strided_bf16_rows_det", .op = Op::kSampledSoftmax, .m = 37,
       .n = 50, .k = 7, .dtype = bf, .pad = 3, .b = true, .f32_rtol = 2e-5,
       .why = lowp + " (q and rows); fp32 loss/d_table vs f64"});
  add({.name = "sampled_softmax_narrow_d50_r128_bf16_rows_det", .op = Op::kSampledSoftmax,
       .m = 300, .n = 50, .k = 128, .dtype = bf, .b = true, .f32_rtol = 2e-5,
       .why = lowp + " (q and rows); fp32 loss/d_table vs f64"});
  add({.name = "sampled_softmax_tiled_d64_bf16_rows_atomic", .op = Op::kSampledSoftmax, .m = 37,
       .n = 64, .k = 300, .dtype = bf, .b = true, .variant = 64, .det = false, .f32_rtol = 2e-5,
       .why = lowp + " (q and rows); atomics order; online logsumexp over tiles"});
  add({.name = "sampled_softmax_r16000_f32_det", .op = Op::kSampledSoftmax, .m = 24, .n = 64,
       .k = 16000, .dtype = f32, .f32_rtol = 1e-4,
       .why = "fp32 sums over 16001 candidates vs the f64 reference"});
  add({.name = "sampled_softmax_r15000_d128_bf16_atomic", .op = Op::kSampledSoftmax, .m = 24,
       .n = 128, .k = 15000, .dtype = bf, .det = false, .f32_rtol = 1e-4,
       .why = lowp + "; fp32 sums over 15001 candidates; atomics order"});

  add({.name = "negatives_uniform", .op = Op::kNegatives, .m = 37, .n = 16, .k = 1000, .variant = 0,
       .why = "exact (same formula)"});
  add({.name = "negatives_in_batch", .op = Op::kNegatives, .m = 50, .n = 9, .k = 20, .variant = 1,
       .why = "exact (same formula)"});
  add({.name = "negatives_in_batch_per_query", .op = Op::kNegatives, .m = 61, .k = 40,
       .variant = 2, .why = "exact (same formula; R = the batch's queries)"});

  add({.name = "dense_adamw", .op = Op::kDenseOpt, .m = 4099, .variant = DenseOptimizerSpec::kAdamW,
       .f32_rtol = 1e-6, .why = "fp32 vs f64 update"});
  add({.name = "dense_adam", .op = Op::kDenseOpt, .m = 1024, .variant = DenseOptimizerSpec::kAdam,
       .f32_rtol = 1e-6, .why = "fp32 vs f64 update"});
  add({.name = "dense_sgd_odd", .op = Op::kDenseOpt, .m = 1001, .variant = DenseOptimizerSpec::kSgd,
       .f32_rtol = 1e-6, .why = "fp32 vs f64 update"});

  add({.name = "cast_f32_bf16", .op = Op::kCast, .m = 40, .n = 64, .dtype = f32, .out = bf,
       .why = "bit-exact RNE"});
  add({.name = "cast_f32_fp16_strided_odd", .op = Op::kCast, .m = 9, .n = 31, .dtype = f32,
       .out = f16, .pad = 3, .why = "bit-exact RNE"});
  add({.name = "cast_bf16_f32", .op = Op::kCast, .m = 8, .n = 24, .dtype = bf, .out = f32,
       .why = "exact widening"});

  add({.name = "retrieval_rank_f32", .op = Op::kRetrievalRank, .m = 70, .n = 300, .k = 24,
       .dtype = f32, .why = "exact ranks (dyadic inputs: exact scores and ties)"});
  add({.name = "retrieval_rank_bf16_strided", .op = Op::kRetrievalRank, .m = 130, .n = 157, .k = 17,
       .dtype = bf, .pad = 4, .why = "exact ranks"});
  add({.name = "retrieval_rank_counts_f32", .op = Op::kRetrievalRankCounts, .m = 70, .n = 300,
       .k = 24, .dtype = f32, .variant = 3, .why = "exact counts (dyadic inputs)"});
  add({.name = "retrieval_rank_counts_bf16_strided", .op = Op::kRetrievalRankCounts, .m = 130,
       .n = 157, .k = 17, .dtype = bf, .pad = 4, .variant = 4, .why = "exact counts"});
  // clang-format on
  return t;
}

class GpuOps : public ::testing::TestWithParam<Case> {};

TEST_P(GpuOps, MatchesCpuReference) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  const Case& c = GetParam();
  switch (c.op) {
    case Op::kGemm:
      return run_gemm(c);
    case Op::kBiasGrad:
      return run_bias_grad(c);
    case Op::kLayerNorm:
      return run_layernorm(c);
    case Op::kLnMulDropout:
      return run_ln_mul_dropout(c);
    case Op::kDropout:
      return run_dropout(c);
    case Op::kActivation:
      return run_activation(c);
    case Op::kActHeads:
      return run_act_heads(c);
    case Op::kEmbedding:
      return run_embedding(c);
    case Op::kTouchedRows:
      return run_touched_rows(c);
    case Op::kSparseOpt:
      return run_sparse_opt(c);
    case Op::kL2Norm:
      return run_l2norm(c);
    case Op::kSampledSoftmax:
      return run_sampled_softmax(c);
    case Op::kNegatives:
      return run_negatives(c);
    case Op::kDenseOpt:
      return run_dense_opt(c);
    case Op::kCast:
      return run_cast(c);
    case Op::kRetrievalRank:
      return run_retrieval_rank(c);
    case Op::kRetrievalRankCounts:
      return run_retrieval_rank_counts(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Table, GpuOps, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// Plan buckets (host arithmetic: runs without a GPU): exact up to 128, never below the size,
// at most 12.5% above it, monotone, and few enough that a training run builds a handful of plans.
TEST(GemmSizeBucket, RoundsUpByAtMostAnEighth) {
  int64_t prev = 0, distinct = 0;
  for (int64_t x = 1; x <= 300000; ++x) {
    const int64_t b = cuda::gemm_size_bucket(x);
    if (x <= 128) {
      ASSERT_EQ(b, x);
    } else {
      ASSERT_GE(b, x) << x;
      ASSERT_LE(8 * b, 9 * x) << x;
    }
    ASSERT_GE(b, prev) << x;
    distinct += b != prev;
    prev = b;
  }
  EXPECT_LT(distinct, 128 + 8 * 12) << "sizes 129..300000 should fall into ~8 buckets per octave";
  EXPECT_EQ(cuda::gemm_size_bucket(25600), 26624);  // ML-1M-large's 128 x 200 token capacity
}

// The step loop must not build GEMM plans: a repeated shape reuses its plan.
TEST(GpuGemmPlans, CreatedOncePerShape) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  Ctx g = gpu::cuda_ctx();
  const Tensor a = dev(rnd({48, 32}, DType::kBF16), DType::kBF16);
  const Tensor b = dev(rnd({24, 32}, DType::kBF16), DType::kBF16);
  const Tensor c = out_dev(DType::kBF16, {48, 24});
  GemmDesc desc;
  desc.trans_b = true;
  const int64_t before = cuda::gemm_plans_created(g.blas);
  cuda::gemm(g, desc, a, b, c, Tensor());
  const int64_t after_first = cuda::gemm_plans_created(g.blas);
  EXPECT_EQ(after_first, before + 1);
  for (int i = 0; i < 3; ++i) cuda::gemm(g, desc, a, b, c, Tensor());
  EXPECT_EQ(cuda::gemm_plans_created(g.blas), after_first) << "a warm shape created a plan";
  // Token counts in one size bucket (130 and 140 -> 144) share a plan.
  const Tensor a130 = dev(rnd({130, 32}, DType::kBF16), DType::kBF16);
  const Tensor a140 = dev(rnd({140, 32}, DType::kBF16), DType::kBF16);
  cuda::gemm(g, desc, a130, b, out_dev(DType::kBF16, {130, 24}), Tensor());
  const int64_t after_bucket = cuda::gemm_plans_created(g.blas);
  cuda::gemm(g, desc, a140, b, out_dev(DType::kBF16, {140, 24}), Tensor());
  EXPECT_EQ(cuda::gemm_plans_created(g.blas), after_bucket) << "one bucket built two plans";
  gpu::sync();
}

// The scratch budget covers the ops' real use at a training-like size.
TEST(GpuScratch, BudgetCoversOps) {
  HSTU_REQUIRE_GPU();
  cuda::OpsScratchNeeds needs;
  needs.max_tokens = 4096, needs.max_width = 256, needs.max_table_rows = 100000;
  needs.num_negatives = 32, needs.deterministic = true;
  const size_t bytes = cuda::ops_scratch_bytes(needs);
  EXPECT_GT(bytes, size_t(0));
  EXPECT_LT(bytes, size_t(1) << 30) << "implausibly large scratch plan";
}

// A sampled-softmax problem of t tokens with r negatives from ids [1, v): the spec (temperature
// 0.05, eps 0.5, the mean over the tokens), the targets (every 5th token unsupervised: 0) and
// the negatives, both drawn uniformly.
struct SoftmaxInputs {
  SampledSoftmaxSpec spec;
  Tensor targets, neg;
};
SoftmaxInputs softmax_inputs(int64_t t, int64_t r, int64_t v) {
  SoftmaxInputs in;
  in.spec.temperature = 0.05f;
  in.spec.eps = 0.5f;
  in.spec.loss_scale = 1.0 / static_cast<double>(t);
  in.targets = alloc(DType::kI32, {t});
  in.neg = alloc(DType::kI32, {t, r});
  fill_int(in.targets, 1, v);
  fill_int(in.neg, 1, v);
  for (int64_t i = 0; i < t; i += 5) set(in.targets, i, 0);  // unsupervised tokens
  return in;
}

// The deterministic sorted scatter (ops/cuda/sorted_scatter.cuh) in its three launch forms, bit
// for bit: the default (rows of at most 32 x width columns: one piece a warp, 4 warps a block),
// HSTU_SCATTER_PIECES_PER_BLOCK=8 (8 warps a block) and =1 (one piece a block, the older form).
// Same per-column sums in the same order, so the same bytes. Narrow rows (d = 24, 31, 50: the
// warp form's 1- and 2-wide reads; 128 and 200: 8 wide; 33 odd: the block form in all three),
// keys repeated so that one key's run spans many pieces (V = 3 or 97 keys) or a piece holds many
// runs (V = 400 or 5000), pieces of 16 items (a few thousand tokens) and of 256 (the softmax's
// 268,928 pairs, a last piece of 128), strided rows.
TEST(GpuSortedScatter, WarpFormMatchesBlockFormBitForBit) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  Ctx g = gpu::cuda_ctx(true);
  const char* env = "HSTU_SCATTER_PIECES_PER_BLOCK";
  const char* forms[] = {nullptr, "8", "1"};  // the default, 8 warps a block, one piece a block
  const auto set_form = [&](const char* value) {
    if (value)
      setenv(env, value, 1);
    else
      unsetenv(env);
  };

  // embedding_bwd: d_table and d_pos (two row_sum calls), dout rows of c.d columns.
  struct EmbCase {
    int64_t t, d, v;
    DType dtype;
    int64_t pad;
  };
  for (const EmbCase& c :
       {EmbCase{5000, 50, 3, DType::kBF16, 0}, EmbCase{5000, 50, 400, DType::kF32, 0},
        EmbCase{3001, 24, 7, DType::kF32, 0}, EmbCase{3001, 31, 50, DType::kBF16, 3},
        EmbCase{3001, 33, 50, DType::kBF16, 5}, EmbCase{2000, 128, 40, DType::kBF16, 0},
        EmbCase{2000, 200, 40, DType::kF32, 0}}) {
    const std::string name = "embedding t " + std::to_string(c.t) + " d " + std::to_string(c.d) +
                             " V " + std::to_string(c.v) + " " + dtype_name(c.dtype);
    const int64_t npos = 17;
    Tensor ids = alloc(DType::kI32, {c.t}), positions = alloc(DType::kI32, {c.t});
    fill_int(ids, 0, c.v);
    fill_int(positions, 0, npos);
    const Tensor idd = dev(ids, DType::kI32), pd = dev(positions, DType::kI32);
    const Tensor doutd = dev(rnd({c.t, c.d}, c.dtype), c.dtype, c.pad);
    const Tensor dt0 = rnd({c.v, c.d}, DType::kF32), dp0 = rnd({npos, c.d}, DType::kF32);
    std::vector<unsigned char> table_bytes[3], pos_bytes[3];
    for (int f = 0; f < 3; ++f) {
      const Tensor dtd = dev(dt0, DType::kF32), dpd = dev(dp0, DType::kF32);
      Tensor zeros = alloc(DType::kU8, {c.v});
      fill_value(zeros, 0);
      const Tensor td = dev(zeros, DType::kU8);
      set_form(forms[f]);
      cuda::embedding_bwd(g, doutd, idd, std::sqrt(static_cast<float>(c.d)), dtd, td, pd, dpd);
      gpu::sync();
      unsetenv(env);
      table_bytes[f] = bytes_of(dtd);
      pos_bytes[f] = bytes_of(dpd);
    }
    for (int f = 1; f < 3; ++f) {
      EXPECT_TRUE(table_bytes[f] == table_bytes[0])
          << name << ": d_table differs between the default and " << env << "=" << forms[f];
      EXPECT_TRUE(pos_bytes[f] == pos_bytes[0])
          << name << ": d_pos differs between the default and " << env << "=" << forms[f];
    }
  }

  // sampled_softmax's d_table (the pair rows with the key term), t x (r + 1) pairs.
  struct SoftmaxCase {
    int64_t t, d, r, v;
    DType dtype;
    int64_t pad;
  };
  for (const SoftmaxCase& c : {SoftmaxCase{2101, 50, 127, 97, DType::kBF16, 0},
                               SoftmaxCase{2101, 50, 127, 5000, DType::kF32, 0},
                               SoftmaxCase{300, 50, 128, 97, DType::kF32, 2},
                               SoftmaxCase{900, 128, 31, 300, DType::kBF16, 0}}) {
    const std::string name = "sampled_softmax t " + std::to_string(c.t) + " d " +
                             std::to_string(c.d) + " R " + std::to_string(c.r) + " V " +
                             std::to_string(c.v) + " " + dtype_name(c.dtype);
    auto [spec, targets, neg] = softmax_inputs(c.t, c.r, c.v);
    const Tensor qd = dev(rnd({c.t, c.d}, c.dtype), c.dtype, c.pad);
    const Tensor tgd = dev(targets, DType::kI32), negd = dev(neg, DType::kI32);
    const Tensor tabd = dev(rnd({c.v, c.d}, DType::kF32, -0.25, 0.25), DType::kF32);
    const Tensor dt0 = rnd({c.v, c.d}, DType::kF32);
    std::vector<unsigned char> table_bytes[3];
    for (int f = 0; f < 3; ++f) {
      const Tensor lossd = out_dev(DType::kF64, {1});
      const Tensor dqd = out_dev(c.dtype, {c.t, c.d}, c.pad);
      const Tensor dtd = dev(dt0, DType::kF32);
      Tensor zeros = alloc(DType::kU8, {c.v});
      fill_value(zeros, 0);
      const Tensor td = dev(zeros, DType::kU8);
      set_form(forms[f]);
      cuda::sampled_softmax(g, spec, qd, tgd, negd, tabd, lossd, dqd, dtd, td);
      gpu::sync();
      unsetenv(env);
      table_bytes[f] = bytes_of(dtd);
    }
    for (int f = 1; f < 3; ++f)
      EXPECT_TRUE(table_bytes[f] == table_bytes[0])
          << name << ": d_table differs between the default and " << env << "=" << forms[f];
  }
}

// The narrow sampled-softmax kernel (the default for 2-wide rows of 2..64 columns) against the
// warp-per-token kernel (HSTU_SS_KERNEL=warp) on the same inputs: loss, dq and d_table within
// fp32 summation-order tolerance of each other (16-bit dq: one rounding step of the output,
// since the two fp32 values may round to neighbours), the touched flags equal, and each kernel
// bit-for-bit repeatable in deterministic mode. The records themselves are scratch: their keys
// (one per (token, candidate), the candidate's id or 0) are the same by construction, and the
// deterministic d_table they are summed into is compared here.
TEST(GpuSampledSoftmax, NarrowMatchesWarpKernel) {
  HSTU_REQUIRE_GPU();
  gpu::DeviceScope scope;
  const char* env = "HSTU_SS_KERNEL";
  struct AbCase {
    int64_t t, d, r, v;
    DType dtype;
    int64_t pad;
    bool det;
  };
  for (const AbCase& c : {AbCase{1500, 50, 128, 3706, DType::kBF16, 0, true},
                          AbCase{700, 50, 128, 97, DType::kF32, 0, true},
                          AbCase{300, 50, 128, 97, DType::kF32, 2, false},
                          AbCase{257, 32, 20, 500, DType::kF16, 0, true},
                          AbCase{129, 64, 7, 300, DType::kBF16, 2, true},
                          AbCase{100, 24, 200, 1000, DType::kF32, 0, false}}) {
    const std::string name = "sampled_softmax A/B t " + std::to_string(c.t) + " d " +
                             std::to_string(c.d) + " R " + std::to_string(c.r) + " " +
                             dtype_name(c.dtype) + (c.det ? " det" : " atomic");
    Ctx g = gpu::cuda_ctx(c.det);
    auto [spec, targets, neg] = softmax_inputs(c.t, c.r, c.v);
    for (int64_t i = 1; i < c.t; i += 3)  // masked negatives
      set(neg, i * c.r + (i % c.r), get(targets, i));
    Tensor q = rnd({c.t, c.d}, DType::kF32);
    for (int64_t i = 0; i < c.t; ++i) {  // unit rows
      double n2 = 0;
      for (int64_t j = 0; j < c.d; ++j) n2 += get(q, i * c.d + j) * get(q, i * c.d + j);
      for (int64_t j = 0; j < c.d; ++j) set(q, i * c.d + j, get(q, i * c.d + j) / std::sqrt(n2));
    }
    // Row norms ~1, clear of eps = 0.5 (a norm within rounding of eps may clamp in one kernel
    // and not the other); row 5 is clamped in both.
    const double amp = std::sqrt(3.0 / static_cast<double>(c.d));
    Tensor table = rnd({c.v, c.d}, DType::kF32, -amp, amp);
    for (int64_t j = 0; j < c.d; ++j) set(table, 5 * c.d + j, 0.1 * get(table, 5 * c.d + j));
    const Tensor qd = dev(q, c.dtype, c.pad), tgd = dev(targets, DType::kI32);
    const Tensor negd = dev(neg, DType::kI32), tabd = dev(table, DType::kF32);
    Tensor dt0 = alloc(DType::kF32, {c.v, c.d});  // zero: d_table compared at the gradient's scale
    fill_value(dt0, 0);
    struct Out {
      Tensor loss, dq, dt, touched;
    };
    const auto run = [&](const char* kernel) {
      Out o;
      o.loss = out_dev(DType::kF64, {1});
      o.dq = out_dev(c.dtype, {c.t, c.d}, c.pad);
      o.dt = dev(dt0, DType::kF32);
      Tensor zeros = alloc(DType::kU8, {c.v});
      fill_value(zeros, 0);
      o.touched = dev(zeros, DType::kU8);
      if (kernel)
        setenv(env, kernel, 1);
      else
        unsetenv(env);
      cuda::sampled_softmax(g, spec, qd, tgd, negd, tabd, o.loss, o.dq, o.dt, o.touched);
      gpu::sync();
      unsetenv(env);
      return o;
    };
    const Out nw = run(nullptr), nw2 = run(nullptr), wp = run("warp"), wp2 = run("warp");
    const auto close = [&](const Tensor& a, const Tensor& b, double rtol, const char* what) {
      const Tensor ha = gpu::to_host(a), hb = gpu::to_host(b);
      const double err = max_abs_diff(ha, hb), scale = std::max(max_abs(hb), 1e-30);
      EXPECT_LE(err, rtol * scale) << name << " " << what << ": max|narrow - warp| = " << err
                                   << ", max|warp| = " << scale << ", seed " << test_seed();
    };
    // 16-bit dq: the two fp32 sums may round to neighbouring values (one ulp of the largest).
    const double dq_tol = c.dtype == DType::kBF16  ? 1.0 / 128
                          : c.dtype == DType::kF16 ? 1.0 / 1024
                                                   : 2e-5;
    close(nw.loss, wp.loss, 1e-5, "loss");
    close(nw.dq, wp.dq, dq_tol, "dq");
    close(nw.dt, wp.dt, 2e-5, "d_table");
    EXPECT_TRUE(bytes_of(nw.touched) == bytes_of(wp.touched)) << name << ": touched differs";
    if (c.det) {
      for (const auto& [a, b, what] :
           {std::tuple{&nw, &nw2, "narrow"}, std::tuple{&wp, &wp2, "warp"}}) {
        EXPECT_TRUE(bytes_of(a->loss) == bytes_of(b->loss)) << name << " " << what << ": loss";
        EXPECT_TRUE(bytes_of(a->dq) == bytes_of(b->dq)) << name << " " << what << ": dq";
        EXPECT_TRUE(bytes_of(a->dt) == bytes_of(b->dt)) << name << " " << what << ": d_table";
      }
    }
  }
}

}  // namespace
}  // namespace hstu::test
