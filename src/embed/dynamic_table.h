// dynamic_table.h — a dynamic embedding table: rows keyed by raw int64 ids (any value but
// INT64_MIN, reserved), held in a bucketed hash table on the table's device, with admission,
// growth by doubling, eviction (none / LRU / LFU), a host-memory tier, and the sparse optimisers
// fused into the table (embedding and optimiser state share one row).
//
// A training step (see also the integration notes in docs/ARCHITECTURE.md's embed entry):
//   U = dedupe(ctx, raw ids [n] i64, unique, inverse, counts)    sorted unique keys, inverse map
//   begin_step(step)                                             scores, eviction protection
//   find_or_insert(ctx, unique[0:U), counts[0:U), refs[0:U))     admission, growth, eviction
//   gather(ctx, unique, refs, window weight [U, dim], true)      rows (or initial values)
//   ... the model runs on the window; its gradient rows land in grad [U, dim], touched [U] ...
//   apply(ctx, optimiser, refs, grad, touched)                   fused update; clears grad/touched
//   prefetch(side ctx, next batch's unique keys)                 host tier only, optional
// Evaluation: find(ctx, unique, refs) then gather(..., init_missing = false) (missing: zeros).
// refs stay valid until the next find_or_insert, prefetch, erase or import_rows.
//
// Keys never admitted (fewer than admit_threshold sightings) or that found their bucket full of
// keys used this step get ref -1: gather gives them the initial value, apply drops their
// gradient. A key's initial value depends only on (seed, name, key) (table_math.h).
//
// bf16 values (value_dtype "bf16"): the row stores the embedding as bf16 (table_math.h's
// layout), the optimiser state as f32; gathers widen to f32, initial values and optimiser
// results are rounded to nearest even. export_rows / import_rows speak f32 [n, row_width()].
//
// Host tier (gpu_cache_rows > 0): every row lives in the store (page-locked host memory on
// CUDA, whose keys and scores stay on the device); the device cache (gpu_cache_rows rows, LRU)
// holds copies: misses are copied in, evicted rows written back when the optimiser changed them.
// The store's keys, scores, admission and eviction are exactly those of the table without a
// tier, so both give the same rows. On the CPU backend both tiers are host memory and the code
// path is the same.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "embed/hash_table.h"
#include "ops/embedding.h"

namespace hstu::embed {

// The configuration of one table; config keys fill exactly these fields.
struct DynamicTableSpec {
  std::string name;                     // keys the initial values and the errors
  int64_t dim = 128;                    // embedding width
  int64_t capacity_rows = 1 << 20;      // initial capacity (rounded up to a power-of-two buckets)
  int64_t max_capacity_rows = 1 << 20;  // growth stops here; then eviction
  int bucket_size = 32;                 // slots per bucket (power of two, <= 32)
  double max_load_factor = 0.75;        // grow when size would exceed this fraction of capacity
  std::string eviction = "lru";         // "none" | "lru" | "lfu"
  int64_t admit_threshold = 0;          // <= 1: admit every key; else sightings needed
  std::string optimizer = "adam";       // "sgd" | "adam" | "row_wise_adagrad"
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  double init_std = 0.02;  // truncated normal (+-2 std), as the dense tables
  uint64_t seed = 42;
  int64_t gpu_cache_rows = 0;       // 0: every row on the device; else the device cache size
  std::string value_dtype = "f32";  // "f32" | "bf16" (the embedding; the state stays f32)
};

Eviction parse_eviction(const std::string& name, const std::string& table);
// Optimiser state floats per row after the embedding: adam 2 * dim, row_wise_adagrad 1, sgd 0.
int64_t optimizer_state_width(const std::string& optimizer, int64_t dim, const std::string& table);
// Whether value_dtype is "bf16" (false for "f32"; an error naming the table otherwise).
bool parse_value_dtype_bf16(const std::string& value_dtype, const std::string& table);
// Bytes one stored row of the table takes: embedding_words(dim, bf16) * 4 + state * 4
// (table_math.h's layout; config/dynamic_table.h's dynamic_row_bytes plans the same).
int64_t dynamic_table_row_bytes(const DynamicTableSpec& spec);

struct DynamicTableCounters {
  int64_t inserts = 0, evictions = 0, rejections = 0, size = 0, capacity = 0, grows = 0;
  int64_t cache_misses = 0, cache_evictions = 0;  // host tier only
};

// Rows of a table on the host (export_rows / import_rows).
struct TableRows {
  std::vector<int64_t> keys;     // [n]
  std::vector<float> values;     // [n, row_width()]: embedding (bf16 widened) | optimiser state
  std::vector<uint64_t> scores;  // [n]
};

class DynamicTable {
 public:
  DynamicTable(const DynamicTableSpec& spec, Device device);
  ~DynamicTable();

  // unique[0:U) = sorted distinct keys (i64 [n]), inverse i32 [n], counts i32 [n]; returns U.
  // Throws for the reserved key INT64_MIN.
  int64_t dedupe(Ctx& ctx, const Tensor& keys, const Tensor& unique, const Tensor& inverse,
                 const Tensor& counts);
  // One table's dedupe in dedupe_tables: the arguments of dedupe and its result u.
  struct DedupeCall {
    DynamicTable* table = nullptr;
    Tensor keys, unique, inverse, counts;
    int64_t u = 0;  // out: the number of unique keys
  };
  // dedupe for several tables at once (each table at most once), with results equal to calling
  // each table's dedupe: on CUDA one sort of all the lookups and one synchronisation instead of
  // one per table. At most embed::kMaxDedupeJobs tables with lookups.
  static void dedupe_tables(Ctx& ctx, std::vector<DedupeCall>& calls);
  // The backward of the lookups of the last dedupe (keys [n] -> inverse): grad f32 [U, dim] (a
  // row stride allowed; rows [0, U) zero on entry, as apply leaves them) += scale * the sum of
  // dout f32 [n, dim] rows per unique key, touched u8 [U] = 1. Sums over dedupe's sorted order,
  // so no lookup adds atomically (only warps' partial sums of a key spanning several chunks on
  // CUDA, in no fixed order); the CPU equals embedding_bwd(dout, inverse, scale) exactly.
  void reduce_grad(Ctx& ctx, const Tensor& dout, float scale, const Tensor& grad,
                   const Tensor& touched);
  // The step whose keys are protected from eviction and stamp LRU scores; non-decreasing.
  void begin_step(int64_t step);
  int64_t step() const { return step_; }

  // refs i64 [U] for unique keys i64 [U] (distinct; ascending as dedupe returns them, or any
  // fixed order: inserts follow it); counts i32 [U] (sightings). Throws for the reserved key
  // when it comes first (as in dedupe's order); elsewhere it is never inserted.
  void find_or_insert(Ctx& ctx, const Tensor& unique, const Tensor& counts, const Tensor& refs);
  // find_or_insert for keys built on the device (the training step's device window): distinct
  // keys and, anywhere, the reserved key as padding (past a count the host does not know), which
  // is never found nor inserted and gets ref -1. The keys are not read back (find_or_insert's
  // check), so with find_or_insert_waits() false the call never waits for the device.
  void find_or_insert_padded(Ctx& ctx, const Tensor& keys, const Tensor& counts,
                             const Tensor& refs);
  // Whether find_or_insert may synchronise with the device (growth still possible, an admission
  // sketch, or eviction "none"); false in the steady state of a table at its maximum capacity
  // with LRU / LFU eviction, or while a declared key universe fits (set_key_universe), whose
  // counts then stay on the device until counters() reads them.
  bool find_or_insert_waits() const { return store_->insert_waits(); }
  // Declares the keys find_or_insert will be given (HashTable::set_key_universe, e.g. the
  // catalogue's): while they all fit the table, find_or_insert never grows and never waits, even
  // below max capacity or with eviction "none". Reads the keys present (one synchronisation).
  void set_key_universe(Ctx& ctx, std::vector<int64_t> keys) {
    store_->set_key_universe(ctx, std::move(keys));
  }
  // Read-only lookup: refs (-1: absent); no insertion, no score change.
  void find(Ctx& ctx, const Tensor& keys, const Tensor& refs);
  // out f32 [U, dim] (a row stride allowed) = rows of refs; refs < 0: initial value
  // (init_missing) or zeros.
  void gather(Ctx& ctx, const Tensor& keys, const Tensor& refs, const Tensor& out,
              bool init_missing);
  // The lookups' output straight from the table (no window): out f32 [n, dim] (a row stride
  // allowed) row i = the row of refs[inverse[i]] (i32 [n], dedupe's), or for refs < 0 the
  // initial value of unique[inverse[i]] (init_missing) or zeros; = gather into a window then
  // embedding_fwd(window, inverse) with scale 1, in one pass.
  void lookup(Ctx& ctx, const Tensor& unique, const Tensor& refs, const Tensor& inverse,
              const Tensor& out, bool init_missing);
  // The backward of the last dedupe's lookups: reduce_grad's per-key sums of dout f32 [n, dim]
  // (times scale) applied by the table's optimiser (as apply). grad f32 [>= U, dim] and touched
  // u8 [>= U] are scratch: any contents on entry, unspecified on return (on CUDA no pass zeroes
  // them). Equals zeroing them, reduce_grad, then apply, up to the order of the partial sums of
  // hot keys (more than 32 lookups: summed 32 sorted lookups per warp, added atomically on
  // CUDA); every other key is summed in position order, as the CPU does (which runs exactly
  // that).
  void backward(Ctx& ctx, const SparseOptimizerSpec& opt, const Tensor& refs, const Tensor& dout,
                float scale, const Tensor& grad, const Tensor& touched);
  // The fused optimiser on rows refs[i] with touched[i] (u8 [U]) from grad f32 [U, dim];
  // zeroes grad and touched. opt.kind must be the table's optimizer.
  void apply(Ctx& ctx, const SparseOptimizerSpec& opt, const Tensor& refs, const Tensor& grad,
             const Tensor& touched);
  // The optimiser spec of the table's hyper-parameters at Adam step `step` (1-based), lr `lr`.
  SparseOptimizerSpec optimizer_spec(int64_t step, float lr) const;
  // Host tier: brings rows of keys (distinct; i64 [n]) already in the table into the
  // device cache for the next step, without inserting or changing store scores. Call it after
  // this step's find_or_insert, on any stream ordered after it; no-op without a tier.
  void prefetch(Ctx& ctx, const Tensor& keys);
  // Removes keys (i64 [n], distinct); returns how many were present.
  int64_t erase(Ctx& ctx, const Tensor& keys);
  // Writes the cache's changed rows back to the store (host tier; no-op otherwise).
  void flush(Ctx& ctx);

  // The keys present (keys i64 [>= size()], in slot order) and their refs (i64, same length) on
  // the device, for gather: the item set of full-catalogue evaluation and of negatives drawn
  // from the table. Returns their number. Refs as find's.
  int64_t list_keys(Ctx& ctx, const Tensor& keys, const Tensor& refs);
  // Every row (host copy; flushes first), in slot order.
  TableRows export_rows(Ctx& ctx);
  // Inserts or overwrites keys with the given rows (f32; a bf16 table rounds the embedding to
  // nearest even): values [n, row_width()], or [n, dim] with a
  // zero optimiser state; scores = `scores` when given ([n]), else this step (LRU/none) or 1
  // (LFU); no admission. Grows as needed; throws when max capacity cannot hold them.
  void import_rows(Ctx& ctx, const std::vector<int64_t>& keys, const std::vector<float>& values,
                   int64_t width, const std::vector<uint64_t>* scores = nullptr);

  DynamicTableCounters counters() const;
  const DynamicTableSpec& spec() const { return spec_; }
  // Floats of a row as export_rows / import_rows see it: dim + optimiser state.
  int64_t row_width() const { return row_width_; }
  // 4-byte words one stored row takes (the embedding padded as table_math.h says, then state).
  int64_t row_words() const { return row_words_; }
  bool bf16() const { return bf16_; }
  int64_t size() const;
  int64_t capacity() const;
  bool tiered() const { return cache_ != nullptr; }
  Device device() const { return device_; }
  uint64_t table_seed() const { return table_seed_; }

 private:
  // The checks reduce_grad and backward share (`op` names the caller in the messages): a dedupe
  // came first, dout f32 [n, dim] of its lookups, grad f32 [>= u, dim], touched u8 [>= u].
  void check_grad_args(const char* op, const Tensor& dout, const Tensor& grad,
                       const Tensor& touched) const;
  RowSpace rows() const;
  void ensure_work(int64_t n);
  int64_t* work_i64(int64_t n);
  uint8_t* work_u8(int64_t n);
  // Brings rows of the keys with store_slots >= 0 into the cache (see find_or_insert).
  void fill_cache(Ctx& ctx, const int64_t* keys, const int32_t* counts, const int64_t* sslots,
                  int64_t n, int64_t* refs);
  void check_keys(Ctx& ctx, const Tensor& keys, const char* what) const;
  // dedupe's checks and its order buffer for n lookups; returns the order buffer.
  int32_t* prepare_dedupe(const Tensor& keys, const Tensor& unique, const Tensor& inverse,
                          const Tensor& counts);
  // Records a dedupe's result (throws for the reserved key).
  void finish_dedupe(const Tensor& unique, int64_t u, int64_t first);

  DynamicTableSpec spec_;
  Device device_;
  Eviction eviction_;
  int64_t row_width_ = 0;  // dim + state floats (export / import)
  int64_t row_words_ = 0;  // stored words per row: embedding_words(dim, bf16_) + state
  bool bf16_ = false;
  uint64_t table_seed_ = 0;
  int64_t step_ = 0;
  const void* last_unique_ = nullptr;  // the unique keys of the last dedupe, already checked
  int64_t last_u_ = 0;
  int64_t last_n_ = -1;                 // lookups of the last dedupe (-1: none yet)
  std::unique_ptr<Arena> order_arena_;  // i32 [3n]: dedupe's sorted positions | segment ends |
                                        // the unique key of each sorted entry
  int32_t* order_ = nullptr;
  int64_t order_cap_ = 0;
  std::unique_ptr<HashTable> store_, cache_;
  std::unique_ptr<Arena> dirty_arena_;
  uint8_t* dirty_ = nullptr;  // u8 [cache capacity]: cache row changed since it was filled
  std::unique_ptr<Arena> work_;
};

}  // namespace hstu::embed
