// device_info.h — what CUDA devices this process can use (empty answers in CPU-only builds).
#pragma once

#include <cstdint>
#include <string>

namespace hstu {

// Number of usable CUDA devices (0 without CUDA or without a GPU/driver).
int cuda_device_count();
// Bytes of device memory in use on the current device (total - free), 0 without CUDA.
int64_t cuda_memory_used_bytes();
// Bytes of free device memory on the current device (cudaMemGetInfo); -1 when not known.
int64_t cuda_memory_free_bytes();
// Dense bf16 tensor-core peak of the current device in TFLOPS, from its name (H100/H200 989,
// A100 312, ...; 0 when unknown) — the denominator of MFU.
double cuda_bf16_peak_tflops();
// One line per device: name, compute capability, SMs, memory, and whether this build has
// native code for it (else PTX compiled by the driver at first use); or why there is none.
std::string describe_cuda_devices();
// The CUDA build: runtime, driver and cuBLASLt versions and the compiled architectures; in a
// build without CUDA, why there is none (the configure step's reason).
std::string describe_cuda_build();

}  // namespace hstu
