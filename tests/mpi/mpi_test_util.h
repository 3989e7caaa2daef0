// mpi_test_util.h — helpers of the tests that run under mpirun: the job's communicator (MPI,
// created once per process), host tensor views of std::vectors, a folder every rank agrees on and
// the small synthetic retrieval run of the data-parallel tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "config/load.h"
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

// A folder every rank agrees on (rank 0 names it, removes it at the end).
inline std::string shared_dir(const std::string& name) {
  Comm& c = world();
  const int64_t stamp = c.all_gather_host(::getpid())[0];
  return (std::filesystem::temp_directory_path() /
          ("hstu_mpi_" + name + "_" + std::to_string(stamp) + "_np" + std::to_string(c.size())))
      .string();
}

// The small synthetic retrieval run of the data-parallel tests (20 steps, dropout on, 8 uniform
// negatives), with `extra_gin` bindings and then `overrides` ("Key=value") applied.
inline Config retrieval_config(const std::string& run_dir, int64_t batch,
                               const std::string& extra_gin = "",
                               std::vector<std::string> overrides = {}) {
  const std::string gin = R"(
DatasetArgs.dataset_name = "synthetic"
DatasetArgs.max_history_seqlen = 20
SyntheticArgs.num_users = 300
SyntheticArgs.num_items = 120
SyntheticArgs.min_seqlen = 5
SyntheticArgs.max_seqlen = 20
NetworkArgs.num_layers = 2
NetworkArgs.hidden_size = 16
NetworkArgs.num_attention_heads = 2
NetworkArgs.kv_channels = 8
NetworkArgs.hidden_dropout = 0.2
TrainerArgs.eval_batch_size = 40
TrainerArgs.max_train_iters = 20
TrainerArgs.log_interval = 5
TrainerArgs.eval_interval = 20
TrainerArgs.num_threads = 1
RetrievalArgs.num_negatives = 8
)" + extra_gin;
  overrides.insert(overrides.begin(), {"TrainerArgs.run_dir=" + run_dir,
                                       "TrainerArgs.train_batch_size=" + std::to_string(batch)});
  return load_config_text(gin, "<data parallel>", overrides, nullptr);
}

}  // namespace hstu::dist
