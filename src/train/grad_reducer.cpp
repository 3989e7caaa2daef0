// grad_reducer.cpp — bucketed, backward-overlapped gradient all-reduce (grad_reducer.h).
#include "train/grad_reducer.h"

#include <algorithm>

#include "core/cuda_check.h"
#include "core/phase_timer.h"

#if defined(HSTU_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace hstu {

GradReducer::GradReducer(dist::Comm& comm, DenseParams& dense, int64_t num_layers,
                         int64_t bucket_bytes)
    : comm_(comm), dense_(dense) {
  // Parameters in flat-buffer order, cut into buckets of at least bucket_bytes (the last one
  // smaller); a bucket's stage is its latest parameter's.
  std::vector<const ParamInfo*> params;
  for (const ParamInfo& p : dense.table()) params.push_back(&p);
  std::sort(params.begin(), params.end(),
            [](const ParamInfo* a, const ParamInfo* b) { return a->offset < b->offset; });
  const int64_t per_bucket = std::max<int64_t>(bucket_bytes / 4, 1);
  for (const ParamInfo* p : params) {
    const int stage = grad_stage(p->name, num_layers);
    if (buckets_.empty() || buckets_.back().end - buckets_.back().begin >= per_bucket)
      buckets_.push_back({p->offset, p->offset, 0});
    Bucket& b = buckets_.back();
    b.end = p->offset + p->numel;
    b.stage = std::max(b.stage, stage);
  }
  // The one issue order of every rank: by stage, the latest layers' buckets (the highest
  // offsets) first within a stage. Each stage issues the next run of it, and a rank without a
  // backward pass issues all of it at the end, so the collectives match between ranks.
  for (size_t i = 0; i < buckets_.size(); ++i) order_.push_back(i);
  std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
    return buckets_[a].stage != buckets_[b].stage ? buckets_[a].stage < buckets_[b].stage : a > b;
  });
#if defined(HSTU_WITH_CUDA)
  if (comm.device() == Device::kCUDA) {
    cudaStream_t s;
    HSTU_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_ = s;
    // One fork per stage (at most num_layers + 2) and the join.
    for (int64_t i = 0; i < num_layers + 3; ++i) {
      cudaEvent_t e;
      HSTU_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events_.push_back(e);
    }
  }
#endif
}

GradReducer::~GradReducer() {
#if defined(HSTU_WITH_CUDA)
  for (void* e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
}

void GradReducer::begin() {
  next_ = 0;
  next_event_ = 0;
}

void GradReducer::stage_done(Ctx& ctx, int stage) {
  if (next_ == order_.size() || buckets_[order_[next_]].stage > stage) return;
#if defined(HSTU_WITH_CUDA)
  if (stream_) {  // the communication stream waits for the gradients of this stage
    HSTU_CHECK(next_event_ + 1 < events_.size(), "GradReducer: more stages than planned");
    cudaEvent_t e = static_cast<cudaEvent_t>(events_[next_event_++]);
    HSTU_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(ctx.stream)));
    HSTU_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), e, 0));
  }
#endif
  void* const stream = stream_ ? stream_ : ctx.stream;
  for (; next_ < order_.size() && buckets_[order_[next_]].stage <= stage; ++next_) {
    const Bucket& b = buckets_[order_[next_]];
    // A profiled step's timeline shows each bucket on the communication stream's own track.
    if (ctx.phases) ctx.phases->span_begin("allreduce.bucket", stream);
    comm_.all_reduce(dense_.flat_grads().rows(b.begin, b.end), dist::ReduceOp::kSum, stream);
    if (ctx.phases) ctx.phases->span_end(stream);
  }
}

void GradReducer::finish(Ctx& ctx, const std::vector<std::pair<Tensor, dist::ReduceOp>>& extra) {
  stage_done(ctx, 1 << 30);  // whatever is left (all of it when this rank had no backward)
  phase(ctx, "comm.grad_allreduce");
#if defined(HSTU_WITH_CUDA)
  if (stream_) {  // the join: the optimiser waits for every bucket
    cudaEvent_t e = static_cast<cudaEvent_t>(events_.back());
    HSTU_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(stream_)));
    HSTU_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(ctx.stream), e, 0));
  }
#endif
  for (const auto& [t, op] : extra) comm_.all_reduce(t, op, ctx.stream);
}

}  // namespace hstu
