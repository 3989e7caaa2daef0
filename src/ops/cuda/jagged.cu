// jagged.cu — CUDA ranking token sequence (build / split back) and the candidates' row gather
// with its inverse (see jagged.h for the layout).
//
// The one decision: all four ops are one generic row move. A thread copies one 16-byte (or
// narrower, as alignment allows) chunk of one row; the row's partner is found by a binary search
// over the device offsets (the sample whose row range holds it), so the host never reads device
// offsets and nothing is staged. Each destination row has exactly one source (or is zero-filled),
// so every output element is written once, without atomics, and the bytes move unchanged: the
// kernels are dtype-agnostic (f32, bf16, f16, f64) and bit-exact against the CPU reference.
//
// Precondition (checked on the host by the CPU backend, trusted here): the offsets are
// consistent with the tensors' row counts, as ranking_layout produces them.
#include "ops/cuda/common.cuh"
#include "ops/cuda/jagged.h"
#include "ops/detail/checks.h"

namespace hstu::cuda {
namespace {

constexpr int kThreads = 256;

// One row move: src == nullptr zero-fills dst.
struct RowPair {
  const char* src;
  char* dst;
};

// Largest b in [0, batch) with key(b) <= r, given key(0) <= r and a non-decreasing key (repeated
// keys belong to empty samples; the largest b is the sample whose range [key(b), key(b+1))
// holds r).
template <typename Key>
__device__ __forceinline__ int64_t sample_of(int64_t r, int64_t batch, Key key) {
  int64_t lo = 0, hi = batch;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (key(mid) <= r)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// Token row r of the ranking sequence <-> its feature row (ctx, item or action).
struct TokenRows {
  const int32_t* off;  // [B+1] event offsets
  int64_t batch, c, k;
  char* seq;  // [B*C + k*T, D]
  int64_t ld_seq;
  char* feat[3];  // ctx [B*C, D], item [T, D], action [T, D] (k = 2)
  int64_t ld_feat[3];
  bool to_seq;  // forward: feature -> sequence; backward: sequence -> feature
  __device__ RowPair operator()(int64_t r) const {
    const int64_t b =
        sample_of(r, batch, [&](int64_t s) { return s * c + k * static_cast<int64_t>(off[s]); });
    const int64_t local = r - (b * c + k * static_cast<int64_t>(off[b]));
    int f = 0;
    int64_t row = b * c + local;
    if (local >= c) {
      const int64_t j = local - c;
      f = 1 + static_cast<int>(j % k);
      row = off[b] + j / k;
    }
    char* fr = feat[f] + row * ld_feat[f];
    char* sr = seq + r * ld_seq;
    return to_seq ? RowPair{fr, sr} : RowPair{sr, fr};
  }
};

// The fields of both candidate maps: the offsets and the rows moved from src to dst.
struct CandidateMove {
  const int32_t* tok;   // [B+1] token offsets of the layer output
  const int32_t* cand;  // [B+1] candidate offsets
  int64_t batch, stride;
  const char* src;
  int64_t ld_src;
  char* dst;
  int64_t ld_dst;
};

// The gather, one entry per candidate: candidate row n of dst (out [N, D]) <- its item token
// row of src (the layer output x [T', D]).
struct CandidateRows : CandidateMove {
  __device__ RowPair operator()(int64_t n) const {
    const int64_t b = sample_of(n, batch, [&](int64_t s) { return int64_t{cand[s]}; });
    const int64_t nc = cand[b + 1] - cand[b];
    const int64_t row = tok[b + 1] - stride * nc + stride * (n - cand[b]);
    return {src + row * ld_src, dst + n * ld_dst};
  }
};

// Its inverse, one entry per TOKEN row so that every row of dst (dx [T', D]) is written: token
// row r <- its candidate's gradient row of src (d_out [N, D]), or zero for a non-candidate row.
struct CandidateRowsBwd : CandidateMove {
  __device__ RowPair operator()(int64_t r) const {
    const int64_t b = sample_of(r, batch, [&](int64_t s) { return int64_t{tok[s]}; });
    const int64_t nc = cand[b + 1] - cand[b];
    const int64_t d = r - (tok[b + 1] - stride * nc);
    const char* from = d >= 0 && d % stride == 0 ? src + (cand[b] + d / stride) * ld_src : nullptr;
    return {from, dst + r * ld_dst};
  }
};

// Moves `units` U-sized chunks of each of `rows` rows as map(r) says.
template <typename U, typename Map>
__global__ void __launch_bounds__(kThreads) move_rows_kernel(Map map, int64_t rows, int64_t units) {
  const int64_t total = rows * units;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / units, u = i % units;
    const RowPair p = map(r);
    U v{};
    if (p.src) v = reinterpret_cast<const U*>(p.src)[u];
    reinterpret_cast<U*>(p.dst)[u] = v;
  }
}

// out_offsets[b] = b*C + k*offsets[b] for b <= B.
__global__ void token_offsets_kernel(const int32_t* off, int64_t batch, int64_t c, int64_t k,
                                     int32_t* out) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b <= batch) out[b] = static_cast<int32_t>(b * c + k * static_cast<int64_t>(off[b]));
}

// Largest power of two (<= 16) dividing the row length in bytes, every listed tensor's address
// and row pitch in bytes: the chunk size the row move can use.
int chunk_bytes(int64_t row_bytes, std::initializer_list<const Tensor*> ts) {
  uint64_t a = static_cast<uint64_t>(row_bytes) | 16;
  for (const Tensor* t : ts) {
    if (t->empty()) continue;
    a |= reinterpret_cast<uintptr_t>(t->data);
    a |= static_cast<uint64_t>(t->row_stride) * dtype_size(t->dtype);
  }
  return static_cast<int>(a & (~a + 1));
}

// Launches move_rows_kernel with the widest chunk `bytes` allows.
template <typename Map>
void launch_move(Ctx& ctx, const Map& map, int64_t rows, int64_t row_bytes, int bytes) {
  if (rows == 0 || row_bytes == 0) return;
  const int64_t units = row_bytes / bytes;
  const int64_t want = (rows * units + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(want, 32 * num_sms()));
  auto go = [&](auto tag) {
    using U = typename decltype(tag)::type;
    move_rows_kernel<U, Map><<<grid, kThreads, 0, stream_of(ctx)>>>(map, rows, units);
  };
  switch (bytes) {
    case 16:
      go(TypeTag<uint4>{});
      break;
    case 8:
      go(TypeTag<uint2>{});
      break;
    case 4:
      go(TypeTag<uint32_t>{});
      break;
    case 2:
      go(TypeTag<uint16_t>{});
      break;
    default:
      go(TypeTag<uint8_t>{});
  }
  HSTU_CUDA_CHECK_LAUNCH();
}

TokenRows token_rows(const RankingTokenShape& a, const Tensor& offsets, const Tensor& ctx_emb,
                     const Tensor& item_emb, const Tensor& action_emb, const Tensor& seq,
                     bool to_seq) {
  const int64_t es = static_cast<int64_t>(dtype_size(seq.dtype));
  TokenRows m{};
  m.off = offsets.as<int32_t>();
  m.batch = a.batch, m.c = a.c, m.k = a.k;
  m.seq = static_cast<char*>(seq.data), m.ld_seq = seq.row_stride * es;
  const Tensor* f[3] = {&ctx_emb, &item_emb, &action_emb};
  for (int i = 0; i < 3; ++i) {
    const bool used = i == 1 || (i == 0 && a.c > 0) || (i == 2 && a.k == 2);
    m.feat[i] = used ? static_cast<char*>(f[i]->data) : nullptr;
    m.ld_feat[i] = used ? f[i]->row_stride * es : 0;
  }
  m.to_seq = to_seq;
  return m;
}

// Moves candidate rows src -> dst with Map (CandidateRows or CandidateRowsBwd), one map entry per
// dst row.
template <typename Map>
void move_candidate_rows(Ctx& ctx, const Tensor& src, const Tensor& dst, const Tensor& tok_offsets,
                         const Tensor& cand_offsets, int64_t batch, int32_t stride) {
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype)), row_bytes = src.dim(1) * es;
  const Map map{CandidateMove{tok_offsets.as<int32_t>(), cand_offsets.as<int32_t>(), batch, stride,
                              static_cast<const char*>(src.data), src.row_stride * es,
                              static_cast<char*>(dst.data), dst.row_stride * es}};
  launch_move(ctx, map, dst.dim(0), row_bytes, chunk_bytes(row_bytes, {&src, &dst}));
}

}  // namespace

void ranking_tokens_fwd(Ctx& ctx, const Tensor& ctx_emb, const Tensor& item_emb,
                        const Tensor& action_emb, const Tensor& offsets, int32_t num_contextual,
                        const Tensor& out, const Tensor& out_offsets) {
  const RankingTokenShape a = check_ranking_tokens_fwd(
      ctx_emb, item_emb, action_emb, offsets, num_contextual, out, out_offsets, Device::kCUDA);
  token_offsets_kernel<<<static_cast<unsigned>((a.batch + 1 + kThreads - 1) / kThreads), kThreads,
                         0, stream_of(ctx)>>>(offsets.as<int32_t>(), a.batch, a.c, a.k,
                                              out_offsets.as<int32_t>());
  HSTU_CUDA_CHECK_LAUNCH();
  const int64_t row_bytes = a.d * static_cast<int64_t>(dtype_size(out.dtype));
  launch_move(ctx, token_rows(a, offsets, ctx_emb, item_emb, action_emb, out, true), out.dim(0),
              row_bytes, chunk_bytes(row_bytes, {&ctx_emb, &item_emb, &action_emb, &out}));
}

void ranking_tokens_bwd(Ctx& ctx, const Tensor& d_out, const Tensor& offsets,
                        int32_t num_contextual, const Tensor& d_ctx, const Tensor& d_item,
                        const Tensor& d_action) {
  const RankingTokenShape a = check_ranking_tokens_bwd(d_out, offsets, num_contextual, d_ctx,
                                                       d_item, d_action, Device::kCUDA);
  const int64_t row_bytes = a.d * static_cast<int64_t>(dtype_size(d_out.dtype));
  launch_move(ctx, token_rows(a, offsets, d_ctx, d_item, d_action, d_out, false), d_out.dim(0),
              row_bytes, chunk_bytes(row_bytes, {&d_ctx, &d_item, &d_action, &d_out}));
}

void gather_candidate_rows(Ctx& ctx, const Tensor& x, const Tensor& tok_offsets,
                           const Tensor& cand_offsets, int32_t stride, const Tensor& out) {
  const int64_t batch =
      check_gather_candidate_rows(x, tok_offsets, cand_offsets, stride, out, Device::kCUDA);
  move_candidate_rows<CandidateRows>(ctx, x, out, tok_offsets, cand_offsets, batch, stride);
}

void gather_candidate_rows_bwd(Ctx& ctx, const Tensor& d_out, const Tensor& tok_offsets,
                               const Tensor& cand_offsets, int32_t stride, const Tensor& dx) {
  const int64_t batch =
      check_gather_candidate_rows_bwd(d_out, tok_offsets, cand_offsets, stride, dx, Device::kCUDA);
  move_candidate_rows<CandidateRowsBwd>(ctx, d_out, dx, tok_offsets, cand_offsets, batch, stride);
}

}  // namespace hstu::cuda
