// arena.h — bump allocators for planned memory (parameters, activations, scratch).
//
// An Arena hands out aligned Tensors from one block and never frees individually; `reset`
// rewinds to a mark. A *measuring* arena has no memory: it records the peak that a sequence of
// allocations would need, so the model can run its allocation sequence once to size the plan,
// then allocate exactly that before the first step (nothing is allocated inside the step loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace hstu {

class Arena {
 public:
  static constexpr size_t kAlign = 256;  // bytes; satisfies vector loads, TMA and cuBLASLt

  Arena() = default;
  // Allocates `bytes` on `device` (cudaMalloc on CUDA).
  Arena(Device device, size_t bytes, std::string name);
  // A measuring arena: allocations return tensors with null data and only the peak is tracked.
  static Arena measuring(Device device, std::string name);
  // A memory plan: runs allocate(arena) on a measuring arena, then allocates exactly its peak
  // and runs allocate on that arena, whose tensors the caller keeps.
  template <typename F>
  static std::unique_ptr<Arena> planned(Device device, const std::string& name, F&& allocate) {
    Arena measure = measuring(device, name);
    allocate(measure);
    auto arena = std::make_unique<Arena>(device, measure.peak(), name);
    allocate(*arena);
    return arena;
  }
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;

  Tensor alloc(DType dtype, std::initializer_list<int64_t> dims);
  // Same as alloc, zero-filled (host memset / cudaMemset).
  Tensor zeros(DType dtype, std::initializer_list<int64_t> dims);
  size_t mark() const { return used_; }
  void reset(size_t mark) { used_ = mark; }

  Device device() const { return device_; }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  bool is_measuring() const { return measuring_; }
  const std::string& name() const { return name_; }

 private:
  void release();

  Device device_ = Device::kCPU;
  char* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0, peak_ = 0;
  bool measuring_ = false;
  std::string name_;
};

// Memory helpers that work on either device (cudaMemcpy / memcpy).
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
// The same, enqueued on `stream` (cudaStream_t) when a device is involved: returns at once when
// the host side is page-locked (core/host_staging.h). CPU to CPU copies immediately.
void copy_bytes_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes,
                      void* stream);
// Zero-fills t (contiguous). With a `stream` (cudaStream_t) the CUDA memset is enqueued on it, so
// it is ordered with the stream's kernels and can be captured into a CUDA graph; without one it
// goes to the legacy default stream.
void fill_zero(const Tensor& t, void* stream = nullptr);
// Copies src into dst (same shape; dtypes must match), honouring row strides. Without a `stream`
// a copy that involves a device returns when it is done; with one it is enqueued there.
void copy_tensor(const Tensor& dst, const Tensor& src, void* stream = nullptr);

}  // namespace hstu
