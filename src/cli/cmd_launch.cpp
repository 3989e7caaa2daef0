// cmd_launch.cpp — `hstu launch --nproc-per-node N [options] -- COMMAND...`: starts N local ranks
// of COMMAND (torchrun-style environment for GPU ranks, mpirun for CPU ranks), prefixes their
// output with `[rank r] `, forwards signals, and exits non-zero as soon as any rank fails
// (src/dist/launcher.h).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/device_info.h"
#include "core/error.h"
#include "dist/launcher.h"

namespace hstu::cli {
namespace {

const char* kLaunchFooter = R"(Ranks:
  GPU ranks (one per GPU) are started directly with RANK, WORLD_SIZE, LOCAL_RANK,
  LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, as torchrun sets them; each picks GPU
  LOCAL_RANK and gets the NCCL id from rank 0 over MASTER_ADDR:MASTER_PORT.
  CPU ranks need MPI: they are started as `mpirun -np N --bind-to none --oversubscribe
  --tag-output COMMAND` (HSTU_MPIRUN names another mpirun).
  --spawn auto starts CPU ranks when COMMAND has `--device cpu`, GPU ranks when it has
  `--device cuda`, and otherwise GPU ranks when this machine has a GPU.

Failure: when a rank exits non-zero the others get SIGTERM, then SIGKILL after the grace
period, and hstu launch exits with the failed rank's status. SIGINT/SIGTERM/SIGHUP are passed
to every rank (a second one kills them).

Environment: the ranks inherit hstu launch's environment unchanged (NCCL_SOCKET_IFNAME,
NCCL_DEBUG, NCCL_NVLS_ENABLE, ...); OMP_NUM_THREADS, when unset, becomes cores / N.
HSTU_DIST_TIMEOUT (seconds, default 600) bounds every distributed wait of the ranks.

Examples:
  hstu launch --nproc-per-node 8 -- hstu train configs/bench-large.gin --device cuda
  hstu launch --nproc-per-node 2 -- hstu train configs/ml-1m.gin --device cpu)";

struct LaunchArgs {
  dist::LaunchSpec spec;
  std::string spawn = "auto";
};

bool has_device(const std::vector<std::string>& cmd, const std::string& device) {
  for (size_t i = 0; i < cmd.size(); ++i) {
    if (cmd[i] == "--device=" + device) return true;
    if (cmd[i] == "--device" && i + 1 < cmd.size() && cmd[i + 1] == device) return true;
  }
  return false;
}

// Whether the ranks are CPU ranks (started by mpirun).
bool cpu_ranks(const LaunchArgs& a) {
  if (a.spawn != "auto") return a.spawn == "mpirun";
  if (has_device(a.spec.command, "cpu")) return true;
  if (has_device(a.spec.command, "cuda")) return false;
  return cuda_device_count() == 0;
}

// True when `program` names an executable (a path, or a name found on PATH).
bool executable(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

int run_launch(const CLI::App& app, const LaunchArgs& a) {
  if (a.spec.nnodes > 1 && (a.spec.master_addr.empty() || a.spec.master_port == 0))
    return usage_error(app, "--nnodes " + std::to_string(a.spec.nnodes) +
                                " needs --master-addr and --master-port (node 0's address and a "
                                "free port there, the same on every node)");
  if (!cpu_ranks(a)) {
    std::fprintf(stderr, "hstu launch: %d rank(s) on this node, world size %d\n",
                 a.spec.nproc_per_node, a.spec.nproc_per_node * a.spec.nnodes);
    return dist::launch_direct(a.spec);
  }
  const std::string mpirun = dist::default_mpirun();
  HSTU_CHECK(executable(mpirun), "hstu launch: CPU ranks need MPI, and '", mpirun,
             "' is not an executable: install Open MPI (apt-get install openmpi-bin) or set "
             "HSTU_MPIRUN; GPU ranks: --spawn direct with --device cuda");
  return dist::launch_mpirun(a.spec, mpirun);
}

}  // namespace

void add_launch(CLI::App& hstu, Commands& commands) {
  CLI::App* app = hstu.add_subcommand(
      "launch", "start N ranks of a command on this node (torchrun-style, or mpirun for CPU)");
  app->footer(kLaunchFooter);
  auto a = std::make_shared<LaunchArgs>();
  app->add_option("--nproc-per-node", a->spec.nproc_per_node,
                  "ranks on this node (one per GPU for GPU ranks)")
      ->required()
      ->check(int_in(1, 4096));
  app->add_option("--nnodes", a->spec.nnodes, "nodes of the job (GPU ranks; default 1)")
      ->check(int_in(1, 65536));
  app->add_option("--node-rank", a->spec.node_rank, "this node's index in [0, nnodes)")
      ->check(int_in(0, 65535));
  app->add_option("--master-addr", a->spec.master_addr,
                  "rank 0's host (default 127.0.0.1; needed with --nnodes > 1)");
  app->add_option("--master-port", a->spec.master_port,
                  "rank 0's rendezvous port (default: a free port; needed with --nnodes > 1)")
      ->check(int_in(0, 65535));
  app->add_option("--spawn", a->spawn,
                  "auto | direct (GPU ranks, torchrun-style) | mpirun (CPU ranks)")
      ->check(CLI::IsMember({"auto", "direct", "mpirun"}));
  app->add_option("--grace-period", a->spec.grace_s,
                  "seconds between SIGTERM and SIGKILL when stopping ranks (default 10)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("command", a->spec.command, "the command each rank runs, after --")->required();
  commands.push_back({app, [app, a] {
                        if (a->spec.node_rank >= a->spec.nnodes)
                          return usage_error(
                              *app, "--node-rank " + std::to_string(a->spec.node_rank) +
                                        " is not below --nnodes " + std::to_string(a->spec.nnodes));
                        return run_launch(*app, *a);
                      }});
}

}  // namespace hstu::cli
