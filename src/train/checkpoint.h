// checkpoint.h — saving and restoring a run: weights and optimiser state as safetensors (loadable
// from Python), trainer state as JSON. The trainer saves each step into its own folder with a
// manifest of checksums and switches a `latest` file to it (save_checkpoint_step, in
// checkpoint_dir.cpp), so a crash or a failed save leaves the previous save loadable.
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

#include "dist/comm.h"
#include "dist/sharded_table.h"
#include "dist/sharding.h"
#include "embed/dynamic_table.h"
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
// The file of a checkpoints folder naming its current save (a step folder's name).
inline std::string checkpoint_latest_path(const std::string& ckpt_dir) {
  return ckpt_dir + "/latest";
}

// The tensors of a model that a checkpoint stores: its dense parameters and embedding tables.
// Tables are stored under their names (EmbeddingTable::name, e.g. "item_embedding").
// Dynamic tables (embed/) are saved as one file each.
// Row-sharded tables (dist/sharded_table.h) are saved by every rank as id-keyed shard files
// beside the dense files, with an index (dist/shard_checkpoint.h); a save with them is
// collective over `comm`, and loads reshard to any rank count.
struct CheckpointTensors {
  DenseParams* dense = nullptr;
  std::vector<EmbeddingTable*> tables;
  Device device = Device::kCPU;
  std::vector<dist::ShardedTable*> sharded;
  dist::Comm* comm = nullptr;  // the job's ranks (needed with sharded tables)
  // Dynamic (hash-table) tables, each saved as <name>.dynamic.safetensors (keys, rows with their
  // optimiser state, scores; embed/table_checkpoint.h) and loaded into an empty table.
  std::vector<embed::DynamicTable*> dynamic;
  Ctx* ctx = nullptr;  // the run's context (needed with dynamic tables)
  // Dynamic tables sharded by key over `comm`'s ranks (train/dynamic_shard.h; this rank's
  // table): every rank saves its own file and rank 0 an index (train/dynamic_shard_checkpoint.h);
  // a save with them is collective, and a load keeps the keys `dynamic_owner` routes to this rank
  // from every saved file, whatever rank count wrote them. A plain `dynamic` table loads every
  // rank's file.
  std::vector<embed::DynamicTable*> dynamic_sharded;
  dist::OwnerKind dynamic_owner = dist::OwnerKind::kModulo;
  // Whether saving is collective (sharded or dynamic_sharded tables).
  bool collective() const { return !sharded.empty() || !dynamic_sharded.empty(); }
};
CheckpointTensors checkpoint_tensors(HstuModel& model);

inline constexpr int kCheckpointFormatVersion = 2;

// Writes model.safetensors (every dense parameter and every table by name), optimizer.safetensors
// (each parameter's Adam moments and each table's optimiser state) and then trainer_state.json
// (`state`, supplied by the trainer) into `dir` (created if missing). `state` must hold "task",
// "step" and "config", which also go into both files' metadata.
void save_checkpoint(const CheckpointTensors& m, const Json& state, const std::string& dir);

// One crash-consistent save (docs/CHECKPOINTS.md): save_checkpoint() into
// <ckpt_dir>/step-<9-digit step>.tmp, a manifest.json of the files' sizes and CRC-32Cs, the
// folder fsynced and renamed to step-<step>, then <ckpt_dir>/latest switched to it atomically;
// afterwards all but the newest `keep` saves (never the latest) and stale *.tmp folders are
// removed. On an error the temporary folder is removed, the previous save and `latest` stay as
// they were, and the error (with its cause) propagates. Returns the step folder. With sharded
// tables every rank calls it: rank 0 writes the dense files, every rank its shards, rank 0 the
// manifest (of every file in the folder) and `latest`.
std::string save_checkpoint_step(const CheckpointTensors& m, const Json& state,
                                 const std::string& ckpt_dir, int64_t keep);

// The folder to load from `dir`: a step folder (with manifest.json), a checkpoints folder (the
// save `latest` names, or the newest complete step folder, with a warning, when `latest` is
// missing or damaged) or a run folder (its checkpoints/); a folder holding trainer_state.json and
// no manifest is the pre-manifest layout and loads as it is. A save's files are verified against
// its manifest (size and CRC-32C); a mismatch is an error naming the file.
std::string find_checkpoint(const std::string& dir);

// Loads weights (and the optimiser state when with_optimizer) into a planned model and returns
// the trainer state; `dir` as find_checkpoint() takes it. Sharded tables load from shard files
// written by any number of ranks or from a single process's full table; a single process's
// table loads from shard files when the checkpoint has them. Each file in its own format version
// (1 or 2). Shapes and names must match
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
