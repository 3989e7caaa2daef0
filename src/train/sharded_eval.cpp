// sharded_eval.cpp — distributed retrieval ranks over a row-sharded item table
// (train/sharded_eval.h): gather every rank's queries, target rows and histories, count the items
// above each target in this rank's shard (retrieval_rank_counts), sum the counts over the ranks.
#include "train/sharded_eval.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>

#include "core/arena.h"
#include "core/checked.h"
#include "core/error.h"
#include "ops/l2norm.h"
#include "ops/retrieval_rank.h"

namespace hstu {
namespace {

// A non-finite target on any shard dominates the sum of the counts: each count is at most
// rank_cap < 2^31, so over fewer than kMaxRanks ranks the finite sums stay below the mark, and
// the mark times the ranks fits int64.
constexpr int64_t kNonFiniteMark = int64_t(1) << 43;
constexpr int kMaxRanks = 4096;

void copy_in(const Tensor& dst, const std::vector<int32_t>& src) {
  if (!src.empty())
    copy_bytes(dst.data, dst.device, src.data(), Device::kCPU, src.size() * sizeof(int32_t));
}

}  // namespace

std::vector<int32_t> sharded_retrieval_ranks(Ctx& ctx, dist::Comm& comm, dist::ShardedTable& items,
                                             const Tensor& queries,
                                             std::span<const int32_t> targets,
                                             std::span<const int32_t> history_offsets,
                                             std::span<const int32_t> history_ids, float l2_eps,
                                             int32_t rank_cap) {
  const char* op = "sharded_retrieval_ranks";
  const Device dev = comm.device();
  const int64_t d = items.dim(), rows = items.rows();
  const int64_t q = static_cast<int64_t>(targets.size());
  HSTU_CHECK(ctx.device == dev && items.device() == dev, op, ": ctx (", device_name(ctx.device),
             "), the table ", items.name(), " (", device_name(items.device()),
             ") and the communicator (", device_name(dev), ") must share one device");
  HSTU_CHECK(rank_cap >= 1 && rank_cap <= INT32_MAX - 2, op,
             ": rank_cap must be in [1, INT32_MAX - 2], got ", rank_cap);
  if (q > 0) {
    HSTU_CHECK(queries.ndim == 2 && queries.dim(0) == q && queries.dim(1) == d &&
                   queries.dtype == DType::kF32 && queries.device == dev && queries.row_stride == d,
               op, ": queries ", queries.str(), " must be contiguous f32 [", q, ", ", d, "] on ",
               device_name(dev));
    HSTU_CHECK(static_cast<int64_t>(history_offsets.size()) == q + 1, op, ": ",
               history_offsets.size(), " history_offsets for ", q, " queries (needs ", q + 1, ")");
  }
  // Host checks, as retrieval_rank makes them on the full table.
  int64_t h0 = 0, h1 = 0;
  if (!history_offsets.empty()) {
    h0 = history_offsets.front();
    h1 = history_offsets.back();
  }
  HSTU_CHECK(h0 >= 0 && h0 <= h1 && h1 <= static_cast<int64_t>(history_ids.size()), op,
             ": history_offsets [", h0, ", ", h1, "] run outside the ", history_ids.size(),
             " history ids");
  for (int64_t k = 0; k < q; ++k) {
    const int32_t t = targets[static_cast<size_t>(k)];
    HSTU_CHECK(t >= 1 && t < rows, op, ": targets[", k, "] = ", t,
               " is outside the rankable items [1, ", rows, ")");
    HSTU_CHECK(
        history_offsets[static_cast<size_t>(k)] <= history_offsets[static_cast<size_t>(k + 1)], op,
        ": history_offsets decrease at query ", k);
  }
  for (int64_t i = h0; i < h1; ++i) {
    const int32_t id = history_ids[static_cast<size_t>(i)];
    HSTU_CHECK(id >= 0 && id < rows, op, ": history_ids[", i, "] = ", id,
               " is outside the table [0, ", rows, ")");
  }

  // Every rank's query and history counts.
  const int64_t h = h1 - h0;
  const std::vector<int64_t> qn = comm.all_gather_host(q);
  const std::vector<int64_t> hn = comm.all_gather_host(h);
  const int w = comm.size(), me = comm.rank();
  HSTU_CHECK(w < kMaxRanks, op, ": ", w, " ranks; the count sums support fewer than ", kMaxRanks);
  int64_t qt = 0, ht = 0, qbase = 0;
  std::vector<int64_t> packed_n(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) {
    if (r == me) qbase = qt;
    qt = checked_add(qt, qn[static_cast<size_t>(r)], "evaluation queries over the ranks");
    ht = checked_add(ht, hn[static_cast<size_t>(r)], "evaluation history ids over the ranks");
    packed_n[static_cast<size_t>(r)] = 2 * qn[static_cast<size_t>(r)] + hn[static_cast<size_t>(r)];
  }
  checked_i32(qt, "evaluation queries over the ranks");
  checked_i32(ht, "evaluation history ids over the ranks");
  if (qt == 0) return {};  // the same on every rank: no collective below is skipped by some

  const EmbeddingTable& shard = items.shard();
  const int64_t n = static_cast<int64_t>(items.owned_ids().size());
  HSTU_CHECK(shard.weight.ndim == 2 && shard.weight.dim(0) == n && shard.weight.dim(1) == d, op,
             ": the shard of ", items.name(), " is ", shard.weight.str(), ", expected [", n, ", ",
             d, "]");
  const int64_t n1 = std::max<int64_t>(n, 1), q1 = std::max<int64_t>(q, 1);
  const int64_t packed_total = 2 * qt + ht;
  Tensor shard_norm, shard_norms, shard_ids, trows, tnorm, tnorms, all_q, all_t, send, recv,
      all_targets, all_off, all_hist, counts;
  const auto plan = [&](Arena& a) {
    shard_norm = a.alloc(DType::kF32, {n1, d});  // the shard's rows, normalised
    shard_norms = a.alloc(DType::kF32, {n1});    // their clamped norms
    shard_ids = a.alloc(DType::kI32, {n1});      // their global ids (ascending)
    trows = a.alloc(DType::kF32, {q1, d});       // this rank's targets' rows
    tnorm = a.alloc(DType::kF32, {q1, d});       // ... normalised
    tnorms = a.alloc(DType::kF32, {q1});
    all_q = a.alloc(DType::kF32, {qt, d});  // every rank's queries
    all_t = a.alloc(DType::kF32, {qt, d});  // every rank's normalised target rows
    send = a.alloc(DType::kI32, {std::max<int64_t>(2 * q + h, 1)});  // targets, offsets, history
    recv = a.alloc(DType::kI32, {std::max<int64_t>(packed_total, 1)});
    all_targets = a.alloc(DType::kI32, {qt});
    all_off = a.alloc(DType::kI32, {qt + 1});
    all_hist = a.alloc(DType::kI32, {std::max<int64_t>(ht, 1)});
    counts = a.alloc(DType::kI32, {qt});
  };
  const std::unique_ptr<Arena> arena = Arena::planned(dev, "sharded eval", plan);

  // This shard, normalised as the single-process evaluator normalises the full table.
  if (n > 0) {
    l2norm_fwd(ctx, shard.weight, l2_eps, shard_norm.rows(0, n), shard_norms.rows(0, n));
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      ids[static_cast<size_t>(i)] = static_cast<int32_t>(items.owned_ids()[static_cast<size_t>(i)]);
    copy_in(shard_ids, ids);
  }
  // This rank's targets' rows from their owners (collective), normalised the same way.
  items.gather_rows(ctx, comm, targets, trows);
  if (q > 0) l2norm_fwd(ctx, trows.rows(0, q), l2_eps, tnorm.rows(0, q), tnorms.rows(0, q));

  // Every rank's queries and normalised target rows.
  comm.all_gather_v(q > 0 ? queries : tnorm.rows(0, 0), all_q, qn, ctx.stream);
  comm.all_gather_v(tnorm.rows(0, q), all_t, qn, ctx.stream);
  // Every rank's targets, history offsets (from 0) and history ids, packed in one i32 gather.
  std::vector<int32_t> mine;
  mine.reserve(static_cast<size_t>(2 * q + h));
  mine.insert(mine.end(), targets.begin(), targets.end());
  for (int64_t k = 0; k < q; ++k)
    mine.push_back(static_cast<int32_t>(history_offsets[static_cast<size_t>(k)] - h0));
  mine.insert(mine.end(), history_ids.begin() + h0, history_ids.begin() + h1);
  copy_in(send, mine);
  comm.all_gather_v(send.rows(0, 2 * q + h), recv, packed_n, ctx.stream);
  std::vector<int32_t> packed(static_cast<size_t>(packed_total));
  if (packed_total > 0)
    copy_bytes(packed.data(), Device::kCPU, recv.data, dev, packed.size() * sizeof(int32_t));
  std::vector<int32_t> tg, off, hist;
  tg.reserve(static_cast<size_t>(qt));
  off.reserve(static_cast<size_t>(qt + 1));
  hist.reserve(static_cast<size_t>(ht));
  size_t at = 0;
  for (int r = 0; r < w; ++r) {
    const size_t qr = static_cast<size_t>(qn[static_cast<size_t>(r)]);
    const size_t hr = static_cast<size_t>(hn[static_cast<size_t>(r)]);
    const int32_t base = static_cast<int32_t>(hist.size());
    tg.insert(tg.end(), packed.begin() + at, packed.begin() + at + qr);
    for (size_t k = 0; k < qr; ++k) off.push_back(base + packed[at + qr + k]);
    hist.insert(hist.end(), packed.begin() + at + 2 * qr, packed.begin() + at + 2 * qr + hr);
    at += 2 * qr + hr;
  }
  off.push_back(static_cast<int32_t>(hist.size()));
  copy_in(all_targets, tg);
  copy_in(all_off, off);
  copy_in(all_hist, hist);

  // This shard's counts for every rank's queries, summed over the shards.
  retrieval_rank_counts(ctx, all_q, all_t, all_targets, shard_norm.rows(0, n), shard_ids.rows(0, n),
                        all_off, all_hist.rows(0, ht), rank_cap, counts);
  std::vector<int32_t> mine_counts(static_cast<size_t>(qt));
  copy_bytes(mine_counts.data(), Device::kCPU, counts.data, dev, mine_counts.size() * 4);
  std::vector<int64_t> sum(static_cast<size_t>(qt));
  for (size_t i = 0; i < sum.size(); ++i)
    sum[i] = mine_counts[i] == kRankCountNonFinite ? kNonFiniteMark : mine_counts[i];
  comm.host_all_reduce(Tensor(sum.data(), DType::kI64, Device::kCPU, {qt}), dist::ReduceOp::kSum);

  std::vector<int32_t> ranks(static_cast<size_t>(q));
  for (int64_t k = 0; k < q; ++k) {
    const int64_t s = sum[static_cast<size_t>(qbase + k)];
    ranks[static_cast<size_t>(k)] = s >= kNonFiniteMark
                                        ? rank_cap + 2
                                        : static_cast<int32_t>(std::min<int64_t>(s, rank_cap) + 1);
  }
  return ranks;
}

}  // namespace hstu
