// host_staging.cpp — see host_staging.h.
#include "core/host_staging.h"

#include <cstdlib>

#include "core/cuda_check.h"
#include "core/error.h"

namespace hstu {

HostStaging::HostStaging(Device device, size_t bytes) : device_(device), bytes_(bytes) {
  const size_t n = bytes > 0 ? bytes : 1;
#if defined(HSTU_WITH_CUDA)
  if (device == Device::kCUDA) {
    HSTU_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&data_), n, cudaHostAllocDefault));
    cudaEvent_t ev;
    HSTU_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    event_ = ev;
    return;
  }
#endif
  HSTU_CHECK(device == Device::kCPU, "HostStaging for a CUDA device needs a CUDA build");
  data_ = static_cast<char*>(std::malloc(n));
  HSTU_CHECK(data_ != nullptr, "out of host memory allocating ", n, " bytes of staging");
}

HostStaging::~HostStaging() {
#if defined(HSTU_WITH_CUDA)
  if (device_ == Device::kCUDA) {
    cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    cudaFreeHost(data_);
    return;
  }
#endif
  std::free(data_);
}

void HostStaging::wait() {
#if defined(HSTU_WITH_CUDA)
  if (device_ == Device::kCUDA && recorded_)
    HSTU_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
#endif
}

void HostStaging::record(void* stream) {
#if defined(HSTU_WITH_CUDA)
  if (device_ == Device::kCUDA) {
    HSTU_CUDA_CHECK(
        cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream)));
    recorded_ = true;
  }
#endif
  (void)stream;
}

}  // namespace hstu
