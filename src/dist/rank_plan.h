// rank_plan.h — the per-rank memory plan of a data-parallel run of W ranks, and its traffic per
// step, with no communicator and no GPU (`hstu plan CONFIG --world-size W`).
//
// Every rank holds: the dense parameters (+ grad, Adam m, v, and the 16-bit compute copy on CUDA),
// replicated; each replicated (data_parallel) embedding table whole, with its gradient and
// optimiser state; its shard of each model-parallel table (sharding.h describe_shards: rows,
// + grad + optimiser state) plus that table's window and exchange buffers, sized for the most
// distinct ids of one step (ModelMemory's max_unique); and the activations of its own batch
// (train_batch_size samples), which leave out the full-catalogue evaluation buffers when the
// item table is sharded (it is evaluated shard by shard). On one rank nothing is sharded
// (TrainerArgs.model_parallel_tables has no effect), so W = 1 is the single-process plan that
// `hstu train` prints.
//
// Traffic per rank and step: the sharded tables' all-to-alls (ids out and rows back in the
// forward, gradient rows out in the backward; with owners spread evenly, (W-1)/W of a window's
// ids live on other ranks) and the ring all-reduce of the dense and replicated-table gradients
// (2 (W-1)/W of their bytes sent per rank; data_parallel.h all_reduce_gradients also sums the
// replicated tables' touched flags, one byte per row).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/sharding.h"
#include "model/memory_plan.h"

namespace hstu::dist {

// One embedding table on the ranks.
struct TablePlacement {
  PlannedTable table;
  bool sharded = false;
  int64_t whole_bytes = 0;         // the whole table + grad + optimiser state (replicated)
  std::vector<ShardSize> shards;   // sharded dense table: each rank's shard and window
  int64_t dynamic_rank_bytes = 0;  // sharded dynamic table: one rank's share (memory_plan.h)
  int64_t all_to_all_bytes = 0;    // sharded: bytes one rank sends per step (estimate)
};

// The bytes table t takes on `rank`: its shard and window (sharded dense), its share of the
// slots (sharded dynamic), or the whole table (replicated).
int64_t placed_bytes(const TablePlacement& t, int rank);

struct RankPlan {
  ModelMemory model;
  int world = 1;
  OwnerKind owner = OwnerKind::kModulo;
  std::string sparse_optimizer;
  std::vector<TablePlacement> tables;
  int64_t activation_bytes = 0;           // per rank
  std::vector<int64_t> rank_bytes;        // [W] everything a rank holds
  std::vector<int64_t> rank_table_bytes;  // [W] its embedding tables (shards, windows, replicas)
  int64_t table_budget = 0;               // TrainerArgs.table_budget_mb in bytes; 0 = none
  int64_t single_rank_bytes = 0;          // the W = 1 plan's total
  int64_t gradient_bytes = 0;             // what the all-reduce sums (dense + replicated tables)
  int64_t all_reduce_bytes = 0;           // 2 (W-1)/W x gradient_bytes, sent per rank and step
  int64_t all_to_all_bytes = 0;           // the sharded tables' sum, sent per rank and step
};

// The plan of `model` over `world` ranks: tables named in `model_parallel` (TrainerArgs.
// model_parallel_tables) are sharded by `owner` when world > 1; `sparse_optimizer` is
// OptimizerArgs.sparse_optimizer_str. f32 / 16-bit models only (the tables are f32).
// table_budget: the bytes of embedding tables one rank may hold (TrainerArgs.table_budget_mb;
// 0 = no budget); the plan reports it, table_budget_error checks it.
RankPlan plan_ranks(const ModelMemory& model, int world,
                    const std::vector<std::string>& model_parallel, OwnerKind owner,
                    const std::string& sparse_optimizer, int64_t table_budget = 0);

// Empty when every rank's tables fit plan.table_budget (or there is none); else why not: each
// table on the worst rank, and how many ranks a sharded item table needs.
std::string table_budget_error(const RankPlan& plan);

// The printed plan. For world = 1 its dense, table and activation lines are those of
// HstuModel::describe_plan / RankingModel::describe_plan. Ranks are listed one by one up to 16,
// then as min / max.
std::string describe_rank_plan(const RankPlan& plan);

}  // namespace hstu::dist
