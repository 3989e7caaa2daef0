// params.cpp — the flat dense-parameter buffer, embedding tables and Philox-based initialisers.
#include "model/params.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/checked.h"
#include "core/context.h"
#include "core/philox.h"
#include "ops/cast.h"

namespace hstu {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A stream of uniform doubles in (0, 1) from Philox(seed, counter), 4 per block.
class UniformStream {
 public:
  UniformStream(uint64_t seed, uint64_t key) : seed_(seed ^ key) {}
  double next() {
    if (k_ == 4) {
      const Philox4 r = philox4x32(seed_, counter_++);
      w_[0] = r.x, w_[1] = r.y, w_[2] = r.z, w_[3] = r.w;
      k_ = 0;
    }
    return (static_cast<double>(w_[k_++]) + 0.5) / 4294967296.0;
  }
  double normal() {  // Box-Muller (one value per pair; simple and reproducible)
    const double u1 = next(), u2 = next();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t seed_, counter_ = 0;
  uint32_t w_[4] = {0, 0, 0, 0};
  int k_ = 4;
};

}  // namespace

void init_tensor(const Tensor& t, const Init& init, uint64_t seed, const std::string& name) {
  HSTU_CHECK(t.device == Device::kCPU && t.contiguous(), "init_tensor needs a host tensor");
  UniformStream rs(seed, fnv1a(name));
  const int64_t n = t.numel();
  const double fan_in = t.ndim >= 2 ? static_cast<double>(t.shape[0]) : static_cast<double>(n);
  const double fan_out = t.ndim >= 2 ? static_cast<double>(t.shape[1]) : 1.0;
  auto value = [&]() -> double {
    switch (init.kind) {
      case Init::kZeros:
        return 0.0;
      case Init::kOnes:
        return 1.0;
      case Init::kNormal:
        return init.a * rs.normal();
      case Init::kTruncNormal: {
        double z;
        do z = rs.normal();
        while (z < -2.0 || z > 2.0);
        return init.a * z;
      }
      case Init::kUniform:
        return init.a * (2.0 * rs.next() - 1.0);
      case Init::kXavierUniform:
        return std::sqrt(6.0 / (fan_in + fan_out)) * (2.0 * rs.next() - 1.0);
      case Init::kXavierNormal:
        return std::sqrt(2.0 / (fan_in + fan_out)) * rs.normal();
    }
    return 0.0;
  };
  if (t.dtype == DType::kF32) {
    float* p = t.as<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(value());
  } else {
    double* p = t.as<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = value();
  }
}

int DenseParams::add(const std::string& name, std::vector<int64_t> shape, bool decay, Init init) {
  HSTU_CHECK(!arena_, "parameter ", name, " added after finalize()");
  const int index = static_cast<int>(table_.size());
  if (!index_.try_emplace(name, index).second) HSTU_THROW("duplicate parameter ", name);
  ParamInfo p{name, std::move(shape), decay, false, init};
  for (const int64_t d : p.shape) p.numel = checked_mul(p.numel, d, name.c_str());
  table_.push_back(std::move(p));
  return index;
}

int DenseParams::add_linear(const std::string& name, int64_t in, int64_t out, Init init) {
  const int i = add(name, {in, out}, true, init);
  table_[static_cast<size_t>(i)].linear = true;
  return i;
}

int DenseParams::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

int64_t DenseParams::layout() {
  // Decay parameters first, each group in registration order; offsets 64-element aligned so
  // every parameter starts on a 256-byte boundary (vector loads).
  int64_t off = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& p : table_) {
      if (p.decay != (pass == 0)) continue;
      p.offset = off;
      const int64_t padded = checked_add(p.numel, 63, p.name.c_str()) / 64 * 64;
      off = checked_add(off, padded, "dense parameter elements");
    }
    if (pass == 0) num_decay_ = off;
  }
  size_ = off;
  return size_;
}

void DenseParams::finalize(Device device, uint64_t seed, DType dtype, DType compute_dtype) {
  layout();
  const size_t bytes = static_cast<size_t>(size_) * dtype_size(dtype);
  const size_t compute_bytes = compute_dtype == dtype ? 0 : size_ * dtype_size(compute_dtype);
  arena_ = std::make_unique<Arena>(device, 4 * bytes + compute_bytes + 7 * Arena::kAlign,
                                   "dense-params");
  params_ = arena_->zeros(dtype, {size_});
  grads_ = arena_->zeros(dtype, {size_});
  m_ = arena_->zeros(dtype, {size_});
  v_ = arena_->zeros(dtype, {size_});
  health_ = arena_->zeros(DType::kF64, {2});
  // Initialise on the host, then copy (one transfer).
  Arena host(Device::kCPU, bytes + Arena::kAlign, "init");
  Tensor h = host.zeros(dtype, {size_});
  for (size_t i = 0; i < table_.size(); ++i)
    init_tensor(view(h, static_cast<int>(i)), table_[i].init, seed, table_[i].name);
  copy_tensor(params_, h);
  if (compute_dtype != dtype) {
    compute_ = arena_->alloc(compute_dtype, {size_});
    Ctx ctx;  // the cast needs no stream or scratch
    ctx.device = device;
    refresh_compute_copy(ctx);  // the first forward reads it
  }
}

void DenseParams::refresh_compute_copy(Ctx& ctx) {
  if (!compute_.empty()) cast(ctx, params_, compute_);
}

Tensor DenseParams::view(const Tensor& flat, int i) const {
  const ParamInfo& p = table_.at(static_cast<size_t>(i));
  Tensor t = flat;
  t.data = static_cast<char*>(flat.data) + static_cast<size_t>(p.offset) * dtype_size(flat.dtype);
  t.ndim = static_cast<int>(p.shape.size());
  for (int d = 0; d < t.ndim; ++d) t.shape[d] = p.shape[static_cast<size_t>(d)];
  t.row_stride = t.row_elems();
  return t;
}

void EmbeddingTable::allocate(const std::string& table_name, int64_t num_rows, int64_t width,
                              Device device, const std::string& optimizer, DType dtype) {
  name = table_name;
  rows = num_rows;
  dim = width;
  const size_t es = dtype_size(dtype);
  const size_t table_bytes = static_cast<size_t>(rows * dim) * es + Arena::kAlign;
  size_t state_bytes = 0;
  if (optimizer == "adam" || optimizer == "dense_adam") state_bytes = 2 * table_bytes;
  if (optimizer == "row_wise_adagrad") state_bytes = static_cast<size_t>(rows) * es + Arena::kAlign;
  arena = std::make_unique<Arena>(
      device, 2 * table_bytes + state_bytes + static_cast<size_t>(rows) * 5 + 5 * Arena::kAlign,
      "embedding:" + name);
  weight = arena->zeros(dtype, {rows, dim});
  grad = arena->zeros(dtype, {rows, dim});
  touched = arena->zeros(DType::kU8, {rows});
  row_list = arena->alloc(DType::kI32, {rows});
  row_count = arena->zeros(DType::kI32, {1});
  if (optimizer == "adam" || optimizer == "dense_adam") {
    m = arena->zeros(dtype, {rows, dim});
    v = arena->zeros(dtype, {rows, dim});
  } else if (optimizer == "row_wise_adagrad") {
    m = arena->zeros(dtype, {rows});
  }
}

}  // namespace hstu
