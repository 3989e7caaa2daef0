// schema_fields.cpp — the schema's tables (declared in schema.h): hstu's gin classes, every field
// of them (one row each: type, range or allowed strings, one-line doc, accessor into Config), and
// the recsys-examples classes and fields that are accepted and ignored.
//
// The rows are built by one function per class, concatenated in the order of config_classes();
// that order is the order of to_gin's output and of docs/CONFIG.md. Each row's accessor is
// generated from the class and member name by one macro, so a row can only point at the member
// its gin name says. RandomDistribution rows address Config::synthetic.seqlen_dist (the one
// distribution-valued field).
#include <string>
#include <utility>
#include <vector>

#include "config/schema.h"

namespace hstu {
namespace {

// ---- building the rows -----------------------------------------------------------------------

Range any() {
  return Range{};
}
Range at_least(double lo) {
  Range r;
  r.lo = lo;
  return r;
}
Range above(double lo) {
  Range r = at_least(lo);
  r.lo_open = true;
  return r;
}
Range between(double lo, double hi, bool hi_open) {
  Range r = at_least(lo);
  r.hi = hi;
  r.hi_open = hi_open;
  return r;
}
// -1 (and None) = "automatic", besides the values of `r`.
Range or_auto(Range r) {
  r.also = -1;
  r.none = -1;
  return r;
}
Range none_is(Range r, double v) {
  r.none = v;
  return r;
}

// Binds a row to member `path.name` of Config and to gin name Cls.name.
#define HSTU_FIELD(Cls, path, name) #Cls, #name, [](Config & c) -> FieldRef { return &c.path.name; }

FieldSpec row(const char* cls, const char* name, FieldRef (*get)(Config&), Range range,
              std::vector<std::string> allowed, const char* doc) {
  Config probe;
  return FieldSpec{
      cls, name, static_cast<FieldType>(get(probe).index()), get, range, std::move(allowed), doc};
}
// Numbers (and int lists).
FieldSpec num(const char* cls, const char* name, FieldRef (*get)(Config&), Range range,
              const char* doc) {
  return row(cls, name, get, range, {}, doc);
}
// Strings (and string lists); `allowed` empty = any string.
FieldSpec str(const char* cls, const char* name, FieldRef (*get)(Config&),
              std::vector<std::string> allowed, const char* doc) {
  return row(cls, name, get, any(), std::move(allowed), doc);
}
// Bools and distributions.
FieldSpec plain(const char* cls, const char* name, FieldRef (*get)(Config&), const char* doc) {
  return row(cls, name, get, any(), {}, doc);
}
// A recsys-examples field hstu accepts (checking its type and values) and ignores.
FieldSpec ignored(const char* cls, const char* name, FieldType type,
                  std::vector<std::string> allowed, const char* reason) {
  return FieldSpec{cls, name, type, nullptr, any(), std::move(allowed), reason};
}

// ---- the rows, one function per class --------------------------------------------------------

// TrainerArgs, then the recsys-examples fields of the class that hstu ignores.
std::vector<FieldSpec> trainer_fields() {
  return {
      str(
          "TrainerArgs", "task", [](Config& c) -> FieldRef { return &c.task; },
          {"retrieval", "ranking"},
          "what the run trains; when not bound, binding RankingArgs makes it ranking and "
          "RetrievalArgs (or neither) retrieval (recsys-examples picks it by entry point)"),
      num(HSTU_FIELD(TrainerArgs, trainer, train_batch_size), at_least(1),
          "sequences per training step"),
      num(HSTU_FIELD(TrainerArgs, trainer, eval_batch_size), at_least(1),
          "sequences per evaluation batch"),
      num(HSTU_FIELD(TrainerArgs, trainer, eval_interval), at_least(0),
          "evaluate every N steps (0 = every eval_every_n_epochs epochs)"),
      num(HSTU_FIELD(TrainerArgs, trainer, eval_every_n_epochs), at_least(1),
          "evaluate after every N-th epoch (when eval_interval = 0)"),
      num(HSTU_FIELD(TrainerArgs, trainer, log_interval), at_least(1),
          "steps between train records in metrics.jsonl"),
      num(HSTU_FIELD(TrainerArgs, trainer, max_train_iters), none_is(at_least(0), 0),
          "stop after N steps (0 or None = run num_epochs epochs)"),
      num(HSTU_FIELD(TrainerArgs, trainer, max_eval_iters), none_is(at_least(0), 0),
          "evaluate at most N batches (0 or None = the whole split)"),
      num(HSTU_FIELD(TrainerArgs, trainer, num_epochs), at_least(1),
          "epochs over the training split (when max_train_iters = 0)"),
      num(HSTU_FIELD(TrainerArgs, trainer, seed), at_least(0),
          "seeds data order, initialisation, dropout and negative sampling"),
      num(HSTU_FIELD(TrainerArgs, trainer, ckpt_save_interval), or_auto(at_least(0)),
          "save a checkpoint every N steps and at the end of the run (0 = only at the end; -1 "
          "or None = never, as recsys-examples' -1)"),
      str(HSTU_FIELD(TrainerArgs, trainer, ckpt_save_dir), {},
          "checkpoint directory (\"\" = run_dir/checkpoints)"),
      num(HSTU_FIELD(TrainerArgs, trainer, ckpt_keep), at_least(1),
          "keep the newest N saves (step-<step> folders) in the checkpoint directory; older ones "
          "are removed after each save, never the one `latest` names"),
      str(HSTU_FIELD(TrainerArgs, trainer, ckpt_load_dir), {},
          "initialise from this checkpoint: a run, checkpoints or step folder (\"\" = none)"),
      str(HSTU_FIELD(TrainerArgs, trainer, run_dir), {},
          "where the effective config, metrics.jsonl and checkpoints go"),
      str(HSTU_FIELD(TrainerArgs, trainer, device), {"auto", "cpu", "cuda"},
          "auto = cuda when a GPU is present, else cpu"),
      num(HSTU_FIELD(TrainerArgs, trainer, num_threads), between(0, 4096, false),
          "CPU threads (0 = all cores; at most 4096)"),
      str(HSTU_FIELD(TrainerArgs, trainer, select_best_on), {"none", "validation"},
          "validation: report test metrics at the epoch with the best validation NDCG@10"),
      plain(HSTU_FIELD(TrainerArgs, trainer, profile),
            "write a Chrome-trace timeline to run_dir/trace.json: host time of the profiled "
            "steps and evaluations, and each profiled step's phases on the device clock (run "
            "directly, not as a CUDA graph)"),
      num(HSTU_FIELD(TrainerArgs, trainer, profile_step_start), at_least(0), "first profiled step"),
      num(HSTU_FIELD(TrainerArgs, trainer, profile_step_end), at_least(0),
          "profiling stops before this step"),
      plain(HSTU_FIELD(TrainerArgs, trainer, deterministic),
            "GPU: deterministic kernels (the CPU backend is always deterministic)"),
      plain(HSTU_FIELD(TrainerArgs, trainer, cuda_graph),
            "GPU: launch each training step's kernels as one CUDA graph, updated in place step "
            "to step"),
      ignored("TrainerArgs", "pipeline_type", FieldType::kString, {"none", "native", "prefetch"},
              "hstu's step loop has one pipeline"),
      plain(HSTU_FIELD(TrainerArgs, trainer, enable_balanced_shuffler),
            "data-parallel runs: split each global batch over the ranks with the Karmarkar-Karp "
            "equal-count partition of the samples' estimated work (attention and GEMM FLOPs from "
            "their lengths) instead of equal-count slices in order; no effect on one rank"),
      str(HSTU_FIELD(TrainerArgs, trainer, model_parallel_tables), {"item", "action", "contextual"},
          "data-parallel runs: embedding tables sharded row-wise over the ranks (recsys-examples' "
          "sharding_type = model_parallel); the others are replicated (data_parallel) and their "
          "gradients join the dense all-reduce. Applies in data-parallel jobs (started by a "
          "launcher: "
          "hstu launch, torchrun, mpirun, srun); `hstu` started alone keeps every table whole"),
      str(HSTU_FIELD(TrainerArgs, trainer, shard_owner), {"modulo", "hash"},
          "the rank that owns id k of a sharded table: modulo = k mod W (recsys-examples' "
          "roundrobin), hash = murmur3_fmix64(k) mod W (its hash_roundrobin); a dynamic item "
          "table (DynamicTableArgs) is sharded by the same rule on its 64-bit keys"),
      num(HSTU_FIELD(TrainerArgs, trainer, grad_bucket_mb), at_least(1),
          "data-parallel runs: MiB of fp32 gradients per all-reduce; each bucket is reduced as "
          "soon as the layers it holds finish their backward pass (GPU: on a communication "
          "stream, overlapped with the rest of the backward pass)"),
      num(HSTU_FIELD(TrainerArgs, trainer, table_budget_mb), at_least(0),
          "MiB of embedding tables (rows + gradient + optimiser state, a sharded table's shard "
          "and window) one rank may hold; checked before anything is allocated, with each "
          "table's part named (`hstu plan` prints it per rank). 0 = no budget"),
      str(HSTU_FIELD(TrainerArgs, trainer, nonfinite), {"error", "skip_step"},
          "a step whose loss or dense gradient norm is not finite (checked every step, read "
          "back with the loss): error = stop naming the step and the first parameter group "
          "with non-finite values, keeping the last checkpoint; skip_step = the optimisers "
          "apply nothing for that step (decided on the device, before the update), a warning "
          "and a \"skipped_step\" record in metrics.jsonl, and training goes on"),
  };
}

// DatasetArgs.
std::vector<FieldSpec> dataset_fields() {
  const std::vector<std::string> kDatasets = {
      "synthetic",  "ml-1m",         "ml-20m",      "ml-latest",    "ml-latest-small", "ml-100k",
      "amzn-books", "kuairand-pure", "kuairand-1k", "kuairand-27k", "benchmark"};
  return {
      str(HSTU_FIELD(DatasetArgs, dataset, dataset_name), kDatasets,
          "which dataset (synthetic = hstu's generator, see SyntheticArgs; benchmark = "
          "recsys-examples' random benchmark data of the gin file dataset_path, ranking only)"),
      str(HSTU_FIELD(DatasetArgs, dataset, dataset_path), {},
          "raw data folder or file (\"\" or None = none, for synthetic)"),
      num(HSTU_FIELD(DatasetArgs, dataset, max_history_seqlen), at_least(1),
          "history events kept per sample (the newest)"),
      num(HSTU_FIELD(DatasetArgs, dataset, max_num_candidates), at_least(0),
          "ranking candidates per sample (0 for retrieval; in ranking, 0 scores every event of "
          "a sample under a causal mask, as recsys-examples: benchmark data, or a dataset with "
          "ranking_split = user_70_30)"),
      plain(HSTU_FIELD(DatasetArgs, dataset, shuffle),
            "reshuffle the sample order every epoch (seeded)"),
      str(HSTU_FIELD(DatasetArgs, dataset, split), {"paper", "validation"},
          "paper: train on all but the last item, test on the last; validation: also hold out "
          "the second-to-last"),
      str(HSTU_FIELD(DatasetArgs, dataset, cache_dir), {},
          "where `hstu preprocess` output lives (\"\" = run_dir)"),
      str(HSTU_FIELD(DatasetArgs, dataset, ranking_split), {"time", "user_70_30"},
          "ranking: time (each user's newest candidates are eval, the ones before train) or "
          "user_70_30 (recsys-examples: the first 70% of users train, the rest eval)"),
      str(HSTU_FIELD(DatasetArgs, dataset, truncate), {"newest", "oldest"},
          "ranking: keep the newest events of long users (hstu) or the oldest (recsys-examples; "
          "needs ranking_split = user_70_30)"),
      num(HSTU_FIELD(DatasetArgs, dataset, ranking_train_windows), at_least(0),
          "ranking, time split: training samples per user, each C candidates ending where the "
          "next begins (1: the window just before the eval candidates, as recsys-examples' one "
          "sample per user; 0: every window with at least one history event)"),
      str(HSTU_FIELD(DatasetArgs, dataset, tie_break), {"file", "shuffle"},
          "order of a user's events with equal timestamps: file (stable sort) or shuffle (a "
          "fixed pseudo-random order, as Meta's preprocessing with an unstable sort gives)"),
      plain(HSTU_FIELD(DatasetArgs, dataset, raw_ids),
            "keep each event's raw item id as an int64 key (MovieLens movieId, KuaiRand "
            "video_id, Amazon: the 63-bit hash of the ASIN, synthetic: the generated id) instead "
            "of a dense index; no item id map is written and batches carry the keys "
            "(SequenceBatch::item_keys, -1 = none). Needs DynamicTableArgs.tables = [\"item\"]; "
            "the cache lives in <cache>/<dataset_name>-raw"),
  };
}

// SyntheticArgs.
std::vector<FieldSpec> synthetic_fields() {
  return {
      num(HSTU_FIELD(SyntheticArgs, synthetic, num_users), at_least(1), "users (sequences)"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, num_items), at_least(1),
          "catalogue size (without the padding id 0)"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, num_clusters), at_least(1),
          "items are split into this many clusters"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, clusters_per_user), at_least(1),
          "preferred clusters per user"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, cluster_stickiness), between(0, 1, false),
          "P(next item comes from a preferred cluster's Markov chain)"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, transition_sharpness), between(0, 1, false),
          "P(next item is the planted successor of the previous one)"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, min_seqlen), at_least(1),
          "shortest sequence (sampled lengths are clamped up to it)"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, max_seqlen), at_least(1),
          "longest sequence (sampled lengths are clamped down to it)"),
      plain(HSTU_FIELD(SyntheticArgs, synthetic, seqlen_dist),
            "sequence-length distribution; its fields are bound as "
            "seqlen_dist/RandomDistribution.FIELD"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, seed), at_least(0),
          "generator seed (independent of TrainerArgs.seed)"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, num_contextual_features), between(0, 1024, false),
          "per-user categorical features; feature c names the user's preferred cluster c mod "
          "clusters_per_user through a fixed random code (0 = none)"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, contextual_cardinality), between(1, 1 << 24, false),
          "values of each contextual feature"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, contextual_noise), between(0, 1, false),
          "P(a contextual value is uniform noise instead of the user's cluster code)"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, num_tasks), between(0, 16, false),
          "K > 0: each action is a K-bit label mask, bit k ~ Bernoulli(sigmoid(planted logit "
          "k)), num_actions 2^K (0 = ratings 1..5)"),
      num(HSTU_FIELD(SyntheticArgs, synthetic, label_signal), at_least(0),
          "scale of every task's planted logit around its base rate (0 = labels carry no "
          "signal)"),
  };
}

// RandomDistribution: the fields of Config::synthetic.seqlen_dist, bound through its scope.
std::vector<FieldSpec> distribution_fields() {
  return {
      str(HSTU_FIELD(RandomDistribution, synthetic.seqlen_dist, dist_type),
          {"uniform", "normal", "zipf", "lognormal"}, "shape of the distribution"),
      num(HSTU_FIELD(RandomDistribution, synthetic.seqlen_dist, low), any(),
          "inclusive lower bound of sampled values"),
      num(HSTU_FIELD(RandomDistribution, synthetic.seqlen_dist, high), or_auto(any()),
          "exclusive upper bound (-1 or None = the owner's maximum)"),
      num(HSTU_FIELD(RandomDistribution, synthetic.seqlen_dist, mean), or_auto(any()),
          "normal / lognormal mean (-1 or None = (low + high) / 2)"),
      num(HSTU_FIELD(RandomDistribution, synthetic.seqlen_dist, std), or_auto(above(0)),
          "normal / lognormal std (-1 or None = (high - low) / 4 for normal, mean / 2 for "
          "lognormal)"),
      num(HSTU_FIELD(RandomDistribution, synthetic.seqlen_dist, alpha), none_is(above(1), 1.5),
          "zipf exponent (None = 1.5)"),
  };
}

// NetworkArgs, then the recsys-examples fields of the class that hstu ignores.
std::vector<FieldSpec> network_fields() {
  return {
      num(HSTU_FIELD(NetworkArgs, network, num_layers), between(1, 1024, false), "HSTU layers"),
      num(HSTU_FIELD(NetworkArgs, network, hidden_size), at_least(1),
          "D, width of the residual stream and of the embeddings"),
      num(HSTU_FIELD(NetworkArgs, network, num_attention_heads), at_least(1), "H, heads"),
      num(HSTU_FIELD(NetworkArgs, network, kv_channels), at_least(1),
          "per-head width of q, k and v (dqk = dv)"),
      num(HSTU_FIELD(NetworkArgs, network, hidden_dropout), between(0, 1, true),
          "dropout on u * LayerNorm(O) before the output projection"),
      num(HSTU_FIELD(NetworkArgs, network, input_dropout), or_auto(between(0, 1, true)),
          "dropout on the input embeddings (-1 = hidden_dropout)"),
      num(HSTU_FIELD(NetworkArgs, network, norm_epsilon), above(0), "LayerNorm epsilon"),
      plain(HSTU_FIELD(NetworkArgs, network, is_causal), "causal attention mask"),
      str(HSTU_FIELD(NetworkArgs, network, dtype_str), {"bfloat16", "float16"},
          "GPU activation dtype (the CPU backend computes in float32)"),
      num(HSTU_FIELD(NetworkArgs, network, target_group_size), at_least(1),
          "candidates per target group (1 = every candidate scored on its own)"),
      num(HSTU_FIELD(NetworkArgs, network, num_position_buckets), at_least(1),
          "rows of the learned absolute position table"),
      plain(HSTU_FIELD(NetworkArgs, network, recompute_input_layernorm),
            "recompute the input LayerNorm in backward instead of storing it"),
      plain(HSTU_FIELD(NetworkArgs, network, recompute_input_silu),
            "recompute SiLU(uvqk) in backward instead of storing it"),
      num(HSTU_FIELD(NetworkArgs, network, item_embedding_dim), or_auto(at_least(1)),
          "item / action table width, projected to hidden_size (-1 = hidden_size)"),
      num(HSTU_FIELD(NetworkArgs, network, contextual_embedding_dim), or_auto(at_least(1)),
          "contextual table width, projected to hidden_size (-1 = hidden_size)"),
      num(HSTU_FIELD(NetworkArgs, network, scaling_seqlen), or_auto(at_least(1)),
          "N, the attention divisor (-1 = the static maximum sequence length)"),
      plain(HSTU_FIELD(NetworkArgs, network, disable_contextual_mask),
            "treat contextual tokens as a plain causal prefix"),
      num(HSTU_FIELD(NetworkArgs, network, attention_alpha), or_auto(above(0)),
          "scale of q.k (+ rab) (-1 = 1/sqrt(kv_channels))"),
      plain(HSTU_FIELD(NetworkArgs, network, learnable_input_layernorm),
            "input LayerNorm has weight and bias"),
      plain(HSTU_FIELD(NetworkArgs, network, learnable_output_layernorm),
            "LayerNorm of the attention output has weight and bias"),
      plain(HSTU_FIELD(NetworkArgs, network, uvqk_bias), "bias on the uvqk projection"),
      plain(HSTU_FIELD(NetworkArgs, network, output_bias), "bias on the output projection"),
      plain(HSTU_FIELD(NetworkArgs, network, relative_attention_bias),
            "Meta's per-layer position + time-bucket attention bias"),
      num(HSTU_FIELD(NetworkArgs, network, rab_num_time_buckets), at_least(1),
          "time buckets of the relative bias are 0..rab_num_time_buckets"),
      num(HSTU_FIELD(NetworkArgs, network, max_attn_len), at_least(0),
          "local attention window (0 = none)"),
      plain(HSTU_FIELD(NetworkArgs, network, final_layernorm),
            "LayerNorm before the L2 normalisation of the outputs"),
      str(HSTU_FIELD(NetworkArgs, network, init), {"recsys", "meta"},
          "weight initialisation: recsys (xavier_uniform) or meta (Meta's research trainer)"),
      ignored("NetworkArgs", "kernel_backend", FieldType::kString, {"cutlass", "triton", "pytorch"},
              "hstu has one attention kernel per device"),
      ignored("NetworkArgs", "embedding_backend", FieldType::kString, {},
              "selects an inference embedding backend"),
  };
}

// OptimizerArgs.
std::vector<FieldSpec> optimizer_fields() {
  return {
      str(HSTU_FIELD(OptimizerArgs, optimizer, optimizer_str), {"adam", "adamw", "sgd"},
          "dense-parameter optimiser"),
      num(HSTU_FIELD(OptimizerArgs, optimizer, learning_rate), above(0), "peak learning rate"),
      num(HSTU_FIELD(OptimizerArgs, optimizer, adam_beta1), between(0, 1, true), "Adam beta1"),
      num(HSTU_FIELD(OptimizerArgs, optimizer, adam_beta2), between(0, 1, true), "Adam beta2"),
      num(HSTU_FIELD(OptimizerArgs, optimizer, adam_eps), above(0), "Adam epsilon"),
      num(HSTU_FIELD(OptimizerArgs, optimizer, weight_decay), at_least(0),
          "decoupled (AdamW-style) decay of dense matrices"),
      str(HSTU_FIELD(OptimizerArgs, optimizer, sparse_optimizer_str),
          {"adam", "row_wise_adagrad", "sgd", "dense_adam"},
          "embedding-table optimiser (row-wise updates of the rows in the batch)"),
      num(HSTU_FIELD(OptimizerArgs, optimizer, sparse_learning_rate), or_auto(above(0)),
          "embedding learning rate (-1 = learning_rate)"),
      str(HSTU_FIELD(OptimizerArgs, optimizer, lr_schedule),
          {"constant", "warmup_cosine", "warmup_linear"}, "learning-rate schedule"),
      num(HSTU_FIELD(OptimizerArgs, optimizer, warmup_steps), at_least(0),
          "linear warmup steps of the warmup_* schedules"),
      num(HSTU_FIELD(OptimizerArgs, optimizer, grad_clip_norm), at_least(0),
          "global L2 clip of dense gradients (0 = off)"),
  };
}

// RetrievalArgs.
std::vector<FieldSpec> retrieval_fields() {
  return {
      num(HSTU_FIELD(RetrievalArgs, retrieval, num_negatives), or_auto(at_least(1)),
          "R sampled negatives per query; -1 (recsys-examples' default): R = the batch's "
          "number of queries (supervised tokens), drawn with replacement"),
      str(HSTU_FIELD(RetrievalArgs, retrieval, eval_metrics), {"HR@K", "NDCG@K", "MRR"},
          "metrics reported first in the eval table (any K >= 1), then hstu's standard set"),
      num(HSTU_FIELD(RetrievalArgs, retrieval, temperature), above(0),
          "softmax temperature of the cosine similarities"),
      num(HSTU_FIELD(RetrievalArgs, retrieval, l2_norm_eps), above(0),
          "epsilon of the L2 normalisation of embeddings"),
      str(HSTU_FIELD(RetrievalArgs, retrieval, negative_sampler), {"uniform", "in_batch"},
          "uniform over the catalogue (Meta) or deduplicated in-batch (recsys-examples)"),
      num(HSTU_FIELD(RetrievalArgs, retrieval, eval_rank_cap), between(1, 2147483645, false),
          "ranks beyond this count as cap + 1 (a non-finite target score ranks cap + 2, last)"),
      str(HSTU_FIELD(RetrievalArgs, retrieval, loss_rows_dtype), {"auto", "float32"},
          "item rows the sampled softmax reads on a GPU: auto = a copy of the fp32 table in the "
          "activation dtype (NetworkArgs.dtype_str), refreshed every step, wherever a batch can "
          "read at least 3 times the table's rows (max tokens x (R + 1) >= 3 x rows): half the "
          "bytes, as the peers' autocast similarity; float32 = always the fp32 table. The "
          "gradient and the table stay fp32; the CPU computes in fp32"),
  };
}

// RankingArgs.
std::vector<FieldSpec> ranking_fields() {
  return {
      num(HSTU_FIELD(RankingArgs, ranking, prediction_head_arch), at_least(1),
          "MLP widths; the last is num_tasks (several tasks) or the number of classes"),
      str(HSTU_FIELD(RankingArgs, ranking, prediction_head_act_type), {"relu", "gelu"},
          "activation between MLP layers"),
      plain(HSTU_FIELD(RankingArgs, ranking, prediction_head_bias), "MLP layers have biases"),
      num(HSTU_FIELD(RankingArgs, ranking, num_tasks), at_least(1),
          "binary tasks decoded from the label bitmask (1 = one task: binary or multi-class)"),
      str(HSTU_FIELD(RankingArgs, ranking, eval_metrics),
          {"AUC", "ACC", "LogLoss", "RECALL", "PRECISION", "F1Score", "AP", "AVERAGE PRECISION"},
          "metrics of the eval table, per task: AUC, Accuracy and LogLoss (or CrossEntropy) are "
          "always reported; RECALL, PRECISION, F1Score and AP (recsys-examples' \"AVERAGE "
          "PRECISION\") add Recall/task<t>, Precision/task<t>, F1/task<t>, AP/task<t>: "
          "torchmetrics' binary metrics at threshold 0.5 on sigmoid(logit), or their macro mean "
          "over the classes of a cross-entropy head; a value with a zero denominator (no "
          "positive label, no positive prediction) is reported as undefined with a warning "
          "(torchmetrics' safe division: 0 for recall, precision, F1)"),
  };
}

// DynamicTableArgs.
std::vector<FieldSpec> dynamic_table_fields() {
  return {
      str(HSTU_FIELD(DynamicTableArgs, dynamic, tables), {"item"},
          "embedding tables stored as dynamic hash tables keyed by int64 ids (only the item "
          "table: the action and contextual vocabularies are small and dense, and hstu has no "
          "user-id table); [] = every table dense"),
      num(HSTU_FIELD(DynamicTableArgs, dynamic, capacity_rows), or_auto(at_least(1)),
          "slots of each dynamic table, rounded up to whole buckets (recsys-examples' "
          "item_vocab_size_or_capacity; -1 or None = capacity_ratio x the catalogue's keys); "
          "on W data-parallel ranks the table is sharded by key (TrainerArgs.shard_owner) and "
          "each rank holds align(ceil(capacity / W), bucket_size) slots"),
      num(HSTU_FIELD(DynamicTableArgs, dynamic, capacity_ratio), above(0),
          "capacity as a multiple of the catalogue's keys when capacity_rows = -1 (0.5: half "
          "the catalogue, the rest evicted)"),
      num(HSTU_FIELD(DynamicTableArgs, dynamic, max_capacity_rows), at_least(0),
          "the table doubles while more than max_load_factor of its slots are used, up to this "
          "many slots (0 = fixed capacity: a full bucket evicts)"),
      num(HSTU_FIELD(DynamicTableArgs, dynamic, bucket_size), between(1, 32, false),
          "slots per bucket, a power of two; a key lives in one bucket, probed by one warp "
          "(recsys-examples' bucket_capacity is 128, hard-coded there)"),
      num(HSTU_FIELD(DynamicTableArgs, dynamic, max_load_factor), between(0.01, 1, false),
          "occupied fraction of the slots above which the table grows (when it may)"),
      str(HSTU_FIELD(DynamicTableArgs, dynamic, eviction), {"none", "lru", "lfu"},
          "which key a full bucket gives up for a new one: lru = least recently used step, lfu = "
          "least frequently used, none = no eviction (an insert into a full bucket is an error)"),
      num(HSTU_FIELD(DynamicTableArgs, dynamic, admit_threshold), at_least(0),
          "a new key is inserted at its N-th sighting (counted per key); before that its "
          "lookups get a fresh initial row in training, zeros in evaluation (0 or 1 = at once)"),
      plain(HSTU_FIELD(DynamicTableArgs, dynamic, host_tier),
            "may the table exceed its HBM budget: the full table in pinned host memory and the "
            "budget's rows in HBM as a cache (evicted rows written back, the next batch's rows "
            "prefetched); off: a capacity above the budget is an error"),
      num(HSTU_FIELD(DynamicTableArgs, dynamic, hbm_bytes), or_auto(at_least(1)),
          "HBM for the table's values (recsys-examples' global_hbm_for_values): rows = bytes / "
          "(dim x value bytes + optimiser state x 4 B); wins over hbm_rows and hbm_ratio (-1 or "
          "None = unset)"),
      num(HSTU_FIELD(DynamicTableArgs, dynamic, hbm_rows), or_auto(at_least(1)),
          "rows held in HBM (recsys-examples' item_vocab_gpu_capacity); wins over hbm_ratio "
          "(-1 or None = unset)"),
      num(HSTU_FIELD(DynamicTableArgs, dynamic, hbm_ratio), between(0, 1, false),
          "rows held in HBM as a fraction of the capacity (recsys-examples' "
          "item_vocab_gpu_capacity_ratio; 1 = all in HBM)"),
      str(HSTU_FIELD(DynamicTableArgs, dynamic, value_dtype), {"float32", "bfloat16"},
          "storage of the embedding part of a row (optimiser state stays float32)"),
      num(HSTU_FIELD(DynamicTableArgs, dynamic, init_std), above(0),
          "std of the truncated normal that initialises a new key's row (the dense item table "
          "uses 0.02)"),
  };
}

#undef HSTU_FIELD

}  // namespace

const std::vector<ClassSpec>& config_classes() {
  static const std::vector<ClassSpec> classes = {
      {"TrainerArgs", "the training loop, evaluation cadence, checkpoints, device, run directory"},
      {"DatasetArgs", "which dataset, where it lives, how samples are cut and split"},
      {"SyntheticArgs",
       "hstu's synthetic generator (planted clusters + Markov transitions), used when "
       "DatasetArgs.dataset_name = \"synthetic\""},
      {"RandomDistribution",
       "a distribution, bound through a scope: SyntheticArgs.seqlen_dist = "
       "@seqlen_dist/RandomDistribution() with seqlen_dist/RandomDistribution.FIELD = ...; "
       "unbound fields take the defaults below"},
      {"NetworkArgs", "the HSTU stack: sizes, dropout, masks, layer variants"},
      {"OptimizerArgs", "dense and embedding optimisers, learning-rate schedule, clipping"},
      {"RetrievalArgs",
       "next-item retrieval (sampled softmax); binding any field makes the run a retrieval run"},
      {"RankingArgs",
       "candidate ranking (MLP head on candidate tokens); binding any field makes the run a "
       "ranking run"},
      {"DynamicTableArgs",
       "dynamic (hash-table) embedding tables keyed by raw int64 ids: which tables, capacity, "
       "growth, eviction, admission, HBM budget and host tier (docs/DYNAMIC_TABLES.md; "
       "recsys-examples' DynamicEmbeddingArgs maps onto it)"},
  };
  return classes;
}

const std::vector<FieldSpec>& config_fields() {
  static const std::vector<FieldSpec> fields = [] {
    std::vector<FieldSpec> all;
    for (auto* class_fields :
         {trainer_fields, dataset_fields, synthetic_fields, distribution_fields, network_fields,
          optimizer_fields, retrieval_fields, ranking_fields, dynamic_table_fields}) {
      for (FieldSpec& f : class_fields()) all.push_back(std::move(f));
    }
    return all;
  }();
  return fields;
}

const std::vector<ClassSpec>& ignored_classes() {
  static const std::vector<ClassSpec> classes = {
      {"TensorModelParallelArgs",
       "tensor_model_parallel_size = 1 only: a no-op; larger sizes are errors in hstu files and "
       "the TP group's batch in recsys-examples files"},
      {"EmbeddingArgs", "hstu defines the embedding tables from the dataset"},
      {"BaseEmbeddingArgs", "hstu defines the embedding tables from the dataset"},
      {"BenchmarkDatasetArgs",
       "an error in an hstu file: a recsys-examples file (only their keys) trains on the data it "
       "defines; an hstu file names such a file: DatasetArgs.dataset_name = \"benchmark\", "
       "dataset_path = it"},
      {"FeatureArgs", "an error, as BenchmarkDatasetArgs"},
      {"DistributedDataParallelArgs", "hstu's data-parallel settings are fixed"},
  };
  return classes;
}

}  // namespace hstu
