// cuda/table_ops.cu — CUDA kernels of the dynamic table's primitives.
//
// The one decision: insert is deterministic and equal to the CPU reference. The keys to insert
// push their indices onto per-bucket lists (the table's heads, -1 between calls), and one thread
// owns each bucket's list and places its keys in ascending index order, so a bucket sees the
// same sequence of free-slot picks and evictions as the CPU loop (no sort: a step whose keys
// are all present costs two passes over them). Lookups are one warp per key (lane s compares slot
// s; bucket_size <= 32), the steady-state find_touch_admit 8 lanes per key. The backward of
// dedupe's lookups goes by key: a warp per key with at most kHot lookups sums and applies in one
// pass; only hot keys' sums pass through grad. The fused optimiser is one warp per row with the
// per-element float math of ops/cuda/embedding.cu's sparse_opt_row (Adam: the one
// sparse_adam_elem of ops/cuda/sparse_adam.cuh, its roundings explicit; bc1/bc2 rounded from
// double as there), so a dynamic table's update equals the dense table's CUDA update bit for bit.
// Calls that return counts synchronise the stream. Dedupe is hash_dedupe.cu's (the radix sort
// here is its fallback). Temporary device memory (sort buffers, CUB temp storage, counters) comes
// from a per-stream workspace that grows and is reused, so a step allocates nothing.
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include "core/cuda_check.h"
#include "embed/cuda/hash_dedupe.h"
#include "embed/cuda/table_ops.h"
#include "embed/cuda/workspace.cuh"
#include "embed/table_math.h"
#include "ops/cuda/sparse_adam.cuh"
#include "ops/optimizer.h"

namespace hstu::embed::cuda {
namespace {

cudaStream_t stream_of(const Ctx& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}

unsigned blocks_for(int64_t n, int threads) {
  return static_cast<unsigned>(std::max<int64_t>(1, (n + threads - 1) / threads));
}

void sync(const Ctx& ctx) {
  HSTU_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

// Reads k device counters into host (synchronises the stream).
void read_counters(const Ctx& ctx, Workspace& ws, const unsigned long long* dev, int k,
                   unsigned long long* out) {
  HSTU_CUDA_CHECK(cudaMemcpyAsync(ws.host(), dev, static_cast<size_t>(k) * 8,
                                  cudaMemcpyDeviceToHost, stream_of(ctx)));
  sync(ctx);
  std::copy_n(ws.host(), k, out);
}

int bits_for(uint64_t n) {  // bits needed for values in [0, n]
  int b = 1;
  while (b < 64 && (n >> b) != 0) ++b;
  return b;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float* row_ptr(const RowSpace& rs, int64_t ref) {
  return ref < rs.n_a ? rs.a + ref * rs.row_width : rs.b + (ref - rs.n_a) * rs.row_width;
}

// ---- dedupe -------------------------------------------------------------------------------------

// unique / inverse from the sorted keys; ends[u] = one past the last sorted position of unique
// key u (written by the segment's last element, so no atomics on hot keys).
// With kid (order + 2n) the unique key of each sorted entry too.
__global__ void dedupe_scatter(const int64_t* sorted, const int32_t* pos, const int32_t* uid,
                               int64_t n, int64_t* unique, int32_t* inverse, int32_t* ends,
                               int32_t* kid) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int32_t u = uid[i] - 1;
  const int64_t k = sorted[i];
  if (i == 0 || k != sorted[i - 1]) unique[u] = k;
  if (i == n - 1 || k != sorted[i + 1]) ends[u] = static_cast<int32_t>(i + 1);
  inverse[pos[i]] = u;
  if (kid) kid[i] = u;
}

// counts[u] = ends[u] - ends[u - 1] for u < U = uid[n - 1]; 0 beyond.
__global__ void dedupe_counts(const int32_t* ends, const int32_t* uid, int64_t n, int32_t* counts) {
  const int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (u >= n) return;
  counts[u] = u < uid[n - 1] ? ends[u] - (u > 0 ? ends[u - 1] : 0) : 0;
}

__global__ void head_flags(const int64_t* sorted, int64_t n, int32_t* head) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) head[i] = i == 0 || sorted[i] != sorted[i - 1];
}

// ---- dedupe of several tables ---------------------------------------------------------------

struct GroupArgs {
  int jobs;
  int64_t off[kMaxDedupeJobs + 1];  // job j's lookups are [off[j], off[j + 1]) of the concatenation
  DedupeJob job[kMaxDedupeJobs];
};

__device__ __forceinline__ int job_of(const GroupArgs& g, int64_t p) {
  int lo = 0, hi = g.jobs - 1;  // the last job whose offset is <= p
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (g.off[mid] <= p)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ void job_tags(GroupArgs g, const int32_t* pos, int64_t n, uint8_t* tag) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) tag[i] = static_cast<uint8_t>(job_of(g, pos[i]));
}

// After the stable sort by job, job j's entries sit at [off[j], off[j + 1]), keys ascending.
__global__ void group_heads(GroupArgs g, const int64_t* cat, const int32_t* pos, const uint8_t* tag,
                            int64_t n, int32_t* head) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) head[i] = i == 0 || tag[i] != tag[i - 1] || cat[pos[i]] != cat[pos[i - 1]];
}

// ends[gid] = one past the segment's last entry, local to its job.
__global__ void group_scatter(GroupArgs g, const int64_t* cat, const int32_t* pos,
                              const uint8_t* tag, const int32_t* uid, int64_t n, int32_t* ends) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int t = tag[i];
  const DedupeJob& jb = g.job[t];
  const int64_t o = g.off[t];
  const int32_t base = o > 0 ? uid[o - 1] : 0;
  const int32_t u = uid[i] - 1 - base;
  const int32_t p = pos[i] - static_cast<int32_t>(o);
  const int64_t k = cat[pos[i]];
  if (uid[i] != (i > 0 ? uid[i - 1] : 0)) jb.unique[u] = k;
  jb.inverse[p] = u;
  if (jb.order) {
    jb.order[i - o] = p;
    jb.order[2 * jb.n + (i - o)] = u;
  }
  if (i == n - 1 || tag[i + 1] != t || cat[pos[i + 1]] != k) {
    const int32_t e = static_cast<int32_t>(i + 1 - o);
    ends[uid[i] - 1] = e;
    if (jb.order) jb.order[jb.n + u] = e;
  }
}

__global__ void group_counts(GroupArgs g, const int32_t* pos, const uint8_t* tag,
                             const int32_t* uid, int64_t n, const int32_t* ends) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int t = tag[i];
  if (!(i == n - 1 || tag[i + 1] != t || uid[i + 1] != uid[i])) return;  // segment tails only
  const int64_t o = g.off[t];
  const int32_t base = o > 0 ? uid[o - 1] : 0;
  const int32_t u = uid[i] - 1 - base;
  g.job[t].counts[u] = ends[uid[i] - 1] - (u > 0 ? ends[uid[i] - 2] : 0);
}

// res[2j] = job j's U, res[2j + 1] = its first key.
__global__ void group_results(GroupArgs g, const int64_t* cat, const int32_t* pos,
                              const int32_t* uid, long long* res) {
  const int j = threadIdx.x;
  if (j >= g.jobs) return;
  const int64_t o = g.off[j], e = g.off[j + 1];
  res[2 * j] = uid[e - 1] - (o > 0 ? uid[o - 1] : 0);
  res[2 * j + 1] = cat[pos[o]];
}

// ---- gradient reduction over dedupe's order ----------------------------------------------------

// One warp per chunk of kChunk sorted entries: lanes own V consecutive columns of a 32 * V column
// block; the warp walks its entries in order, summing the rows of one key and writing the sum
// when the key changes: a plain store when the key's whole segment lies in the chunk (the only
// writer), an atomic add otherwise (hot keys span many chunks).
constexpr int kChunk = 32;

__device__ __forceinline__ void atomic_add4(float* g, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(g), v);
#else
  atomicAdd(g, v.x);
  atomicAdd(g + 1, v.y);
  atomicAdd(g + 2, v.z);
  atomicAdd(g + 3, v.w);
#endif
}

template <int V>
__device__ __forceinline__ void flush_grad(float* g, const float (&acc)[V], bool owned, bool vec,
                                           int64_t c, int64_t dim) {
  if (owned) {
    if (vec) {
      *reinterpret_cast<float4*>(g + c) = make_float4(acc[0], acc[1 % V], acc[2 % V], acc[3 % V]);
    } else {
      for (int k = 0; k < V; ++k)
        if (c + k < dim) g[c + k] = acc[k];
    }
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (vec) {
    atomicAdd(reinterpret_cast<float4*>(g + c),
              make_float4(acc[0], acc[1 % V], acc[2 % V], acc[3 % V]));
    return;
  }
#endif
  for (int k = 0; k < V; ++k)
    if (c + k < dim) atomicAdd(g + c + k, acc[k]);
}

template <int V>
__global__ void reduce_grad_kernel(const int32_t* order, int64_t n, int64_t u, const float* dout,
                                   int64_t dout_ld, float scale, float* grad, int64_t grad_ld,
                                   int64_t dim, uint8_t* touched) {
  const int64_t chunk = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t j0 = chunk * kChunk;
  if (j0 >= n) return;
  const int64_t j1 = min(n, j0 + kChunk);
  const int32_t* ends = order + n;
  const int64_t u0 = order[2 * n + j0];                          // dedupe's key of entry j0
  const int32_t my_pos = j0 + lane < j1 ? order[j0 + lane] : 0;  // broadcast below
  for (int64_t cb = 0; cb < dim; cb += 32 * V) {
    const int64_t c = cb + static_cast<int64_t>(lane) * V;
    const bool vec = V == 4 && c + 3 < dim;
    int64_t k = u0;
    int64_t start = k > 0 ? ends[k - 1] : 0, end = ends[k];
    float acc[V];
    for (int q = 0; q < V; ++q) acc[q] = 0.0f;
    for (int64_t j = j0; j < j1; ++j) {
      if (j >= end) {  // key k ends before entry j: write its sum
        if (c < dim) flush_grad<V>(grad + k * grad_ld, acc, start >= j0 && end <= j1, vec, c, dim);
        if (cb == 0 && lane == 0) touched[k] = 1;
        ++k;
        start = end;
        end = ends[k];
        for (int q = 0; q < V; ++q) acc[q] = 0.0f;
      }
      const int32_t p = __shfl_sync(0xffffffffu, my_pos, static_cast<int>(j - j0));
      const float* d = dout + static_cast<int64_t>(p) * dout_ld + c;
      if (vec) {
        const float4 x = *reinterpret_cast<const float4*>(d);
        acc[0] += x.x * scale;
        acc[1 % V] += x.y * scale;
        acc[2 % V] += x.z * scale;
        acc[3 % V] += x.w * scale;
      } else {
        for (int q = 0; q < V; ++q)
          if (c + q < dim) acc[q] += d[q] * scale;
      }
    }
    if (c < dim) flush_grad<V>(grad + k * grad_ld, acc, start >= j0 && end <= j1, vec, c, dim);
    if (cb == 0 && lane == 0) touched[k] = 1;
  }
}

// reduce_grad_kernel<4> with the chunk's rows loaded 8 at a time (independent 16-byte loads in
// flight); the additions are reduce_grad_kernel's, in the same order,
// so the sums are bitwise the same. dim, dout_ld, grad_ld multiples of 4, 16-byte aligned.
__global__ void reduce_grad_vec4_kernel(const int32_t* order, int64_t n, int64_t u,
                                        const float* dout, int64_t dout_ld, float scale,
                                        float* grad, int64_t grad_ld, int64_t dim,
                                        uint8_t* touched) {
  const int64_t chunk = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t j0 = chunk * kChunk;
  if (j0 >= n) return;
  const int64_t j1 = min(n, j0 + kChunk);
  const int32_t* ends = order + n;
  const int64_t u0 = order[2 * n + j0];                          // dedupe's key of entry j0
  const int32_t my_pos = j0 + lane < j1 ? order[j0 + lane] : 0;  // broadcast below
  for (int64_t cb = 0; cb < dim; cb += 128) {
    const int64_t c = cb + 4 * static_cast<int64_t>(lane);
    const bool active = c < dim;
    int64_t k = u0;
    int64_t start = k > 0 ? ends[k - 1] : 0, end = ends[k];
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t jb = j0; jb < j1; jb += 8) {
      float4 x[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const int src = static_cast<int>((jb + q < j1 ? jb + q : j1 - 1) - j0);
        const int32_t p = __shfl_sync(0xffffffffu, my_pos, src);
        x[q] = active && jb + q < j1
                   ? *reinterpret_cast<const float4*>(dout + static_cast<int64_t>(p) * dout_ld + c)
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const int64_t j = jb + q;
        if (j >= j1) break;
        if (j >= end) {  // key k ends before entry j: write its sum
          if (active)
            flush_grad<4>(grad + k * grad_ld, acc, start >= j0 && end <= j1, true, c, dim);
          if (touched && cb == 0 && lane == 0) touched[k] = 1;
          ++k;
          start = end;
          end = ends[k];
          acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
        }
        acc[0] += x[q].x * scale;
        acc[1] += x[q].y * scale;
        acc[2] += x[q].z * scale;
        acc[3] += x[q].w * scale;
      }
    }
    if (active) flush_grad<4>(grad + k * grad_ld, acc, start >= j0 && end <= j1, true, c, dim);
    if (touched && cb == 0 && lane == 0) touched[k] = 1;
  }
}

// backward_apply splits the unique keys by their lookup count: a key with at most kHot lookups
// (almost every key under a power law) is summed and updated by one warp of
// backward_keys_kernel, in position order, with its row's loads issued beside the gradient rows'
// and nothing written to grad; a hot key's lookups are summed by backward_hot_kernel, one warp per
// kChunk sorted entries adding its partial sums atomically into grad (zeroed by
// backward_keys_kernel), then updated by backward_hot_apply_kernel.
constexpr int kHot = 32;

__device__ __forceinline__ int32_t segment_begin(const int32_t* ends, int64_t k) {
  return k > 0 ? ends[k - 1] : 0;
}

// One warp per kChunk sorted entries: the entries of hot keys only (more than kHot lookups),
// their dout rows loaded 8 at a time and summed per key in sorted order; each run's sum added
// atomically to grad (16-byte atomics on sm_90). dim, dout_ld, grad_ld multiples of 4, aligned.
__global__ void backward_hot_kernel(const int32_t* order, int64_t n, const float* dout,
                                    int64_t dout_ld, float scale, float* grad, int64_t grad_ld,
                                    int64_t dim) {
  const int64_t j0 = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32 * kChunk;
  const int lane = threadIdx.x % 32;
  if (j0 >= n) return;
  const int32_t* ends = order + n;
  const int64_t j = j0 + lane;
  int32_t my_k = -1, my_pos = 0;
  bool hot = false;
  if (j < n) {
    my_k = order[2 * n + j];
    my_pos = order[j];
    hot = ends[my_k] - segment_begin(ends, my_k) > kHot;
  }
  const unsigned hot_mask = __ballot_sync(0xffffffffu, hot);
  if (hot_mask == 0) return;
  for (int64_t cb = 0; cb < dim; cb += 128) {
    const int64_t c = cb + 4 * static_cast<int64_t>(lane);
    const bool active = c < dim;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    int32_t cur = -1;
    for (unsigned m = hot_mask; m != 0;) {
      int src[8];
      float4 x[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) {  // the next 8 hot entries (warp-uniform)
        src[q] = m ? __ffs(m) - 1 : -1;
        if (m) m &= m - 1;
      }
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const int32_t p = __shfl_sync(0xffffffffu, my_pos, src[q] < 0 ? 0 : src[q]);
        x[q] = active && src[q] >= 0
                   ? *reinterpret_cast<const float4*>(dout + static_cast<int64_t>(p) * dout_ld + c)
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const int32_t k = __shfl_sync(0xffffffffu, my_k, src[q] < 0 ? 0 : src[q]);
        if (src[q] < 0) break;
        if (k != cur) {
          if (cur >= 0 && active) atomic_add4(grad + cur * grad_ld + c, acc);
          cur = k;
          acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        acc.x += x[q].x * scale;
        acc.y += x[q].y * scale;
        acc.z += x[q].z * scale;
        acc.w += x[q].w * scale;
      }
    }
    if (cur >= 0 && active) atomic_add4(grad + cur * grad_ld + c, acc);
  }
}

// ---- lookups --------------------------------------------------------------------------------

__global__ void find_kernel(TableView t, const int64_t* keys, int64_t n, int64_t* slots) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= n) return;
  const int64_t k = keys[i];
  const int64_t base = bucket_of(k, t.num_buckets) * t.bucket_size;
  const bool hit = k != kEmptyKey && lane < t.bucket_size && t.keys[base + lane] == k;
  const unsigned m = __ballot_sync(0xffffffffu, hit);
  if (lane == 0) slots[i] = m ? base + __ffs(m) - 1 : -1;
}

__global__ void touch_kernel(TableView t, const int64_t* slots, const int32_t* counts, int64_t n,
                             int64_t step, Eviction policy) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n || slots[i] < 0) return;
  const int64_t s = slots[i];
  t.last_step[s] = step;
  t.scores[s] = policy == Eviction::kLfu ? t.scores[s] + static_cast<uint64_t>(counts[i])
                                         : static_cast<uint64_t>(step);
}

// find_kernel + touch_kernel + admit_mask without a sketch, in one pass: 4 keys per warp, 8 lanes
// per key each comparing 4 slots of its bucket (one 256-byte read per key, as the warp-per-key
// probe, with a quarter of the warps); the lane that finds the key touches its slot; the
// group's first lane writes the slot and the admission mask (every missing key but the reserved
// one).
__global__ void find_touch_admit_kernel(TableView t, const int64_t* keys, const int32_t* counts,
                                        int64_t n, int64_t step, Eviction policy, int64_t* slots,
                                        uint8_t* mask) {
  const int64_t i0 = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32 * 4;
  const int lane = threadIdx.x % 32, g = lane / 8, sub = lane % 8;
  if (i0 >= n) return;
  const int64_t i = i0 + g;
  int64_t k = kEmptyKey, base = 0;
  int q = -1;
  if (i < n) {
    k = keys[i];
    base = bucket_of(k, t.num_buckets) * t.bucket_size;
    int64_t v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      v[e] = sub * 4 + e < t.bucket_size ? t.keys[base + sub * 4 + e] : kEmptyKey;
    if (k != kEmptyKey)
#pragma unroll
      for (int e = 3; e >= 0; --e)
        if (v[e] == k) q = e;
  }
  const unsigned bits = (__ballot_sync(0xffffffffu, q >= 0) >> (8 * g)) & 0xffu;
  if (q >= 0) {
    const int64_t s = base + sub * 4 + q;
    t.last_step[s] = step;
    t.scores[s] = policy == Eviction::kLfu ? t.scores[s] + static_cast<uint64_t>(counts[i])
                                           : static_cast<uint64_t>(step);
  }
  const int f = bits ? __ffs(bits) - 1 : 0;
  const int qf = __shfl_sync(0xffffffffu, q, 8 * g + f);
  if (sub == 0 && i < n) {
    slots[i] = bits ? base + f * 4 + qf : -1;
    mask[i] = !bits && k != kEmptyKey;
  }
}

// ---- admission ------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t* sketch_cell(uint32_t* sketch, int r, int64_t width,
                                                 int64_t key) {
  return sketch + r * width + (derive_seed(key_hash(key), r) & static_cast<uint64_t>(width - 1));
}

__global__ void sketch_add(uint32_t* sketch, int depth, int64_t width, const int64_t* keys,
                           const int32_t* counts, const int64_t* slots, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n || slots[i] >= 0) return;
  for (int r = 0; r < depth; ++r) {  // saturating add, as the CPU's
    uint32_t* c = sketch_cell(sketch, r, width, keys[i]);
    uint32_t old = *c, assumed;
    do {
      assumed = old;
      const uint64_t sum = static_cast<uint64_t>(assumed) + static_cast<uint64_t>(counts[i]);
      old = atomicCAS(c, assumed, sum > 0xffffffffull ? 0xffffffffu : static_cast<uint32_t>(sum));
    } while (old != assumed);
  }
}

// out (null: not counted) gets the admitted / rejected counts, one atomic per warp and counter.
__global__ void admit_mask(uint32_t* sketch, int depth, int64_t width, const int64_t* keys,
                           const int64_t* slots, int64_t n, int64_t threshold, uint8_t* mask,
                           unsigned long long* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  bool ok = false, missing = false;
  if (i < n) {
    missing = slots[i] < 0;
    if (missing) {
      uint32_t est = 0xffffffffu;
      for (int r = 0; sketch && r < depth; ++r)
        est = min(est, *sketch_cell(sketch, r, width, keys[i]));
      ok = static_cast<int64_t>(est) >= threshold && keys[i] != kEmptyKey;
    }
    mask[i] = ok;
  }
  if (!out) return;
  const unsigned adm = __ballot_sync(0xffffffffu, ok);
  const unsigned rej = __ballot_sync(0xffffffffu, missing && !ok);
  if (threadIdx.x % 32 == 0) {
    if (adm) atomicAdd(out, static_cast<unsigned long long>(__popc(adm)));
    if (rej) atomicAdd(out + 1, static_cast<unsigned long long>(__popc(rej)));
  }
}

// ---- insert ---------------------------------------------------------------------------------

// Insert without sorting: each key to insert pushes its index onto its bucket's list
// (t.heads[b], next[]); the key that found the list empty owns the bucket and places the
// bucket's keys in ascending index order (the CPU loop's order), then empties the list. A step
// whose keys are all present costs two passes over the keys and nothing per bucket.
__global__ void insert_link(TableView t, const int64_t* keys, const uint8_t* mask, int64_t n,
                            uint8_t* status, int64_t* evicted, int32_t* next, uint8_t* owner) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  evicted[i] = kEmptyKey;
  status[i] = kSkipped;
  owner[i] = 0;
  if (!mask[i]) return;
  const int64_t b = bucket_of(keys[i], t.num_buckets);
  const int32_t prev = atomicExch(t.heads + b, static_cast<int32_t>(i));
  next[i] = prev;
  owner[i] = prev == -1;
}

__global__ void insert_lists(TableView t, const int64_t* keys, const int32_t* counts, int64_t n,
                             int64_t step, Eviction policy, bool allow_evict, uint8_t* mask,
                             int64_t* slots, uint8_t* status, int64_t* evicted, const int32_t* next,
                             const uint8_t* owner, unsigned long long* out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= n || !owner[j]) return;
  const int64_t bkt = bucket_of(keys[j], t.num_buckets);
  const int64_t base = bkt * t.bucket_size;
  const int32_t first = t.heads[bkt];
  unsigned long long c[4] = {0, 0, 0, 0};
  for (int32_t bound = -1;;) {
    int32_t i = -1;  // the smallest index on the list above bound
    for (int32_t q = first; q != -1; q = next[q])
      if (q > bound && (i < 0 || q < i)) i = q;
    if (i < 0) break;
    bound = i;
    int64_t slot = -1;
    for (int s = 0; s < t.bucket_size && slot < 0; ++s)
      if (t.keys[base + s] == kEmptyKey) slot = base + s;
    uint8_t st = kInserted;
    if (slot < 0 && allow_evict) {
      for (int s = 0; s < t.bucket_size; ++s) {
        const int64_t p = base + s;
        if (t.last_step[p] == step) continue;
        if (slot < 0 || evicts_before(t.scores[p], t.keys[p], t.scores[slot], t.keys[slot]))
          slot = p;
      }
      st = slot < 0 ? kNoVictim : kEvicted;
      if (slot >= 0) evicted[i] = t.keys[slot];
    } else if (slot < 0) {
      st = kFull;
    }
    status[i] = st;
    mask[i] = st == kFull;
    slots[i] = slot;
    c[0] += st == kInserted || st == kEvicted;
    c[1] += st == kEvicted;
    c[2] += st == kFull;
    c[3] += st == kNoVictim;
    if (slot < 0) continue;
    t.keys[slot] = keys[i];
    t.scores[slot] =
        policy == Eviction::kLfu ? static_cast<uint64_t>(counts[i]) : static_cast<uint64_t>(step);
    t.last_step[slot] = step;
  }
  t.heads[bkt] = -1;  // empty for the next call
  for (int k = 0; k < 4; ++k)
    if (c[k]) atomicAdd(out + k, c[k]);
}

// One warp per key: keys not inserted (every key of a step whose keys are all present) leave
// after one status read.
__global__ void init_rows_kernel(TableView t, const int64_t* keys, const int64_t* slots,
                                 const uint8_t* status, int64_t n, uint64_t seed, float std) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= n || (status[i] != kInserted && status[i] != kEvicted)) return;
  float* row = t.values + slots[i] * t.row_width;
  const int64_t k = keys[i];
  if (t.bf16) {  // word c < state_off holds values 2c, 2c + 1 (zero past dim), then the state
    for (int64_t c = lane; c < t.row_width; c += 32) {
      if (c >= t.state_off) {
        row[c] = 0.0f;
        continue;
      }
      const uint32_t lo = 2 * c < t.dim ? bf16_bits(key_init_value(seed, k, 2 * c, std)) : 0u;
      const uint32_t hi =
          2 * c + 1 < t.dim ? bf16_bits(key_init_value(seed, k, 2 * c + 1, std)) : 0u;
      reinterpret_cast<uint32_t*>(row)[c] = lo | (hi << 16);
    }
    return;
  }
  for (int64_t c = lane; c < t.row_width; c += 32)
    row[c] = c < t.dim ? key_init_value(seed, k, c, std) : 0.0f;
}

__global__ void erase_kernel(TableView t, const int64_t* slots, int64_t n,
                             unsigned long long* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n || slots[i] < 0) return;
  t.keys[slots[i]] = kEmptyKey;
  t.scores[slots[i]] = 0;
  t.last_step[slots[i]] = -1;
  atomicAdd(out, 1ull);
}

__global__ void set_scores_kernel(TableView t, const int64_t* slots, const uint64_t* values,
                                  int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n && slots[i] >= 0) t.scores[slots[i]] = values[i];
}

__global__ void clear_kernel(TableView t) {
  const int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (q >= t.capacity()) return;
  t.keys[q] = kEmptyKey;
  t.scores[q] = 0;
  t.last_step[q] = -1;
  if (q < t.num_buckets) t.heads[q] = -1;
}

__global__ void rehash_kernel(TableView from, TableView to) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= from.capacity() * from.row_width) return;
  const int64_t q = e / from.row_width, c = e % from.row_width;
  const int64_t k = from.keys[q];
  if (k == kEmptyKey) return;
  const int64_t d = bucket_of(k, to.num_buckets) * to.bucket_size + q % from.bucket_size;
  if (c == 0) {
    to.keys[d] = k;
    to.scores[d] = from.scores[q];
    to.last_step[d] = from.last_step[q];
  }
  to.values[d * to.row_width + c] = from.values[q * from.row_width + c];
}

// ---- rows -----------------------------------------------------------------------------------

__global__ void gather_kernel(RowSpace rs, const int64_t* refs, const int64_t* keys, int64_t n,
                              float* out, int64_t out_ld, bool init_missing, uint64_t seed,
                              float std, const int32_t* inverse) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * rs.dim) return;
  const int64_t i = e / rs.dim, c = e % rs.dim;
  const int64_t u = inverse ? inverse[i] : i;
  const int64_t r = refs[u];
  if (r >= 0) {
    out[i * out_ld + c] = row_value(row_ptr(rs, r), c, rs.bf16);
  } else {
    const float v = init_missing ? key_init_value(seed, keys[u], c, std) : 0.0f;
    out[i * out_ld + c] = rs.bf16 ? round_bf16(v) : v;
  }
}

// gather for dim a multiple of 4 (16-byte aligned rows and output): one warp per kGatherRows
// output rows, lanes holding 4 columns of a 128-column block; the rows' refs are loaded once per
// warp and their 16-byte loads issued 8 at a time, so each warp keeps 8 rows in flight instead of
// one dependent chain (inverse -> ref -> row) per thread. With inverse (the lookups' output,
// written once and read by the next op) the stores bypass L2 residency (evict-first), keeping
// the table's hot rows there.
constexpr int kGatherRows = 16;

__global__ void gather_rows_kernel(RowSpace rs, const int64_t* refs, const int64_t* keys, int64_t n,
                                   float* out, int64_t out_ld, bool init_missing, uint64_t seed,
                                   float std, const int32_t* inverse) {
  const int64_t i0 =
      (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32 * kGatherRows;
  const int lane = threadIdx.x % 32;
  if (i0 >= n) return;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kGatherRows), n - i0));
  int64_t my_u = 0, my_r = -1;
  if (lane < rows) {
    my_u = inverse ? inverse[i0 + lane] : i0 + lane;
    my_r = refs[my_u];
  }
  const int64_t d = rs.dim;
  for (int64_t cb = 0; cb < d; cb += 128) {
    const int64_t c = cb + 4 * static_cast<int64_t>(lane);
    const bool active = c < d;
    for (int q0 = 0; q0 < rows; q0 += 8) {
      float4 v[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const int src = min(q0 + q, rows - 1);
        const int64_t r = __shfl_sync(0xffffffffu, my_r, src);
        const int64_t u = __shfl_sync(0xffffffffu, my_u, src);
        v[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (!active || q0 + q >= rows) continue;
        if (r >= 0) {
          v[q] = *reinterpret_cast<const float4*>(row_ptr(rs, r) + c);
        } else if (init_missing) {
          const int64_t k = keys[u];
          v[q] =
              make_float4(key_init_value(seed, k, c, std), key_init_value(seed, k, c + 1, std),
                          key_init_value(seed, k, c + 2, std), key_init_value(seed, k, c + 3, std));
        }
      }
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        if (!active || q0 + q >= rows) continue;
        float4* o = reinterpret_cast<float4*>(out + (i0 + q0 + q) * out_ld + c);
        if (inverse)
          __stcs(o, v[q]);
        else
          *o = v[q];
      }
    }
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

struct OptArgs {
  RowSpace rs;
  const int64_t* refs;
  float* grad;
  int64_t grad_ld;
  uint8_t* touched;
  int64_t n;
  float lr, beta1, beta2, eps, bc1, bc2;
  const double* guard;
  int64_t guard_n;
  uint8_t* dirty;
};

// Element c of an Adam / SGD update (the expressions of ops/cuda/embedding.cu sparse_opt_row).
template <SparseOptimizerSpec::Kind K>
__device__ __forceinline__ void opt_elem(const OptArgs& a, float gc, float& w, float& m, float& v) {
  if constexpr (K == SparseOptimizerSpec::kAdam) {
    hstu::cuda::sparse_adam_elem(gc, w, m, v, a.lr, a.beta1, a.beta2, a.eps, a.bc1, a.bc2);
  } else {
    w -= a.lr * gc;
  }
}

// One warp's update of row w [d] (Adam: m at w + d, v at w + 2d) from gradient g [d] with
// 16-byte accesses, lane owning columns 4 lane + 128 k: opt_elem per element, so bitwise the
// scalar loop's results.
template <SparseOptimizerSpec::Kind K>
__device__ __forceinline__ void opt_row_vec4(const OptArgs& a, const float* g, float* w, int64_t d,
                                             int lane) {
  for (int64_t c = 4 * lane; c < d; c += 128) {
    const float4 gv = *reinterpret_cast<const float4*>(g + c);
    float4 wv = *reinterpret_cast<float4*>(w + c);
    float4 mv = make_float4(0, 0, 0, 0), vv = mv;
    if constexpr (K == SparseOptimizerSpec::kAdam) {
      mv = *reinterpret_cast<float4*>(w + d + c);
      vv = *reinterpret_cast<float4*>(w + 2 * d + c);
    }
    opt_elem<K>(a, gv.x, wv.x, mv.x, vv.x);
    opt_elem<K>(a, gv.y, wv.y, mv.y, vv.y);
    opt_elem<K>(a, gv.z, wv.z, mv.z, vv.z);
    opt_elem<K>(a, gv.w, wv.w, mv.w, vv.w);
    *reinterpret_cast<float4*>(w + c) = wv;
    if constexpr (K == SparseOptimizerSpec::kAdam) {
      *reinterpret_cast<float4*>(w + d + c) = mv;
      *reinterpret_cast<float4*>(w + 2 * d + c) = vv;
    }
  }
}

// One warp per row; the math of ops/cuda/embedding.cu sparse_opt_row, state inside the row.
// V = 4: Adam / SGD with 16-byte accesses (dim, row_width, grad_ld multiples of 4, aligned
// bases); the per-element math is the same, so the results are bitwise those of V = 1.
template <SparseOptimizerSpec::Kind K, int V>
__global__ void apply_kernel(OptArgs a) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= a.n) return;
  float* g = a.grad + i * a.grad_ld;
  const int64_t d = a.rs.dim;
  const int64_t r = a.refs[i];
  const bool skip = a.guard && !all_finite(a.guard, a.guard_n);
  if constexpr (V == 4) {
    static_assert(K != SparseOptimizerSpec::kRowWiseAdagrad, "row sums keep V = 1");
    if (a.touched[i] && r >= 0 && !skip) {
      float* w = row_ptr(a.rs, r);
      opt_row_vec4<K>(a, g, w, d, lane);
      if (lane == 0 && a.dirty && r < a.rs.n_a) a.dirty[r] = 1;
    }
    __syncwarp();
    for (int64_t c = 4 * lane; c < d; c += 128)
      *reinterpret_cast<float4*>(g + c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (lane == 0) a.touched[i] = 0;
    return;
  }
  if (a.touched[i] && r >= 0 && !skip) {
    // The embedding element read as f32 (bf16 widened), updated in f32 and stored back (bf16:
    // rounded to nearest even, each lane its own 2-byte values); the state is f32 at state_off.
    float* w = row_ptr(a.rs, r);
    float* s = w + a.rs.state_off;
    const bool bf = a.rs.bf16;
    if constexpr (K == SparseOptimizerSpec::kAdam) {
      float* m = s;
      float* v = s + d;
      for (int64_t c = lane; c < d; c += 32) {
        float wc = row_value(w, c, bf);
        opt_elem<K>(a, g[c], wc, m[c], v[c]);
        set_row_value(w, c, wc, bf);
      }
    } else if constexpr (K == SparseOptimizerSpec::kRowWiseAdagrad) {
      float ss = 0.0f;
      for (int64_t c = lane; c < d; c += 32) ss += g[c] * g[c];
      ss = warp_sum(ss);
      const float st = s[0] + ss / static_cast<float>(d);
      __syncwarp();
      if (lane == 0) s[0] = st;
      const float mult = a.lr / (sqrtf(st) + a.eps);
      for (int64_t c = lane; c < d; c += 32)
        set_row_value(w, c, row_value(w, c, bf) - mult * g[c], bf);
    } else {
      float m = 0.0f, v = 0.0f;
      for (int64_t c = lane; c < d; c += 32) {
        float wc = row_value(w, c, bf);
        opt_elem<K>(a, g[c], wc, m, v);
        set_row_value(w, c, wc, bf);
      }
    }
    if (lane == 0 && a.dirty && r < a.rs.n_a) a.dirty[r] = 1;
  }
  __syncwarp();
  for (int64_t c = lane; c < d; c += 32) g[c] = 0.0f;
  if (lane == 0) a.touched[i] = 0;
}

// The rest of OptArgs for backward_apply (a.n = U, a.grad scratch).
struct BwdArgs {
  const int32_t* order;  // dedupe's [3n]
  int64_t n;
  const float* dout;
  int64_t dout_ld;
  float scale;
};

// backward_apply for keys with at most kHot lookups: one warp per unique key sums its dout rows
// in sorted (= position) order, 8 loads in flight, with the row's embedding (and Adam state)
// loaded beside them, and updates the row with opt_elem (the sum is the value reduce_grad would
// store, so the update is apply_kernel<K, 4>'s). Hot keys' grad rows are zeroed here for
// backward_hot_kernel's atomics. Nothing else touches grad.
constexpr int kKeyBatch = 4;  // dout rows in flight per warp

template <SparseOptimizerSpec::Kind K>
__global__ void __launch_bounds__(256, 5) backward_keys_kernel(OptArgs a, BwdArgs b) {
  const int64_t k = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (k >= a.n) return;
  const int32_t* ends = b.order + b.n;
  const int32_t s = segment_begin(ends, k), cnt = ends[k] - s;
  const int64_t d = a.rs.dim;
  if (cnt > kHot) {
    float* g = a.grad + k * a.grad_ld;
    for (int64_t c = 4 * static_cast<int64_t>(lane); c < d; c += 128)
      *reinterpret_cast<float4*>(g + c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return;
  }
  const int64_t r = a.refs[k];
  if (r < 0 || (a.guard && !all_finite(a.guard, a.guard_n))) return;
  float* w = row_ptr(a.rs, r);
  const int32_t my_pos = lane < cnt ? b.order[s + lane] : 0;
  for (int64_t c = 4 * static_cast<int64_t>(lane); c - 4 * lane < d; c += 128) {
    const bool active = c < d;
    float4 wv = make_float4(0, 0, 0, 0), mv = wv, vv = wv;
    if (active) {
      wv = *reinterpret_cast<const float4*>(w + c);
      if constexpr (K == SparseOptimizerSpec::kAdam) {
        mv = *reinterpret_cast<const float4*>(w + d + c);
        vv = *reinterpret_cast<const float4*>(w + 2 * d + c);
      }
    }
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int jb = 0; jb < cnt; jb += kKeyBatch) {
      float4 x[kKeyBatch];
#pragma unroll
      for (int q = 0; q < kKeyBatch; ++q) {
        const int32_t p = __shfl_sync(0xffffffffu, my_pos, (jb + q) & 31);
        x[q] =
            active && jb + q < cnt
                ? *reinterpret_cast<const float4*>(b.dout + static_cast<int64_t>(p) * b.dout_ld + c)
                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int q = 0; q < kKeyBatch; ++q) {
        if (jb + q >= cnt) break;
        acc.x += x[q].x * b.scale;
        acc.y += x[q].y * b.scale;
        acc.z += x[q].z * b.scale;
        acc.w += x[q].w * b.scale;
      }
    }
    if (!active) continue;
    opt_elem<K>(a, acc.x, wv.x, mv.x, vv.x);
    opt_elem<K>(a, acc.y, wv.y, mv.y, vv.y);
    opt_elem<K>(a, acc.z, wv.z, mv.z, vv.z);
    opt_elem<K>(a, acc.w, wv.w, mv.w, vv.w);
    *reinterpret_cast<float4*>(w + c) = wv;
    if constexpr (K == SparseOptimizerSpec::kAdam) {
      *reinterpret_cast<float4*>(w + d + c) = mv;
      *reinterpret_cast<float4*>(w + 2 * d + c) = vv;
    }
  }
  if (lane == 0 && a.dirty && r < a.rs.n_a) a.dirty[r] = 1;
}

// backward_apply's update of the hot keys (more than kHot lookups) from the sums
// backward_hot_kernel left in grad: apply_kernel<K, 4>'s update, grad left as it is (scratch).
template <SparseOptimizerSpec::Kind K>
__global__ void backward_hot_apply_kernel(OptArgs a, BwdArgs b) {
  const int64_t k = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (k >= a.n) return;
  const int32_t* ends = b.order + b.n;
  if (ends[k] - segment_begin(ends, k) <= kHot) return;
  const int64_t r = a.refs[k];
  if (r < 0 || (a.guard && !all_finite(a.guard, a.guard_n))) return;
  float* w = row_ptr(a.rs, r);
  opt_row_vec4<K>(a, a.grad + k * a.grad_ld, w, a.rs.dim, lane);
  if (lane == 0 && a.dirty && r < a.rs.n_a) a.dirty[r] = 1;
}

__global__ void copy_rows_kernel(const float* src, const int64_t* src_slots, float* dst,
                                 const int64_t* dst_slots, int64_t n, int64_t row_width,
                                 const uint8_t* only_dirty) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * row_width) return;
  const int64_t i = e / row_width, c = e % row_width;
  const int64_t s = src_slots[i], d = dst_slots[i];
  if (s < 0 || d < 0 || (only_dirty && !only_dirty[s])) return;
  dst[d * row_width + c] = src[s * row_width + c];
}

// After copy_rows_kernel (stream order): the destination rows are clean.
__global__ void clear_dirty_kernel(const int64_t* src_slots, const int64_t* dst_slots, int64_t n,
                                   const uint8_t* only_dirty, uint8_t* clear_dirty) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t s = src_slots[i], d = dst_slots[i];
  if (s < 0 || d < 0 || (only_dirty && !only_dirty[s])) return;
  clear_dirty[d] = 0;
}

__global__ void miss_mask_kernel(const int64_t* cs, const int64_t* ss, int64_t n, uint8_t* mask) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) mask[i] = cs[i] < 0 && ss[i] >= 0;
}

__global__ void tier_refs_kernel(const int64_t* cs, const int64_t* ss, const uint8_t* miss,
                                 int64_t n, int64_t n_cache, int64_t* refs, int64_t* fill_src) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t c = cs[i], s = ss[i];
  refs[i] = c >= 0 ? c : (s >= 0 ? n_cache + s : -1);
  if (fill_src) fill_src[i] = miss && miss[i] && c >= 0 ? s : -1;
}

struct Occupied {
  const int64_t* keys;
  __host__ __device__ bool operator()(int64_t q) const { return keys[q] != kEmptyKey; }
};

__global__ void gather_keys(const int64_t* table_keys, const int64_t* slots, int64_t m,
                            int64_t* keys) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < m) keys[i] = table_keys[slots[i]];
}

__global__ void iota_kernel(int32_t* p, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = static_cast<int32_t>(i);
}

}  // namespace

int64_t dedupe(Ctx& ctx, const int64_t* keys, int64_t n, int64_t* unique, int32_t* inverse,
               int32_t* counts, int64_t* first_key, int32_t* order) {
  if (n == 0) return 0;
  const DedupeJob job{keys, n, unique, inverse, counts, order};
  int64_t u_hash = 0;
  if (hash_dedupe_many(ctx, &job, 1, &u_hash, first_key)) return u_hash;
  const int nn = static_cast<int>(n);
  size_t sort_bytes = 0, scan_bytes = 0;
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, keys, static_cast<int64_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), nn));
  HSTU_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes,
                                                static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), nn));
  Workspace& ws =
      workspace(ctx, static_cast<size_t>(n) * 28 + std::max(sort_bytes, scan_bytes) + 1024);
  int64_t* sorted = ws.take<int64_t>(static_cast<size_t>(n));
  int32_t* pos_in = ws.take<int32_t>(static_cast<size_t>(n));
  int32_t* pos = ws.take<int32_t>(static_cast<size_t>(n));
  if (order) pos = order;  // the sorted positions are kept for reduce_grad
  int32_t* head = ws.take<int32_t>(static_cast<size_t>(n));
  int32_t* uid = ws.take<int32_t>(static_cast<size_t>(n));
  void* temp = ws.take<char>(std::max(sort_bytes, scan_bytes));
  const cudaStream_t st = stream_of(ctx);
  iota_kernel<<<blocks_for(n, 256), 256, 0, st>>>(pos_in, n);
  HSTU_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp, sort_bytes, keys, sorted, pos_in, pos, nn, 0, 64, st));
  head_flags<<<blocks_for(n, 256), 256, 0, st>>>(sorted, n, head);
  HSTU_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp, scan_bytes, head, uid, nn, st));
  int32_t* ends = order ? order + n : head;  // (the flags are consumed by the scan)
  dedupe_scatter<<<blocks_for(n, 256), 256, 0, st>>>(sorted, pos, uid, n, unique, inverse, ends,
                                                     order ? order + 2 * n : nullptr);
  dedupe_counts<<<blocks_for(n, 256), 256, 0, st>>>(ends, uid, n, counts);
  HSTU_CUDA_CHECK_LAUNCH();
  int32_t u = 0;
  HSTU_CUDA_CHECK(cudaMemcpyAsync(ws.host(), uid + n - 1, 4, cudaMemcpyDeviceToHost, st));
  HSTU_CUDA_CHECK(cudaMemcpyAsync(ws.host() + 1, unique, 8, cudaMemcpyDeviceToHost, st));
  sync(ctx);
  std::memcpy(&u, ws.host(), 4);
  std::memcpy(first_key, ws.host() + 1, 8);
  return u;
}

void dedupe_many(Ctx& ctx, const DedupeJob* jobs, int num_jobs, int64_t* u, int64_t* first_key) {
  GroupArgs g{};
  int64_t n = 0;
  for (int j = 0; j < num_jobs; ++j) {
    HSTU_CHECK(jobs[j].n >= 1, "dedupe_many: job ", j, " has no lookups");
    g.job[g.jobs] = jobs[j];
    g.off[g.jobs++] = n;
    n += jobs[j].n;
  }
  g.off[g.jobs] = n;
  if (n == 0) return;
  if (hash_dedupe_many(ctx, jobs, num_jobs, u, first_key)) return;
  HSTU_CHECK(n < (int64_t{1} << 31), "dedupe_many: ", n, " lookups (at most 2^31 - 1)");
  const int nn = static_cast<int>(n);
  size_t sort_bytes = 0, tag_bytes = 0, scan_bytes = 0;
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), nn));
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, tag_bytes, static_cast<const uint8_t*>(nullptr), static_cast<uint8_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), nn));
  HSTU_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes,
                                                static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), nn));
  const size_t temp_bytes = std::max({sort_bytes, tag_bytes, scan_bytes});
  Workspace& ws =
      workspace(ctx, static_cast<size_t>(n) * 42 + temp_bytes + 16 * kMaxDedupeJobs + 2048);
  int64_t* cat = ws.take<int64_t>(static_cast<size_t>(n));
  int64_t* sorted = ws.take<int64_t>(static_cast<size_t>(n));
  int32_t* pos_in = ws.take<int32_t>(static_cast<size_t>(n));
  int32_t* pos1 = ws.take<int32_t>(static_cast<size_t>(n));
  int32_t* pos = ws.take<int32_t>(static_cast<size_t>(n));
  uint8_t* tag_in = ws.take<uint8_t>(static_cast<size_t>(n));
  uint8_t* tag = ws.take<uint8_t>(static_cast<size_t>(n));
  int32_t* head = ws.take<int32_t>(static_cast<size_t>(n));
  int32_t* uid = ws.take<int32_t>(static_cast<size_t>(n));
  long long* res = ws.take<long long>(2 * kMaxDedupeJobs);
  void* temp = ws.take<char>(temp_bytes);
  const cudaStream_t st = stream_of(ctx);
  for (int j = 0; j < g.jobs; ++j)
    HSTU_CUDA_CHECK(cudaMemcpyAsync(cat + g.off[j], g.job[j].keys,
                                    static_cast<size_t>(g.job[j].n) * 8, cudaMemcpyDeviceToDevice,
                                    st));
  iota_kernel<<<blocks_for(n, 256), 256, 0, st>>>(pos_in, n);
  // (key, position) order over all lookups, then a stable pass by job: (job, key, position).
  HSTU_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp, sort_bytes, cat, sorted, pos_in, pos1, nn, 0, 64, st));
  job_tags<<<blocks_for(n, 256), 256, 0, st>>>(g, pos1, n, tag_in);
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, tag_bytes, tag_in, tag, pos1, pos, nn, 0,
                                                  std::max(1, bits_for(g.jobs - 1)), st));
  group_heads<<<blocks_for(n, 256), 256, 0, st>>>(g, cat, pos, tag, n, head);
  HSTU_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp, scan_bytes, head, uid, nn, st));
  int32_t* ends = head;  // the flags are consumed by the scan
  group_scatter<<<blocks_for(n, 256), 256, 0, st>>>(g, cat, pos, tag, uid, n, ends);
  group_counts<<<blocks_for(n, 256), 256, 0, st>>>(g, pos, tag, uid, n, ends);
  group_results<<<1, kMaxDedupeJobs, 0, st>>>(g, cat, pos, uid, res);
  HSTU_CUDA_CHECK_LAUNCH();
  static thread_local long long* host = nullptr;  // page-locked, one per thread
  if (!host) HSTU_CUDA_CHECK(cudaHostAlloc(&host, 16 * kMaxDedupeJobs, cudaHostAllocDefault));
  HSTU_CUDA_CHECK(
      cudaMemcpyAsync(host, res, 16 * static_cast<size_t>(g.jobs), cudaMemcpyDeviceToHost, st));
  sync(ctx);
  for (int j = 0; j < num_jobs; ++j) {
    u[j] = host[2 * j];
    first_key[j] = host[2 * j + 1];
  }
}

void reduce_grad(Ctx& ctx, const int32_t* order, int64_t n, int64_t u, const float* dout,
                 int64_t dout_ld, float scale, float* grad, int64_t grad_ld, int64_t dim,
                 uint8_t* touched) {
  if (n == 0 || u == 0 || dim == 0) return;
  const unsigned grid = blocks_for((n + kChunk - 1) / kChunk * 32, 256);
  const bool vec4 = dim % 4 == 0 && dout_ld % 4 == 0 && grad_ld % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(dout) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(grad) % 16 == 0;
  if (vec4)
    reduce_grad_vec4_kernel<<<grid, 256, 0, stream_of(ctx)>>>(order, n, u, dout, dout_ld, scale,
                                                              grad, grad_ld, dim, touched);
  else
    reduce_grad_kernel<1><<<grid, 256, 0, stream_of(ctx)>>>(order, n, u, dout, dout_ld, scale, grad,
                                                            grad_ld, dim, touched);
  HSTU_CUDA_CHECK_LAUNCH();
}

void find(Ctx& ctx, const TableView& t, const int64_t* keys, int64_t n, int64_t* slots) {
  if (n == 0) return;
  find_kernel<<<blocks_for(n * 32, 256), 256, 0, stream_of(ctx)>>>(t, keys, n, slots);
  HSTU_CUDA_CHECK_LAUNCH();
}

void touch(Ctx& ctx, const TableView& t, const int64_t* slots, const int32_t* counts, int64_t n,
           int64_t step, Eviction policy) {
  if (n == 0) return;
  touch_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(t, slots, counts, n, step, policy);
  HSTU_CUDA_CHECK_LAUNCH();
}

void find_touch_admit(Ctx& ctx, const TableView& t, const int64_t* keys, const int32_t* counts,
                      int64_t n, int64_t step, Eviction policy, int64_t* slots, uint8_t* mask) {
  if (n == 0) return;
  find_touch_admit_kernel<<<blocks_for((n + 3) / 4 * 32, 256), 256, 0, stream_of(ctx)>>>(
      t, keys, counts, n, step, policy, slots, mask);
  HSTU_CUDA_CHECK_LAUNCH();
}

AdmitCounts admit(Ctx& ctx, uint32_t* sketch, int depth, int64_t width, const int64_t* keys,
                  const int32_t* counts, const int64_t* slots, int64_t n, int64_t threshold,
                  uint8_t* mask, bool need_counts) {
  if (n == 0) return {};
  Workspace& ws = workspace(ctx, 64);
  unsigned long long* dc = ws.take<unsigned long long>(4);
  if (need_counts) HSTU_CUDA_CHECK(cudaMemsetAsync(dc, 0, 32, stream_of(ctx)));
  if (sketch)
    sketch_add<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(sketch, depth, width, keys, counts,
                                                               slots, n);
  admit_mask<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(
      sketch, depth, width, keys, slots, n, threshold, mask, need_counts ? dc : nullptr);
  HSTU_CUDA_CHECK_LAUNCH();
  if (!need_counts) return {-1, -1};
  unsigned long long h[4];
  read_counters(ctx, ws, dc, 2, h);
  return {static_cast<int64_t>(h[0]), static_cast<int64_t>(h[1])};
}

InsertCounts insert(Ctx& ctx, const TableView& t, const int64_t* keys, const int32_t* counts,
                    int64_t n, int64_t step, Eviction policy, bool allow_evict, uint8_t* mask,
                    int64_t* slots, uint8_t* status, int64_t* evicted_keys, uint64_t* pending) {
  if (n == 0) return {};
  HSTU_CHECK(n < (int64_t{1} << 31), "dynamic table insert: ", n, " keys (at most 2^31 - 1)");
  HSTU_CHECK(t.heads != nullptr, "dynamic table insert: the table view has no bucket lists");
  Workspace& ws = workspace(ctx, static_cast<size_t>(n) * 5 + 1024);
  int32_t* next = ws.take<int32_t>(static_cast<size_t>(n));
  uint8_t* owner = ws.take<uint8_t>(static_cast<size_t>(n));
  unsigned long long* dc = ws.take<unsigned long long>(4);
  const cudaStream_t st = stream_of(ctx);
  unsigned long long* out = reinterpret_cast<unsigned long long*>(pending);
  static_assert(kPendingInserted == 0 && kPendingNoVictim == 3, "insert_lists' counter order");
  if (!pending) {
    out = dc;
    HSTU_CUDA_CHECK(cudaMemsetAsync(dc, 0, 32, st));
  }
  insert_link<<<blocks_for(n, 256), 256, 0, st>>>(t, keys, mask, n, status, evicted_keys, next,
                                                  owner);
  insert_lists<<<blocks_for(n, 128), 128, 0, st>>>(t, keys, counts, n, step, policy, allow_evict,
                                                   mask, slots, status, evicted_keys, next, owner,
                                                   out);
  HSTU_CUDA_CHECK_LAUNCH();
  if (pending) return {};  // counted on the device; read_pending settles them
  unsigned long long h[4];
  read_counters(ctx, ws, dc, 4, h);
  InsertCounts r;
  r.inserted = static_cast<int64_t>(h[0]);
  r.evicted = static_cast<int64_t>(h[1]);
  r.full = static_cast<int64_t>(h[2]);
  r.no_victim = static_cast<int64_t>(h[3]);
  return r;
}

void init_rows(Ctx& ctx, const TableView& t, const int64_t* keys, const int64_t* slots,
               const uint8_t* status, int64_t n, uint64_t table_seed, float init_std) {
  if (n == 0) return;
  init_rows_kernel<<<blocks_for(n * 32, 256), 256, 0, stream_of(ctx)>>>(t, keys, slots, status, n,
                                                                        table_seed, init_std);
  HSTU_CUDA_CHECK_LAUNCH();
}

int64_t erase(Ctx& ctx, const TableView& t, const int64_t* keys, int64_t n, uint64_t* pending) {
  if (n == 0) return 0;
  Workspace& ws = workspace(ctx, static_cast<size_t>(n) * 8 + 64);
  int64_t* slots = ws.take<int64_t>(static_cast<size_t>(n));
  unsigned long long* dc = ws.take<unsigned long long>(1);
  cuda::find(ctx, t, keys, n, slots);
  if (pending) {
    erase_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(
        t, slots, n, reinterpret_cast<unsigned long long*>(pending) + kPendingErased);
    HSTU_CUDA_CHECK_LAUNCH();
    return 0;
  }
  HSTU_CUDA_CHECK(cudaMemsetAsync(dc, 0, 8, stream_of(ctx)));
  erase_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(t, slots, n, dc);
  HSTU_CUDA_CHECK_LAUNCH();
  unsigned long long h[1];
  read_counters(ctx, ws, dc, 1, h);
  return static_cast<int64_t>(h[0]);
}

void read_pending(Ctx&, uint64_t* pending, uint64_t* out) {
  // The whole device: the stream that last added may be gone by the time counters are read.
  HSTU_CUDA_CHECK(cudaDeviceSynchronize());
  HSTU_CUDA_CHECK(cudaMemcpy(out, pending, kPendingWords * 8, cudaMemcpyDeviceToHost));
  HSTU_CUDA_CHECK(cudaMemset(pending, 0, kPendingWords * 8));
  HSTU_CUDA_CHECK(cudaDeviceSynchronize());
}

void rehash_double(Ctx& ctx, const TableView& from, const TableView& to) {
  HSTU_CHECK(to.num_buckets == 2 * from.num_buckets && to.bucket_size == from.bucket_size &&
                 to.row_width == from.row_width && from.row_width > 0,
             "dynamic table rehash: the new table must have twice the buckets");
  rehash_kernel<<<blocks_for(from.capacity() * from.row_width, 256), 256, 0, stream_of(ctx)>>>(from,
                                                                                               to);
  HSTU_CUDA_CHECK_LAUNCH();
  sync(ctx);  // the caller frees the old storage next
}

void gather(Ctx& ctx, const RowSpace& rs, const int64_t* refs, const int64_t* keys, int64_t n,
            float* out, int64_t out_ld, bool init_missing, uint64_t table_seed, float init_std,
            const int32_t* inverse) {
  if (n == 0) return;
  // bf16 rows: the element-wise kernel (widening each value).
  if (!rs.bf16 && rs.dim % 4 == 0 && rs.row_width % 4 == 0 && out_ld % 4 == 0 && aligned16(out) &&
      aligned16(rs.a) && (rs.b == nullptr || aligned16(rs.b))) {
    const int64_t warps = (n + kGatherRows - 1) / kGatherRows;
    gather_rows_kernel<<<blocks_for(warps * 32, 256), 256, 0, stream_of(ctx)>>>(
        rs, refs, keys, n, out, out_ld, init_missing, table_seed, init_std, inverse);
    HSTU_CUDA_CHECK_LAUNCH();
    return;
  }
  gather_kernel<<<blocks_for(n * rs.dim, 256), 256, 0, stream_of(ctx)>>>(
      rs, refs, keys, n, out, out_ld, init_missing, table_seed, init_std, inverse);
  HSTU_CUDA_CHECK_LAUNCH();
}

void apply_optimizer(Ctx& ctx, const RowSpace& rs, const int64_t* refs, float* grad,
                     int64_t grad_ld, uint8_t* touched, int64_t n, const SparseOptimizerSpec& spec,
                     uint8_t* dirty) {
  if (n == 0) return;
  OptArgs a{};
  a.rs = rs, a.refs = refs, a.grad = grad, a.grad_ld = grad_ld, a.touched = touched, a.n = n;
  a.lr = spec.lr, a.beta1 = spec.beta1, a.beta2 = spec.beta2, a.eps = spec.eps;
  a.dirty = dirty;
  if (!spec.skip_if_nonfinite.empty()) {
    HSTU_CHECK(spec.skip_if_nonfinite.device == Device::kCUDA &&
                   spec.skip_if_nonfinite.dtype == DType::kF64,
               "dynamic table optimiser: skip_if_nonfinite must be f64 on the device, got ",
               spec.skip_if_nonfinite.str());
    a.guard = spec.skip_if_nonfinite.as<double>();
    a.guard_n = spec.skip_if_nonfinite.numel();
  }
  const unsigned grid = blocks_for(n * 32, 256);
  const bool vec4 = !rs.bf16 && rs.dim % 4 == 0 && rs.row_width % 4 == 0 && grad_ld % 4 == 0 &&
                    aligned16(grad) && aligned16(rs.a) && (rs.b == nullptr || aligned16(rs.b));
  const cudaStream_t st = stream_of(ctx);
  switch (spec.kind) {
    case SparseOptimizerSpec::kAdam:
      HSTU_CHECK(spec.step >= 1, "dynamic table Adam: step is 1-based, got ", spec.step);
      a.bc1 = static_cast<float>(1.0 - std::pow(double(spec.beta1), double(spec.step)));
      a.bc2 = static_cast<float>(1.0 - std::pow(double(spec.beta2), double(spec.step)));
      if (vec4)
        apply_kernel<SparseOptimizerSpec::kAdam, 4><<<grid, 256, 0, st>>>(a);
      else
        apply_kernel<SparseOptimizerSpec::kAdam, 1><<<grid, 256, 0, st>>>(a);
      break;
    case SparseOptimizerSpec::kRowWiseAdagrad:
      apply_kernel<SparseOptimizerSpec::kRowWiseAdagrad, 1><<<grid, 256, 0, st>>>(a);
      break;
    case SparseOptimizerSpec::kSgd:
      if (vec4)
        apply_kernel<SparseOptimizerSpec::kSgd, 4><<<grid, 256, 0, st>>>(a);
      else
        apply_kernel<SparseOptimizerSpec::kSgd, 1><<<grid, 256, 0, st>>>(a);
      break;
  }
  HSTU_CUDA_CHECK_LAUNCH();
}

void backward_apply(Ctx& ctx, const int32_t* order, int64_t n, int64_t u, const float* dout,
                    int64_t dout_ld, float scale, const RowSpace& rs, const int64_t* refs,
                    float* grad, int64_t grad_ld, uint8_t* touched, const SparseOptimizerSpec& spec,
                    uint8_t* dirty) {
  if (n == 0 || u == 0) return;
  const cudaStream_t st = stream_of(ctx);
  // bf16 rows: the two-pass path (apply_kernel<K, 1> widens and rounds each value).
  const bool vec4 = !rs.bf16 && rs.dim % 4 == 0 && rs.row_width % 4 == 0 && grad_ld % 4 == 0 &&
                    dout_ld % 4 == 0 && aligned16(dout) && aligned16(grad) && aligned16(rs.a) &&
                    (rs.b == nullptr || aligned16(rs.b));
  if (!vec4) {  // zero the scratch, then the two-pass path (the same sums and updates)
    HSTU_CUDA_CHECK(cudaMemset2DAsync(grad, static_cast<size_t>(grad_ld) * 4, 0,
                                      static_cast<size_t>(rs.dim) * 4, static_cast<size_t>(u), st));
    HSTU_CUDA_CHECK(cudaMemsetAsync(touched, 0, static_cast<size_t>(u), st));
    cuda::reduce_grad(ctx, order, n, u, dout, dout_ld, scale, grad, grad_ld, rs.dim, touched);
    cuda::apply_optimizer(ctx, rs, refs, grad, grad_ld, touched, u, spec, dirty);
    return;
  }
  OptArgs a{};
  a.rs = rs, a.refs = refs, a.grad = grad, a.grad_ld = grad_ld, a.touched = touched, a.n = u;
  a.lr = spec.lr, a.beta1 = spec.beta1, a.beta2 = spec.beta2, a.eps = spec.eps;
  a.dirty = dirty;
  if (!spec.skip_if_nonfinite.empty()) {
    HSTU_CHECK(spec.skip_if_nonfinite.device == Device::kCUDA &&
                   spec.skip_if_nonfinite.dtype == DType::kF64,
               "dynamic table optimiser: skip_if_nonfinite must be f64 on the device, got ",
               spec.skip_if_nonfinite.str());
    a.guard = spec.skip_if_nonfinite.as<double>();
    a.guard_n = spec.skip_if_nonfinite.numel();
  }
  const BwdArgs b{order, n, dout, dout_ld, scale};
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const unsigned grid = blocks_for(u * 32, 256);
  if (spec.kind == SparseOptimizerSpec::kAdam) {
    HSTU_CHECK(spec.step >= 1, "dynamic table Adam: step is 1-based, got ", spec.step);
    a.bc1 = static_cast<float>(1.0 - std::pow(double(spec.beta1), double(spec.step)));
    a.bc2 = static_cast<float>(1.0 - std::pow(double(spec.beta2), double(spec.step)));
  }
  const bool adam = spec.kind == SparseOptimizerSpec::kAdam;
  if (adam)
    backward_keys_kernel<SparseOptimizerSpec::kAdam><<<grid, 256, 0, st>>>(a, b);
  else
    backward_keys_kernel<SparseOptimizerSpec::kSgd><<<grid, 256, 0, st>>>(a, b);
  // Hot keys exist only where some key has more than kHot lookups (n > kHot).
  if (n > kHot) {
    backward_hot_kernel<<<blocks_for(chunks * 32, 256), 256, 0, st>>>(order, n, dout, dout_ld,
                                                                      scale, grad, grad_ld, rs.dim);
    if (adam)
      backward_hot_apply_kernel<SparseOptimizerSpec::kAdam><<<grid, 256, 0, st>>>(a, b);
    else
      backward_hot_apply_kernel<SparseOptimizerSpec::kSgd><<<grid, 256, 0, st>>>(a, b);
  }
  HSTU_CUDA_CHECK_LAUNCH();
}

void copy_rows(Ctx& ctx, const float* src, const int64_t* src_slots, float* dst,
               const int64_t* dst_slots, int64_t n, int64_t row_width, const uint8_t* only_dirty,
               uint8_t* clear_dirty) {
  if (n == 0 || row_width == 0) return;
  copy_rows_kernel<<<blocks_for(n * row_width, 256), 256, 0, stream_of(ctx)>>>(
      src, src_slots, dst, dst_slots, n, row_width, only_dirty);
  if (clear_dirty)
    clear_dirty_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(src_slots, dst_slots, n,
                                                                       only_dirty, clear_dirty);
  HSTU_CUDA_CHECK_LAUNCH();
}

void miss_mask(Ctx& ctx, const int64_t* cache_slots, const int64_t* store_slots, int64_t n,
               uint8_t* mask) {
  if (n == 0) return;
  miss_mask_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(cache_slots, store_slots, n,
                                                                   mask);
  HSTU_CUDA_CHECK_LAUNCH();
}

void tier_refs(Ctx& ctx, const int64_t* cache_slots, const int64_t* store_slots,
               const uint8_t* miss, int64_t n, int64_t n_cache, int64_t* refs, int64_t* fill_src) {
  if (n == 0) return;
  tier_refs_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(cache_slots, store_slots, miss,
                                                                   n, n_cache, refs, fill_src);
  HSTU_CUDA_CHECK_LAUNCH();
}

void set_scores(Ctx& ctx, const TableView& t, const int64_t* slots, const uint64_t* values,
                int64_t n) {
  if (n == 0) return;
  set_scores_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(t, slots, values, n);
  HSTU_CUDA_CHECK_LAUNCH();
}

void clear(Ctx& ctx, const TableView& t) {
  clear_kernel<<<blocks_for(t.capacity(), 256), 256, 0, stream_of(ctx)>>>(t);
  HSTU_CUDA_CHECK_LAUNCH();
}

void fill_u8(Ctx& ctx, uint8_t* p, int64_t n, uint8_t v) {
  HSTU_CUDA_CHECK(cudaMemsetAsync(p, v, static_cast<size_t>(n), stream_of(ctx)));
}

void synchronize(Ctx& ctx) {
  sync(ctx);
}

void to_host(Ctx& ctx, void* dst, const void* src, size_t bytes) {
  HSTU_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_of(ctx)));
  sync(ctx);
}

void to_device(Ctx& ctx, void* dst, const void* src, size_t bytes) {
  HSTU_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_of(ctx)));
  sync(ctx);
}

int64_t list_occupied(Ctx& ctx, const TableView& t, int64_t* keys, int64_t* slots) {
  const int64_t cap = t.capacity();
  HSTU_CHECK(cap < (int64_t{1} << 31), "dynamic table: list_occupied over > 2^31 slots");
  thrust::counting_iterator<int64_t> first(0);
  size_t bytes = 0;
  HSTU_CUDA_CHECK(cub::DeviceSelect::If(nullptr, bytes, first, slots, static_cast<int*>(nullptr),
                                        static_cast<int>(cap), Occupied{t.keys}));
  Workspace& ws = workspace(ctx, bytes + 64);
  int* count = ws.take<int>(1);
  void* temp = ws.take<char>(bytes);
  HSTU_CUDA_CHECK(cub::DeviceSelect::If(temp, bytes, first, slots, count, static_cast<int>(cap),
                                        Occupied{t.keys}, stream_of(ctx)));
  HSTU_CUDA_CHECK(cudaMemcpyAsync(ws.host(), count, 4, cudaMemcpyDeviceToHost, stream_of(ctx)));
  sync(ctx);
  int m = 0;
  std::memcpy(&m, ws.host(), 4);
  if (m > 0) {
    gather_keys<<<blocks_for(m, 256), 256, 0, stream_of(ctx)>>>(t.keys, slots, m, keys);
    HSTU_CUDA_CHECK_LAUNCH();
    sync(ctx);
  }
  return m;
}

}  // namespace hstu::embed::cuda
