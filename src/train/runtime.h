// runtime.h — the execution context of a run: a CPU Ctx, or on CUDA the run's stream, the
// cuBLASLt state (plan cache + workspace) and the scratch arena sized once for the model's
// largest shapes.
#pragma once

#include <memory>
#include <string>

#include "config/config.h"
#include "core/arena.h"
#include "core/context.h"
#include "model/model.h"

namespace hstu {

// "auto" -> cuda when compiled in and a GPU is present, else cpu.
Device resolve_device(const std::string& name);

class Runtime {
 public:
  Runtime(Device device, const Config& cfg, const ModelShape& shape);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  Ctx& ctx() { return ctx_; }
  // Waits for queued device work (for timing).
  void synchronize();

 private:
  Ctx ctx_;
  std::unique_ptr<Arena> scratch_;
};

// Waits until every queued operation of `device` has finished (nothing to wait for on the CPU).
void synchronize_device(Device device);

}  // namespace hstu
