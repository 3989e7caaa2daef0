// sharded_table.cpp — the row-sharded embedding table: its shard, the step's window and the
// id / row / gradient exchanges (sharded_table.h).
#include "dist/sharded_table.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/checked.h"
#include "ops/embedding.h"

namespace hstu::dist {
namespace {

int64_t total(const std::vector<int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

}  // namespace

ShardedTable::ShardedTable(const Comm& comm, const std::string& name, int64_t rows, int64_t dim,
                           const std::string& optimizer, OwnerKind owner, int64_t max_unique)
    : name_(name),
      optimizer_(optimizer),
      dim_(dim),
      cap_(std::max<int64_t>(max_unique, 1)),
      rank_(comm.rank()),
      device_(comm.device()),
      sharding_(rows, comm.size(), owner) {
  HSTU_CHECK(dim >= 1, "sharded table ", name, ": dim ", dim, " must be positive");
  HSTU_CHECK(max_unique >= 1, "sharded table ", name, ": max_unique ", max_unique,
             " must be positive (id 0 is always in the window)");
  checked_i32(cap_, "sharded table window rows");
  owned_ = sharding_.owned_ids(rank_);
  const int64_t n = sharding_.shard_rows(rank_);
  shard_.allocate(name, n, dim, device_, optimizer);
  window_.allocate(name + ":window", cap_, dim, device_, "sgd");
  // Each rank sends this one at most min(cap, n) distinct ids.
  rcap_ = std::max<int64_t>(
      checked_mul(comm.size(), std::min(cap_, n), "sharded table receive rows"), 1);
  checked_i32(rcap_, "sharded table receive rows");
  const int64_t exchange =
      window_bytes(cap_, dim, comm.size(), n) - embedding_table_bytes(cap_, dim, "sgd");
  arena_ = std::make_unique<Arena>(device_, static_cast<size_t>(exchange), "sharded:" + name);
  send_idx_ = arena_->alloc(DType::kI32, {cap_});
  perm_ = arena_->alloc(DType::kI32, {cap_});
  rows_in_ = arena_->alloc(DType::kF32, {cap_, dim});
  recv_idx_ = arena_->alloc(DType::kI32, {rcap_});
  rows_out_ = arena_->alloc(DType::kF32, {rcap_, dim});
  up_ = std::make_unique<HostStaging>(device_, static_cast<size_t>(2 * cap_) * sizeof(int32_t));
  flags_ = std::make_unique<HostStaging>(device_, static_cast<size_t>(cap_));
}

void ShardedTable::init_from_full(const Init& init, uint64_t seed) {
  const int64_t v = rows();
  std::vector<float> full(static_cast<size_t>(checked_mul(v, dim_, "table elements")));
  init_tensor(Tensor(full.data(), DType::kF32, Device::kCPU, {v, dim_}), init, seed, name_);
  const int64_t n = static_cast<int64_t>(owned_.size());
  std::vector<float> mine(static_cast<size_t>(n * dim_));
  for (int64_t j = 0; j < n; ++j)
    std::memcpy(&mine[static_cast<size_t>(j * dim_)],
                &full[static_cast<size_t>(owned_[static_cast<size_t>(j)] * dim_)],
                static_cast<size_t>(dim_) * sizeof(float));
  if (n > 0) copy_tensor(shard_.weight, Tensor(mine.data(), DType::kF32, Device::kCPU, {n, dim_}));
}

void ShardedTable::route(std::span<const int32_t> keys) {
  const int w = world();
  const int64_t n = static_cast<int64_t>(keys.size());
  HSTU_CHECK(n <= cap_, "sharded table ", name_, ": ", n, " unique ids exceed the window's ", cap_,
             " rows (max_unique)");
  send_counts_.assign(static_cast<size_t>(w), 0);
  for (const int32_t id : keys) {
    HSTU_CHECK(id >= 0 && id < rows(), "sharded table ", name_, ": id ", id, " outside [0, ",
               rows(), ")");
    ++send_counts_[static_cast<size_t>(sharding_.owner(id))];
  }
  std::vector<int64_t> next(static_cast<size_t>(w), 0);
  for (int p = 1; p < w; ++p)
    next[static_cast<size_t>(p)] =
        next[static_cast<size_t>(p - 1)] + send_counts_[static_cast<size_t>(p - 1)];
  pos_.resize(static_cast<size_t>(n));
  send_local_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = keys[static_cast<size_t>(i)];
    const int64_t at = next[static_cast<size_t>(sharding_.owner(id))]++;
    pos_[static_cast<size_t>(i)] = static_cast<int32_t>(at);
    send_local_[static_cast<size_t>(at)] = static_cast<int32_t>(sharding_.local_row(id));
  }
}

void ShardedTable::upload(Ctx& ctx, std::span<const int32_t> a, std::span<const int32_t> b) {
  up_->wait();  // the previous upload's copies have read the buffer
  int32_t* h = reinterpret_cast<int32_t*>(up_->data());
  std::copy(a.begin(), a.end(), h);
  std::copy(b.begin(), b.end(), h + cap_);
  copy_bytes_async(send_idx_.data, device_, h, Device::kCPU, a.size() * sizeof(int32_t),
                   ctx.stream);
  copy_bytes_async(perm_.data, device_, h + cap_, Device::kCPU, b.size() * sizeof(int32_t),
                   ctx.stream);
  up_->record(ctx.stream);
}

void ShardedTable::exchange(Ctx& ctx, Comm& comm, std::span<const int32_t> perm,
                            const Tensor& out) {
  upload(ctx, send_local_, perm);
  exchange_routed(ctx, comm, static_cast<int64_t>(perm.size()), out);
}

void ShardedTable::exchange_routed(Ctx& ctx, Comm& comm, int64_t m, const Tensor& out) {
  const int64_t n = total(send_counts_);
  recv_counts_ = comm.all_to_all_host(send_counts_);
  const int64_t r = total(recv_counts_);
  HSTU_CHECK(r <= rcap_, "sharded table ", name_, ": ", r, " rows requested from rank ", rank_,
             " exceed its receive buffer of ", rcap_,
             " (each rank must send distinct ids, at most max_unique)");
  comm.all_to_all_v(send_idx_, send_counts_, recv_idx_, recv_counts_, ctx.stream);
  if (r > 0)  // the owner's gather: rows_out[j] = shard.weight[recv_idx[j]]
    embedding_fwd(ctx, shard_.weight, recv_idx_.rows(0, r), 1.0f, Tensor(), Tensor(),
                  rows_out_.rows(0, r));
  comm.all_to_all_v(rows_out_, recv_counts_, rows_in_, send_counts_, ctx.stream);
  if (m > 0)  // back to the caller's order: out[i] = rows_in[perm[i]]
    embedding_fwd(ctx, rows_in_.rows(0, n), perm_.rows(0, m), 1.0f, Tensor(), Tensor(),
                  out.rows(0, m));
}

int64_t ShardedTable::fetch(Ctx& ctx, Comm& comm, std::span<const int32_t> unique) {
  HSTU_CHECK(!fetched_, "sharded table ", name_,
             ": fetch called twice without push_grads in between");
  route(unique);
  unique_ = static_cast<int64_t>(unique.size());
  exchange(ctx, comm, pos_, window_.weight);
  fetched_ = true;
  return unique_;
}

int64_t ShardedTable::dedup_and_fetch(Ctx& ctx, Comm& comm,
                                      std::span<const std::span<int32_t>> ids) {
  if (!dedup_) dedup_ = std::make_unique<IdDeduper>(rows());
  return fetch(ctx, comm, dedup_->run(ids));
}

int64_t ShardedTable::dedup_and_fetch_device(Ctx& ctx, Comm& comm, std::span<const Tensor> ids) {
#if defined(HSTU_WITH_CUDA)
  HSTU_CHECK(device_ == Device::kCUDA && !ctx.cpu(), "sharded table ", name_,
             ": dedup_and_fetch_device needs a CUDA table and context");
  HSTU_CHECK(!fetched_, "sharded table ", name_,
             ": fetch called twice without push_grads in between");
  const bool route = !device_only();
  const bool hash = sharding_.kind() == OwnerKind::kHash;
  if (!dev_arena_) {  // once, before the first step's work: the step loop allocates nothing after
    dev_arena_ = Arena::planned(device_, "sharded:" + name_ + ":dedupe", [&](Arena& a) {
      dev_ = cuda::allocate_window_dedup(a, rows(), cap_, world(), route);
      if (route && hash) dev_local_ = a.alloc(DType::kI32, {rows()});
    });
    if (route && hash) {
      std::vector<int32_t> local(static_cast<size_t>(rows()));
      for (int64_t id = 0; id < rows(); ++id)
        local[static_cast<size_t>(id)] = static_cast<int32_t>(sharding_.local_row(id));
      copy_bytes(dev_local_.data, device_, local.data(), Device::kCPU,
                 local.size() * sizeof(int32_t));
    }
  }
  cuda::window_dedup(ctx, dev_, ids);
  if (!route) {  // one rank: the shard is the whole table, its local rows the ids
    cuda::window_gather_rows(ctx, dev_, shard_.weight, window_.weight);
    unique_ = -1;
    device_window_ = true;
    fetched_ = true;
    return -1;
  }
  // W ranks: send_idx_ / perm_ routed on the device; the W counts to the host (the step's one
  // wait: the exchanges' sizes), through the page-locked upload buffer.
  cuda::window_route(ctx, dev_, hash, dev_local_, send_idx_, perm_);
  up_->wait();
  int32_t* h = reinterpret_cast<int32_t*>(up_->data());
  HSTU_CHECK(static_cast<int64_t>(world()) <= 2 * cap_, "sharded table ", name_, ": ", world(),
             " counts exceed the staging buffer");
  copy_bytes_async(h, Device::kCPU, dev_.counts.data, device_,
                   static_cast<size_t>(world()) * sizeof(int32_t), ctx.stream);
  up_->record(ctx.stream);
  up_->wait();
  send_counts_.assign(h, h + world());
  unique_ = total(send_counts_);
  HSTU_CHECK(unique_ >= 1 && unique_ <= cap_, "sharded table ", name_, ": ", unique_,
             " distinct ids from the device dedupe, outside [1, ", cap_, "]");
  exchange_routed(ctx, comm, unique_, window_.weight);
  routed_ = true;
  fetched_ = true;
  return unique_;
#else
  (void)ctx, (void)comm, (void)ids;
  HSTU_THROW("sharded table ", name_, ": dedup_and_fetch_device needs a CUDA build");
#endif
}

void ShardedTable::push_grads(Ctx& ctx, Comm& comm) {
  HSTU_CHECK(fetched_, "sharded table ", name_, ": push_grads without a fetch before it");
  fetched_ = false;
#if defined(HSTU_WITH_CUDA)
  if (device_window_) {  // one rank: the window's touched rows straight into the shard
    device_window_ = false;
    cuda::window_scatter_grads(ctx, dev_, window_.grad, window_.touched, shard_.grad,
                               shard_.touched);
    return;
  }
  if (routed_) {  // W ranks, routed on the device: every fetched row back, untouched ones flagged
    routed_ = false;
    const int64_t u = unique_;
    cuda::window_grad_rows(ctx, dev_, u, window_.grad, window_.touched, send_idx_, rows_in_);
    comm.all_to_all_v(send_idx_, send_counts_, recv_idx_, recv_counts_, ctx.stream);
    comm.all_to_all_v(rows_in_, send_counts_, rows_out_, recv_counts_, ctx.stream);
    // shard.grad[recv_idx[j]] += rows_out[j], one sender at a time in rank order (deterministic).
    int64_t b = 0;
    for (const int64_t c : recv_counts_) {
      if (c > 0)
        cuda::window_add_rows(ctx, rows_out_.rows(b, b + c), recv_idx_.rows(b, b + c), shard_.grad,
                              shard_.touched);
      b += c;
    }
    if (u > 0) fill_zero(window_.grad.rows(0, u), ctx.stream);
    fill_zero(window_.touched, ctx.stream);
    return;
  }
#endif
  const int64_t u = unique_;
  // Which window rows the step touched (host).
  flags_->wait();
  copy_bytes_async(flags_->data(), Device::kCPU, window_.touched.data, device_,
                   static_cast<size_t>(u), ctx.stream);
  flags_->record(ctx.stream);
  flags_->wait();
  const uint8_t* touched = reinterpret_cast<const uint8_t*>(flags_->data());
  // Touched rows in owner-grouped order: their owner-local rows and window indices.
  std::vector<int32_t> window_at(static_cast<size_t>(u));
  for (int64_t k = 0; k < u; ++k)
    window_at[static_cast<size_t>(pos_[static_cast<size_t>(k)])] = static_cast<int32_t>(k);
  std::vector<int32_t> local, src;
  local.reserve(static_cast<size_t>(u));
  src.reserve(static_cast<size_t>(u));
  std::vector<int64_t> counts(static_cast<size_t>(world()), 0);
  int64_t at = 0;
  for (int p = 0; p < world(); ++p) {
    for (int64_t e = at + send_counts_[static_cast<size_t>(p)]; at < e; ++at) {
      const int32_t k = window_at[static_cast<size_t>(at)];
      if (!touched[k]) continue;
      local.push_back(send_local_[static_cast<size_t>(at)]);
      src.push_back(k);
      ++counts[static_cast<size_t>(p)];
    }
  }
  const int64_t n = static_cast<int64_t>(src.size());
  upload(ctx, local, src);
  if (n > 0)  // rows_in[i] = window.grad[src[i]]
    embedding_fwd(ctx, window_.grad, perm_.rows(0, n), 1.0f, Tensor(), Tensor(),
                  rows_in_.rows(0, n));
  const std::vector<int64_t> recv = comm.all_to_all_host(counts);
  const int64_t r = total(recv);
  HSTU_CHECK(r <= rcap_, "sharded table ", name_, ": ", r, " gradient rows for rank ", rank_,
             " exceed its receive buffer of ", rcap_);
  comm.all_to_all_v(send_idx_, counts, recv_idx_, recv, ctx.stream);
  comm.all_to_all_v(rows_in_, counts, rows_out_, recv, ctx.stream);
  // shard.grad[recv_idx[j]] += rows_out[j] in j order, i.e. by sender rank; marks touched.
  if (r > 0)
    embedding_bwd(ctx, rows_out_.rows(0, r), recv_idx_.rows(0, r), 1.0f, shard_.grad,
                  shard_.touched, Tensor(), Tensor());
  if (u > 0) fill_zero(window_.grad.rows(0, u), ctx.stream);
  fill_zero(window_.touched, ctx.stream);
}

void ShardedTable::gather_rows(Ctx& ctx, Comm& comm, std::span<const int32_t> ids,
                               const Tensor& out) {
  HSTU_CHECK(!fetched_, "sharded table ", name_, ": gather_rows between fetch and push_grads");
  const int64_t n = static_cast<int64_t>(ids.size());
  HSTU_CHECK(out.ndim == 2 && out.dim(0) >= n && out.dim(1) == dim_ && out.dtype == DType::kF32 &&
                 out.device == device_,
             "sharded table ", name_, ": gather_rows output ", out.str(), " is not f32 [", n, ", ",
             dim_, "] on ", device_name(device_));
  // Rounds of at most cap_ ids; every rank joins every round.
  const int64_t rounds = comm.all_reduce_host((n + cap_ - 1) / cap_, ReduceOp::kMax);
  std::vector<int32_t> keys, perm;
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t b = std::min(n, round * cap_), e = std::min(n, b + cap_);
    const std::span<const int32_t> chunk =
        ids.subspan(static_cast<size_t>(b), static_cast<size_t>(e - b));
    keys.assign(chunk.begin(), chunk.end());
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    route(keys);
    perm.resize(chunk.size());
    for (size_t i = 0; i < chunk.size(); ++i) {
      const auto it = std::lower_bound(keys.begin(), keys.end(), chunk[i]);
      perm[i] = pos_[static_cast<size_t>(it - keys.begin())];
    }
    exchange(ctx, comm, perm, out.rows(b, e));
  }
}

}  // namespace hstu::dist
