// device_info.h — what CUDA devices this process can use (empty answers in CPU-only builds).
#pragma once

#include <string>

namespace hstu {

// Number of usable CUDA devices (0 without CUDA or without a GPU/driver).
int cuda_device_count();
// One line per device: name, compute capability, SMs, memory; or why there is none.
std::string describe_cuda_devices();

}  // namespace hstu
