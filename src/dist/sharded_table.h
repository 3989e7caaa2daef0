// sharded_table.h — a model-parallel embedding table: rows sharded over the ranks of a Comm, and
// each step a compact *window* table holding only the rows that rank's batch uses.
//
// One step on every rank (all ranks call each collective method the same number of times):
//   1. unique = deduper.run({input ids, target ids, negative ids})   (sharding.h; host, in place)
//      -> the batch now holds window indices; unique[0] = 0.
//   2. fetch(ctx, comm, unique): window().weight[0:U) = the rows of `unique`, from their owners
//      (counts exchange, ids all-to-all, owner-side gather, rows all-to-all back).
//   3. the unchanged model runs on window() as its item table: forward, backward (gradients
//      scattered into window().grad, rows marked in window().touched).
//   4. push_grads(ctx, comm): the window's touched gradient rows go back to their owners, which
//      add them into shard().grad in sender-rank order and mark shard().touched; the window's
//      gradient and flags are cleared.
//   5. the normal sparse optimiser on &shard() (train/step.h optimizer_step), exactly as on a
//      single-process table; it updates exactly the touched rows and clears their gradients.
// On one rank (local comm) the shard is the whole table and every step equals the
// single-process table's bit for bit (tests/dist).
//
// Buffers live on comm.device() (CPU for local/MPI, CUDA for NCCL) and are allocated once: the
// window [max_unique, D] (+ grad, touched) and the exchange buffers (sharding.h window_bytes).
// The step's routing (which window row went to which owner) is computed on the host; the device
// work is the library collectives plus the embedding ops' gather (embedding_fwd, scale 1) and
// scatter-add (embedding_bwd, scale 1), so CPU and CUDA share this code.
//
// On CUDA, dedup_and_fetch_device does step 1 on the device instead (ops/window_gpu.h: the same
// sorted unique ids and remap as IdDeduper), on ids already on the device. On one rank the window
// is gathered straight from the shard and push_grads adds its rows back with one kernel: nothing
// reads a device value on the host, so the whole step can be one CUDA graph. On W ranks the
// routing is computed on the device too, into the fixed-size exchange buffers (the window's
// max_unique rows); the step's one wait is the copy of the W per-owner counts to the host, which
// the exchanges need as sizes. push_grads then sends every fetched row's gradient with the same
// counts (an untouched row's index negated, skipped by its owner): no second count exchange.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/context.h"
#include "core/host_staging.h"
#include "dist/comm.h"
#include "dist/sharding.h"
#include "model/params.h"
#include "ops/window_gpu.h"

namespace hstu::dist {

class ShardedTable {
 public:
  // This rank's shard of a [rows, dim] f32 table named `name` (the name keys its initial values
  // and its checkpoint files), with the sparse optimiser's state ("adam" | "dense_adam" |
  // "row_wise_adagrad" | "sgd"), placed by `owner` over comm.size() ranks, and a window of
  // `max_unique` rows (the most unique ids of one step, id 0 included).
  ShardedTable(const Comm& comm, const std::string& name, int64_t rows, int64_t dim,
               const std::string& optimizer, OwnerKind owner, int64_t max_unique);

  // Sets the shard's rows to those of the single-process table initialised by
  // init_tensor([rows, dim], init, seed, name) (model.cpp: Init::trunc_normal(0.02),
  // "item_embedding"). The Philox stream is sequential, so this builds the full table in host
  // memory once (rows x dim x 4 bytes, transiently, on every rank) and keeps the owned rows.
  void init_from_full(const Init& init, uint64_t seed);

  // Step 2: window().weight[0:U) = table rows of unique[0:U) (U <= max_unique; every id in
  // [0, rows); distinct, as IdDeduper returns them). Collective. Remembers the routing for
  // push_grads. Returns U.
  int64_t fetch(Ctx& ctx, Comm& comm, std::span<const int32_t> unique);
  // Steps 1 and 2 in one call: deduplicates and remaps the step's ids in place with the table's
  // own IdDeduper (a [rows] i32 host array, made on first use), then fetches. Returns U;
  // unique_ids() are the ids of window rows [0, U).
  int64_t dedup_and_fetch(Ctx& ctx, Comm& comm, std::span<const std::span<int32_t>> ids);
  // Steps 1 and 2 with ids on the GPU (a CUDA table; i32 device tensors [n] or [n, m] with a row
  // stride, rewritten in place to window rows). One rank: no synchronisation, returns -1 (U stays
  // on the device). W ranks: device routing, one copy of the W counts to the host, the exchanges;
  // returns U. Collective.
  int64_t dedup_and_fetch_device(Ctx& ctx, Comm& comm, std::span<const Tensor> ids);
  // Makes dedup_and_fetch_device take the W-rank path (device routing, counts to the host,
  // exchanges, the flagged gradient push) on one rank too, so one GPU tests it
  // (tests/gpu/test_gpu_window.cpp). Before the first fetch.
  void set_route_on_one_rank(bool on) { route_on_one_rank_ = on; }
  // Whether a device fetch and its push_grads wait on nothing (one rank, CUDA).
  bool device_only() const {
    return device_ == Device::kCUDA && world() == 1 && !route_on_one_rank_;
  }
  std::span<const int32_t> unique_ids() const {
    return dedup_ ? dedup_->unique() : std::span<const int32_t>();
  }
  // Step 4: sends window().grad rows [0:U) that window().touched marks to their owners, which
  // add them into shard().grad (sender rank order, so the sums are deterministic) and mark
  // shard().touched; clears window().grad[0:U) and window().touched. Collective; once per fetch.
  void push_grads(Ctx& ctx, Comm& comm);
  // Ends a fetch whose window was only read (an evaluation batch): nothing to push. Local.
  void end_read_only_fetch() { fetched_ = false; }

  // out[i] = table row ids[i] for any number of ids (repeats allowed), e.g. the targets of a
  // distributed evaluation. out is [n, dim] f32 on comm.device(). Collective (every rank calls
  // it, with its own ids, possibly none); uses the exchange buffers, so not between fetch and
  // push_grads.
  void gather_rows(Ctx& ctx, Comm& comm, std::span<const int32_t> ids, const Tensor& out);

  // This rank's shard: local row j holds id owned_ids()[j]; the optimiser runs on it.
  EmbeddingTable& shard() { return shard_; }
  const EmbeddingTable& shard() const { return shard_; }
  const std::vector<int64_t>& owned_ids() const { return owned_; }
  // The step's window table (the model's item table during the step).
  EmbeddingTable& window() { return window_; }
  const RowSharding& sharding() const { return sharding_; }
  const std::string& name() const { return name_; }
  const std::string& optimizer() const { return optimizer_; }
  int64_t rows() const { return sharding_.rows(); }
  int64_t dim() const { return dim_; }
  int64_t max_unique() const { return cap_; }
  int64_t num_unique() const { return unique_; }
  int rank() const { return rank_; }
  int world() const { return sharding_.world(); }
  Device device() const { return device_; }

 private:
  // Groups distinct ids by owner (stable): pos_[i] = position of keys[i] in that order,
  // send_local_[pos] its owner-local row, send_counts_ per owner. keys.size() <= cap_.
  void route(std::span<const int32_t> keys);
  // Requests the routed rows from their owners and sets out[i] = routed row perm[i].
  void exchange(Ctx& ctx, Comm& comm, std::span<const int32_t> perm, const Tensor& out);
  // The same with send_idx_, perm_ (m entries) and send_counts_ already in place.
  void exchange_routed(Ctx& ctx, Comm& comm, int64_t m, const Tensor& out);
  // Copies a[0:na) to send_idx_ and b[0:nb) to perm_ through the upload staging buffer.
  void upload(Ctx& ctx, std::span<const int32_t> a, std::span<const int32_t> b);

  std::string name_, optimizer_;
  int64_t dim_, cap_, rcap_;
  int rank_;
  Device device_;
  RowSharding sharding_;
  std::vector<int64_t> owned_;
  EmbeddingTable shard_, window_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<IdDeduper> dedup_;
  Tensor send_idx_;  // i32 [cap]: owner-local rows requested, grouped by owner
  Tensor perm_;      // i32 [cap]: position in the owner-grouped order of each requested id
  Tensor rows_in_;   // f32 [cap, D]: rows received back (fetch) / gradient rows sent (push)
  Tensor recv_idx_;  // i32 [rcap]: local rows other ranks request from this one
  Tensor rows_out_;  // f32 [rcap, D]: rows sent to requesters (fetch) / gradients received (push)
  std::unique_ptr<HostStaging> up_;     // i32 [2 * cap]: uploads of send_idx_ and perm_
  std::unique_ptr<HostStaging> flags_;  // u8 [cap]: the window's touched flags, read back
  // The routing of the last route() (host).
  std::vector<int32_t> pos_, send_local_;
  std::vector<int64_t> send_counts_, recv_counts_;
  int64_t unique_ = 0;
  bool fetched_ = false;
  // The device dedupe (CUDA tables, made on the first dedup_and_fetch_device).
  std::unique_ptr<Arena> dev_arena_;
  cuda::WindowDedup dev_;
  Tensor dev_local_;            // i32 [rows]: each id's owner-local row (hash owner, routing)
  bool device_window_ = false;  // the last fetch left U on the device (one rank)
  bool routed_ = false;         // the last fetch was routed on the device (W ranks)
  bool route_on_one_rank_ = false;
};

}  // namespace hstu::dist
