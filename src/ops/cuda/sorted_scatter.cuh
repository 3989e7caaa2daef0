// sorted_scatter.cuh — deterministic scatter-add of rows into a dense fp32 gradient table:
// dst[key_p] += coef_p * src_row_p for items p = 0..n-1, bit-reproducible run to run. A source may
// add a per-key term, dst[k] += (sum over k's items of key_coef_p) * key_row(k), in the same pass.
//
// The one decision: no float atomics. Items are sorted by key with a stable CUB radix sort (so
// items of one key stay in item order), the sorted list is cut into fixed pieces of
// piece_items(n) items, and one block per piece (one warp per piece for narrow rows: the warp
// form below) sums each key's items in order. A key that lies inside one piece is written by
// that block alone; a key spanning pieces leaves per-piece partial rows (head / tail slots in
// scratch), which a second kernel adds in piece order. Every sum thus has a fixed order that
// depends only on the inputs (the key term is linear, so partial rows carry their piece's share
// of it). Used by embedding_bwd and sampled_softmax in ctx.deterministic mode.
//
// NOTE (ML-1M HSTU-large step on an H200, 14.5k tokens x 129 candidates = 1.87M items of 50
// columns; ncu): the piece sum of the sampled softmax took 123 us with one column per thread
// (d = 50 is no multiple of 8) and the embedding's two scatters of 14.5k items 53 + 35 us in 57
// blocks of 256 items. Rows of an even width are now read 2 wide where the caller says so
// (row_sum's width), and small item counts are cut into pieces of down to 16 items: 97 us for the
// softmax's piece sum, and the step's bwd.embed phase 0.088 instead of 0.160 ms.
//
// NOTE (warp form, piece_sum_warp_kernel; the default for rows of at most 32 V columns): an ncu of
// main (H200, real clocks) again showed the 123 us form: 7607 blocks of 64 threads, theoretical
// occupancy 62.5% (the 1-wide kernel's 48 registers: 10 warps a scheduler, 40 warps = 20 pieces
// an SM), achieved 56.7%, L2 throughput 45%, an instruction every ~13 cycles per warp. The
// softmax's call had lost its 2-wide width (it passed can_vec8 again), so d = 50 ran 1 wide in
// two warps that each did the whole per-item bookkeeping (~22 instructions, 5 shared loads an
// item). The 2-wide block form (64 registers, one warp a block) holds 32 warps = 32 pieces an
// SM. Rows of at most 32 * V columns now take the warp form: one piece a warp, 4 warps a block,
// items staged 32 at a time as 16-byte records (512 bytes a warp instead of 5 KB a piece), one
// broadcast shared load an item, ~15 instructions an item where no run ends (SASS of the d = 50
// bf16 instance, 4 items: 4 LDS.128, 4 LDG, 8 FFMA, 4 FADD, 9 unpack, ~10 address, ~20 loop).
// 40 registers: 12 warps a scheduler, 48 warps = 48 pieces an SM (75%; 4-warp blocks stay
// under the 32-block limit). Estimate for the ML-1M step: ~30M warp instructions (1.87M items x
// ~16 with staging) against ~80M (1-wide block form) / ~45M (2-wide); at 2-3 issued per SM cycle
// that is 40-60 us, so L2 becomes the bound: 1.87M rows of 100 B (bf16 q; 200 B f32) touching
// 4-5 (7) 32-byte sectors, ~280 (~420) MB, plus 16 B of index and coefficient loads an item
// (~30 MB), at ~5.5 TB/s from L2 about 55 (80) us. Expected 55-70 us, against 123 (1-wide
// block form) and 97 (2-wide block form); measured (session 16, H200, ncu) 75.7 us, the ML-1M
// step 2.53 against 2.54-2.57 ms. A/B: HSTU_SCATTER_PIECES_PER_BLOCK=1 runs the block form
// (warp_form_warps).
#pragma once

#include <cstdlib>
#include <cub/device/device_radix_sort.cuh>
#include <initializer_list>
#include <utility>

#include "ops/cuda/common.cuh"

namespace hstu::cuda::sorted_scatter {

// NOTE: up to 256 items per piece keeps the head/tail partials at 2 * n/256 rows (8 MiB for
// n = 131k tokens of width 1024) while giving each block enough rows to amortise its launch;
// fewer items (n < 256k) get smaller pieces, down to 16, so that there are enough blocks (at most
// 2048 pieces then: 16 MiB of partials at width 1024 instead of 4 with 256-item pieces).
constexpr int kPiece = 256;
constexpr int kMinPiece = 16;

// Items per piece for n items: a power of two in [kMinPiece, kPiece], about n / 1024.
__host__ __device__ constexpr int piece_items(int64_t n) {
  int p = kMinPiece;
  while (p < kPiece && int64_t(2) * p * 1024 <= n) p *= 2;
  return p;
}
// An upper bound of ceil(m / piece_items(m)) over every m <= n (sizes scratch for up to n items).
constexpr int64_t max_pieces(int64_t n) {
  const int64_t small = std::min<int64_t>((n + kMinPiece - 1) / kMinPiece, 2048);
  return std::max<int64_t>(small, (n + kPiece - 1) / kPiece);
}

struct Sorted {
  const int32_t* keys = nullptr;   // [n] ascending
  const int32_t* items = nullptr;  // [n] item index of each sorted key
  int64_t n = 0;
};

template <typename I>
__global__ void iota_kernel(I* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = static_cast<I>(i);
}

// Sorts keys[n] (each in [0, key_limit)) with their item indices 0..n-1; buffers from scratch.
inline Sorted sort_keys(Ctx& ctx, Scratch& scratch, const int32_t* keys, int64_t n,
                        int64_t key_limit) {
  HSTU_CHECK(n < (int64_t(1) << 31), "sorted scatter: too many items (", n, ")");
  if (n == 0) return {};
  Tensor items_in = scratch.alloc(DType::kI32, {std::max<int64_t>(n, 1)});
  Tensor keys_out = scratch.alloc(DType::kI32, {std::max<int64_t>(n, 1)});
  Tensor items_out = scratch.alloc(DType::kI32, {std::max<int64_t>(n, 1)});
  int end_bit = 1;
  while (end_bit < 32 && (int64_t(1) << end_bit) < key_limit) ++end_bit;
  // Keys are non-negative, so sorting their bits as unsigned is exact.
  const auto* kin = reinterpret_cast<const uint32_t*>(keys);
  auto* kout = reinterpret_cast<uint32_t*>(keys_out.data);
  size_t temp_bytes = 0;
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, kin, kout,
                                                  items_in.as<int32_t>(), items_out.as<int32_t>(),
                                                  n, 0, end_bit, stream_of(ctx)));
  Tensor temp = scratch.alloc(DType::kU8, {static_cast<int64_t>(std::max<size_t>(temp_bytes, 1))});
  iota_kernel<int32_t><<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream_of(ctx)>>>(
      items_in.as<int32_t>(), n);
  HSTU_CUDA_CHECK_LAUNCH();
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data, temp_bytes, kin, kout,
                                                  items_in.as<int32_t>(), items_out.as<int32_t>(),
                                                  n, 0, end_bit, stream_of(ctx)));
  return {keys_out.as<int32_t>(), items_out.as<int32_t>(), n};
}

// Scratch bytes of sort_keys for n items.
inline size_t sort_scratch_bytes(int64_t n) {
  size_t temp_bytes = 0;
  HSTU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, 32));
  return 3 * arena_bytes(4 * static_cast<size_t>(std::max<int64_t>(n, 1))) +
         arena_bytes(temp_bytes);
}
// Scratch bytes of one row_sum over n items of width d.
inline size_t row_sum_scratch_bytes(int64_t n, int64_t d) {
  return 2 * arena_bytes(4 * static_cast<size_t>(max_pieces(n) * d));
}

// A row source with the optional per-key term: key_coef(p) (a scalar per item) and key_row(key)
// (an f32 row per key), adding (sum of the key's key_coef) * key_row(key) to dst[key].
template <typename Src>
concept HasKeyTerm = requires(const Src& src, int32_t i) {
  src.key_coef(i);
  src.key_row(i);
};

// The key term at the end of a run of key `key`: acc += key_acc * key_row(key)[c, c + V), and
// key_acc restarts (both piece-sum forms; Src with HasKeyTerm).
template <int V, typename Src, typename C>
__device__ __forceinline__ void add_key_term(const Src& src, int32_t key, C c, float (&acc)[V],
                                             float& key_acc) {
  float x[V];
  load_vec<V>(src.key_row(key) + c, x);
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] += key_acc * x[j];
  key_acc = 0.0f;
}

// One block per piece of `piece` sorted items; threads cover the row's columns V at a time.
// Src provides `row(p)` (a pointer to item p's source row, f32/bf16/f16) and `coef(p)`, and
// optionally the key term (HasKeyTerm). Row pointers and coefficients are staged in shared
// memory once per piece; each thread then loads kAhead items' source values before summing them
// (several loads in flight instead of one dependent load per item), in item order.
template <int V, typename Src>
__global__ void piece_sum_kernel(Sorted s, Src src, float* __restrict__ dst, int64_t ldd, int64_t d,
                                 float* __restrict__ head, float* __restrict__ tail, int piece) {
  using Row = decltype(std::declval<const Src&>().row(int32_t{0}));
  constexpr bool kKey = HasKeyTerm<Src>;
  constexpr int kAhead = V >= 8 ? 4 : V == 2 ? 16 : 8;
  __shared__ int32_t keys[kPiece];
  __shared__ Row rows[kPiece];
  __shared__ float coefs[kPiece], key_coefs[kKey ? kPiece : 1];
  const int64_t b = blockIdx.x * static_cast<int64_t>(piece);
  const int e = static_cast<int>(min(static_cast<int64_t>(piece), s.n - b));  // >= 1
  for (int i = threadIdx.x; i < e; i += blockDim.x) {
    const int32_t p = s.items[b + i];
    keys[i] = s.keys[b + i];
    rows[i] = src.row(p);
    coefs[i] = src.coef(p);
    if constexpr (kKey) key_coefs[i] = src.key_coef(p);
  }
  __syncthreads();
  const int32_t prev_key = b > 0 ? s.keys[b - 1] : -1;
  const int32_t next_key = b + e < s.n ? s.keys[b + e] : -1;
  float* head_row = head + blockIdx.x * d;
  float* tail_row = tail + blockIdx.x * d;
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < d;
       c += static_cast<int64_t>(blockDim.x) * V) {
    float acc[V] = {};
    float key_acc = 0.0f;
    int seg_start = 0;
    for (int i0 = 0; i0 < e; i0 += kAhead) {
      float v[kAhead][V];
#pragma unroll
      for (int u = 0; u < kAhead; ++u)  // past the end: reload the last row (valid, unused)
        load_vec<V>(rows[min(i0 + u, e - 1)] + c, v[u]);
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const int i = i0 + u;
        if (i >= e) break;
        const float k = coefs[i];
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += k * v[u][j];
        if constexpr (kKey) key_acc += key_coefs[i];
        if (i + 1 < e && keys[i + 1] == keys[i]) continue;
        // End of this piece's part of a segment: own it, or leave a partial for the combine.
        const int32_t key = keys[i];
        if constexpr (kKey) add_key_term<V>(src, key, c, acc, key_acc);
        float* out;
        if (seg_start == 0 && key == prev_key) {
          out = head_row + c;
        } else if (i + 1 == e && key == next_key) {
          out = tail_row + c;
        } else {
          out = dst + key * ldd + c;
          float old[V];
          load_vec_rw<V>(out, old);
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j] += old[j];
        }
        store_vec<V>(out, acc);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = 0.0f;
        seg_start = i + 1;
      }
    }
  }
}

// The warp form of piece_sum_kernel for rows of at most 32 * V columns (every column in one
// pass of a warp's lanes): each warp of a block sums its own piece. The piece is walked in
// groups of 32 items; lane l stages item g + l of group g as one 16-byte record in the warp's
// 512 bytes of shared memory (row pointer, coef, key_coef: one broadcast load per item where
// piece_sum_kernel reads five), whether the item ends its key's run as one ballot mask for the
// group, and its key in a register (read by a shuffle where a run ends). The next group's index
// loads (sorted items and keys) are issued before this group's sum, so they are in flight during
// it. Each column's additions are those of piece_sum_kernel in the same order (acc += coef *
// value per item, at a run's end the key term, then the old dst value), so both forms give the
// same bits. Lanes past the row's last column read column 0 (valid addresses, in sectors the
// first lanes read) and store nothing. The last group's padding items repeat the piece's last
// item and end no run, so their additions are never stored.
template <int V, typename Src>
__global__ void __launch_bounds__(256)
    piece_sum_warp_kernel(Sorted s, Src src, float* __restrict__ dst, int64_t ldd, int64_t d,
                          float* __restrict__ head, float* __restrict__ tail, int piece,
                          int pieces) {
  using Row = decltype(std::declval<const Src&>().row(int32_t{0}));
  static_assert(sizeof(Row) == 8, "a record holds an 8-byte row pointer");
  constexpr bool kKey = HasKeyTerm<Src>;
  constexpr unsigned kAll = 0xffffffffu;
  // Items whose row loads are in flight together: 4 (2 at V = 8) keeps the kernel at 40 (52)
  // registers, 48 (36) warps an SM; 8 took 56 (16 bytes of spills when held to 40).
  constexpr int kAhead = V >= 8 ? 2 : 4;
  static_assert(32 % kAhead == 0);
  extern __shared__ uint4 staged_items[];  // [warps][32] records
  const int lane = static_cast<int>(threadIdx.x) & 31;
  uint4* staged = staged_items + (threadIdx.x & ~31u);
  // Item counts are below 2^31 (sort_keys), so piece and item indices fit 32 bits.
  const int q = static_cast<int>(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5));
  if (q >= pieces) return;  // the whole warp; only warp-level synchronisation follows
  const int b = q * piece;
  const int e = min(piece, static_cast<int>(s.n - b));  // >= 1
  const bool writes = lane * V < d;
  const unsigned c = writes ? lane * V : 0;  // this lane's first column (lanes past d: column 0)
  // Index loads of the item this lane stages in group g (clamped to the piece's last item).
  int32_t p, key, after;
  const auto index_loads = [&](int g) {
    const int i = b + min(g + lane, e - 1);
    p = s.items[i];
    key = s.keys[i];
    after = i + 1 < b + e ? s.keys[i + 1] : key;
  };
  index_loads(0);
  float acc[V] = {};
  float key_acc = 0.0f;
  bool first_run = true;  // the piece's first run (its head partial if the key comes from before)
  for (int g = 0; g < e; g += 32) {
    // Stage this group: the loads that depend on the item index, the run ends as one mask.
    const auto row_bits = reinterpret_cast<unsigned long long>(src.row(p));
    const float coef = src.coef(p);
    float kcoef = 0.0f;
    if constexpr (kKey) kcoef = src.key_coef(p);
    const int32_t run_keys = key;
    const unsigned ends = __ballot_sync(kAll, g + lane < e && (g + lane + 1 == e || after != key));
    if (g + 32 < e) index_loads(g + 32);  // the next group's, in flight during this sum
    __syncwarp();                         // the previous group's records are read
    staged[lane] =
        make_uint4(static_cast<unsigned>(row_bits), static_cast<unsigned>(row_bits >> 32),
                   __float_as_uint(coef), __float_as_uint(kcoef));
    __syncwarp();
    const int n = min(32, e - g);
    for (int u0 = 0; u0 < n; u0 += kAhead) {
      const unsigned block_ends = (ends >> u0) & ((1u << kAhead) - 1);
      if (block_ends == 0) {  // no run ends among these items (the common case)
        float v[kAhead][V], k[kAhead], kc[kAhead];
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {
          const uint4 r = staged[u0 + u];
          const auto row =
              reinterpret_cast<Row>((static_cast<unsigned long long>(r.y) << 32) | r.x);
          load_vec<V>(row + c, v[u]);
          k[u] = __uint_as_float(r.z);
          kc[u] = __uint_as_float(r.w);
        }
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j] += k[u] * v[u][j];
          if constexpr (kKey) key_acc += kc[u];
        }
        continue;
      }
      // A run ends among these items: one item at a time (a few blocks a piece).
#pragma unroll 1
      for (int u = 0; u < kAhead; ++u) {
        const uint4 r = staged[u0 + u];
        const auto row = reinterpret_cast<Row>((static_cast<unsigned long long>(r.y) << 32) | r.x);
        float v[V];
        load_vec<V>(row + c, v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += __uint_as_float(r.z) * v[j];
        if constexpr (kKey) key_acc += __uint_as_float(r.w);
        if (!(block_ends & (1u << u))) continue;
        // End of this piece's part of a run: own it, or leave a partial for the combine.
        const int32_t run_key = __shfl_sync(kAll, run_keys, u0 + u);
        if constexpr (kKey) add_key_term<V>(src, run_key, c, acc, key_acc);
        int qq = q;  // computed here, not kept in registers through the loop
        asm volatile("" : "+r"(qq));
        float* out;
        if (first_run && qq > 0 && run_key == s.keys[qq * piece - 1]) {
          out = head + static_cast<int64_t>(qq) * d + c;
        } else if (g + u0 + u + 1 == e && qq * piece + e < s.n &&
                   run_key == s.keys[qq * piece + e]) {
          out = tail + static_cast<int64_t>(qq) * d + c;
        } else {
          out = dst + run_key * ldd + c;
          float old[V];
          load_vec_rw<V>(out, old);
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j] += old[j];
        }
        if (writes) store_vec<V>(out, acc);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = 0.0f;
        first_run = false;
      }
    }
  }
}

// For each piece whose last key started in it and continues past it: that key's tail partial
// plus the head partials of the following pieces, in piece order, into dst.
template <int V>
__global__ void combine_kernel(Sorted s, float* dst, int64_t ldd, int64_t d, const float* head,
                               const float* tail, int64_t pieces, int piece) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(piece);
  const int64_t e = min(s.n, b + piece);
  if (e >= s.n) return;
  const int32_t key = s.keys[e - 1];
  if (s.keys[e] != key) return;                                   // does not continue
  if (s.keys[b] == key && b > 0 && s.keys[b - 1] == key) return;  // a head, not a tail
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < d;
       c += static_cast<int64_t>(blockDim.x) * V) {
    float acc[V], v[V];
    load_vec_rw<V>(tail + blockIdx.x * d + c, acc);
    for (int64_t q = blockIdx.x + 1; q < pieces && s.keys[q * piece] == key; ++q) {
      load_vec_rw<V>(head + q * d + c, v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += v[j];
    }
    float* out = dst + key * ldd + c;
    load_vec_rw<V>(out, v);
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] += v[j];
    store_vec<V>(out, acc);
  }
}

// The widest access row_sum may use for rows of d columns in every listed tensor: 8 (d % 8 == 0,
// 16-byte aligned rows), 2 (d even, rows aligned to two elements) or 1.
inline int row_width(int64_t d, std::initializer_list<const Tensor*> ts) {
  if (can_vec8(d, ts)) return 8;
  if (d % 2 != 0) return 1;
  for (const Tensor* t : ts)
    if (!t->empty() && vec_alignment(*t) < static_cast<int>(2 * dtype_size(t->dtype))) return 1;
  return 2;
}

// Warps per block of the warp form (piece_sum_warp_kernel) for rows of d columns that allow
// `width`-wide access, or 0 for one piece per block (piece_sum_kernel). The warp form where a
// warp's lanes cover the row (d <= 32, or d <= 64 two wide, or d <= 256 eight wide), with 4
// warps a block; HSTU_SCATTER_PIECES_PER_BLOCK=1 keeps one piece per block everywhere (the A/B
// switch), =2 / =8 sets the warps a block. Read at every call (host only; tests switch it).
inline int warp_form_warps(int64_t d, int width) {
  const bool fits = d <= 32 || (width >= 2 && d <= 64) || (width == 8 && d <= 256);
  if (!fits) return 0;
  const char* env = std::getenv("HSTU_SCATTER_PIECES_PER_BLOCK");
  if (env && env[0] != 0 && env[1] == 0) {
    if (env[0] == '1') return 0;
    if (env[0] == '2') return 2;
    if (env[0] == '8') return 8;
  }
  return 4;
}

// dst[key] += sum over the key's items p (in item order) of src.coef(p) * src.row(p)[0:d], plus
// (sum of src.key_coef(p)) * src.key_row(key)[0:d] for a source with the key term.
// width: the widest access every source row, key row and dst row allows (row_width): 8, 2 or 1.
// One piece per block reads width-wide; the warp form (warp_form_warps) reads the narrowest
// allowed width that covers the row with one warp (fewer instructions per item), the same sums.
template <typename Src>
void row_sum(Ctx& ctx, const Sorted& s, const Src& src, float* dst, int64_t ldd, int64_t d,
             int width) {
  if (s.n == 0 || d == 0) return;
  HSTU_CHECK(width == 8 || width == 2 || width == 1, "sorted scatter: width ", width);
  const int piece = piece_items(s.n);
  const int64_t pieces = (s.n + piece - 1) / piece;
  Scratch partials(ctx, "sorted scatter");  // rewound on return: the next call reuses the bytes
  Tensor head = partials.alloc(DType::kF32, {pieces, d});
  Tensor tail = partials.alloc(DType::kF32, {pieces, d});
  const int warps = warp_form_warps(d, width);
  const auto warp_form = [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    const unsigned blocks = static_cast<unsigned>((pieces + warps - 1) / warps);
    piece_sum_warp_kernel<V, Src>
        <<<blocks, 32 * warps, sizeof(uint4) * 32 * warps, stream_of(ctx)>>>(
            s, src, dst, ldd, d, head.as<float>(), tail.as<float>(), piece,
            static_cast<int>(pieces));
    HSTU_CUDA_CHECK_LAUNCH();
  };
  const auto launch = [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    const int threads = static_cast<int>(std::min<int64_t>(256, ((d / V) + 31) / 32 * 32));
    if (warps == 0) {
      piece_sum_kernel<V, Src><<<static_cast<unsigned>(pieces), threads, 0, stream_of(ctx)>>>(
          s, src, dst, ldd, d, head.as<float>(), tail.as<float>(), piece);
      HSTU_CUDA_CHECK_LAUNCH();
    } else if (d <= 32) {
      warp_form(std::integral_constant<int, 1>{});
    } else if (d <= 64) {
      warp_form(std::integral_constant<int, 2>{});
    } else {
      warp_form(std::integral_constant<int, 8>{});
    }
    combine_kernel<V><<<static_cast<unsigned>(pieces), threads, 0, stream_of(ctx)>>>(
        s, dst, ldd, d, head.as<float>(), tail.as<float>(), pieces, piece);
    HSTU_CUDA_CHECK_LAUNCH();
  };
  if (width == 8)
    launch(std::integral_constant<int, 8>{});
  else if (width == 2)
    launch(std::integral_constant<int, 2>{});
  else
    launch(std::integral_constant<int, 1>{});
}

}  // namespace hstu::cuda::sorted_scatter
