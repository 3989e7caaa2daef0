// launcher.h — what `hstu launch` does: start the ranks of a job on this node, prefix each line
// they print with `[rank r] `, forward SIGINT/SIGTERM/SIGHUP to them, and when one fails stop the
// others (SIGTERM, then SIGKILL after a grace period) and report the failed rank's exit status.
//
// GPU ranks are started directly, torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT (and GROUP_RANK, the node) set in each child's environment, which is
// otherwise the launcher's own, untouched (NCCL_* variables included). CPU ranks need MPI, so they
// are started by mpirun (-np N --bind-to none --oversubscribe --tag-output), whose per-rank tags
// are rewritten to the same `[rank r] ` prefix.
//
// Each child runs in its own process group with stdin from /dev/null; signals go to the whole
// group, so a rank's own children stop with it. When OMP_NUM_THREADS is unset, each rank gets
// max(1, cores / ranks per node) threads.
#pragma once

#include <string>
#include <vector>

namespace hstu::dist {

struct LaunchSpec {
  std::vector<std::string> command;  // the program and its arguments
  int nproc_per_node = 1;
  int nnodes = 1;           // direct launches only
  int node_rank = 0;        // this node's index in [0, nnodes)
  std::string master_addr;  // rank 0's host ("": 127.0.0.1, one node only)
  int master_port = 0;      // 0: a free port of this host (one node only)
  double grace_s = 10;      // from SIGTERM to SIGKILL when stopping ranks
};

// Starts the ranks as direct children; returns the status `hstu launch` exits with: 0 when every
// rank exited 0, else the first failed rank's status (128 + signal for a rank killed by one), or
// 128 + the signal the launcher itself got.
int launch_direct(const LaunchSpec& spec);
// Starts the ranks under `mpirun` (the path or name of Open MPI's launcher); same status.
int launch_mpirun(const LaunchSpec& spec, const std::string& mpirun);
// Open MPI's launcher: HSTU_MPIRUN, else the one this build was configured with, else `mpirun`.
std::string default_mpirun();
// A TCP port that was free on this host a moment ago.
int free_tcp_port();
// One line of `mpirun --tag-output`: "[1,3]<stdout>:text" -> "[rank 3] text"; other lines are
// returned unchanged.
std::string untag_mpirun_line(const std::string& line);

}  // namespace hstu::dist
