// peer_dynamic_emb.h — recsys-examples' DynamicEmbeddingArgs keys read with their meaning there,
// as hstu's DynamicTableArgs (and TrainerArgs.shard_owner) bindings.
//
// In recsys-examples a DynamicEmbeddingArgs instance describes one DynamicEmb hash table:
// item_vocab_size_or_capacity (its slots), an HBM budget (global_hbm_for_values >
// item_vocab_gpu_capacity > item_vocab_gpu_capacity_ratio, bytes = rows x dim x 4 B x (3 Adam |
// 1 SGD)), evict_strategy (lru | lfu), caching (HBM as a cache over a host table, else values
// split between HBM and host by hash) and dist_type (the owner rank of a key). hstu has one
// dynamic table, the item table, so an unscoped DynamicEmbeddingArgs binding configures it:
//   item_vocab_size_or_capacity   -> DynamicTableArgs.capacity_rows
//   global_hbm_for_values         -> DynamicTableArgs.hbm_bytes
//   item_vocab_gpu_capacity       -> DynamicTableArgs.hbm_rows
//   item_vocab_gpu_capacity_ratio -> DynamicTableArgs.hbm_ratio
//   evict_strategy lru | lfu      -> DynamicTableArgs.eviction
//   dist_type roundrobin | hash_roundrobin -> TrainerArgs.shard_owner modulo | hash
//   caching, feature_names, table_name, sharding_type -> accepted with a named difference
// and every such binding also makes the item table dynamic (DynamicTableArgs.tables = ["item"])
// with the host tier allowed (recsys-examples keeps rows beyond the HBM budget in host memory
// either way). dist_type = "continuous", other eviction strategies, scoped instances (used only
// by BenchmarkDatasetArgs) and unknown fields are errors naming the binding.
#pragma once

#include <string>
#include <vector>

#include "config/gin.h"

namespace hstu {

// The hstu bindings (located at b.loc) that stand for recsys-examples' binding `b` of
// DynamicEmbeddingArgs; a named difference, if any, is appended to `notes` (when not null).
// Throws hstu::Error naming b's file:line and key when it has no hstu counterpart.
std::vector<gin::Binding> translate_dynamic_embedding(const gin::Binding& b,
                                                      std::vector<std::string>* notes);

// The hstu key that DynamicEmbeddingArgs.<field> maps to ("" when none), for messages.
std::string dynamic_embedding_counterpart(const std::string& field);

}  // namespace hstu
