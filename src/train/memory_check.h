// memory_check.h — refusing, before anything is allocated, a config whose memory plan does not
// fit: the plan of model/memory_plan.h placed on this rank (dist/rank_plan.h) against the host's
// available memory (CPU runs: MemAvailable of /proc/meminfo) or the GPU's free memory (CUDA:
// cudaMemGetInfo). The error names the parts of the plan and the config fields that drive them,
// largest first, so the fix is obvious (a smaller batch, sequence length, width or table).
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"
#include "dist/comm.h"
#include "model/memory_plan.h"

namespace hstu {

// Memory a plan may use: bytes (-1 = not known: no check) and where the number comes from.
struct MemoryBudget {
  int64_t bytes = -1;
  std::string source;  // e.g. "MemAvailable in /proc/meminfo"
};

// The host's available memory (MemAvailable of `meminfo`, normally /proc/meminfo), or the
// current CUDA device's free memory.
MemoryBudget host_memory_budget(const std::string& meminfo = "/proc/meminfo");
MemoryBudget cuda_memory_budget();

// Throws, naming each part of the plan (dense parameters, each embedding table, activations)
// with its bytes and the fields behind it, when rank `rank` of `world` needs more than `budget`,
// or when its embedding tables exceed TrainerArgs.table_budget_mb (dist::table_budget_error).
void check_plan_fits(const Config& cfg, const ModelMemory& model, int world, int rank,
                     const MemoryBudget& budget);

// The tasks' check before model.plan(): the budget of `model.device` (host memory for the CPU).
void check_memory_plan(const Config& cfg, const ModelMemory& model, const dist::Comm& comm);

}  // namespace hstu
