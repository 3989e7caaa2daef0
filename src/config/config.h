// config.h — the typed configuration of a run: one struct per gin class.
//
// Class and field names follow NVIDIA recsys-examples (`NetworkArgs.num_layers`, ...) wherever
// that system has the option; hstu's extensions sit beside them with the same naming style.
// Every field has a default here; the schema's table (schema_fields.cpp) binds each field to its
// gin name, type, range and one-line documentation (docs/CONFIG.md is generated from that table).
// Fields that recsys-examples configs carry but that mean nothing here are parsed and reported
// as ignored, by name (see schema).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hstu {

// Length / value distribution of the synthetic generator (recsys-examples' RandomDistribution).
struct RandomDistribution {
  std::string dist_type = "uniform";  // uniform | normal | zipf | lognormal
  double low = 0;                     // inclusive lower bound of the sampled value
  double high = -1;                   // exclusive upper bound; -1 = the owner's maximum
  double mean = -1;                   // normal/lognormal mean; -1 = (low+high)/2
  double std = -1;     // normal/lognormal std; -1 = (high-low)/4 (normal), mean/2 (lognormal)
  double alpha = 1.5;  // zipf exponent (> 1)

  bool operator==(const RandomDistribution&) const = default;
};

struct TrainerArgs {
  int64_t train_batch_size = 128;       // sequences per step
  int64_t eval_batch_size = 128;        // sequences per evaluation batch
  int64_t eval_interval = 0;            // evaluate every N steps (0 = use eval_every_n_epochs)
  int64_t eval_every_n_epochs = 1;      // evaluate after every N-th epoch (epoch-based runs)
  int64_t log_interval = 100;           // steps between metrics.jsonl train records
  int64_t max_train_iters = 0;          // stop after N steps (0 = run num_epochs epochs)
  int64_t max_eval_iters = 0;           // evaluate at most N batches (0 = the whole split)
  int64_t num_epochs = 1;               // epochs over the training split (when max_train_iters = 0)
  int64_t seed = 1234;                  // seeds data order, init, dropout and negative sampling
  int64_t ckpt_save_interval = 0;       // save every N steps and at the end (0 = only at the end of
                                        // the run, -1 = never: recsys-examples' "off")
  std::string ckpt_save_dir = "";       // checkpoint directory ("" = <run_dir>/checkpoints)
  int64_t ckpt_keep = 2;                // saves kept in the checkpoint directory (>= 1)
  std::string ckpt_load_dir = "";       // initialise weights from this checkpoint ("" = none)
  std::string run_dir = "runs/latest";  // where config, metrics.jsonl and checkpoints go
  std::string device = "auto";          // auto | cpu | cuda
  int64_t num_threads = 0;              // CPU threads (0 = all cores)
  std::string select_best_on = "none";  // none | validation: pick the epoch with best val NDCG@10
  bool profile = false;                 // write a Chrome-trace timeline to <run_dir>/trace.json
  int64_t profile_step_start = 100;
  int64_t profile_step_end = 200;
  bool deterministic = true;  // GPU: deterministic kernels (CPU is always deterministic)
  bool cuda_graph = true;     // GPU: launch each training step as one CUDA graph
  bool enable_balanced_shuffler = false;  // data-parallel: balance each global batch's work
  // Data-parallel runs: embedding tables sharded row-wise over the ranks (the others are
  // replicated); names: item (retrieval and ranking), action, contextual (ranking).
  std::vector<std::string> model_parallel_tables = {"item"};
  std::string shard_owner = "modulo";  // which rank owns id k: modulo (k mod W) | hash
  int64_t grad_bucket_mb = 25;         // gradient all-reduce bucket size (MiB of fp32)
  int64_t table_budget_mb = 0;         // embedding-table memory one rank may hold; 0 = none
  std::string nonfinite = "error";     // a non-finite loss or gradient norm: error | skip_step

  bool operator==(const TrainerArgs&) const = default;
};

struct DatasetArgs {
  std::string dataset_name =
      "synthetic";                     // synthetic | ml-1m | ml-20m | ml-latest | ml-latest-small
                                       // | ml-100k | amzn-books | kuairand-pure|1k|27k
  std::string dataset_path = "";       // raw data folder or file ("" = none for synthetic)
  int64_t max_history_seqlen = 200;    // history items kept per sample (the newest)
  int64_t max_num_candidates = 0;      // ranking candidates per sample (0 = retrieval)
  bool shuffle = true;                 // reshuffle sample order every epoch (seeded)
  std::string split = "paper";         // paper (train: all but last; test: last item)
                                       // | validation (train: all but 2; val; test)
  std::string cache_dir = "";          // where `hstu preprocess` output lives ("" = run_dir)
  std::string ranking_split = "time";  // ranking: time (per user, newest candidates = eval)
                                       // | user_70_30 (recsys-examples: first 70% of users)
  std::string truncate = "newest";     // ranking: keep the newest events (hstu) | oldest
                                       // (recsys-examples; needs ranking_split user_70_30)
  int64_t ranking_train_windows = 1;   // ranking, time split: training candidate windows per
                                       // user, newest first (0 = every window with history)
  std::string tie_break = "file";      // order of a user's events with equal timestamps:
                                       // file (stable sort, the spec's default) | shuffle
                                       // (a fixed pseudo-random order, like Meta's
                                       // preprocessing with pandas' unstable quicksort)
  bool raw_ids = false;  // keep raw 64-bit item keys (no dense remap, no item id map); needs
                         // DynamicTableArgs.tables to hold "item" (docs/DYNAMIC_TABLES.md)

  bool operator==(const DatasetArgs&) const = default;
};

// hstu's synthetic generator (planted clusters + Markov transitions), the default dataset.
struct SyntheticArgs {
  int64_t num_users = 2000;
  int64_t num_items = 2000;
  int64_t num_clusters = 20;          // items are split into clusters; users prefer a few
  int64_t clusters_per_user = 3;      // preferred clusters per user
  double cluster_stickiness = 0.8;    // P(next item from a preferred cluster's Markov chain)
  double transition_sharpness = 0.7;  // P(next item = the planted successor of the previous)
  int64_t min_seqlen = 10;
  int64_t max_seqlen = 200;
  RandomDistribution seqlen_dist = {"lognormal", 10, 200, 60, 30, 1.5};
  int64_t seed = 42;
  // Ranking extensions (defaults = none: the data above, ratings 1..5, no contextual features).
  int64_t num_contextual_features = 0;  // C per-user categorical features describing the user's
                                        // preferred clusters
  int64_t contextual_cardinality = 16;  // values of each contextual feature
  double contextual_noise = 0.2;        // P(a feature value is uniform noise, not the user's taste)
  int64_t num_tasks = 0;                // K > 0: actions are K-bit label masks (num_actions 2^K)
  double label_signal = 1.0;            // scales every task's planted logit (0 = labels are noise)

  bool operator==(const SyntheticArgs&) const = default;
};

struct NetworkArgs {
  int64_t num_layers = 2;
  int64_t hidden_size = 64;         // D, width of the residual stream and embeddings
  int64_t num_attention_heads = 2;  // H
  int64_t kv_channels = 32;         // per-head width (dqk = dv)
  double hidden_dropout = 0.2;      // dropout on u*LN(O) before the output projection
  double input_dropout = -1;        // dropout on the input embeddings (-1 = hidden_dropout)
  double norm_epsilon = 1e-5;
  bool is_causal = true;
  std::string dtype_str = "bfloat16";      // GPU activation dtype: bfloat16 | float16 (CPU: fp32)
  std::string kernel_backend = "cutlass";  // accepted for compatibility; hstu has one backend
  int64_t target_group_size = 1;
  int64_t num_position_buckets = 8192;
  bool recompute_input_layernorm = false;
  bool recompute_input_silu = false;
  int64_t item_embedding_dim = -1;  // -1 = hidden_size
  int64_t contextual_embedding_dim = -1;
  int64_t scaling_seqlen = -1;  // the divisor N of the attention (-1 = static max seqlen)
  bool disable_contextual_mask = false;
  // hstu extensions (defaults = recsys-examples' layer; the paper preset sets Meta's values)
  double attention_alpha = -1;  // scale of q.k (+rab); -1 = 1/sqrt(kv_channels)
  bool learnable_input_layernorm = true;
  bool learnable_output_layernorm = true;
  bool uvqk_bias = true;
  bool output_bias = false;
  bool relative_attention_bias = false;  // Meta's per-layer position + time-bucket bias
  int64_t rab_num_time_buckets = 128;    // time buckets are 0..rab_num_time_buckets
  int64_t max_attn_len = 0;              // local attention window (0 = none)
  bool final_layernorm = false;          // LayerNorm before the L2 normalisation of outputs
  std::string init = "recsys";           // recsys (xavier_uniform) | meta (Meta's research init)

  bool operator==(const NetworkArgs&) const = default;
};

struct OptimizerArgs {
  std::string optimizer_str = "adam";  // adam | adamw | sgd (dense parameters)
  double learning_rate = 1e-3;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double weight_decay = 0.0;                  // decoupled (AdamW) decay of dense matrices
  std::string sparse_optimizer_str = "adam";  // adam | row_wise_adagrad | sgd | dense_adam
  double sparse_learning_rate = -1;           // -1 = learning_rate
  std::string lr_schedule = "constant";       // constant | warmup_cosine | warmup_linear
  int64_t warmup_steps = 0;
  double grad_clip_norm = 0;  // global L2 clip of dense gradients (0 = off)

  bool operator==(const OptimizerArgs&) const = default;
};

struct RetrievalArgs {
  int64_t num_negatives = 128;  // R sampled negatives per query (-1 = #queries)
  std::vector<std::string> eval_metrics = {"HR@10", "NDCG@10"};
  double temperature = 0.05;
  double l2_norm_eps = 1e-6;
  std::string negative_sampler = "uniform";  // uniform (over the catalogue) | in_batch
  int64_t eval_rank_cap = 2500;              // ranks beyond this count as cap+1
  std::string loss_rows_dtype = "auto";      // auto | float32: the rows the GPU loss reads

  bool operator==(const RetrievalArgs&) const = default;
};

struct RankingArgs {
  std::vector<int64_t> prediction_head_arch = {512, 1};
  std::string prediction_head_act_type = "relu";  // relu | gelu
  bool prediction_head_bias = true;
  int64_t num_tasks = 1;
  std::vector<std::string> eval_metrics = {"AUC"};

  bool operator==(const RankingArgs&) const = default;
};

// Dynamic (hash-table) embedding tables keyed by raw int64 ids (issue 18): which tables are
// dynamic and their parameters. The capacity precedence and the bytes formula follow
// recsys-examples' DynamicEmbeddingArgs; config/dynamic_table.h turns these into one table's
// DynamicTableConfig.
struct DynamicTableArgs {
  std::vector<std::string> tables = {};  // dynamic tables (only "item" today); empty = all dense
  int64_t capacity_rows = -1;            // slots of the table (-1 = capacity_ratio x catalogue)
  double capacity_ratio = 1.0;           // capacity as a fraction of the catalogue's keys
  int64_t max_capacity_rows = 0;         // growth by doubling up to this (0 = no growth)
  int64_t bucket_size = 32;              // slots per bucket: 1..32, a power of two (one warp)
  double max_load_factor = 0.75;         // grow when this fraction of slots is occupied
  std::string eviction = "lru";          // none | lru | lfu (a full bucket evicts its lowest score)
  int64_t admit_threshold = 0;           // insert a key at its N-th sighting (0/1 = at once)
  bool host_tier = false;                // full table in pinned host memory, HBM holds a cache
  int64_t hbm_bytes = -1;                // HBM for values (global_hbm_for_values; -1 = unset)
  int64_t hbm_rows = -1;                 // rows in HBM (item_vocab_gpu_capacity; -1 = unset)
  double hbm_ratio = 1.0;                // rows in HBM / capacity (item_vocab_gpu_capacity_ratio)
  std::string value_dtype = "float32";   // float32 | bfloat16 (the embedding; state stays fp32)
  double init_std = 0.02;                // truncated-normal std of a new key's row (dense: 0.02)

  bool operator==(const DynamicTableArgs&) const = default;
};

// The whole configuration of a run.
struct Config {
  TrainerArgs trainer;
  DatasetArgs dataset;
  SyntheticArgs synthetic;
  NetworkArgs network;
  OptimizerArgs optimizer;
  RetrievalArgs retrieval;
  RankingArgs ranking;
  DynamicTableArgs dynamic;
  std::string task = "retrieval";  // retrieval | ranking (gin: TrainerArgs.task, else the
                                   // class bound: RankingArgs -> ranking)

  bool operator==(const Config&) const = default;
};

}  // namespace hstu
