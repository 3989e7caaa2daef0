// launch_env.cpp — reads the torchrun / Open MPI / SLURM environment into a WorldEnv, checking
// every value and naming the variable of a bad one.
#include "dist/launch_env.h"

#include <cstdlib>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace hstu::dist {
namespace {

constexpr int kSlurmDefaultPortBase = 29500;  // + SLURM_JOB_ID % 1000 when MASTER_PORT is unset

// A variable's value, or nullptr when unset.
struct Vars {
  const EnvLookup& env;
  const char* get(const char* name) const { return env(name); }
  bool has(const char* name) const { return get(name) != nullptr; }

  // A non-negative integer (decimal digits only, at most INT_MAX).
  int parse(const char* name, const char* text) const {
    const std::string s(text);
    HSTU_CHECK(!s.empty(), "launch environment: ", name, " is set but empty");
    if (s[0] == '-' && s.size() > 1 && s.find_first_not_of("0123456789", 1) == std::string::npos)
      HSTU_THROW("launch environment: ", name, "=", s, " is negative");
    HSTU_CHECK(s.find_first_not_of("0123456789") == std::string::npos, "launch environment: ", name,
               "='", s, "' is not a non-negative integer");
    HSTU_CHECK(s.size() <= 10 && std::stoll(s) <= std::numeric_limits<int>::max(),
               "launch environment: ", name, "=", s, " is too large");
    return static_cast<int>(std::stoll(s));
  }
  int required(const char* name, const char* because) const {
    const char* v = get(name);
    HSTU_CHECK(v != nullptr, "launch environment: ", because, " but ", name, " is not");
    return parse(name, v);
  }
  int optional(const char* name, int fallback) const {
    const char* v = get(name);
    return v ? parse(name, v) : fallback;
  }
  int port(const char* name) const {
    const int p = parse(name, get(name));
    HSTU_CHECK(p >= 1 && p <= 65535, "launch environment: ", name, "=", p,
               " is not a TCP port (1..65535)");
    return p;
  }
};

void validate(const WorldEnv& e, const char* rank_var, const char* world_var, const char* local_var,
              const char* local_size_var) {
  HSTU_CHECK(e.world_size >= 1, "launch environment: ", world_var, "=", e.world_size,
             " must be at least 1");
  HSTU_CHECK(e.rank < e.world_size, "launch environment: ", rank_var, "=", e.rank, " is not below ",
             world_var, "=", e.world_size);
  HSTU_CHECK(e.local_world_size >= 1, "launch environment: ", local_size_var, "=",
             e.local_world_size, " must be at least 1");
  HSTU_CHECK(e.local_world_size <= e.world_size, "launch environment: ", local_size_var, "=",
             e.local_world_size, " exceeds ", world_var, "=", e.world_size);
  HSTU_CHECK(e.local_rank < e.local_world_size, "launch environment: ", local_var, "=",
             e.local_rank, " is not below ", local_size_var, "=", e.local_world_size);
}

WorldEnv from_torchrun(const Vars& v) {
  WorldEnv e;
  e.source = "torchrun";
  e.rank = v.required("RANK", "RANK is set");
  e.world_size = v.required("WORLD_SIZE", "RANK is set");
  // By hand (RANK and WORLD_SIZE only) a job is taken to be one node.
  e.local_rank = v.optional("LOCAL_RANK", e.rank);
  e.local_world_size = v.optional("LOCAL_WORLD_SIZE", e.world_size);
  validate(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  if (const char* a = v.get("MASTER_ADDR")) e.master_addr = a;
  if (v.has("MASTER_PORT")) e.master_port = v.port("MASTER_PORT");
  const char* agent_store = v.get("TORCHELASTIC_USE_AGENT_STORE");
  const bool port_taken = agent_store && std::string(agent_store) == "True";
  e.bootstrap_port = e.master_port > 0 && port_taken ? e.master_port + 1 : e.master_port;
  HSTU_CHECK(e.bootstrap_port <= 65535, "launch environment: MASTER_PORT=", e.master_port,
             " leaves no port above it for hstu's bootstrap; set HSTU_BOOTSTRAP_PORT");
  return e;
}

WorldEnv from_openmpi(const Vars& v) {
  WorldEnv e;
  e.source = "openmpi";
  e.rank = v.required("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_RANK is set");
  e.world_size = v.required("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK is set");
  e.local_rank = v.required("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_RANK is set");
  e.local_world_size = v.required("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_RANK is set");
  validate(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
           "OMPI_COMM_WORLD_LOCAL_SIZE");
  if (const char* a = v.get("MASTER_ADDR")) e.master_addr = a;
  if (v.has("MASTER_PORT")) e.master_port = v.port("MASTER_PORT");
  e.bootstrap_port = e.master_port;
  return e;
}

WorldEnv from_slurm(const Vars& v) {
  WorldEnv e;
  e.source = "slurm";
  e.rank = v.required("SLURM_PROCID", "SLURM_PROCID is set");
  const char* world_var = v.has("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  e.world_size = v.required(world_var, "SLURM_PROCID is set");
  e.local_rank = v.optional("SLURM_LOCALID", 0);
  const char* local_size_var = "SLURM_NTASKS_PER_NODE";
  if (v.has("SLURM_NTASKS_PER_NODE")) {
    e.local_world_size = v.parse("SLURM_NTASKS_PER_NODE", v.get("SLURM_NTASKS_PER_NODE"));
  } else {
    local_size_var =
        v.has("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    const char* list = v.get(local_size_var);
    e.local_world_size =
        list ? slurm_tasks_on_node(list, v.optional("SLURM_NODEID", 0), local_size_var)
             : e.world_size;
  }
  validate(e, "SLURM_PROCID", world_var, "SLURM_LOCALID", local_size_var);
  // Rank 0 runs on the first node of the step, so that node is the rendezvous unless
  // MASTER_ADDR says otherwise; the launch node is the last resort.
  if (const char* a = v.get("MASTER_ADDR")) {
    e.master_addr = a;
  } else if (const char* list = v.get("SLURM_STEP_NODELIST") ? v.get("SLURM_STEP_NODELIST")
                                                             : v.get("SLURM_JOB_NODELIST")) {
    e.master_addr = first_slurm_host(list);
  } else if (const char* ip = v.get("SLURM_LAUNCH_NODE_IPADDR")) {
    e.master_addr = ip;
  }
  if (v.has("MASTER_PORT"))
    e.master_port = v.port("MASTER_PORT");
  else  // distinct per job, so two jobs sharing a node do not collide
    e.master_port = kSlurmDefaultPortBase + v.optional("SLURM_JOB_ID", 0) % 1000;
  e.bootstrap_port = e.master_port;
  return e;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry: up to the first comma outside brackets.
  size_t end = 0;
  for (int depth = 0; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  std::string entry = nodelist.substr(0, end), host;
  // Each bracket range contributes its first value, zero padding kept: "n[07-09]" -> "n07".
  for (size_t i = 0; i < entry.size();) {
    if (entry[i] != '[') {
      host += entry[i++];
      continue;
    }
    const size_t close = entry.find(']', i);
    HSTU_CHECK(close != std::string::npos, "SLURM node list '", nodelist, "': unclosed '['");
    const std::string range = entry.substr(i + 1, close - i - 1);
    host += range.substr(0, range.find_first_of(",-"));
    i = close + 1;
  }
  HSTU_CHECK(!host.empty(), "SLURM node list '", nodelist, "' names no host");
  return host;
}

int slurm_tasks_on_node(const std::string& list, int node, const char* var_name) {
  // Comma-separated "count" or "count(xrepeat)" items.
  int seen = 0;
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t paren = item.find("(x");
    const std::string count = item.substr(0, paren);
    int repeat = 1;
    if (paren != std::string::npos) {
      HSTU_CHECK(item.back() == ')', "launch environment: ", var_name, "='", list,
                 "' is not a SLURM task list such as 4(x2),3");
      repeat = std::atoi(item.substr(paren + 2, item.size() - paren - 3).c_str());
    }
    HSTU_CHECK(
        !count.empty() && count.find_first_not_of("0123456789") == std::string::npos && repeat >= 1,
        "launch environment: ", var_name, "='", list, "' is not a SLURM task list such as 4(x2),3");
    seen += repeat;
    if (node < seen) return std::atoi(count.c_str());
  }
  HSTU_THROW("launch environment: ", var_name, "='", list, "' lists ", seen,
             " nodes, SLURM_NODEID=", node, " is not among them");
}

WorldEnv read_world_env(const EnvLookup& env) {
  const Vars v{env};
  WorldEnv e;
  if (v.has("RANK") || v.has("WORLD_SIZE")) {
    HSTU_CHECK(v.has("RANK"), "launch environment: WORLD_SIZE is set but RANK is not");
    e = from_torchrun(v);
  } else if (v.has("OMPI_COMM_WORLD_RANK")) {
    e = from_openmpi(v);
  } else if (v.has("SLURM_PROCID")) {
    e = from_slurm(v);
  }
  if (v.has("HSTU_BOOTSTRAP_PORT")) e.bootstrap_port = v.port("HSTU_BOOTSTRAP_PORT");
  return e;
}

WorldEnv read_world_env() {
  return read_world_env([](const char* name) { return std::getenv(name); });
}

std::string describe(const WorldEnv& e) {
  std::ostringstream os;
  os << "rank " << e.rank << " of " << e.world_size << " (local " << e.local_rank << " of "
     << e.local_world_size << "), " << e.source;
  if (!e.master_addr.empty() || e.master_port)
    os << ", rendezvous " << (e.master_addr.empty() ? "?" : e.master_addr) << ":"
       << e.bootstrap_port;
  return os.str();
}

}  // namespace hstu::dist
