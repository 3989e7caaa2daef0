// open_comm.h — the one call that turns a launch environment into this rank's communicator:
// local for a 1-rank job, MPI for CPU ranks, NCCL (bootstrapped over MPI or TCP) for GPU ranks.
//
//   const dist::WorldEnv env = dist::read_world_env();
//   auto comm = dist::open_comm(env, Device::kCUDA, {.job_hash = dist::job_hash(config_text)});
//   ... each step: comm->all_reduce(grads, ReduceOp::kSum, stream); dist::heartbeat(step);
#pragma once

#include <cstdint>
#include <memory>

#include "dist/comm.h"
#include "dist/launch_env.h"

namespace hstu::dist {

struct OpenCommOptions {
  // job_hash(config text) (bootstrap.h): compared between ranks at start-up; a mismatch is an
  // error on every rank naming the ranks that differ.
  uint64_t job_hash = 0;
  // A 1-rank CUDA job on a real NCCL communicator instead of the local one (to measure or test
  // the NCCL path on one GPU). Also HSTU_DIST_FORCE_NCCL=1.
  bool nccl_single_rank = false;
  // Deadline of start-up and of the watchdog; <= 0: dist_timeout_seconds() (HSTU_DIST_TIMEOUT).
  double timeout_s = 0;
};

// This rank's communicator for `device`:
//   world 1                 -> the local comm (no library), unless nccl_single_rank on CUDA;
//   kCPU, world > 1         -> MPI_COMM_WORLD; the job must be an MPI launch (mpirun, srun with
//                              PMIx, or `hstu launch`, which runs mpirun for CPU ranks); its MPI
//                              rank and size must match `env`;
//   kCUDA                   -> NCCL on GPU env.local_rank (made current; a process that sees one
//                              GPU uses it), the id from rank 0 over MPI (mpirun) or TCP
//                              (MASTER_ADDR, WorldEnv::bootstrap_port).
// Every rank's job hash is checked equal. Throws hstu::Error naming the variable, GPU count or
// ranks at fault.
std::unique_ptr<Comm> open_comm(const WorldEnv& env, Device device,
                                const OpenCommOptions& options = {});

// The CUDA device a GPU rank of `env` uses among `visible` GPUs: its local rank, or 0 when the
// process sees exactly one GPU (SLURM --gpus-per-task=1, or CUDA_VISIBLE_DEVICES set per rank).
// Throws naming LOCAL_RANK and the count when there is no such GPU.
int gpu_for_rank(const WorldEnv& env, int visible);

}  // namespace hstu::dist
