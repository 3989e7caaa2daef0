// tiny_gin.h — the gin text of the tiny retrieval run the CLI, bad-input and kill tests start
// as a subprocess: a synthetic dataset of 64 users, one 16-wide layer, on the CPU (a fraction of
// a second per run).
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

}  // namespace hstu::test
