// test_abort.cpp — a failed rank ends the whole mpirun job with a non-zero status within a bounded
// time, while the other rank waits in a collective that would otherwise never finish. Rank 0 of
// the test job runs a child job (`mpirun -np 2` of this binary, filtered to MpiAbortChild) twice:
// rank 1 calling Comm::abort(3) (MPI_Abort), and rank 1 exiting with status 3 without finalising
// MPI (what an uncaught error in `hstu train` does). The child test is skipped unless
// HSTU_MPI_ABORT_CHILD names the mode.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "mpi/mpi_test_util.h"

extern char** environ;

namespace hstu::dist {
namespace {

TEST(MpiAbortChild, RankOneFails) {
  const char* mode = std::getenv("HSTU_MPI_ABORT_CHILD");
  if (!mode) GTEST_SKIP() << "runs only as the child job of MpiAbort.*";
  Comm& c = world();
  if (c.rank() == 1) {
    if (std::string(mode) == "abort") c.abort(3);
    std::_Exit(3);  // "exit": gone without MPI_Finalize, like an error reaching main()
  }
  c.barrier();  // waits for rank 1, which never comes: only the launcher can end this
  std::vector<double> x(4, 1.0);
  c.all_reduce(host_tensor(x), ReduceOp::kSum);
  FAIL() << "rank " << c.rank() << " passed a collective without rank 1";
}

// Runs the child job; returns {exit status, seconds}.
std::pair<int, double> run_child_job(const std::string& mode) {
  // The child's environment: this one without the variables of the enclosing mpirun job.
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e);
    bool outer = false;
    for (const char* p : {"OMPI_", "PMIX_", "OPAL_", "ORTE_", "PMI_", "HYDRA_"})
      outer = outer || kv.rfind(p, 0) == 0;
    if (!outer || kv.rfind("OMPI_ALLOW_RUN_AS_ROOT", 0) == 0) env.push_back(kv);
  }
  env.push_back("HSTU_MPI_ABORT_CHILD=" + mode);
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return {-1, 0};
  const std::vector<std::string> argv = {
      "timeout",         "60",        "mpirun", "-np", "2",
      "--oversubscribe", "--bind-to", "none",   self,  "--gtest_filter=MpiAbortChild.*",
      "--gtest_brief=1"};
  std::vector<char*> av, ev;
  for (const std::string& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  for (const std::string& e : env) ev.push_back(const_cast<char*>(e.c_str()));
  ev.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    execvpe(av[0], av.data(), ev.data());
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), s};
}

class MpiAbort : public testing::TestWithParam<const char*> {};

TEST_P(MpiAbort, FailedRankEndsTheJob) {
  if (std::getenv("HSTU_MPI_ABORT_CHILD")) GTEST_SKIP() << "inside the child job";
  Comm& c = world();
  if (c.rank() == 0) {
    const auto [status, seconds] = run_child_job(GetParam());
    EXPECT_NE(status, 0);
    EXPECT_NE(status, 124) << "the child job hung until timeout(1) ended it";
    EXPECT_NE(status, 127) << "timeout or mpirun not found";
    EXPECT_LT(seconds, 30);
    std::printf("child job (%s): exit status %d after %.1f s\n", GetParam(), status, seconds);
  }
  c.barrier();
}

INSTANTIATE_TEST_SUITE_P(Modes, MpiAbort, testing::Values("abort", "exit"));

}  // namespace
}  // namespace hstu::dist
