// dynamic_table.h — one dynamic embedding table's parameters, resolved from the Config: the
// configuration-side mirror of the table's DynamicTableSpec (src/embed/), with the same field
// names so the trainer copies it field by field.
//
// Resolution rules (docs/DYNAMIC_TABLES.md):
//   capacity_rows     = DynamicTableArgs.capacity_rows, or ceil(capacity_ratio x catalogue keys)
//                       when it is -1; rounded up to whole buckets (at least one bucket)
//   max_capacity_rows = DynamicTableArgs.max_capacity_rows rounded up to whole buckets, or
//                       capacity_rows when it is 0 (no growth)
//   row_bytes         = dim x 4 (float32) or ceil(dim / 8) x 16 (bfloat16: dim x 2 padded to
//                       16 bytes, so the fp32 state stays aligned) + state x 4, state = 2 dim
//                       (adam), 1 (row_wise_adagrad), 0 (sgd): fp32 Adam / SGD give
//                       recsys-examples' dim x 4 B x (3 | 1)
//   HBM rows          = hbm_bytes / row_bytes if hbm_bytes is set, else hbm_rows if set, else
//                       ceil(hbm_ratio x max_capacity_rows) (recsys-examples' precedence)
//   gpu_cache_rows    = 0 (all in HBM) when HBM rows >= max_capacity_rows; otherwise the HBM rows
//                       rounded down to whole buckets, which needs host_tier (an error
//                       naming the keys if not) and at least one bucket
//   optimizer, learning_rate, betas, eps: OptimizerArgs' sparse optimiser (sparse_learning_rate,
//                       or learning_rate when -1); seed: TrainerArgs.seed
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"

namespace hstu {

enum class DynamicEviction { kNone, kLru, kLfu };
enum class DynamicValueDtype { kFloat32, kBFloat16 };

struct DynamicTableConfig {
  std::string name;               // the table: "item"
  int64_t dim = 0;                // embedding width
  int64_t capacity_rows = 0;      // slots, a multiple of bucket_size
  int64_t max_capacity_rows = 0;  // growth bound, >= capacity_rows (== it: no growth)
  int64_t bucket_size = 32;
  double max_load_factor = 0.75;  // grow above this occupied fraction (while it may)
  DynamicEviction eviction = DynamicEviction::kLru;
  int64_t admit_threshold = 0;  // insert at the N-th sighting (0 or 1 = at once)
  std::string optimizer;        // adam | row_wise_adagrad | sgd
  double learning_rate = 0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double init_std = 0.02;  // truncated normal of a new key's row
  uint64_t seed = 0;
  int64_t gpu_cache_rows = 0;  // rows in HBM when the host tier holds the table (0 = all in HBM)
  DynamicValueDtype value_dtype = DynamicValueDtype::kFloat32;

  bool operator==(const DynamicTableConfig&) const = default;
};

// Whether `table` ("item") is listed in cfg.dynamic.tables.
bool is_dynamic_table(const Config& cfg, const std::string& table);

// Bytes of one row of the table: the embedding plus the optimiser state (see above).
int64_t dynamic_row_bytes(int64_t dim, const std::string& optimizer, DynamicValueDtype dtype);

// The rows one of `world` ranks holds of a dynamic table of `rows` rows sharded by key:
// ceil(rows / world) rounded up to whole buckets of `bucket_size` (recsys-examples' rule);
// rows <= 0 (unset) stays as it is.
int64_t dynamic_rows_per_rank(int64_t rows, int world, int64_t bucket_size);

// The resolved parameters of dynamic table `table` for a catalogue of `catalogue_keys` keys
// (without padding). Throws hstu::Error naming the DynamicTableArgs / OptimizerArgs keys when the
// table is not dynamic, the sparse optimiser is dense_adam, the capacity or budget overflow, or
// the HBM budget is below the capacity without host_tier.
DynamicTableConfig dynamic_table_config(const Config& cfg, const std::string& table,
                                        int64_t catalogue_keys);

}  // namespace hstu
