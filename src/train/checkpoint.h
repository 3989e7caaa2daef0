// checkpoint.h — saving and restoring a run: weights and optimiser state as safetensors (loadable
// from Python), trainer state as JSON. Every file is written atomically; the trainer state is
// written last, so a checkpoint folder whose trainer_state.json exists is complete.
//
// Format version 2 (docs/CHECKPOINTS.md lists every tensor and its counterparts in Meta's and
// NVIDIA's trainers): tensors carry hstu's parameter names in PyTorch layouts — linear weights
// (ParamInfo::linear) as torch.nn.Linear's [out, in], transposed from hstu's [in, out] on the way
// through host memory; embedding tables [rows, dim] as nn.Embedding's; norms, biases and rab
// tables 1-D. optimizer.safetensors holds each parameter's Adam moments under
// "<name>.state_m" / "<name>.state_v" in the parameter's file layout, and each table's optimiser
// state under "<table>.state_m" / "<table>.state_v". Both files' __metadata__: format = "hstu",
// format_version, layout = "pytorch", task, step and config (the effective gin text).
// Version 1 (no format_version) stored linear weights [in, out] and the dense moments as the flat
// buffers "dense.adam_m" / "dense.adam_v"; it still loads. Newer versions are refused.
#pragma once

#include <string>
#include <vector>

#include "io/json.h"
#include "model/model.h"

namespace hstu {

// Files of a checkpoint folder.
inline std::string checkpoint_model_path(const std::string& dir) {
  return dir + "/model.safetensors";
}
inline std::string checkpoint_optimizer_path(const std::string& dir) {
  return dir + "/optimizer.safetensors";
}
inline std::string checkpoint_state_path(const std::string& dir) {
  return dir + "/trainer_state.json";
}

// The tensors of a model that a checkpoint stores: its dense parameters and embedding tables.
// Tables are stored under their names (EmbeddingTable::name, e.g. "item_embedding").
struct CheckpointTensors {
  DenseParams* dense = nullptr;
  std::vector<EmbeddingTable*> tables;
  Device device = Device::kCPU;
};
CheckpointTensors checkpoint_tensors(HstuModel& model);

inline constexpr int kCheckpointFormatVersion = 2;

// Writes model.safetensors (every dense parameter and every table by name), optimizer.safetensors
// (each parameter's Adam moments and each table's optimiser state) and then trainer_state.json
// (`state`, supplied by the trainer) into `dir` (created if missing). `state` must hold "task",
// "step" and "config", which also go into both files' metadata.
void save_checkpoint(const CheckpointTensors& m, const Json& state, const std::string& dir);

// Loads weights (and the optimiser state when with_optimizer) into a planned model and returns
// the trainer state; each file in its own format version (1 or 2). Shapes and names must match
// the model's; errors name the file. The caller refreshes the dense compute copy
// (DenseParams::refresh_compute_copy) afterwards.
Json load_checkpoint(const CheckpointTensors& m, const std::string& dir, bool with_optimizer);

// The retrieval model's tensors (checkpoint_tensors(model)).
inline void save_checkpoint(HstuModel& model, const Json& state, const std::string& dir) {
  save_checkpoint(checkpoint_tensors(model), state, dir);
}
inline Json load_checkpoint(HstuModel& model, const std::string& dir, bool with_optimizer) {
  return load_checkpoint(checkpoint_tensors(model), dir, with_optimizer);
}

}  // namespace hstu
