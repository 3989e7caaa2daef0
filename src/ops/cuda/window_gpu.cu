// window_gpu.cu — the per-step window of a row-sharded table on the GPU (ops/window_gpu.h): ids
// deduplicated and remapped on the device (flag scan or CUB radix sort + unique), the window's
// rows gathered and its gradient rows added back. The distinct-id count never leaves the device.
// The dynamic item table's part (keys, sightings, missing-key rows, present pool) uses the
// table's per-key initial value from embed/table_math.h, a header of host/device formulas only
// (as negatives_gpu.cu uses data/negatives_rng.h): no link dependency on the embed layer.
#include <algorithm>
#include <bit>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <vector>

#include "core/checked.h"
#include "core/hash.h"
#include "embed/table_math.h"
#include "ops/cuda/common.cuh"
#include "ops/window_gpu.h"

namespace hstu::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

// An id tensor as n x m elements at a row stride (1-D: m = 1).
struct IdView {
  int32_t* p;
  int64_t n, m, ld;
  __host__ __device__ int64_t size() const { return n * m; }
};

IdView id_view(const Tensor& t) {
  check_cuda_tensor(t, "window_dedup ids");
  HSTU_CHECK(t.dtype == DType::kI32 && (t.ndim == 1 || t.ndim == 2),
             "window_dedup: ids must be i32 [n] or [n, m], got ", t.str());
  if (t.ndim == 1) return {t.as<int32_t>(), t.dim(0), 1, 1};
  return {t.as<int32_t>(), t.dim(0), t.dim(1), t.row_stride};
}

__device__ __forceinline__ int32_t& at(IdView v, int64_t e) {
  return v.p[(e / v.m) * v.ld + e % v.m];
}

// dense: flags[id] = 1 for every id in range (and for id 0).
__global__ void mark_kernel(IdView v, int32_t* flags, int64_t rows) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e == 0) flags[0] = 1;
  if (e >= v.size()) return;
  const int32_t id = at(v, e);
  if (id >= 0 && id < rows) flags[id] = 1;
}

// dense: unique[index[i]] = i for every flagged i; count = the flags' total.
__global__ void compact_kernel(const int32_t* flags, const int32_t* index, int64_t rows,
                               int32_t* unique, int32_t* count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows) return;
  if (flags[i]) unique[index[i]] = static_cast<int32_t>(i);
  if (i == rows - 1) *count = index[i] + flags[i];
}

// dense: id -> index[id] (0 for ids out of range).
__global__ void remap_dense_kernel(IdView v, const int32_t* index, int64_t rows) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= v.size()) return;
  int32_t& id = at(v, e);
  id = id >= 0 && id < rows ? index[id] : 0;
}

// sort: keys[off + e] = id (0 for ids out of range).
__global__ void copy_keys_kernel(IdView v, int32_t* keys, int64_t rows) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= v.size()) return;
  const int32_t id = at(v, e);
  keys[e] = id >= 0 && id < rows ? id : 0;
}

__global__ void set_zero_kernel(int32_t* p) {
  *p = 0;
}

// sort: id -> its position in unique[0:count) (binary search; 0 for ids out of range).
__global__ void remap_sorted_kernel(IdView v, const int32_t* unique, const int32_t* count,
                                    int64_t rows) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= v.size()) return;
  int32_t& id = at(v, e);
  if (id < 0 || id >= rows) {
    id = 0;
    return;
  }
  int32_t lo = 0, hi = *count;  // unique[lo] <= id < unique[hi]
  while (hi - lo > 1) {
    const int32_t mid = (lo + hi) / 2;
    if (unique[mid] <= id)
      lo = mid;
    else
      hi = mid;
  }
  id = lo;
}

// One block per window row k < count.
__global__ void gather_rows_kernel(const float* table, int64_t ld_t, float* window, int64_t ld_w,
                                   int64_t dim, const int32_t* unique, const int32_t* count) {
  const int64_t k = blockIdx.x;
  if (k >= *count) return;
  const float* src = table + unique[k] * ld_t;
  float* dst = window + k * ld_w;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dst[j] = src[j];
}

__global__ void scatter_grads_kernel(float* wgrad, int64_t ld_w, uint8_t* wtouched, float* grad,
                                     int64_t ld_g, uint8_t* touched, int64_t dim,
                                     const int32_t* unique, const int32_t* count) {
  const int64_t k = blockIdx.x;
  if (k >= *count || !wtouched[k]) return;
  const int32_t id = unique[k];
  float* src = wgrad + k * ld_w;
  float* dst = grad + id * ld_g;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    dst[j] += src[j];
    src[j] = 0.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    touched[id] = 1;
    wtouched[k] = 0;
  }
}

__device__ __forceinline__ int owner_of(int32_t id, int world, bool hash) {
  return hash ? static_cast<int>(murmur3_fmix64(static_cast<uint64_t>(id)) %
                                 static_cast<uint64_t>(world))
              : id % world;
}

// keys[k] = owner of window row k (world past the count), iota[k] = k; counts[owner] += 1.
__global__ void owner_keys_kernel(const int32_t* unique, const int32_t* count, int64_t cap,
                                  int world, bool hash, int32_t* keys, int32_t* iota,
                                  int32_t* counts) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= cap) return;
  iota[k] = static_cast<int32_t>(k);
  if (k >= *count) {
    keys[k] = world;
    return;
  }
  const int o = owner_of(unique[k], world, hash);
  keys[k] = o;
  atomicAdd(&counts[o], 1);  // integer counts: order-free
}

// For positions j < count: send_local[j] = local row of the id at window row order[j];
// perm[order[j]] = j.
__global__ void route_fill_kernel(const int32_t* unique, const int32_t* count, const int32_t* order,
                                  int64_t cap, int world, bool hash, const int32_t* local_of_id,
                                  int32_t* send_local, int32_t* perm) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= cap || j >= *count) return;
  const int32_t k = order[j];
  const int32_t id = unique[k];
  send_local[j] = hash ? local_of_id[id] : id / world;
  perm[k] = static_cast<int32_t>(j);
}

// One block per position j < n.
__global__ void grad_rows_kernel(const float* wgrad, int64_t ld_w, const uint8_t* wtouched,
                                 const int32_t* order, int32_t* send_local, float* rows,
                                 int64_t ld_r, int64_t dim) {
  const int64_t j = blockIdx.x;
  const int32_t k = order[j];
  const float* src = wgrad + k * ld_w;
  float* dst = rows + j * ld_r;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) dst[c] = src[c];
  if (threadIdx.x == 0 && !wtouched[k]) send_local[j] = -1 - send_local[j];
}

// One block per row j; indices distinct within a launch.
__global__ void add_rows_kernel(const float* rows, int64_t ld_r, const int32_t* idx, float* grad,
                                int64_t ld_g, uint8_t* touched, int64_t dim) {
  const int64_t j = blockIdx.x;
  const int32_t r = idx[j];
  if (r < 0) return;
  const float* src = rows + j * ld_r;
  float* dst = grad + r * ld_g;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) dst[c] += src[c];
  if (threadIdx.x == 0) touched[r] = 1;
}

// keys[k] = key of window row k (pad past the count), counts[k] = 0.
__global__ void window_keys_kernel(const int32_t* unique, const int32_t* count, int64_t cap,
                                   const int64_t* key_of_id, int64_t pad, int64_t* keys,
                                   int32_t* counts) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= cap) return;
  counts[k] = 0;
  if (k >= *count) {
    keys[k] = pad;
    return;
  }
  const int32_t id = unique[k];
  keys[k] = key_of_id ? key_of_id[id] : static_cast<int64_t>(id);
}

// counts[window row] += 1 per rewritten id (integer atomics: order-free, exact).
__global__ void count_rows_kernel(IdView v, int32_t* counts) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= v.size()) return;
  atomicAdd(&counts[at(v, e)], 1);
}

__global__ void pad_count_kernel(int32_t* counts) {
  counts[0] = max(counts[0], 1);
}

// One block per window row k < count whose key is absent: its initial value.
__global__ void init_missing_kernel(const int64_t* keys, const int64_t* refs, const int32_t* count,
                                    float* window, int64_t ld, int64_t dim, uint64_t table_seed,
                                    float init_std) {
  const int64_t k = blockIdx.x;
  if (k >= *count || refs[k] >= 0) return;
  float* row = window + k * ld;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
    row[c] = embed::key_init_value(table_seed, keys[k], c, init_std);
}

// flags[i] = refs[i] >= 0.
__global__ void present_flags_kernel(const int64_t* refs, int64_t n, int32_t* flags) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) flags[i] = refs[i] >= 0;
}

// pool[index[i]] = first + i for flagged i; count = the flags' total.
__global__ void present_compact_kernel(const int32_t* flags, const int32_t* index, int64_t n,
                                       int32_t first, int32_t* pool, int32_t* count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  if (flags[i]) pool[index[i]] = first + static_cast<int32_t>(i);
  if (i == n - 1) *count = index[i] + flags[i];
}

int end_bit(int64_t rows) {
  return std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(rows - 1))));
}

size_t temp_bytes(int64_t rows, int64_t cap, bool dense) {
  size_t a = 0, b = 0;
  if (dense) {
    HSTU_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, a, static_cast<const int32_t*>(nullptr),
                                                  static_cast<int32_t*>(nullptr), rows));
    return a;
  }
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, a, static_cast<const uint32_t*>(nullptr),
                                                 static_cast<uint32_t*>(nullptr), cap, 0,
                                                 end_bit(rows)));
  HSTU_CUDA_CHECK(cub::DeviceSelect::Unique(nullptr, b, static_cast<const int32_t*>(nullptr),
                                            static_cast<int32_t*>(nullptr),
                                            static_cast<int32_t*>(nullptr), cap));
  return std::max(a, b);
}

void check_rows(const Tensor& t, int64_t rows, DType dtype, const char* what) {
  check_cuda_tensor(t, what);
  HSTU_CHECK(t.dtype == dtype && t.ndim == 2 && t.dim(0) >= rows, what, ": expected ",
             dtype_name(dtype), " [>= ", rows, ", D], got ", t.str());
}

}  // namespace

size_t route_temp_bytes(int64_t cap, int world) {
  size_t a = 0;
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, a, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), cap, 0,
      end_bit(static_cast<int64_t>(world) + 1)));
  return a;
}

WindowDedup allocate_window_dedup(Arena& arena, int64_t rows, int64_t cap, int world, bool route) {
  HSTU_CHECK(rows >= 1 && cap >= 1, "window dedupe: ", rows, " table rows, window of ", cap);
  checked_i32(rows, "window dedupe table rows");
  checked_i32(cap, "window dedupe window rows");
  WindowDedup d;
  d.rows = rows;
  d.cap = cap;
  d.dense = rows <= cap;
  const int64_t n = d.dense ? rows : cap;
  d.unique = arena.alloc(DType::kI32, {cap});
  d.count = arena.alloc(DType::kI32, {1});
  d.keys = arena.alloc(DType::kI32, {n});
  d.index = arena.alloc(DType::kI32, {n});
  d.temp = arena.alloc(DType::kU8,
                       {static_cast<int64_t>(std::max<size_t>(temp_bytes(rows, cap, d.dense), 1))});
  HSTU_CHECK(world >= 1, "window dedupe: world size ", world);
  d.world = world;
  if (route) {
    d.owner_keys = arena.alloc(DType::kI32, {cap});
    d.owner_sorted = arena.alloc(DType::kI32, {cap});
    d.iota = arena.alloc(DType::kI32, {cap});
    d.order = arena.alloc(DType::kI32, {cap});
    d.counts = arena.alloc(DType::kI32, {static_cast<int64_t>(world)});
    d.route_temp = arena.alloc(
        DType::kU8, {static_cast<int64_t>(std::max<size_t>(route_temp_bytes(cap, world), 1))});
  }
  return d;
}

void window_dedup(Ctx& ctx, const WindowDedup& d, std::span<const Tensor> ids) {
  const cudaStream_t s = stream_of(ctx);
  std::vector<IdView> views;
  int64_t total = 1;  // id 0
  for (const Tensor& t : ids) {
    views.push_back(id_view(t));
    total += views.back().size();
  }
  if (d.dense) {
    int32_t* flags = d.keys.as<int32_t>();
    HSTU_CUDA_CHECK(cudaMemsetAsync(flags, 0, static_cast<size_t>(d.rows) * 4, s));
    // Every launch (even of an empty span) sets flags[0]; with no spans one empty launch does.
    for (const IdView& v : views)
      mark_kernel<<<std::max(1u, blocks_for(v.size())), kThreads, 0, s>>>(v, flags, d.rows);
    if (views.empty()) mark_kernel<<<1, 1, 0, s>>>(IdView{nullptr, 0, 1, 1}, flags, d.rows);
    HSTU_CUDA_CHECK_LAUNCH();
    size_t bytes = static_cast<size_t>(d.temp.numel());
    HSTU_CUDA_CHECK(
        cub::DeviceScan::ExclusiveSum(d.temp.data, bytes, flags, d.index.as<int32_t>(), d.rows, s));
    compact_kernel<<<blocks_for(d.rows), kThreads, 0, s>>>(
        flags, d.index.as<int32_t>(), d.rows, d.unique.as<int32_t>(), d.count.as<int32_t>());
    for (const IdView& v : views)
      if (v.size() > 0)
        remap_dense_kernel<<<blocks_for(v.size()), kThreads, 0, s>>>(v, d.index.as<int32_t>(),
                                                                     d.rows);
    HSTU_CUDA_CHECK_LAUNCH();
    return;
  }
  HSTU_CHECK(total <= d.cap, "window dedupe: ", total,
             " ids in one step (with id 0) exceed the window's ", d.cap,
             " rows (the plan's item_window_rows)");
  int32_t* keys = d.keys.as<int32_t>();
  int64_t off = 0;
  for (const IdView& v : views) {
    if (v.size() > 0)
      copy_keys_kernel<<<blocks_for(v.size()), kThreads, 0, s>>>(v, keys + off, d.rows);
    off += v.size();
  }
  set_zero_kernel<<<1, 1, 0, s>>>(keys + off);
  HSTU_CUDA_CHECK_LAUNCH();
  size_t bytes = static_cast<size_t>(d.temp.numel());
  // Ids are non-negative: sorting their low bits as unsigned is exact.
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(
      d.temp.data, bytes, reinterpret_cast<const uint32_t*>(keys),
      reinterpret_cast<uint32_t*>(d.index.as<int32_t>()), total, 0, end_bit(d.rows), s));
  bytes = static_cast<size_t>(d.temp.numel());
  HSTU_CUDA_CHECK(cub::DeviceSelect::Unique(d.temp.data, bytes, d.index.as<int32_t>(),
                                            d.unique.as<int32_t>(), d.count.as<int32_t>(), total,
                                            s));
  for (const IdView& v : views)
    if (v.size() > 0)
      remap_sorted_kernel<<<blocks_for(v.size()), kThreads, 0, s>>>(v, d.unique.as<int32_t>(),
                                                                    d.count.as<int32_t>(), d.rows);
  HSTU_CUDA_CHECK_LAUNCH();
}

void window_route(Ctx& ctx, const WindowDedup& d, bool hash, const Tensor& local_of_id,
                  const Tensor& send_local, const Tensor& perm) {
  HSTU_CHECK(!d.order.empty(), "window_route: the dedupe was allocated without routing buffers");
  HSTU_CHECK(!hash || (local_of_id.dtype == DType::kI32 && local_of_id.numel() >= d.rows),
             "window_route: the hash owner needs local_of_id i32 [", d.rows, "], got ",
             local_of_id.str());
  HSTU_CHECK(send_local.dtype == DType::kI32 && send_local.numel() >= d.cap &&
                 perm.dtype == DType::kI32 && perm.numel() >= d.cap,
             "window_route: send_local ", send_local.str(), " / perm ", perm.str(),
             " must be i32 [>= ", d.cap, "]");
  const cudaStream_t s = stream_of(ctx);
  HSTU_CUDA_CHECK(cudaMemsetAsync(d.counts.data, 0, static_cast<size_t>(d.world) * 4, s));
  owner_keys_kernel<<<blocks_for(d.cap), kThreads, 0, s>>>(
      d.unique.as<int32_t>(), d.count.as<int32_t>(), d.cap, d.world, hash,
      d.owner_keys.as<int32_t>(), d.iota.as<int32_t>(), d.counts.as<int32_t>());
  HSTU_CUDA_CHECK_LAUNCH();
  // A radix sort is stable: within an owner the window rows stay ascending (as the host's).
  size_t bytes = static_cast<size_t>(d.route_temp.numel());
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      d.route_temp.data, bytes, d.owner_keys.as<int32_t>(), d.owner_sorted.as<int32_t>(),
      d.iota.as<int32_t>(), d.order.as<int32_t>(), d.cap, 0,
      end_bit(static_cast<int64_t>(d.world) + 1), s));
  route_fill_kernel<<<blocks_for(d.cap), kThreads, 0, s>>>(
      d.unique.as<int32_t>(), d.count.as<int32_t>(), d.order.as<int32_t>(), d.cap, d.world, hash,
      hash ? local_of_id.as<int32_t>() : nullptr, send_local.as<int32_t>(), perm.as<int32_t>());
  HSTU_CUDA_CHECK_LAUNCH();
}

void window_grad_rows(Ctx& ctx, const WindowDedup& d, int64_t n, const Tensor& window_grad,
                      const Tensor& window_touched, const Tensor& send_local, const Tensor& rows) {
  HSTU_CHECK(n >= 0 && n <= d.cap && !d.order.empty(), "window_grad_rows: ", n,
             " rows for a window of ", d.cap, " (routing buffers needed)");
  check_rows(window_grad, d.cap, DType::kF32, "window_grad_rows window grad");
  check_rows(rows, n, DType::kF32, "window_grad_rows rows");
  HSTU_CHECK(window_touched.dtype == DType::kU8 && send_local.dtype == DType::kI32 &&
                 send_local.numel() >= n && rows.dim(1) == window_grad.dim(1),
             "window_grad_rows: touched ", window_touched.str(), " / send_local ", send_local.str(),
             " do not fit");
  if (n == 0) return;
  grad_rows_kernel<<<static_cast<unsigned>(n), 64, 0, stream_of(ctx)>>>(
      window_grad.as<float>(), window_grad.row_stride, window_touched.as<uint8_t>(),
      d.order.as<int32_t>(), send_local.as<int32_t>(), rows.as<float>(), rows.row_stride,
      rows.dim(1));
  HSTU_CUDA_CHECK_LAUNCH();
}

void window_add_rows(Ctx& ctx, const Tensor& rows, const Tensor& idx, const Tensor& grad,
                     const Tensor& touched) {
  check_cuda_tensor(rows, "window_add_rows rows");
  check_cuda_tensor(grad, "window_add_rows grad");
  const int64_t n = rows.ndim == 2 ? rows.dim(0) : 0;
  HSTU_CHECK(rows.dtype == DType::kF32 && grad.dtype == DType::kF32 && rows.ndim == 2 &&
                 grad.ndim == 2 && rows.dim(1) == grad.dim(1) && idx.dtype == DType::kI32 &&
                 idx.numel() >= n && touched.dtype == DType::kU8 && touched.numel() >= grad.dim(0),
             "window_add_rows: rows ", rows.str(), " / idx ", idx.str(), " / grad ", grad.str(),
             " / touched ", touched.str(), " do not fit");
  if (n == 0) return;
  add_rows_kernel<<<static_cast<unsigned>(n), 64, 0, stream_of(ctx)>>>(
      rows.as<float>(), rows.row_stride, idx.as<int32_t>(), grad.as<float>(), grad.row_stride,
      touched.as<uint8_t>(), grad.dim(1));
  HSTU_CUDA_CHECK_LAUNCH();
}

void window_gather_rows(Ctx& ctx, const WindowDedup& d, const Tensor& table, const Tensor& window) {
  check_rows(table, d.rows, DType::kF32, "window_gather_rows table");
  check_rows(window, d.cap, DType::kF32, "window_gather_rows window");
  HSTU_CHECK(table.dim(1) == window.dim(1), "window_gather_rows: table ", table.str(),
             " and window ", window.str(), " differ in width");
  gather_rows_kernel<<<static_cast<unsigned>(std::min(d.cap, d.rows)), 64, 0, stream_of(ctx)>>>(
      table.as<float>(), table.row_stride, window.as<float>(), window.row_stride, table.dim(1),
      d.unique.as<int32_t>(), d.count.as<int32_t>());
  HSTU_CUDA_CHECK_LAUNCH();
}

void window_scatter_grads(Ctx& ctx, const WindowDedup& d, const Tensor& window_grad,
                          const Tensor& window_touched, const Tensor& grad, const Tensor& touched) {
  check_rows(grad, d.rows, DType::kF32, "window_scatter_grads grad");
  check_rows(window_grad, d.cap, DType::kF32, "window_scatter_grads window grad");
  check_cuda_tensor(touched, "window_scatter_grads touched");
  check_cuda_tensor(window_touched, "window_scatter_grads window touched");
  HSTU_CHECK(touched.dtype == DType::kU8 && touched.numel() >= d.rows &&
                 window_touched.dtype == DType::kU8 && window_touched.numel() >= d.cap &&
                 grad.dim(1) == window_grad.dim(1),
             "window_scatter_grads: touched ", touched.str(), " / window touched ",
             window_touched.str(), " / widths do not fit");
  scatter_grads_kernel<<<static_cast<unsigned>(std::min(d.cap, d.rows)), 64, 0, stream_of(ctx)>>>(
      window_grad.as<float>(), window_grad.row_stride, window_touched.as<uint8_t>(),
      grad.as<float>(), grad.row_stride, touched.as<uint8_t>(), grad.dim(1), d.unique.as<int32_t>(),
      d.count.as<int32_t>());
  HSTU_CUDA_CHECK_LAUNCH();
}

void window_keys(Ctx& ctx, const WindowDedup& d, const Tensor& key_of_id, int64_t pad,
                 std::span<const Tensor> ids, const Tensor& keys, const Tensor& counts) {
  check_cuda_tensor(keys, "window_keys keys");
  check_cuda_tensor(counts, "window_keys counts");
  HSTU_CHECK(keys.dtype == DType::kI64 && keys.numel() >= d.cap && counts.dtype == DType::kI32 &&
                 counts.numel() >= d.cap,
             "window_keys: keys ", keys.str(), " / counts ", counts.str(),
             " must be i64 / i32 [>= ", d.cap, "]");
  HSTU_CHECK(key_of_id.empty() || (key_of_id.dtype == DType::kI64 && key_of_id.numel() >= d.rows),
             "window_keys: key_of_id must be i64 [", d.rows, "], got ", key_of_id.str());
  const cudaStream_t s = stream_of(ctx);
  window_keys_kernel<<<blocks_for(d.cap), kThreads, 0, s>>>(
      d.unique.as<int32_t>(), d.count.as<int32_t>(), d.cap,
      key_of_id.empty() ? nullptr : key_of_id.as<int64_t>(), pad, keys.as<int64_t>(),
      counts.as<int32_t>());
  for (const Tensor& t : ids) {
    const IdView v = id_view(t);
    if (v.size() > 0)
      count_rows_kernel<<<blocks_for(v.size()), kThreads, 0, s>>>(v, counts.as<int32_t>());
  }
  pad_count_kernel<<<1, 1, 0, s>>>(counts.as<int32_t>());
  HSTU_CUDA_CHECK_LAUNCH();
}

void window_init_missing(Ctx& ctx, const WindowDedup& d, const Tensor& keys, const Tensor& refs,
                         const Tensor& window, uint64_t table_seed, float init_std) {
  check_rows(window, d.cap, DType::kF32, "window_init_missing window");
  HSTU_CHECK(keys.dtype == DType::kI64 && keys.numel() >= d.cap && refs.dtype == DType::kI64 &&
                 refs.numel() >= d.cap,
             "window_init_missing: keys ", keys.str(), " / refs ", refs.str(),
             " must be i64 [>= ", d.cap, "]");
  init_missing_kernel<<<static_cast<unsigned>(d.cap), 64, 0, stream_of(ctx)>>>(
      keys.as<int64_t>(), refs.as<int64_t>(), d.count.as<int32_t>(), window.as<float>(),
      window.row_stride, window.dim(1), table_seed, init_std);
  HSTU_CUDA_CHECK_LAUNCH();
}

size_t present_pool_temp_bytes(int64_t n) {
  size_t a = 0;
  HSTU_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, a, static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr),
                                                std::max<int64_t>(n, 1)));
  return std::max<size_t>(a, 1);
}

void present_pool(Ctx& ctx, const Tensor& refs, int32_t first, const Tensor& flags,
                  const Tensor& index, const Tensor& temp, const Tensor& pool,
                  const Tensor& count) {
  check_cuda_tensor(refs, "present_pool refs");
  const int64_t n = refs.numel();
  HSTU_CHECK(refs.dtype == DType::kI64 && flags.dtype == DType::kI32 && flags.numel() >= n &&
                 index.dtype == DType::kI32 && index.numel() >= n && pool.dtype == DType::kI32 &&
                 pool.numel() >= n && count.dtype == DType::kI32 && count.numel() >= 1 &&
                 static_cast<size_t>(temp.numel()) >= present_pool_temp_bytes(n),
             "present_pool: refs ", refs.str(), " / flags ", flags.str(), " / index ", index.str(),
             " / pool ", pool.str(), " / count ", count.str(), " / temp ", temp.str(),
             " do not fit");
  checked_i32(n + first, "present_pool ids");
  const cudaStream_t s = stream_of(ctx);
  if (n == 0) {
    HSTU_CUDA_CHECK(cudaMemsetAsync(count.data, 0, sizeof(int32_t), s));
    return;
  }
  present_flags_kernel<<<blocks_for(n), kThreads, 0, s>>>(refs.as<int64_t>(), n,
                                                          flags.as<int32_t>());
  HSTU_CUDA_CHECK_LAUNCH();
  size_t bytes = static_cast<size_t>(temp.numel());
  HSTU_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data, bytes, flags.as<int32_t>(),
                                                index.as<int32_t>(), n, s));
  present_compact_kernel<<<blocks_for(n), kThreads, 0, s>>>(
      flags.as<int32_t>(), index.as<int32_t>(), n, first, pool.as<int32_t>(), count.as<int32_t>());
  HSTU_CUDA_CHECK_LAUNCH();
}

}  // namespace hstu::cuda
