// sampled_softmax.cu — CUDA fused sampled-softmax retrieval loss: logits of the positive and R
// negatives from the fp32 table (normalised on the fly), logsumexp, loss, dq and the table
// gradient, in one kernel with one warp per token.
//
// The one decision: the [T, R, D] gather is never materialised; each warp streams its token's
// candidate rows twice (logits, then gradients) and keeps q, dq and the per-candidate logit,
// <q, x> and norm in shared memory. The table gradient through the normalisation,
//   d_table[x_j] += A_j q - B_j x_j,  A_j = c_j / (n_j tau),  B_j = A_j <q, x_j> / n_j^2
// (B_j = 0 where the norm is clamped; c_j = loss_scale * (softmax_j - [j == 0])), is added with
// fp32 atomics — or, with ctx.deterministic, recorded per (token, candidate) and summed by the
// sorted scatter (cuda_sorted_scatter.cuh) so the result is bit-reproducible. The loss is a
// per-token buffer reduced by one block in a fixed order, into the f64 loss[1] on the device.
#include <cmath>

#include "ops/cuda_ops_common.cuh"
#include "ops/cuda_sorted_scatter.cuh"
#include "ops/sampled_softmax.h"

namespace hstu::cuda {
namespace {

constexpr float kMaskedLogit = -5e4f;  // logit of a negative that collides with the positive
constexpr int kGroup = 4;              // candidates whose rows are loaded together

struct SsArgs {
  const void* q = nullptr;  // [T, D], dtype TQ
  int64_t ldq = 0;
  const int32_t* targets = nullptr;  // [T]
  const int32_t* neg = nullptr;      // [T, R]
  int64_t ldn = 0;
  int32_t r = 0;
  const float* table = nullptr;  // [V, D]
  int64_t ldt = 0;
  void* dq = nullptr;  // [T, D], dtype TQ; null: loss only
  int64_t lddq = 0;
  float* d_table = nullptr;  // atomics path
  int64_t lddt = 0;
  uint8_t* touched = nullptr;
  // Deterministic path: per (token, candidate) records [T * (R+1)] instead of atomics.
  int32_t* pair_key = nullptr;
  float* pair_a = nullptr;
  float* pair_b = nullptr;
  float* token_loss = nullptr;  // [T]
  int64_t t = 0, d = 0;
  float tau = 1.0f, eps = 0.0f, loss_scale = 1.0f;
};

template <int V, typename TQ>
__global__ void sampled_softmax_kernel(SsArgs a) {
  extern __shared__ float smem[];  // per warp: q[D], dq[D], logit[J], dot[J], norm[J]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int nj = a.r + 1;
  const int64_t d = a.d;
  float* qs = smem + static_cast<int64_t>(warp) * (2 * d + 3 * nj);
  float* gq = qs + d;
  float* lg = gq + d;
  float* dots = lg + nj;
  float* nrm = dots + nj;
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + warp;
  if (t >= a.t) return;
  const int32_t tgt = a.targets[t];
  TQ* dq = a.dq ? static_cast<TQ*>(a.dq) + t * a.lddq : nullptr;
  const int32_t* neg = a.neg + t * a.ldn;
  if (tgt == 0) {  // unsupervised token: no loss, zero dq, inert records
    if (lane == 0) a.token_loss[t] = 0.0f;
    if (dq)
      for (int64_t c = lane; c < d; c += 32) dq[c] = from_f32<TQ>(0.0f);
    if (a.pair_key)
      for (int j = lane; j < nj; j += 32) {
        a.pair_key[t * nj + j] = 0;
        a.pair_a[t * nj + j] = 0.0f;
        a.pair_b[t * nj + j] = 0.0f;
      }
    return;
  }
  const TQ* q = static_cast<const TQ*>(a.q) + t * a.ldq;
  for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V) {
    float v[V];
    load_vec<V>(q + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      qs[c + j] = v[j];
      gq[c + j] = 0.0f;
    }
  }
  __syncwarp();

  // Logits, kGroup candidates at a time (independent row loads in flight).
  for (int j0 = 0; j0 < nj; j0 += kGroup) {
    const float* rows[kGroup];
    bool live[kGroup];
    float s[kGroup] = {}, ss[kGroup] = {};
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      const int j = j0 + u;
      const int32_t id = j < nj ? (j == 0 ? tgt : neg[j - 1]) : 0;
      live[u] = j < nj && (j == 0 || id != tgt);
      rows[u] = a.table + id * a.ldt;
    }
    for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V) {
#pragma unroll
      for (int u = 0; u < kGroup; ++u) {
        if (!live[u]) continue;
        float x[V];
        load_vec<V>(rows[u] + c, x);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          s[u] += qs[c + j] * x[j];
          ss[u] += x[j] * x[j];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      if (j0 + u >= nj) break;
      const float dot = warp_sum(s[u]);
      const float n = fmaxf(sqrtf(warp_sum(ss[u])), a.eps);
      if (lane == 0) {
        lg[j0 + u] = live[u] ? dot / (n * a.tau) : kMaskedLogit;
        dots[j0 + u] = dot;
        nrm[j0 + u] = n;
      }
    }
  }
  __syncwarp();
  float mx = -INFINITY;
  for (int j = lane; j < nj; j += 32) mx = fmaxf(mx, lg[j]);
  mx = warp_max(mx);
  float se = 0.0f;
  for (int j = lane; j < nj; j += 32) se += expf(lg[j] - mx);
  const float lse = mx + logf(warp_sum(se));
  if (lane == 0) a.token_loss[t] = lse - lg[0];
  if (!dq) return;

  // Gradients: dq accumulates in shared memory (each lane owns its columns).
  for (int j = 0; j < nj; ++j) {
    const int32_t id = j == 0 ? tgt : neg[j - 1];
    const bool live = j == 0 || id != tgt;
    float ca = 0.0f, cb = 0.0f;
    if (live) {
      const float cj = a.loss_scale * (expf(lg[j] - lse) - (j == 0 ? 1.0f : 0.0f));
      ca = cj / (nrm[j] * a.tau);
      cb = nrm[j] > a.eps ? ca * dots[j] / (nrm[j] * nrm[j]) : 0.0f;
    }
    if (a.pair_key && lane == 0) {
      a.pair_key[t * nj + j] = id;
      a.pair_a[t * nj + j] = ca;
      a.pair_b[t * nj + j] = cb;
    }
    if (!live) continue;
    if (lane == 0) a.touched[id] = 1;
    const float* x = a.table + id * a.ldt;
    float* g = a.d_table ? a.d_table + id * a.lddt : nullptr;
    for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V) {
      float xv[V], dx[V];
      load_vec<V>(x + c, xv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        gq[c + k] += ca * xv[k];
        dx[k] = ca * qs[c + k] - cb * xv[k];
      }
      if (g) atomic_add_vec<V>(g + c, dx);
    }
  }
  __syncwarp();
  for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V) {
    float v[V];
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = gq[c + k];
    store_vec<V>(dq + c, v);
  }
}

// loss[0] = scale * sum of token_loss, summed in a fixed order by one block.
__global__ void __launch_bounds__(1024)
    loss_sum_kernel(const float* token_loss, int64_t t, double scale, double* loss) {
  __shared__ double part[1024];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < t; i += blockDim.x) s += token_loss[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = scale * part[0];
}

// Deterministic scatter sources: A_p * q[token of p], and -B_p * table[key of p].
template <typename TQ>
struct QueryRows {
  const TQ* q;
  int64_t ldq;
  int32_t nj;
  const float* coef_a;
  __device__ const TQ* row(int32_t p) const { return q + (p / nj) * ldq; }
  __device__ float coef(int32_t p) const { return coef_a[p]; }
};
struct TableRows {
  const float* table;
  int64_t ldt;
  const int32_t* key;
  const float* coef_b;
  __device__ const float* row(int32_t p) const { return table + key[p] * ldt; }
  __device__ float coef(int32_t p) const { return -coef_b[p]; }
};

}  // namespace

size_t sampled_softmax_scratch_bytes(int64_t tokens, int64_t negatives, int64_t cols, bool det) {
  const int64_t pairs = tokens * (negatives + 1);
  size_t bytes = arena_bytes(sizeof(float) * static_cast<size_t>(tokens));
  if (det)
    bytes += 3 * arena_bytes(4 * static_cast<size_t>(pairs)) +
             sorted_scatter::sort_scratch_bytes(pairs) +
             sorted_scatter::row_sum_scratch_bytes(pairs, cols);
  return bytes;
}

void sampled_softmax(Ctx& ctx, const SampledSoftmaxSpec& spec, const Tensor& q,
                     const Tensor& targets, const Tensor& neg_ids, const Tensor& table,
                     const Tensor& loss, const Tensor& dq, const Tensor& d_table,
                     const Tensor& touched) {
  const char* op = "sampled_softmax";
  check_cuda_tensor(q, op);
  check_shape(q, {-1, -1}, "sampled_softmax q");
  const int64_t t = q.dim(0), d = q.dim(1);
  check_cuda_tensor(table, op);
  check_shape(table, {-1, d}, "sampled_softmax table");
  HSTU_CHECK(table.dtype == DType::kF32, "sampled_softmax: the table must be f32, got ",
             table.str());
  const int64_t v = table.dim(0);
  check_cuda_tensor(targets, op);
  check_shape(targets, {t}, "sampled_softmax targets");
  check_cuda_tensor(neg_ids, op);
  check_shape(neg_ids, {t, -1}, "sampled_softmax neg_ids");
  HSTU_CHECK(targets.dtype == DType::kI32 && neg_ids.dtype == DType::kI32,
             "sampled_softmax: targets and neg_ids must be i32");
  check_cuda_tensor(loss, op);
  check_shape(loss, {1}, "sampled_softmax loss");
  HSTU_CHECK(loss.dtype == DType::kF64, "sampled_softmax: loss must be f64, got ", loss.str());
  HSTU_CHECK(spec.temperature > 0 && spec.eps > 0,
             "sampled_softmax: temperature and eps must be positive");
  const bool grad = !dq.empty();
  if (grad) {
    check_cuda_tensor(dq, op);
    check_shape(dq, {t, d}, "sampled_softmax dq");
    HSTU_CHECK(dq.dtype == q.dtype, "sampled_softmax: dq must have q's dtype, got ", dq.str());
    check_cuda_tensor(d_table, op);
    check_shape(d_table, {v, d}, "sampled_softmax d_table");
    HSTU_CHECK(d_table.dtype == DType::kF32, "sampled_softmax: d_table must be f32");
    check_cuda_tensor(touched, op);
    check_shape(touched, {v}, "sampled_softmax touched");
    HSTU_CHECK(touched.dtype == DType::kU8, "sampled_softmax: touched must be u8");
  }
  if (t == 0) {
    HSTU_CUDA_CHECK(cudaMemsetAsync(loss.data, 0, sizeof(double), stream_of(ctx)));
    return;
  }
  const int64_t r = neg_ids.dim(1), nj = r + 1;
  HSTU_CHECK(t * nj < (int64_t(1) << 31), "sampled_softmax: T * (R + 1) exceeds 2^31");

  Scratch scratch(ctx, op);
  SsArgs a;
  a.q = q.data, a.ldq = q.row_stride;
  a.targets = targets.as<int32_t>();
  a.neg = neg_ids.as<int32_t>(), a.ldn = neg_ids.row_stride, a.r = static_cast<int32_t>(r);
  a.table = table.as<float>(), a.ldt = table.row_stride;
  a.t = t, a.d = d;
  a.tau = spec.temperature, a.eps = spec.eps;
  a.loss_scale = static_cast<float>(spec.loss_scale);
  Tensor token_loss = scratch.alloc(DType::kF32, {t});
  a.token_loss = token_loss.as<float>();
  const bool det = grad && ctx.deterministic;
  Tensor pair_key, pair_a, pair_b;
  if (grad) {
    a.dq = dq.data, a.lddq = dq.row_stride;
    a.touched = touched.as<uint8_t>();
    if (det) {
      pair_key = scratch.alloc(DType::kI32, {t * nj});
      pair_a = scratch.alloc(DType::kF32, {t * nj});
      pair_b = scratch.alloc(DType::kF32, {t * nj});
      a.pair_key = pair_key.as<int32_t>();
      a.pair_a = pair_a.as<float>(), a.pair_b = pair_b.as<float>();
    } else {
      a.d_table = d_table.as<float>(), a.lddt = d_table.row_stride;
    }
  }
  // NOTE: each warp keeps 2*D + 3*(R+1) floats in shared memory; the block shrinks to stay in
  // the default 48 KiB and opts in beyond it only for very wide rows or many negatives.
  const size_t warp_bytes = sizeof(float) * static_cast<size_t>(2 * d + 3 * nj);
  const int warps = static_cast<int>(std::clamp<size_t>((48 << 10) / warp_bytes, 1, 8));
  const size_t smem = warp_bytes * warps;
  const unsigned grid = static_cast<unsigned>((t + warps - 1) / warps);
  const bool vec8 = can_vec8(d, {&q, &table, &dq, &d_table});
  dispatch_vec(vec8, [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    dispatch_io(q.dtype, "sampled_softmax q", [&](auto tq) {
      using TQ = typename decltype(tq)::type;
      auto kernel = sampled_softmax_kernel<V, TQ>;
      if (smem > (48 << 10))
        HSTU_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem)));
      kernel<<<grid, warps * 32, smem, stream_of(ctx)>>>(a);
      HSTU_CUDA_CHECK_LAUNCH();
      if (det) {
        const sorted_scatter::Sorted s =
            sorted_scatter::sort_keys(ctx, scratch, a.pair_key, t * nj, v);
        const bool rows_vec8 = can_vec8(d, {&q, &table, &d_table});
        sorted_scatter::row_sum(ctx, s,
                                QueryRows<TQ>{static_cast<const TQ*>(q.data), q.row_stride,
                                              static_cast<int32_t>(nj), a.pair_a},
                                d_table.as<float>(), d_table.row_stride, d, rows_vec8);
        sorted_scatter::row_sum(
            ctx, s, TableRows{table.as<float>(), table.row_stride, a.pair_key, a.pair_b},
            d_table.as<float>(), d_table.row_stride, d, rows_vec8);
      }
    });
  });
  loss_sum_kernel<<<1, 1024, 0, stream_of(ctx)>>>(a.token_loss, t, spec.loss_scale,
                                                  static_cast<double*>(loss.data));
  HSTU_CUDA_CHECK_LAUNCH();
}

}  // namespace hstu::cuda
