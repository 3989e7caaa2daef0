// cpu/retrieval_rank.cpp — CPU full-catalogue rank of each user's target item, and the per-shard
// counts of the distributed rank (ops/retrieval_rank.h).
//
// Users are processed in chunks: the shared tile kernel (cpu/retrieval_score.h) scores a chunk
// against the whole catalogue (or shard) into a [chunk, V] buffer, then each user's row is counted
// (OpenMP over users) with the shared comparison. History items are removed by overwriting their
// scores with -inf. The full-catalogue rank reads the target's score from that buffer; the counts
// score the target from its row with the same kernel, which gives the same bits.
#include "ops/cpu/retrieval_rank.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/common.h"
#include "ops/cpu/retrieval_score.h"

namespace hstu::cpu {
namespace {

// NOTE: about 4M scores per chunk (16 MiB in f32); at least 16 users per chunk keep the tile
// kernel's item packing cheap on huge catalogues (64 MiB at a million items), at most 256 bound
// small ones.
constexpr int64_t kScoreBudget = int64_t(1) << 22;
constexpr int64_t kMinChunk = 16, kMaxChunk = 256;

int64_t user_chunk(int64_t items) {
  return std::clamp(kScoreBudget / std::max<int64_t>(items, 1), kMinChunk, kMaxChunk);
}

// Checks shared by both entry points: queries [U,D] float, targets [U], history_offsets [U+1]
// (non-decreasing, within history_ids), history ids >= 0 and < id_limit (0 = no bound), out [U],
// rank_cap. Returns U.
int64_t check_common(const char* op, const Tensor& queries, const Tensor& targets,
                     const Tensor& history_offsets, const Tensor& history_ids, int32_t rank_cap,
                     const Tensor& out, int64_t id_limit) {
  const std::string o(op);
  check_shape(queries, {-1, -1}, (o + " queries").c_str());
  detail::check_cpu(queries, (o + " queries").c_str());
  const int64_t u = queries.dim(0);
  check_shape(targets, {u}, (o + " targets").c_str());
  detail::check_dtype(targets, DType::kI32, (o + " targets").c_str());
  check_shape(history_offsets, {u + 1}, (o + " history_offsets").c_str());
  detail::check_dtype(history_offsets, DType::kI32, (o + " history_offsets").c_str());
  check_shape(history_ids, {-1}, (o + " history_ids").c_str());
  detail::check_dtype(history_ids, DType::kI32, (o + " history_ids").c_str());
  check_shape(out, {u}, (o + " output").c_str());
  detail::check_dtype(out, DType::kI32, (o + " output").c_str());
  HSTU_CHECK(rank_cap >= 1 && rank_cap <= INT32_MAX - 2, op,
             ": rank_cap must be in [1, INT32_MAX - 2], got ", rank_cap);
  const int32_t* tgt = targets.as<int32_t>();
  const int32_t* off = history_offsets.as<int32_t>();
  const int32_t* hist = history_ids.as<int32_t>();
  HSTU_CHECK(off[0] >= 0, op, ": history_offsets[0] = ", off[0], " is negative");
  for (int64_t k = 0; k < u; ++k) {
    HSTU_CHECK(tgt[k] >= 1 && (id_limit == 0 || tgt[k] < id_limit), op, ": targets[", k,
               "] = ", tgt[k], " is outside the rankable items [1, ",
               id_limit == 0 ? std::string("...") : std::to_string(id_limit), ")");
    HSTU_CHECK(off[k] <= off[k + 1], op, ": history_offsets decrease at user ", k);
  }
  HSTU_CHECK(off[u] <= history_ids.dim(0), op, ": history_offsets[", u, "] = ", off[u],
             " runs past history_ids ", history_ids.str());
  for (int64_t i = off[0]; i < off[u]; ++i)
    HSTU_CHECK(hist[i] >= 0 && (id_limit == 0 || hist[i] < id_limit), op, ": history_ids[", i,
               "] = ", hist[i], " is outside the table [0, ",
               id_limit == 0 ? std::string("...") : std::to_string(id_limit), ")");
  return u;
}

template <typename T>
void rank_impl(Ctx& ctx, const Tensor& queries, const Tensor& items, const Tensor& targets,
               const Tensor& history_offsets, const Tensor& history_ids, int32_t rank_cap,
               const Tensor& ranks) {
  const int64_t u = queries.dim(0), v = items.dim(0), d = queries.dim(1);
  const int64_t chunk = user_chunk(v);
  std::vector<T> buf(static_cast<size_t>(std::min(chunk, u) * v));  // scores [chunk, V]
  const int32_t* tgt = targets.as<int32_t>();
  const int32_t* off = history_offsets.as<int32_t>();
  const int32_t* hist = history_ids.as<int32_t>();
  int32_t* out = ranks.as<int32_t>();
  const auto q = detail::rows_of<const T>(queries);
  for (int64_t u0 = 0; u0 < u; u0 += chunk) {
    const int64_t nu = std::min(chunk, u - u0);
    retrieval::score_block<T>(ctx, {q[u0], q.stride}, nu, detail::rows_of<const T>(items), v, d,
                              buf.data(), v);
    const int nt = detail::threads_for(ctx, nu * v);
#pragma omp parallel for schedule(dynamic, 4) num_threads(nt)
    for (int64_t k = 0; k < nu; ++k) {
      const int64_t user = u0 + k;
      T* s = buf.data() + k * v;
      const int32_t target = tgt[user];
      const T st = s[target];  // read before the history (which may hold the target) is removed
      if (!std::isfinite(st)) {
        out[user] = rank_cap + 2;  // a non-finite target score ranks last (retrieval_rank.h)
        continue;
      }
      for (int32_t i = off[user]; i < off[user + 1]; ++i)
        s[hist[i]] = -std::numeric_limits<T>::infinity();
      int64_t above = 0;  // row 0 is padding; the target does not beat itself
      for (int64_t i = 1; i < v; ++i)
        above += i != target && retrieval::beats_target<T>(s[i], i, st, target);
      out[user] = static_cast<int32_t>(std::min<int64_t>(above, rank_cap) + 1);
    }
  }
}

template <typename T>
void counts_impl(Ctx& ctx, const Tensor& queries, const Tensor& target_rows, const Tensor& targets,
                 const Tensor& shard_items, const Tensor& shard_ids, const Tensor& history_offsets,
                 const Tensor& history_ids, int32_t rank_cap, const Tensor& counts) {
  const int64_t u = queries.dim(0), n = shard_items.dim(0), d = queries.dim(1);
  const int32_t* ids = shard_ids.as<int32_t>();
  const int32_t* tgt = targets.as<int32_t>();
  const int32_t* off = history_offsets.as<int32_t>();
  const int32_t* hist = history_ids.as<int32_t>();
  int32_t* out = counts.as<int32_t>();
  const auto q = detail::rows_of<const T>(queries);
  std::vector<T> st(static_cast<size_t>(u));  // target scores [U]
  retrieval::score_pairs<T>(ctx, q, detail::rows_of<const T>(target_rows), u, d, st.data());
  const int64_t chunk = user_chunk(n);
  std::vector<T> buf(static_cast<size_t>(std::min(chunk, u) * n));  // scores [chunk, n]
  for (int64_t u0 = 0; u0 < u; u0 += chunk) {
    const int64_t nu = std::min(chunk, u - u0);
    retrieval::score_block<T>(ctx, {q[u0], q.stride}, nu, detail::rows_of<const T>(shard_items), n,
                              d, buf.data(), n);
    const int nt = detail::threads_for(ctx, nu * std::max<int64_t>(n, 1));
#pragma omp parallel for schedule(dynamic, 4) num_threads(nt)
    for (int64_t k = 0; k < nu; ++k) {
      const int64_t user = u0 + k;
      T* s = buf.data() + k * n;
      const int32_t target = tgt[user];
      const T t = st[static_cast<size_t>(user)];
      if (!std::isfinite(t)) {
        out[user] = kRankCountNonFinite;
        continue;
      }
      for (int32_t h = off[user]; h < off[user + 1]; ++h) {  // history ids in this shard
        const int32_t* at = std::lower_bound(ids, ids + n, hist[h]);
        if (at != ids + n && *at == hist[h]) s[at - ids] = -std::numeric_limits<T>::infinity();
      }
      int64_t above = 0;
      for (int64_t i = 0; i < n; ++i)
        above +=
            ids[i] != 0 && ids[i] != target && retrieval::beats_target<T>(s[i], ids[i], t, target);
      out[user] = static_cast<int32_t>(std::min<int64_t>(above, rank_cap));
    }
  }
}

}  // namespace

void retrieval_rank(Ctx& ctx, const Tensor& queries, const Tensor& items, const Tensor& targets,
                    const Tensor& history_offsets, const Tensor& history_ids, int32_t rank_cap,
                    const Tensor& ranks) {
  check_shape(queries, {-1, -1}, "retrieval_rank queries");
  const int64_t d = queries.dim(1);
  check_shape(items, {-1, d}, "retrieval_rank items");
  detail::check_dtype(items, queries.dtype, "retrieval_rank items");
  const int64_t v = items.dim(0);
  HSTU_CHECK(v <= INT32_MAX, "retrieval_rank: ", v, " items exceed the i32 ids");
  const int64_t u = check_common("retrieval_rank", queries, targets, history_offsets, history_ids,
                                 rank_cap, ranks, v);
  if (u == 0) return;
  detail::dispatch_float(queries, "retrieval_rank", [&]<typename T>(T) {
    rank_impl<T>(ctx, queries, items, targets, history_offsets, history_ids, rank_cap, ranks);
  });
}

void retrieval_rank_counts(Ctx& ctx, const Tensor& queries, const Tensor& target_rows,
                           const Tensor& targets, const Tensor& shard_items,
                           const Tensor& shard_ids, const Tensor& history_offsets,
                           const Tensor& history_ids, int32_t rank_cap, const Tensor& counts) {
  const char* op = "retrieval_rank_counts";
  check_shape(queries, {-1, -1}, "retrieval_rank_counts queries");
  const int64_t u = queries.dim(0), d = queries.dim(1);
  check_shape(target_rows, {u, d}, "retrieval_rank_counts target_rows");
  detail::check_dtype(target_rows, queries.dtype, "retrieval_rank_counts target_rows");
  check_shape(shard_items, {-1, d}, "retrieval_rank_counts shard_items");
  detail::check_dtype(shard_items, queries.dtype, "retrieval_rank_counts shard_items");
  const int64_t n = shard_items.dim(0);
  HSTU_CHECK(n <= INT32_MAX, op, ": ", n, " shard rows exceed the i32 ids");
  check_shape(shard_ids, {n}, "retrieval_rank_counts shard_ids");
  detail::check_dtype(shard_ids, DType::kI32, "retrieval_rank_counts shard_ids");
  check_common(op, queries, targets, history_offsets, history_ids, rank_cap, counts, 0);
  const int32_t* ids = shard_ids.as<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    HSTU_CHECK(ids[i] >= 0 && (i == 0 || ids[i] > ids[i - 1]), op, ": shard_ids[", i,
               "] = ", ids[i], " is negative or not above shard_ids[", i - 1,
               "] (must ascend strictly)");
  if (u == 0) return;
  detail::dispatch_float(queries, op, [&]<typename T>(T) {
    counts_impl<T>(ctx, queries, target_rows, targets, shard_items, shard_ids, history_offsets,
                   history_ids, rank_cap, counts);
  });
}

}  // namespace hstu::cpu
