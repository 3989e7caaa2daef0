// test_launch_env.cpp — read_world_env for every launcher (torchrun, Open MPI, SLURM, none), their
// precedence, SLURM's node and task lists, and bad values (each error names the variable).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "dist/launch_env.h"

namespace hstu::dist {
namespace {

using Vars = std::map<std::string, std::string>;

WorldEnv read(const Vars& vars) {
  return read_world_env([&vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

// The message of the error read(vars) throws ("" when none).
std::string error_of(const Vars& vars) {
  try {
    read(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const Vars kTorchrun = {{"RANK", "5"},         {"WORLD_SIZE", "8"},
                        {"LOCAL_RANK", "1"},   {"LOCAL_WORLD_SIZE", "4"},
                        {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "29500"}};
const Vars kOpenMpi = {{"OMPI_COMM_WORLD_RANK", "3"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
const Vars kSlurm = {{"SLURM_PROCID", "6"},
                     {"SLURM_NTASKS", "8"},
                     {"SLURM_LOCALID", "2"},
                     {"SLURM_NTASKS_PER_NODE", "4"},
                     {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                     {"SLURM_JOB_ID", "12345"},
                     {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.9"}};

Vars merged(Vars a, const Vars& b) {
  a.insert(b.begin(), b.end());
  return a;
}

TEST(LaunchEnv, NoneIsOneRank) {
  const WorldEnv e = read({});
  EXPECT_EQ(e.source, "none");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_FALSE(e.distributed());
}

TEST(LaunchEnv, Torchrun) {
  const WorldEnv e = read(kTorchrun);
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "n1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.bootstrap_port, 29500);
  EXPECT_FALSE(e.mpi_launch());
  EXPECT_NE(describe(e).find("rank 5 of 8"), std::string::npos);
}

TEST(LaunchEnv, TorchrunAgentStoreMovesTheBootstrapPort) {
  const WorldEnv e = read(merged({{"TORCHELASTIC_USE_AGENT_STORE", "True"}}, kTorchrun));
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.bootstrap_port, 29501);
  const WorldEnv f = read(merged({{"HSTU_BOOTSTRAP_PORT", "40000"}}, kTorchrun));
  EXPECT_EQ(f.bootstrap_port, 40000);
}

TEST(LaunchEnv, TorchrunByHandIsOneNode) {
  const WorldEnv e = read({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "");
  EXPECT_EQ(e.master_port, 0);
}

TEST(LaunchEnv, OpenMpi) {
  const WorldEnv e = read(kOpenMpi);
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_TRUE(e.mpi_launch());
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
}

TEST(LaunchEnv, Slurm) {
  const WorldEnv e = read(kSlurm);
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "gpu07");      // the first host of the node list
  EXPECT_EQ(e.master_port, 29500 + 345);  // per job: 29500 + SLURM_JOB_ID % 1000
  EXPECT_EQ(e.bootstrap_port, e.master_port);
}

TEST(LaunchEnv, SlurmMasterFromEnvAndFallbacks) {
  Vars v = merged({{"MASTER_ADDR", "head"}, {"MASTER_PORT", "1234"}}, kSlurm);
  EXPECT_EQ(read(v).master_addr, "head");
  EXPECT_EQ(read(v).master_port, 1234);
  v = kSlurm;
  v.erase("SLURM_JOB_NODELIST");
  EXPECT_EQ(read(v).master_addr, "10.0.0.9");  // the launch node, last
  v["SLURM_STEP_NODELIST"] = "a1,b2";
  EXPECT_EQ(read(v).master_addr, "a1");
}

TEST(LaunchEnv, SlurmTasksPerNodeList) {
  Vars v = kSlurm;
  v.erase("SLURM_NTASKS_PER_NODE");
  v["SLURM_TASKS_PER_NODE"] = "4(x2),3";
  v["SLURM_NTASKS"] = "11";
  v["SLURM_NODEID"] = "2";
  v["SLURM_PROCID"] = "9";
  v["SLURM_LOCALID"] = "1";
  EXPECT_EQ(read(v).local_world_size, 3);
  v["SLURM_NODEID"] = "1";
  EXPECT_EQ(read(v).local_world_size, 4);
  EXPECT_EQ(slurm_tasks_on_node("2", 0, "X"), 2);
  EXPECT_EQ(slurm_tasks_on_node("1,2(x3)", 3, "X"), 2);
  EXPECT_THROW(slurm_tasks_on_node("2(x2)", 2, "X"), Error);
  EXPECT_THROW(slurm_tasks_on_node("a(x2)", 0, "X"), Error);
}

TEST(LaunchEnv, SlurmNodeLists) {
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("node1,node2"), "node1");
  EXPECT_EQ(first_slurm_host("gpu[07-09,12],cpu1"), "gpu07");
  EXPECT_EQ(first_slurm_host("gpu[3,5]"), "gpu3");
  EXPECT_EQ(first_slurm_host("rack[1-2]-n[001-004]"), "rack1-n001");
  EXPECT_THROW(first_slurm_host("gpu[1-2"), Error);
  EXPECT_THROW(first_slurm_host(""), Error);
}

// torchrun's variables win over Open MPI's and SLURM's; Open MPI's over SLURM's (an mpirun in
// an sbatch script inherits the batch step's SLURM_PROCID).
TEST(LaunchEnv, Precedence) {
  EXPECT_EQ(read(merged(merged(kTorchrun, kOpenMpi), kSlurm)).source, "torchrun");
  EXPECT_EQ(read(merged(kOpenMpi, kSlurm)).source, "openmpi");
  EXPECT_EQ(read(merged(kOpenMpi, kSlurm)).rank, 3);
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  auto with = [](Vars v, const std::string& k, const std::string& val) {
    v[k] = val;
    return v;
  };
  EXPECT_NE(error_of(with(kTorchrun, "RANK", "abc")).find("RANK='abc' is not a non-negative"),
            std::string::npos);
  EXPECT_NE(error_of(with(kTorchrun, "RANK", "-1")).find("RANK=-1 is negative"), std::string::npos);
  EXPECT_NE(error_of(with(kTorchrun, "RANK", "8")).find("RANK=8 is not below WORLD_SIZE=8"),
            std::string::npos);
  EXPECT_NE(error_of(with(kTorchrun, "WORLD_SIZE", "0")).find("WORLD_SIZE=0"), std::string::npos);
  EXPECT_NE(error_of(with(kTorchrun, "WORLD_SIZE", "")).find("WORLD_SIZE is set but empty"),
            std::string::npos);
  EXPECT_NE(error_of(with(kTorchrun, "LOCAL_RANK", "4"))
                .find("LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"),
            std::string::npos);
  EXPECT_NE(error_of(with(kTorchrun, "LOCAL_WORLD_SIZE", "9")).find("exceeds WORLD_SIZE=8"),
            std::string::npos);
  EXPECT_NE(error_of(with(kTorchrun, "MASTER_PORT", "70000")).find("MASTER_PORT=70000"),
            std::string::npos);
  EXPECT_NE(error_of(with(kTorchrun, "MASTER_PORT", "x1")).find("MASTER_PORT='x1'"),
            std::string::npos);
  EXPECT_NE(error_of(with(kTorchrun, "RANK", "99999999999")).find("too large"), std::string::npos);
  EXPECT_NE(error_of({{"WORLD_SIZE", "2"}}).find("WORLD_SIZE is set but RANK is not"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}}).find("WORLD_SIZE is not"), std::string::npos);
  EXPECT_NE(error_of(with(kOpenMpi, "OMPI_COMM_WORLD_RANK", "4"))
                .find("OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4"),
            std::string::npos);
  Vars no_local = kOpenMpi;
  no_local.erase("OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_NE(error_of(no_local).find("OMPI_COMM_WORLD_LOCAL_RANK is not"), std::string::npos);
  EXPECT_NE(error_of(with(kSlurm, "SLURM_PROCID", "8"))
                .find("SLURM_PROCID=8 is not below SLURM_NTASKS=8"),
            std::string::npos);
  EXPECT_NE(error_of(with(kSlurm, "SLURM_LOCALID", "x")).find("SLURM_LOCALID='x'"),
            std::string::npos);
  EXPECT_NE(error_of(with(kTorchrun, "HSTU_BOOTSTRAP_PORT", "0")).find("HSTU_BOOTSTRAP_PORT=0"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu::dist
