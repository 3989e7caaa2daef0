// cuda/workspace.cuh — the per-stream temporary device memory of the dynamic table's CUDA
// primitives (table_ops.cu, hash_dedupe.cu; CUDA builds only, private to embed/cuda/): grows to
// the largest request and is reused, so a step allocates nothing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/context.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "embed/table_ops.h"

namespace hstu::embed::cuda {

// Per-stream temporary device memory (bump-allocated, reset by each primitive; kernels of one
// stream run in order, so reuse is safe) and page-locked host words for count read-backs.
class Workspace {
 public:
  // Enough for dedupe_many's (u, first key) per job and its fallback flag.
  static constexpr int kHostWords = 2 * kMaxDedupeJobs + 1;

  explicit Workspace(cudaStream_t s) : stream_(s) {
    HSTU_CUDA_CHECK(
        cudaHostAlloc(&host_, kHostWords * sizeof(unsigned long long), cudaHostAllocDefault));
  }
  // Makes room for `bytes` in all (waits for the stream before freeing a smaller buffer).
  void reset(size_t bytes) {
    used_ = 0;
    if (bytes <= cap_) return;
    if (dev_) {
      HSTU_CUDA_CHECK(cudaStreamSynchronize(stream_));
      HSTU_CUDA_CHECK(cudaFree(dev_));
    }
    cap_ = std::max(bytes, 2 * cap_);
    HSTU_CUDA_CHECK(cudaMalloc(&dev_, cap_));
  }
  template <typename T>
  T* take(size_t n) {
    const size_t at = (used_ + 255) / 256 * 256, bytes = std::max<size_t>(n, 1) * sizeof(T);
    HSTU_CHECK(at + bytes <= cap_, "dynamic table CUDA workspace overflow (", at + bytes, " > ",
               cap_, " bytes)");
    used_ = at + bytes;
    return reinterpret_cast<T*>(static_cast<char*>(dev_) + at);
  }
  // kHostWords page-locked words.
  unsigned long long* host() { return host_; }

 private:
  cudaStream_t stream_;
  void* dev_ = nullptr;
  size_t cap_ = 0, used_ = 0;
  unsigned long long* host_ = nullptr;
};

// The workspace of ctx's stream, reset with room for `bytes` (one per stream for the process: the
// table primitives and the hash dedupe share it).
inline Workspace& workspace(const Ctx& ctx, size_t bytes) {
  static std::mutex mu;
  static std::unordered_map<cudaStream_t, std::unique_ptr<Workspace>> all;
  std::lock_guard<std::mutex> lock(mu);
  auto& w = all[static_cast<cudaStream_t>(ctx.stream)];
  if (!w) w = std::make_unique<Workspace>(static_cast<cudaStream_t>(ctx.stream));
  w->reset(bytes + 16 * 256);
  return *w;
}

}  // namespace hstu::embed::cuda
