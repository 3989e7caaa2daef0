// lr_schedule.cpp — learning rate as a function of the step.
#include "train/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace hstu {

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrScheduleKind::kConstant;
  if (name == "warmup_linear") return LrScheduleKind::kWarmupLinear;
  if (name == "warmup_cosine") return LrScheduleKind::kWarmupCosine;
  HSTU_THROW("unknown lr_schedule \"", name, "\" (constant | warmup_linear | warmup_cosine)");
}

LrSchedule::LrSchedule(LrScheduleKind kind, double base_lr, int64_t warmup_steps,
                       int64_t total_steps)
    : kind_(kind), base_(base_lr), warmup_(warmup_steps), total_(total_steps) {
  HSTU_CHECK(std::isfinite(base_lr) && base_lr >= 0, "learning rate ", base_lr, " must be >= 0");
  HSTU_CHECK(warmup_steps >= 0, "warmup_steps ", warmup_steps, " must be >= 0");
  if (kind != LrScheduleKind::kConstant) {
    HSTU_CHECK(total_steps > warmup_steps, "a decaying lr_schedule needs total steps (",
               total_steps, ") > warmup_steps (", warmup_steps, ")");
  }
}

double LrSchedule::lr_at(int64_t step) const {
  HSTU_CHECK(step >= 0, "lr_at(", step, "): steps are >= 0");
  if (step < warmup_) return base_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (kind_ == LrScheduleKind::kConstant) return base_;
  if (step >= total_) return 0.0;
  const double t = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  if (kind_ == LrScheduleKind::kWarmupLinear) return base_ * (1.0 - t);
  return base_ * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
}

}  // namespace hstu
