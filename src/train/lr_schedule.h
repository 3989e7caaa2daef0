// lr_schedule.h — learning-rate schedules: constant, warmup_linear, warmup_cosine.
//
// Steps are 0-based optimiser steps. Warmup is linear from base/W at step 0 to base at step
// W - 1 (the first update is never wasted on lr 0) and applies to every kind, "constant"
// included; decay then runs from base at step W to 0 at step `total_steps`, and stays 0 after.
#pragma once

#include <cstdint>
#include <string>

namespace hstu {

enum class LrScheduleKind { kConstant, kWarmupLinear, kWarmupCosine };

// "constant" | "warmup_linear" | "warmup_cosine"; anything else is an error naming the choices.
LrScheduleKind parse_lr_schedule(const std::string& name);

class LrSchedule {
 public:
  // total_steps is needed by the decaying kinds only (it must then exceed warmup_steps).
  LrSchedule(LrScheduleKind kind, double base_lr, int64_t warmup_steps, int64_t total_steps = 0);
  // The same with the kind by name (OptimizerArgs.lr_schedule).
  LrSchedule(const std::string& kind, double base_lr, int64_t warmup_steps, int64_t total_steps = 0)
      : LrSchedule(parse_lr_schedule(kind), base_lr, warmup_steps, total_steps) {}

  double lr_at(int64_t step) const;

 private:
  LrScheduleKind kind_;
  double base_;
  int64_t warmup_, total_;
};

}  // namespace hstu
