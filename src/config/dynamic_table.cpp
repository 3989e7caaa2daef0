// dynamic_table.cpp — resolving DynamicTableArgs into one table's DynamicTableConfig (rules in
// dynamic_table.h).
#include "config/dynamic_table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/checked.h"
#include "core/error.h"

namespace hstu {
namespace {

// n rounded up to a multiple of b (b >= 1), overflow-checked.
int64_t round_up(int64_t n, int64_t b, const char* what) {
  return checked_mul((n + b - 1) / b, b, what);
}

}  // namespace

bool is_dynamic_table(const Config& cfg, const std::string& table) {
  const auto& t = cfg.dynamic.tables;
  return std::find(t.begin(), t.end(), table) != t.end();
}

int64_t dynamic_row_bytes(int64_t dim, const std::string& optimizer, DynamicValueDtype dtype) {
  HSTU_CHECK(dim >= 1, "dynamic table: dim = ", dim, " (need >= 1)");
  int64_t state = 0;
  if (optimizer == "adam") {
    state = checked_mul(dim, int64_t{2}, "Adam state floats");
  } else if (optimizer == "row_wise_adagrad") {
    state = 1;
  } else if (optimizer != "sgd") {
    HSTU_THROW("OptimizerArgs.sparse_optimizer_str = \"", optimizer,
               "\" cannot drive a dynamic table (adam, row_wise_adagrad or sgd)");
  }
  // bf16: dim rounded up to 8 values (16 bytes), so the fp32 state after it stays 16-byte
  // aligned (embed/table_math.h's row layout; the table allocates exactly this).
  const int64_t value =
      dtype == DynamicValueDtype::kBFloat16
          ? checked_mul(checked_add(dim, int64_t{7}, "row bytes") / 8, int64_t{16}, "row bytes")
          : checked_mul(dim, int64_t{4}, "row bytes");
  return checked_add(value, checked_mul(state, int64_t{4}, "state"), "row bytes");
}

DynamicTableConfig dynamic_table_config(const Config& cfg, const std::string& table,
                                        int64_t catalogue_keys) {
  const DynamicTableArgs& a = cfg.dynamic;
  HSTU_CHECK(table == "item", "dynamic table '", table,
             "': hstu's only dynamic table is \"item\" (DynamicTableArgs.tables)");
  HSTU_CHECK(is_dynamic_table(cfg, table), "the ", table,
             " table is not dynamic: DynamicTableArgs.tables does not list \"", table, "\"");
  HSTU_CHECK(catalogue_keys >= 0, "dynamic table '", table, "': catalogue of ", catalogue_keys,
             " keys");
  HSTU_CHECK(
      a.bucket_size >= 1 && a.bucket_size <= 32 && (a.bucket_size & (a.bucket_size - 1)) == 0,
      "DynamicTableArgs.bucket_size = ", a.bucket_size,
      " (need a power of two from 1 to 32: one warp probes a bucket)");
  const OptimizerArgs& o = cfg.optimizer;
  HSTU_CHECK(o.sparse_optimizer_str != "dense_adam",
             "OptimizerArgs.sparse_optimizer_str = \"dense_adam\" updates every row every step, "
             "which a dynamic table does not do; use adam, row_wise_adagrad or sgd");

  DynamicTableConfig t;
  t.name = table;
  t.dim = cfg.network.item_embedding_dim == -1 ? cfg.network.hidden_size
                                               : cfg.network.item_embedding_dim;
  t.bucket_size = a.bucket_size;
  t.value_dtype =
      a.value_dtype == "bfloat16" ? DynamicValueDtype::kBFloat16 : DynamicValueDtype::kFloat32;
  HSTU_CHECK(a.value_dtype == "bfloat16" || a.value_dtype == "float32",
             "DynamicTableArgs.value_dtype = \"", a.value_dtype, "\" (float32 or bfloat16)");

  // Capacity: rows, else a ratio of the catalogue; whole buckets, at least one.
  int64_t rows = a.capacity_rows;
  if (rows == -1) {
    const double want = std::ceil(a.capacity_ratio * static_cast<double>(catalogue_keys));
    HSTU_CHECK(want < 9.0e18, "DynamicTableArgs.capacity_ratio = ", a.capacity_ratio, " x ",
               catalogue_keys, " keys overflows int64");
    rows = static_cast<int64_t>(want);
  }
  HSTU_CHECK(rows >= 0, "DynamicTableArgs.capacity_rows = ", rows, " (need >= 1 or -1)");
  t.capacity_rows = round_up(std::max<int64_t>(rows, 1), a.bucket_size, "capacity_rows");
  if (a.max_capacity_rows == 0) {
    t.max_capacity_rows = t.capacity_rows;
  } else {
    t.max_capacity_rows = round_up(a.max_capacity_rows, a.bucket_size, "max_capacity_rows");
    HSTU_CHECK(t.max_capacity_rows >= t.capacity_rows,
               "DynamicTableArgs.max_capacity_rows = ", a.max_capacity_rows, " is below the ",
               table, " table's capacity of ", t.capacity_rows, " slots (0 = no growth)");
  }
  t.max_load_factor = a.max_load_factor;
  HSTU_CHECK(a.eviction == "none" || a.eviction == "lru" || a.eviction == "lfu",
             "DynamicTableArgs.eviction = \"", a.eviction, "\" (none, lru or lfu)");
  t.eviction = a.eviction == "none"  ? DynamicEviction::kNone
               : a.eviction == "lfu" ? DynamicEviction::kLfu
                                     : DynamicEviction::kLru;
  t.admit_threshold = a.admit_threshold;

  t.optimizer = o.sparse_optimizer_str;
  t.learning_rate = o.sparse_learning_rate == -1 ? o.learning_rate : o.sparse_learning_rate;
  t.adam_beta1 = o.adam_beta1;
  t.adam_beta2 = o.adam_beta2;
  t.adam_eps = o.adam_eps;
  t.init_std = a.init_std;
  t.seed = static_cast<uint64_t>(cfg.trainer.seed);

  // HBM budget: bytes > rows > ratio (recsys-examples' precedence).
  const int64_t row_bytes = dynamic_row_bytes(t.dim, t.optimizer, t.value_dtype);
  int64_t hbm_rows = 0;
  std::string budget;
  if (a.hbm_bytes != -1) {
    hbm_rows = a.hbm_bytes / row_bytes;
    budget = detail::cat("DynamicTableArgs.hbm_bytes = ", a.hbm_bytes, " (", row_bytes,
                         " bytes per row)");
  } else if (a.hbm_rows != -1) {
    hbm_rows = a.hbm_rows;
    budget = detail::cat("DynamicTableArgs.hbm_rows = ", a.hbm_rows);
  } else {
    hbm_rows =
        static_cast<int64_t>(std::ceil(a.hbm_ratio * static_cast<double>(t.max_capacity_rows)));
    budget = detail::cat("DynamicTableArgs.hbm_ratio = ", a.hbm_ratio);
  }
  if (hbm_rows >= t.max_capacity_rows) {
    t.gpu_cache_rows = 0;  // the whole table, grown to its bound, fits the budget
    return t;
  }
  HSTU_CHECK(a.host_tier, "the ", table, " table needs up to ", t.max_capacity_rows, " slots but ",
             budget, " gives ", hbm_rows,
             " rows in HBM: set DynamicTableArgs.host_tier = True (HBM caches a host table) or "
             "raise the budget");
  t.gpu_cache_rows = hbm_rows / a.bucket_size * a.bucket_size;
  HSTU_CHECK(t.gpu_cache_rows >= a.bucket_size, budget, " gives ", hbm_rows,
             " rows in HBM, less than one bucket (DynamicTableArgs.bucket_size = ", a.bucket_size,
             "): the host tier's HBM cache needs at least one bucket");
  return t;
}

int64_t dynamic_rows_per_rank(int64_t rows, int world, int64_t bucket_size) {
  if (rows <= 0 || world <= 1) return rows;
  const int64_t b = std::max<int64_t>(bucket_size, 1);
  const int64_t each = (rows + world - 1) / world;
  return (each + b - 1) / b * b;
}

}  // namespace hstu
