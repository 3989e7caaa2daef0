// bench_embedding.h — `hstu bench embedding`: the dynamic embedding table (src/embed/) on
// recsys-examples' published DynamicEmb workload, and the ratio to NVIDIA's figures.
//
// Workload (dynamicemb benchmark/README.md, performance-references.md §4.1): 10 tables of
// dimension 128, 1,048,570 lookups per iteration in all (an equal share per table), keys drawn
// from a power law with alpha 1.05 over each table's id range (scrambled into raw 64-bit keys),
// SGD and Adam, all rows in HBM and with the host tier. One iteration: the forward — every
// table's lookups deduplicated in one pass (DynamicTable::dedupe_tables), then per table
// find_or_insert and the rows straight to the lookups' output [n, 128] (DynamicTable::lookup) —
// and the backward — per table, random output gradients summed per unique key over dedupe's
// sorted order and the fused optimiser applied (DynamicTable::backward). On CUDA the tables'
// steps are spread over 8 streams (table t on stream t % 8), so one table's small kernels overlap
// another's row traffic. Flags select the other steps for comparison (the fastest measured are
// the defaults).
// Median milliseconds per iteration after warm-up; printed beside NVIDIA's published DynamicEmb
// times on an H100 (SGD all in HBM 1.59 ms, Adam with caching 11.63 ms, Adam all in HBM 1.338 +
// 0.847 ms) with the speed-up and issue 18's goal (1.3x in HBM, 1.5x with the host tier).
#pragma once

#include <string>
#include <vector>

namespace hstu {

// args (after "embedding"):
//   --device auto|cpu|cuda   --tables N (10)   --dim D (128)   --lookups N (1048570, all tables)
//   --rows R (rows per table: 1.68 M on CUDA, 200 k on the CPU)   --alpha A (1.05)
//   --optimizer sgd|adam|both (both)   --cache-ratio r (repeatable; 0 = all in HBM, else
//   gpu_cache_rows = r x rows; default 0, 1.0 and 0.5)   --warmup N (3)   --iters N (10)
//   --small (CPU-sized defaults: 10 tables, 104,857 lookups, 200 k rows)   --deterministic
//   --scatter (the backward through embedding_bwd's scatter instead of the table's reduce_grad)
//   --per-table-dedupe (each table's dedupe on its own instead of DynamicTable::dedupe_tables)
//   --window (forward: gather of the unique rows into a window, then embedding_fwd)
//   --lookup (forward: DynamicTable::lookup, rows straight to the output; the default)
//   --streams S (CUDA streams the tables are spread over; 8 on CUDA, 1 on the CPU)
//   --fused-bwd (backward: DynamicTable::backward, grad as scratch; the default)
//   --unfused-bwd (backward: DynamicTable::reduce_grad, then apply, which zeroes grad)
// Environment: HSTU_PROFILE_LAST_ITER=1 brackets the last iteration of each case with
// cudaProfilerStart / Stop, so `ncu --profile-from-start off` (or nsys with
// --capture-range=cudaProfilerApi) sees only a steady-state iteration (tools/ncu_kernel_table.py
// turns ncu's CSV into a per-kernel table).
// Returns 0.
int run_embedding_bench(const std::vector<std::string>& args);

}  // namespace hstu
