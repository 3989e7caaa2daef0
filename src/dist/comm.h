// comm.h — the one communicator interface of distributed training, with three backends: local
// (one rank, no library), MPI (CPU ranks; OpenMPI) and NCCL (one GPU per rank).
//
// Every distributed code path (gradient all-reduce, sharded-table exchanges, distributed
// evaluation, checkpoints) talks to a Comm, so the same code runs on CPU processes under mpirun,
// which CI tests, and on GPUs over NCCL. The collectives are the libraries' own; nothing here
// implements a collective algorithm.
//
// Buffers are Tensors on comm.device() (kCPU for local/MPI, kCUDA for NCCL), contiguous. Counts
// of the ragged collectives are in dim-0 rows of the tensors (a row is the product of the other
// dims), given on the host. NCCL calls are enqueued on `stream` (a cudaStream_t; null = the
// legacy stream) and return before the data moved; MPI and local calls complete before returning.
// Every rank must issue the same collectives in the same order (one order per communicator).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hstu::dist {

enum class ReduceOp { kSum, kMax, kMin };

class Comm {
 public:
  virtual ~Comm() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  virtual const char* backend() const = 0;  // "local" | "mpi" | "nccl"
  virtual Device device() const = 0;        // where collective buffers live

  // buf = reduce(buf over ranks), in place. f32, f64, i32, i64; u8 with max / min (flags).
  virtual void all_reduce(const Tensor& buf, ReduceOp op, void* stream = nullptr) = 0;
  // buf = root's buf on every rank.
  virtual void broadcast(const Tensor& buf, int root, void* stream = nullptr) = 0;
  // recv[r*n : (r+1)*n] = rank r's send (n = send rows); recv has size()*n rows.
  virtual void all_gather(const Tensor& send, const Tensor& recv, void* stream = nullptr) = 0;
  // Rank r's send (counts[r] rows) lands at rows [sum(counts[:r]), ...) of recv.
  virtual void all_gather_v(const Tensor& send, const Tensor& recv, std::span<const int64_t> counts,
                            void* stream = nullptr) = 0;
  // Rows [sum(send_counts[:p]), +send_counts[p]) of send go to rank p, which receives them at
  // rows [sum(recv_counts[:r]), +recv_counts[r]) of its recv (r = this rank). send_counts of
  // rank r to p must equal recv_counts of p from r.
  virtual void all_to_all_v(const Tensor& send, std::span<const int64_t> send_counts,
                            const Tensor& recv, std::span<const int64_t> recv_counts,
                            void* stream = nullptr) = 0;
  virtual void barrier() = 0;
  // Ends the job from any rank after a fatal error: aborts outstanding collectives so that no
  // rank waits forever (MPI_Abort, ncclCommAbort); does not return.
  [[noreturn]] virtual void abort(int code) = 0;

  // Host conveniences, synchronous on every backend (NCCL stages through device memory).
  // Every rank's value, in rank order.
  std::vector<int64_t> all_gather_host(int64_t value);
  // The sum / max of value over ranks.
  int64_t all_reduce_host(int64_t value, ReduceOp op);
  double all_reduce_host(double value, ReduceOp op);
  // recv[p] = what rank p passed in send[r] (r = this rank): the counts exchange before ragged
  // all-to-alls. send has size() entries.
  std::vector<int64_t> all_to_all_host(std::span<const int64_t> send);
  // Throws on every rank, naming `what`, the ranks and their values, when `value` differs
  // between ranks (configs, build ids, parameter checksums at start-up).
  void check_same(uint64_t value, const std::string& what);
  // Collectives of host tensors on any backend (NCCL copies through device memory and waits):
  // all_gather, all_reduce and an all-to-all of one row per rank.
  virtual void host_all_gather(const Tensor& send, const Tensor& recv);
  virtual void host_all_reduce(const Tensor& buf, ReduceOp op);
  virtual void host_all_to_all(const Tensor& send, const Tensor& recv);

 protected:
  Comm(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_, size_;
};

// One rank, no communication: every collective is a copy or a no-op. What a run outside any
// launcher uses, so the training loop has one code path.
std::unique_ptr<Comm> make_local_comm(Device device);

// MPI_COMM_WORLD of an MPI launch (mpirun / srun with PMIx); initialises MPI on first use. Throws
// when this build has no MPI (HSTU_WITH_MPI).
std::unique_ptr<Comm> make_mpi_comm();
// True when this build has the MPI backend.
bool mpi_available();

}  // namespace hstu::dist
