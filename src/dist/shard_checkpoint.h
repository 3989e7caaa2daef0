// shard_checkpoint.h — checkpoints of row-sharded embedding tables that load on any number of
// ranks: each rank writes its rows keyed by id, rank 0 an index; a loader reads the index and
// keeps the ids its rank owns under the CURRENT world size and owner function.
//
// Files, in one checkpoint folder, for a table `name` saved by W ranks:
//   <name>.shard-<r>-of-<W>.safetensors   rank r's rows, in its local order:
//       ids      I64 [n]         the global row ids
//       weight   F32 [n, D]
//       state_m  F32 [n, D] (adam, dense_adam) | F32 [n] (row_wise_adagrad) | absent (sgd)
//       state_v  F32 [n, D] (adam, dense_adam) | absent
//     __metadata__: format = "hstu-shard", format_version, table, rank, world_size, owner,
//     optimizer.
//   <name>.shards.json   written by rank 0 after every shard: format = "hstu-shards",
//     format_version, table, rows (V), dim (D), world_size (W), owner, optimizer, dtype, and
//     files: [{file, rank, rows, bytes}] in rank order.
// Storing ids makes the files independent of the owner function: N ranks save, M ranks (M = 1
// included) load, with either owner function. A load checks that the files together hold every
// id 0..V-1 exactly once (errors name the file and the id) and every tensor's dtype and shape.
// The state tensors use the names of the single-process checkpoint (train/checkpoint.h stores a
// table's optimiser state as "<table>.state_m" / ".state_v"), so either loads into the other:
// load_full_into_shard (a plain checkpoint into a shard) and assemble_full_table (shard files into
// a full [V, D] table, for a 1-rank run or a single-process tool).
#pragma once

#include <string>
#include <vector>

#include "dist/comm.h"
#include "dist/sharded_table.h"
#include "model/params.h"

namespace hstu::dist {

inline constexpr int kShardFormatVersion = 1;

std::string shard_file_name(const std::string& name, int rank, int world);  // no folder
std::string shard_index_name(const std::string& name);                      // no folder

// Every rank writes its shard file into `dir` (created if missing; shared by all ranks, e.g. a
// network file system across nodes) through AtomicFile; then rank 0 writes the index. Collective.
// Returns the file names written by all ranks (shard files in rank order, then the index), the
// same on every rank, for a manifest.
std::vector<std::string> save_shard(const std::string& dir, const std::string& name, Comm& comm,
                                    const ShardedTable& table);

// Loads `table`'s shard from the shard files of `name` in `dir`, whatever world size and owner
// function saved them. with_optimizer = false leaves the optimiser state as it is; true needs the
// saved optimiser's state layout to match the table's. With the same world size and owner
// function each rank reads only its own file, else every rank reads every file. Collective only
// in that every rank reads; errors name the file.
void load_shards(const std::string& dir, const std::string& name, Comm& comm, ShardedTable& table,
                 bool with_optimizer);

// Loads a plain single-process checkpoint's table into `table`'s shard: tensor `table.name()`
// [V, D] from model_path and "<name>.state_m" / "<name>.state_v" from optimizer_path (when
// with_optimizer), the files train/checkpoint.h writes (model.safetensors, optimizer.safetensors).
void load_full_into_shard(const std::string& model_path, const std::string& optimizer_path,
                          ShardedTable& table, bool with_optimizer);

// Reads every shard file of `name` in `dir` into a full table (allocated by the caller: rows and
// dim must match the index; on any device): weight and, when with_optimizer, m / v.
void assemble_full_table(const std::string& dir, const std::string& name, EmbeddingTable& full,
                         bool with_optimizer);

}  // namespace hstu::dist
