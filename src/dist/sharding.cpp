// sharding.cpp — owner functions, shard sizes and the host-side id deduplication (sharding.h).
#include "dist/sharding.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/checked.h"
#include "core/error.h"

namespace hstu::dist {
namespace {

constexpr int64_t kAlign = 256;  // Arena::kAlign (core/arena.h); kept here so plans need no Arena

int64_t aligned(int64_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

OwnerKind parse_owner(const std::string& name, const std::string& what) {
  if (name == "modulo") return OwnerKind::kModulo;
  if (name == "hash") return OwnerKind::kHash;
  HSTU_THROW(what, ": unknown owner function '", name, "' (expected \"modulo\" or \"hash\")");
}

const char* owner_name(OwnerKind k) {
  return k == OwnerKind::kModulo ? "modulo" : "hash";
}

RowSharding::RowSharding(int64_t rows, int world, OwnerKind kind)
    : rows_(rows), world_(world), kind_(kind), counts_(static_cast<size_t>(std::max(world, 1))) {
  HSTU_CHECK(world >= 1, "sharding: world size ", world, " must be at least 1");
  HSTU_CHECK(rows >= 1 && rows <= std::numeric_limits<int32_t>::max(), "sharding: ", rows,
             " table rows; ids are i32, so 1 to 2^31-1 rows");
  if (kind == OwnerKind::kModulo) {
    for (int r = 0; r < world; ++r)
      counts_[static_cast<size_t>(r)] = rows / world + (r < rows % world ? 1 : 0);
    return;
  }
  local_.resize(static_cast<size_t>(rows));
  for (int64_t id = 0; id < rows; ++id) {
    int64_t& c = counts_[static_cast<size_t>(owner(id))];
    local_[static_cast<size_t>(id)] = static_cast<int32_t>(c++);
  }
}

int64_t RowSharding::max_shard_rows() const {
  return *std::max_element(counts_.begin(), counts_.end());
}

std::vector<int64_t> RowSharding::owned_ids(int r) const {
  HSTU_CHECK(r >= 0 && r < world_, "sharding: rank ", r, " outside a world of ", world_);
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(shard_rows(r)));
  if (kind_ == OwnerKind::kModulo) {
    for (int64_t id = r; id < rows_; id += world_) ids.push_back(id);
  } else {
    for (int64_t id = 0; id < rows_; ++id)
      if (owner(id) == r) ids.push_back(id);
  }
  return ids;
}

int64_t embedding_table_bytes(int64_t rows, int64_t dim, const std::string& optimizer) {
  // EmbeddingTable::allocate: weight and grad, the optimiser state, touched (u8) and row_list
  // (i32) per row, and alignment slack (f32 tables).
  const int64_t table =
      checked_add(checked_mul(checked_mul(rows, dim, "table elements"), 4, "table bytes"), kAlign,
                  "table bytes");
  int64_t state = 0;
  if (optimizer == "adam" || optimizer == "dense_adam")
    state = 2 * table;
  else if (optimizer == "row_wise_adagrad")
    state = rows * 4 + kAlign;
  else
    HSTU_CHECK(optimizer == "sgd", "sharding: unknown sparse optimiser '", optimizer,
               "' (adam, dense_adam, row_wise_adagrad, sgd)");
  return 2 * table + state + rows * 5 + 5 * kAlign;
}

int64_t window_bytes(int64_t max_unique, int64_t dim, int world, int64_t shard_rows) {
  const int64_t cap = std::max<int64_t>(max_unique, 1);
  const int64_t rcap = std::max<int64_t>(world * std::min(cap, shard_rows), 1);
  const int64_t exchange =
      aligned(cap * 4) * 2 + aligned(cap * dim * 4) + aligned(rcap * 4) + aligned(rcap * dim * 4);
  return embedding_table_bytes(cap, dim, "sgd") + exchange;
}

std::vector<ShardSize> describe_shards(int64_t rows, int64_t dim, int world,
                                       const std::string& optimizer, OwnerKind owner,
                                       int64_t max_unique) {
  const RowSharding s(rows, world, owner);
  std::vector<ShardSize> out;
  for (int r = 0; r < world; ++r) {
    ShardSize z;
    z.rank = r;
    z.rows = s.shard_rows(r);
    z.table_bytes = embedding_table_bytes(z.rows, dim, optimizer);
    z.window_bytes = max_unique > 0 ? window_bytes(max_unique, dim, world, z.rows) : 0;
    out.push_back(z);
  }
  return out;
}

std::string format_shards(const std::vector<ShardSize>& shards) {
  std::ostringstream os;
  for (const ShardSize& z : shards) {
    os << "  rank " << z.rank << ": " << z.rows << " rows, " << mib(z.table_bytes);
    if (z.window_bytes > 0) os << " (+ window and exchange buffers " << mib(z.window_bytes) << ")";
    os << "\n";
  }
  return os.str();
}

IdDeduper::IdDeduper(int64_t rows) : slot_(static_cast<size_t>(rows), -1) {
  HSTU_CHECK(rows >= 1 && rows <= std::numeric_limits<int32_t>::max(), "dedup: ", rows,
             " table rows; ids are i32");
}

std::span<const int32_t> IdDeduper::run(std::span<const std::span<int32_t>> ids) {
  const int64_t v = static_cast<int64_t>(slot_.size());
  unique_.clear();
  unique_.push_back(0);
  slot_[0] = 0;
  for (size_t s = 0; s < ids.size(); ++s) {
    for (size_t i = 0; i < ids[s].size(); ++i) {
      const int32_t id = ids[s][i];
      if (id < 0 || id >= v) {
        for (const int32_t u : unique_) slot_[static_cast<size_t>(u)] = -1;  // stay reusable
        HSTU_THROW("dedup: id ", id, " at position ", i, " of id array ", s,
                   " is outside the table's rows [0, ", v, ")");
      }
      int32_t& slot = slot_[static_cast<size_t>(id)];
      if (slot < 0) {
        slot = 0;
        unique_.push_back(id);
      }
    }
  }
  // Sorted: by a scan of the marked slots when U is a sizeable part of V (a scan of V costs less
  // than sorting U), else by sorting U. 0 stays first either way.
  if (static_cast<int64_t>(unique_.size()) * 16 > v) {
    unique_.clear();
    for (int64_t id = 0; id < v; ++id)
      if (slot_[static_cast<size_t>(id)] >= 0) unique_.push_back(static_cast<int32_t>(id));
  } else {
    std::sort(unique_.begin(), unique_.end());
  }
  const int64_t u = static_cast<int64_t>(unique_.size());
  for (int64_t k = 0; k < u; ++k)
    slot_[static_cast<size_t>(unique_[static_cast<size_t>(k)])] = static_cast<int32_t>(k);
  for (const std::span<int32_t> span : ids) {
    const int64_t n = static_cast<int64_t>(span.size());
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
      span[static_cast<size_t>(i)] = slot_[static_cast<size_t>(span[static_cast<size_t>(i)])];
  }
  for (const int32_t id : unique_) slot_[static_cast<size_t>(id)] = -1;
  return unique_;
}

}  // namespace hstu::dist
