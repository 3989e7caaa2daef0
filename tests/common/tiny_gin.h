// tiny_gin.h — the gin text of the tiny retrieval runs tests start (the CLI, bad-input and kill
// tests as a subprocess; the raw-id dynamic-table tests in process or through `hstu`): synthetic
// data, one 16-wide layer, on the CPU (a fraction of a second per run).
#pragma once

#include <cstdint>
#include <string>

namespace hstu::test {

// `steps` training steps; `extra` lines (other keys) appended as they are.
inline std::string tiny_retrieval_gin(int64_t steps = 2, const std::string& extra = "") {
  return R"(DatasetArgs.dataset_name = "synthetic"
DatasetArgs.max_history_seqlen = 20
SyntheticArgs.num_users = 64
SyntheticArgs.num_items = 50
SyntheticArgs.num_clusters = 4
SyntheticArgs.clusters_per_user = 1
SyntheticArgs.min_seqlen = 5
SyntheticArgs.max_seqlen = 20
NetworkArgs.num_layers = 1
NetworkArgs.hidden_size = 16
NetworkArgs.num_attention_heads = 1
NetworkArgs.kv_channels = 16
NetworkArgs.num_position_buckets = 32
TrainerArgs.train_batch_size = 32
TrainerArgs.eval_batch_size = 64
TrainerArgs.device = "cpu"
RetrievalArgs.num_negatives = 8
TrainerArgs.max_train_iters = )" +
         std::to_string(steps) + "\n" + extra;
}

// A raw-id retrieval run (DatasetArgs.raw_ids) whose item table is a dynamic table: synthetic
// data of 60 users and `items` items, histories of 24, one 16-wide layer of 2 heads, one CPU
// thread, batches of `batch`, `negatives` negatives; `extra` lines appended as they are.
inline std::string raw_id_dynamic_gin(int64_t items, int64_t batch, int64_t negatives,
                                      const std::string& extra = "") {
  return R"(DatasetArgs.dataset_name = "synthetic"
DatasetArgs.raw_ids = True
DatasetArgs.max_history_seqlen = 24
SyntheticArgs.num_users = 60
NetworkArgs.num_layers = 1
NetworkArgs.hidden_size = 16
NetworkArgs.num_attention_heads = 2
NetworkArgs.kv_channels = 8
TrainerArgs.num_threads = 1
DynamicTableArgs.tables = ["item"]
SyntheticArgs.num_items = )" +
         std::to_string(items) + "\nTrainerArgs.train_batch_size = " + std::to_string(batch) +
         "\nRetrievalArgs.num_negatives = " + std::to_string(negatives) + "\n" + extra;
}

}  // namespace hstu::test
