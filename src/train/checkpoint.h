// checkpoint.h — saving and restoring a run: weights and optimiser state as safetensors (loadable
// from Python), trainer state as JSON. Every file is written atomically; the trainer state is
// written last, so a checkpoint folder whose trainer_state.json exists is complete.
#pragma once

#include <string>

#include "model/model.h"
#include "train/json.h"

namespace hstu {

// Files of a checkpoint folder.
inline std::string checkpoint_model_path(const std::string& dir) { return dir + "/model.safetensors"; }
inline std::string checkpoint_optimizer_path(const std::string& dir) { return dir + "/optimizer.safetensors"; }
inline std::string checkpoint_state_path(const std::string& dir) { return dir + "/trainer_state.json"; }

// Writes model.safetensors (every dense parameter by name + "item_embedding"),
// optimizer.safetensors (flat Adam moments and the embedding optimiser state) and then
// trainer_state.json (`state`, supplied by the trainer) into `dir` (created if missing).
void save_checkpoint(HstuModel& model, const json::Value& state, const std::string& dir);

// Loads weights (and the optimiser state when with_optimizer) into a planned model and returns
// the trainer state. Shapes and names must match the model's; errors name the file.
json::Value load_checkpoint(HstuModel& model, const std::string& dir, bool with_optimizer);

}  // namespace hstu
