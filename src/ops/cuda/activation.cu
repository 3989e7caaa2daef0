// activation.cu — CUDA SiLU / ReLU / GELU(tanh) forward and backward over strided 2-D views.
//
// The one decision: a single element-wise launcher (ew2d_kernel) with the activation as a
// compile-time functor, fp32 math, 8-wide vector access when every view allows it; in-place
// calls (y == x, dx == dy) are safe because each element is read before it is written by the
// same thread. A head structure (ActHeads) maps grid column c to column (c / width) * stride +
// c % width of each tensor; a vector never straddles two heads (width % 8 == 0 then).
//
// Views that cannot move 8-wide vectors (heads of width % 8 != 0 such as the layer's d = 25 or
// 50 heads, unaligned strides, strided rows of odd width) take the staged kernel instead of one
// 2-byte access per thread: a block copies R whole rows of every input into shared memory as the
// 16-byte-aligned chunks that cover them (whatever the views' alignment; the padding between
// heads is copied and ignored), then writes each output chunk with one 16-byte store when all
// its elements lie inside heads, element by element otherwise (a head's last partial chunk, the
// ends of a row), so the columns between width and stride are never written. All reads of a
// block come before its writes (one barrier) and a block writes only its own rows' elements, so
// in-place calls stay safe.
//
// Cost at the layer's shape (T = 25,600 rows, 3H = 6 heads of d = 25, bf16). Forward: z's
// 300-byte head rows read (304 bytes of chunks, 7.8 MB), 300 bytes written into each 384-byte
// padded uvqk row (7.7 MB; 10.6 MB of touched 32-byte sectors): 16-18 MB, 5.5-6 us at 3 TB/s.
// Backward: d_uvqk's padded heads read as well (370 bytes a row, 9.5 MB): ~25 MB, ~8.5 us.
// FLOPs: ~4 per element (exp, add, divide; ~10 backward) on 3.84 M elements: tens of MFLOP,
// nothing. The other limit is instruction issue: with IEEE expf and a division SiLU took ~20
// SASS instructions per element, the staged kernel adds ~6 (a chunk inside one head) to ~18 (a
// chunk across heads), and ncu found the ML-1M step's backward staged kernel issue-bound (15 us,
// an instruction issued on 80% of cycles; H200, session 15): SiLU now uses the hardware
// exponential (common.cuh's silu_f / silu_grad_f).
#include "ops/cuda/activation.h"
#include "ops/cuda/common.cuh"
#include "ops/detail/checks.h"

namespace hstu::cuda {
namespace {

constexpr float kGeluK0 = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluK1 = 0.044715f;

template <Activation A>
__device__ __forceinline__ float act_fwd(float x) {
  if constexpr (A == Activation::kSilu) {
    return silu_f(x);
  } else if constexpr (A == Activation::kRelu) {
    return x > 0.0f ? x : 0.0f;
  } else {
    return 0.5f * x * (1.0f + tanhf(kGeluK0 * (x + kGeluK1 * x * x * x)));
  }
}

// d act(x) / dx
template <Activation A>
__device__ __forceinline__ float act_grad(float x) {
  if constexpr (A == Activation::kSilu) {
    return silu_grad_f(x);
  } else if constexpr (A == Activation::kRelu) {
    return x > 0.0f ? 1.0f : 0.0f;
  } else {
    const float t = tanhf(kGeluK0 * (x + kGeluK1 * x * x * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * kGeluK0 * (1.0f + 3.0f * kGeluK1 * x * x);
  }
}

// One tensor of a call: element (r, head h, column e) at p + r * ld + h * hs + e.
template <typename T>
struct ActView {
  T* p;
  int64_t ld, hs;
  __device__ T* at(int64_t r, int h, int64_t e) const { return p + r * ld + h * hs + e; }
};

// Grid column c as (head, column in head); width 0: one head, no division.
__device__ __forceinline__ int head_of(int64_t c, int width, int64_t& e) {
  if (width == 0) {
    e = c;
    return 0;
  }
  const int h = static_cast<int>(c) / width;
  e = c - int64_t(h) * width;
  return h;
}

template <Activation A, typename TX, typename TY>
struct ActFwdOp {
  ActView<const TX> x;
  ActView<TY> y;
  int width;  // columns per head; 0 with one head
  template <int V>
  __device__ void apply(int64_t r, int64_t c) const {
    int64_t e;
    const int h = head_of(c, width, e);
    float v[V];
    load_vec_rw<V>(x.at(r, h, e), v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = act_fwd<A>(v[j]);
    store_vec<V>(y.at(r, h, e), v);
  }
};

template <Activation A, typename TX, typename TG>
struct ActBwdOp {
  ActView<const TX> x;
  ActView<const TG> dy;
  ActView<TG> dx;
  int width;
  template <int V>
  __device__ void apply(int64_t r, int64_t c) const {
    int64_t e;
    const int h = head_of(c, width, e);
    float xv[V], g[V];
    load_vec<V>(x.at(r, h, e), xv);
    load_vec_rw<V>(dy.at(r, h, e), g);
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] *= act_grad<A>(xv[j]);
    store_vec<V>(dx.at(r, h, e), g);
  }
};

template <typename F>
void dispatch_act(Activation act, F&& f) {
  switch (act) {
    case Activation::kSilu:
      return f(std::integral_constant<Activation, Activation::kSilu>{});
    case Activation::kRelu:
      return f(std::integral_constant<Activation, Activation::kRelu>{});
    case Activation::kGelu:
      return f(std::integral_constant<Activation, Activation::kGelu>{});
  }
  HSTU_THROW("unknown activation ", static_cast<int>(act));
}

constexpr int kStageThreads = 256;
constexpr int kStageBytes = 8192;  // shared memory of a block: R rows of every input
constexpr int kStageMaxRows = 64;

// The launch geometry of a call: a rows x (count * width) grid and each tensor's view of it
// (width 0: a plain call, and rc may then be one long row of contiguous tensors; ActHeads{1, w}
// is a call of one head). `staged`: the views cannot all move 8-wide vectors and the rows are
// short: the staged kernel below.
struct ActGrid {
  Rows2d rc;
  int64_t count = 1, width = 0;
  bool vec8 = false, staged = false;
  int64_t head_width() const { return width > 0 ? width : rc.cols; }
  template <typename T>
  ActView<T> view(const Tensor& t) const {
    return {static_cast<T*>(t.data), pitch(t, rc), count > 1 ? t.shape[1] / count : 0};
  }
};
// Rows a block of the staged kernel could hold (longer ones take ew2d_kernel).
bool short_rows(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->row_elems() > kStageBytes) return false;
  return true;
}
ActGrid act_grid(const ActHeads& heads, const Tensor& x, std::initializer_list<const Tensor*> ts,
                 const char* op) {
  ActGrid g;
  g.width = check_act_heads(heads, x, ts, op);
  g.count = heads.count;
  for (const Tensor* t : ts) check_cuda_tensor(*t, op);  // x is one of ts
  if (g.count == 1 && heads.width == 0) {  // plain (one head of a given width: heads below)
    g.rc = rows2d(ts);
    g.width = 0;
    g.vec8 = can_vec8_2d(g.rc, ts);
    g.staged = !g.vec8 && g.rc.rows > 1 && short_rows(ts);  // one long row: contiguous
    return g;
  }
  g.rc = {x.shape[0], g.count * g.width};
  HSTU_CHECK(g.rc.cols < (int64_t(1) << 31), op, ": rows of ", g.rc.cols, " elements");
  g.vec8 = g.width % 8 == 0;
  for (const Tensor* t : ts)  // rows and head starts 16-byte aligned
    g.vec8 = g.vec8 && vec_alignment(*t) >= 16 &&
             (t->shape[1] / g.count * dtype_size(t->dtype)) % 16 == 0;
  g.staged = !g.vec8 && short_rows(ts);
  return g;
}

// ---- the staged kernel ----------------------------------------------------------------------

// n / d for 0 <= n < 2^31 as a multiply-high, an add and a shift (Granlund-Montgomery, the
// multiplier found on the host): the per-chunk index arithmetic without integer division.
struct FastDiv {
  uint32_t mul = 1, shift = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t d) {
    while ((uint64_t(1) << shift) < d) ++shift;
    mul = static_cast<uint32_t>((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d) / d + 1);
  }
  __device__ uint32_t operator()(uint32_t n) const { return (__umulhi(n, mul) + n) >> shift; }
};

__device__ __forceinline__ int misalign(const void* p) {
  return static_cast<int>(reinterpret_cast<uintptr_t>(p) & 15);
}

// One tensor of a staged call: row r at p + r * ld, element e of head h at column h * hs + e; a
// row takes part up to column span = (count - 1) * hs + width. A staged row is the `chunks`
// 16-byte-aligned chunks around it (the most any row of the view needs).
template <typename T>
struct StageView {
  T* p = nullptr;
  int64_t ld = 0;
  int hs = 0, span = 0, chunks = 0;
  FastDiv by_chunks;
  __device__ T* row(int64_t r) const { return p + r * ld; }
};

// 16-byte chunks a staged row of t needs: rows start at the base's offset within a chunk when
// the pitch is a multiple of 16 bytes, anywhere (element-aligned) otherwise.
int stage_chunks(const Tensor& t, int64_t ld, int64_t span) {
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
  const bool same = ld * es % 16 == 0;
  const int64_t mis =
      same ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data) & 15) : 16 - es;
  return static_cast<int>((mis + span * es + 15) / 16);
}

template <typename T>
StageView<T> stage_view(const Tensor& t, const ActGrid& g) {
  StageView<T> v;
  if (t.empty()) return v;
  const int64_t width = g.head_width();
  v.p = static_cast<T*>(t.data);
  v.ld = pitch(t, g.rc);
  v.hs = static_cast<int>(g.width > 0 ? t.shape[1] / g.count : width);
  v.span = static_cast<int>((g.count - 1) * v.hs + width);
  v.chunks = stage_chunks(t, v.ld, v.span);
  v.by_chunks = FastDiv(static_cast<uint32_t>(v.chunks));
  return v;
}

// Rows [row0, row0 + n) of v into s (row i at s + i * v.chunks): plain 16-byte loads (the tensor
// may be written by the call), kBatch of them in flight per thread.
template <typename T>
__device__ void stage_rows(const StageView<T>& v, int64_t row0, int n, uint4* s, int tid,
                           int threads) {
  constexpr int kBatch = 4;
  const int total = n * v.chunks, span_bytes = v.span * static_cast<int>(sizeof(T));
  for (int i0 = tid; i0 < total; i0 += kBatch * threads) {
    uint4 c[kBatch];
    bool ok[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * threads;
      const int r = static_cast<int>(v.by_chunks(static_cast<uint32_t>(i))), k = i - r * v.chunks;
      const char* row = reinterpret_cast<const char*>(v.row(row0 + r));
      const int mis = misalign(row);
      ok[b] = i < total && 16 * k < mis + span_bytes;  // no chunk past the row's last element
      if (ok[b]) c[b] = *reinterpret_cast<const uint4*>(row - mis + 16 * k);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (ok[b]) s[i0 + b * threads] = c[b];
  }
}

// Staged row r (global row g) of v as elements: s's row, past g's offset within its chunk.
template <typename T>
__device__ const T* staged_row(const uint4* s, const StageView<const T>& v, int r, int64_t g) {
  return reinterpret_cast<const T*>(reinterpret_cast<const char*>(s + r * v.chunks) +
                                    misalign(v.row(g)));
}

// out = act(x) (forward) or dy * act'(x) (backward) on R rows per block: stage(), a barrier,
// store(). The head structure is out's: chunk column c is element c % out.hs of head
// c / out.hs, which sits at h * hs + e in each input. Shared memory: the staged rows of x, then
// of dy, then kSlack chunks that reads past a row's last element may reach (never used).
template <Activation A, bool kBwd, typename TX, typename TO>
struct StagedAct {
  static constexpr int kPer = 16 / static_cast<int>(sizeof(TO));  // elements per output chunk
  static constexpr int kSlack = 2;  // 16-byte chunks: kPer - 1 elements of x (up to 28 bytes)

  StageView<const TX> x;
  StageView<const TO> dy;  // backward only
  StageView<TO> out;       // y or dx
  int count = 1, width = 0, rows_per_block = 1;
  int64_t rows = 0;
  FastDiv by_head;  // out.hs

  size_t smem_bytes() const {
    return 16 * (size_t(rows_per_block) * (x.chunks + dy.chunks) + kSlack);
  }

  __device__ void stage(uint4* smem, int64_t block, int tid, int threads) const {
    const int64_t row0 = block * rows_per_block;
    const int n = static_cast<int>(std::min<int64_t>(rows_per_block, rows - row0));
    stage_rows(x, row0, n, smem, tid, threads);
    if constexpr (kBwd) stage_rows(dy, row0, n, smem + rows_per_block * x.chunks, tid, threads);
  }

  __device__ void store(const uint4* smem, int64_t block, int tid, int threads) const {
    const int64_t row0 = block * rows_per_block;
    const int n = static_cast<int>(std::min<int64_t>(rows_per_block, rows - row0));
    const uint4* sdy = smem + rows_per_block * x.chunks;
    for (int i = tid; i < n * out.chunks; i += threads) {
      const int r = static_cast<int>(out.by_chunks(static_cast<uint32_t>(i)));
      store_chunk(smem, sdy, r, i - r * out.chunks, row0 + r);
    }
  }

  // Output chunk k of staged row r (global row g), columns c0 .. c0 + kPer - 1 of the row.
  __device__ void store_chunk(const uint4* sx, const uint4* sdy, int r, int k, int64_t g) const {
    TO* row = out.row(g);
    const int c0 = (16 * k - misalign(row)) / static_cast<int>(sizeof(TO));  // < 0: row start
    const int in_row = out.span - c0;  // elements j < in_row lie before the row's end
    if (in_row <= 0) return;
    const TX* xr = staged_row(sx, x, r, g);
    const TO* dr = kBwd ? staged_row(sdy, dy, r, g) : nullptr;
    int h = 0, e = c0;
    if (c0 > 0) {
      h = static_cast<int>(by_head(static_cast<uint32_t>(c0)));
      e = c0 - h * out.hs;
    }
    if (e >= 0 && e + kPer <= out.hs) return store_in_head(xr, dr, row + c0, h, e, in_row);
    store_mixed(xr, dr, row + c0, h, e, in_row);
  }

  // A chunk inside one head's stride (the common case): contiguous in every input, and its
  // first min(width - e, in_row) elements take part. The reads past them stay within the
  // staged rows or the slack (e < width), and their results are dropped.
  __device__ void store_in_head(const TX* xr, const TO* dr, TO* o, int h, int e, int in_row) const {
    const int n = std::min(width - e, in_row);
    if (n <= 0) return;  // all padding
    const TX* xs = xr + h * x.hs + e;
    const TO* ds = kBwd ? dr + h * dy.hs + e : nullptr;
    float v[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) v[j] = value(xs, ds, j, j);
    if (n >= kPer) return store_vec<kPer>(o, v);
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (j < n) o[j] = from_f32<TO>(v[j]);
  }

  // Any other chunk (across a head boundary, or a row's first chunk before its start): the
  // head and column of each element tracked one by one; the others compute element 0.
  __device__ void store_mixed(const TX* xr, const TO* dr, TO* o, int h, int e, int in_row) const {
    float v[kPer];
    bool ok[kPer], all = true;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      ok[j] = static_cast<unsigned>(e) < static_cast<unsigned>(width) && j < in_row;
      all = all && ok[j];
      v[j] = value(xr, dr, ok[j] ? h * x.hs + e : 0, ok[j] ? h * dy.hs + e : 0);
      if (++e == out.hs) {
        e = 0;
        ++h;
      }
    }
    if (all) return store_vec<kPer>(o, v);
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (ok[j]) o[j] = from_f32<TO>(v[j]);
  }

  // act(x[ix]) (forward) or dy[id] * act'(x[ix]) (backward) from the staged rows.
  __device__ float value(const TX* xs, const TO* ds, int ix, int id) const {
    const float xv = to_f32(xs[ix]);
    if constexpr (kBwd)
      return to_f32(ds[id]) * act_grad<A>(xv);
    else
      return act_fwd<A>(xv);
  }
};

template <typename Op>
__global__ void __launch_bounds__(kStageThreads) staged_act_kernel(Op op) {
  extern __shared__ uint4 smem[];
  op.stage(smem, blockIdx.x, threadIdx.x, blockDim.x);
  __syncthreads();
  op.store(smem, blockIdx.x, threadIdx.x, blockDim.x);
}

// The staged call out = f(x[, dy]) with R rows per block: as many as kStageBytes holds (0: one
// row does not fit; the caller takes ew2d_kernel).
template <Activation A, bool kBwd, typename TX, typename TO>
StagedAct<A, kBwd, TX, TO> staged_act(const ActGrid& g, const Tensor& x, const Tensor& dy,
                                      const Tensor& out) {
  StagedAct<A, kBwd, TX, TO> op;
  op.x = stage_view<const TX>(x, g);
  op.dy = stage_view<const TO>(dy, g);
  op.out = stage_view<TO>(out, g);
  op.count = static_cast<int>(g.count);
  op.width = static_cast<int>(g.head_width());
  op.rows = g.rc.rows;
  op.by_head = FastDiv(static_cast<uint32_t>(op.out.hs));
  const int row_bytes = 16 * (op.x.chunks + op.dy.chunks);
  op.rows_per_block = std::min(kStageMaxRows, kStageBytes / row_bytes);
  return op;
}

template <typename Op>
void launch_staged(Ctx& ctx, const Op& op) {
  const int64_t blocks = (op.rows + op.rows_per_block - 1) / op.rows_per_block;
  HSTU_CHECK(blocks < (int64_t(1) << 31), "activation: ", op.rows, " rows");
  staged_act_kernel<Op>
      <<<static_cast<unsigned>(blocks), kStageThreads, op.smem_bytes(), stream_of(ctx)>>>(op);
  HSTU_CUDA_CHECK_LAUNCH();
}

}  // namespace

void activation_fwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& y, ActHeads heads) {
  const ActGrid grid = act_grid(heads, x, {&x, &y}, "activation_fwd");
  if (grid.rc.rows == 0 || grid.rc.cols == 0) return;
  dispatch_act(act, [&](auto atag) {
    constexpr Activation A = decltype(atag)::value;
    dispatch_io(x.dtype, "activation_fwd x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      dispatch_io(y.dtype, "activation_fwd y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        if (grid.staged) {
          const auto op = staged_act<A, false, TX, TY>(grid, x, Tensor(), y);
          if (op.rows_per_block > 0) return launch_staged(ctx, op);
        }
        dispatch_vec(grid.vec8, [&](auto vtag) {
          constexpr int V = decltype(vtag)::value;
          launch_ew2d<V>(ctx, grid.rc,
                         ActFwdOp<A, TX, TY>{grid.view<const TX>(x), grid.view<TY>(y),
                                             static_cast<int>(grid.width)});
        });
      });
    });
  });
}

void activation_bwd(Ctx& ctx, Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                    ActHeads heads) {
  const ActGrid grid = act_grid(heads, x, {&x, &dy, &dx}, "activation_bwd");
  HSTU_CHECK(dy.dtype == dx.dtype, "activation_bwd: dy and dx dtypes differ (", dy.str(), ", ",
             dx.str(), ")");
  if (grid.rc.rows == 0 || grid.rc.cols == 0) return;
  dispatch_act(act, [&](auto atag) {
    constexpr Activation A = decltype(atag)::value;
    dispatch_io(x.dtype, "activation_bwd x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      dispatch_io(dy.dtype, "activation_bwd dy", [&](auto tg) {
        using TG = typename decltype(tg)::type;
        if (grid.staged) {
          const auto op = staged_act<A, true, TX, TG>(grid, x, dy, dx);
          if (op.rows_per_block > 0) return launch_staged(ctx, op);
        }
        dispatch_vec(grid.vec8, [&](auto vtag) {
          constexpr int V = decltype(vtag)::value;
          launch_ew2d<V>(ctx, grid.rc,
                         ActBwdOp<A, TX, TG>{grid.view<const TX>(x), grid.view<const TG>(dy),
                                             grid.view<TG>(dx), static_cast<int>(grid.width)});
        });
      });
    });
  });
}

}  // namespace hstu::cuda
