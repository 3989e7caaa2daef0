// open_comm.cpp — picks and starts this rank's communicator from the launch environment.
#include "dist/open_comm.h"

#include <cstdlib>
#include <string>

#include "core/device_info.h"
#include "core/error.h"
#include "dist/bootstrap.h"
#include "dist/nccl_comm.h"
#include "dist/watchdog.h"

namespace hstu::dist {
namespace {

constexpr const char* kHashWhat =
    "the job hash (config + build): every rank must run the same hstu build with the same config";

std::unique_ptr<Comm> open_mpi(const WorldEnv& env, uint64_t hash) {
  HSTU_CHECK(env.source != "torchrun",
             "CPU ranks need an MPI launch, but this rank was started torchrun-style (RANK=",
             env.rank, ", WORLD_SIZE=", env.world_size,
             "): run `hstu launch --nproc-per-node N -- hstu train ... --device cpu` (which "
             "starts CPU ranks with mpirun) or `mpirun -np N hstu train ... --device cpu`");
  HSTU_CHECK(mpi_available(),
             "CPU ranks need MPI, and this hstu binary was built without it: install OpenMPI "
             "(apt-get install libopenmpi-dev openmpi-bin) and rebuild");
  std::unique_ptr<Comm> c = make_mpi_comm();
  HSTU_CHECK(c->size() == env.world_size && c->rank() == env.rank, "the launcher (", env.source,
             ") started rank ", env.rank, " of ", env.world_size, " but MPI sees rank ", c->rank(),
             " of ", c->size(),
             ": start CPU ranks with mpirun, or with srun --mpi=pmix under SLURM");
  c->check_same(hash, kHashWhat);
  return c;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) != "" && std::string(v) != "0";
}

}  // namespace

int gpu_for_rank(const WorldEnv& env, int visible) {
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  HSTU_CHECK(visible > 0, "rank ", env.rank, " is a GPU rank but sees no GPU",
             cvd ? " (CUDA_VISIBLE_DEVICES=" + std::string(cvd) + ")" : std::string());
  if (visible == 1) return 0;
  HSTU_CHECK(env.local_rank < visible, "LOCAL_RANK=", env.local_rank, " (", env.source,
             ") but this process sees ", visible, " GPUs",
             cvd ? " (CUDA_VISIBLE_DEVICES=" + std::string(cvd) + ")" : std::string(),
             ": start at most ", visible, " ranks per node (--nproc-per-node ", visible, ")");
  return env.local_rank;
}

std::unique_ptr<Comm> open_comm(const WorldEnv& env, Device device,
                                const OpenCommOptions& options) {
  const double timeout_s = options.timeout_s > 0 ? options.timeout_s : dist_timeout_seconds();
  const bool single_nccl = options.nccl_single_rank || env_flag("HSTU_DIST_FORCE_NCCL");
  if (device == Device::kCPU) {
    if (env.world_size == 1) return make_local_comm(device);
    return open_mpi(env, options.job_hash);
  }
  if (env.world_size == 1 && !single_nccl) return make_local_comm(device);

  require_nccl();  // before any rendezvous, so that every rank says why
  const int gpu = gpu_for_rank(env, cuda_device_count());
  NcclId id{};
  if (env.rank == 0) id = nccl_unique_id();
  if (env.world_size > 1) {
    if (env.mpi_launch() && mpi_available()) {
      std::unique_ptr<Comm> mpi = make_mpi_comm();  // MPI stays up until exit
      HSTU_CHECK(mpi->size() == env.world_size && mpi->rank() == env.rank, "mpirun started rank ",
                 env.rank, " of ", env.world_size, " but MPI sees rank ", mpi->rank(), " of ",
                 mpi->size());
      comm_bootstrap(*mpi, id, options.job_hash);
    } else {
      HSTU_CHECK(!env.master_addr.empty() && env.bootstrap_port > 0, "rank ", env.rank, " of ",
                 env.world_size, " (", env.source,
                 ") has no rendezvous: set MASTER_ADDR and MASTER_PORT (rank 0's host and a free "
                 "port), or start the job with `hstu launch`, torchrun or mpirun");
      tcp_bootstrap({env.master_addr, env.bootstrap_port, env.rank, env.world_size, timeout_s}, id,
                    options.job_hash);
    }
  }
  return make_nccl_comm(env.rank, env.world_size, id, gpu, timeout_s);
}

}  // namespace hstu::dist
