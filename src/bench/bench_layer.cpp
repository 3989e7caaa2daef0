// bench_layer.cpp — the single-layer benchmark (see bench_layer.h).
#include "bench/bench_layer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>
#include <vector>

#include "config/config.h"
#include "core/arena.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/phase_timer.h"
#include "io/progress.h"
#include "model/batch_tensors.h"
#include "model/hstu_layer.h"
#include "model/params.h"
#include "ops/cast.h"
#include "train/runtime.h"

namespace hstu {
namespace {

struct Shape {
  int64_t b, l, d, h, dh;
};

// recsys-examples' "+fusion" layer latencies on an H100 (ms, B=32, D=1024, H=4, d=256).
double published_ms(const Shape& s) {
  static const std::map<int64_t, double> kMs = {
      {1024, 3.8854}, {2048, 9.1797}, {4096, 24.5428}, {8192, 74.7734}};
  if (s.b != 32 || s.d != 1024 || s.h != 4 || s.dh != 256) return 0;
  const auto it = kMs.find(s.l);
  return it == kMs.end() ? 0 : it->second;
}

// recsys-examples' FLOPs of one layer, forward + backward (causal, no contexts/targets).
double layer_flops(const Shape& s) {
  const double t = static_cast<double>(s.b * s.l), hd = static_cast<double>(s.h * s.dh);
  const double attn =
      static_cast<double>(s.b) * (4.0 * s.h * s.l * s.l * s.dh - 2.0 * s.h * s.l * s.l * s.dh);
  const double gemm = 2.0 * t * 4 * hd * s.d + 2.0 * t * hd * s.d;
  return 3.5 * attn + 3.0 * gemm;
}

Shape parse_shape(const std::string& text) {
  Shape s{};
  char c;
  std::istringstream is(text);
  HSTU_CHECK((is >> s.b >> c >> s.l >> c >> s.d >> c >> s.h >> c >> s.dh) && s.b > 0 && s.l > 0,
             "--shape expects B,L,D,H,d, got '", text, "'");
  return s;
}

}  // namespace

int run_layer_bench(const std::vector<std::string>& args) {
  std::vector<Shape> shapes;
  std::string device_name_arg = "auto";
  int reps = 10;
  bool recompute = false, phases = false, unfused = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      HSTU_CHECK(i + 1 < args.size(), "bench layer: ", a, " needs a value");
      return args[++i];
    };
    if (a == "--shape")
      shapes.push_back(parse_shape(value()));
    else if (a == "--device")
      device_name_arg = value();
    else if (a == "--reps")
      reps = std::stoi(value());
    else if (a == "--recompute")
      recompute = true;
    else if (a == "--phases")
      phases = true;
    else if (a == "--unfused")
      unfused = true;
    else
      HSTU_THROW("bench layer: unknown argument '", a, "'");
  }
  if (shapes.empty())
    for (int64_t l : {1024, 2048, 4096, 8192}) shapes.push_back({32, l, 1024, 4, 256});
  const Device device = resolve_device(device_name_arg);
  const DType act = device == Device::kCPU ? DType::kF32 : DType::kBF16;
  std::printf("HSTU layer fwd+bwd (%s, %s activations%s%s), median of %d after 2 warm-up\n",
              hstu::device_name(device), dtype_name(act), recompute ? ", recompute LN+SiLU" : "",
              unfused ? ", unfused element-wise passes" : "", reps);
  std::printf("%-4s %-6s %-5s %-2s %-4s | %9s %9s | %9s %7s\n", "B", "L", "D", "H", "d", "ms",
              "TFLOPS", "NV H100", "ratio");
  for (const Shape& s : shapes) {
    Config cfg;
    cfg.network.hidden_size = s.d;
    cfg.network.num_attention_heads = s.h;
    cfg.network.kv_channels = s.dh;
    cfg.network.num_position_buckets = s.l;
    cfg.dataset.max_history_seqlen = s.l;
    HstuLayerConfig lc;
    lc.hidden = s.d;
    lc.heads = s.h;
    lc.head_dim = s.dh;
    lc.alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.dh)));
    lc.scale = 1.0f / static_cast<float>(s.l);
    lc.dropout = 0.2f;
    lc.recompute_ln = lc.recompute_silu = recompute;
    lc.fused = !unfused;
    const int64_t t = s.b * s.l;
    ModelShape shape{2, s.b, t, 1};
    Runtime runtime(device, cfg, shape);
    Ctx& ctx = runtime.ctx();
    HstuLayer layer(lc, 0);
    DenseParams params;
    layer.register_params(params);
    params.finalize(device, 1, DType::kF32, act);

    Arena measure = Arena::measuring(device, "bench");
    auto plan = [&](Arena& a) {
      BatchCapacity cap{s.b, t, 1, s.l};
      BatchTensors bt = allocate_batch_tensors(a, cap);
      Tensor x = a.alloc(act, {t, s.d}), y = a.alloc(act, {t, s.d}), dx = a.alloc(act, {t, s.d});
      Tensor x32 = a.alloc(DType::kF32, {t, s.d});
      HstuLayerActs acts = layer.allocate_acts(a, t, act);
      HstuLayerScratch scr = layer.allocate_scratch(a, t, act);
      return std::make_tuple(bt, x, y, dx, x32, acts, scr, cap);
    };
    plan(measure);
    Arena arena(device, measure.peak(), "bench");
    auto [bt, x, y, dx, x32, acts, scr, cap] = plan(arena);
    SequenceBatch host;
    host.batch_size = static_cast<int32_t>(s.b);
    host.max_seqlen = static_cast<int32_t>(s.l);
    for (int64_t i = 0; i <= s.b; ++i) host.offsets.push_back(static_cast<int32_t>(i * s.l));
    host.item_ids.assign(static_cast<size_t>(t), 1);
    upload_batch(host, cap, bt);
    {  // random inputs, drawn on the host in f32 and cast to the activation dtype
      Arena h(Device::kCPU, static_cast<size_t>(t * s.d) * 4 + Arena::kAlign, "host");
      const Tensor hx = h.alloc(DType::kF32, {t, s.d});
      init_tensor(hx, Init::normal(1.0), 3, "x");
      copy_tensor(x32, hx);
      cast(ctx, x32, x);
    }
    std::vector<double> ms;
    // Phases (the layer's marks) of the timed repetitions only; its events cost ~nothing.
    PhaseTimer timer(device);
    // A shape can take minutes on a CPU: a bar on stderr when it is a terminal (so logs and the
    // table on stdout stay clean).
    std::unique_ptr<ProgressBar> bar;
    if (::isatty(STDERR_FILENO))
      bar = std::make_unique<ProgressBar>("L=" + std::to_string(s.l), reps + 2, std::cerr,
                                          ProgressOptions{.tty = true});
    for (int r = 0; r < reps + 2; ++r) {
      if (bar) bar->update(r, r * t, std::numeric_limits<double>::quiet_NaN());
      runtime.synchronize();
      const bool timed = phases && r >= 2;
      ctx.phases = timed ? &timer : nullptr;
      if (timed) timer.begin_step(ctx.stream);
      const auto t0 = std::chrono::steady_clock::now();
      layer.forward(ctx, params, bt, x, y, acts, scr, true, 11);
      phase(ctx, "copy_dy");
      copy_tensor(dx, y, ctx.stream);  // a stand-in upstream gradient of the right scale
      layer.backward(ctx, params, bt, x, acts, scr, dx, true, 11);
      if (timed) timer.end_step(ctx.stream);
      ctx.phases = nullptr;
      runtime.synchronize();
      if (r >= 2)
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
    }
    if (bar) bar->finish();
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double pub = published_ms(s);
    std::printf("%-4lld %-6lld %-5lld %-2lld %-4lld | %9.3f %9.1f | %9s %7s\n",
                static_cast<long long>(s.b), static_cast<long long>(s.l),
                static_cast<long long>(s.d), static_cast<long long>(s.h),
                static_cast<long long>(s.dh), med, layer_flops(s) / (med * 1e-3) / 1e12,
                pub > 0 ? (std::to_string(pub).substr(0, 6) + "ms").c_str() : "-",
                pub > 0 ? (std::to_string(pub / med).substr(0, 4) + "x").c_str() : "-");
    if (phases)
      std::printf("phases of the layer (median per rep; GPU time on CUDA):\n%s",
                  timer.report().c_str());
  }
  return 0;
}

}  // namespace hstu
