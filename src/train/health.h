// health.h — the numerical health of a run (TrainerArgs.nonfinite): what the loop checks every
// step (the loss and the dense gradient norm, read back with the step, step.h), the slow scan for
// the first parameter group holding non-finite values that runs only after a detection, the
// finiteness check of a checkpoint's weights before an evaluation, and the messages.
#pragma once

#include <cstdint>
#include <string>

#include "train/checkpoint.h"
#include "train/step.h"

namespace hstu {

// Whether a finished step's loss and gradient sum of squares are both finite.
bool step_is_finite(const StepLoss& l);

// The first tensor with a non-finite value, scanned in order: each dense parameter (the
// parameter table's order), then (with_state) its Adam moments, then each embedding table's
// weights (and state), this rank's shards included; "" when every value is finite. Waits for the
// device and copies each tensor to the host: only for after a detection or a checkpoint load.
// The answer names the group, e.g. "dense parameter 'layer.0.uvqk.weight'" or "embedding table
// 'item_embedding' (row 17)".
std::string first_nonfinite_tensor(const CheckpointTensors& m, bool with_state);

// Throws, naming `what` (the checkpoint) and the first non-finite tensor, unless all the
// weights of `m` are finite.
void check_finite_weights(const CheckpointTensors& m, const std::string& what);

// The error of TrainerArgs.nonfinite = "error" at step `l` (0-based l.step; reported 1-based):
// the values, the first offending group (`group`, "" = none found), the last good checkpoint
// (`last_ckpt`, "" = none) and how to go on.
std::string nonfinite_error_message(const StepLoss& l, const std::string& group,
                                    const std::string& ckpt_dir, const std::string& last_ckpt);

}  // namespace hstu
