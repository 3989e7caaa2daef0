// ranking_test_util.h — the config builder of the ranking tests: a CPU ranking Config from the
// numbers every such test chooses (the model, and for a training run its batches, seed and run
// directory; for synthetic data the generator's shape). Everything else stays at Config's
// defaults, so what a test changes beyond these is set, in the open, on the returned Config.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.h"

namespace hstu::test {

// The ranking model: HSTU layers, MLP head and the sequence lengths it is planned for.
struct RankingModelSpec {
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t kv_channels = 0;
  int64_t num_position_buckets = 0;
  std::vector<int64_t> head_arch;  // RankingArgs.prediction_head_arch (last entry: the outputs)
  int64_t num_tasks = 0;           // RankingArgs.num_tasks
  int64_t max_history_seqlen = 0;
  int64_t max_num_candidates = 0;
};

// The trainer settings of a training run.
struct RankingRunSpec {
  int64_t train_batch_size = 0;
  int64_t eval_batch_size = 0;
  int64_t seed = 0;
  std::string run_dir;
};

// Synthetic ranking data (SyntheticArgs): users, items in clusters, contextual features, tasks.
struct SyntheticRankingSpec {
  int64_t num_users = 0;
  int64_t num_items = 0;
  int64_t num_clusters = 0;
  int64_t min_seqlen = 0;
  int64_t max_seqlen = 0;
  int64_t num_contextual_features = 0;
  int64_t contextual_cardinality = 0;
  int64_t num_tasks = 0;
};

// task = "ranking" on the CPU with the model of `m`.
inline Config ranking_config(const RankingModelSpec& m) {
  Config c;
  c.task = "ranking";
  c.trainer.device = "cpu";
  c.network.num_layers = m.num_layers;
  c.network.hidden_size = m.hidden_size;
  c.network.num_attention_heads = m.num_attention_heads;
  c.network.kv_channels = m.kv_channels;
  c.network.num_position_buckets = m.num_position_buckets;
  c.ranking.prediction_head_arch = m.head_arch;
  c.ranking.num_tasks = m.num_tasks;
  c.dataset.max_history_seqlen = m.max_history_seqlen;
  c.dataset.max_num_candidates = m.max_num_candidates;
  return c;
}

// ranking_config(m), trained as `r` says.
inline Config ranking_config(const RankingModelSpec& m, const RankingRunSpec& r) {
  Config c = ranking_config(m);
  c.trainer.train_batch_size = r.train_batch_size;
  c.trainer.eval_batch_size = r.eval_batch_size;
  c.trainer.seed = r.seed;
  c.trainer.run_dir = r.run_dir;
  return c;
}

// ranking_config(m, r) on the synthetic data of `s`.
inline Config ranking_config(const RankingModelSpec& m, const RankingRunSpec& r,
                             const SyntheticRankingSpec& s) {
  Config c = ranking_config(m, r);
  c.dataset.dataset_name = "synthetic";
  c.synthetic.num_users = s.num_users;
  c.synthetic.num_items = s.num_items;
  c.synthetic.num_clusters = s.num_clusters;
  c.synthetic.min_seqlen = s.min_seqlen;
  c.synthetic.max_seqlen = s.max_seqlen;
  c.synthetic.num_contextual_features = s.num_contextual_features;
  c.synthetic.contextual_cardinality = s.contextual_cardinality;
  c.synthetic.num_tasks = s.num_tasks;
  return c;
}

// A KuaiRand-1K-format fixture of `users` users written to the folder `out` by
// tools/make_kuairand_fixture.py: true when written, false when python3 is absent (the test
// skips); a failing generator throws.
inline bool write_kuairand_fixture(const std::string& out, int users) {
  if (std::system("python3 --version > /dev/null 2>&1") != 0) return false;
  const std::string cmd = std::string("python3 ") + HSTU_SOURCE_DIR +
                          "/tools/make_kuairand_fixture.py --out " + out +
                          " --variant 1k --users " + std::to_string(users) + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  return true;
}

}  // namespace hstu::test
