// tensor.cpp — Tensor view helpers (shape checks, slicing, printing).
#include "core/tensor.h"

#include <sstream>

namespace hstu {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

const char* device_name(Device d) {
  return d == Device::kCPU ? "cpu" : "cuda";
}

Tensor::Tensor(void* p, DType t, Device d, std::initializer_list<int64_t> dims)
    : data(p), dtype(t), device(d) {
  HSTU_CHECK(dims.size() >= 1 && dims.size() <= 4, "tensors have 1 to 4 dims");
  for (int64_t v : dims) {
    HSTU_CHECK(v >= 0, "negative dim ", v);
    shape[ndim++] = v;
  }
  row_stride = row_elems();
}

int64_t Tensor::row_elems() const {
  int64_t n = 1;
  for (int i = 1; i < ndim; ++i) n *= shape[i];
  return n;
}

int64_t Tensor::numel() const {
  if (ndim == 0) return 0;
  return shape[0] * row_elems();
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (int i = 0; i < ndim; ++i) os << (i ? "," : "") << shape[i];
  os << "]";
  if (!contiguous()) os << "(stride " << row_stride << ")";
  os << " " << device_name(device);
  return os.str();
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  HSTU_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0], "rows [", begin, ",", end,
             ") out of ", str());
  Tensor t = *this;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin * row_stride) * dtype_size(dtype);
  t.shape[0] = end - begin;
  return t;
}

Tensor Tensor::cols(int64_t begin, int64_t end) const {
  HSTU_CHECK(ndim == 2 && 0 <= begin && begin <= end && end <= shape[1], "cols [", begin, ",", end,
             ") out of ", str());
  Tensor t = *this;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin) * dtype_size(dtype);
  t.shape[1] = end - begin;
  return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> dims) const {
  HSTU_CHECK(contiguous(), "reshape of a strided view ", str());
  Tensor t(data, dtype, device, dims);
  HSTU_CHECK(t.numel() == numel(), "reshape ", str(), " to ", t.str(), " changes the size");
  return t;
}

void check_shape(const Tensor& t, std::initializer_list<int64_t> dims, const char* what) {
  bool ok = t.ndim == static_cast<int>(dims.size());
  int i = 0;
  for (int64_t d : dims) {
    if (ok && d >= 0 && t.shape[i] != d) ok = false;
    ++i;
  }
  if (!ok) {
    std::ostringstream want;
    want << "[";
    i = 0;
    for (int64_t d : dims)
      want << (i++ ? "," : "") << (d < 0 ? std::string("*") : std::to_string(d));
    want << "]";
    HSTU_THROW(what, ": expected shape ", want.str(), ", got ", t.str());
  }
}

}  // namespace hstu
