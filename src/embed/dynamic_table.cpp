// dynamic_table.cpp — the dynamic embedding table's public operations: the step sequence over
// the store (and, with a host tier, the device cache), imports and exports.
#include "embed/dynamic_table.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "embed/table_math.h"

namespace hstu::embed {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

void check_vec(const Tensor& t, DType dtype, Device dev, const char* what, const std::string& tab) {
  HSTU_CHECK(t.ndim == 1 && t.dtype == dtype && t.device == dev, "dynamic table '", tab,
             "': ", what, " must be a ", dtype_name(dtype), " vector on ", device_name(dev),
             ", got ", t.str());
}

}  // namespace

Eviction parse_eviction(const std::string& name, const std::string& table) {
  if (name == "none") return Eviction::kNone;
  if (name == "lru") return Eviction::kLru;
  if (name == "lfu") return Eviction::kLfu;
  HSTU_THROW("dynamic table '", table, "': eviction must be none, lru or lfu, got '", name, "'");
}

int64_t optimizer_state_width(const std::string& optimizer, int64_t dim, const std::string& table) {
  if (optimizer == "adam") return 2 * dim;
  if (optimizer == "row_wise_adagrad") return 1;
  if (optimizer == "sgd") return 0;
  HSTU_THROW("dynamic table '", table,
             "': optimizer must be sgd, adam or row_wise_adagrad (the fused sparse optimisers), "
             "got '",
             optimizer, "'");
}

bool parse_value_dtype_bf16(const std::string& value_dtype, const std::string& table) {
  if (value_dtype == "f32") return false;
  if (value_dtype == "bf16") return true;
  HSTU_THROW("dynamic table '", table, "': value_dtype must be f32 or bf16, got '", value_dtype,
             "'");
}

int64_t dynamic_table_row_bytes(const DynamicTableSpec& spec) {
  const bool bf16 = parse_value_dtype_bf16(spec.value_dtype, spec.name);
  return (embedding_words(spec.dim, bf16) +
          optimizer_state_width(spec.optimizer, spec.dim, spec.name)) *
         4;
}

DynamicTable::DynamicTable(const DynamicTableSpec& spec, Device device)
    : spec_(spec), device_(device) {
  HSTU_CHECK(!spec.name.empty(), "dynamic table: name must not be empty");
  HSTU_CHECK(spec.dim >= 1, "dynamic table '", spec.name, "': dim must be >= 1, got ", spec.dim);
  bf16_ = parse_value_dtype_bf16(spec.value_dtype, spec.name);
  HSTU_CHECK(spec.gpu_cache_rows >= 0, "dynamic table '", spec.name,
             "': gpu_cache_rows must be >= 0, got ", spec.gpu_cache_rows);
  HSTU_CHECK(spec.init_std >= 0, "dynamic table '", spec.name, "': init_std must be >= 0");
  eviction_ = parse_eviction(spec.eviction, spec.name);
  const int64_t state = optimizer_state_width(spec.optimizer, spec.dim, spec.name);
  row_width_ = spec.dim + state;
  row_words_ = embedding_words(spec.dim, bf16_) + state;
  table_seed_ = derive_seed(spec.seed, fnv1a(spec.name));
  HashTableConfig c;
  c.name = spec.name;
  c.capacity_rows = spec.capacity_rows;
  c.max_capacity_rows = spec.max_capacity_rows;
  c.bucket_size = spec.bucket_size;
  c.max_load_factor = spec.max_load_factor;
  c.eviction = eviction_;
  c.admit_threshold = spec.admit_threshold;
  c.dim = spec.dim;
  c.row_width = row_words_;
  c.bf16 = bf16_;
  c.table_seed = table_seed_;
  c.init_std = static_cast<float>(spec.init_std);
  c.values_on_host = spec.gpu_cache_rows > 0;
  store_ = std::make_unique<HashTable>(c, device);
  if (spec.gpu_cache_rows > 0) {
    HashTableConfig cc = c;
    cc.name = spec.name + " (device cache)";
    cc.capacity_rows = cc.max_capacity_rows = spec.gpu_cache_rows;
    cc.eviction = Eviction::kLru;
    cc.admit_threshold = 0;
    cc.values_on_host = false;
    cache_ = std::make_unique<HashTable>(cc, device);
    const int64_t cap = cache_->capacity();
    dirty_arena_ = std::make_unique<Arena>(device, static_cast<size_t>(cap) + Arena::kAlign,
                                           "dynamic_table_dirty:" + spec.name);
    dirty_ = dirty_arena_->zeros(DType::kU8, {cap}).as<uint8_t>();
    Ctx ctx;  // the zero-fill ran on the default stream: done before any stream's work
    ctx.device = device;
    synchronize(ctx);
  }
}

DynamicTable::~DynamicTable() = default;

void DynamicTable::ensure_work(int64_t n) {
  // Up to 8 arrays of 8 bytes per key, each rounded to the arena's alignment.
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * 64 + 16 * Arena::kAlign;
  if (!work_ || work_->capacity() < bytes)
    work_ = std::make_unique<Arena>(device_, std::max<size_t>(2 * bytes, size_t{1} << 20),
                                    "dynamic_table_step:" + spec_.name);
  work_->reset(0);
}

int64_t* DynamicTable::work_i64(int64_t n) {
  return work_->alloc(DType::kI64, {std::max<int64_t>(n, 1)}).as<int64_t>();
}

uint8_t* DynamicTable::work_u8(int64_t n) {
  return work_->alloc(DType::kU8, {std::max<int64_t>(n, 1)}).as<uint8_t>();
}

RowSpace DynamicTable::rows() const {
  RowSpace rs;
  rs.row_width = row_words_;
  rs.dim = spec_.dim;
  rs.bf16 = bf16_;
  rs.state_off = embedding_words(spec_.dim, bf16_);
  if (cache_) {
    rs.a = cache_->view().values;
    rs.n_a = cache_->capacity();
    rs.b = store_->view().values;
  } else {
    rs.a = store_->view().values;
    rs.n_a = store_->capacity();
  }
  return rs;
}

void DynamicTable::check_keys(Ctx& ctx, const Tensor& keys, const char* what) const {
  check_vec(keys, DType::kI64, device_, what, spec_.name);
  if (keys.dim(0) == 0) return;
  int64_t first = 0;  // ascending keys: the reserved key would be first
  to_host(ctx, &first, keys.data, sizeof(first));
  HSTU_CHECK(first != kEmptyKey, "dynamic table '", spec_.name, "': ", what,
             " contains the reserved key INT64_MIN (", kEmptyKey, "), which no table accepts");
}

int32_t* DynamicTable::prepare_dedupe(const Tensor& keys, const Tensor& unique,
                                      const Tensor& inverse, const Tensor& counts) {
  check_vec(keys, DType::kI64, device_, "dedupe keys", spec_.name);
  const int64_t n = keys.dim(0);
  check_vec(unique, DType::kI64, device_, "dedupe unique", spec_.name);
  check_vec(inverse, DType::kI32, device_, "dedupe inverse", spec_.name);
  check_vec(counts, DType::kI32, device_, "dedupe counts", spec_.name);
  HSTU_CHECK(unique.dim(0) >= n && inverse.dim(0) >= n && counts.dim(0) >= n, "dynamic table '",
             spec_.name, "': dedupe outputs must hold ", n, " entries");
  HSTU_CHECK(n < (int64_t{1} << 31), "dynamic table '", spec_.name, "': dedupe of ", n,
             " lookups (at most 2^31 - 1)");
  last_n_ = n;
  last_u_ = 0;
  last_unique_ = nullptr;
  if (order_cap_ < n) {  // grows with the largest batch; a step allocates nothing after that
    order_cap_ = std::max<int64_t>(n, 2 * order_cap_);
    order_arena_ =
        std::make_unique<Arena>(device_, static_cast<size_t>(order_cap_) * 12 + Arena::kAlign,
                                "dynamic_table_order:" + spec_.name);
    order_ = order_arena_->alloc(DType::kI32, {3 * order_cap_}).as<int32_t>();
  }
  return order_;
}

void DynamicTable::finish_dedupe(const Tensor& unique, int64_t u, int64_t first) {
  HSTU_CHECK(u == 0 || first != kEmptyKey, "dynamic table '", spec_.name,
             "': dedupe keys contain the reserved key INT64_MIN (", kEmptyKey,
             "), which no table accepts");
  last_unique_ = unique.data;
  last_u_ = u;
}

int64_t DynamicTable::dedupe(Ctx& ctx, const Tensor& keys, const Tensor& unique,
                             const Tensor& inverse, const Tensor& counts) {
  int32_t* order = prepare_dedupe(keys, unique, inverse, counts);
  const int64_t n = keys.dim(0);
  if (n == 0) return 0;
  int64_t first = 0;
  const int64_t u = embed::dedupe(ctx, keys.as<int64_t>(), n, unique.as<int64_t>(),
                                  inverse.as<int32_t>(), counts.as<int32_t>(), &first, order);
  finish_dedupe(unique, u, first);
  return u;
}

void DynamicTable::dedupe_tables(Ctx& ctx, std::vector<DedupeCall>& calls) {
  std::vector<DedupeJob> jobs;
  std::vector<size_t> which;
  for (size_t i = 0; i < calls.size(); ++i) {
    DedupeCall& c = calls[i];
    HSTU_CHECK(c.table != nullptr, "dedupe_tables: call ", i, " has no table");
    for (size_t k = 0; k < i; ++k)
      HSTU_CHECK(calls[k].table != c.table, "dedupe_tables: table '", c.table->spec_.name,
                 "' appears twice");
    HSTU_CHECK(c.table->device_ == ctx.device, "dedupe_tables: table '", c.table->spec_.name,
               "' is on ", device_name(c.table->device_), ", the context on ",
               device_name(ctx.device));
    int32_t* order = c.table->prepare_dedupe(c.keys, c.unique, c.inverse, c.counts);
    c.u = 0;
    if (c.keys.dim(0) == 0) continue;
    DedupeJob j;
    j.keys = c.keys.as<int64_t>();
    j.n = c.keys.dim(0);
    j.unique = c.unique.as<int64_t>();
    j.inverse = c.inverse.as<int32_t>();
    j.counts = c.counts.as<int32_t>();
    j.order = order;
    jobs.push_back(j);
    which.push_back(i);
  }
  for (size_t b = 0; b < jobs.size(); b += kMaxDedupeJobs) {
    const int m = static_cast<int>(std::min<size_t>(kMaxDedupeJobs, jobs.size() - b));
    std::vector<int64_t> u(static_cast<size_t>(m)), first(static_cast<size_t>(m));
    dedupe_many(ctx, jobs.data() + b, m, u.data(), first.data());
    for (int k = 0; k < m; ++k) {
      DedupeCall& c = calls[which[b + static_cast<size_t>(k)]];
      c.table->finish_dedupe(c.unique, u[static_cast<size_t>(k)], first[static_cast<size_t>(k)]);
      c.u = u[static_cast<size_t>(k)];
    }
  }
}

void DynamicTable::check_grad_args(const char* op, const Tensor& dout, const Tensor& grad,
                                   const Tensor& touched) const {
  HSTU_CHECK(last_n_ >= 0, "dynamic table '", spec_.name, "': ", op,
             " needs the dedupe of the same lookups first");
  HSTU_CHECK(dout.ndim == 2 && dout.dtype == DType::kF32 && dout.device == device_ &&
                 dout.dim(0) == last_n_ && dout.dim(1) == spec_.dim,
             "dynamic table '", spec_.name, "': ", op, " dout must be f32 [", last_n_, ", ",
             spec_.dim, "] on ", device_name(device_), " (the last dedupe's lookups), got ",
             dout.str());
  HSTU_CHECK(grad.ndim == 2 && grad.dtype == DType::kF32 && grad.device == device_ &&
                 grad.dim(0) >= last_u_ && grad.dim(1) == spec_.dim,
             "dynamic table '", spec_.name, "': ", op, " grad must be f32 [>= ", last_u_, ", ",
             spec_.dim, "] on ", device_name(device_), ", got ", grad.str());
  check_vec(touched, DType::kU8, device_, (std::string(op) + " touched").c_str(), spec_.name);
  HSTU_CHECK(touched.dim(0) >= last_u_, "dynamic table '", spec_.name, "': ", op,
             " touched holds fewer than ", last_u_, " entries");
}

void DynamicTable::reduce_grad(Ctx& ctx, const Tensor& dout, float scale, const Tensor& grad,
                               const Tensor& touched) {
  check_grad_args("reduce_grad", dout, grad, touched);
  if (last_n_ == 0) return;
  embed::reduce_grad(ctx, order_, last_n_, last_u_, dout.as<float>(), dout.row_stride, scale,
                     grad.as<float>(), grad.row_stride, spec_.dim, touched.as<uint8_t>());
}

void DynamicTable::begin_step(int64_t step) {
  HSTU_CHECK(step >= step_, "dynamic table '", spec_.name, "': begin_step(", step, ") after step ",
             step_, " (steps must not decrease)");
  step_ = step;
}

void DynamicTable::find_or_insert(Ctx& ctx, const Tensor& unique, const Tensor& counts,
                                  const Tensor& refs) {
  // Keys straight from dedupe were checked there (no second read-back).
  if (unique.data != last_unique_ || unique.dim(0) > last_u_)
    check_keys(ctx, unique, "find_or_insert keys");
  find_or_insert_padded(ctx, unique, counts, refs);
}

void DynamicTable::find_or_insert_padded(Ctx& ctx, const Tensor& unique, const Tensor& counts,
                                         const Tensor& refs) {
  check_vec(unique, DType::kI64, device_, "find_or_insert keys", spec_.name);
  const int64_t n = unique.dim(0);
  check_vec(counts, DType::kI32, device_, "find_or_insert counts", spec_.name);
  check_vec(refs, DType::kI64, device_, "find_or_insert refs", spec_.name);
  HSTU_CHECK(counts.dim(0) >= n && refs.dim(0) >= n, "dynamic table '", spec_.name,
             "': find_or_insert counts / refs hold fewer than ", n, " entries");
  if (n == 0) return;
  const int64_t* keys = unique.as<int64_t>();
  const int32_t* cnt = counts.as<int32_t>();
  int64_t* out = refs.as<int64_t>();
  if (!cache_) {
    store_->find_or_insert(ctx, keys, cnt, n, step_, out, nullptr);
    return;
  }
  ensure_work(n);
  int64_t* sslots = work_i64(n);
  int64_t* sev = work_i64(n);
  store_->find_or_insert(ctx, keys, cnt, n, step_, sslots, sev);
  cache_->erase_async(ctx, sev, n);  // rows the store evicted are gone: drop their copies
  fill_cache(ctx, keys, cnt, sslots, n, out);
}

void DynamicTable::fill_cache(Ctx& ctx, const int64_t* keys, const int32_t* cnt,
                              const int64_t* sslots, int64_t n, int64_t* refs) {
  int64_t* cslots = work_i64(n);
  int64_t* cev = work_i64(n);
  int64_t* wb = work_i64(n);
  int64_t* fill_src = work_i64(n);
  uint8_t* mask = work_u8(n);
  uint8_t* miss = work_u8(n);
  cache_->find(ctx, keys, n, cslots);
  touch(ctx, cache_->view(), cslots, cnt, n, step_, Eviction::kLru);
  miss_mask(ctx, cslots, sslots, n, mask);
  miss_mask(ctx, cslots, sslots, n, miss);
  // Counted on the device (misses: the cache's inserts and rejections; counters() reads them).
  cache_->insert_no_grow(ctx, keys, n, step_, mask, cslots, cev);
  const TableView& cv = cache_->view();
  const TableView& sv = store_->view();
  // Write back the changed rows of evicted keys before their slots refill (cev[i] is kEmptyKey,
  // found nowhere, where nothing was evicted: no host read-back decides whether to).
  store_->find(ctx, cev, n, wb);
  copy_rows(ctx, cv.values, cslots, sv.values, wb, n, row_words_, dirty_, nullptr);
  tier_refs(ctx, cslots, sslots, miss, n, cache_->capacity(), refs, fill_src);
  copy_rows(ctx, sv.values, fill_src, cv.values, cslots, n, row_words_, nullptr, dirty_);
}

void DynamicTable::find(Ctx& ctx, const Tensor& keys, const Tensor& refs) {
  check_vec(keys, DType::kI64, device_, "find keys", spec_.name);
  check_vec(refs, DType::kI64, device_, "find refs", spec_.name);
  const int64_t n = keys.dim(0);
  HSTU_CHECK(refs.dim(0) >= n, "dynamic table '", spec_.name, "': find refs hold fewer than ", n);
  if (n == 0) return;
  if (!cache_) return store_->find(ctx, keys.as<int64_t>(), n, refs.as<int64_t>());
  ensure_work(n);
  int64_t* sslots = work_i64(n);
  int64_t* cslots = work_i64(n);
  store_->find(ctx, keys.as<int64_t>(), n, sslots);
  cache_->find(ctx, keys.as<int64_t>(), n, cslots);
  tier_refs(ctx, cslots, sslots, nullptr, n, cache_->capacity(), refs.as<int64_t>(), nullptr);
}

void DynamicTable::gather(Ctx& ctx, const Tensor& keys, const Tensor& refs, const Tensor& out,
                          bool init_missing) {
  check_vec(keys, DType::kI64, device_, "gather keys", spec_.name);
  check_vec(refs, DType::kI64, device_, "gather refs", spec_.name);
  const int64_t n = out.ndim == 2 ? out.dim(0) : -1;
  HSTU_CHECK(out.ndim == 2 && out.dtype == DType::kF32 && out.device == device_ &&
                 out.dim(1) == spec_.dim && keys.dim(0) >= n && refs.dim(0) >= n,
             "dynamic table '", spec_.name, "': gather out must be f32 [n, ", spec_.dim, "] on ",
             device_name(device_), " with n <= keys and refs, got ", out.str());
  if (n == 0) return;
  embed::gather(ctx, rows(), refs.as<int64_t>(), keys.as<int64_t>(), n, out.as<float>(),
                out.row_stride, init_missing, table_seed_, static_cast<float>(spec_.init_std));
}

void DynamicTable::lookup(Ctx& ctx, const Tensor& unique, const Tensor& refs, const Tensor& inverse,
                          const Tensor& out, bool init_missing) {
  check_vec(unique, DType::kI64, device_, "lookup keys", spec_.name);
  check_vec(refs, DType::kI64, device_, "lookup refs", spec_.name);
  check_vec(inverse, DType::kI32, device_, "lookup inverse", spec_.name);
  const int64_t n = out.ndim == 2 ? out.dim(0) : -1;
  HSTU_CHECK(out.ndim == 2 && out.dtype == DType::kF32 && out.device == device_ &&
                 out.dim(1) == spec_.dim && inverse.dim(0) >= n,
             "dynamic table '", spec_.name, "': lookup out must be f32 [n, ", spec_.dim, "] on ",
             device_name(device_), " with n <= inverse, got ", out.str());
  if (n == 0) return;
  embed::gather(ctx, rows(), refs.as<int64_t>(), unique.as<int64_t>(), n, out.as<float>(),
                out.row_stride, init_missing, table_seed_, static_cast<float>(spec_.init_std),
                inverse.as<int32_t>());
}

void DynamicTable::backward(Ctx& ctx, const SparseOptimizerSpec& opt, const Tensor& refs,
                            const Tensor& dout, float scale, const Tensor& grad,
                            const Tensor& touched) {
  if (opt.kind == SparseOptimizerSpec::kRowWiseAdagrad) {
    HSTU_CHECK(grad.ndim == 2 && grad.dim(0) >= last_u_ && grad.dim(1) == spec_.dim &&
                   grad.dtype == DType::kF32 && grad.device == device_,
               "dynamic table '", spec_.name, "': backward grad must be f32 [>= ", last_u_, ", ",
               spec_.dim, "] on ", device_name(device_), ", got ", grad.str());
    check_vec(touched, DType::kU8, device_, "backward touched", spec_.name);
    HSTU_CHECK(touched.dim(0) >= last_u_, "dynamic table '", spec_.name,
               "': backward touched holds fewer than ", last_u_, " entries");
    // grad and touched are scratch here: zero the rows reduce_grad adds to.
    if (grad.row_stride == spec_.dim)
      fill_u8(ctx, static_cast<uint8_t*>(grad.data), last_u_ * spec_.dim * 4, 0);
    else  // a strided window: row by row
      for (int64_t k = 0; k < last_u_; ++k)
        fill_u8(ctx, static_cast<uint8_t*>(grad.data) + k * grad.row_stride * 4, spec_.dim * 4, 0);
    fill_u8(ctx, touched.as<uint8_t>(), last_u_, 0);
    reduce_grad(ctx, dout, scale, grad, touched);
    apply(ctx, opt, refs.rows(0, last_u_), grad.rows(0, last_u_), touched.rows(0, last_u_));
    return;
  }
  const SparseOptimizerSpec::Kind want = optimizer_spec(1, 0).kind;
  HSTU_CHECK(opt.kind == want, "dynamic table '", spec_.name, "': backward with another ",
             "optimiser than the table's '", spec_.optimizer, "'");
  check_grad_args("backward", dout, grad, touched);
  check_vec(refs, DType::kI64, device_, "backward refs", spec_.name);
  HSTU_CHECK(refs.dim(0) >= last_u_, "dynamic table '", spec_.name,
             "': backward refs hold fewer than ", last_u_, " entries");
  if (last_n_ == 0 || last_u_ == 0) return;
  embed::backward_apply(ctx, order_, last_n_, last_u_, dout.as<float>(), dout.row_stride, scale,
                        rows(), refs.as<int64_t>(), grad.as<float>(), grad.row_stride,
                        touched.as<uint8_t>(), opt, cache_ ? dirty_ : nullptr);
}

SparseOptimizerSpec DynamicTable::optimizer_spec(int64_t step, float lr) const {
  SparseOptimizerSpec s;
  s.kind = spec_.optimizer == "adam"               ? SparseOptimizerSpec::kAdam
           : spec_.optimizer == "row_wise_adagrad" ? SparseOptimizerSpec::kRowWiseAdagrad
                                                   : SparseOptimizerSpec::kSgd;
  s.lr = lr;
  s.beta1 = spec_.beta1;
  s.beta2 = spec_.beta2;
  s.eps = spec_.eps;
  s.step = step;
  return s;
}

void DynamicTable::apply(Ctx& ctx, const SparseOptimizerSpec& opt, const Tensor& refs,
                         const Tensor& grad, const Tensor& touched) {
  const SparseOptimizerSpec::Kind want = optimizer_spec(1, 0).kind;
  HSTU_CHECK(opt.kind == want, "dynamic table '", spec_.name, "': apply with another optimiser ",
             "than the table's '", spec_.optimizer, "' (its rows hold that optimiser's state)");
  check_vec(refs, DType::kI64, device_, "apply refs", spec_.name);
  check_vec(touched, DType::kU8, device_, "apply touched", spec_.name);
  const int64_t n = grad.ndim == 2 ? grad.dim(0) : -1;
  HSTU_CHECK(grad.ndim == 2 && grad.dtype == DType::kF32 && grad.device == device_ &&
                 grad.dim(1) == spec_.dim && refs.dim(0) >= n && touched.dim(0) >= n,
             "dynamic table '", spec_.name, "': apply grad must be f32 [n, ", spec_.dim, "] on ",
             device_name(device_), " with n <= refs and touched, got ", grad.str());
  if (n == 0) return;
  apply_optimizer(ctx, rows(), refs.as<int64_t>(), grad.as<float>(), grad.row_stride,
                  touched.as<uint8_t>(), n, opt, cache_ ? dirty_ : nullptr);
}

void DynamicTable::prefetch(Ctx& ctx, const Tensor& keys) {
  check_keys(ctx, keys, "prefetch keys");
  const int64_t n = keys.dim(0);
  if (!cache_ || n == 0) return;
  ensure_work(n);
  int64_t* sslots = work_i64(n);
  int64_t* refs = work_i64(n);
  store_->find(ctx, keys.as<int64_t>(), n, sslots);
  // counts are read only by LFU; the cache is LRU.
  fill_cache(ctx, keys.as<int64_t>(), nullptr, sslots, n, refs);
}

int64_t DynamicTable::erase(Ctx& ctx, const Tensor& keys) {
  check_vec(keys, DType::kI64, device_, "erase keys", spec_.name);
  const int64_t n = keys.dim(0);
  if (n == 0) return 0;
  if (cache_) cache_->erase(ctx, keys.as<int64_t>(), n);
  return store_->erase(ctx, keys.as<int64_t>(), n);
}

void DynamicTable::flush(Ctx& ctx) {
  if (!cache_) return;
  const int64_t cap = cache_->capacity();
  ensure_work(3 * cap);
  int64_t* keys = work_i64(cap);
  int64_t* cslots = work_i64(cap);
  int64_t* sslots = work_i64(cap);
  const int64_t m = list_occupied(ctx, cache_->view(), keys, cslots);
  if (m == 0) return;
  store_->find(ctx, keys, m, sslots);
  copy_rows(ctx, cache_->view().values, cslots, store_->view().values, sslots, m, row_words_,
            dirty_, nullptr);
  fill_u8(ctx, dirty_, cap, 0);
}

int64_t DynamicTable::list_keys(Ctx& ctx, const Tensor& keys, const Tensor& refs) {
  check_vec(keys, DType::kI64, device_, "list_keys keys", spec_.name);
  check_vec(refs, DType::kI64, device_, "list_keys refs", spec_.name);
  HSTU_CHECK(keys.dim(0) >= size() && refs.dim(0) >= size(), "dynamic table '", spec_.name,
             "': list_keys needs room for ", size(), " keys");
  const int64_t cap = store_->capacity();
  ensure_work(cap);
  int64_t* k = work_i64(cap);
  int64_t* slots = work_i64(cap);
  const int64_t m = list_occupied(ctx, store_->view(), k, slots);
  HSTU_CHECK(m == size(), "dynamic table '", spec_.name, "': ", m, " keys listed, size ", size());
  if (m == 0) return 0;
  to_device(ctx, keys.data, k, static_cast<size_t>(m) * 8);  // device to device, in stream order
  find(ctx, keys.rows(0, m), refs.rows(0, m));               // (reuses the work arena after)
  return m;
}

TableRows DynamicTable::export_rows(Ctx& ctx) {
  flush(ctx);
  const TableView& v = store_->view();
  const int64_t cap = v.capacity();
  std::vector<int64_t> keys(static_cast<size_t>(cap)), slots(static_cast<size_t>(cap));
  std::vector<uint64_t> scores(static_cast<size_t>(cap));
  std::vector<float> values(static_cast<size_t>(cap * row_words_));
  ensure_work(2 * cap);
  int64_t* dk = work_i64(cap);
  int64_t* ds = work_i64(cap);
  const int64_t m = list_occupied(ctx, v, dk, ds);
  to_host(ctx, keys.data(), dk, static_cast<size_t>(m) * 8);
  to_host(ctx, slots.data(), ds, static_cast<size_t>(m) * 8);
  to_host(ctx, scores.data(), v.scores, static_cast<size_t>(cap) * 8);
  to_host(ctx, values.data(), v.values, values.size() * sizeof(float));
  TableRows r;
  r.keys.assign(keys.begin(), keys.begin() + m);
  r.scores.resize(static_cast<size_t>(m));
  r.values.resize(static_cast<size_t>(m * row_width_));
  const int64_t d = spec_.dim, off = embedding_words(d, bf16_);
  for (int64_t i = 0; i < m; ++i) {
    r.scores[i] = scores[slots[i]];
    const float* src = values.data() + slots[i] * row_words_;
    float* dst = r.values.data() + i * row_width_;
    for (int64_t c = 0; c < d; ++c) dst[c] = row_value(src, c, bf16_);
    std::copy_n(src + off, row_width_ - d, dst + d);
  }
  return r;
}

void DynamicTable::import_rows(Ctx& ctx, const std::vector<int64_t>& keys,
                               const std::vector<float>& values, int64_t width,
                               const std::vector<uint64_t>* scores) {
  const int64_t n = static_cast<int64_t>(keys.size());
  HSTU_CHECK(width == spec_.dim || width == row_width_, "dynamic table '", spec_.name,
             "': import_rows width must be dim (", spec_.dim, ") or the row width (", row_width_,
             "), got ", width);
  HSTU_CHECK(static_cast<int64_t>(values.size()) == n * width, "dynamic table '", spec_.name,
             "': import_rows has ", keys.size(), " keys but ", values.size(), " values for width ",
             width);
  HSTU_CHECK(!scores || static_cast<int64_t>(scores->size()) == n, "dynamic table '", spec_.name,
             "': import_rows has ", n, " keys but ", scores ? scores->size() : 0, " scores");
  if (n == 0) return;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
  std::vector<int64_t> sorted(static_cast<size_t>(n)), iota(static_cast<size_t>(n));
  std::vector<int32_t> ones(static_cast<size_t>(n), 1);
  std::vector<float> rows(static_cast<size_t>(n * row_words_), 0.0f);  // stored layout
  const int64_t d = spec_.dim, off = embedding_words(d, bf16_);
  std::vector<uint64_t> sorted_scores(scores ? static_cast<size_t>(n) : 0);
  for (int64_t i = 0; i < n; ++i) {
    sorted[i] = keys[order[i]];
    HSTU_CHECK(sorted[i] != kEmptyKey, "dynamic table '", spec_.name,
               "': import_rows got the reserved key INT64_MIN");
    HSTU_CHECK(i == 0 || sorted[i] != sorted[i - 1], "dynamic table '", spec_.name,
               "': import_rows got key ", sorted[i], " twice");
    iota[i] = i;
    if (scores) sorted_scores[i] = (*scores)[order[i]];
    const float* src = values.data() + order[i] * width;
    float* dst = rows.data() + i * row_words_;
    for (int64_t c = 0; c < d; ++c) set_row_value(dst, c, src[c], bf16_);
    std::copy_n(src + d, width - d, dst + off);
  }
  ensure_work(n + (n * row_words_ + 7) / 8);  // 5 arrays of n words and the rows
  int64_t* dk = work_i64(n);
  int64_t* di = work_i64(n);
  int64_t* slots = work_i64(n);
  int32_t* dc = reinterpret_cast<int32_t*>(work_i64(n));
  float* dr = reinterpret_cast<float*>(work_i64((n * row_words_ + 1) / 2));
  to_device(ctx, dk, sorted.data(), static_cast<size_t>(n) * 8);
  to_device(ctx, di, iota.data(), static_cast<size_t>(n) * 8);
  to_device(ctx, dc, ones.data(), static_cast<size_t>(n) * 4);
  to_device(ctx, dr, rows.data(), rows.size() * sizeof(float));
  if (cache_) cache_->erase(ctx, dk, n);
  store_->find_or_insert(ctx, dk, dc, n, step_, slots, nullptr, /*admit_all=*/true);
  std::vector<int64_t> hs(static_cast<size_t>(n));
  to_host(ctx, hs.data(), slots, static_cast<size_t>(n) * 8);
  for (int64_t i = 0; i < n; ++i)
    HSTU_CHECK(hs[i] >= 0, "dynamic table '", spec_.name, "': import_rows found no slot for key ",
               sorted[i], " (its bucket is full of keys of this step)");
  copy_rows(ctx, dr, di, store_->view().values, slots, n, row_words_, nullptr, nullptr);
  if (scores) {
    uint64_t* ds = reinterpret_cast<uint64_t*>(work_i64(n));
    to_device(ctx, ds, sorted_scores.data(), static_cast<size_t>(n) * 8);
    set_scores(ctx, store_->view(), slots, ds, n);
  }
}

DynamicTableCounters DynamicTable::counters() const {
  const HashTableCounters& s = store_->counters();
  DynamicTableCounters c;
  c.inserts = s.inserts;
  c.evictions = s.evictions;
  c.rejections = s.rejections;
  c.size = s.size;
  c.capacity = s.capacity;
  c.grows = s.grows;
  if (cache_) {
    const HashTableCounters& cc = cache_->counters();
    c.cache_misses = cc.inserts + cc.rejections;
    c.cache_evictions = cc.evictions;
  }
  return c;
}

int64_t DynamicTable::size() const {
  return store_->size();
}
int64_t DynamicTable::capacity() const {
  return store_->capacity();
}

}  // namespace hstu::embed
