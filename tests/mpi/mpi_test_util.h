// mpi_test_util.h — helpers of the tests that run under mpirun: the job's communicator (MPI,
// created once per process) and host tensor views of std::vectors.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "dist/comm.h"

namespace hstu::dist {

// MPI_COMM_WORLD of this mpirun job.
inline Comm& world() {
  static std::unique_ptr<Comm> c = make_mpi_comm();
  return *c;
}

// A host tensor over v: 1-D, or with the given dims (their product must be v.size()).
template <typename T>
Tensor host_tensor(std::vector<T>& v, std::initializer_list<int64_t> dims = {}) {
  if (dims.size() == 0)
    return Tensor(v.data(), DTypeOf<T>::value, Device::kCPU, {static_cast<int64_t>(v.size())});
  return Tensor(v.data(), DTypeOf<T>::value, Device::kCPU, dims);
}

}  // namespace hstu::dist
