// checkpoint.cpp — checkpoint folders: safetensors for tensors, JSON for the trainer state.
#include "train/checkpoint.h"

#include <filesystem>
#include <vector>

#include "core/arena.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace hstu {
namespace {

// Device tensors are staged through host memory for writing.
struct HostStage {
  Arena arena;
  std::vector<std::pair<std::string, Tensor>> tensors;
  explicit HostStage(size_t bytes) : arena(Device::kCPU, bytes, "checkpoint") {}
  void add(const std::string& name, const Tensor& t) {
    if (t.empty()) return;
    Tensor h = t;
    if (t.device != Device::kCPU) {  // a dense host copy of the same shape
      h.data = arena.alloc(t.dtype, {t.numel()}).data;
      h.device = Device::kCPU;
      h.row_stride = h.row_elems();
      copy_tensor(h, t);
    }
    tensors.emplace_back(name, h);
  }
};

size_t bytes_of(const std::vector<Tensor>& ts) {
  size_t n = 0;
  for (const auto& t : ts) n += t.empty() ? 0 : t.nbytes() + Arena::kAlign;
  return n;
}

}  // namespace

CheckpointTensors checkpoint_tensors(HstuModel& model) {
  return {&model.dense(), {&model.items()}, model.device()};
}

void save_checkpoint(const CheckpointTensors& m, const Json& state, const std::string& dir) {
  std::filesystem::create_directories(dir);
  DenseParams& dense = *m.dense;
  const bool host = m.device == Device::kCPU;
  {
    std::vector<Tensor> all;
    for (const EmbeddingTable* t : m.tables) all.push_back(t->weight);
    for (size_t i = 0; i < dense.table().size(); ++i)
      all.push_back(dense.param(static_cast<int>(i)));
    HostStage stage(host ? 0 : bytes_of(all));
    for (size_t i = 0; i < dense.table().size(); ++i)
      stage.add(dense.table()[i].name, dense.param(static_cast<int>(i)));
    for (const EmbeddingTable* t : m.tables) stage.add(t->name, t->weight);
    save_safetensors(checkpoint_model_path(dir), stage.tensors, {{"format", "hstu"}});
  }
  {
    std::vector<Tensor> all{dense.flat_m(), dense.flat_v()};
    for (const EmbeddingTable* t : m.tables) {
      all.push_back(t->m);
      all.push_back(t->v);
    }
    HostStage stage(host ? 0 : bytes_of(all));
    stage.add("dense.adam_m", dense.flat_m());
    stage.add("dense.adam_v", dense.flat_v());
    for (const EmbeddingTable* t : m.tables) {
      stage.add(t->name + ".state_m", t->m);
      stage.add(t->name + ".state_v", t->v);
    }
    save_safetensors(checkpoint_optimizer_path(dir), stage.tensors, {{"format", "hstu"}});
  }
  atomic_write_file(checkpoint_state_path(dir), json::dump(state, 2) + "\n");
}

Json load_checkpoint(const CheckpointTensors& m, const std::string& dir, bool with_optimizer) {
  HSTU_CHECK(std::filesystem::exists(checkpoint_state_path(dir)), "no checkpoint in '", dir,
             "': ", checkpoint_state_path(dir), " is missing (an interrupted save leaves none)");
  DenseParams& dense = *m.dense;
  {
    SafetensorsFile f(checkpoint_model_path(dir));
    const auto need = [&](const std::string& name, const char* what) {
      HSTU_CHECK(f.contains(name), f.path(), ": ", what, " '", name,
                 "' is missing (was the checkpoint written with another config?)");
    };
    for (size_t i = 0; i < dense.table().size(); ++i) {
      const std::string& name = dense.table()[i].name;
      need(name, "parameter");
      f.copy_to(name, dense.param(static_cast<int>(i)));
    }
    for (EmbeddingTable* t : m.tables) {
      need(t->name, "embedding table");
      f.copy_to(t->name, t->weight);
    }
  }
  if (with_optimizer) {
    SafetensorsFile f(checkpoint_optimizer_path(dir));
    f.copy_to("dense.adam_m", dense.flat_m());
    f.copy_to("dense.adam_v", dense.flat_v());
    for (EmbeddingTable* t : m.tables) {
      if (!t->m.empty()) f.copy_to(t->name + ".state_m", t->m);
      if (!t->v.empty()) f.copy_to(t->name + ".state_v", t->v);
    }
  }
  return json::parse_file(checkpoint_state_path(dir));
}

}  // namespace hstu
