// test_bootstrap_mpi.cpp — start-up under mpirun: read_world_env sees Open MPI's variables,
// open_comm gives the MPI communicator for CPU ranks, comm_bootstrap hands rank 0's payload (the
// NCCL id of a GPU job) to every rank, and a rank with another job hash fails every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "dist/bootstrap.h"
#include "dist/launch_env.h"
#include "dist/open_comm.h"
#include "mpi/mpi_test_util.h"

namespace hstu::dist {
namespace {

TEST(MpiStartup, EnvironmentAndOpenComm) {
  Comm& c = world();
  const WorldEnv env = read_world_env();
  EXPECT_EQ(env.source, "openmpi");
  EXPECT_EQ(env.rank, c.rank());
  EXPECT_EQ(env.world_size, c.size());
  const std::unique_ptr<Comm> opened = open_comm(env, Device::kCPU, {job_hash("cfg")});
  EXPECT_STREQ(opened->backend(), "mpi");
  EXPECT_EQ(opened->rank(), c.rank());
  EXPECT_EQ(opened->all_reduce_host(int64_t{1}, ReduceOp::kSum), c.size());
}

TEST(MpiStartup, BootstrapSendsRankZerosPayload) {
  Comm& c = world();
  std::vector<uint8_t> id(128, 0);
  if (c.rank() == 0)
    for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(255 - i);
  comm_bootstrap(c, id, job_hash("same config"));
  for (size_t i = 0; i < id.size(); ++i) ASSERT_EQ(id[i], static_cast<uint8_t>(255 - i));
}

TEST(MpiStartup, MismatchedJobHashFailsEveryRank) {
  Comm& c = world();
  std::vector<uint8_t> id(128, 0);
  const uint64_t h = job_hash(c.rank() == 1 ? "lr = 0.1" : "lr = 0.2");
  try {
    comm_bootstrap(c, id, h);
    FAIL() << "rank " << c.rank() << ": no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ranks disagree on the job hash"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hstu::dist
