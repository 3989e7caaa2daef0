// tensor.h — dtypes, devices and the Tensor view every op takes.
//
// A Tensor is a non-owning view: pointer + dtype + device + up to 4 dims. Memory belongs to an
// Arena (activations, parameters) or to the caller. Dims are row-major and contiguous except for
// an optional row stride on dim 0, so a column block of a wider matrix (u, v, q, k inside the
// fused uvqk activation) is a view, not a copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace hstu {

enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kI32, kI64, kU8 };
enum class Device : uint8_t { kCPU, kCUDA };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kU8:
      return 1;
  }
  return 0;
}
const char* dtype_name(DType t);
const char* device_name(Device d);
inline bool is_float(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kBF16 || t == DType::kF16;
}

// Dtype of per-row statistics (LayerNorm mean/rstd, L2 norms): f64 for f64 activations, else f32.
inline DType stats_dtype(DType act) {
  return act == DType::kF64 ? DType::kF64 : DType::kF32;
}

// Maps a C++ element type to its DType (for checked typed access).
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCPU;
  int ndim = 0;
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t row_stride = 0;  // elements between consecutive dim-0 rows (= product of dims 1..)

  Tensor() = default;
  Tensor(void* p, DType t, Device d, std::initializer_list<int64_t> dims);

  bool empty() const { return ndim == 0; }  // "no tensor" (an optional argument left out)
  int64_t dim(int i) const { return shape[i]; }
  int64_t numel() const;
  int64_t row_elems() const;  // product of dims 1.. (elements of one dim-0 row)
  bool contiguous() const { return ndim <= 1 || row_stride == row_elems(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  std::string str() const;  // e.g. "f32[128,64] cpu"

  // Typed pointer; throws if the dtype does not match T.
  template <typename T>
  T* as() const {
    HSTU_CHECK(dtype == DTypeOf<T>::value, "tensor is ", str(), ", accessed as another dtype");
    return static_cast<T*>(data);
  }
  // Rows [begin, end) of dim 0 (a view).
  Tensor rows(int64_t begin, int64_t end) const;
  // Columns [begin, end) of a 2-D tensor (a strided view).
  Tensor cols(int64_t begin, int64_t end) const;
  // Same memory, new dims (requires contiguity and equal numel).
  Tensor reshape(std::initializer_list<int64_t> dims) const;
};

// Throws unless t has exactly these dims (-1 = any) — used by ops to validate arguments.
void check_shape(const Tensor& t, std::initializer_list<int64_t> dims, const char* what);

}  // namespace hstu
