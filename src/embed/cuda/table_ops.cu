// cuda/table_ops.cu — CUDA kernels of the dynamic table's primitives.
//
// The one decision: insert is deterministic and equal to the CPU reference. The keys to insert
// (ascending) are stably sorted by bucket, and one thread owns each bucket's run of keys and
// places them in order, so a bucket sees the same sequence of free-slot picks and evictions as
// the CPU loop. Lookups are one warp per key (lane s compares slot s; bucket_size <= 32). The
// fused optimiser is one warp per row with the per-element float math of ops/cuda/embedding.cu's
// sparse_opt_row (the same expressions, bc1/bc2 rounded from double as there), so a dynamic
// table's update equals the dense table's CUDA update bit for bit. Calls that return counts
// synchronise the stream. Temporary device memory (sort buffers, CUB temp storage, counters)
// comes from a per-stream workspace that grows and is reused, so a step allocates nothing.
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <mutex>
#include <unordered_map>

#include "core/cuda_check.h"
#include "embed/cuda/table_ops.h"
#include "embed/table_math.h"
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

// Per-stream temporary device memory (bump-allocated, reset by each primitive; kernels of one
// stream run in order, so reuse is safe) and page-locked host words for count read-backs.
class Workspace {
 public:
  explicit Workspace(cudaStream_t s) : stream_(s) {
    HSTU_CUDA_CHECK(cudaHostAlloc(&host_, 8 * sizeof(unsigned long long), cudaHostAllocDefault));
  }
  // Makes room for `bytes` in all (waits for the stream before freeing a smaller buffer).
  void reset(size_t bytes) {
    used_ = 0;
    if (bytes <= cap_) return;
    if (dev_) {
      HSTU_CUDA_CHECK(cudaStreamSynchronize(stream_));
      HSTU_CUDA_CHECK(cudaFree(dev_));
    }
    cap_ = std::max(bytes, 2 * cap_);
    HSTU_CUDA_CHECK(cudaMalloc(&dev_, cap_));
  }
  template <typename T>
  T* take(size_t n) {
    const size_t at = (used_ + 255) / 256 * 256, bytes = std::max<size_t>(n, 1) * sizeof(T);
    HSTU_CHECK(at + bytes <= cap_, "dynamic table CUDA workspace overflow (", at + bytes, " > ",
               cap_, " bytes)");
    used_ = at + bytes;
    return reinterpret_cast<T*>(static_cast<char*>(dev_) + at);
  }
  unsigned long long* host() { return host_; }

 private:
  cudaStream_t stream_;
  void* dev_ = nullptr;
  size_t cap_ = 0, used_ = 0;
  unsigned long long* host_ = nullptr;
};

Workspace& workspace(const Ctx& ctx, size_t bytes) {
  static std::mutex mu;
  static std::unordered_map<cudaStream_t, std::unique_ptr<Workspace>> all;
  std::lock_guard<std::mutex> lock(mu);
  auto& w = all[stream_of(ctx)];
  if (!w) w = std::make_unique<Workspace>(stream_of(ctx));
  w->reset(bytes + 16 * 256);
  return *w;
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

__global__ void dedupe_scatter(const int64_t* sorted, const int32_t* pos, const int32_t* uid,
                               int64_t n, int64_t* unique, int32_t* inverse, int32_t* counts) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int32_t u = uid[i] - 1;
  if (i == 0 || sorted[i] != sorted[i - 1]) unique[u] = sorted[i];
  inverse[pos[i]] = u;
  atomicAdd(counts + u, 1);  // integer: order-independent
}

__global__ void head_flags(const int64_t* sorted, int64_t n, int32_t* head) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) head[i] = i == 0 || sorted[i] != sorted[i - 1];
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

__global__ void admit_mask(uint32_t* sketch, int depth, int64_t width, const int64_t* keys,
                           const int64_t* slots, int64_t n, int64_t threshold, uint8_t* mask,
                           unsigned long long* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  mask[i] = 0;
  if (slots[i] >= 0) return;
  uint32_t est = 0xffffffffu;
  for (int r = 0; sketch && r < depth; ++r) est = min(est, *sketch_cell(sketch, r, width, keys[i]));
  const bool ok = static_cast<int64_t>(est) >= threshold && keys[i] != kEmptyKey;
  mask[i] = ok;
  atomicAdd(out + (ok ? 0 : 1), 1ull);
}

// ---- insert ---------------------------------------------------------------------------------

__global__ void insert_prepare(const int64_t* keys, const uint8_t* mask, int64_t n,
                               int64_t num_buckets, uint8_t* status, int64_t* evicted,
                               uint32_t* bucket, int32_t* pos) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  evicted[i] = kEmptyKey;
  status[i] = kSkipped;
  bucket[i] = static_cast<uint32_t>(mask[i] ? bucket_of(keys[i], num_buckets) : num_buckets);
  pos[i] = static_cast<int32_t>(i);
}

// Thread j owns the run of pos[] (sorted by bucket, keys ascending within) starting at j.
__global__ void insert_runs(TableView t, const int64_t* keys, const int32_t* counts,
                            const uint32_t* run_bucket, const int32_t* pos, int64_t m, int64_t step,
                            Eviction policy, bool allow_evict, uint8_t* mask, int64_t* slots,
                            uint8_t* status, int64_t* evicted, unsigned long long* out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= m || (j > 0 && run_bucket[j] == run_bucket[j - 1])) return;
  if (run_bucket[j] >= t.num_buckets) return;  // the keys not to insert
  const int64_t base = static_cast<int64_t>(run_bucket[j]) * t.bucket_size;
  unsigned long long c[4] = {0, 0, 0, 0};
  for (int64_t q = j; q < m && run_bucket[q] == run_bucket[j]; ++q) {
    const int64_t i = pos[q];
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
  for (int k = 0; k < 4; ++k)
    if (c[k]) atomicAdd(out + k, c[k]);
}

__global__ void init_rows_kernel(TableView t, const int64_t* keys, const int64_t* slots,
                                 const uint8_t* status, int64_t n, uint64_t seed, float std) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * t.row_width) return;
  const int64_t i = e / t.row_width, c = e % t.row_width;
  if (status[i] != kInserted && status[i] != kEvicted) return;
  t.values[slots[i] * t.row_width + c] = c < t.dim ? key_init_value(seed, keys[i], c, std) : 0.0f;
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
                              float std) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * rs.dim) return;
  const int64_t i = e / rs.dim, c = e % rs.dim;
  const int64_t r = refs[i];
  out[i * out_ld + c] = r >= 0         ? row_ptr(rs, r)[c]
                        : init_missing ? key_init_value(seed, keys[i], c, std)
                                       : 0.0f;
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

// One warp per row; the math of ops/cuda/embedding.cu sparse_opt_row, state inside the row.
template <SparseOptimizerSpec::Kind K>
__global__ void apply_kernel(OptArgs a) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= a.n) return;
  float* g = a.grad + i * a.grad_ld;
  const int64_t d = a.rs.dim;
  const int64_t r = a.refs[i];
  const bool skip = a.guard && !all_finite(a.guard, a.guard_n);
  if (a.touched[i] && r >= 0 && !skip) {
    float* w = row_ptr(a.rs, r);
    if constexpr (K == SparseOptimizerSpec::kAdam) {
      float* m = w + d;
      float* v = w + 2 * d;
      for (int64_t c = lane; c < d; c += 32) {
        const float gc = g[c];
        const float mc = a.beta1 * m[c] + (1.0f - a.beta1) * gc;
        const float vc = a.beta2 * v[c] + (1.0f - a.beta2) * gc * gc;
        m[c] = mc;
        v[c] = vc;
        w[c] -= a.lr * (mc / a.bc1) / (sqrtf(vc / a.bc2) + a.eps);
      }
    } else if constexpr (K == SparseOptimizerSpec::kRowWiseAdagrad) {
      float ss = 0.0f;
      for (int64_t c = lane; c < d; c += 32) ss += g[c] * g[c];
      ss = warp_sum(ss);
      const float st = w[d] + ss / static_cast<float>(d);
      __syncwarp();
      if (lane == 0) w[d] = st;
      const float mult = a.lr / (sqrtf(st) + a.eps);
      for (int64_t c = lane; c < d; c += 32) w[c] -= mult * g[c];
    } else {
      for (int64_t c = lane; c < d; c += 32) w[c] -= a.lr * g[c];
    }
    if (lane == 0 && a.dirty && r < a.rs.n_a) a.dirty[r] = 1;
  }
  __syncwarp();
  for (int64_t c = lane; c < d; c += 32) g[c] = 0.0f;
  if (lane == 0) a.touched[i] = 0;
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
               int32_t* counts, int64_t* first_key) {
  if (n == 0) return 0;
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
  int32_t* head = ws.take<int32_t>(static_cast<size_t>(n));
  int32_t* uid = ws.take<int32_t>(static_cast<size_t>(n));
  void* temp = ws.take<char>(std::max(sort_bytes, scan_bytes));
  const cudaStream_t st = stream_of(ctx);
  iota_kernel<<<blocks_for(n, 256), 256, 0, st>>>(pos_in, n);
  HSTU_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp, sort_bytes, keys, sorted, pos_in, pos, nn, 0, 64, st));
  head_flags<<<blocks_for(n, 256), 256, 0, st>>>(sorted, n, head);
  HSTU_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp, scan_bytes, head, uid, nn, st));
  HSTU_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(n) * 4, st));
  dedupe_scatter<<<blocks_for(n, 256), 256, 0, st>>>(sorted, pos, uid, n, unique, inverse, counts);
  HSTU_CUDA_CHECK_LAUNCH();
  int32_t u = 0;
  HSTU_CUDA_CHECK(cudaMemcpyAsync(ws.host(), uid + n - 1, 4, cudaMemcpyDeviceToHost, st));
  HSTU_CUDA_CHECK(cudaMemcpyAsync(ws.host() + 1, unique, 8, cudaMemcpyDeviceToHost, st));
  sync(ctx);
  std::memcpy(&u, ws.host(), 4);
  std::memcpy(first_key, ws.host() + 1, 8);
  return u;
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

AdmitCounts admit(Ctx& ctx, uint32_t* sketch, int depth, int64_t width, const int64_t* keys,
                  const int32_t* counts, const int64_t* slots, int64_t n, int64_t threshold,
                  uint8_t* mask, bool need_counts) {
  if (n == 0) return {};
  Workspace& ws = workspace(ctx, 64);
  unsigned long long* dc = ws.take<unsigned long long>(4);
  HSTU_CUDA_CHECK(cudaMemsetAsync(dc, 0, 32, stream_of(ctx)));
  if (sketch)
    sketch_add<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(sketch, depth, width, keys, counts,
                                                               slots, n);
  admit_mask<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(sketch, depth, width, keys, slots, n,
                                                             threshold, mask, dc);
  HSTU_CUDA_CHECK_LAUNCH();
  if (!need_counts) return {-1, -1};
  unsigned long long h[4];
  read_counters(ctx, ws, dc, 2, h);
  return {static_cast<int64_t>(h[0]), static_cast<int64_t>(h[1])};
}

InsertCounts insert(Ctx& ctx, const TableView& t, const int64_t* keys, const int32_t* counts,
                    int64_t n, int64_t step, Eviction policy, bool allow_evict, uint8_t* mask,
                    int64_t* slots, uint8_t* status, int64_t* evicted_keys) {
  if (n == 0) return {};
  const int nn = static_cast<int>(n);
  size_t sort_bytes = 0;
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), nn));
  Workspace& ws = workspace(ctx, static_cast<size_t>(n) * 16 + sort_bytes + 1024);
  uint32_t* bucket_in = ws.take<uint32_t>(static_cast<size_t>(n));
  uint32_t* bucket = ws.take<uint32_t>(static_cast<size_t>(n));
  int32_t* pos_in = ws.take<int32_t>(static_cast<size_t>(n));
  int32_t* pos = ws.take<int32_t>(static_cast<size_t>(n));
  unsigned long long* dc = ws.take<unsigned long long>(4);
  void* temp = ws.take<char>(sort_bytes);
  const cudaStream_t st = stream_of(ctx);
  HSTU_CHECK(t.num_buckets < (int64_t{1} << 31), "dynamic table: too many buckets");
  // Keys not to insert get bucket num_buckets (sorted last, skipped); positions ascending in,
  // so a bucket's keys stay in input order (radix sort is stable).
  insert_prepare<<<blocks_for(n, 256), 256, 0, st>>>(keys, mask, n, t.num_buckets, status,
                                                     evicted_keys, bucket_in, pos_in);
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, sort_bytes, bucket_in, bucket, pos_in, pos,
                                                  nn, 0, bits_for(t.num_buckets), st));
  HSTU_CUDA_CHECK(cudaMemsetAsync(dc, 0, 32, st));
  insert_runs<<<blocks_for(n, 128), 128, 0, st>>>(t, keys, counts, bucket, pos, n, step, policy,
                                                  allow_evict, mask, slots, status, evicted_keys,
                                                  dc);
  HSTU_CUDA_CHECK_LAUNCH();
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
  init_rows_kernel<<<blocks_for(n * t.row_width, 256), 256, 0, stream_of(ctx)>>>(
      t, keys, slots, status, n, table_seed, init_std);
  HSTU_CUDA_CHECK_LAUNCH();
}

int64_t erase(Ctx& ctx, const TableView& t, const int64_t* keys, int64_t n) {
  if (n == 0) return 0;
  Workspace& ws = workspace(ctx, static_cast<size_t>(n) * 8 + 64);
  int64_t* slots = ws.take<int64_t>(static_cast<size_t>(n));
  unsigned long long* dc = ws.take<unsigned long long>(1);
  cuda::find(ctx, t, keys, n, slots);
  HSTU_CUDA_CHECK(cudaMemsetAsync(dc, 0, 8, stream_of(ctx)));
  erase_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(t, slots, n, dc);
  HSTU_CUDA_CHECK_LAUNCH();
  unsigned long long h[1];
  read_counters(ctx, ws, dc, 1, h);
  return static_cast<int64_t>(h[0]);
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
            float* out, int64_t out_ld, bool init_missing, uint64_t table_seed, float init_std) {
  if (n == 0) return;
  gather_kernel<<<blocks_for(n * rs.dim, 256), 256, 0, stream_of(ctx)>>>(
      rs, refs, keys, n, out, out_ld, init_missing, table_seed, init_std);
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
  switch (spec.kind) {
    case SparseOptimizerSpec::kAdam:
      HSTU_CHECK(spec.step >= 1, "dynamic table Adam: step is 1-based, got ", spec.step);
      a.bc1 = static_cast<float>(1.0 - std::pow(double(spec.beta1), double(spec.step)));
      a.bc2 = static_cast<float>(1.0 - std::pow(double(spec.beta2), double(spec.step)));
      apply_kernel<SparseOptimizerSpec::kAdam><<<grid, 256, 0, stream_of(ctx)>>>(a);
      break;
    case SparseOptimizerSpec::kRowWiseAdagrad:
      apply_kernel<SparseOptimizerSpec::kRowWiseAdagrad><<<grid, 256, 0, stream_of(ctx)>>>(a);
      break;
    case SparseOptimizerSpec::kSgd:
      apply_kernel<SparseOptimizerSpec::kSgd><<<grid, 256, 0, stream_of(ctx)>>>(a);
      break;
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
