// arena.cpp — host/device bump allocation and byte copies. The CUDA calls are compiled only in
// CUDA builds; a CPU-only build rejects CUDA arenas with a clear error.
#include "core/arena.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/cuda_check.h"

namespace hstu {

Arena::Arena(Device device, size_t bytes, std::string name)
    : device_(device), capacity_(bytes), name_(std::move(name)) {
  if (bytes == 0) return;
  if (device == Device::kCPU) {
    base_ = static_cast<char*>(std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
    HSTU_CHECK(base_ != nullptr, "out of host memory allocating ", bytes, " bytes for ", name_);
  } else {
#if defined(HSTU_WITH_CUDA)
    HSTU_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&base_), bytes));
#else
    HSTU_THROW("CUDA arena requested in a build without CUDA");
#endif
  }
}

Arena Arena::measuring(Device device, std::string name) {
  Arena a;
  a.device_ = device;
  a.measuring_ = true;
  a.name_ = std::move(name);
  return a;
}

void Arena::release() {
  if (!base_) return;
  if (device_ == Device::kCPU) {
    std::free(base_);
  } else {
#if defined(HSTU_WITH_CUDA)
    cudaFree(base_);
#endif
  }
  base_ = nullptr;
}

Arena::~Arena() {
  release();
}

Arena::Arena(Arena&& o) noexcept {
  *this = std::move(o);
}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    release();
    device_ = o.device_;
    base_ = std::exchange(o.base_, nullptr);
    capacity_ = o.capacity_;
    used_ = o.used_;
    peak_ = o.peak_;
    measuring_ = o.measuring_;
    name_ = std::move(o.name_);
  }
  return *this;
}

Tensor Arena::alloc(DType dtype, std::initializer_list<int64_t> dims) {
  Tensor t(nullptr, dtype, device_, dims);
  const size_t bytes = (t.nbytes() + kAlign - 1) / kAlign * kAlign;
  if (!measuring_) {
    HSTU_CHECK(used_ + bytes <= capacity_, "arena '", name_, "' exhausted: needs ", used_ + bytes,
               " bytes, planned ", capacity_, " (the memory plan is wrong; please report)");
    t.data = base_ + used_;
  }
  used_ += bytes;
  if (used_ > peak_) peak_ = used_;
  return t;
}

Tensor Arena::zeros(DType dtype, std::initializer_list<int64_t> dims) {
  Tensor t = alloc(dtype, dims);
  if (!measuring_) fill_zero(t);
  return t;
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev == Device::kCPU && src_dev == Device::kCPU) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(HSTU_WITH_CUDA)
  HSTU_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
#else
  HSTU_THROW("device copy in a build without CUDA");
#endif
}

void copy_bytes_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes,
                      void* stream) {
  if (bytes == 0) return;
  if (dst_dev == Device::kCPU && src_dev == Device::kCPU) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(HSTU_WITH_CUDA)
  HSTU_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
#else
  (void)stream;
  HSTU_THROW("device copy in a build without CUDA");
#endif
}

void fill_zero(const Tensor& t, void* stream) {
  if (t.numel() == 0) return;
  HSTU_CHECK(t.contiguous(), "fill_zero needs a contiguous tensor, got ", t.str());
  if (t.device == Device::kCPU) {
    std::memset(t.data, 0, t.nbytes());
    return;
  }
#if defined(HSTU_WITH_CUDA)
  HSTU_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), static_cast<cudaStream_t>(stream)));
#else
  (void)stream;
  HSTU_THROW("device memset in a build without CUDA");
#endif
}

void copy_tensor(const Tensor& dst, const Tensor& src, void* stream) {
  HSTU_CHECK(dst.dtype == src.dtype && dst.ndim == src.ndim, "copy ", src.str(), " -> ", dst.str());
  for (int i = 0; i < dst.ndim; ++i)
    HSTU_CHECK(dst.shape[i] == src.shape[i], "copy ", src.str(), " -> ", dst.str());
  if (dst.contiguous() && src.contiguous()) {
    if (stream)
      copy_bytes_async(dst.data, dst.device, src.data, src.device, src.nbytes(), stream);
    else
      copy_bytes(dst.data, dst.device, src.data, src.device, src.nbytes());
    return;
  }
  const size_t row_bytes = static_cast<size_t>(src.row_elems()) * dtype_size(src.dtype);
  const size_t es = dtype_size(src.dtype);
#if defined(HSTU_WITH_CUDA)
  if (dst.device != Device::kCPU || src.device != Device::kCPU) {
    if (stream)
      HSTU_CUDA_CHECK(cudaMemcpy2DAsync(dst.data, dst.row_stride * es, src.data,
                                        src.row_stride * es, row_bytes, src.shape[0],
                                        cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
    else
      HSTU_CUDA_CHECK(cudaMemcpy2D(dst.data, dst.row_stride * es, src.data, src.row_stride * es,
                                   row_bytes, src.shape[0], cudaMemcpyDefault));
    return;
  }
#endif
  for (int64_t r = 0; r < src.shape[0]; ++r)
    copy_bytes(static_cast<char*>(dst.data) + r * dst.row_stride * es, dst.device,
               static_cast<const char*>(src.data) + r * src.row_stride * es, src.device, row_bytes);
}

}  // namespace hstu
