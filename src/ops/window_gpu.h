// window_gpu.h — a row-sharded table's per-step window on the GPU (dist/sharded_table.h): the
// step's ids deduplicated and rewritten to window rows on the device, the window's rows gathered
// from the table and its gradient rows added back, with no host round trip; and the same dedupe
// feeding a dynamic item table (train/dynamic_item_table.h: the window's keys and sightings, the
// initial rows of keys not admitted, the ids a table holds for its negatives). CUDA-only entry
// points (namespace hstu::cuda), defined in cuda/window_gpu.cu in CUDA builds only; the buffer
// struct itself is plain C++ so CPU builds can hold one.
//
// The one decision: the result equals the host IdDeduper (dist/sharding.h) exactly: the sorted
// distinct ids with 0 always first, every id replaced by its index there. The number of distinct
// ids stays on the device (count), read by every later kernel, so a 1-rank step needs no
// synchronisation. Two strategies, chosen once from the table's shape:
//   dense (rows <= cap, e.g. ML-1M's 3,707 items): a flag per table row, an exclusive scan gives
//     each present id its window row; O(rows + ids) per step, no sort;
//   sort (rows > cap): the step's at most cap ids (cap = the plan's item_window_rows, which
//     bounds a step's ids + 1) radix-sorted over the id's bits and made unique with CUB; ids
//     remapped by binary search.
// Ids outside [0, rows) cannot be reported without a synchronisation: they become 0 (padding).
#pragma once

#include <cstdint>
#include <span>

#include "core/arena.h"
#include "core/context.h"
#include "core/tensor.h"

namespace hstu::cuda {

// The device buffers of one table's dedupe, allocated once (allocate_window_dedup).
struct WindowDedup {
  int64_t rows = 0;    // table rows (ids in [0, rows))
  int64_t cap = 0;     // window rows: at most this many distinct ids per step
  bool dense = false;  // rows <= cap: flag scan; else sort
  Tensor unique;       // i32 [cap]: the step's sorted distinct ids, unique[0] = 0
  Tensor count;        // i32 [1]: how many (device)
  Tensor keys;         // dense: i32 [rows] present flags; sort: i32 [cap] the step's ids + 0
  Tensor index;        // dense: i32 [rows] each present id's window row; sort: i32 [cap] sorted
  Tensor temp;         // u8 [*]: CUB's temporary storage
  // The owner routing (window_route; empty unless allocated with route).
  int world = 1;
  Tensor owner_keys, owner_sorted;  // i32 [cap]: each window row's owner (W past the count)
  Tensor iota;                      // i32 [cap]: 0, 1, ...
  Tensor order;                     // i32 [cap]: window rows grouped by owner (stable)
  Tensor counts;                    // i32 [W]: distinct ids per owner
  Tensor route_temp;                // u8 [*]: CUB's storage for the grouping sort
};

// Allocates the buffers for a table of `rows` ids and a window of `cap` rows from `arena` (a
// measuring arena sizes them: Arena::planned); `route` adds the buffers of window_route over
// `world` owners.
WindowDedup allocate_window_dedup(Arena& arena, int64_t rows, int64_t cap, int world = 1,
                                  bool route = false);

// Deduplicates the ids of every tensor (i32 on the device, [n] or [n, m] with a row stride) plus
// id 0 into d.unique[0:*d.count) and rewrites each id in place to its index there. In the sort
// strategy the ids in all (+ 1) must fit d.cap (error naming the count otherwise; the plan's
// window bounds them).
void window_dedup(Ctx& ctx, const WindowDedup& d, std::span<const Tensor> ids);

// window[k] = table[d.unique[k]] for k < *d.count (f32 [rows, D] -> f32 [cap, D]): the window of a
// table whose local rows are its ids (one rank).
void window_gather_rows(Ctx& ctx, const WindowDedup& d, const Tensor& table, const Tensor& window);

// The routing over d.world owners (W ranks), after window_dedup: the window rows grouped by owner
// in a stable order (d.order[j] = the window row at position j), d.counts[o] = rows owner o holds,
// send_local[j] = the owner-local row of that id and perm[k] = the position of window row k
// (dist/sharding.h's owners: modulo id % W, local id / W; hash murmur3_fmix64(id) % W, local
// local_of_id[id], i32 [rows]). The same as ShardedTable's host routing of the same ids.
void window_route(Ctx& ctx, const WindowDedup& d, bool hash, const Tensor& local_of_id,
                  const Tensor& send_local, const Tensor& perm);

// A W-rank gradient push, for j < n: rows[j] = window_grad[d.order[j]], and send_local[j] is
// turned into -1 - send_local[j] when window row d.order[j] was not touched (window_touched).
void window_grad_rows(Ctx& ctx, const WindowDedup& d, int64_t n, const Tensor& window_grad,
                      const Tensor& window_touched, const Tensor& send_local, const Tensor& rows);

// The owner's side: grad[idx[j]] += rows[j] and touched[idx[j]] = 1 for every idx[j] >= 0, j in
// order. The indices must be distinct (one sender's rows); call once per sender, in rank order.
void window_add_rows(Ctx& ctx, const Tensor& rows, const Tensor& idx, const Tensor& grad,
                     const Tensor& touched);

// For k < *d.count with window_touched[k]: grad[d.unique[k]] += window_grad[k] and
// touched[d.unique[k]] = 1; then window_grad[k] = 0 and window_touched[k] = 0. The ids are
// distinct, so every row has one writer: deterministic and atomic-free.
void window_scatter_grads(Ctx& ctx, const WindowDedup& d, const Tensor& window_grad,
                          const Tensor& window_touched, const Tensor& grad, const Tensor& touched);

// A dynamic item table's window (train/dynamic_item_table.h), after window_dedup over the
// catalogue ids [0, rows): keys i64 [cap] and counts i32 [cap] for the table's find_or_insert.
// keys[k] = the table key of window row k < *d.count: key_of_id[d.unique[k]] (i64 [rows], a
// raw-id dataset's key per catalogue index), or d.unique[k] itself when key_of_id is empty; rows
// past the count get `pad` (the table's reserved key). counts[k] = how many of the rewritten ids
// (every tensor of `ids`, as window_dedup left them) name window row k, counts[0] at least 1 (the
// host window's sightings, for LFU scores and admission).
void window_keys(Ctx& ctx, const WindowDedup& d, const Tensor& key_of_id, int64_t pad,
                 std::span<const Tensor> ids, const Tensor& keys, const Tensor& counts);

// After a gather that left the rows of absent keys zero: window rows k < *d.count whose ref is
// < 0 (refs i64 [cap]; keys not admitted) get the key's initial value (embed/table_math.h
// key_init_value(table_seed, keys[k], c, init_std)), as a gather with init_missing does; rows
// past the count stay untouched.
void window_init_missing(Ctx& ctx, const WindowDedup& d, const Tensor& keys, const Tensor& refs,
                         const Tensor& window, uint64_t table_seed, float init_std);

// The ids a table holds, for negatives drawn from the table (train/table_negatives.h): pool i32
// [n] = first + i for the i (ascending) with refs[i] >= 0 (i64 [n]: a find of the keys of ids
// first, first + 1, ...), count i32 [1] their number, on the device. flags / index i32 [n] and
// temp (u8, present_pool_temp_bytes(n)) are scratch.
size_t present_pool_temp_bytes(int64_t n);
void present_pool(Ctx& ctx, const Tensor& refs, int32_t first, const Tensor& flags,
                  const Tensor& index, const Tensor& temp, const Tensor& pool, const Tensor& count);

}  // namespace hstu::cuda
