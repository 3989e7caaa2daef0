// step.h — one training step of the retrieval model, shared by the trainer and `hstu bench
// train`: upload the batch, draw negatives, forward + backward, then the dense and sparse
// optimisers (which also clear the gradients).
//
// The shaping decision: on CUDA a step never waits for the device. Nothing in it reads a device
// value on the host (the touched-row count stays on the device, the loss comes back through a
// page-locked slot read one step later), so the host runs up to one step ahead and the GPU never
// idles while the next batch is assembled and launched.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "config/config.h"
#include "core/context.h"
#include "core/host_staging.h"
#include "data/batch.h"
#include "model/model.h"

namespace hstu {

// The loss of one finished step (the mean over its supervised tokens; 0 when it had none).
struct StepLoss {
  int64_t step = 0;
  double loss = 0;
};

class TrainStep {
 public:
  TrainStep(const Config& cfg, int64_t num_items) : cfg_(cfg), num_items_(num_items) {}
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // Enqueues step `step` (0-based) on `batch` with learning rate `lr`. On the CPU it runs to the
  // end; on CUDA it returns once the work is queued: the batch goes up through page-locked
  // staging (two buffers in turn) and the loss comes back the same way, so the host prepares the
  // next batch while the device computes. `batch` may be reused as soon as this returns.
  void run(Ctx& ctx, HstuModel& model, const SequenceBatch& batch, int64_t step, double lr);
  // The losses of finished steps, oldest first, each once. wait_all = false leaves the newest
  // step in flight (it waits only for older ones, which are normally done); true waits for all.
  std::vector<StepLoss> drain(bool wait_all);

 private:
  struct Pending {
    int64_t step;
    int slot;  // loss staging slot; -1: no supervised token (loss 0)
  };
  void finish_oldest();

  const Config& cfg_;
  int64_t num_items_;
  std::vector<int32_t> negs_;
  std::unique_ptr<HostStaging> upload_[2];  // batch staging, used in turn
  std::unique_ptr<HostStaging> loss_[2];    // f64 loss readback slots, used in turn
  std::deque<Pending> pending_;
  std::vector<StepLoss> ready_;
  int64_t runs_ = 0;
};

// Applies the dense optimiser (one call per decay group of the flat buffer) and each embedding
// table's sparse optimiser for 1-based step `step`, then clears all gradients. Shared by the
// retrieval and ranking models.
void optimizer_step(Ctx& ctx, DenseParams& dense, std::span<EmbeddingTable* const> tables,
                    const OptimizerArgs& o, double lr, int64_t step);

}  // namespace hstu
