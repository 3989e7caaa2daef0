// grad_reducer.h — the data-parallel all-reduce of the dense gradients, in buckets issued as the
// backward pass finishes them.
//
// The flat gradient buffer (params.h) is cut at parameter boundaries into buckets of about
// TrainerArgs.grad_bucket_mb. A bucket is final once the backward pass has passed the stage of
// its last-finished parameter (grad_hook.h); the model reports each stage and the reducer
// issues every bucket that became final, in the same order on every rank (one order per
// communicator). On CUDA the all-reduces run on a communication stream of their own, which
// waits for the compute stream's event at the stage and is joined back before the optimiser, so
// they overlap the rest of the backward pass (and can be captured in the step's CUDA graph); on
// CPU ranks (MPI) each bucket is reduced when issued. Gradients are fp32 and summed (each rank's
// loss is already scaled by 1 / the global token count).
#pragma once

#include <cstdint>
#include <vector>

#include "dist/comm.h"
#include "model/grad_hook.h"
#include "model/params.h"

namespace hstu {

class GradReducer final : public GradHook {
 public:
  // Buckets of `dense`'s gradients for a stack of `num_layers` layers.
  GradReducer(dist::Comm& comm, DenseParams& dense, int64_t num_layers, int64_t bucket_bytes);
  ~GradReducer() override;
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Before a step's backward pass: no bucket is issued yet.
  void begin();
  void stage_done(Ctx& ctx, int stage) override;
  // Issues what is left (a rank without a backward pass issues everything here, keeping the
  // collective order), then all-reduces `extra` (replicated tables' gradients / flags, the
  // loss) and makes ctx.stream wait for all of it.
  void finish(Ctx& ctx, const std::vector<std::pair<Tensor, dist::ReduceOp>>& extra);

  struct Bucket {
    int64_t begin = 0, end = 0;  // elements of the flat buffer
    int stage = 0;               // final after this backward stage
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  dist::Comm& comm_;
  DenseParams& dense_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> order_;  // issue order (indices into buckets_)
  size_t next_ = 0;            // order_[next_] is the next bucket to issue this step
  void* stream_ = nullptr;     // cudaStream_t of the all-reduces (CUDA)
  std::vector<void*> events_;  // cudaEvent_t per stage fork, and the join
  size_t next_event_ = 0;
};

}  // namespace hstu
