// cpu/retrieval_rank.cpp — CPU full-catalogue rank of each user's target item.
//
// Users are processed in chunks: one BLAS GEMM scores a chunk against the whole catalogue into a
// [chunk, V] buffer, then each user's row is counted (OpenMP over users). The target's score is
// read from that same buffer, not recomputed by another routine, so every comparison is between
// scores of one computation; history items are removed by overwriting their scores with -inf.
#include "ops/cpu/retrieval_rank.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/common.h"
#include "ops/cpu/gemm.h"

namespace hstu::cpu {
namespace {

// NOTE: about 4M scores per chunk (16 MiB in f32); at least 16 users per chunk keep the GEMM
// efficient on huge catalogues (64 MiB at a million items), at most 256 bound small ones.
constexpr int64_t kScoreBudget = int64_t(1) << 22;
constexpr int64_t kMinChunk = 16, kMaxChunk = 256;

template <typename T>
void rank_impl(Ctx& ctx, const Tensor& queries, const Tensor& items, const Tensor& targets,
               const Tensor& history_offsets, const Tensor& history_ids, int32_t rank_cap,
               const Tensor& ranks) {
  const int64_t u = queries.dim(0), v = items.dim(0);
  const int64_t chunk = std::clamp(kScoreBudget / std::max<int64_t>(v, 1), kMinChunk, kMaxChunk);
  std::vector<T> buf(static_cast<size_t>(std::min(chunk, u) * v));  // scores [chunk, V]
  const int32_t* tgt = targets.as<int32_t>();
  const int32_t* off = history_offsets.as<int32_t>();
  const int32_t* hist = history_ids.as<int32_t>();
  int32_t* out = ranks.as<int32_t>();
  for (int64_t u0 = 0; u0 < u; u0 += chunk) {
    const int64_t nu = std::min(chunk, u - u0);
    const Tensor scores(buf.data(), queries.dtype, Device::kCPU, {nu, v});
    GemmDesc desc;
    desc.trans_b = true;  // scores = queries[u0:u0+nu] @ items^T
    cpu::gemm(ctx, desc, queries.rows(u0, u0 + nu), items, scores, Tensor());
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
      // Items ranked above the target: higher score, or equal score and smaller id.
      int64_t above = 0;
      for (int64_t i = 1; i < target; ++i) above += s[i] >= st;
      for (int64_t i = target + 1; i < v; ++i) above += s[i] > st;
      out[user] = static_cast<int32_t>(std::min<int64_t>(above, rank_cap) + 1);
    }
  }
}

}  // namespace

void retrieval_rank(Ctx& ctx, const Tensor& queries, const Tensor& items, const Tensor& targets,
                    const Tensor& history_offsets, const Tensor& history_ids, int32_t rank_cap,
                    const Tensor& ranks) {
  check_shape(queries, {-1, -1}, "retrieval_rank queries");
  detail::check_cpu(queries, "retrieval_rank queries");
  const int64_t u = queries.dim(0), d = queries.dim(1);
  check_shape(items, {-1, d}, "retrieval_rank items");
  detail::check_dtype(items, queries.dtype, "retrieval_rank items");
  const int64_t v = items.dim(0);
  HSTU_CHECK(v <= INT32_MAX, "retrieval_rank: ", v, " items exceed the i32 ids");
  check_shape(targets, {u}, "retrieval_rank targets");
  detail::check_dtype(targets, DType::kI32, "retrieval_rank targets");
  check_shape(history_offsets, {u + 1}, "retrieval_rank history_offsets");
  detail::check_dtype(history_offsets, DType::kI32, "retrieval_rank history_offsets");
  check_shape(history_ids, {-1}, "retrieval_rank history_ids");
  detail::check_dtype(history_ids, DType::kI32, "retrieval_rank history_ids");
  check_shape(ranks, {u}, "retrieval_rank ranks");
  detail::check_dtype(ranks, DType::kI32, "retrieval_rank ranks");
  HSTU_CHECK(rank_cap >= 1 && rank_cap <= INT32_MAX - 2,
             "retrieval_rank: rank_cap must be in [1, INT32_MAX - 2], got ", rank_cap);
  const int32_t* tgt = targets.as<int32_t>();
  const int32_t* off = history_offsets.as<int32_t>();
  const int32_t* hist = history_ids.as<int32_t>();
  HSTU_CHECK(off[0] >= 0, "retrieval_rank: history_offsets[0] = ", off[0], " is negative");
  for (int64_t k = 0; k < u; ++k) {
    HSTU_CHECK(tgt[k] >= 1 && tgt[k] < v, "retrieval_rank: targets[", k, "] = ", tgt[k],
               " is outside the rankable items [1, ", v, ")");
    HSTU_CHECK(off[k] <= off[k + 1], "retrieval_rank: history_offsets decrease at user ", k);
  }
  HSTU_CHECK(off[u] <= history_ids.dim(0), "retrieval_rank: history_offsets[", u, "] = ", off[u],
             " runs past history_ids ", history_ids.str());
  for (int64_t i = off[0]; i < off[u]; ++i)
    HSTU_CHECK(hist[i] >= 0 && hist[i] < v, "retrieval_rank: history_ids[", i, "] = ", hist[i],
               " is outside the table [0, ", v, ")");
  if (u == 0) return;
  detail::dispatch_float(queries, "retrieval_rank", [&]<typename T>(T) {
    rank_impl<T>(ctx, queries, items, targets, history_offsets, history_ids, rank_cap, ranks);
  });
}

}  // namespace hstu::cpu
