// dynamic_shard.h — a dynamic (hash-table) item table sharded by key over the ranks of a Comm:
// rank r's DynamicTable holds exactly the keys with dist::key_owner(key, W, owner) == r (the
// row-sharded dense tables' modulo / hash rule on the raw 64-bit key), and each step's window is
// assembled by the same exchange as dist::ShardedTable's.
//
// One training step on every rank (each method is collective; all ranks call it in turn):
//   1. fetch(ctx, step, keys [U], counts [U], window, insert = true): the window's distinct keys
//      (row 0: key 0) are grouped by owner (stable), the counts exchanged, the keys and their
//      sightings sent to the owners (all-to-all), each owner dedupes what it received (keys
//      several ranks requested once, their sightings summed), runs begin_step / find_or_insert
//      (admission, growth, eviction on its own table) and gathers the rows, which go back by the
//      reverse all-to-all into window.weight[0, U).
//   2. the model trains on the window (gradients in window.grad, touched flags).
//   3. update(ctx, optimiser spec, window): the touched gradient rows go to their owners, which sum
//      them per key in sender-rank order (deterministic) and apply the table's fused optimiser;
//      the window's gradient and flags are cleared.
// With W ranks of batch B this trains what one rank with batch W*B trains, up to the order of the
// per-key gradient sums (tests/mpi/test_dynamic_shard.cpp): each owner inserts its keys in
// ascending order with the global sightings, and a new key's row depends only on (seed, name,
// key). Evaluation: materialize (each rank's owned catalogue rows, all-gathered); counters:
// sum_counters. Buffers live on the table's device (= comm.device()), so the same code runs on
// GPUs over NCCL with the CUDA table; the routing is computed on the host.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/arena.h"
#include "dist/comm.h"
#include "dist/sharding.h"
#include "embed/dynamic_table.h"
#include "model/params.h"

namespace hstu {

// The capacity fields of a table spec for one of `world` ranks: recsys-examples' per-rank
// capacity align(ceil(N / W), bucket_size) for capacity_rows, max_capacity_rows and (host tier)
// gpu_cache_rows; the rest unchanged. world = 1 returns `spec`.
embed::DynamicTableSpec shard_table_spec(const embed::DynamicTableSpec& spec, int world);

class DynamicShard {
 public:
  // `table` is this rank's shard; windows of at most max_unique distinct keys per rank.
  DynamicShard(embed::DynamicTable& table, dist::Comm& comm, dist::OwnerKind owner,
               int64_t max_unique);

  // Step 1 (see above): window.weight[0, U) = the rows of keys[0, U) (distinct, key 0 first;
  // counts = sightings, host). insert: training (find_or_insert at `step`); else read-only (find;
  // absent keys read their initial value with init_missing, else zeros).
  void fetch(Ctx& ctx, int64_t step, std::span<const int64_t> keys, std::span<const int32_t> counts,
             EmbeddingTable& window, bool insert, bool init_missing = true);
  // Step 3 (after a training fetch): the window's touched gradient rows applied on their owners
  // with `opt` (the table's optimiser); clears window.grad[0, U) and window.touched.
  void update(Ctx& ctx, const SparseOptimizerSpec& opt, EmbeddingTable& window);
  // out.weight rows [0, n) = the rows of keys[0, n) (n = keys.size() <= out.rows) from their
  // owners; keys absent there read their initial value. Exact copies (an all-gather).
  void materialize(Ctx& ctx, std::span<const int64_t> keys, EmbeddingTable& out);
  // Every rank's counters summed (size, capacity, inserts, evictions, ...). Collective.
  embed::DynamicTableCounters sum_counters();

  dist::OwnerKind owner() const { return owner_; }
  int world() const { return world_; }
  int rank() const { return rank_; }

 private:
  // Host arrays -> device tensor rows [0, n) and back (synchronous copies).
  static void upload(const Tensor& dst, const void* src, int64_t n);
  static void download(void* dst, const Tensor& src, int64_t n);

  embed::DynamicTable& table_;
  dist::Comm& comm_;
  dist::OwnerKind owner_;
  int world_, rank_;
  int64_t dim_, cap_, rcap_;
  std::unique_ptr<Arena> arena_;
  // Requester side (cap rows): keys / sightings / positions sent, rows received.
  Tensor send_keys_, send_counts_dev_, perm_, rows_in_;  // i64, i32, i32 [cap], f32 [cap, D]
  // Owner side (rcap = W x cap rows): what the ranks requested, deduped.
  Tensor recv_keys_, recv_counts_dev_, recv_idx_;  // i64, i32, i32 [rcap]
  Tensor rows_out_;                                // f32 [rcap, D]
  Tensor own_keys_, own_counts_, own_refs_, inv_;  // i64, i32, i64, i32 [rcap]
  Tensor own_rows_, own_grad_, own_touched_;       // f32 [rcap, D] x 2, u8 [rcap]
  // The routing of the last training fetch (host).
  std::vector<int32_t> pos_;                        // [U] window row -> owner-grouped position
  std::vector<int64_t> send_counts_, recv_counts_;  // [W]
  std::vector<int32_t> inv_host_;                   // [R] received position -> own unique index
  // Reused host scratch of the routing (sized once in the constructor; no allocation per step):
  std::vector<int64_t> keys_i64_;         // fetch: keys sent [U], then keys received [R]
  std::vector<int32_t> vals_i32_;         // fetch: sightings sent / received; update: positions
  std::vector<int64_t> own_keys_host_;    // [own U] the owner's distinct keys, ascending
  std::vector<int32_t> own_counts_host_;  // [own U] their summed sightings
  std::vector<int64_t> next_;             // [W] running group offsets / gradient rows per owner
  std::vector<int64_t> grad_recv_;        // [W] gradient rows received per sender
  std::vector<uint8_t> touched_host_;     // [U] window touched flags
  std::vector<int32_t> window_at_;        // [U] grouped position -> window row; then [R] indices
  std::vector<int32_t> src_;              // [n] window rows of the gradient rows sent
  int64_t u_ = 0, own_u_ = 0;
  bool fetched_ = false;
  std::unique_ptr<Arena> eval_arena_;  // materialize's buffers
};

}  // namespace hstu
