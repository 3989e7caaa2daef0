// test_launch.cpp — `hstu launch` run as a user runs it (HSTU_BIN), with shell commands as ranks:
//   - every rank gets RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT and its
//     lines (stdout and stderr) come back prefixed `[rank r] `; success exits 0;
//   - one rank exiting 3 ends the job quickly with status 3 and the other ranks stopped (a rank
//     that ignores SIGTERM is killed after the grace period);
//   - SIGTERM to the launcher reaches every rank;
//   - CPU ranks run under mpirun with the same prefixes and failure rule;
//   - usage errors exit 2.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>

namespace hstu {
namespace {

struct Outcome {
  int status = -1;
  std::string out;  // stdout and stderr together
  double seconds = 0;
};

Outcome launch(const std::string& args) {
  Outcome r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p =
      popen((std::string(std::getenv("HSTU_BIN")) + " launch " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

bool has(const std::string& out, const std::string& pattern) {
  return std::regex_search(out, std::regex(pattern));
}

TEST(Launch, RanksGetTheirEnvironmentAndPrefixedOutput) {
  const Outcome r = launch(
      "--nproc-per-node 3 --spawn direct -- sh -c "
      "'echo \"env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR:$MASTER_PORT\"; "
      "echo \"to stderr $RANK\" >&2'");
  EXPECT_EQ(r.status, 0) << r.out;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string k = std::to_string(rank);
    EXPECT_TRUE(has(
        r.out, "(^|\n)\\[rank " + k + "\\] env " + k + " 3 " + k + " 3 127\\.0\\.0\\.1:[0-9]+\n"))
        << r.out;
    EXPECT_TRUE(has(r.out, "(^|\n)\\[rank " + k + "\\] to stderr " + k + "\n")) << r.out;
  }
  // One rendezvous port for all.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("127\\.0\\.0\\.1:([0-9]+)")));
  EXPECT_EQ(r.out.find("127.0.0.1:"), r.out.find("127.0.0.1:" + m[1].str()));
}

TEST(Launch, FixedPortAndNodeRank) {
  const Outcome r = launch(
      "--nproc-per-node 2 --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 --master-port 29999 "
      "--spawn direct -- sh -c 'echo \"$RANK of $WORLD_SIZE local $LOCAL_RANK at "
      "$MASTER_ADDR:$MASTER_PORT\"'");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "\\[rank 2\\] 2 of 4 local 0 at 10\\.1\\.2\\.3:29999")) << r.out;
  EXPECT_TRUE(has(r.out, "\\[rank 3\\] 3 of 4 local 1 at 10\\.1\\.2\\.3:29999")) << r.out;
}

// Rank 1 fails after 0.5 s (the others have set their traps by then); they would sleep 60 s: the
// job ends within seconds with status 3.
TEST(Launch, OneFailedRankEndsTheJob) {
  const Outcome r = launch(
      "--nproc-per-node 3 --spawn direct -- sh -c "
      "'if [ $RANK = 1 ]; then sleep 0.5; echo failing; exit 3; fi; "
      "trap \"echo stopped; exit 143\" TERM; sleep 60 & wait'");
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_LT(r.seconds, 15) << r.out;
  EXPECT_TRUE(has(r.out, "\\[rank 1\\] failing")) << r.out;
  EXPECT_TRUE(has(r.out, "\\[rank 0\\] stopped")) << r.out;
  EXPECT_TRUE(has(r.out, "\\[rank 2\\] stopped")) << r.out;
  EXPECT_TRUE(has(r.out, "rank 1 failed \\(exit status 3\\); stopped ranks: 0, 2")) << r.out;
}

// A rank that ignores SIGTERM is killed after the grace period.
TEST(Launch, StubbornRankIsKilledAfterTheGracePeriod) {
  const Outcome r = launch(
      "--nproc-per-node 2 --grace-period 0.5 --spawn direct -- sh -c "
      "'if [ $RANK = 0 ]; then sleep 0.5; exit 4; fi; trap \"\" TERM; while :; do sleep 0.1; "
      "done'");
  EXPECT_EQ(r.status, 4) << r.out;
  EXPECT_GE(r.seconds, 0.9) << r.out;  // 0.5 s before the failure, 0.5 s of grace
  EXPECT_LT(r.seconds, 10) << r.out;
  EXPECT_TRUE(has(r.out, "stopped ranks: 1")) << r.out;
}

TEST(Launch, SignalsReachTheRanks) {
  const std::string cmd = std::string(std::getenv("HSTU_BIN")) +
                          " launch --nproc-per-node 2 --spawn direct -- sh -c "
                          "'trap \"echo rank $RANK got TERM; exit 143\" TERM; sleep 60 & wait'";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string out = "/tmp/hstu_launch_signal_" + std::to_string(getpid()) + ".txt";
    execl("/bin/sh", "sh", "-c", ("exec " + cmd + " > " + out + " 2>&1").c_str(), nullptr);
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  kill(pid, SIGTERM);
  int st = 0;
  const auto t0 = std::chrono::steady_clock::now();
  waitpid(pid, &st, 0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 128 + SIGTERM);
  const std::string path = "/tmp/hstu_launch_signal_" + std::to_string(pid) + ".txt";
  FILE* f = fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  fclose(f);
  std::remove(path.c_str());
  EXPECT_TRUE(has(out, "\\[rank 0\\] rank 0 got TERM")) << out;
  EXPECT_TRUE(has(out, "\\[rank 1\\] rank 1 got TERM")) << out;
}

TEST(Launch, CpuRanksRunUnderMpirun) {
  if (system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  Outcome r = launch("--nproc-per-node 2 --spawn mpirun -- sh -c 'echo mpi $OMPI_COMM_WORLD_RANK'");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "CPU ranks run under MPI: \\S*mpi(run|exec) -np 2")) << r.out;
  EXPECT_TRUE(has(r.out, "(^|\n)\\[rank 0\\] mpi 0\n")) << r.out;
  EXPECT_TRUE(has(r.out, "(^|\n)\\[rank 1\\] mpi 1\n")) << r.out;
  r = launch(
      "--nproc-per-node 2 --spawn mpirun -- sh -c "
      "'if [ $OMPI_COMM_WORLD_RANK = 1 ]; then exit 3; fi; sleep 60'");
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_LT(r.seconds, 20) << r.out;
}

TEST(Launch, UsageErrors) {
  EXPECT_EQ(launch("-- true").status, 2);  // --nproc-per-node is required
  EXPECT_EQ(launch("--nproc-per-node 0 -- true").status, 2);
  EXPECT_EQ(launch("--nproc-per-node 2").status, 2);  // no command
  EXPECT_EQ(launch("--nproc-per-node 2 --spawn bogus -- true").status, 2);
  const Outcome r = launch("--nproc-per-node 2 --nnodes 2 --spawn direct -- true");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "--master-addr")) << r.out;
  EXPECT_EQ(launch("--nproc-per-node 1 --nnodes 2 --node-rank 2 --master-addr a --master-port 1 "
                   "--spawn direct -- true")
                .status,
            2);
}

}  // namespace
}  // namespace hstu
