// table_checkpoint.cpp — save and (filtered) load of a dynamic table as safetensors.
#include "embed/table_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "embed/table_math.h"
#include "io/safetensors.h"

namespace hstu::embed {
namespace {

constexpr const char* kFormat = "hstu.dynamic_table.v1";

int64_t meta_int(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  HSTU_CHECK(it != f.metadata().end(), f.path(), ": metadata has no '", key, "'");
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    HSTU_CHECK(used == it->second.size(), "trailing characters");
    return v;
  } catch (const std::exception&) {
    HSTU_THROW(f.path(), ": metadata '", key, "' = '", it->second, "' is not an integer");
  }
}

std::string meta_str(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  HSTU_CHECK(it != f.metadata().end(), f.path(), ": metadata has no '", key, "'");
  return it->second;
}

}  // namespace

std::string dynamic_table_file(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / (name + ".dynamic.safetensors")).string();
}

std::string save_dynamic_table(Ctx& ctx, DynamicTable& table, const std::string& dir) {
  const std::string path = dynamic_table_file(dir, table.spec().name);
  save_dynamic_table_file(ctx, table, path);
  return path;
}

void save_dynamic_table_file(Ctx& ctx, DynamicTable& table, const std::string& path) {
  TableRows rows = table.export_rows(ctx);
  const int64_t n = static_cast<int64_t>(rows.keys.size()), w = table.row_width();
  const int64_t d = table.spec().dim, sw = w - d;
  std::vector<int64_t> scores(rows.scores.size());
  std::memcpy(scores.data(), rows.scores.data(), scores.size() * 8);
  const DynamicTableSpec& s = table.spec();
  const DynamicTableCounters c = table.counters();
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"name", s.name},
      {"dim", std::to_string(s.dim)},
      {"row_width", std::to_string(w)},
      {"optimizer", s.optimizer},
      {"eviction", s.eviction},
      {"step", std::to_string(table.step())},
      {"inserts", std::to_string(c.inserts)},
      {"evictions", std::to_string(c.evictions)},
      {"rejections", std::to_string(c.rejections)},
      {"size", std::to_string(c.size)},
      {"capacity", std::to_string(c.capacity)},
      {"value_dtype", table.bf16() ? "bf16" : "f32"},
  };
  if (!table.bf16()) {
    save_safetensors(path,
                     {{"keys", Tensor(rows.keys.data(), DType::kI64, Device::kCPU, {n})},
                      {"values", Tensor(rows.values.data(), DType::kF32, Device::kCPU, {n, w})},
                      {"scores", Tensor(scores.data(), DType::kI64, Device::kCPU, {n})}},
                     meta);
    return;
  }
  // bf16: the exported values are the stored bf16 widened, so bf16_bits gives them back exactly.
  std::vector<uint16_t> values(static_cast<size_t>(n * d));
  std::vector<float> state(static_cast<size_t>(n * sw));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) values[i * d + j] = bf16_bits(rows.values[i * w + j]);
    std::copy_n(rows.values.begin() + i * w + d, sw, state.begin() + i * sw);
  }
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"keys", Tensor(rows.keys.data(), DType::kI64, Device::kCPU, {n})},
      {"values", Tensor(values.data(), DType::kBF16, Device::kCPU, {n, d})},
      {"scores", Tensor(scores.data(), DType::kI64, Device::kCPU, {n})}};
  if (sw > 0)
    tensors.push_back({"state", Tensor(state.data(), DType::kF32, Device::kCPU, {n, sw})});
  save_safetensors(path, tensors, meta);
}

int64_t load_dynamic_table(Ctx& ctx, DynamicTable& table, const std::string& dir,
                           const std::function<bool(int64_t)>& keep) {
  return load_dynamic_table_file(ctx, table, dynamic_table_file(dir, table.spec().name), keep);
}

int64_t load_dynamic_table_file(Ctx& ctx, DynamicTable& table, const std::string& path,
                                const std::function<bool(int64_t)>& keep) {
  SafetensorsFile f(path);
  HSTU_CHECK(meta_str(f, "format") == kFormat, path, ": format '", meta_str(f, "format"),
             "' is not ", kFormat);
  HSTU_CHECK(meta_int(f, "dim") == table.spec().dim, path, ": dim ", meta_int(f, "dim"),
             " differs from the table's dim ", table.spec().dim);
  HSTU_CHECK(meta_str(f, "optimizer") == table.spec().optimizer, path, ": optimizer '",
             meta_str(f, "optimizer"), "' differs from the table's '", table.spec().optimizer,
             "' (the rows hold that optimiser's state)");
  const int64_t w = table.row_width();
  const SafetensorsFile::Entry& k = f.get("keys");
  const int64_t n = k.numel();
  HSTU_CHECK(k.dtype == DType::kI64 && k.shape.size() == 1, path, ": keys must be i64 [n]");
  const int64_t d = table.spec().dim, sw = w - d;
  const SafetensorsFile::Entry& v = f.get("values");
  // bf16 files: values bf16 [n, dim] and (with optimiser state) state f32 [n, row_width - dim].
  const bool bf16 = v.dtype == DType::kBF16;
  const auto it = f.metadata().find("value_dtype");
  const std::string file_dtype = it == f.metadata().end() ? "f32" : it->second;
  HSTU_CHECK(file_dtype == (bf16 ? "bf16" : "f32"), path, ": metadata value_dtype '", file_dtype,
             "' does not match the values tensor's dtype ", dtype_name(v.dtype));
  const SafetensorsFile::Entry* state = nullptr;
  if (bf16) {
    HSTU_CHECK(v.shape == (std::vector<int64_t>{n, d}), path, ": values must be bf16 [", n, ", ", d,
               "]");
    if (sw > 0) {
      state = &f.get("state");
      HSTU_CHECK(state->dtype == DType::kF32 && state->shape == (std::vector<int64_t>{n, sw}), path,
                 ": state must be f32 [", n, ", ", sw, "]");
    }
  } else {
    HSTU_CHECK(v.dtype == DType::kF32 && v.shape == (std::vector<int64_t>{n, w}), path,
               ": values must be f32 [", n, ", ", w, "] or bf16 [", n, ", ", d, "]");
  }
  const SafetensorsFile::Entry& sc = f.get("scores");
  HSTU_CHECK(sc.dtype == DType::kI64 && sc.shape == (std::vector<int64_t>{n}), path,
             ": scores must be i64 [", n, "]");
  std::vector<int64_t> keys;
  std::vector<float> values;
  std::vector<uint64_t> scores;
  for (int64_t i = 0; i < n; ++i) {
    int64_t key;
    std::memcpy(&key, k.bytes.data() + i * 8, 8);
    if (keep && !keep(key)) continue;
    keys.push_back(key);
    uint64_t s;
    std::memcpy(&s, sc.bytes.data() + i * 8, 8);
    scores.push_back(s);
    const size_t at = values.size();
    values.resize(at + static_cast<size_t>(w));
    if (!bf16) {
      std::memcpy(values.data() + at, v.bytes.data() + i * w * 4, static_cast<size_t>(w) * 4);
      continue;
    }
    for (int64_t j = 0; j < d; ++j) {  // widened exactly; a bf16 table stores these bits again
      uint16_t b;
      std::memcpy(&b, v.bytes.data() + (i * d + j) * 2, 2);
      values[at + j] = bf16_to_float(b);
    }
    if (state)
      std::memcpy(values.data() + at + d, state->bytes.data() + i * sw * 4,
                  static_cast<size_t>(sw) * 4);
  }
  table.begin_step(std::max(table.step(), meta_int(f, "step")));
  table.import_rows(ctx, keys, values, w, &scores);
  return static_cast<int64_t>(keys.size());
}

}  // namespace hstu::embed
