// launch_env.h — who this process is in a distributed job, read from the environment its launcher
// set: torchrun / `hstu launch` (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), Open MPI's mpirun (OMPI_COMM_WORLD_*) or SLURM's srun (SLURM_PROCID, ...).
//
// Precedence: torchrun's variables, then Open MPI's, then SLURM's. (Open MPI before SLURM because
// an `mpirun` inside an sbatch script hands every rank the batch step's stale SLURM_PROCID, while
// OMPI_COMM_WORLD_RANK is set per rank by mpirun itself.) Every value is checked: a non-numeric,
// negative or out-of-range value is an hstu::Error naming the variable and its value.
#pragma once

#include <functional>
#include <string>

namespace hstu::dist {

struct WorldEnv {
  int rank = 0;  // global rank in [0, world_size)
  int world_size = 1;
  int local_rank = 0;  // rank on this node: the GPU index of a CUDA rank
  int local_world_size = 1;
  std::string master_addr;  // host of rank 0 ("" when the launcher names none, e.g. mpirun)
  int master_port = 0;      // 0 when none
  // The port the NCCL-id bootstrap listens on (bootstrap.h): HSTU_BOOTSTRAP_PORT when set; else
  // MASTER_PORT + 1 under torchrun, whose agent already serves its own store on MASTER_PORT; else
  // MASTER_PORT.
  int bootstrap_port = 0;
  std::string source = "none";  // "torchrun" | "openmpi" | "slurm" | "none"

  bool distributed() const { return world_size > 1; }
  // True when mpirun started this process (MPI can bootstrap it).
  bool mpi_launch() const { return source == "openmpi"; }
};

// Looks a variable up; nullptr when unset (std::getenv's contract).
using EnvLookup = std::function<const char*(const char*)>;

// The job as this process's environment describes it; a plain process is rank 0 of 1 ("none").
WorldEnv read_world_env();
// The same from any lookup (tests).
WorldEnv read_world_env(const EnvLookup& env);

// One line describing `e`, e.g. "rank 1 of 4 (local 1 of 4), torchrun, rendezvous 10.0.0.1:29500".
std::string describe(const WorldEnv& e);

// The first host of a SLURM node list: "gpu[07-09,12],cpu1" -> "gpu07".
std::string first_slurm_host(const std::string& nodelist);
// The task count of node `node` in a SLURM tasks-per-node list: "4(x2),3" -> 4, 4, 3 for 0, 1, 2.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node, const char* var_name);

}  // namespace hstu::dist
