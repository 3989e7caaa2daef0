// bench_train.cpp — the training-step benchmark (see bench_train.h).
#include "bench/bench_train.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "config/schema.h"
#include "core/device_info.h"
#include "core/phase_timer.h"
#include "data/batcher.h"
#include "dist/bootstrap.h"
#include "dist/launch_env.h"
#include "dist/open_comm.h"
#include "train/runtime.h"
#include "train/task.h"

namespace hstu {

TrainBenchResult run_train_bench(const Config& cfg, int64_t warmup, int64_t steps, bool phases) {
  // The job's ranks from the launcher's environment (one rank when started alone), and the
  // trainer's own task: each rank trains on its share of every global batch.
  const Device device = resolve_device(cfg.trainer.device);
  dist::OpenCommOptions o;
  o.job_hash = dist::job_hash(to_gin(cfg));
  const std::unique_ptr<dist::Comm> comm = dist::open_comm(dist::read_world_env(), device, o);
  const std::unique_ptr<Task> task = make_task(cfg, *comm, nullptr);
  Ctx& ctx = task->ctx();
  Batcher& batcher = task->batcher();
  const auto sync = [&] {
    task->drain(true);
    synchronize_device(device);
  };
  SequenceBatch batch;
  using Clock = std::chrono::steady_clock;
  const auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  const double lr = cfg.optimizer.learning_rate;
  int64_t step = 0;
  for (; step < warmup; ++step) {
    batcher.next(batch);
    task->step(batch, step, lr);
    task->drain(false);
  }
  sync();
  comm->barrier();
  // Pipelined, as the trainer runs: the host prepares batch n + 1 while the device runs step n.
  double flops = 0, tokens = 0;
  double host_batch_ms = 0, host_run_ms = 0, host_drain_ms = 0;  // where the host thread waits
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < steps; ++i, ++step) {
    auto t = Clock::now();
    batcher.next(batch);
    host_batch_ms += ms_since(t);
    t = Clock::now();
    tokens += static_cast<double>(task->step(batch, step, lr));
    host_run_ms += ms_since(t);
    flops += task->step_flops(batch);
    t = Clock::now();
    task->drain(false);
    host_drain_ms += ms_since(t);
  }
  sync();
  const double total_ms = ms_since(t0);
  // One step at a time (each waited for), optionally cut into phases.
  std::vector<double> ms;
  PhaseTimer timer(device);
  for (int64_t i = 0; i < steps; ++i, ++step) {
    batcher.next(batch);
    ctx.phases = phases ? &timer : nullptr;
    const auto t1 = Clock::now();
    if (phases) timer.begin_step(ctx.stream);
    task->step(batch, step, lr);
    if (phases) timer.end_step(ctx.stream);
    sync();
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
  // The job's throughput: every rank's tokens over the slowest rank's time.
  const double job_tokens = comm->all_reduce_host(tokens, dist::ReduceOp::kSum);
  const double job_ms = comm->all_reduce_host(total_ms, dist::ReduceOp::kMax);
  r.job_tokens_per_s = job_tokens / (job_ms / 1e3);
  if (!comm->is_root()) return r;
  std::printf(
      "bench train (%s): %lld steps, %.2f ms/step pipelined (%.2f ms median one step at a "
      "time), %.0f tokens/s, %lld tokens/step, %.3f TFLOPS achieved%s\n",
      device_name(device), static_cast<long long>(steps), r.mean_step_ms, r.median_step_ms,
      r.tokens_per_s, static_cast<long long>(r.tokens_per_step), r.tflops, extra.c_str());
  if (comm->size() > 1)
    std::printf("%d ranks (%s): %.0f tokens/s for the job (rank 0 above: its own share)\n",
                comm->size(), comm->backend(), r.job_tokens_per_s);
  if (steps > 0 && device != Device::kCPU) {
    const double n = static_cast<double>(steps);
    std::printf(
        "host thread per pipelined step: %.2f ms building the batch, %.2f ms in the step call "
        "(enqueue; waits for a free staging buffer), %.2f ms reading the lagged loss\n",
        host_batch_ms / n, host_run_ms / n, host_drain_ms / n);
    std::printf("%s\n", task->graph().describe().c_str());
  }
  if (phases)
    std::printf("step phases (one step at a time, median per step):\n%s", timer.report().c_str());
  return r;
}

}  // namespace hstu
