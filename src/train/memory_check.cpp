// memory_check.cpp — the memory plan against the host's or the GPU's memory (memory_check.h).
#include "train/memory_check.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/checked.h"
#include "core/device_info.h"
#include "core/error.h"
#include "dist/rank_plan.h"
#include "dist/sharding.h"

namespace hstu {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= (1 << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  return buf;
}

struct Part {
  int64_t bytes;
  std::string what;
};

}  // namespace

MemoryBudget host_memory_budget(const std::string& meminfo) {
  std::ifstream in(meminfo);
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return {kib * 1024, "MemAvailable in " + meminfo};
  }
  return {-1, meminfo + " has no MemAvailable"};
}

MemoryBudget cuda_memory_budget() {
  return {cuda_memory_free_bytes(), "free memory of the CUDA device (cudaMemGetInfo)"};
}

void check_plan_fits(const Config& cfg, const ModelMemory& m, int world, int rank,
                     const MemoryBudget& budget) {
  const TrainerArgs& ta = cfg.trainer;
  const dist::RankPlan plan = dist::plan_ranks(
      m, world, ta.model_parallel_tables,
      dist::parse_owner(ta.shard_owner, "TrainerArgs.shard_owner"),
      cfg.optimizer.sparse_optimizer_str,
      checked_mul(ta.table_budget_mb, int64_t{1} << 20, "TrainerArgs.table_budget_mb"));
  const std::string over = dist::table_budget_error(plan);
  HSTU_CHECK(over.empty(), over);
  const int64_t need = plan.rank_bytes.at(static_cast<size_t>(rank));
  if (budget.bytes < 0 || need <= budget.bytes) return;
  const NetworkArgs& n = cfg.network;
  std::vector<Part> parts;
  parts.push_back(
      {plan.activation_bytes,
       "activations of " + std::to_string(m.max_tokens) +
           " tokens (TrainerArgs.train_batch_size = " + std::to_string(ta.train_batch_size) +
           " / eval_batch_size = " + std::to_string(ta.eval_batch_size) +
           " x DatasetArgs.max_history_seqlen = " + std::to_string(cfg.dataset.max_history_seqlen) +
           (m.max_candidates > 0 ? " + max_num_candidates" : "") + ", NetworkArgs.hidden_size = " +
           std::to_string(n.hidden_size) + ", num_layers = " + std::to_string(n.num_layers) +
           ", num_attention_heads x kv_channels = " + std::to_string(n.num_attention_heads) +
           " x " + std::to_string(n.kv_channels) + ")"});
  parts.push_back({m.dense_bytes + m.compute_copy_bytes,
                   "dense parameters, gradients and Adam state (" + std::to_string(m.dense_floats) +
                       " floats: NetworkArgs.num_layers = " + std::to_string(n.num_layers) +
                       ", hidden_size = " + std::to_string(n.hidden_size) + ")"});
  for (const dist::TablePlacement& t : plan.tables) {
    const int64_t bytes = dist::placed_bytes(t, rank);
    parts.push_back(
        {bytes, "embedding table '" + t.table.name + "' (" + std::to_string(t.table.rows) +
                    " rows x NetworkArgs.hidden_size = " + std::to_string(n.hidden_size) +
                    ", + gradient and OptimizerArgs.sparse_optimizer_str = \"" +
                    cfg.optimizer.sparse_optimizer_str + "\" state" +
                    (t.sharded ? ", this rank's shard and window" : "") + ")"});
  }
  std::stable_sort(parts.begin(), parts.end(),
                   [](const Part& a, const Part& b) { return a.bytes > b.bytes; });
  std::ostringstream os;
  os << "the memory plan needs " << gib(need) << " on "
     << (m.device == Device::kCPU ? "the host" : "the GPU")
     << (world > 1 ? " (rank " + std::to_string(rank) + " of " + std::to_string(world) + ")" : "")
     << ", more than the " << gib(budget.bytes) << " available (" << budget.source
     << "); nothing was allocated. Its parts, largest first:";
  for (const Part& p : parts) os << "\n  " << gib(p.bytes) << "  " << p.what;
  os << "\nlower the fields of the largest part (`hstu plan` prints the whole plan)";
  HSTU_THROW(os.str());
}

void check_memory_plan(const Config& cfg, const ModelMemory& model, const dist::Comm& comm) {
  const MemoryBudget budget =
      model.device == Device::kCPU ? host_memory_budget() : cuda_memory_budget();
  check_plan_fits(cfg, model, comm.size(), comm.rank(), budget);
}

}  // namespace hstu
