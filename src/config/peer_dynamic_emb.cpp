// peer_dynamic_emb.cpp — recsys-examples' DynamicEmbeddingArgs onto DynamicTableArgs (see
// peer_dynamic_emb.h). Facts: ../shared/reference/recsys-examples-hstu.md §4.1 and
// distributed.md §4.2, §5.
#include "config/peer_dynamic_emb.h"

#include "core/error.h"

namespace hstu {
namespace {

using detail::cat;
using Kind = gin::Value::Kind;

gin::Binding make(const std::string& cls, const std::string& field, gin::Value value,
                  const gin::Location& loc) {
  gin::Binding b;
  b.selector = cls;
  b.field = field;
  value.loc = loc;
  b.value = std::move(value);
  b.loc = loc;
  return b;
}

gin::Value string_value(const std::string& s) {
  gin::Value v;
  v.kind = Kind::kString;
  v.s = s;
  return v;
}

[[noreturn]] void reject(const gin::Binding& b, const std::string& why) {
  HSTU_THROW(b.loc.str(), ": ", b.key(), " = ", gin::to_string(b.value), ": ", why);
}

}  // namespace

std::string dynamic_embedding_counterpart(const std::string& field) {
  if (field == "item_vocab_size_or_capacity") return "DynamicTableArgs.capacity_rows";
  if (field == "global_hbm_for_values") return "DynamicTableArgs.hbm_bytes";
  if (field == "item_vocab_gpu_capacity") return "DynamicTableArgs.hbm_rows";
  if (field == "item_vocab_gpu_capacity_ratio") return "DynamicTableArgs.hbm_ratio";
  if (field == "evict_strategy") return "DynamicTableArgs.eviction";
  if (field == "caching") return "DynamicTableArgs.host_tier";
  if (field == "dist_type") return "TrainerArgs.shard_owner";
  if (field == "feature_names" || field == "table_name") return "DynamicTableArgs.tables";
  return "";
}

std::vector<gin::Binding> translate_dynamic_embedding(const gin::Binding& b,
                                                      std::vector<std::string>* notes) {
  const std::string& f = b.field;
  const gin::Value& v = b.value;
  if (!b.scope.empty())
    reject(b,
           "a scoped DynamicEmbeddingArgs instance describes a table of recsys-examples' random "
           "benchmark data (BenchmarkDatasetArgs.embedding_args), which hstu does not train on; "
           "hstu's one dynamic table is the item table: bind DynamicEmbeddingArgs unscoped or "
           "DynamicTableArgs");
  auto note = [&](const std::string& why) {
    if (notes)
      notes->push_back(
          cat(b.loc.str(), ": ", b.key(), " = ", gin::to_string(v), ": difference: ", why));
  };
  // Every DynamicEmbeddingArgs binding makes the item table dynamic, host tier allowed.
  gin::Value tables;
  tables.kind = Kind::kList;
  tables.items.push_back(string_value("item"));
  gin::Value host;
  host.kind = Kind::kBool;
  host.b = true;
  std::vector<gin::Binding> out = {make("DynamicTableArgs", "tables", tables, b.loc),
                                   make("DynamicTableArgs", "host_tier", host, b.loc)};
  auto emit = [&](const std::string& key, const gin::Value& value) {
    const size_t dot = key.find('.');
    out.push_back(make(key.substr(0, dot), key.substr(dot + 1), value, b.loc));
  };
  const bool none = v.kind == Kind::kNone;  // recsys-examples' "unset"
  if (f == "item_vocab_size_or_capacity" || f == "global_hbm_for_values" ||
      f == "item_vocab_gpu_capacity") {
    if (!none && (v.kind != Kind::kInt || v.i < 1)) reject(b, "expects an int >= 1 or None");
    if (!none) emit(dynamic_embedding_counterpart(f), v);
    if (f == "item_vocab_size_or_capacity" && !none)
      note(
          "the slots of hstu's item table; unset, hstu sizes it from the catalogue "
          "(DynamicTableArgs.capacity_ratio), where recsys-examples' real-data tables have "
          "10,000,000 slots");
  } else if (f == "item_vocab_gpu_capacity_ratio") {
    if (!none && v.kind != Kind::kInt && v.kind != Kind::kFloat)
      reject(b, "expects a number in [0, 1] or None");
    if (!none) {
      emit("DynamicTableArgs.hbm_ratio", v);
      note(
          "a fraction of hstu's capacity (DynamicTableArgs.capacity_rows, or the catalogue "
          "when unset), where recsys-examples' real-data tables take it of 10,000,000 slots");
    }
  } else if (f == "evict_strategy") {
    if (v.kind != Kind::kString || (v.s != "lru" && v.s != "lfu"))
      reject(b, "hstu's dynamic tables evict by \"lru\" or \"lfu\" (DynamicTableArgs.eviction)");
    emit("DynamicTableArgs.eviction", v);
  } else if (f == "dist_type") {
    if (v.kind != Kind::kString) reject(b, "expects a string");
    if (v.s == "roundrobin") {
      emit("TrainerArgs.shard_owner", string_value("modulo"));
    } else if (v.s == "hash_roundrobin") {
      emit("TrainerArgs.shard_owner", string_value("hash"));
    } else if (v.s == "continuous") {
      reject(b,
             "hstu places key k on rank k mod W (roundrobin) or murmur3_fmix64(k) mod W "
             "(hash_roundrobin); contiguous blocks of keys per rank are not implemented");
    } else {
      reject(b, "not one of recsys-examples' continuous, roundrobin, hash_roundrobin");
    }
  } else if (f == "caching") {
    if (v.kind != Kind::kBool) reject(b, "expects True or False");
    note(v.b ? "HBM caches a full host table: hstu's host tier (DynamicTableArgs.host_tier)"
             : "recsys-examples splits the values between HBM and host memory by hash; hstu's "
               "host tier keeps the rows beyond the HBM budget in host memory with HBM as a "
               "cache (same capacity and budget, another placement)");
  } else if (f == "feature_names" || f == "table_name") {
    if (v.kind != Kind::kString && v.kind != Kind::kList && v.kind != Kind::kTuple)
      reject(b, "expects a string or a list of strings");
    note("hstu's dynamic table is the item table of the dataset (DynamicTableArgs.tables)");
  } else if (f == "sharding_type") {
    note(
        "dynamic tables are row-sharded in data-parallel jobs, as recsys-examples forces "
        "(model_parallel)");
  } else {
    reject(b,
           "not a field of recsys-examples' DynamicEmbeddingArgs (item_vocab_size_or_capacity, "
           "global_hbm_for_values, item_vocab_gpu_capacity, item_vocab_gpu_capacity_ratio, "
           "evict_strategy, caching, dist_type, feature_names, table_name, sharding_type)");
  }
  return out;
}

}  // namespace hstu
