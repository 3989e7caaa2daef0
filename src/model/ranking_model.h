// ranking_model.h — the HSTU generative RANKING model (recsys-examples' ranking_gr, SPEC §2 and
// the ranking notes §2.1–2.6): per-feature embeddings (item, action, contextual) plus positions,
// the interleaved token sequence [ctx_1..ctx_C | item_0, action_0, ...], input dropout, the HSTU
// layer stack with contextual prefix and candidate targets in the attention, the candidates'
// item rows, (optional final LayerNorm,) L2 normalisation, an MLP head, and the loss:
//   multi-task BCE on label bitmasks   when num_tasks > 1 or prediction_head_arch.back() == 1
//                                      (bit k -> task k; a single task reads bit 0)
//   cross-entropy over K classes       when num_tasks == 1 and prediction_head_arch.back() = K > 1;
//                                      the class is the action value, or action - 1 for
//                                      MovieLens ("ml-*", ratings 1..5 -> classes 0..4)
// scaled by 1 / (candidates of the batch). Forward and backward are explicit; like HstuModel,
// plan() measures the peak of the allocation sequence on a measuring arena and allocates exactly
// that, so the step loop never allocates.
//
// The shaping decisions:
//  - the contextual tables are stored as ONE table with row offsets per feature (feature c's
//    value v is row ctx_row_offset[c] + v). Rows are disjoint, initialised with the same
//    distribution and updated by row-wise sparse optimisers, so this is the same model as one
//    table per feature, with one lookup instead of C strided ones;
//  - the attention divisor N is contextual + k * (max_history_seqlen + max_num_candidates)
//    (k = 2 with action tokens, else 1) unless NetworkArgs.scaling_seqlen > 0;
//  - relative attention bias (Meta's layer) is refused: the ranking token sequence has no
//    per-token timestamps in this model yet;
//  - on CUDA it runs like HstuModel: bf16 (or fp16) activations, fp32 master weights whose
//    compute copy (the activation dtype) feeds the GEMMs, fp32 embedding tables; the batch
//    fields (offsets, ids, positions, labels) go up packed into one device block in one copy
//    (asynchronous through the caller's page-locked staging), the loss stays on the device until
//    the caller reads it, and predict() hands out f32 logits. The CPU takes f32 (training) or f64
//    (gradient checks).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/arena.h"
#include "core/context.h"
#include "core/host_staging.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "model/batch_tensors.h"
#include "model/grad_hook.h"
#include "model/hstu_layer.h"
#include "model/model.h"
#include "model/params.h"
#include "ops/activation.h"
#include "ops/jagged.h"

namespace hstu {

struct RankingShape {
  int64_t num_items = 0;                          // item table rows (incl. padding 0)
  int64_t num_actions = 0;                        // action table rows (0 = no action tokens)
  std::vector<int32_t> contextual_cardinalities;  // [C]
  int64_t max_batch = 0;           // samples per batch (train or eval, whichever is larger)
  int64_t max_events = 0;          // events (items) per batch
  int64_t max_candidates = 0;      // candidates per batch
  bool movielens_ratings = false;  // cross-entropy labels are action - 1
  // > 0: the item table is a row-sharded table's per-step window of this many rows, given with
  // set_item_table (batches then hold window rows as item ids); 0: the model owns its table.
  int64_t item_window_rows = 0;
};

// The shape of the ranking model of `cfg` over `ds`, planned for batches of
// max(train_batch_size, eval_batch_size) samples.
RankingShape ranking_shape(const Config& cfg, const SequenceDataset& ds);

class RankingModel {
 public:
  // act_dtype: f32 / f64 on the CPU, bf16 / f16 on CUDA (the attention kernels' inputs).
  RankingModel(const Config& cfg, const RankingShape& shape, Device device, DType act_dtype);

  void plan(uint64_t seed);
  std::string describe_plan() const;
  // What the run's CUDA scratch (train/runtime.h: Runtime) must cover for this model: the
  // ranking token count as max_tokens, the largest embedding table as num_items, no sampled
  // softmax and no retrieval evaluation (max_batch = 0).
  ModelShape runtime_shape() const;

  // Uploads a ranking batch (make_ranking_batch output) into the model's batch block: the
  // fields are packed into host memory laid out as the block and copied in one go. Without
  // `staging` the copy is synchronous (on the CPU the fields are packed into the block itself);
  // with it (at least upload_staging_bytes()) they are packed there and copied asynchronously on
  // `stream`: the call waits only for the staging buffer's previous copy.
  void upload(const SequenceBatch& batch, HostStaging* staging = nullptr, void* stream = nullptr);
  size_t upload_staging_bytes() const;
  // Forward + backward of the loss on the uploaded batch; gradients accumulate into the dense
  // and embedding gradient buffers; the scaled loss (loss_scale * sum) is left in loss_tensor()
  // (on the device: enqueueing the step does not wait for it).
  // `hook` (optional) hears when each stage's dense gradients are final (grad_hook.h).
  void forward_backward(Ctx& ctx, uint64_t step_seed, double loss_scale, GradHook* hook = nullptr);
  // f64 [1] on the model's device: the loss of the last forward_backward.
  const Tensor& loss_tensor() const { return buf_.loss; }
  // forward_backward, then waits for the loss and returns it.
  double train_step(Ctx& ctx, uint64_t step_seed, double loss_scale);
  // Forward without dropout; returns the logits [N, K] of the uploaded batch's candidates: a
  // contiguous view on the model's device, f32 (f64 for an f64 model) whatever the activation
  // dtype, valid until the next forward — copy it to the host with copy_bytes.
  Tensor predict(Ctx& ctx);
  // The labels of the uploaded batch as the loss reads them (bitmask or class), host copy.
  const std::vector<int32_t>& labels() const { return labels_; }

  bool binary() const { return binary_; }  // BCE (tasks = K) vs cross-entropy (K classes)
  int64_t num_outputs() const { return cfg_.ranking.prediction_head_arch.back(); }
  int64_t num_candidates() const { return num_cand_; }
  int64_t num_tokens() const { return batch_.num_tokens; }
  // Most tokens of one batch (the buffers' capacity).
  int64_t token_capacity() const { return max_tokens_; }
  // Where the next batches' tokens start in the stream dropout masks are keyed by (a
  // data-parallel rank's range; 0 otherwise).
  void set_token_offset(int64_t offset) { batch_.token_offset = offset; }
  // [B+1] row offsets of the uploaded batch's token sequences (host copy).
  const std::vector<int32_t>& token_offsets() const { return layout_.token_offsets; }

  DenseParams& dense() { return dense_; }
  // item, action (when present), contextual (when present).
  std::vector<EmbeddingTable*> tables();
  // Uses `window` (a row-sharded table's window of shape.item_window_rows rows) as the item
  // table.
  void set_item_table(EmbeddingTable* window);
  int64_t num_params() const;

 private:
  struct Buffers {
    Tensor upload;  // i32: the uploaded batch's fields, packed (upload_capacity() values)
    // event-level inputs: views of `upload`, set by each upload
    Tensor ev_offsets, item_ids, action_ids, item_pos, action_pos, ctx_ids, ctx_pos;
    Tensor cand_offsets, labels;
    Tensor item_emb, action_emb, ctx_emb;  // per-feature embeddings (+ positions)
    Tensor emb;                            // [T', D] interleaved tokens before dropout
    std::vector<Tensor> xs;
    std::vector<HstuLayerActs> acts;
    HstuLayerScratch scratch;
    Tensor d_x;                                                                 // [T', D]
    Tensor cand, cand_ln, ln_mean, ln_rstd, cand_norm, norms, d_cand, d_cand2;  // [N, D] / [N]
    std::vector<Tensor> head_h, head_a, head_d;  // per head layer [N, w]: pre-activation,
                                                 // activation, gradient
    Tensor d_logits;                             // [N, K] in the activation dtype
    Tensor logits;  // [N, K] f32 copy of the logits for predict() (16-bit activations only)
    Tensor loss;    // f64 [1] on the model's device
  };
  void allocate(Arena& arena);
  int64_t upload_capacity() const;
  void forward(Ctx& ctx, bool training, uint64_t seed);
  Activation head_act() const;

  Config cfg_;
  RankingShape shape_;
  Device device_;
  DType act_;
  int32_t num_ctx_ = 0;
  bool interleave_ = false, binary_ = true;
  // DatasetArgs.max_num_candidates = 0 (recsys-examples: every item scored): a sample's
  // num_candidates events are all its events, scored and labelled, but none is an attention
  // target and positions are not clamped (the layout of zero candidates).
  bool score_all_ = false;
  std::vector<int32_t> no_targets_;  // [B] zeros: the layout's candidate counts in score_all_
  int64_t max_tokens_ = 0;
  std::vector<HstuLayer> layers_;
  DenseParams dense_;
  EmbeddingTable items_, actions_, contextual_;
  EmbeddingTable* item_table_ = &items_;  // items_, or a sharded table's window
  std::vector<int32_t> ctx_row_offset_;
  int pos_table_ = -1, final_ln_w_ = -1, final_ln_b_ = -1;
  std::vector<int> head_w_, head_b_;
  std::unique_ptr<Arena> arena_;
  Buffers buf_;
  BatchTensors batch_;  // offsets, num_contexts, num_targets: views of buf_.upload
  // host staging of the uploaded batch
  RankingLayout layout_;
  std::vector<int32_t> labels_, ctx_ids_h_;
  std::vector<int32_t> upload_host_;  // the packed fields of a synchronous upload to CUDA
  int64_t num_events_ = 0, num_cand_ = 0;
};

}  // namespace hstu
