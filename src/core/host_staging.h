// host_staging.h — host memory that asynchronous device copies read from or write to: page-locked
// (cudaHostAlloc) for a CUDA device, so cudaMemcpyAsync neither blocks the host nor waits for the
// stream; plain memory for the CPU backend, where every copy is immediate.
//
// The shaping decision: the buffer carries the event of the copies that last used it. The
// producer calls wait() before refilling it (blocks only if those copies have not run yet) and
// record(stream) after enqueueing new ones, so two buffers in turn let the host prepare step
// n + 1 while the device still runs step n without either side clobbering the other.
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace hstu {

class HostStaging {
 public:
  HostStaging(Device device, size_t bytes);
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  char* data() { return data_; }
  size_t size() const { return bytes_; }
  // Blocks until the copies recorded last have run (no-op on the CPU or before any record).
  void wait();
  // Marks the copies enqueued so far on `stream` as the ones that use this buffer.
  void record(void* stream);

 private:
  Device device_;
  char* data_ = nullptr;
  size_t bytes_ = 0;
  void* event_ = nullptr;  // cudaEvent_t
  bool recorded_ = false;
};

}  // namespace hstu
