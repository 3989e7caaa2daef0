// dynamic_shard.cpp — a dynamic table sharded by key over the ranks: the window's key exchange,
// the owners' find_or_insert / gather / fused optimiser, the evaluation catalogue and the summed
// counters (dynamic_shard.h).
#include "train/dynamic_shard.h"

#include <algorithm>
#include <numeric>

#include "config/dynamic_table.h"
#include "core/checked.h"
#include "core/error.h"
#include "ops/embedding.h"

namespace hstu {
namespace {

int64_t total(const std::vector<int64_t>& c) {
  return std::accumulate(c.begin(), c.end(), int64_t{0});
}

}  // namespace

embed::DynamicTableSpec shard_table_spec(const embed::DynamicTableSpec& spec, int world) {
  HSTU_CHECK(world >= 1, "dynamic table ", spec.name, ": world size ", world, " must be >= 1");
  embed::DynamicTableSpec s = spec;
  if (world == 1) return s;
  const int64_t b = std::max(spec.bucket_size, 1);
  s.capacity_rows = dynamic_rows_per_rank(spec.capacity_rows, world, b);
  s.max_capacity_rows =
      std::max(dynamic_rows_per_rank(spec.max_capacity_rows, world, b), s.capacity_rows);
  s.gpu_cache_rows = dynamic_rows_per_rank(spec.gpu_cache_rows, world, b);
  // The host tier is on only while the device cache holds fewer rows than the table may.
  if (s.gpu_cache_rows >= s.max_capacity_rows) s.gpu_cache_rows = 0;
  return s;
}

DynamicShard::DynamicShard(embed::DynamicTable& table, dist::Comm& comm, dist::OwnerKind owner,
                           int64_t max_unique)
    : table_(table),
      comm_(comm),
      owner_(owner),
      world_(comm.size()),
      rank_(comm.rank()),
      dim_(table.spec().dim),
      cap_(max_unique) {
  const std::string& name = table.spec().name;
  HSTU_CHECK(max_unique >= 1, "sharded dynamic table ", name, ": max_unique ", max_unique,
             " must be positive (key 0 is always in the window)");
  HSTU_CHECK(table.device() == comm.device(), "sharded dynamic table ", name, ": the table is on ",
             device_name(table.device()), " but the communicator's buffers on ",
             device_name(comm.device()));
  checked_i32(cap_, "sharded dynamic table window rows");
  rcap_ = checked_mul(world_, cap_, "sharded dynamic table receive rows");
  checked_i32(rcap_, "sharded dynamic table receive rows");
  arena_ = Arena::planned(table.device(), "dynamic_shard:" + name, [&](Arena& a) {
    send_keys_ = a.alloc(DType::kI64, {cap_});
    send_counts_dev_ = a.alloc(DType::kI32, {cap_});
    perm_ = a.alloc(DType::kI32, {cap_});
    rows_in_ = a.alloc(DType::kF32, {cap_, dim_});
    recv_keys_ = a.alloc(DType::kI64, {rcap_});
    recv_counts_dev_ = a.alloc(DType::kI32, {rcap_});
    recv_idx_ = a.alloc(DType::kI32, {rcap_});
    rows_out_ = a.alloc(DType::kF32, {rcap_, dim_});
    own_keys_ = a.alloc(DType::kI64, {rcap_});
    own_counts_ = a.alloc(DType::kI32, {rcap_});
    own_refs_ = a.alloc(DType::kI64, {rcap_});
    inv_ = a.alloc(DType::kI32, {rcap_});
    own_rows_ = a.alloc(DType::kF32, {rcap_, dim_});
    own_grad_ = a.zeros(DType::kF32, {rcap_, dim_});  // apply leaves it zero
    own_touched_ = a.zeros(DType::kU8, {rcap_});
  });
  // The host routing arrays, sized once for the largest step (no allocation per step).
  for (auto* v : {&keys_i64_, &own_keys_host_}) v->reserve(static_cast<size_t>(rcap_));
  for (auto* v : {&vals_i32_, &own_counts_host_, &inv_host_, &window_at_, &src_})
    v->reserve(static_cast<size_t>(rcap_));
  pos_.reserve(static_cast<size_t>(cap_));
  touched_host_.reserve(static_cast<size_t>(cap_));
  for (auto* v : {&send_counts_, &recv_counts_, &next_, &grad_recv_})
    v->reserve(static_cast<size_t>(world_));
}

void DynamicShard::upload(const Tensor& dst, const void* src, int64_t n) {
  if (n > 0)
    copy_bytes(
        dst.data, dst.device, src, Device::kCPU,
        static_cast<size_t>(n * (dst.ndim <= 1 ? 1 : dst.row_elems())) * dtype_size(dst.dtype));
}

void DynamicShard::download(void* dst, const Tensor& src, int64_t n) {
  if (n > 0)
    copy_bytes(
        dst, Device::kCPU, src.data, src.device,
        static_cast<size_t>(n * (src.ndim <= 1 ? 1 : src.row_elems())) * dtype_size(src.dtype));
}

void DynamicShard::fetch(Ctx& ctx, int64_t step, std::span<const int64_t> keys,
                         std::span<const int32_t> counts, EmbeddingTable& window, bool insert,
                         bool init_missing) {
  const std::string& name = table_.spec().name;
  HSTU_CHECK(!fetched_, "sharded dynamic table ", name, ": fetch called again before update");
  HSTU_CHECK(keys.size() == counts.size(), "sharded dynamic table ", name, ": ", keys.size(),
             " keys but ", counts.size(), " counts");
  const int64_t u = static_cast<int64_t>(keys.size());
  HSTU_CHECK(u <= cap_ && u <= window.rows, "sharded dynamic table ", name, ": ", u,
             " distinct keys in one step exceed the window's ", std::min(cap_, window.rows),
             " rows (max_unique)");
  // Route: the keys grouped by owner, stable; pos_[i] = where window row i went.
  send_counts_.assign(static_cast<size_t>(world_), 0);
  for (const int64_t k : keys)
    ++send_counts_[static_cast<size_t>(dist::key_owner(k, world_, owner_))];
  std::vector<int64_t>& next = next_;
  next.assign(static_cast<size_t>(world_), 0);
  for (int p = 1; p < world_; ++p)
    next[static_cast<size_t>(p)] =
        next[static_cast<size_t>(p - 1)] + send_counts_[static_cast<size_t>(p - 1)];
  pos_.resize(static_cast<size_t>(u));
  std::vector<int64_t>& sk = keys_i64_;
  std::vector<int32_t>& sc = vals_i32_;
  sk.resize(static_cast<size_t>(u));
  sc.resize(static_cast<size_t>(u));
  for (int64_t i = 0; i < u; ++i) {
    const int64_t at = next[static_cast<size_t>(dist::key_owner(keys[i], world_, owner_))]++;
    pos_[static_cast<size_t>(i)] = static_cast<int32_t>(at);
    sk[static_cast<size_t>(at)] = keys[i];
    sc[static_cast<size_t>(at)] = counts[i];
  }
  upload(send_keys_, sk.data(), u);
  upload(send_counts_dev_, sc.data(), u);
  upload(perm_, pos_.data(), u);
  recv_counts_ = comm_.all_to_all_host(send_counts_);
  const int64_t r = total(recv_counts_);
  HSTU_CHECK(r <= rcap_, "sharded dynamic table ", name, ": ", r, " keys requested from rank ",
             rank_, " exceed its receive buffer of ", rcap_, " (W x max_unique)");
  comm_.all_to_all_v(send_keys_, send_counts_, recv_keys_, recv_counts_, ctx.stream);
  comm_.all_to_all_v(send_counts_dev_, send_counts_, recv_counts_dev_, recv_counts_, ctx.stream);
  // The owner: what every rank asked for, deduped (ascending), sightings summed.
  std::vector<int64_t>& rk = keys_i64_;
  std::vector<int32_t>& rc = vals_i32_;
  rk.resize(static_cast<size_t>(r));
  rc.resize(static_cast<size_t>(r));
  download(rk.data(), recv_keys_, r);
  download(rc.data(), recv_counts_dev_, r);
  std::vector<int64_t>& ok = own_keys_host_;
  ok.assign(rk.begin(), rk.end());
  std::sort(ok.begin(), ok.end());
  ok.erase(std::unique(ok.begin(), ok.end()), ok.end());
  own_u_ = static_cast<int64_t>(ok.size());
  std::vector<int32_t>& oc = own_counts_host_;
  oc.assign(ok.size(), 0);
  inv_host_.resize(static_cast<size_t>(r));
  for (int64_t j = 0; j < r; ++j) {
    const auto it = std::lower_bound(ok.begin(), ok.end(), rk[static_cast<size_t>(j)]);
    const int32_t w = static_cast<int32_t>(it - ok.begin());
    inv_host_[static_cast<size_t>(j)] = w;
    oc[static_cast<size_t>(w)] += rc[static_cast<size_t>(j)];
  }
  // Key 0 (padding) counts as seen, as in the single-process window.
  if (!ok.empty() && ok.front() == 0) oc[0] = std::max(oc[0], 1);
  upload(own_keys_, ok.data(), own_u_);
  upload(own_counts_, oc.data(), own_u_);
  upload(inv_, inv_host_.data(), r);
  const Tensor okeys = own_keys_.rows(0, own_u_), orefs = own_refs_.rows(0, own_u_);
  if (insert) {
    table_.begin_step(step);
    if (own_u_ > 0) table_.find_or_insert(ctx, okeys, own_counts_.rows(0, own_u_), orefs);
  } else if (own_u_ > 0) {
    table_.find(ctx, okeys, orefs);
  }
  if (own_u_ > 0)
    table_.gather(ctx, okeys, orefs, own_rows_.rows(0, own_u_), insert || init_missing);
  if (r > 0)  // rows_out[j] = own_rows[inv[j]]: the rows in the requests' order
    embedding_fwd(ctx, own_rows_.rows(0, own_u_), inv_.rows(0, r), 1.0f, Tensor(), Tensor(),
                  rows_out_.rows(0, r));
  comm_.all_to_all_v(rows_out_, recv_counts_, rows_in_, send_counts_, ctx.stream);
  if (u > 0)  // window row i = rows_in[pos[i]]
    embedding_fwd(ctx, rows_in_.rows(0, u), perm_.rows(0, u), 1.0f, Tensor(), Tensor(),
                  window.weight.rows(0, u));
  u_ = u;
  fetched_ = insert;
}

void DynamicShard::update(Ctx& ctx, const SparseOptimizerSpec& opt, EmbeddingTable& window) {
  const std::string& name = table_.spec().name;
  HSTU_CHECK(fetched_, "sharded dynamic table ", name, ": update without a training fetch");
  fetched_ = false;
  const int64_t u = u_;
  std::vector<uint8_t>& touched = touched_host_;
  touched.resize(static_cast<size_t>(u));
  download(touched.data(), window.touched, u);
  // Touched window rows in owner-grouped order: their position in the group sent to the owner
  // at fetch (j) and their window row (src).
  std::vector<int32_t>& window_at = window_at_;
  window_at.resize(static_cast<size_t>(u));
  for (int64_t k = 0; k < u; ++k)
    window_at[static_cast<size_t>(pos_[static_cast<size_t>(k)])] = static_cast<int32_t>(k);
  std::vector<int32_t>& local = vals_i32_;
  std::vector<int32_t>& src = src_;
  local.clear();
  src.clear();
  std::vector<int64_t>& counts = next_;  // gradient rows per owner
  counts.assign(static_cast<size_t>(world_), 0);
  int64_t at = 0;
  for (int p = 0; p < world_; ++p) {
    const int64_t begin = at;
    for (const int64_t e = at + send_counts_[static_cast<size_t>(p)]; at < e; ++at) {
      const int32_t k = window_at[static_cast<size_t>(at)];
      if (!touched[static_cast<size_t>(k)]) continue;
      local.push_back(static_cast<int32_t>(at - begin));
      src.push_back(k);
      ++counts[static_cast<size_t>(p)];
    }
  }
  const int64_t n = static_cast<int64_t>(src.size());
  upload(send_counts_dev_, local.data(), n);  // i32 positions within each owner's group
  upload(perm_, src.data(), n);
  if (n > 0)  // rows_in[i] = window.grad[src[i]]
    embedding_fwd(ctx, window.grad.rows(0, u), perm_.rows(0, n), 1.0f, Tensor(), Tensor(),
                  rows_in_.rows(0, n));
  grad_recv_ = comm_.all_to_all_host(counts);
  const std::vector<int64_t>& recv = grad_recv_;
  const int64_t r = total(recv);
  HSTU_CHECK(r <= total(recv_counts_), "sharded dynamic table ", name, ": ", r,
             " gradient rows for rank ", rank_, " but only ", total(recv_counts_),
             " rows were fetched from it");
  comm_.all_to_all_v(send_counts_dev_, counts, recv_idx_, recv, ctx.stream);
  comm_.all_to_all_v(rows_in_, counts, rows_out_, recv, ctx.stream);
  // The owner: sender p's position j is received key recv_off[p] + j of the fetch, own unique
  // key inv[...]; the rows are summed in receive order (sender rank order): deterministic.
  std::vector<int32_t>& idx = window_at_;  // the window rows are no longer needed
  idx.resize(static_cast<size_t>(r));
  download(idx.data(), recv_idx_, r);
  int64_t off = 0, got = 0;
  for (int p = 0; p < world_; ++p) {
    for (int64_t e = got + recv[static_cast<size_t>(p)]; got < e; ++got) {
      const int32_t j = idx[static_cast<size_t>(got)];
      HSTU_CHECK(j >= 0 && j < recv_counts_[static_cast<size_t>(p)], "sharded dynamic table ", name,
                 ": rank ", p, " sent a gradient for position ", j, " of its ",
                 recv_counts_[static_cast<size_t>(p)], " requested keys");
      idx[static_cast<size_t>(got)] = inv_host_[static_cast<size_t>(off + j)];
    }
    off += recv_counts_[static_cast<size_t>(p)];
  }
  upload(recv_idx_, idx.data(), r);
  if (r > 0)
    embedding_bwd(ctx, rows_out_.rows(0, r), recv_idx_.rows(0, r), 1.0f, own_grad_.rows(0, own_u_),
                  own_touched_.rows(0, own_u_), Tensor(), Tensor());
  if (own_u_ > 0)  // the fused optimiser; clears own_grad and own_touched
    table_.apply(ctx, opt, own_refs_.rows(0, own_u_), own_grad_.rows(0, own_u_),
                 own_touched_.rows(0, own_u_));
  if (u > 0) fill_zero(window.grad.rows(0, u), ctx.stream);
  fill_zero(window.touched, ctx.stream);
}

void DynamicShard::materialize(Ctx& ctx, std::span<const int64_t> keys, EmbeddingTable& out) {
  const int64_t n = static_cast<int64_t>(keys.size());
  HSTU_CHECK(n <= out.rows && out.dim == dim_, "sharded dynamic table ", table_.spec().name,
             ": materialize of ", n, " keys into a table of ", out.rows, " x ", out.dim);
  // Rank-grouped order of the keys: each rank's owned keys, in key order.
  std::vector<int64_t> counts(static_cast<size_t>(world_), 0);
  for (const int64_t k : keys) ++counts[static_cast<size_t>(dist::key_owner(k, world_, owner_))];
  std::vector<int64_t> next(static_cast<size_t>(world_), 0);
  for (int p = 1; p < world_; ++p)
    next[static_cast<size_t>(p)] =
        next[static_cast<size_t>(p - 1)] + counts[static_cast<size_t>(p - 1)];
  const int64_t mine = counts[static_cast<size_t>(rank_)];
  std::vector<int32_t> perm(static_cast<size_t>(n));
  std::vector<int64_t> own;
  own.reserve(static_cast<size_t>(mine));
  for (int64_t i = 0; i < n; ++i) {
    const int o = dist::key_owner(keys[static_cast<size_t>(i)], world_, owner_);
    perm[static_cast<size_t>(i)] = static_cast<int32_t>(next[static_cast<size_t>(o)]++);
    if (o == rank_) own.push_back(keys[static_cast<size_t>(i)]);
  }
  checked_i32(n, "catalogue rows");
  Tensor ck, cr, rows, all, pm;
  auto plan = [&](Arena& a) {
    ck = a.alloc(DType::kI64, {std::max<int64_t>(mine, 1)});
    cr = a.alloc(DType::kI64, {std::max<int64_t>(mine, 1)});
    rows = a.alloc(DType::kF32, {std::max<int64_t>(mine, 1), dim_});
    all = a.alloc(DType::kF32, {std::max<int64_t>(n, 1), dim_});
    pm = a.alloc(DType::kI32, {std::max<int64_t>(n, 1)});
  };
  eval_arena_.reset();  // the last evaluation's buffers; sizes differ per rank and call
  eval_arena_ = Arena::planned(table_.device(), "dynamic_shard_eval", plan);
  table_.flush(ctx);
  if (mine > 0) {
    upload(ck, own.data(), mine);
    table_.find(ctx, ck.rows(0, mine), cr.rows(0, mine));
    table_.gather(ctx, ck.rows(0, mine), cr.rows(0, mine), rows.rows(0, mine), true);
  }
  comm_.all_gather_v(rows.rows(0, mine), all.rows(0, n), counts, ctx.stream);
  upload(pm, perm.data(), n);
  if (n > 0)
    embedding_fwd(ctx, all.rows(0, n), pm.rows(0, n), 1.0f, Tensor(), Tensor(),
                  out.weight.rows(0, n));
}

embed::DynamicTableCounters DynamicShard::sum_counters() {
  const embed::DynamicTableCounters c = table_.counters();
  int64_t v[8] = {c.inserts,  c.evictions, c.rejections,   c.size,
                  c.capacity, c.grows,     c.cache_misses, c.cache_evictions};
  comm_.host_all_reduce(Tensor(v, DType::kI64, Device::kCPU, {8}), dist::ReduceOp::kSum);
  embed::DynamicTableCounters s;
  s.inserts = v[0];
  s.evictions = v[1];
  s.rejections = v[2];
  s.size = v[3];
  s.capacity = v[4];
  s.grows = v[5];
  s.cache_misses = v[6];
  s.cache_evictions = v[7];
  return s;
}

}  // namespace hstu
