// test_watchdog.cpp — the watchdog ends a rank (death tests: the process exits non-zero with a
// `[rank r]` message naming the last step) when the heartbeat stops or the communicator reports an
// error, calls the abort hook first, and leaves a rank that keeps beating alone; and
// HSTU_DIST_TIMEOUT parsing. Also open_comm's choices that need no second rank.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.h"
#include "dist/open_comm.h"
#include "dist/watchdog.h"

namespace hstu::dist {
namespace {

using namespace std::chrono_literals;

TEST(WatchdogDeathTest, SilenceEndsTheRank) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        heartbeat(41);
        Watchdog w(3, 0.3, {nullptr, [] { std::fprintf(stderr, "abort hook ran\n"); }}, 0.05);
        std::this_thread::sleep_for(5s);  // a hung collective
      },
      testing::ExitedWithCode(kWatchdogExitCode),
      R"(\[rank 3\] hstu watchdog: no progress .*last finished step 41(.|\n)*abort hook ran)");
}

TEST(WatchdogDeathTest, AsyncErrorEndsTheRank) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::atomic<int> polls{0};
        Watchdog w(1, 100, {[&polls] { return ++polls > 3 ? "remote rank died" : ""; }, nullptr},
                   0.02);
        std::this_thread::sleep_for(5s);
      },
      testing::ExitedWithCode(kWatchdogExitCode), R"(\[rank 1\] hstu watchdog: remote rank died)");
}

TEST(Watchdog, HeartbeatsKeepTheRankAlive) {
  std::atomic<int> aborts{0};
  {
    Watchdog w(0, 0.3, {nullptr, [&aborts] { ++aborts; }}, 0.02);
    for (int step = 0; step < 10; ++step) {
      std::this_thread::sleep_for(100ms);
      heartbeat(step);
    }
  }  // stopped without firing
  EXPECT_EQ(aborts.load(), 0);
  EXPECT_EQ(last_heartbeat_step(), 9);
}

TEST(Watchdog, TimeoutFromTheEnvironment) {
  unsetenv("HSTU_DIST_TIMEOUT");
  EXPECT_EQ(dist_timeout_seconds(), 600.0);
  setenv("HSTU_DIST_TIMEOUT", "2.5", 1);
  EXPECT_EQ(dist_timeout_seconds(), 2.5);
  for (const char* bad : {"0", "-3", "abc", "5s", ""}) {
    setenv("HSTU_DIST_TIMEOUT", bad, 1);
    EXPECT_THROW(dist_timeout_seconds(), Error) << bad;
  }
  unsetenv("HSTU_DIST_TIMEOUT");
}

TEST(OpenComm, OneRankIsLocal) {
  const WorldEnv one;
  EXPECT_STREQ(open_comm(one, Device::kCPU)->backend(), "local");
  EXPECT_EQ(open_comm(one, Device::kCPU)->size(), 1);
}

TEST(OpenComm, CpuRanksNeedAnMpiLaunch) {
  WorldEnv e;
  e.source = "torchrun";
  e.rank = 1;
  e.world_size = 2;
  e.local_rank = 1;
  e.local_world_size = 2;
  try {
    open_comm(e, Device::kCPU);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("CPU ranks need an MPI launch"), std::string::npos);
    EXPECT_NE(std::string(err.what()).find("mpirun -np N"), std::string::npos);
  }
}

TEST(OpenComm, GpuChoice) {
  WorldEnv e;
  e.world_size = 8;
  e.local_world_size = 8;
  e.rank = e.local_rank = 3;
  EXPECT_EQ(gpu_for_rank(e, 8), 3);
  EXPECT_EQ(gpu_for_rank(e, 1), 0);  // one GPU per task (srun --gpus-per-task=1)
  try {
    gpu_for_rank(e, 2);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("LOCAL_RANK=3"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("sees 2 GPUs"), std::string::npos) << err.what();
  }
  EXPECT_THROW(gpu_for_rank(e, 0), Error);
}

#if !defined(HSTU_WITH_NCCL)
TEST(OpenComm, GpuRanksWithoutNcclSayWhy) {
  WorldEnv e;
  e.world_size = 2;
  e.local_world_size = 2;
  e.source = "torchrun";
  try {
    open_comm(e, Device::kCUDA);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("without"), std::string::npos) << err.what();
  }
}
#endif

}  // namespace
}  // namespace hstu::dist
