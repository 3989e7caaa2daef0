// bench_train.cpp — the training-step benchmark (see bench_train.h).
#include "bench/bench_train.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/device_info.h"
#include "data/batcher.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "model/model.h"
#include "train/runtime.h"
#include "train/step.h"

namespace hstu {

double train_step_flops(const Config& cfg, const SequenceBatch& b) {
  const NetworkArgs& n = cfg.network;
  const double d = static_cast<double>(n.hidden_size);
  const double hd = static_cast<double>(n.num_attention_heads * n.kv_channels);
  const double t = b.num_tokens();
  double attn = 0;  // forward: QK^T and PV, causal half
  for (int32_t s = 0; s < b.batch_size; ++s) {
    const double l = b.offsets[static_cast<size_t>(s) + 1] - b.offsets[static_cast<size_t>(s)];
    attn += 2.0 * l * l * 2.0 * hd / 2.0;
  }
  const double gemm_fwd = 2.0 * t * d * 4.0 * hd + 2.0 * t * hd * d;
  const double layer = 3.0 * gemm_fwd + 3.5 * attn;
  const double head = 3.0 * 2.0 * t * static_cast<double>(cfg.retrieval.num_negatives + 1) * d;
  return static_cast<double>(n.num_layers) * layer + head;
}

TrainBenchResult run_train_bench(const Config& cfg, int64_t warmup, int64_t steps) {
  const SequenceDataset ds = open_dataset(cfg);
  const DataSplits splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
  Batcher batcher(ds, splits.train, cfg.trainer.train_batch_size, true, static_cast<uint64_t>(cfg.trainer.seed));
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
  std::vector<double> ms;
  double flops = 0, tokens = 0;
  for (int64_t i = 0; i < warmup + steps; ++i) {
    batcher.next(batch);
    const auto t0 = std::chrono::steady_clock::now();
    stepper.run(ctx, model, batch, i, cfg.optimizer.learning_rate);
    runtime.synchronize();
    const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) {
      ms.push_back(dt);
      flops += train_step_flops(cfg, batch);
      tokens += batch.num_tokens();
    }
  }
  TrainBenchResult r;
  r.steps = steps;
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  r.median_step_ms = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  double total_ms = 0;
  for (double x : ms) total_ms += x;
  r.tokens_per_s = tokens / (total_ms / 1e3);
  r.tokens_per_step = steps > 0 ? static_cast<int64_t>(tokens / static_cast<double>(steps)) : 0;
  r.tflops = flops / (total_ms / 1e3) / 1e12;
  std::string extra;
  if (device == Device::kCUDA) {
    const double peak = cuda_bf16_peak_tflops();
    r.mfu = peak > 0 ? r.tflops / peak : 0;
    r.peak_gib = static_cast<double>(cuda_memory_used_bytes()) / (1024.0 * 1024.0 * 1024.0);
    char s[128];
    std::snprintf(s, sizeof s, ", MFU %.1f%% of %.0f, GPU memory in use %.2f GiB", 100 * r.mfu, peak,
                  r.peak_gib);
    extra = s;
  }
  std::printf("bench train (%s): %lld steps, median step %.2f ms, %.0f tokens/s, %lld tokens/step, "
              "%.3f TFLOPS achieved%s\n",
              device_name(device), static_cast<long long>(steps), r.median_step_ms, r.tokens_per_s,
              static_cast<long long>(r.tokens_per_step), r.tflops, extra.c_str());
  return r;
}

}  // namespace hstu
