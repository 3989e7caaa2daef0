// model.h — the HSTU generative recommender: input pre-processing, the layer stack, output
// normalisation and the retrieval head (sampled softmax), with its memory plan.
//
// The model owns every buffer of a training step. plan() runs the allocation sequence once on a
// measuring arena to learn the peak, then allocates exactly that (printed by describe_plan());
// forward/backward only take views of those buffers, so the step loop never allocates.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/arena.h"
#include "core/context.h"
#include "model/batch_tensors.h"
#include "model/grad_hook.h"
#include "model/hstu_layer.h"
#include "model/params.h"

namespace hstu {

struct ModelShape {
  int64_t num_items = 0;      // item table rows (incl. padding 0)
  int64_t max_batch = 0;      // samples per batch (train or eval, whichever is larger)
  int64_t max_tokens = 0;     // tokens per batch
  int64_t num_negatives = 0;  // R
  // > 0: the item table is not the model's own but a row-sharded table's per-step window of this
  // many rows (dist/sharded_table.h), given with set_item_table(); batches then hold window
  // indices. The model allocates no item table and no full-catalogue evaluation buffers.
  int64_t window_rows = 0;
  // With window_rows > 0: still allocate the full-catalogue evaluation buffers (a dynamic item
  // table, evaluated over its catalogue materialised into a [num_items, D] table given with
  // set_item_table).
  bool full_eval_buffers = false;
  // CUDA scratch beyond one rank's batch (0: that batch's): the queries of one sharded
  // evaluation call (every rank's batch) and the rows a shard owner scatters per step.
  int64_t max_eval_queries = 0;
  int64_t max_scatter_rows = 0;
  // In-batch negatives' pool on CUDA (0: one batch's targets): a data-parallel rank draws from
  // the global batch's targets, up to W x max_tokens.
  int64_t max_pool_targets = 0;
};

// Builds the layer configuration of SPEC §2 from the network arguments.
HstuLayerConfig layer_config(const Config& cfg);

// Rows of the item table a training batch's ids address: the catalogue, or the window.
int64_t step_table_rows(const ModelShape& shape);
// Whether the sampled softmax reads a copy of the item table in the activation dtype, cast every
// step (RetrievalArgs.loss_rows_dtype = auto; 16-bit activations, i.e. CUDA): worth it (6 bytes a
// value to cast) where a batch can gather at least 3 times the table's rows (2 saved each).
bool lowp_loss_rows(const Config& cfg, const ModelShape& shape, DType act);

class HstuModel {
 public:
  HstuModel(const Config& cfg, const ModelShape& shape, Device device, DType act_dtype);

  // Allocates parameters (initialised from `seed`) and the activation plan.
  void plan(uint64_t seed);
  std::string describe_plan() const;

  // Forward + backward of the retrieval loss on an uploaded batch (neg_ids filled). Gradients
  // accumulate into the dense/embedding gradient buffers; the scaled loss sum is left in
  // loss_tensor() (on the device: enqueueing the step does not wait for it).
  // `hook` (optional) hears when each stage's dense gradients are final (grad_hook.h).
  void forward_backward(Ctx& ctx, const BatchTensors& batch, uint64_t step_seed, double loss_scale,
                        GradHook* hook = nullptr);
  // f64 [1] on the model's device: the loss of the last forward_backward.
  const Tensor& loss_tensor() const { return buf_.loss; }
  // forward_backward, then waits for the loss and returns it.
  double train_step(Ctx& ctx, const BatchTensors& batch, uint64_t step_seed, double loss_scale);

  // Forward without dropout; returns the L2-normalised outputs [T, D] of the batch.
  Tensor encode(Ctx& ctx, const BatchTensors& batch);
  // The L2-normalised item table [V, D] (computed into model scratch) for evaluation.
  Tensor normalized_items(Ctx& ctx);

  DenseParams& dense() { return dense_; }
  // The item table the step uses: the model's own [V, D], or the sharded table's window.
  EmbeddingTable& items() { return *items_; }
  // Uses `window` (a sharded table's window of shape.window_rows rows) as the item table.
  void set_item_table(EmbeddingTable* window);
  const Config& config() const { return cfg_; }
  Device device() const { return device_; }
  DType act_dtype() const { return act_; }
  BatchTensors& batch_tensors() { return batch_; }
  const BatchCapacity& capacity() const { return cap_; }
  int64_t num_params() const;

 private:
  struct Buffers {
    std::vector<Tensor> xs;           // L+1 residual states [T, D]
    std::vector<HstuLayerActs> acts;  // per layer
    HstuLayerScratch scratch;
    Tensor emb;                       // [T, D] input before dropout (for its backward)
    Tensor out, out_norm;             // [T, D] final (LN'd) output and its L2-normalised form
    Tensor out_ln_mean, out_ln_rstd;  // [T] when final_layernorm
    Tensor norms;                     // [T] L2 norms
    Tensor d_x, d_out;                // [T, D] gradients
    Tensor loss;                      // f64 [1]
    Tensor items_norm, item_norms;    // [V, D], [V] for evaluation
    Tensor items_lowp;                // [rows, D] act dtype: the loss's copy (lowp_rows_)
  };
  void allocate(Arena& arena);
  void embed(Ctx& ctx, const BatchTensors& b, bool training, uint64_t seed);
  void run_layers(Ctx& ctx, const BatchTensors& b, bool training, uint64_t seed);

  Config cfg_;
  ModelShape shape_;
  Device device_;
  DType act_;
  BatchCapacity cap_;
  std::vector<HstuLayer> layers_;
  DenseParams dense_;
  EmbeddingTable own_items_;
  EmbeddingTable* items_ = &own_items_;
  int pos_table_ = -1, final_ln_w_ = -1, final_ln_b_ = -1;
  bool lowp_rows_ = false;  // lowp_loss_rows: the loss reads buf_.items_lowp
  std::unique_ptr<Arena> arena_;
  Buffers buf_;
  BatchTensors batch_;
};

}  // namespace hstu
