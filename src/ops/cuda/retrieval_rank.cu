// retrieval_rank.cu — CUDA full-catalogue rank of each user's target item, and the per-shard
// counts of the distributed rank (ops/retrieval_rank.h), without storing scores: a tiled kernel
// scores 64 users x 64 items at a time and counts, per user, the items that beat the target.
//
// The one decision: every score — the target's and each item's — is the same fp32 fma chain
// acc = fma(q[k], x[k], acc) over k = 0..D-1, so an item whose embedding equals the target's gets
// a bit-identical score and the tie rule (equal score, smaller id wins) is applied exactly; a
// cuBLAS GEMM could sum in a different order for the two and break ties at random. The same
// holds across shards: the counts score the target from a copy of its row (target_rows) by the
// same chain, so the sum of the shards' counts is the full-table rank exactly. History items
// are filtered through a per-user bitmap (over the table's or the shard's rows) built in
// ctx.scratch for a chunk of users at a time (its size adapts to the scratch left).
#include <vector>

#include "ops/cuda/common.cuh"
#include "ops/cuda/retrieval_rank.h"

namespace hstu::cuda {
namespace {

constexpr int kTile = 64;  // users and items per block
constexpr int kTk = 16;    // k-slice staged in shared memory
constexpr int kThreads = 256;

// st[u] = <q_u, rows[row_u]> by the fma chain of the tiled kernel, row_u = index[u] (the
// target's row of the table) or u when index is null (the targets' own rows).
template <typename T>
__global__ void target_score_kernel(const T* q, int64_t ldq, const T* rows, int64_t ldr,
                                    const int32_t* index, int64_t u, int64_t d, float* st) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= u) return;
  const T* qr = q + i * ldq;
  const T* xr = rows + (index ? static_cast<int64_t>(index[i]) : i) * ldr;
  float acc = 0.0f;
  for (int64_t k = 0; k < d; ++k) acc = fmaf(to_f32(qr[k]), to_f32(xr[k]), acc);
  st[i] = acc;
}

// The row of global id `id` among v rows: id itself for a full table (row_ids null), else its
// position in the ascending row_ids of a shard; -1 when no row has it.
__device__ __forceinline__ int64_t row_of_id(int32_t id, const int32_t* row_ids, int64_t v) {
  if (!row_ids) return id >= 0 && id < v ? id : -1;
  int64_t lo = 0, hi = v;  // first position with row_ids[pos] >= id
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (row_ids[mid] < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < v && row_ids[lo] == id ? lo : -1;
}

// Sets bit (user - u0, row) of the chunk's bitmap [users, words] for every history entry's row
// (ids without a row are ignored; the CPU reference rejects those outside a full table).
__global__ void history_bits_kernel(const int32_t* offsets, const int32_t* ids, int64_t u0,
                                    int64_t first, int64_t last, int64_t words, uint32_t* bits,
                                    int64_t nusers, const int32_t* row_ids, int64_t v) {
  const int64_t i = first + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= last) return;
  // The user owning entry i: binary search in offsets[u0 .. u0 + nusers].
  int64_t lo = 0, hi = nusers;  // offsets[u0 + lo] <= i < offsets[u0 + hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (offsets[u0 + mid] <= i)
      lo = mid;
    else
      hi = mid;
  }
  const int64_t row = row_of_id(ids[i], row_ids, v);
  if (row < 0) return;
  atomicOr(bits + lo * words + (row >> 5), 1u << (row & 31));
}

struct RankArgs {
  const void* q = nullptr;
  int64_t ldq = 0;
  const void* items = nullptr;
  int64_t ldi = 0;
  const int32_t* ids = nullptr;  // [v] global id of each row (a shard), or null (row = id)
  const int32_t* targets = nullptr;
  const float* st = nullptr;       // target scores [U]
  const uint32_t* bits = nullptr;  // [nusers, words] history bitmap of the chunk
  int64_t words = 0;
  int64_t u0 = 0, nusers = 0, v = 0, d = 0;
  int32_t* count = nullptr;  // [U]
};

// Block (x: item tile, y: user tile of the chunk); thread (tx, ty) computes users ty*4.. and
// items tx*4.. of the tile, then counts the items that beat each user's target (by global id:
// ids 0 and the target never count).
template <typename T>
__global__ void __launch_bounds__(kThreads) rank_tile_kernel(RankArgs a) {
  __shared__ float qs[kTk][kTile + 4], xs[kTk][kTile + 4];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t i0 = blockIdx.x * static_cast<int64_t>(kTile);
  const int64_t ul0 = blockIdx.y * static_cast<int64_t>(kTile);  // within the chunk
  const T* q = static_cast<const T*>(a.q);
  const T* items = static_cast<const T*>(a.items);
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < a.d; k0 += kTk) {
    for (int e = threadIdx.x; e < kTile * kTk; e += kThreads) {
      const int row = e / kTk, k = e % kTk;
      const int64_t uu = ul0 + row, ii = i0 + row, kk = k0 + k;
      qs[k][row] = uu < a.nusers && kk < a.d ? to_f32(q[(a.u0 + uu) * a.ldq + kk]) : 0.0f;
      xs[k][row] = ii < a.v && kk < a.d ? to_f32(items[ii * a.ldi + kk]) : 0.0f;
    }
    __syncthreads();
    const int kn = static_cast<int>(min(static_cast<int64_t>(kTk), a.d - k0));
    for (int k = 0; k < kn; ++k) {
      float qv[4], xv[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        qv[m] = qs[k][ty * 4 + m];
        xv[m] = xs[k][tx * 4 + m];
      }
#pragma unroll
      for (int m = 0; m < 4; ++m)
#pragma unroll
        for (int n = 0; n < 4; ++n) acc[m][n] = fmaf(qv[m], xv[n], acc[m][n]);
    }
    __syncthreads();
  }
  int64_t id[4];
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    const int64_t i = i0 + tx * 4 + n;
    id[n] = i < a.v ? (a.ids ? static_cast<int64_t>(a.ids[i]) : i) : 0;  // 0: never counts
  }
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int64_t ul = ul0 + ty * 4 + m;
    int above = 0;
    if (ul < a.nusers) {
      const int64_t user = a.u0 + ul;
      const int32_t tgt = a.targets[user];
      const float st = a.st[user];
      const uint32_t* bits = a.bits + ul * a.words;
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const int64_t i = i0 + tx * 4 + n;
        const float s = acc[m][n];
        const bool beats = s > st || (s == st && id[n] < tgt);
        if (id[n] >= 1 && id[n] != tgt && beats && !((bits[i >> 5] >> (i & 31)) & 1u)) ++above;
      }
    }
    // The 16 threads of a user row (same ty) are 16 consecutive lanes of one warp.
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) above += __shfl_xor_sync(0xffffffffu, above, o);
    if (tx == 0 && above > 0) atomicAdd(a.count + a.u0 + ul, above);
  }
}

// Ranks: a non-finite target score ranks last, as cap + 2 (retrieval_rank.h), whatever its
// count. Counts (as_counts): the capped count, or kRankCountNonFinite.
__global__ void finish_ranks_kernel(const int32_t* count, const float* st, int64_t u, int32_t cap,
                                    bool as_counts, int32_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= u) return;
  if (as_counts)
    out[i] = isfinite(st[i]) ? min(count[i], cap) : kRankCountNonFinite;
  else
    out[i] = isfinite(st[i]) ? min(count[i], cap) + 1 : cap + 2;
}

// flag[0] = 1 unless ids[0..n) ascend strictly from >= 0 (the shard's row ids).
__global__ void check_ids_kernel(const int32_t* ids, int64_t n, int32_t* flag) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n && (ids[i] < 0 || (i > 0 && ids[i] <= ids[i - 1]))) *flag = 1;
}

// Bytes of one history-bitmap tile (kTile users x items bits).
size_t bitmap_tile_bytes(int64_t items) {
  return static_cast<size_t>(kTile) * static_cast<size_t>((items + 31) / 32) * sizeof(uint32_t);
}

}  // namespace

size_t retrieval_rank_scratch_bytes(int64_t users, int64_t items) {
  if (users == 0) return 0;
  const int64_t tiles = std::min<int64_t>((users + kTile - 1) / kTile, 4);
  return 2 * arena_bytes(4 * static_cast<size_t>(users)) +
         arena_bytes(static_cast<size_t>(tiles) * bitmap_tile_bytes(items));
}

namespace {

// What one call ranks or counts: the queries against `items` (the full table, ids = rows, or a
// shard with its row ids), the target scores from items[targets] or from target_rows.
struct RankJob {
  const char* op = "";
  const Tensor* queries = nullptr;
  const Tensor* items = nullptr;
  const Tensor* row_ids = nullptr;      // shard: [v] global ids; full table: null
  const Tensor* target_rows = nullptr;  // shard: [U, D]; full table: null (items[targets])
  const Tensor* targets = nullptr;
  const Tensor* history_offsets = nullptr;
  const Tensor* history_ids = nullptr;
  int32_t rank_cap = 0;
  const Tensor* out = nullptr;
  bool as_counts = false;
};

void run_job(Ctx& ctx, const RankJob& j) {
  const char* op = j.op;
  const Tensor &queries = *j.queries, &items = *j.items, &targets = *j.targets;
  const Tensor &history_offsets = *j.history_offsets, &history_ids = *j.history_ids;
  for (const Tensor* t : {&queries, &items, &targets, &history_offsets, &history_ids, j.out})
    check_cuda_tensor(*t, op);
  check_shape(queries, {-1, -1}, (std::string(op) + " queries").c_str());
  const int64_t u = queries.dim(0), d = queries.dim(1);
  check_shape(items, {-1, d}, (std::string(op) + " items").c_str());
  HSTU_CHECK(items.dtype == queries.dtype, op, ": items and queries dtypes differ");
  const int64_t v = items.dim(0);
  HSTU_CHECK(v <= INT32_MAX, op, ": ", v, " items exceed the i32 ids");
  if (j.target_rows) {
    check_cuda_tensor(*j.target_rows, op);
    check_shape(*j.target_rows, {u, d}, (std::string(op) + " target_rows").c_str());
    HSTU_CHECK(j.target_rows->dtype == queries.dtype, op,
               ": target_rows and queries dtypes differ");
  }
  if (j.row_ids) {
    check_cuda_tensor(*j.row_ids, op);
    check_shape(*j.row_ids, {v}, (std::string(op) + " shard_ids").c_str());
    HSTU_CHECK(j.row_ids->dtype == DType::kI32, op, ": shard_ids must be i32, got ",
               j.row_ids->str());
  }
  check_shape(targets, {u}, (std::string(op) + " targets").c_str());
  check_shape(history_offsets, {u + 1}, (std::string(op) + " history_offsets").c_str());
  check_shape(history_ids, {-1}, (std::string(op) + " history_ids").c_str());
  check_shape(*j.out, {u}, (std::string(op) + " output").c_str());
  for (const Tensor* t : {&targets, &history_offsets, &history_ids, j.out})
    HSTU_CHECK(t->dtype == DType::kI32, op, ": ids, offsets and ranks must be i32, got ", t->str());
  HSTU_CHECK(j.rank_cap >= 1 && j.rank_cap <= INT32_MAX - 2, op,
             ": rank_cap must be in [1, INT32_MAX - 2], got ", j.rank_cap);
  if (u == 0) return;

  Scratch scratch(ctx, op);
  Tensor st = scratch.alloc(DType::kF32, {u});
  Tensor count = scratch.alloc(DType::kI32, {u});  // count[0] is the ids check's flag first
  HSTU_CUDA_CHECK(cudaMemsetAsync(count.data, 0, count.nbytes(), stream_of(ctx)));
  if (j.row_ids && v > 0) {
    check_ids_kernel<<<static_cast<unsigned>((v + 255) / 256), 256, 0, stream_of(ctx)>>>(
        j.row_ids->as<int32_t>(), v, count.as<int32_t>());
    HSTU_CUDA_CHECK_LAUNCH();
  }
  // The offsets are small and needed on the host to split history entries by user chunk.
  std::vector<int32_t> off(static_cast<size_t>(u + 1));
  int32_t bad_ids = 0;
  HSTU_CUDA_CHECK(cudaMemcpyAsync(off.data(), history_offsets.data, off.size() * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, stream_of(ctx)));
  HSTU_CUDA_CHECK(cudaMemcpyAsync(&bad_ids, count.data, sizeof(int32_t), cudaMemcpyDeviceToHost,
                                  stream_of(ctx)));
  HSTU_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  HSTU_CHECK(bad_ids == 0, op, ": shard_ids ", (j.row_ids ? j.row_ids->str() : std::string()),
             " must be >= 0 and ascend strictly");
  HSTU_CHECK(off[0] >= 0 && off[u] <= history_ids.dim(0), op,
             ": history_offsets run outside history_ids ", history_ids.str());
  for (int64_t k = 0; k < u; ++k)
    HSTU_CHECK(off[k] <= off[k + 1], op, ": history_offsets decrease at user ", k);
  if (j.row_ids && v > 0)
    HSTU_CUDA_CHECK(cudaMemsetAsync(count.data, 0, sizeof(int32_t), stream_of(ctx)));

  const int64_t words = std::max<int64_t>((v + 31) / 32, 1);
  // NOTE: the bitmap chunk takes what scratch is left (at least one user tile): fewer passes
  // over the item table for large catalogues.
  const size_t tile_bytes = bitmap_tile_bytes(std::max<int64_t>(v, 1));
  const size_t avail =
      scratch.available() > 2 * Arena::kAlign ? scratch.available() - 2 * Arena::kAlign : 0;
  HSTU_CHECK(avail >= tile_bytes, op, ": ctx.scratch has ", avail, " bytes free, needs at least ",
             tile_bytes, " for a ", v, "-item history bitmap");
  const int64_t chunk =
      std::min<int64_t>((u + kTile - 1) / kTile * kTile,
                        std::min<int64_t>(static_cast<int64_t>(avail / tile_bytes), 65535) * kTile);
  Tensor bits = scratch.alloc(DType::kI32, {chunk, words});
  const int32_t* row_ids = j.row_ids ? j.row_ids->as<int32_t>() : nullptr;

  dispatch_io(queries.dtype, (std::string(op) + " queries").c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor& trows = j.target_rows ? *j.target_rows : items;
    target_score_kernel<T><<<static_cast<unsigned>((u + 127) / 128), 128, 0, stream_of(ctx)>>>(
        static_cast<const T*>(queries.data), queries.row_stride, static_cast<const T*>(trows.data),
        trows.row_stride, j.target_rows ? nullptr : targets.as<int32_t>(), u, d, st.as<float>());
    HSTU_CUDA_CHECK_LAUNCH();
    if (v == 0) return;
    for (int64_t u0 = 0; u0 < u; u0 += chunk) {
      const int64_t nu = std::min(chunk, u - u0);
      HSTU_CUDA_CHECK(
          cudaMemsetAsync(bits.data, 0, static_cast<size_t>(nu * words) * 4, stream_of(ctx)));
      const int64_t first = off[u0], last = off[u0 + nu];
      if (last > first) {
        history_bits_kernel<<<static_cast<unsigned>((last - first + 255) / 256), 256, 0,
                              stream_of(ctx)>>>(
            history_offsets.as<int32_t>(), history_ids.as<int32_t>(), u0, first, last, words,
            reinterpret_cast<uint32_t*>(bits.data), nu, row_ids, v);
        HSTU_CUDA_CHECK_LAUNCH();
      }
      RankArgs a;
      a.q = queries.data, a.ldq = queries.row_stride;
      a.items = items.data, a.ldi = items.row_stride;
      a.ids = row_ids;
      a.targets = targets.as<int32_t>(), a.st = st.as<float>();
      a.bits = reinterpret_cast<const uint32_t*>(bits.data), a.words = words;
      a.u0 = u0, a.nusers = nu, a.v = v, a.d = d;
      a.count = count.as<int32_t>();
      const dim3 grid(static_cast<unsigned>((v + kTile - 1) / kTile),
                      static_cast<unsigned>((nu + kTile - 1) / kTile));
      rank_tile_kernel<T><<<grid, kThreads, 0, stream_of(ctx)>>>(a);
      HSTU_CUDA_CHECK_LAUNCH();
    }
  });
  finish_ranks_kernel<<<static_cast<unsigned>((u + 255) / 256), 256, 0, stream_of(ctx)>>>(
      count.as<int32_t>(), st.as<float>(), u, j.rank_cap, j.as_counts, j.out->as<int32_t>());
  HSTU_CUDA_CHECK_LAUNCH();
}

}  // namespace

void retrieval_rank(Ctx& ctx, const Tensor& queries, const Tensor& items, const Tensor& targets,
                    const Tensor& history_offsets, const Tensor& history_ids, int32_t rank_cap,
                    const Tensor& ranks) {
  RankJob j;
  j.op = "retrieval_rank";
  j.queries = &queries, j.items = &items, j.targets = &targets;
  j.history_offsets = &history_offsets, j.history_ids = &history_ids;
  j.rank_cap = rank_cap, j.out = &ranks;
  run_job(ctx, j);
}

void retrieval_rank_counts(Ctx& ctx, const Tensor& queries, const Tensor& target_rows,
                           const Tensor& targets, const Tensor& shard_items,
                           const Tensor& shard_ids, const Tensor& history_offsets,
                           const Tensor& history_ids, int32_t rank_cap, const Tensor& counts) {
  RankJob j;
  j.op = "retrieval_rank_counts";
  j.queries = &queries, j.items = &shard_items, j.row_ids = &shard_ids;
  j.target_rows = &target_rows, j.targets = &targets;
  j.history_offsets = &history_offsets, j.history_ids = &history_ids;
  j.rank_cap = rank_cap, j.out = &counts, j.as_counts = true;
  run_job(ctx, j);
}

}  // namespace hstu::cuda
