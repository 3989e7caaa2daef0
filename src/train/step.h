// step.h — one training step of the retrieval model, shared by the trainer and `hstu bench
// train`: upload the batch, draw negatives, forward + backward, then the dense and sparse
// optimisers (which also clear the gradients); and the ranking model's step (upload, forward +
// backward, optimisers).
//
// The shaping decision: on CUDA a step never waits for the device. Nothing in it reads a device
// value on the host (the touched-row count stays on the device, the clipping norm is applied
// where the update runs, the loss comes back through a page-locked slot read one step later), so
// the host runs up to one step ahead and the GPU never idles while the next batch is assembled
// and launched. StepStaging holds what both steps need for that. Between the batch upload and
// the loss read-back, the step's device work is one CUDA graph (core/step_graph.h).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "config/config.h"
#include "core/context.h"
#include "core/host_staging.h"
#include "core/step_graph.h"
#include "data/batch.h"
#include "model/model.h"
#include "model/ranking_model.h"
#include "train/data_parallel.h"
#include "train/grad_reducer.h"
#include "train/optimizer_step.h"

namespace hstu {

// The loss normalisers of a batch: its supervised tokens (retrieval: non-zero targets) and its
// candidates (ranking).
int64_t supervised_tokens(const SequenceBatch& b);
int64_t candidate_count(const SequenceBatch& b);

// The loss of one finished step (retrieval: the mean over its supervised tokens; ranking: over
// its candidates; 0 when it had none), and the squared norm of its dense gradients (after the
// data-parallel all-reduce: the same on every rank), read back together (DenseParams::health).
struct StepLoss {
  int64_t step = 0;
  double loss = 0;
  double grad_sumsq = 0;
};

// The page-locked buffers of steps that do not wait for the device, used in turn: two batch
// upload buffers (a step refills the one whose copy is the older) and two read-back slots of a
// step's health (f64 [2]: gradient sum of squares, loss), with the steps whose values are still
// on their way back. On the CPU there are none: a batch is copied directly and a step's values
// read when they are recorded.
class StepStaging {
 public:
  StepStaging() = default;
  ~StepStaging();
  StepStaging(const StepStaging&) = delete;
  StepStaging& operator=(const StepStaging&) = delete;

  // The buffer (at least `bytes`) to upload the next step's batch through; nullptr on the CPU.
  // The first call allocates all the buffers.
  HostStaging* next_upload(const Ctx& ctx, size_t bytes);
  // Queues the read-back of step `step`'s health once the step (which took its upload buffer
  // first) is enqueued: `health` is f64 [2] on ctx's device (DenseParams::health: gradient sum
  // of squares, loss). One 16-byte copy, on the step's stream: no wait.
  void record(Ctx& ctx, int64_t step, const Tensor& health);
  // The losses of finished steps, oldest first, each once. wait_all = false leaves the newest
  // step in flight (it waits only for older ones, which are normally done); true waits for all.
  std::vector<StepLoss> drain(bool wait_all);

 private:
  struct Pending {
    int64_t step;
    int slot;  // read-back staging slot
  };
  void finish_oldest();

  std::unique_ptr<HostStaging> upload_[2];  // batch staging, used in turn
  std::unique_ptr<HostStaging> loss_[2];    // f64 [2] health read-back slots, used in turn
  std::deque<Pending> pending_;
  std::vector<StepLoss> ready_;
  int64_t uploads_ = 0, losses_ = 0;
};

class TrainStep {
 public:
  TrainStep(const Config& cfg, int64_t num_items)
      : cfg_(cfg), num_items_(num_items), graph_(cfg.trainer.cuda_graph) {}
  ~TrainStep();  // waits for queued copies from the pool's staging buffers
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // Enqueues step `step` (0-based) on `batch` with learning rate `lr`. On the CPU it runs to the
  // end; on CUDA it returns once the work is queued: the batch goes up through page-locked
  // staging (two buffers in turn) and the loss comes back the same way, so the host prepares the
  // next batch while the device computes. `batch` may be reused as soon as this returns.
  // `share`: this rank's part of a data-parallel step (token offset, the global batch's loss
  // normaliser; the gradients and the loss are summed over ranks before the optimisers).
  void run(Ctx& ctx, HstuModel& model, const SequenceBatch& batch, int64_t step, double lr,
           const StepShare& share = {});
  // The losses of finished steps (StepStaging::drain).
  std::vector<StepLoss> drain(bool wait_all) { return staging_.drain(wait_all); }
  const StepGraph& graph() const { return graph_; }

 private:
  // The step with an item table reached through a window (item_window.h): negatives drawn on the
  // host, the batch's ids deduplicated and their rows fetched into the window, the unchanged
  // model on the window, then the window's gradients applied to the table. The reference of the
  // device path below (and the path of CPU runs, several ranks of a dynamic table, and
  // HSTU_HOST_WINDOW=1).
  void run_windowed(Ctx& ctx, HstuModel& model, const SequenceBatch& batch, int64_t step, double lr,
                    const StepShare& share);
  // The same on the GPU when the window takes device ids (ItemWindow::on_device: a sharded
  // table, or a dynamic table on one rank): the raw batch uploaded, negatives drawn on the
  // device, the ids deduplicated and remapped there; when device_only (asked every step: a
  // dynamic table that may grow is not) the fetch, the model and both optimisers are one CUDA
  // graph, else the fetch and the table update run before and after the graph.
  void run_windowed_device(Ctx& ctx, HstuModel& model, const SequenceBatch& batch, int64_t step,
                           double lr, const StepShare& share);
  bool window_on_device(const Ctx& ctx, const StepShare& share) const;
  // Uniform negatives drawn from the ids the windowed item table holds (raw-id dynamic table,
  // ItemWindow::table_negatives; train/table_negatives.h) instead of the whole catalogue.
  bool table_negatives(const StepShare& share) const;
  // A data-parallel step with in-batch negatives on CUDA: the global batch's targets uploaded
  // (page-locked staging, outside the step's graph) as the pool device_negatives draws from,
  // the CPU sampler's pool; otherwise (pool_used_ = -1) the pool is the batch's own targets.
  void upload_pool(Ctx& ctx, const HstuModel& model, const StepShare& share);
  // The windowed steps' model pass: forward and backward on the uploaded batch (loss scaled by
  // 1 / global_sup), then the dense gradients and the loss summed over the ranks; the window's
  // gradient rows go back to their owners separately (ItemWindow::update).
  void windowed_model_pass(Ctx& ctx, HstuModel& model, BatchTensors& bt, int64_t step, int64_t sup,
                           int64_t global_sup, const StepShare& share);
  // negs[T, R] (a view of bt's negatives) drawn on the device with the CPU samplers' formula.
  void device_negatives(Ctx& ctx, const BatchTensors& bt, const Tensor& negs, int64_t step,
                        const StepShare& share);

  const Config& cfg_;
  int64_t num_items_;
  std::vector<int32_t> negs_;
  SequenceBatch work_;                    // run_windowed: the batch with window indices for ids
  std::unique_ptr<GradReducer> reducer_;  // data-parallel runs
  StepStaging staging_;
  StepGraph graph_;
  // upload_pool: i32 [W x max_tokens] on the device, two staging buffers used in turn.
  std::unique_ptr<Arena> pool_arena_;
  Tensor pool_;
  std::unique_ptr<HostStaging> pool_up_[2];
  int64_t pool_uploads_ = 0, pool_used_ = -1;
};

// The ranking model's training step, enqueued like TrainStep's: the batch goes up in one copy
// through page-locked staging, the loss (scaled by 1 / candidates) comes back a step later. With
// share.items (a row-sharded item table) the batch's item ids are fetched into the window first
// and the window's gradients applied to the table after the step's graph.
class RankingTrainStep {
 public:
  explicit RankingTrainStep(const Config& cfg) : cfg_(cfg), graph_(cfg.trainer.cuda_graph) {}

  void run(Ctx& ctx, RankingModel& model, const SequenceBatch& batch, int64_t step, double lr,
           const StepShare& share = {});
  std::vector<StepLoss> drain(bool wait_all) { return staging_.drain(wait_all); }
  const StepGraph& graph() const { return graph_; }

 private:
  const Config& cfg_;
  SequenceBatch work_;  // a windowed item table: the batch with window rows for item ids
  StepStaging staging_;
  std::unique_ptr<GradReducer> reducer_;  // data-parallel runs
  StepGraph graph_;
};

}  // namespace hstu
