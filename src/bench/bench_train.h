// bench_train.h — `hstu bench train`: steady-state training-step throughput of a config on its
// dataset (synthetic by default): tokens/s, step time, achieved TFLOPS and MFU, peak memory.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"
#include "data/batch.h"

namespace hstu {

struct TrainBenchResult {
  double mean_step_ms = 0;    // pipelined steps (as the trainer runs them): wall time / steps
  double median_step_ms = 0;  // one step at a time, each waited for
  double tokens_per_s = 0, tflops = 0, mfu = 0;  // from the pipelined steps (this rank's)
  double job_tokens_per_s = 0;                   // every rank's tokens / the slowest rank's time
  int64_t steps = 0, tokens_per_step = 0;
  double peak_gib = 0;
};

// Under a launcher (hstu launch, torchrun, mpirun) every rank runs it as a data-parallel job
// (each rank its share of every global batch, as `hstu train` does) and rank 0 prints. Runs
// `warmup` untimed steps, `steps` pipelined steps (timed together) and `steps` steps one
// at a time (each timed alone), and prints a one-line summary; with `phases`, also the time per
// phase (core/phase_timer.h) of the one-at-a-time steps.
TrainBenchResult run_train_bench(const Config& cfg, int64_t warmup, int64_t steps,
                                 bool phases = false);

}  // namespace hstu
