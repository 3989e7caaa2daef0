// table_checkpoint.h — dynamic tables in checkpoints: one safetensors file per table with its
// keys, value rows (embedding | optimiser state) and scores, the spec fields a load must match
// and the counters in the metadata. Loads restore every key, row and score exactly, into a
// table of any capacity (the rows are re-inserted, growing it as needed), and a filtered load
// keeps only the keys a predicate accepts, so a checkpoint written by W ranks (each its own
// keys) reshards onto another rank count: every rank loads every file with
// `owner(key) == rank`.
//
// File <dir>/<name>.dynamic.safetensors:
//   keys   i64 [n]
//   f32 table (value_dtype f32):
//     values f32 [n, row_width]   (embedding [dim] | optimiser state: adam m, v; adagrad state)
//   bf16 table (value_dtype bf16):
//     values bf16 [n, dim]        (the stored bits, exactly)
//     state  f32 [n, row_width - dim]   (only when the optimiser has state)
//   scores i64 [n]              (the u64 scores' bits: LRU step / LFU frequency)
//   metadata: format = hstu.dynamic_table.v1, name, dim, row_width, optimizer, eviction, step,
//             inserts, evictions, rejections, size, capacity, value_dtype (f32 | bf16; absent in
//             files written before bf16 tables: f32)
// Either file loads into either table: bf16 values widen exactly into an f32 table; f32 values
// load into a bf16 table rounded to nearest even (exact for values that came from a bf16 table,
// so bf16 -> f32 table -> bf16 is bit-exact).
// The admission sketch is not saved: keys not yet admitted start counting again after a load.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "embed/dynamic_table.h"

namespace hstu::embed {

// The file of table `name` in dir.
std::string dynamic_table_file(const std::string& dir, const std::string& name);

// Writes the table (flushing a host tier's cache first); returns the path.
std::string save_dynamic_table(Ctx& ctx, DynamicTable& table, const std::string& dir);
// The same into the file `path` (a rank's shard file, train/dynamic_shard_checkpoint.h).
void save_dynamic_table_file(Ctx& ctx, DynamicTable& table, const std::string& path);

// Loads the file of table.spec().name from dir into `table` (which should be empty: loaded keys
// overwrite, others stay), sets its step to the saved one, and returns the number of rows
// loaded. The dim and optimizer must match (errors name the file and field). With `keep`, only
// keys for which keep(key) is true are loaded.
int64_t load_dynamic_table(Ctx& ctx, DynamicTable& table, const std::string& dir,
                           const std::function<bool(int64_t)>& keep = nullptr);
// The same from the file `path`.
int64_t load_dynamic_table_file(Ctx& ctx, DynamicTable& table, const std::string& path,
                                const std::function<bool(int64_t)>& keep = nullptr);

}  // namespace hstu::embed
