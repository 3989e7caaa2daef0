// dynamic_shard_checkpoint.h — checkpoints of a dynamic table sharded by key over the ranks
// (dynamic_shard.h) that load on any rank count: each rank writes its own table's keys, rows
// (embedding | optimiser state) and scores (embed/table_checkpoint.h's format), rank 0 an index;
// a load reads every file and keeps the keys its rank owns under the CURRENT world size and owner
// function (a single process keeps every key), so W ranks save and M ranks load, M = 1 included,
// and a single process's <name>.dynamic.safetensors loads onto W ranks the same way.
//
// Files in one checkpoint folder, for table `name` saved by W ranks:
//   <name>.dynamic.rank-<r>-of-<W>.safetensors   rank r's table (format hstu.dynamic_table.v1)
//   <name>.dynamic.index.json                     format = "hstu-dynamic-shards", table,
//       world_size, owner, files: [{file, rank, keys, bytes}] in rank order (written last).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "dist/sharding.h"
#include "embed/dynamic_table.h"

namespace hstu {

std::string dynamic_shard_file_name(const std::string& name, int rank, int world);  // no folder
std::string dynamic_shard_index_name(const std::string& name);                      // no folder

// Every rank writes its table into `dir` (shared by the ranks); then rank 0 writes the index.
// Collective. Returns the file names of all ranks (shard files in rank order, then the index).
std::vector<std::string> save_dynamic_shard(Ctx& ctx, embed::DynamicTable& table,
                                            const std::string& dir, dist::Comm& comm,
                                            dist::OwnerKind owner);

// Loads table.spec().name from `dir` into `table`: every file of the index when the checkpoint
// is sharded, else the single file <name>.dynamic.safetensors; only keys with keep(key) (all
// without `keep`). Returns the rows loaded. Errors name the file.
int64_t load_dynamic_any(Ctx& ctx, embed::DynamicTable& table, const std::string& dir,
                         const std::function<bool(int64_t)>& keep = nullptr);

// Whether the checkpoint in `dir` holds table `name` as per-rank dynamic shard files.
bool dynamic_sharded_in(const std::string& dir, const std::string& name);

}  // namespace hstu
