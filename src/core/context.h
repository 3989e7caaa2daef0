// context.h — the execution context every op receives: which backend runs it and with what
// resources (CUDA stream and cuBLASLt handle, CPU thread count).
//
// Ops dispatch on ctx.device; the CPU backend is also the reference implementation. A CUDA op
// never allocates: it takes scratch memory from ctx.scratch, which the memory plan sized.
#pragma once

#include "core/error.h"
#include "core/tensor.h"

namespace hstu {

class Arena;
class PhaseTimer;

struct Ctx {
  Device device = Device::kCPU;
  void* stream = nullptr;        // cudaStream_t (CUDA backend only)
  void* blas = nullptr;          // backend BLAS state: cuBLASLt plan cache (CUDA)
  Arena* scratch = nullptr;      // temporary workspace for ops that need it (may be null on CPU)
  int num_threads = 0;           // CPU: OpenMP threads (0 = default)
  bool deterministic = true;     // CUDA: avoid atomics whose order changes results
  PhaseTimer* phases = nullptr;  // optional step-phase timing (core/phase_timer.h)

  bool cpu() const { return device == Device::kCPU; }
};

// A CPU context with default settings (tests, tools).
inline Ctx cpu_ctx() {
  return Ctx{};
}

}  // namespace hstu

// Expands to `expr` in a CUDA build; otherwise throws a clear error. Used by the op dispatchers
// (src/ops/<op>.cpp):
//   if (ctx.cpu()) return cpu::op(...);  HSTU_CUDA_DISPATCH(return cuda::op(...));
#if defined(HSTU_WITH_CUDA)
#define HSTU_CUDA_DISPATCH(expr) expr
#else
#define HSTU_CUDA_DISPATCH(expr)                                                                 \
  HSTU_THROW(                                                                                    \
      "this hstu binary was built without CUDA; rebuild on a machine with nvcc or use --device " \
      "cpu")
#endif
