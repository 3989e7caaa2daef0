// rank_plan.cpp — per-rank memory plans and per-step traffic of W ranks (rank_plan.h).
#include "dist/rank_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/checked.h"
#include "core/error.h"

namespace hstu::dist {
namespace {

std::string mib(int64_t bytes) {
  char s[48];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return s;
}

// MiB, with GiB beside it from 1 GiB on.
std::string size(int64_t bytes) {
  std::string s = mib(bytes);
  if (bytes >= (int64_t{1} << 30)) {
    char g[48];
    std::snprintf(g, sizeof g, " (%.2f GiB)", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
    s += g;
  }
  return s;
}

// KiB below 1 MiB (the traffic of small configs), else MiB.
std::string traffic(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return size(bytes);
  char s[48];
  std::snprintf(s, sizeof s, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  return s;
}

// Bytes of `count` x (W-1)/W, the share of evenly spread ids that other ranks own.
int64_t remote(int64_t bytes, int world) {
  return bytes / world * (world - 1) + bytes % world * (world - 1) / world;
}

// Each line of `text` indented by two more spaces.
std::string indent(const std::string& text) {
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const size_t stop = end == std::string::npos ? text.size() : end + 1;
    out += "  " + text.substr(at, stop - at);
    at = stop;
  }
  return out;
}

const TablePlacement* find_table(const RankPlan& p, const std::string& name) {
  for (const TablePlacement& t : p.tables)
    if (t.table.name == name) return &t;
  return nullptr;
}

// The rank list "rank 0: X, rank 1: Y, ..." (min / max past 16 ranks).
std::string per_rank(const std::vector<int64_t>& bytes) {
  std::ostringstream os;
  if (bytes.size() <= 16) {
    for (size_t r = 0; r < bytes.size(); ++r)
      os << (r ? "\n                    " : "") << "rank " << r << ": " << size(bytes[r]);
  } else {
    const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
    os << "min " << size(*lo) << " (rank " << lo - bytes.begin() << "), max " << size(*hi)
       << " (rank " << hi - bytes.begin() << ")";
  }
  return os.str();
}

}  // namespace

RankPlan plan_ranks(const ModelMemory& model, int world,
                    const std::vector<std::string>& model_parallel, OwnerKind owner,
                    const std::string& sparse_optimizer, int64_t table_budget) {
  HSTU_CHECK(world >= 1, "plan: world size ", world, " must be at least 1");
  HSTU_CHECK(model.act != DType::kF64, "plan: f64 models are not planned (tables are f32)");
  RankPlan p;
  p.model = model;
  p.world = world;
  p.owner = owner;
  p.sparse_optimizer = sparse_optimizer;
  const auto sharded = [&](const std::string& name) {
    return world > 1 &&
           std::find(model_parallel.begin(), model_parallel.end(), name) != model_parallel.end();
  };
  int64_t common = model.dense_bytes + model.compute_copy_bytes;
  int64_t single = model.dense_bytes + model.compute_copy_bytes + model.activation_bytes;
  p.gradient_bytes = checked_mul(model.dense_floats, model.param_elem_bytes, "dense gradients");
  std::vector<int64_t> per_rank_tables(static_cast<size_t>(world), 0);
  int64_t replicated_tables = 0;
  for (const PlannedTable& t : model.tables) {
    TablePlacement tp;
    tp.table = t;
    tp.sharded = t.shardable && sharded(t.name);
    tp.whole_bytes = t.dynamic_bytes >= 0
                         ? t.dynamic_bytes
                         : embedding_table_bytes(t.rows, model.dim, sparse_optimizer);
    single = checked_add(single, tp.whole_bytes, "single-rank bytes");
    if (tp.sharded) {
      if (t.dynamic_bytes >= 0) {  // sharded by key: each rank its share of the slots
        tp.dynamic_rank_bytes = dynamic_table_bytes(t.dynamic, world);
        for (int64_t& b : per_rank_tables) b += tp.dynamic_rank_bytes;
      } else {
        tp.shards =
            describe_shards(t.rows, model.dim, world, sparse_optimizer, owner, t.max_unique);
        for (const ShardSize& z : tp.shards)
          per_rank_tables[static_cast<size_t>(z.rank)] += z.table_bytes + z.window_bytes;
      }
      // Forward: the window's ids out, their rows back; backward: the gradient rows out. A rank
      // also serves the other ranks' requests, on average as many rows as it asks for.
      const int64_t ids = checked_mul(t.max_unique, 4, "window id bytes");
      const int64_t rows = checked_mul(ids, model.dim, "window row bytes");
      tp.all_to_all_bytes = remote(ids, world) + 2 * remote(rows, world);
      p.all_to_all_bytes += tp.all_to_all_bytes;
    } else {
      common = checked_add(common, tp.whole_bytes, "replicated table bytes");
      replicated_tables += tp.whole_bytes;
      // all_reduce_gradients: the f32 gradient [rows, dim] and the u8 touched flags [rows].
      p.gradient_bytes +=
          checked_add(checked_mul(checked_mul(t.rows, model.dim, "grad"), 4, "grad"), t.rows,
                      "table gradient bytes");
    }
    p.tables.push_back(std::move(tp));
  }
  // A sharded dense item table is evaluated shard by shard: no full-catalogue buffers
  // (retrieval). A dynamic one assembles the catalogue on every rank and keeps them.
  const TablePlacement* item = find_table(p, "item");
  p.activation_bytes = item && item->sharded && item->shards.size() > 0
                           ? model.step_activation_bytes
                           : model.activation_bytes;
  common += p.activation_bytes;
  for (int r = 0; r < world; ++r) {
    p.rank_bytes.push_back(common + per_rank_tables[static_cast<size_t>(r)]);
    p.rank_table_bytes.push_back(per_rank_tables[static_cast<size_t>(r)] + replicated_tables);
  }
  p.table_budget = table_budget;
  p.single_rank_bytes = single;
  p.all_reduce_bytes = world > 1 ? remote(p.gradient_bytes, world) * 2 : 0;
  return p;
}

int64_t placed_bytes(const TablePlacement& t, int rank) {
  if (!t.sharded) return t.whole_bytes;
  if (t.shards.empty()) return t.dynamic_rank_bytes;
  const ShardSize& z = t.shards.at(static_cast<size_t>(rank));
  return z.table_bytes + z.window_bytes;
}

std::string table_budget_error(const RankPlan& p) {
  if (p.table_budget <= 0) return "";
  const auto worst = std::max_element(p.rank_table_bytes.begin(), p.rank_table_bytes.end());
  if (*worst <= p.table_budget) return "";
  const int rank = static_cast<int>(worst - p.rank_table_bytes.begin());
  std::ostringstream os;
  os << "the embedding tables of rank " << rank << " of " << p.world << " need " << mib(*worst)
     << ", more than TrainerArgs.table_budget_mb = " << mib(p.table_budget) << ":";
  for (const TablePlacement& t : p.tables) {
    if (t.sharded) {
      os << "\n  '" << t.table.name << "' shard + window " << mib(placed_bytes(t, rank))
         << " (whole " << mib(t.whole_bytes) << ", sharded over " << p.world << " ranks)";
    } else {
      os << "\n  '" << t.table.name << "' replicated " << mib(t.whole_bytes)
         << (t.table.name == "item" ? " (not sharded: TrainerArgs.model_parallel_tables lacks "
                                      "\"item\", or one rank)"
                                    : "");
    }
  }
  os << "\nshard the large tables over more ranks, or raise TrainerArgs.table_budget_mb "
        "(`hstu plan --world-size N` prints each rank's tables)";
  return os.str();
}

std::string describe_rank_plan(const RankPlan& p) {
  const ModelMemory& m = p.model;
  std::ostringstream os;
  if (p.world == 1)
    os << "memory plan (" << device_name(m.device) << ", activations " << dtype_name(m.act)
       << "):\n";
  else
    os << "memory plan per rank (" << device_name(m.device) << ", activations " << dtype_name(m.act)
       << ", " << p.world << " ranks, owner " << owner_name(p.owner) << "):\n";
  os << "  dense parameters  " << m.dense_tensors << " tensors, " << m.dense_floats
     << " floats x4 (param, grad, m, v) = " << mib(m.dense_bytes) << "\n";
  if (m.compute_copy_bytes > 0)
    os << "  compute copy      " << m.dense_floats << " x " << dtype_name(m.act) << " = "
       << mib(m.compute_copy_bytes) << "\n";

  bool any_sharded = false;
  for (const TablePlacement& t : p.tables) any_sharded = any_sharded || t.sharded;
  if (m.task == "ranking" && !any_sharded) {  // RankingModel::describe_plan's one line
    auto rows = [&](const char* name) {
      const TablePlacement* t = find_table(p, name);
      return t ? t->table.rows : 0;
    };
    int64_t bytes = 0;
    for (const TablePlacement& t : p.tables) bytes += t.whole_bytes;
    os << "  embedding tables  item [" << rows("item") << "], action [" << rows("action")
       << "], contextual [" << rows("contextual") << "] x " << m.dim
       << " + grad + optimizer = " << mib(bytes) << "\n";
  } else {
    for (const TablePlacement& t : p.tables) {
      char label[32];
      std::snprintf(label, sizeof label, "  %-18s", (t.table.name + " embedding").c_str());
      os << label << "[" << t.table.rows << ", " << m.dim << "] ";
      if (!t.table.dynamic_formula.empty()) {
        os << t.table.dynamic_formula << " = " << mib(t.whole_bytes) << "\n";
        if (t.sharded)
          os << "                    sharded by key over " << p.world
             << " ranks: " << mib(t.dynamic_rank_bytes)
             << " per rank (its share of the slots + window + "
             << "catalogue)\n";
        continue;
      }
      if (!t.sharded) {
        os << "+ grad + optimizer = " << mib(t.whole_bytes) << "\n";
        continue;
      }
      os << "sharded row-wise over " << p.world << " ranks (whole: " << size(t.whole_bytes)
         << "); per rank its shard + grad + optimizer (" << p.sparse_optimizer << "):\n"
         << indent(format_shards(t.shards));
      os << "    window: " << t.table.max_unique << " rows = " << t.table.max_unique_formula
         << ", the most distinct ids of one step\n";
    }
  }
  os << "  activations       " << m.layers << " layers, " << m.max_tokens << " tokens";
  if (m.task == "ranking") os << " / " << m.max_candidates << " candidates";
  os << " max = " << mib(p.activation_bytes) << "\n";
  if (m.task == "retrieval" && p.activation_bytes != m.step_activation_bytes)
    os << "                    (of which the evaluation's normalised item table "
       << mib(p.activation_bytes - m.step_activation_bytes) << ")\n";
  os << "  total             " << per_rank(p.rank_bytes) << "\n";
  if (p.table_budget > 0) {
    const int64_t worst = *std::max_element(p.rank_table_bytes.begin(), p.rank_table_bytes.end());
    os << "  table budget      " << mib(p.table_budget) << " per rank (TrainerArgs.table_budget_mb)"
       << (worst <= p.table_budget ? ": fits" : ": EXCEEDS the budget") << "; tables "
       << per_rank(p.rank_table_bytes) << "\n";
    for (const TablePlacement& t : p.tables) {
      if (t.whole_bytes <= p.table_budget) continue;
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, "%.2fx",
                    static_cast<double>(t.whole_bytes) / static_cast<double>(p.table_budget));
      os << "                    '" << t.table.name << "' whole is " << mib(t.whole_bytes) << " = "
         << ratio << " the budget" << (t.sharded ? ": sharded over the ranks" : ": NOT sharded")
         << "\n";
    }
  }
  if (p.world > 1) {
    os << "  one rank (W = 1)  " << size(p.single_rank_bytes) << " (every table whole)\n";
    os << "per step, bytes each rank sends:\n";
    for (const TablePlacement& t : p.tables) {
      if (!t.sharded) continue;
      char label[32];
      std::snprintf(label, sizeof label, "  %-18s", (t.table.name + " all-to-all").c_str());
      const int64_t ids = remote(t.table.max_unique * 4, p.world);
      const int64_t rows = remote(t.table.max_unique * 4 * m.dim, p.world);
      os << label << "ids " << traffic(ids) << " + rows " << traffic(rows)
         << " forward, gradient rows " << traffic(rows) << " back = " << traffic(t.all_to_all_bytes)
         << " ((W-1)/W of a full window's ids)\n";
    }
    os << "  dense all-reduce  ring 2(W-1)/W x " << traffic(p.gradient_bytes)
       << " of fp32 gradients";
    bool replicated = false;
    for (const TablePlacement& t : p.tables) replicated = replicated || !t.sharded;
    if (replicated) os << " (dense + replicated tables' grad and touched flags)";
    os << " = " << traffic(p.all_reduce_bytes) << "\n";
  }
  os << "  not counted: CUDA ops scratch and cuBLASLt workspace (sized on the device), NCCL "
        "buffers, host staging\n";
  return os.str();
}

}  // namespace hstu::dist
