// cuda/hash_dedupe.cu — dedupe_many without a radix sort of the lookups (hash_dedupe.h).
//
// The sort path (table_ops.cu) sorts all lookups as 64-bit (key, position) pairs: 8 + 1 CUB
// passes over ~1 M pairs, each latency-bound at this size. Here every pass is one kernel over the
// lookups or the set, and the order comes from the key range instead of the key bits:
//   1. set_insert: each lookup claims its key's slot in its job's open-addressing set (linear
//      probing, capacity a power of two >= 1.25 n_j), counts per slot (warp-aggregated), and the
//      job's key range (min / max of the order-preserving unsigned form of the keys).
//   2. bucket_count: every distinct key falls in bucket (key - min) >> shift of its job (2^lognb
//      buckets spanning the range: monotone in the key); per bucket (distinct keys << 32 |
//      lookups) packed in one u64, so one exclusive scan gives both offsets.
//   3. bucket_fill lists each bucket's keys (in claim order); key_rank / big_rank rank a key
//      among its bucket's (one thread per key in buckets of <= 8 keys, one warp per bucket of
//      <= 1024; more: the caller's sort path). The rank gives the key's unique index and the
//      start of its segment of the sorted positions.
//   4. place_lookups: inverse, and each lookup's position put in its key's segment (a slot cursor,
//      warp-aggregated); fix_segments then sorts each segment by position (one thread for <= 32
//      entries, else one block through a bitmap of the job's positions): (key, position) order,
//      exactly the CPU's.
// Nothing is sorted by key bits, and the one synchronisation reads U, the first keys and the
// fallback flag together.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <string>

#include "core/cuda_check.h"
#include "core/error.h"
#include "embed/cuda/hash_dedupe.h"
#include "embed/cuda/workspace.cuh"
#include "embed/table_math.h"

namespace hstu::embed::cuda {
namespace {

// The set's empty slot (a byte pattern, so one memset clears the keys). A lookup of this very
// key uses its job's extra slot (index cap_j), which probing never reaches.
constexpr int64_t kSetEmpty = static_cast<int64_t>(0x8080808080808080ull);
constexpr int kSmallBucket = 8;                       // ranked by one thread; larger by one warp
constexpr int kMaxBucket = 1024;                      // larger: the sort path
constexpr int kSmallSegment = 32;                     // sorted by one thread; larger by one block
constexpr int64_t kMaxJobLookups = int64_t{1} << 20;  // a job's position bitmap: 128 KB
constexpr int kHotThreads = 128;
constexpr int kHotBlocks = 2112;  // 16 resident per SM on 132 SMs: about one hot key each
// ctrs words
constexpr int kBigCount = 0, kHotCount = 1, kFallback = 2, kCtrs = 4;

struct SetArgs {
  int jobs = 0;
  int64_t off[kMaxDedupeJobs + 1];    // job j's lookups: [off[j], off[j + 1]) of the call's
  int64_t sbase[kMaxDedupeJobs + 1];  // job j's slots: [sbase[j], sbase[j + 1]), cap_j + 1
  int64_t bbase[kMaxDedupeJobs + 1];  // job j's buckets: [bbase[j], bbase[j + 1]), 2^lognb[j]
  int lognb[kMaxDedupeJobs];
  DedupeJob job[kMaxDedupeJobs];
};

// The last j with base[j] <= x (base[0] = 0 <= x < base[jobs]).
__device__ __forceinline__ int job_in(const int64_t* base, int jobs, int64_t x) {
  int lo = 0, hi = jobs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (base[mid] <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ uint64_t ordered(int64_t k) {  // signed order as unsigned order
  return static_cast<uint64_t>(k) ^ (uint64_t{1} << 63);
}

// Bucket (global index) of key k of job j: monotone in k within the job.
__device__ __forceinline__ int64_t bucket_of_key(const SetArgs& a, const uint64_t* mm, int j,
                                                 int64_t k) {
  const uint64_t lo = mm[j], range = mm[a.jobs + j] - lo;
  const int bits = range == 0 ? 0 : 64 - __clzll(static_cast<long long>(range));
  const int shift = max(0, bits - a.lognb[j]);
  return a.bbase[j] + static_cast<int64_t>((ordered(k) - lo) >> shift);
}

// Step 1. slot_of [n] i32, cnt [S] i32 (zero on entry), hkey [S] (kSetEmpty on entry), mm u64
// [2 * jobs] (min ~0, max 0 on entry). Blocks of 256.
__global__ void set_insert(SetArgs a, int64_t n, int64_t* hkey, int32_t* cnt, int32_t* slot_of,
                           unsigned long long* mm) {
  __shared__ unsigned long long s_lo[8], s_hi[8];
  __shared__ int s_job[8];
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bool live = i < n;
  int j = 0;
  int32_t s = -1;
  uint64_t uk = 0;
  if (live) {
    j = job_in(a.off, a.jobs, i);
    const int64_t k = a.job[j].keys[i - a.off[j]];
    uk = ordered(k);
    const int64_t base = a.sbase[j], mask = a.sbase[j + 1] - base - 2;  // cap_j - 1
    if (k == kSetEmpty) {
      s = static_cast<int32_t>(base + mask + 1);
    } else {
      int64_t h = static_cast<int64_t>(key_hash(k) & static_cast<uint64_t>(mask));
      for (;;) {
        const int64_t cur = __ldcg(hkey + base + h);
        if (cur == k) break;
        if (cur == kSetEmpty) {
          const unsigned long long old = atomicCAS(
              reinterpret_cast<unsigned long long*>(hkey + base + h),
              static_cast<unsigned long long>(kSetEmpty), static_cast<unsigned long long>(k));
          if (old == static_cast<unsigned long long>(kSetEmpty) ||
              old == static_cast<unsigned long long>(k))
            break;
        }
        h = (h + 1) & mask;
      }
      s = static_cast<int32_t>(base + h);
    }
    slot_of[i] = s;
  }
  const unsigned same = __match_any_sync(0xffffffffu, s);
  if (live && lane == __ffs(same) - 1) atomicAdd(cnt + s, __popc(same));
  // The job's key range: reduced over the warp when it holds one job, then over the block.
  const int j0 = __shfl_sync(0xffffffffu, j, 0);
  const bool one_job = __all_sync(0xffffffffu, !live || j == j0);
  const bool any_live = __any_sync(0xffffffffu, live);
  if (one_job) {
    unsigned long long lo = live ? uk : ~0ull, hi = live ? uk : 0ull;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
      hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    if (lane == 0) {
      s_lo[warp] = lo;
      s_hi[warp] = hi;
      s_job[warp] = any_live ? j0 : -1;
    }
  } else {
    if (live) {
      atomicMin(mm + j, static_cast<unsigned long long>(uk));
      atomicMax(mm + a.jobs + j, static_cast<unsigned long long>(uk));
    }
    if (lane == 0) s_job[warp] = -1;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int warps = blockDim.x / 32;
    for (int w = 0; w < warps;) {
      if (s_job[w] < 0) {
        ++w;
        continue;
      }
      const int jw = s_job[w];
      unsigned long long lo = s_lo[w], hi = s_hi[w];
      int v = w + 1;
      for (; v < warps && s_job[v] == jw; ++v) {
        lo = min(lo, s_lo[v]);
        hi = max(hi, s_hi[v]);
      }
      atomicMin(mm + jw, lo);
      atomicMax(mm + a.jobs + jw, hi);
      w = v;
    }
  }
}

// Step 2. bcnt [B] u64 (zero on entry) += 1 << 32 | cnt per occupied slot of the bucket.
__global__ void bucket_count(SetArgs a, const int64_t* hkey, const int32_t* cnt, const uint64_t* mm,
                             int64_t slots, unsigned long long* bcnt) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= slots) return;
  const int32_t c = cnt[s];
  if (c == 0) return;
  const int j = job_in(a.sbase, a.jobs, s);
  atomicAdd(bcnt + bucket_of_key(a, mm, j, hkey[s]),
            (1ull << 32) | static_cast<unsigned long long>(c));
}

// Step 3a. items[first unique index of the bucket + claim order] = slot; the bucket's first
// claimer lists a bucket of more than kSmallBucket keys for big_rank and flags the call for the
// sort path past kMaxBucket.
__global__ void bucket_fill(SetArgs a, const int64_t* hkey, const int32_t* cnt, const uint64_t* mm,
                            int64_t slots, const uint64_t* bcnt, const uint64_t* bscan,
                            int32_t* bfill, int32_t* items, int32_t* big_list, int32_t* ctrs) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= slots || cnt[s] == 0) return;
  const int j = job_in(a.sbase, a.jobs, s);
  const int64_t b = bucket_of_key(a, mm, j, hkey[s]);
  const int32_t at = atomicAdd(bfill + b, 1);
  items[static_cast<int64_t>(bscan[b] >> 32) + at] = static_cast<int32_t>(s);
  const int sz = static_cast<int>(bcnt[b] >> 32);
  if (at != 0 || sz <= kSmallBucket) return;
  if (sz > kMaxBucket)
    atomicExch(ctrs + kFallback, 1);
  else
    big_list[atomicAdd(ctrs + kBigCount, 1)] = static_cast<int32_t>(b);
}

// Key of rank u (job-local), its slot s, count c and segment start ls: the job's outputs.
__device__ __forceinline__ void place_key(const DedupeJob& jb, int32_t s, int64_t k, int32_t c,
                                          int32_t u, int32_t ls, int32_t* uidx, int32_t* segstart) {
  uidx[s] = u;
  segstart[s] = ls;
  jb.unique[u] = k;
  jb.counts[u] = c;
  if (jb.order) jb.order[jb.n + u] = ls + c;
}

// The job-local unique index and lookup offset of bucket b's first key.
__device__ __forceinline__ void bucket_starts(const SetArgs& a, const uint64_t* bscan, int j,
                                              int64_t b, int32_t& u0, int32_t& l0) {
  const uint64_t job0 = bscan[a.bbase[j]], here = bscan[b];
  u0 = static_cast<int32_t>((here >> 32) - (job0 >> 32));
  l0 = static_cast<int32_t>((here & 0xffffffffu) - (job0 & 0xffffffffu));
}

// Key k's rank among the sz keys of its bucket (slots it[0, sz)): r = the bucket's keys below k,
// pre = their lookups.
__device__ __forceinline__ void rank_in_bucket(const int32_t* it, int sz, const int64_t* hkey,
                                               const int32_t* cnt, int64_t k, int& r, int& pre) {
  for (int m = 0; m < sz; ++m) {
    const int32_t sm = it[m];
    if (hkey[sm] < k) {
      ++r;
      pre += cnt[sm];
    }
  }
}

// Step 3b. One thread per distinct key of a bucket of <= kSmallBucket keys: its rank among the
// bucket's keys and the lookups of the smaller ones.
__global__ void key_rank(SetArgs a, const int64_t* hkey, const int32_t* cnt, const uint64_t* mm,
                         int64_t slots, const uint64_t* bcnt, const uint64_t* bscan,
                         const int32_t* items, int32_t* uidx, int32_t* segstart) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= slots) return;
  const int32_t c = cnt[s];
  if (c == 0) return;
  const int j = job_in(a.sbase, a.jobs, s);
  const int64_t k = hkey[s];
  const int64_t b = bucket_of_key(a, mm, j, k);
  const int sz = static_cast<int>(bcnt[b] >> 32);
  if (sz > kSmallBucket) return;  // big_rank's
  int32_t u0, l0;
  bucket_starts(a, bscan, j, b, u0, l0);
  const int32_t* it = items + (bscan[b] >> 32);
  int r = 0, pre = 0;
  rank_in_bucket(it, sz, hkey, cnt, k, r, pre);
  place_key(a.job[j], static_cast<int32_t>(s), k, c, u0 + r, l0 + pre, uidx, segstart);
}

// Step 3c. One warp per listed bucket (kSmallBucket < size <= kMaxBucket), grid-stride.
__global__ void big_rank(SetArgs a, const int64_t* hkey, const int32_t* cnt, const uint64_t* bcnt,
                         const uint64_t* bscan, const int32_t* items, const int32_t* big_list,
                         const int32_t* ctrs, int32_t* uidx, int32_t* segstart) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
       w < ctrs[kBigCount]; w += warps) {
    const int64_t b = big_list[w];
    const int sz = static_cast<int>(bcnt[b] >> 32);
    const int j = job_in(a.bbase, a.jobs, b);
    int32_t u0, l0;
    bucket_starts(a, bscan, j, b, u0, l0);
    const int32_t* it = items + (bscan[b] >> 32);
    for (int e = lane; e < sz; e += 32) {
      const int32_t s = it[e];
      const int64_t k = hkey[s];
      int r = 0, pre = 0;
      rank_in_bucket(it, sz, hkey, cnt, k, r, pre);
      place_key(a.job[j], s, k, cnt[s], u0 + r, l0 + pre, uidx, segstart);
    }
  }
}

// Step 4a. inverse; each lookup's position in its key's segment (unsorted within it). cursor [S]
// zero on entry.
__global__ void place_lookups(SetArgs a, int64_t n, const int32_t* slot_of, const int32_t* cnt,
                              const int32_t* uidx, const int32_t* segstart, int32_t* cursor,
                              const int32_t* ctrs) {
  if (ctrs[kFallback]) return;  // uniform over the grid: no warp is split
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int lane = threadIdx.x % 32;
  const bool live = i < n;
  int j = 0;
  int32_t s = -1;
  if (live) {
    j = job_in(a.off, a.jobs, i);
    s = slot_of[i];
  }
  const bool many = live && a.job[j].order && cnt[s] > 1;
  const int32_t key = many ? s : -1;
  const unsigned same = __match_any_sync(0xffffffffu, key);
  const int leader = __ffs(same) - 1;
  int32_t at = 0;
  if (many && lane == leader) at = atomicAdd(cursor + s, __popc(same));
  at = __shfl_sync(0xffffffffu, at, leader) + __popc(same & ((1u << lane) - 1));
  if (!live) return;
  const DedupeJob& jb = a.job[j];
  const int32_t p = static_cast<int32_t>(i - a.off[j]), u = uidx[s];
  jb.inverse[p] = u;
  if (!jb.order) return;
  const int32_t e = segstart[s] + (many ? at : 0);
  jb.order[e] = p;
  jb.order[2 * jb.n + e] = u;
}

// Step 4b. One thread per slot: sorts segments of 2..kSmallSegment positions, lists longer ones
// for sort_hot.
__global__ void fix_segments(SetArgs a, const int32_t* cnt, const int32_t* segstart, int64_t slots,
                             int32_t* hot_list, int32_t* ctrs) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= slots || ctrs[kFallback]) return;
  const int32_t c = cnt[s];
  if (c <= 1) return;
  const int j = job_in(a.sbase, a.jobs, s);
  if (!a.job[j].order) return;
  if (c > kSmallSegment) {
    hot_list[atomicAdd(ctrs + kHotCount, 1)] = static_cast<int32_t>(s);
    return;
  }
  int32_t* seg = a.job[j].order + segstart[s];
  int32_t v[kSmallSegment];
  for (int e = 0; e < c; ++e) v[e] = seg[e];  // independent loads first
  for (int e = 1; e < c; ++e) {               // insertion sort
    const int32_t x = v[e];
    int f = e;
    for (; f > 0 && v[f - 1] > x; --f) v[f] = v[f - 1];
    v[f] = x;
  }
  for (int e = 0; e < c; ++e) seg[e] = v[e];
}

// Step 4c. One block per listed slot (grid-stride): the segment's positions set as bits of the
// job's position bitmap in shared memory, then written back in bit order.
__global__ void __launch_bounds__(kHotThreads)
    sort_hot(SetArgs a, const int32_t* cnt, const int32_t* segstart, const int32_t* hot_list,
             const int32_t* ctrs) {
  extern __shared__ uint32_t bits[];
  using Scan = cub::BlockScan<int, kHotThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const int hot = ctrs[kHotCount];
  for (int h = blockIdx.x; h < hot; h += gridDim.x) {
    const int32_t s = hot_list[h];
    const int j = job_in(a.sbase, a.jobs, s);
    const DedupeJob& jb = a.job[j];
    const int64_t words = (jb.n + 31) / 32;
    int32_t* seg = jb.order + segstart[s];
    const int32_t c = cnt[s];
    for (int64_t w = threadIdx.x; w < words; w += blockDim.x) bits[w] = 0;
    __syncthreads();
    for (int32_t e = threadIdx.x; e < c; e += blockDim.x) {
      const int32_t p = seg[e];
      atomicOr(bits + p / 32, 1u << (p % 32));
    }
    __syncthreads();
    const int64_t per = (words + blockDim.x - 1) / blockDim.x;
    const int64_t w0 = min(words, threadIdx.x * per), w1 = min(words, w0 + per);
    int mine = 0;
    for (int64_t w = w0; w < w1; ++w) mine += __popc(bits[w]);
    int at = 0;
    Scan(scan_tmp).ExclusiveSum(mine, at);
    for (int64_t w = w0; w < w1; ++w)
      for (uint32_t m = bits[w]; m != 0; m &= m - 1)
        seg[at++] = static_cast<int32_t>(w * 32 + __ffs(static_cast<int>(m)) - 1);
    __syncthreads();  // the bitmap and the scan storage are reused by the next slot
  }
}

// res[2j] = job j's U, res[2j + 1] = its first key; res[2 * jobs] = the fallback flag.
__global__ void set_results(SetArgs a, const uint64_t* bcnt, const uint64_t* bscan,
                            const int32_t* ctrs, long long* res) {
  const int j = threadIdx.x;
  if (j == 0) res[2 * a.jobs] = ctrs[kFallback];
  if (j >= a.jobs || ctrs[kFallback]) return;
  const int64_t last = a.bbase[j + 1] - 1;
  const uint64_t u = ((bscan[last] + bcnt[last]) >> 32) - (bscan[a.bbase[j]] >> 32);
  res[2 * j] = static_cast<long long>(u);
  res[2 * j + 1] = u > 0 ? a.job[j].unique[0] : 0;
}

unsigned blocks(int64_t n, int threads) {
  return static_cast<unsigned>(std::max<int64_t>(1, (n + threads - 1) / threads));
}

int log2_ceil(int64_t x) {  // smallest l with 2^l >= x (x >= 1)
  int l = 0;
  while ((int64_t{1} << l) < x) ++l;
  return l;
}

bool sort_forced() {
  static const bool forced = [] {
    const char* e = std::getenv("HSTU_DEDUPE_SORT");
    return e && std::string(e) == "1";
  }();
  return forced;
}

std::atomic<int64_t> g_fallbacks{0};

}  // namespace

int64_t hash_dedupe_fallbacks() {
  return g_fallbacks.load();
}

bool hash_dedupe_many(Ctx& ctx, const DedupeJob* jobs, int num_jobs, int64_t* u,
                      int64_t* first_key) {
  if (sort_forced() || num_jobs < 1) return false;
  SetArgs a;
  a.jobs = num_jobs;
  int64_t n = 0, slots = 0, buckets = 0, max_n = 0;
  bool any_order = false;
  for (int j = 0; j < num_jobs; ++j) {
    const int64_t nj = jobs[j].n;
    HSTU_CHECK(nj >= 1, "hash_dedupe_many: job ", j, " has no lookups");
    if (nj > kMaxJobLookups) return false;
    a.job[j] = jobs[j];
    a.off[j] = n;
    a.sbase[j] = slots;
    a.bbase[j] = buckets;
    a.lognb[j] = std::max(1, log2_ceil(std::max<int64_t>(2, nj / 2)));
    n += nj;
    slots += (int64_t{1} << log2_ceil(std::max<int64_t>(64, nj + nj / 4 + 1))) + 1;
    buckets += int64_t{1} << a.lognb[j];
    max_n = std::max(max_n, nj);
    any_order = any_order || jobs[j].order != nullptr;
  }
  a.off[num_jobs] = n;
  a.sbase[num_jobs] = slots;
  a.bbase[num_jobs] = buckets;
  if (slots >= (int64_t{1} << 31) || n >= (int64_t{1} << 31)) return false;
  const cudaStream_t st = static_cast<cudaStream_t>(ctx.stream);
  size_t scan_bytes = 0;
  HSTU_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes,
                                                static_cast<const uint64_t*>(nullptr),
                                                static_cast<uint64_t*>(nullptr), buckets));
  // Layout: the zeroed words first (cnt, cursor, bcnt, bfill, ctrs), then mm, hkey, the rest.
  auto al = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t z_cnt = al(4 * slots), z_cur = al(4 * slots), z_bcnt = al(8 * buckets),
               z_bfill = al(4 * buckets), z_ctrs = al(4 * kCtrs);
  const size_t zero_bytes = z_cnt + z_cur + z_bcnt + z_bfill + z_ctrs;
  const size_t b_mm = al(16 * kMaxDedupeJobs), b_hkey = al(8 * slots), b_slot = al(4 * n),
               b_uidx = al(4 * slots), b_seg = al(4 * slots), b_bscan = al(8 * buckets),
               b_items = al(4 * n), b_big = al(4 * buckets), b_hot = al(4 * (n / 32 + 1)),
               b_res = al(8 * (2 * kMaxDedupeJobs + 1)), b_tmp = al(scan_bytes);
  const size_t total = zero_bytes + b_mm + b_hkey + b_slot + b_uidx + b_seg + b_bscan + b_items +
                       b_big + b_hot + b_res + b_tmp;
  Workspace& ws = workspace(ctx, total);
  char* p = ws.take<char>(total);
  auto take = [&p](size_t bytes) {
    char* q = p;
    p += bytes;
    return q;
  };
  int32_t* cnt = reinterpret_cast<int32_t*>(take(z_cnt));
  int32_t* cursor = reinterpret_cast<int32_t*>(take(z_cur));
  auto* bcnt = reinterpret_cast<unsigned long long*>(take(z_bcnt));
  int32_t* bfill = reinterpret_cast<int32_t*>(take(z_bfill));
  int32_t* ctrs = reinterpret_cast<int32_t*>(take(z_ctrs));
  auto* mm = reinterpret_cast<unsigned long long*>(take(b_mm));
  int64_t* hkey = reinterpret_cast<int64_t*>(take(b_hkey));
  int32_t* slot_of = reinterpret_cast<int32_t*>(take(b_slot));
  int32_t* uidx = reinterpret_cast<int32_t*>(take(b_uidx));
  int32_t* segstart = reinterpret_cast<int32_t*>(take(b_seg));
  auto* bscan = reinterpret_cast<uint64_t*>(take(b_bscan));
  int32_t* items = reinterpret_cast<int32_t*>(take(b_items));
  int32_t* big_list = reinterpret_cast<int32_t*>(take(b_big));
  int32_t* hot_list = reinterpret_cast<int32_t*>(take(b_hot));
  auto* res = reinterpret_cast<long long*>(take(b_res));
  void* tmp = take(b_tmp);
  HSTU_CUDA_CHECK(cudaMemsetAsync(cnt, 0, zero_bytes, st));
  HSTU_CUDA_CHECK(cudaMemsetAsync(mm, 0xff, 8 * static_cast<size_t>(num_jobs), st));
  HSTU_CUDA_CHECK(cudaMemsetAsync(mm + num_jobs, 0, 8 * static_cast<size_t>(num_jobs), st));
  HSTU_CUDA_CHECK(cudaMemsetAsync(hkey, 0x80, 8 * static_cast<size_t>(slots), st));
  const uint64_t* mmc = reinterpret_cast<const uint64_t*>(mm);
  const uint64_t* bcntc = reinterpret_cast<const uint64_t*>(bcnt);
  set_insert<<<blocks(n, 256), 256, 0, st>>>(a, n, hkey, cnt, slot_of, mm);
  bucket_count<<<blocks(slots, 256), 256, 0, st>>>(a, hkey, cnt, mmc, slots, bcnt);
  HSTU_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp, scan_bytes, bcntc, bscan, buckets, st));
  bucket_fill<<<blocks(slots, 256), 256, 0, st>>>(a, hkey, cnt, mmc, slots, bcntc, bscan, bfill,
                                                  items, big_list, ctrs);
  key_rank<<<blocks(slots, 256), 256, 0, st>>>(a, hkey, cnt, mmc, slots, bcntc, bscan, items, uidx,
                                               segstart);
  big_rank<<<264, 256, 0, st>>>(a, hkey, cnt, bcntc, bscan, items, big_list, ctrs, uidx, segstart);
  place_lookups<<<blocks(n, 256), 256, 0, st>>>(a, n, slot_of, cnt, uidx, segstart, cursor, ctrs);
  if (any_order) {
    fix_segments<<<blocks(slots, 256), 256, 0, st>>>(a, cnt, segstart, slots, hot_list, ctrs);
    const size_t smem = 4 * static_cast<size_t>((max_n + 31) / 32);
    if (smem > 48 * 1024)
      HSTU_CUDA_CHECK(cudaFuncSetAttribute(sort_hot, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    sort_hot<<<kHotBlocks, kHotThreads, smem, st>>>(a, cnt, segstart, hot_list, ctrs);
  }
  set_results<<<1, kMaxDedupeJobs, 0, st>>>(a, bcntc, bscan, ctrs, res);
  HSTU_CUDA_CHECK_LAUNCH();
  const size_t res_bytes = 8 * static_cast<size_t>(2 * num_jobs + 1);
  HSTU_CUDA_CHECK(cudaMemcpyAsync(ws.host(), res, res_bytes, cudaMemcpyDeviceToHost, st));
  HSTU_CUDA_CHECK(cudaStreamSynchronize(st));
  if (ws.host()[2 * num_jobs] != 0) {
    g_fallbacks.fetch_add(1);
    return false;
  }
  for (int j = 0; j < num_jobs; ++j) {
    u[j] = ws.host()[2 * j];
    first_key[j] = ws.host()[2 * j + 1];
  }
  return true;
}

}  // namespace hstu::embed::cuda
