// memory_plan.h — a model's memory plan computed without allocating it, for `hstu plan` (any
// world size, any device, no GPU): the dense parameter layout and the activation arena of
// HstuModel / RankingModel, measured by running the models' allocation sequence on a measuring
// arena (core/arena.h), plus the embedding tables the model holds.
//
// Why not HstuModel::plan() itself: plan() allocates what it measures (the dense buffers and the
// tables, zero-filled and initialised, then the activation peak), which for the large configs is
// tens of GiB of host memory, and a ranking model refuses bf16 activations on the CPU, so the
// plan of a CUDA run could not be computed on a machine without a GPU. The functions here run the
// same steps with the models' own building blocks (DenseParams::add + layout(), the HstuLayer
// parameter registration and allocate_acts / allocate_scratch, allocate_batch_tensors) in the
// order HstuModel::allocate / RankingModel::allocate call them; tests/model checks that they
// equal the real models' plans (describe_plan) byte for byte, so a change to either side fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/tensor.h"
#include "model/model.h"
#include "model/ranking_model.h"

namespace hstu {

// One embedding table of the model: [rows, dim] f32 (f64 for an f64 model), with a sparse
// optimiser's state.
// A dynamic table's device memory, by the rule its slots follow: a power of two of buckets
// holding max_rows (or cache_rows, the HBM cache of a host tier), each slot row_bytes (the row
// with its key, score and last-use step), each bucket bucket_bytes (its list head), plus
// fixed_bytes (the step's window and the evaluation catalogue, whole on every rank).
struct DynamicTablePlan {
  int64_t max_rows = 0, cache_rows = 0, bucket = 1, row_bytes = 0, bucket_bytes = 0,
          fixed_bytes = 0;
  // Bytes only an unsharded table allocates: with raw ids on CUDA, the present-key pool its
  // table negatives draw from (one rank only, train/dynamic_item_table.cpp).
  int64_t unsharded_bytes = 0;
};
// Its bytes on one of `world` ranks sharding it by key (config/dynamic_table.h
// dynamic_rows_per_rank; the host tier stays on while the rank's cache is below its rows);
// world = 1: the whole table, unsharded.
int64_t dynamic_table_bytes(const DynamicTablePlan& d, int world);
// The slots one rank's share of the table allocates (a power of two of buckets).
int64_t dynamic_table_slots(const DynamicTablePlan& d, int world);

// The device bytes of a dynamic item table's per-step window on CUDA (the dedupe's and the
// table lookup's arrays, with raw ids the catalogue's keys), for a window of `window_rows` rows
// over `num_ids` ids; CUB's temporary storage is sized on the device and not counted.
int64_t dynamic_window_bytes(int64_t window_rows, int64_t num_ids, bool raw_ids);
// With raw ids on CUDA, an unsharded table's present-key pool over `num_ids` ids (refs, flags,
// index and ids: i64 + 3 x i32 per id; CUB's temporary storage not counted).
int64_t dynamic_pool_bytes(int64_t num_ids);

struct PlannedTable {
  std::string name;  // "item" | "action" | "contextual"
  int64_t rows = 0;
  // Most distinct ids of this table in one step (a training step or an evaluation batch), id 0
  // included, capped at rows: the rows a rank fetches when the table is sharded.
  int64_t max_unique = 0;
  std::string max_unique_formula;  // how max_unique was computed, for the printed plan
  bool shardable = true;  // the trainer shards it when TrainerArgs.model_parallel_tables names it
  // A dynamic table (DynamicTableArgs): its device bytes (slots with their keys and scores, the
  // step's window, the catalogue materialised for evaluation) and how they were counted; -1 and
  // "": a dense table, rows x dim with its gradient and optimiser state.
  int64_t dynamic_bytes = -1;
  std::string dynamic_formula;
  DynamicTablePlan dynamic;  // when dynamic_bytes >= 0
};

// What a model needs on one device, for the batch it is planned for.
struct ModelMemory {
  std::string task;  // "retrieval" | "ranking"
  Device device = Device::kCPU;
  DType act = DType::kF32;
  int64_t layers = 0, dim = 0;
  int64_t max_tokens = 0;          // token capacity of the activations
  int64_t max_candidates = 0;      // ranking: candidate capacity
  int64_t dense_tensors = 0;       // entries of the dense parameter table
  int64_t dense_floats = 0;        // elements of the flat buffer (64-element aligned parameters)
  int64_t dense_bytes = 0;         // param + grad + Adam m + v (4 flat buffers), as describe_plan
  int64_t compute_copy_bytes = 0;  // the 16-bit compute copy of the flat buffer (CUDA)
  int64_t param_elem_bytes = 4;    // f32 (8 for f64)
  std::vector<PlannedTable> tables;
  // The activation arena's peak without the retrieval evaluation buffers (the plan when the item
  // table is sharded), and the arena of a model that owns its item table ([V, D] + [V] of
  // L2-normalised items for the full-catalogue evaluation; = step bytes for ranking).
  int64_t step_activation_bytes = 0;
  int64_t activation_bytes = 0;
};

// The ModelShape the retrieval task plans its model with (retrieval_task.cpp): batches of
// max(train_batch_size, eval_batch_size) samples of max_history_seqlen tokens.
ModelShape retrieval_model_shape(const Config& cfg, int64_t num_items);
// The rows of a windowed item table's per-step window (a row-sharded or dynamic table): the most
// distinct ids of a training step (inputs, targets, negatives) or an evaluation batch (inputs),
// + 1 for the padding id 0, at most num_items. The same number `hstu plan` prints.
int64_t item_window_rows(const Config& cfg, int64_t num_items);

// The activation arena bytes of HstuModel(cfg, shape, *, act).plan(); owns_item_table = false
// leaves out the evaluation buffers of the item table (a row-sharded item table is evaluated
// shard by shard).
int64_t retrieval_activation_bytes(const Config& cfg, const ModelShape& shape, DType act,
                                   bool owns_item_table = true);
// The activation arena bytes of RankingModel(cfg, shape, *, act).plan().
int64_t ranking_activation_bytes(const Config& cfg, const RankingShape& shape, DType act);

// The memory of the retrieval model over `num_items` item rows (incl. padding 0), or of the
// ranking model over `shape`, on `device` with activations `act` (bf16 on CUDA, f32 on the CPU,
// as the trainer runs them).
ModelMemory retrieval_memory(const Config& cfg, int64_t num_items, Device device, DType act);
ModelMemory ranking_memory(const Config& cfg, const RankingShape& shape, Device device, DType act);

}  // namespace hstu
