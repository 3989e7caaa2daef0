// bench_train.cpp — the training-step benchmark (see bench_train.h).
#include "bench/bench_train.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/device_info.h"
#include "core/phase_timer.h"
#include "data/batcher.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "model/flops.h"
#include "model/model.h"
#include "train/runtime.h"
#include "train/step.h"

namespace hstu {

TrainBenchResult run_train_bench(const Config& cfg, int64_t warmup, int64_t steps, bool phases) {
  const SequenceDataset ds = open_dataset(cfg);
  const DataSplits splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
  Batcher batcher(ds, splits.train, cfg.trainer.train_batch_size, true,
                  static_cast<uint64_t>(cfg.trainer.seed));
  const Device device = resolve_device(cfg.trainer.device);
  ModelShape shape;
  shape.num_items = ds.num_items;
  shape.max_batch = cfg.trainer.train_batch_size;
  shape.max_tokens = shape.max_batch * cfg.dataset.max_history_seqlen;
  shape.num_negatives = cfg.retrieval.num_negatives;
  HstuModel model(cfg, shape, device, device == Device::kCPU ? DType::kF32 : DType::kBF16);
  model.plan(static_cast<uint64_t>(cfg.trainer.seed));
  Runtime runtime(device, cfg, shape);
  Ctx& ctx = runtime.ctx();
  TrainStep stepper(cfg, ds.num_items);
  SequenceBatch batch;
  using Clock = std::chrono::steady_clock;
  const auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  int64_t step = 0;
  for (; step < warmup; ++step) {
    batcher.next(batch);
    stepper.run(ctx, model, batch, step, cfg.optimizer.learning_rate);
    stepper.drain(false);
  }
  stepper.drain(true);
  runtime.synchronize();
  // Pipelined, as the trainer runs: the host prepares batch n + 1 while the device runs step n.
  double flops = 0, tokens = 0;
  double host_batch_ms = 0, host_run_ms = 0, host_drain_ms = 0;  // where the host thread waits
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < steps; ++i, ++step) {
    auto t = Clock::now();
    batcher.next(batch);
    host_batch_ms += ms_since(t);
    t = Clock::now();
    stepper.run(ctx, model, batch, step, cfg.optimizer.learning_rate);
    host_run_ms += ms_since(t);
    t = Clock::now();
    stepper.drain(false);
    host_drain_ms += ms_since(t);
    flops += retrieval_step_flops(cfg, batch);
    tokens += batch.num_tokens();
  }
  stepper.drain(true);
  runtime.synchronize();
  const double total_ms = ms_since(t0);
  // One step at a time (each waited for), optionally cut into phases.
  std::vector<double> ms;
  PhaseTimer timer(device);
  for (int64_t i = 0; i < steps; ++i, ++step) {
    batcher.next(batch);
    ctx.phases = phases ? &timer : nullptr;
    const auto t1 = Clock::now();
    if (phases) timer.begin_step(ctx.stream);
    stepper.run(ctx, model, batch, step, cfg.optimizer.learning_rate);
    if (phases) timer.end_step(ctx.stream);
    stepper.drain(true);
    runtime.synchronize();
    ms.push_back(ms_since(t1));
  }
  ctx.phases = nullptr;
  TrainBenchResult r;
  r.steps = steps;
  std::sort(ms.begin(), ms.end());
  r.median_step_ms = ms.empty() ? 0 : ms[ms.size() / 2];
  r.mean_step_ms = steps > 0 ? total_ms / static_cast<double>(steps) : 0;
  r.tokens_per_s = tokens / (total_ms / 1e3);
  r.tokens_per_step = steps > 0 ? static_cast<int64_t>(tokens / static_cast<double>(steps)) : 0;
  r.tflops = flops / (total_ms / 1e3) / 1e12;
  std::string extra;
  if (device == Device::kCUDA) {
    const double peak = cuda_bf16_peak_tflops();
    r.mfu = peak > 0 ? r.tflops / peak : 0;
    r.peak_gib = static_cast<double>(cuda_memory_used_bytes()) / (1024.0 * 1024.0 * 1024.0);
    char s[128];
    std::snprintf(s, sizeof s, ", MFU %.1f%% of %.0f, GPU memory in use %.2f GiB", 100 * r.mfu,
                  peak, r.peak_gib);
    extra = s;
  }
  std::printf(
      "bench train (%s): %lld steps, %.2f ms/step pipelined (%.2f ms median one step at a "
      "time), %.0f tokens/s, %lld tokens/step, %.3f TFLOPS achieved%s\n",
      device_name(device), static_cast<long long>(steps), r.mean_step_ms, r.median_step_ms,
      r.tokens_per_s, static_cast<long long>(r.tokens_per_step), r.tflops, extra.c_str());
  if (steps > 0 && device != Device::kCPU) {
    const double n = static_cast<double>(steps);
    std::printf(
        "host thread per pipelined step: %.2f ms building the batch, %.2f ms in the step call "
        "(enqueue; waits for a free staging buffer), %.2f ms reading the lagged loss\n",
        host_batch_ms / n, host_run_ms / n, host_drain_ms / n);
    std::printf("%s\n", stepper.graph().describe().c_str());
  }
  if (phases)
    std::printf("step phases (one step at a time, median per step):\n%s", timer.report().c_str());
  return r;
}

}  // namespace hstu
