// schema.cpp — the field table of every config class, and binding / validation / gin output /
// reference documentation driven by it.
//
// Each row's accessor is generated from the class and member name by one macro, so a row can
// only point at the member its gin name says. RandomDistribution rows address
// Config::synthetic.seqlen_dist (the one distribution-valued field); a distribution is built by
// binding its rows into a scratch Config and copying that member out.
#include "config/schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace hstu {
namespace {

using detail::cat;
using Kind = gin::Value::Kind;

constexpr const char* kDistributionClass = "RandomDistribution";

// ---- building the table ----------------------------------------------------------------------

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

std::vector<FieldSpec> make_fields() {
  const std::vector<std::string> kDatasets = {
      "synthetic", "ml-1m",      "ml-20m",        "ml-latest",   "ml-latest-small",
      "ml-100k",   "amzn-books", "kuairand-pure", "kuairand-1k", "kuairand-27k"};
  return {
      // TrainerArgs
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
      num(HSTU_FIELD(TrainerArgs, trainer, ckpt_save_interval), or_auto(at_least(1)),
          "save a checkpoint every N steps (-1 = only at the end of the run)"),
      str(HSTU_FIELD(TrainerArgs, trainer, ckpt_save_dir), {},
          "checkpoint directory (\"\" = run_dir/checkpoints)"),
      str(HSTU_FIELD(TrainerArgs, trainer, ckpt_load_dir), {},
          "initialise from this checkpoint (\"\" = none)"),
      str(HSTU_FIELD(TrainerArgs, trainer, run_dir), {},
          "where the effective config, metrics.jsonl and checkpoints go"),
      str(HSTU_FIELD(TrainerArgs, trainer, device), {"auto", "cpu", "cuda"},
          "auto = cuda when a GPU is present, else cpu"),
      num(HSTU_FIELD(TrainerArgs, trainer, num_threads), at_least(0),
          "CPU threads (0 = all cores)"),
      str(HSTU_FIELD(TrainerArgs, trainer, select_best_on), {"none", "validation"},
          "validation: report test metrics at the epoch with the best validation NDCG@10"),
      plain(HSTU_FIELD(TrainerArgs, trainer, profile),
            "write a Chrome-trace timeline to run_dir/trace.json"),
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
      ignored("TrainerArgs", "enable_balanced_shuffler", FieldType::kBool, {},
              "no workload-balancing shuffler across data-parallel ranks"),

      // DatasetArgs
      str(HSTU_FIELD(DatasetArgs, dataset, dataset_name), kDatasets,
          "which dataset (synthetic = hstu's generator, see SyntheticArgs)"),
      str(HSTU_FIELD(DatasetArgs, dataset, dataset_path), {},
          "raw data folder or file (\"\" or None = none, for synthetic)"),
      num(HSTU_FIELD(DatasetArgs, dataset, max_history_seqlen), at_least(1),
          "history events kept per sample (the newest)"),
      num(HSTU_FIELD(DatasetArgs, dataset, max_num_candidates), at_least(0),
          "ranking candidates per sample (0 for retrieval)"),
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

      // SyntheticArgs
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

      // RandomDistribution
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

      // NetworkArgs
      num(HSTU_FIELD(NetworkArgs, network, num_layers), at_least(1), "HSTU layers"),
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

      // OptimizerArgs
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

      // RetrievalArgs
      num(HSTU_FIELD(RetrievalArgs, retrieval, num_negatives), or_auto(at_least(1)),
          "R sampled negatives per query (-1 = the number of queries in the batch)"),
      str(HSTU_FIELD(RetrievalArgs, retrieval, eval_metrics), {"HR@K", "NDCG@K", "MRR"},
          "metrics of the eval table, K a positive int"),
      num(HSTU_FIELD(RetrievalArgs, retrieval, temperature), above(0),
          "softmax temperature of the cosine similarities"),
      num(HSTU_FIELD(RetrievalArgs, retrieval, l2_norm_eps), above(0),
          "epsilon of the L2 normalisation of embeddings"),
      str(HSTU_FIELD(RetrievalArgs, retrieval, negative_sampler), {"uniform", "in_batch"},
          "uniform over the catalogue (Meta) or deduplicated in-batch (recsys-examples)"),
      num(HSTU_FIELD(RetrievalArgs, retrieval, eval_rank_cap), at_least(1),
          "ranks beyond this count as cap + 1"),

      // RankingArgs
      num(HSTU_FIELD(RankingArgs, ranking, prediction_head_arch), at_least(1),
          "MLP widths; the last is num_tasks (several tasks) or the number of classes"),
      str(HSTU_FIELD(RankingArgs, ranking, prediction_head_act_type), {"relu", "gelu"},
          "activation between MLP layers"),
      plain(HSTU_FIELD(RankingArgs, ranking, prediction_head_bias), "MLP layers have biases"),
      num(HSTU_FIELD(RankingArgs, ranking, num_tasks), at_least(1),
          "binary tasks decoded from the label bitmask (1 = one task: binary or multi-class)"),
      str(HSTU_FIELD(RankingArgs, ranking, eval_metrics), {"AUC", "ACC", "LogLoss"},
          "metrics of the eval table, per task"),
  };
}

#undef HSTU_FIELD

// ---- small helpers ---------------------------------------------------------------------------

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) out += (k ? sep : "") + items[k];
  return out;
}

std::string format_number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Levenshtein distance, case-insensitive.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The closest of `candidates` to `name`, or "" when none is plausibly a typo of it.
std::string closest(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(name, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

const ClassSpec* find_in(const std::vector<ClassSpec>& classes, const std::string& name) {
  for (const ClassSpec& c : classes) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

const FieldSpec* find_field(const std::string& cls, const std::string& name) {
  for (const FieldSpec& f : config_fields()) {
    if (f.cls == cls && f.name == name) return &f;
  }
  return nullptr;
}

std::vector<std::string> class_names() {
  std::vector<std::string> names;
  for (const ClassSpec& c : config_classes()) names.push_back(c.name);
  return names;
}

// The configurable of a binding: the last part of a dotted selector ("module.NetworkArgs").
std::string class_of(const gin::Binding& b) {
  const size_t dot = b.selector.rfind('.');
  return dot == std::string::npos ? b.selector : b.selector.substr(dot + 1);
}

bool is_allowed(const FieldSpec& f, const std::string& s) {
  if (f.allowed.empty()) return true;
  for (const std::string& a : f.allowed) {
    if (a == s) return true;
    // "HR@K": the prefix then a positive int.
    if (a.size() > 1 && a.ends_with("@K") && s.starts_with(a.substr(0, a.size() - 1))) {
      const std::string k = s.substr(a.size() - 1);
      if (!k.empty() && k[0] != '0' && k.find_first_not_of("0123456789") == std::string::npos &&
          k.size() < 10) {
        return true;
      }
    }
  }
  return false;
}

const char* type_name(FieldType t) {
  switch (t) {
    case FieldType::kInt:
      return "int";
    case FieldType::kFloat:
      return "float";
    case FieldType::kBool:
      return "bool";
    case FieldType::kString:
      return "string";
    case FieldType::kStringList:
      return "list of strings";
    case FieldType::kIntList:
      return "list of ints";
    case FieldType::kDistribution:
      return "@RandomDistribution()";
  }
  return "";
}

const char* expected_phrase(FieldType t) {
  switch (t) {
    case FieldType::kInt:
      return "an int";
    case FieldType::kFloat:
      return "a number";
    case FieldType::kBool:
      return "True or False";
    case FieldType::kString:
      return "a quoted string";
    case FieldType::kStringList:
      return "a list of strings";
    case FieldType::kIntList:
      return "a list of ints";
    case FieldType::kDistribution:
      return "@RandomDistribution() (optionally @scope/...)";
  }
  return "";
}

// Storage for checking a value that is not stored (ignored fields, distribution rows).
struct Scratch {
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<std::string> strings;
  std::vector<int64_t> ints;
  RandomDistribution d;

  FieldRef ref(FieldType t) {
    switch (t) {
      case FieldType::kInt:
        return &i;
      case FieldType::kFloat:
        return &f;
      case FieldType::kBool:
        return &b;
      case FieldType::kString:
        return &s;
      case FieldType::kStringList:
        return &strings;
      case FieldType::kIntList:
        return &ints;
      case FieldType::kDistribution:
        return &d;
    }
    return &i;
  }
};

// A field's value as a gin value; distributions as @scope/RandomDistribution().
gin::Value value_of(const FieldRef& ref, const std::string& scope) {
  gin::Value v;
  if (auto p = std::get_if<int64_t*>(&ref)) {
    v.kind = Kind::kInt;
    v.i = **p;
  } else if (auto p = std::get_if<double*>(&ref)) {
    v.kind = Kind::kFloat;
    v.f = **p;
  } else if (auto p = std::get_if<bool*>(&ref)) {
    v.kind = Kind::kBool;
    v.b = **p;
  } else if (auto p = std::get_if<std::string*>(&ref)) {
    v.kind = Kind::kString;
    v.s = **p;
  } else if (auto p = std::get_if<std::vector<std::string>*>(&ref)) {
    v.kind = Kind::kList;
    for (std::string& s : **p) v.items.push_back(value_of(&s, ""));
  } else if (auto p = std::get_if<std::vector<int64_t>*>(&ref)) {
    v.kind = Kind::kList;
    for (int64_t& x : **p) v.items.push_back(value_of(&x, ""));
  } else {
    v.kind = Kind::kReference;
    v.s = kDistributionClass;
    v.scope = scope;
    v.call = true;
  }
  return v;
}

// "" when the field's value is allowed, else "is out of range: must be ..." or similar.
std::string violation(const FieldSpec& f, const FieldRef& ref) {
  auto number = [&](double v, const std::string& element) -> std::string {
    if (f.range.contains(v)) return "";
    const std::string range = f.range.describe();
    const bool interval = range[0] == '[' || range[0] == '(';
    return cat("is out of range: ", element, "must be ", interval ? "in " : "", range);
  };
  auto word = [&](const std::string& s, const std::string& element) -> std::string {
    if (is_allowed(f, s)) return "";
    return cat("is not allowed: ", element, "must be one of ", join(f.allowed));
  };
  if (auto p = std::get_if<int64_t*>(&ref)) return number(static_cast<double>(**p), "");
  if (auto p = std::get_if<double*>(&ref)) return number(**p, "");
  if (auto p = std::get_if<std::string*>(&ref)) return word(**p, "");
  if (auto p = std::get_if<std::vector<std::string>*>(&ref)) {
    for (const std::string& s : **p) {
      std::string bad = word(s, cat("element \"", s, "\" "));
      if (!bad.empty()) return bad;
    }
  }
  if (auto p = std::get_if<std::vector<int64_t>*>(&ref)) {
    for (int64_t x : **p) {
      std::string bad = number(static_cast<double>(x), cat("element ", x, " "));
      if (!bad.empty()) return bad;
    }
  }
  return "";
}

// Stores binding `b` into the (non-distribution) field `ref` of type f.type, then checks it.
void assign(const FieldSpec& f, const gin::Binding& b, const FieldRef& ref) {
  const gin::Value& v = b.value;
  const std::string what = cat(b.loc.str(), ": ", b.key());
  auto wrong = [&]() {
    HSTU_THROW(what, " expects ", expected_phrase(f.type), ", got ", gin::kind_name(v.kind), " ",
               gin::to_string(v));
  };
  auto all_items = [&](Kind k) {
    if (v.kind != Kind::kList && v.kind != Kind::kTuple) return false;
    return std::all_of(v.items.begin(), v.items.end(),
                       [&](const gin::Value& item) { return item.kind == k; });
  };
  const bool none_number = v.kind == Kind::kNone && f.range.none.has_value();
  if (auto p = std::get_if<int64_t*>(&ref)) {
    if (v.kind != Kind::kInt && !none_number) wrong();
    **p = none_number ? static_cast<int64_t>(*f.range.none) : v.i;
  } else if (auto p = std::get_if<double*>(&ref)) {
    if (v.kind != Kind::kInt && v.kind != Kind::kFloat && !none_number) wrong();
    **p = none_number ? *f.range.none : v.kind == Kind::kInt ? static_cast<double>(v.i) : v.f;
  } else if (auto p = std::get_if<bool*>(&ref)) {
    if (v.kind != Kind::kBool) wrong();
    **p = v.b;
  } else if (auto p = std::get_if<std::string*>(&ref)) {
    if (v.kind != Kind::kString && v.kind != Kind::kNone) wrong();
    **p = v.s;  // None -> ""
  } else if (auto p = std::get_if<std::vector<std::string>*>(&ref)) {
    if (!all_items(Kind::kString)) wrong();
    (*p)->clear();
    for (const gin::Value& item : v.items) (*p)->push_back(item.s);
  } else if (auto p = std::get_if<std::vector<int64_t>*>(&ref)) {
    if (!all_items(Kind::kInt)) wrong();
    (*p)->clear();
    for (const gin::Value& item : v.items) (*p)->push_back(item.i);
  } else {
    wrong();
  }
  const std::string bad = violation(f, ref);
  if (!bad.empty()) HSTU_THROW(what, " = ", gin::to_string(v), " ", bad);
}

// "file:line: Class.field" for an unknown class or field, with a suggestion.
[[noreturn]] void unknown(const gin::Binding& b, const std::string& cls) {
  if (!find_in(config_classes(), cls)) {
    const std::string guess = closest(cls, class_names());
    HSTU_THROW(b.loc.str(), ": unknown class '", cls, "' in ", b.key(),
               guess.empty() ? "" : cat(" (did you mean '", guess, "'?)"),
               "; known classes: ", join(class_names()));
  }
  std::vector<std::string> same_class;
  std::string elsewhere;
  for (const FieldSpec& f : config_fields()) {
    if (f.cls == cls) same_class.push_back(f.name);
    if (f.cls != cls && f.name == b.field && f.get) elsewhere = f.cls + "." + f.name;
  }
  const std::string guess = closest(b.field, same_class);
  HSTU_THROW(b.loc.str(), ": unknown field '", b.field, "' of ", cls,
             !guess.empty()       ? cat(" (did you mean '", cls, ".", guess, "'?)")
             : !elsewhere.empty() ? cat(" (did you mean '", elsewhere, "'?)")
                                  : cat("; fields of ", cls, ": ", join(same_class)));
}

// Builds the distribution @scope/RandomDistribution() from the RandomDistribution rows in
// `rows` (unscoped first, then `scope`d ones, which win); marks the rows it used.
RandomDistribution evaluate_distribution(const std::string& scope,
                                         const std::vector<const gin::Binding*>& rows,
                                         std::vector<bool>& used) {
  Config holder;
  holder.synthetic.seqlen_dist = RandomDistribution{};
  for (const bool scoped : {false, true}) {
    if (scoped && scope.empty()) break;
    for (size_t k = 0; k < rows.size(); ++k) {
      if (rows[k]->scope != (scoped ? scope : "")) continue;
      const FieldSpec& f = *find_field(kDistributionClass, rows[k]->field);
      assign(f, *rows[k], f.get(holder));
      used[k] = true;
    }
  }
  return holder.synthetic.seqlen_dist;
}

}  // namespace

// ---- Range -----------------------------------------------------------------------------------

bool Range::contains(double v) const {
  if (also && v == *also) return true;
  if (!std::isfinite(v)) return false;
  return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string Range::describe() const {
  const bool has_lo = lo > -1e308, has_hi = hi < 1e308;
  std::string text;
  if (has_lo && has_hi) {
    text =
        cat(lo_open ? "(" : "[", format_number(lo), ", ", format_number(hi), hi_open ? ")" : "]");
  } else if (has_lo) {
    text = cat(lo_open ? "> " : ">= ", format_number(lo));
  } else if (has_hi) {
    text = cat(hi_open ? "< " : "<= ", format_number(hi));
  } else {
    text = "any";
  }
  if (also && !(has_lo || has_hi)) return text;  // "any" already includes the sentinel
  return also ? cat(format_number(*also), " or ", text) : text;
}

// ---- the tables ------------------------------------------------------------------------------

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
  };
  return classes;
}

const std::vector<FieldSpec>& config_fields() {
  static const std::vector<FieldSpec> fields = make_fields();
  return fields;
}

const std::vector<ClassSpec>& ignored_classes() {
  static const std::vector<ClassSpec> classes = {
      {"TensorModelParallelArgs", "hstu has no tensor parallelism"},
      {"EmbeddingArgs", "hstu defines the embedding tables from the dataset"},
      {"DynamicEmbeddingArgs", "hstu defines the embedding tables from the dataset"},
      {"BaseEmbeddingArgs", "hstu defines the embedding tables from the dataset"},
      {"BenchmarkDatasetArgs", "hstu's synthetic data is configured by SyntheticArgs"},
      {"FeatureArgs", "hstu's synthetic data is configured by SyntheticArgs"},
      {"DistributedDataParallelArgs", "hstu's data-parallel settings are fixed"},
  };
  return classes;
}

// ---- binding ---------------------------------------------------------------------------------

void bind_config(Config& config, const std::vector<gin::Binding>& bindings, TaskRule rule,
                 std::vector<std::string>* warnings) {
  auto warn = [&](const gin::Binding& b, const std::string& reason) {
    if (warnings) {
      warnings->push_back(cat(b.loc.str(), ": ", b.key(),
                              " is accepted for compatibility with recsys-examples and ignored (",
                              reason, ")"));
    }
  };
  // Pass 1: names, scopes, task; ignored and distribution rows are checked and set aside.
  std::vector<std::pair<const gin::Binding*, const FieldSpec*>> stored;
  std::vector<const gin::Binding*> distribution_rows;
  const gin::Binding* task_binding[2] = {nullptr, nullptr};  // ranking, retrieval
  for (const gin::Binding& b : bindings) {
    const std::string cls = class_of(b);
    if (const ClassSpec* ic = find_in(ignored_classes(), cls)) {
      warn(b, ic->doc);
      continue;
    }
    const FieldSpec* f = find_field(cls, b.field);
    if (!f) unknown(b, cls);
    if (!b.scope.empty() && cls != kDistributionClass) {
      HSTU_THROW(b.loc.str(), ": ", b.key(), ": scopes are only used on ", kDistributionClass,
                 " bindings (hstu reads ", cls, " unscoped); remove '", b.scope, "/'");
    }
    if (!f->get || cls == kDistributionClass) {
      Scratch scratch;
      assign(*f, b, scratch.ref(f->type));
      if (!f->get) {
        warn(b, f->doc);
      } else {
        distribution_rows.push_back(&b);
      }
      continue;
    }
    if (cls == "RankingArgs" && !task_binding[0]) task_binding[0] = &b;
    if (cls == "RetrievalArgs" && !task_binding[1]) task_binding[1] = &b;
    stored.emplace_back(&b, f);
  }

  const gin::Binding* ranking = task_binding[0];
  const gin::Binding* retrieval = task_binding[1];
  if (ranking && retrieval) {
    HSTU_THROW(ranking->loc.str(), ": ", ranking->key(), " makes this a ranking config, but ",
               retrieval->loc.str(), ": ", retrieval->key(),
               " makes it a retrieval config; bind only one of RankingArgs and RetrievalArgs");
  }
  for (const gin::Binding* b : {ranking, retrieval}) {
    if (!b) continue;
    const std::string task = b == ranking ? "ranking" : "retrieval";
    if (rule == TaskRule::kKeep && config.task != task) {
      HSTU_THROW(b->loc.str(), ": ", b->key(), " does not apply to this ", config.task, " config (",
                 class_of(*b), " configures ", task, " runs)");
    }
    config.task = task;
  }

  // Pass 2: store, in order.
  std::vector<bool> used(distribution_rows.size(), false);
  for (const auto& [b, f] : stored) {
    if (f->type != FieldType::kDistribution) {
      assign(*f, *b, f->get(config));
      continue;
    }
    const gin::Value& v = b->value;
    if (v.kind != Kind::kReference || v.s != kDistributionClass) {
      HSTU_THROW(b->loc.str(), ": ", b->key(), " expects ", expected_phrase(f->type), ", got ",
                 gin::kind_name(v.kind), " ", gin::to_string(v));
    }
    *std::get<RandomDistribution*>(f->get(config)) =
        evaluate_distribution(v.scope, distribution_rows, used);
  }
  for (size_t k = 0; k < distribution_rows.size(); ++k) {
    if (used[k]) continue;
    const gin::Binding& b = *distribution_rows[k];
    warn(b, cat("no field refers to it; bind e.g. SyntheticArgs.seqlen_dist = @",
                b.scope.empty() ? "" : b.scope + "/", kDistributionClass, "()"));
  }
}

// ---- validation ------------------------------------------------------------------------------

void validate(const Config& config) {
  Config c = config;  // the accessors take a mutable Config
  for (const FieldSpec& f : config_fields()) {
    if (!f.get) continue;
    const FieldRef ref = f.get(c);
    const std::string bad = violation(f, ref);
    if (bad.empty()) continue;
    const std::string name =
        f.cls == kDistributionClass ? "SyntheticArgs.seqlen_dist." + f.name : f.cls + "." + f.name;
    HSTU_THROW("invalid config: ", name, " = ", gin::to_string(value_of(ref, "")), " ", bad);
  }
  auto fail_unless = [](bool ok, const std::string& msg) {
    if (!ok) HSTU_THROW("invalid config: ", msg);
  };
  fail_unless(c.task == "retrieval" || c.task == "ranking",
              cat("task = \"", c.task, "\" must be retrieval or ranking"));
  fail_unless(!c.trainer.run_dir.empty(), "TrainerArgs.run_dir must not be empty");
  fail_unless(!c.trainer.profile || c.trainer.profile_step_end > c.trainer.profile_step_start,
              cat("TrainerArgs.profile_step_end (", c.trainer.profile_step_end,
                  ") must be greater than TrainerArgs.profile_step_start (",
                  c.trainer.profile_step_start, ")"));
  fail_unless(c.dataset.truncate != "oldest" || c.dataset.ranking_split == "user_70_30",
              "DatasetArgs.truncate = \"oldest\" needs DatasetArgs.ranking_split = \"user_70_30\" "
              "(with the time split a long user's train and eval windows would coincide)");
  fail_unless(c.trainer.select_best_on != "validation" || c.dataset.split == "validation",
              "TrainerArgs.select_best_on = \"validation\" needs DatasetArgs.split = "
              "\"validation\" (the paper split has no validation items)");

  const SyntheticArgs& s = c.synthetic;
  fail_unless(s.min_seqlen <= s.max_seqlen,
              cat("SyntheticArgs.min_seqlen (", s.min_seqlen, ") must not exceed max_seqlen (",
                  s.max_seqlen, ")"));
  fail_unless(s.clusters_per_user <= s.num_clusters,
              cat("SyntheticArgs.clusters_per_user (", s.clusters_per_user,
                  ") must not exceed num_clusters (", s.num_clusters, ")"));
  fail_unless(s.num_clusters <= s.num_items,
              cat("SyntheticArgs.num_clusters (", s.num_clusters, ") must not exceed num_items (",
                  s.num_items, ")"));
  fail_unless(s.seqlen_dist.high == -1 || s.seqlen_dist.high > s.seqlen_dist.low,
              cat("SyntheticArgs.seqlen_dist: high (", format_number(s.seqlen_dist.high),
                  ") must be greater than low (", format_number(s.seqlen_dist.low), ") or -1"));

  if (c.task == "retrieval") {
    fail_unless(c.dataset.max_num_candidates == 0,
                cat("DatasetArgs.max_num_candidates = ", c.dataset.max_num_candidates,
                    " but retrieval has no candidates (set it to 0 or bind RankingArgs)"));
    fail_unless(
        c.network.item_embedding_dim == -1 || c.network.item_embedding_dim == c.network.hidden_size,
        cat("NetworkArgs.item_embedding_dim (", c.network.item_embedding_dim,
            ") must be -1 or hidden_size (", c.network.hidden_size,
            ") for retrieval: item embeddings are scored against the outputs"));
    for (const std::string& m : c.retrieval.eval_metrics) {
      const size_t at = m.find('@');
      if (at == std::string::npos) continue;
      fail_unless(std::stoll(m.substr(at + 1)) <= c.retrieval.eval_rank_cap,
                  cat("RetrievalArgs.eval_metrics: ", m,
                      " needs K <= RetrievalArgs.eval_rank_cap (", c.retrieval.eval_rank_cap, ")"));
    }
  } else {
    const RankingArgs& r = c.ranking;
    fail_unless(!r.prediction_head_arch.empty(),
                "RankingArgs.prediction_head_arch must have at least one layer");
    fail_unless(r.num_tasks == 1 || r.prediction_head_arch.back() == r.num_tasks,
                cat("RankingArgs.prediction_head_arch ends with ",
                    r.prediction_head_arch.empty() ? 0 : r.prediction_head_arch.back(),
                    " but RankingArgs.num_tasks = ", r.num_tasks,
                    ": with several tasks the head needs one logit per task"));
  }
}

// ---- output ----------------------------------------------------------------------------------

std::string to_gin(const Config& config) {
  Config c = config;
  std::ostringstream os;
  os << "# hstu configuration (gin syntax); every field is listed.\n"
     << "# task: " << c.task << " (selected by binding RetrievalArgs or RankingArgs)\n";
  auto line = [&](const std::string& key, const std::string& value, const std::string& doc) {
    std::string text = key + " = " + value;
    text.resize(std::max<size_t>(text.size(), 56), ' ');
    os << text << "  # " << doc << "\n";
  };
  for (const ClassSpec& cls : config_classes()) {
    if (cls.name == kDistributionClass) continue;  // written after the field that refers to it
    if ((cls.name == "RankingArgs" && c.task != "ranking") ||
        (cls.name == "RetrievalArgs" && c.task != "retrieval")) {
      os << "\n# " << cls.name << ": not bound (binding it would make this a "
         << (c.task == "ranking" ? "retrieval" : "ranking") << " config)\n";
      continue;
    }
    os << "\n# " << cls.name << ": " << cls.doc << "\n";
    std::vector<const FieldSpec*> distributions;
    for (const FieldSpec& f : config_fields()) {
      if (f.cls != cls.name || !f.get) continue;
      line(cls.name + "." + f.name, gin::to_string(value_of(f.get(c), f.name)), f.doc);
      if (f.type == FieldType::kDistribution) distributions.push_back(&f);
    }
    for (const FieldSpec* d : distributions) {
      Config holder;
      holder.synthetic.seqlen_dist = *std::get<RandomDistribution*>(d->get(c));
      for (const FieldSpec& f : config_fields()) {
        if (f.cls != kDistributionClass) continue;
        line(d->name + "/" + f.cls + "." + f.name, gin::to_string(value_of(f.get(holder), "")),
             f.doc);
      }
    }
  }
  return os.str();
}

std::string config_reference_markdown() {
  auto cell = [](std::string s) {
    for (size_t at = s.find('|'); at != std::string::npos; at = s.find('|', at + 2)) {
      s.replace(at, 1, "\\|");
    }
    return s;
  };
  std::ostringstream os;
  for (const ClassSpec& cls : config_classes()) {
    std::string doc = cell(cls.doc);
    doc[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(doc[0])));
    os << "## " << cls.name << "\n\n"
       << doc << ".\n\n"
       << "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
    Config defaults;
    defaults.synthetic.seqlen_dist = RandomDistribution{};  // the class defaults, not the field's
    for (const FieldSpec& f : config_fields()) {
      if (f.cls != cls.name || !f.get) continue;
      const FieldRef ref = f.get(defaults);
      std::string allowed;
      switch (f.type) {
        case FieldType::kBool:
          allowed = "True, False";
          break;
        case FieldType::kDistribution:
          allowed = "@[scope/]RandomDistribution()";
          break;
        case FieldType::kString:
        case FieldType::kStringList:
          allowed = f.allowed.empty() ? "any" : join(f.allowed);
          break;
        default:
          allowed = f.range.describe();
      }
      if (f.type == FieldType::kStringList || f.type == FieldType::kIntList) {
        allowed = "each: " + allowed;
      }
      if (f.range.none) allowed += cat("; None = ", format_number(*f.range.none));
      const std::string value = f.type == FieldType::kDistribution
                                    ? "see below"
                                    : "`" + gin::to_string(value_of(ref, "")) + "`";
      os << "| `" << f.cls << "." << f.name << "` | " << cell(type_name(f.type)) << " | "
         << cell(value) << " | " << cell(allowed) << " | " << cell(f.doc) << " |\n";
    }
    if (cls.name == "SyntheticArgs") {
      const RandomDistribution& d = Config{}.synthetic.seqlen_dist;
      os << "\nDefault `SyntheticArgs.seqlen_dist`: " << d.dist_type << " with low "
         << format_number(d.low) << ", high " << format_number(d.high) << ", mean "
         << format_number(d.mean) << ", std " << format_number(d.std) << ".\n";
    }
    os << "\n";
  }
  os << "## Accepted for compatibility and ignored\n\n"
     << "recsys-examples' gin files also bind these. hstu parses them (checking the value where "
        "an allowed set is given), ignores them and prints one warning per binding.\n\n"
     << "| key | allowed | reason |\n|---|---|---|\n";
  for (const FieldSpec& f : config_fields()) {
    if (f.get) continue;
    os << "| `" << f.cls << "." << f.name << "` | "
       << cell(f.allowed.empty() ? std::string(type_name(f.type)) : join(f.allowed)) << " | "
       << cell(f.doc) << " |\n";
  }
  for (const ClassSpec& c : ignored_classes()) {
    os << "| `" << c.name << ".*` | any | " << cell(c.doc) << " |\n";
  }
  return os.str();
}

}  // namespace hstu
