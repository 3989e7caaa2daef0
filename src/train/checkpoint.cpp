// checkpoint.cpp — checkpoint folders: safetensors for tensors (format in checkpoint.h), JSON for
// the trainer state.
#include "train/checkpoint.h"

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <vector>

#include "core/arena.h"
#include "dist/shard_checkpoint.h"
#include "embed/table_checkpoint.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "train/dynamic_shard_checkpoint.h"

namespace hstu {
namespace {

template <typename E>
void transpose_as(const Tensor& src, const Tensor& dst) {
  const E* s = static_cast<const E*>(src.data);
  E* d = static_cast<E*>(dst.data);
  const int64_t rows = src.dim(0), cols = src.dim(1);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) d[j * rows + i] = s[i * cols + j];
}

// dst[j, i] = src[i, j] for contiguous 2-D host tensors of one 4- or 8-byte dtype.
void transpose_host(const Tensor& src, const Tensor& dst) {
  HSTU_CHECK(src.ndim == 2 && dst.ndim == 2 && src.device == Device::kCPU &&
                 dst.device == Device::kCPU && src.contiguous() && src.dtype == dst.dtype &&
                 dst.dim(0) == src.dim(1) && dst.dim(1) == src.dim(0),
             "checkpoint: cannot transpose ", src.str(), " into ", dst.str());
  switch (dtype_size(src.dtype)) {
    case 4:
      return transpose_as<uint32_t>(src, dst);
    case 8:
      return transpose_as<uint64_t>(src, dst);
    default:
      HSTU_THROW("checkpoint: cannot transpose ", src.str());
  }
}

// The host tensors of one file: host tensors as they are, device tensors copied to host memory,
// linear weights rearranged there from [in, out] to [out, in].
class HostStage {
 public:
  void add(const std::string& name, const Tensor& t, bool transpose = false) {
    if (t.empty()) return;
    Tensor h = t;
    if (t.device != Device::kCPU) {  // a dense host copy of the same shape
      h.data = buffer(t.nbytes());
      h.device = Device::kCPU;
      h.row_stride = h.row_elems();
      copy_tensor(h, t);
    }
    if (transpose) {
      const Tensor tr(buffer(t.nbytes()), t.dtype, Device::kCPU, {t.dim(1), t.dim(0)});
      transpose_host(h, tr);
      h = tr;
    }
    tensors_.emplace_back(name, h);
  }
  const std::vector<std::pair<std::string, Tensor>>& tensors() const { return tensors_; }

 private:
  void* buffer(size_t bytes) {
    buffers_.emplace_back(bytes);  // moving the outer vector keeps each buffer in place
    return buffers_.back().data();
  }
  std::vector<std::vector<std::byte>> buffers_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

std::map<std::string, std::string> file_metadata(const Json& state) {
  return {{"format", "hstu"},
          {"format_version", std::to_string(kCheckpointFormatVersion)},
          {"layout", "pytorch"},
          {"task", json::string_at(state, "task")},
          {"step", std::to_string(json::int_at(state, "step"))},
          {"config", json::string_at(state, "config")}};
}

// The format version of one checkpoint file: 1 when its metadata has no format_version (hstu
// before PyTorch layouts), else that integer, which must not be newer than this build's.
int file_version(const SafetensorsFile& f) {
  const auto& md = f.metadata();
  const auto format = md.find("format");
  HSTU_CHECK(format != md.end() && format->second == "hstu", f.path(),
             ": not an hstu checkpoint (its metadata lacks format = \"hstu\")");
  const auto it = md.find("format_version");
  if (it == md.end()) return 1;
  const std::string& s = it->second;
  int version = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), version);
  HSTU_CHECK(ec == std::errc() && end == s.data() + s.size() && version >= 1, f.path(),
             ": format_version '", s, "' is not a positive integer");
  HSTU_CHECK(version <= kCheckpointFormatVersion, f.path(), ": checkpoint format_version ", version,
             " is newer than this hstu reads (1 to ", kCheckpointFormatVersion,
             "); load it with a newer hstu");
  const auto layout = md.find("layout");
  HSTU_CHECK(layout != md.end() && layout->second == "pytorch", f.path(), ": format_version ",
             version, " needs layout = \"pytorch\" in the metadata");
  return version;
}

// Copies tensor `name` into dst; `transposed`: the file holds dst's [in, out] as [out, in].
void read_tensor(const SafetensorsFile& f, const std::string& name, const Tensor& dst,
                 bool transposed) {
  HSTU_CHECK(f.contains(name), f.path(), ": tensor '", name,
             "' is missing (was the checkpoint written with another config?)");
  if (!transposed) return f.copy_to(name, dst);
  std::vector<std::byte> stored(dst.nbytes()), back(dst.nbytes());
  const Tensor file_t(stored.data(), dst.dtype, Device::kCPU, {dst.dim(1), dst.dim(0)});
  f.copy_to(name, file_t);
  const Tensor host(back.data(), dst.dtype, Device::kCPU, {dst.dim(0), dst.dim(1)});
  transpose_host(file_t, host);
  copy_tensor(dst, host);
}

// Whether table `name` of the checkpoint in `dir` is stored as shard files.
bool sharded_in(const std::string& dir, const std::string& name) {
  return std::filesystem::exists(dir + "/" + dist::shard_index_name(name));
}

}  // namespace

CheckpointTensors checkpoint_tensors(HstuModel& model) {
  return {&model.dense(), {&model.items()}, model.device(), {}, nullptr, {}, nullptr, {}, {}};
}

void save_checkpoint(const CheckpointTensors& m, const Json& state, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const DenseParams& dense = *m.dense;
  const std::map<std::string, std::string> metadata = file_metadata(state);
  {
    HostStage stage;
    for (size_t i = 0; i < dense.table().size(); ++i)
      stage.add(dense.table()[i].name, dense.param(static_cast<int>(i)), dense.table()[i].linear);
    for (const EmbeddingTable* t : m.tables) stage.add(t->name, t->weight);
    save_safetensors(checkpoint_model_path(dir), stage.tensors(), metadata);
  }
  {
    HostStage stage;
    for (size_t i = 0; i < dense.table().size(); ++i) {
      const ParamInfo& p = dense.table()[i];
      stage.add(p.name + ".state_m", dense.state_m(static_cast<int>(i)), p.linear);
      stage.add(p.name + ".state_v", dense.state_v(static_cast<int>(i)), p.linear);
    }
    for (const EmbeddingTable* t : m.tables) {
      stage.add(t->name + ".state_m", t->m);
      stage.add(t->name + ".state_v", t->v);
    }
    save_safetensors(checkpoint_optimizer_path(dir), stage.tensors(), metadata);
  }
  for (embed::DynamicTable* t : m.dynamic) {
    HSTU_CHECK(m.ctx, "save_checkpoint: dynamic tables need CheckpointTensors.ctx");
    embed::save_dynamic_table(*m.ctx, *t, dir);
  }
  atomic_write_file(checkpoint_state_path(dir), json::dump(state, 2) + "\n");
}

Json load_checkpoint(const CheckpointTensors& m, const std::string& where, bool with_optimizer) {
  const std::string dir = find_checkpoint(where);
  const DenseParams& dense = *m.dense;
  {
    const SafetensorsFile f(checkpoint_model_path(dir));
    const bool pytorch = file_version(f) >= 2;
    for (size_t i = 0; i < dense.table().size(); ++i)
      read_tensor(f, dense.table()[i].name, dense.param(static_cast<int>(i)),
                  pytorch && dense.table()[i].linear);
    for (const EmbeddingTable* t : m.tables)
      if (!sharded_in(dir, t->name)) read_tensor(f, t->name, t->weight, false);
  }
  // Tables another run sharded: assembled from its shard files.
  for (EmbeddingTable* t : m.tables)
    if (sharded_in(dir, t->name)) dist::assemble_full_table(dir, t->name, *t, with_optimizer);
  for (embed::DynamicTable* t : m.dynamic) {  // one file, or every rank's of a sharded save
    HSTU_CHECK(m.ctx, "load_checkpoint: dynamic tables need CheckpointTensors.ctx");
    load_dynamic_any(*m.ctx, *t, dir);
  }
  for (embed::DynamicTable* t : m.dynamic_sharded) {  // the keys this rank owns, from any save
    HSTU_CHECK(m.ctx && m.comm,
               "load_checkpoint: sharded dynamic tables need "
               "CheckpointTensors.ctx and comm");
    const int world = m.comm->size(), rank = m.comm->rank();
    const dist::OwnerKind owner = m.dynamic_owner;
    load_dynamic_any(*m.ctx, *t, dir, [world, rank, owner](int64_t key) {
      return dist::key_owner(key, world, owner) == rank;
    });
  }
  for (dist::ShardedTable* t : m.sharded) {
    if (sharded_in(dir, t->name()))
      dist::load_shards(dir, t->name(), *m.comm, *t, with_optimizer);
    else
      dist::load_full_into_shard(checkpoint_model_path(dir), checkpoint_optimizer_path(dir), *t,
                                 with_optimizer);
  }
  if (with_optimizer) {
    const SafetensorsFile f(checkpoint_optimizer_path(dir));
    if (file_version(f) >= 2) {
      for (size_t i = 0; i < dense.table().size(); ++i) {
        const ParamInfo& p = dense.table()[i];
        read_tensor(f, p.name + ".state_m", dense.state_m(static_cast<int>(i)), p.linear);
        read_tensor(f, p.name + ".state_v", dense.state_v(static_cast<int>(i)), p.linear);
      }
    } else {  // the flat buffers, in hstu's internal order
      read_tensor(f, "dense.adam_m", dense.flat_m(), false);
      read_tensor(f, "dense.adam_v", dense.flat_v(), false);
    }
    for (const EmbeddingTable* t : m.tables) {
      if (sharded_in(dir, t->name)) continue;
      if (!t->m.empty()) read_tensor(f, t->name + ".state_m", t->m, false);
      if (!t->v.empty()) read_tensor(f, t->name + ".state_v", t->v, false);
    }
  }
  return json::parse_file(checkpoint_state_path(dir));
}

}  // namespace hstu
