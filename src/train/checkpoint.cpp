// checkpoint.cpp — checkpoint folders: safetensors for tensors, JSON for the trainer state.
#include "train/checkpoint.h"

#include <filesystem>
#include <vector>

#include "core/arena.h"
#include "train/safetensors.h"

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

void save_checkpoint(HstuModel& model, const json::Value& state, const std::string& dir) {
  std::filesystem::create_directories(dir);
  DenseParams& dense = model.dense();
  EmbeddingTable& items = model.items();
  {
    std::vector<Tensor> all{items.weight};
    for (size_t i = 0; i < dense.table().size(); ++i) all.push_back(dense.param(static_cast<int>(i)));
    HostStage stage(model.device() == Device::kCPU ? 0 : bytes_of(all));
    for (size_t i = 0; i < dense.table().size(); ++i)
      stage.add(dense.table()[i].name, dense.param(static_cast<int>(i)));
    stage.add("item_embedding", items.weight);
    save_safetensors(checkpoint_model_path(dir), stage.tensors, {{"format", "hstu"}});
  }
  {
    std::vector<Tensor> all{dense.flat_m(), dense.flat_v(), items.m, items.v};
    HostStage stage(model.device() == Device::kCPU ? 0 : bytes_of(all));
    stage.add("dense.adam_m", dense.flat_m());
    stage.add("dense.adam_v", dense.flat_v());
    stage.add("item_embedding.state_m", items.m);
    stage.add("item_embedding.state_v", items.v);
    save_safetensors(checkpoint_optimizer_path(dir), stage.tensors, {{"format", "hstu"}});
  }
  atomic_write_file(checkpoint_state_path(dir), state.dump(2) + "\n");
}

json::Value load_checkpoint(HstuModel& model, const std::string& dir, bool with_optimizer) {
  HSTU_CHECK(std::filesystem::exists(checkpoint_state_path(dir)), "no checkpoint in '", dir,
             "': ", checkpoint_state_path(dir), " is missing (an interrupted save leaves none)");
  DenseParams& dense = model.dense();
  EmbeddingTable& items = model.items();
  {
    SafetensorsFile f(checkpoint_model_path(dir));
    for (size_t i = 0; i < dense.table().size(); ++i) {
      const std::string& name = dense.table()[i].name;
      HSTU_CHECK(f.contains(name), f.path(), ": parameter '", name,
                 "' is missing (was the checkpoint written with another config?)");
      f.copy_to(name, dense.param(static_cast<int>(i)));
    }
    f.copy_to("item_embedding", items.weight);
  }
  if (with_optimizer) {
    SafetensorsFile f(checkpoint_optimizer_path(dir));
    f.copy_to("dense.adam_m", dense.flat_m());
    f.copy_to("dense.adam_v", dense.flat_v());
    if (!items.m.empty()) f.copy_to("item_embedding.state_m", items.m);
    if (!items.v.empty()) f.copy_to("item_embedding.state_v", items.v);
  }
  return json::parse_file(checkpoint_state_path(dir));
}

}  // namespace hstu
