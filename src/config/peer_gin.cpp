// peer_gin.cpp — the translation of the peers' gin files into hstu bindings (see peer_gin.h).
//
// Facts of the peers (their keys and defaults) come from ../shared/reference/
// generative-recommenders.md (§1.3, §1.4) and recsys-examples-hstu.md (§2.5, §3, §4.1, §5).
#include "config/peer_gin.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "config/benchmark_args.h"
#include "config/peer_dynamic_emb.h"
#include "core/error.h"

namespace hstu {
namespace {

using detail::cat;
using Kind = gin::Value::Kind;

// The configurable of a binding: the last part of a dotted selector.
std::string class_of(const gin::Binding& b) {
  const size_t dot = b.selector.rfind('.');
  return dot == std::string::npos ? b.selector : b.selector.substr(dot + 1);
}

// ---- values and bindings ---------------------------------------------------------------------

gin::Value int_value(int64_t v) {
  gin::Value x;
  x.kind = Kind::kInt;
  x.i = v;
  return x;
}
gin::Value float_value(double v) {
  gin::Value x;
  x.kind = Kind::kFloat;
  x.f = v;
  return x;
}
gin::Value bool_value(bool v) {
  gin::Value x;
  x.kind = Kind::kBool;
  x.b = v;
  return x;
}
gin::Value string_value(const std::string& v) {
  gin::Value x;
  x.kind = Kind::kString;
  x.s = v;
  return x;
}
gin::Value string_list(const std::vector<std::string>& v) {
  gin::Value x;
  x.kind = Kind::kList;
  for (const std::string& s : v) x.items.push_back(string_value(s));
  return x;
}

gin::Binding make(const std::string& key, gin::Value value, const gin::Location& loc) {
  gin::Binding b;
  const size_t dot = key.find('.');
  b.selector = key.substr(0, dot);
  b.field = key.substr(dot + 1);
  value.loc = loc;
  b.value = std::move(value);
  b.loc = loc;
  return b;
}

// ---- dialects --------------------------------------------------------------------------------

const std::set<std::string>& meta_research_classes() {
  static const std::set<std::string> s = {"train_fn",
                                          "hstu_encoder",
                                          "sasrec_encoder",
                                          "create_data_loader",
                                          "get_reco_dataset",
                                          "get_sequential_encoder",
                                          "get_similarity_function",
                                          "get_dataset_and_negatives_sampler"};
  return s;
}

const std::set<std::string>& meta_dlrm_classes() {
  static const std::set<std::string> s = {"make_model",
                                          "dense_optimizer_factory_and_class",
                                          "sparse_optimizer_factory_and_class",
                                          "make_train_test_dataloaders",
                                          "train_eval_loop",
                                          "train_loop",
                                          "eval_loop",
                                          "MetricsLogger",
                                          "save_dmp_checkpoint",
                                          "load_dmp_checkpoint"};
  return s;
}

// recsys-examples' gin keys (examples/hstu/utils/gin_config_args.py and RandomDistribution):
// "Class.field", or "Class.*" for a class hstu checks field by field elsewhere.
const std::set<std::string>& recsys_keys() {
  static const std::set<std::string> s = {"TrainerArgs.train_batch_size",
                                          "TrainerArgs.eval_batch_size",
                                          "TrainerArgs.eval_interval",
                                          "TrainerArgs.log_interval",
                                          "TrainerArgs.max_train_iters",
                                          "TrainerArgs.max_eval_iters",
                                          "TrainerArgs.seed",
                                          "TrainerArgs.profile",
                                          "TrainerArgs.profile_step_start",
                                          "TrainerArgs.profile_step_end",
                                          "TrainerArgs.ckpt_save_interval",
                                          "TrainerArgs.ckpt_save_dir",
                                          "TrainerArgs.ckpt_load_dir",
                                          "TrainerArgs.pipeline_type",
                                          "TrainerArgs.enable_balanced_shuffler",
                                          "DatasetArgs.dataset_name",
                                          "DatasetArgs.max_history_seqlen",
                                          "DatasetArgs.dataset_path",
                                          "DatasetArgs.max_num_candidates",
                                          "DatasetArgs.shuffle",
                                          "NetworkArgs.num_layers",
                                          "NetworkArgs.hidden_size",
                                          "NetworkArgs.num_attention_heads",
                                          "NetworkArgs.kv_channels",
                                          "NetworkArgs.hidden_dropout",
                                          "NetworkArgs.norm_epsilon",
                                          "NetworkArgs.is_causal",
                                          "NetworkArgs.dtype_str",
                                          "NetworkArgs.kernel_backend",
                                          "NetworkArgs.target_group_size",
                                          "NetworkArgs.num_position_buckets",
                                          "NetworkArgs.recompute_input_layernorm",
                                          "NetworkArgs.recompute_input_silu",
                                          "NetworkArgs.item_embedding_dim",
                                          "NetworkArgs.contextual_embedding_dim",
                                          "NetworkArgs.scaling_seqlen",
                                          "NetworkArgs.embedding_backend",
                                          "NetworkArgs.disable_contextual_mask",
                                          "OptimizerArgs.optimizer_str",
                                          "OptimizerArgs.learning_rate",
                                          "OptimizerArgs.adam_beta1",
                                          "OptimizerArgs.adam_beta2",
                                          "OptimizerArgs.adam_eps",
                                          "RetrievalArgs.num_negatives",
                                          "RetrievalArgs.eval_metrics",
                                          "RankingArgs.prediction_head_arch",
                                          "RankingArgs.prediction_head_act_type",
                                          "RankingArgs.prediction_head_bias",
                                          "RankingArgs.num_tasks",
                                          "RankingArgs.eval_metrics",
                                          "TensorModelParallelArgs.tensor_model_parallel_size",
                                          "RandomDistribution.*",
                                          "FeatureArgs.*",
                                          "BenchmarkDatasetArgs.*",
                                          "EmbeddingArgs.*",
                                          "DynamicEmbeddingArgs.*",
                                          "BaseEmbeddingArgs.*"};
  return s;
}

// The keys recsys-examples requires (no default there): a file that binds every one of them and
// nothing but recsys-examples keys is a file recsys-examples itself runs.
const std::vector<std::string>& recsys_required() {
  static const std::vector<std::string> r = {
      "TrainerArgs.train_batch_size", "TrainerArgs.eval_batch_size",     "NetworkArgs.num_layers",
      "NetworkArgs.hidden_size",      "NetworkArgs.num_attention_heads", "NetworkArgs.kv_channels",
      "OptimizerArgs.optimizer_str",  "OptimizerArgs.learning_rate"};
  return r;
}

bool is_recsys_key(const gin::Binding& b) {
  const std::string cls = class_of(b);
  return recsys_keys().count(cls + "." + b.field) || recsys_keys().count(cls + ".*");
}

// ---- Meta's research files -------------------------------------------------------------------

// The protocol of Meta's research trainer that its gin files do not spell out: the research HSTU
// layer, torch AdamW over every parameter, uniform negatives, full-catalogue leave-one-out
// evaluation with its metrics, pandas' unstable time sort; the values every translated preset
// (configs/ml-1m-hstu.gin and the others) sets.
std::vector<std::pair<std::string, gin::Value>> meta_protocol() {
  return {
      {"NetworkArgs.attention_alpha", float_value(1.0)},
      {"NetworkArgs.learnable_input_layernorm", bool_value(false)},
      {"NetworkArgs.learnable_output_layernorm", bool_value(false)},
      {"NetworkArgs.uvqk_bias", bool_value(false)},
      {"NetworkArgs.output_bias", bool_value(true)},
      {"NetworkArgs.relative_attention_bias", bool_value(true)},
      {"NetworkArgs.rab_num_time_buckets", int_value(128)},
      {"NetworkArgs.norm_epsilon", float_value(1e-6)},
      {"NetworkArgs.init", string_value("meta")},
      {"NetworkArgs.is_causal", bool_value(true)},
      {"OptimizerArgs.optimizer_str", string_value("adamw")},
      {"OptimizerArgs.adam_beta1", float_value(0.9)},
      {"OptimizerArgs.adam_beta2", float_value(0.98)},
      {"OptimizerArgs.sparse_optimizer_str", string_value("dense_adam")},
      {"OptimizerArgs.lr_schedule", string_value("constant")},
      {"RetrievalArgs.negative_sampler", string_value("uniform")},
      {"RetrievalArgs.eval_rank_cap", int_value(2500)},
      {"RetrievalArgs.eval_metrics",
       string_list({"HR@1", "HR@10", "HR@50", "HR@200", "NDCG@10", "NDCG@50", "NDCG@200", "MRR"})},
      {"DatasetArgs.split", string_value("paper")},
      {"DatasetArgs.tie_break", string_value("shuffle")},
      {"DatasetArgs.shuffle", bool_value(true)},
      {"TrainerArgs.log_interval", int_value(50)},
      // train_fn defaults the research files do not override (reference §1.3).
      {"TrainerArgs.eval_every_n_epochs", int_value(1)},  // full_eval_every_n = 1
      {"TrainerArgs.seed", int_value(42)},                // random_seed = 42
      {"TrainerArgs.eval_batch_size", int_value(128)},    // eval_batch_size = 128
  };
}

// Where Meta's trainer reads each dataset (its preprocessing writes under tmp/).
const std::map<std::string, std::string>& meta_dataset_paths() {
  static const std::map<std::string, std::string> m = {
      {"ml-1m", "tmp/ml-1m"}, {"ml-20m", "tmp/ml-20m"}, {"amzn-books", "tmp/ratings_Books.csv"}};
  return m;
}

// The nearest translated preset of a Meta dataset name.
std::string meta_preset(const std::string& dataset) {
  if (dataset == "amzn-books") return "configs/amzn-books-hstu.gin";
  if (dataset == "ml-20m") return "configs/ml-20m-hstu.gin";
  return "configs/ml-1m-hstu.gin";
}

// The train_fn / hstu_encoder keys every research file sets; hstu assumes none of Meta's
// defaults for them (several differ between Meta's versions).
const std::vector<std::string>& meta_required() {
  static const std::vector<std::string> r = {
      "train_fn.dataset_name",      "train_fn.max_sequence_length", "train_fn.local_batch_size",
      "train_fn.main_module",       "train_fn.item_embedding_dim",  "train_fn.num_epochs",
      "train_fn.learning_rate",     "train_fn.num_negatives",       "train_fn.loss_module",
      "train_fn.sampling_strategy", "train_fn.temperature",         "train_fn.item_l2_norm",
      "train_fn.dropout_rate",      "train_fn.weight_decay"};
  return r;
}

std::vector<gin::Binding> translate_meta(const std::vector<gin::Binding>& in,
                                         const std::string& name, std::vector<std::string>* notes) {
  std::vector<std::string> problems;
  std::vector<gin::Binding> out;
  const gin::Location base_loc{name + " (generative-recommenders protocol)", 0, 0};
  for (auto& [key, value] : meta_protocol()) out.push_back(make(key, value, base_loc));

  std::string dataset = "ml-1m";
  int64_t max_len = -1, dqk = -1, dv = -1;
  gin::Location len_loc = base_loc;
  std::set<std::string> seen;
  auto note = [&](const gin::Binding& b, const std::string& why) {
    if (notes)
      notes->push_back(
          cat(b.loc.str(), ": ", b.key(), " = ", gin::to_string(b.value), ": difference: ", why));
  };
  auto reject = [&](const gin::Binding& b, const std::string& why) {
    problems.push_back(cat(b.loc.str(), ": ", b.key(), " = ", gin::to_string(b.value), ": ", why));
  };
  auto expect = [&](const gin::Binding& b, Kind kind) {
    const bool ok = b.value.kind == kind || (kind == Kind::kFloat && b.value.kind == Kind::kInt);
    if (!ok) reject(b, cat("expects ", gin::kind_name(kind)));
    return ok;
  };
  auto number = [](const gin::Value& v) { return v.kind == Kind::kInt ? double(v.i) : v.f; };
  auto emit = [&](const gin::Binding& b, const std::string& key, const gin::Value& v) {
    out.push_back(make(key, v, b.loc));
  };
  auto must_be = [&](const gin::Binding& b, const std::string& want, const std::string& why) {
    if (!expect(b, Kind::kString)) return;
    if (b.value.s != want) reject(b, why);
  };

  for (const gin::Binding& b : in) {
    const std::string cls = class_of(b);
    const std::string key = cls + "." + b.field;
    seen.insert(key);
    if (!b.scope.empty()) {
      reject(b, "scoped bindings are not used by Meta's research files");
      continue;
    }
    if (!meta_research_classes().count(cls)) {
      problems.push_back(cat(b.loc.str(), ": ", b.key(),
                             ": a generative-recommenders research file cannot also bind hstu or "
                             "recsys-examples keys; put them in a second file (hstu check A B)"));
      continue;
    }
    const std::string& f = b.field;
    if (cls == "train_fn") {
      if (f == "dataset_name") {
        if (!expect(b, Kind::kString)) continue;
        dataset = b.value.s;
        auto path = meta_dataset_paths().find(dataset);
        if (path == meta_dataset_paths().end()) {
          reject(b,
                 "hstu reads ml-1m, ml-20m and amzn-books of Meta's datasets (ml-3b is "
                 "generated by Meta's scripts and has no reader here)");
          continue;
        }
        emit(b, "DatasetArgs.dataset_name", string_value(dataset));
        emit(b, "DatasetArgs.dataset_path", string_value(path->second));
      } else if (f == "max_sequence_length") {
        if (!expect(b, Kind::kInt)) continue;
        max_len = b.value.i;
        len_loc = b.loc;
        emit(b, "DatasetArgs.max_history_seqlen", b.value);
      } else if (f == "local_batch_size") {
        if (expect(b, Kind::kInt)) emit(b, "TrainerArgs.train_batch_size", b.value);
      } else if (f == "eval_batch_size") {
        if (expect(b, Kind::kInt)) emit(b, "TrainerArgs.eval_batch_size", b.value);
      } else if (f == "main_module") {
        must_be(b, "HSTU",
                cat("hstu implements the HSTU encoder only (SASRec's softmax attention and "
                    "feed-forward blocks have no counterpart here); the nearest preset, same data "
                    "and protocol with HSTU: ",
                    meta_preset(dataset)));
      } else if (f == "dropout_rate") {
        if (expect(b, Kind::kFloat)) emit(b, "NetworkArgs.input_dropout", b.value);
      } else if (f == "user_embedding_norm") {
        must_be(
            b, "l2_norm",
            "hstu L2-normalises the encoder outputs (Meta's \"l2_norm\"); \"layer_norm\" has no "
            "counterpart");
      } else if (f == "num_epochs") {
        if (expect(b, Kind::kInt)) emit(b, "TrainerArgs.num_epochs", b.value);
      } else if (f == "item_embedding_dim") {
        if (expect(b, Kind::kInt)) emit(b, "NetworkArgs.hidden_size", b.value);
      } else if (f == "learning_rate") {
        if (expect(b, Kind::kFloat))
          emit(b, "OptimizerArgs.learning_rate", float_value(number(b.value)));
      } else if (f == "weight_decay") {
        if (expect(b, Kind::kFloat))
          emit(b, "OptimizerArgs.weight_decay", float_value(number(b.value)));
      } else if (f == "num_warmup_steps") {
        if (!expect(b, Kind::kInt)) continue;
        if (b.value.i != 0)
          reject(b,
                 "Meta warms up linearly to a constant rate; hstu's warmup schedules "
                 "(warmup_linear, warmup_cosine) decay after the warmup, so only 0 is honoured");
      } else if (f == "interaction_module_type") {
        must_be(b, "DotProduct",
                "hstu scores by dot product (cosine of L2-normalised vectors) only; mixture of "
                "logits has no counterpart");
      } else if (f == "top_k_method") {
        must_be(b, "MIPSBruteForceTopK",
                "hstu ranks the whole catalogue exactly (brute-force); approximate top-k has no "
                "counterpart");
      } else if (f == "loss_module") {
        must_be(b, "SampledSoftmaxLoss",
                "hstu's retrieval loss is the sampled softmax; BCE retrieval has no counterpart");
      } else if (f == "num_negatives") {
        if (expect(b, Kind::kInt)) emit(b, "RetrievalArgs.num_negatives", b.value);
      } else if (f == "sampling_strategy") {
        if (!expect(b, Kind::kString)) continue;
        if (b.value.s == "local")
          emit(b, "RetrievalArgs.negative_sampler", string_value("uniform"));
        else if (b.value.s == "in-batch")
          emit(b, "RetrievalArgs.negative_sampler", string_value("in_batch"));
        else
          reject(b, "hstu samples \"local\" (uniform over the catalogue) or \"in-batch\"");
      } else if (f == "temperature") {
        if (expect(b, Kind::kFloat))
          emit(b, "RetrievalArgs.temperature", float_value(number(b.value)));
      } else if (f == "item_l2_norm") {
        if (expect(b, Kind::kBool) && !b.value.b)
          reject(b, "hstu always L2-normalises item embeddings in the loss and evaluation");
      } else if (f == "l2_norm_eps") {
        if (expect(b, Kind::kFloat))
          emit(b, "RetrievalArgs.l2_norm_eps", float_value(number(b.value)));
      } else if (f == "enable_tf32") {
        if (expect(b, Kind::kBool) && b.value.b)
          note(b,
               "TF32 matmuls do not apply: hstu computes in fp32 on the CPU and in bf16 with "
               "fp32 accumulation on the GPU (NetworkArgs.dtype_str)");
      } else if (f == "main_module_bf16") {
        if (expect(b, Kind::kBool) && b.value.b)
          note(b, "hstu's GPU backend always uses bf16 activations; the CPU backend fp32");
      } else if (f == "full_eval_every_n") {
        if (expect(b, Kind::kInt)) emit(b, "TrainerArgs.eval_every_n_epochs", b.value);
      } else if (f == "eval_interval" || f == "partial_eval_num_iters") {
        if (expect(b, Kind::kInt))
          note(b,
               "Meta's partial evaluations (partial_eval_num_iters batches every "
               "eval_interval steps) are logging only and are not run; the full evaluations "
               "(full_eval_every_n) are");
      } else if (f == "random_seed") {
        if (!expect(b, Kind::kInt)) continue;
        emit(b, "TrainerArgs.seed", b.value);
        note(b, "hstu seeds every random choice with it (Meta seeds only Python's random)");
      } else if (f == "gr_output_length") {
        if (expect(b, Kind::kInt) && b.value.i != 10)
          reject(b,
                 "hstu's translation of Meta's position table and attention divisor assumes "
                 "gr_output_length = 10 (N = max_sequence_length + 11)");
      } else if (f == "save_ckpt_every_n") {
        if (expect(b, Kind::kInt))
          note(b,
               "hstu saves a checkpoint at the end of the run (TrainerArgs.ckpt_save_interval "
               "counts steps, not epochs)");
      } else if (f == "embedding_module_type") {
        must_be(b, "local", "hstu's item table is one local table");
      } else {
        reject(b, "no hstu counterpart is known for this key of Meta's train_fn");
      }
    } else if (cls == "hstu_encoder") {
      if (f == "num_blocks") {
        if (expect(b, Kind::kInt)) emit(b, "NetworkArgs.num_layers", b.value);
      } else if (f == "num_heads") {
        if (expect(b, Kind::kInt)) emit(b, "NetworkArgs.num_attention_heads", b.value);
      } else if (f == "dqk" || f == "dv") {
        if (!expect(b, Kind::kInt)) continue;
        (f == "dqk" ? dqk : dv) = b.value.i;
        emit(b, "NetworkArgs.kv_channels", b.value);
      } else if (f == "linear_dropout_rate") {
        if (expect(b, Kind::kFloat)) emit(b, "NetworkArgs.hidden_dropout", b.value);
      } else if (f == "attention_dropout_rate") {
        if (expect(b, Kind::kFloat) && number(b.value) != 0)
          reject(b, "hstu has no dropout on the attention weights (only 0 is honoured)");
      } else if (f == "enable_relative_attention_bias") {
        if (expect(b, Kind::kBool)) emit(b, "NetworkArgs.relative_attention_bias", b.value);
      } else if (f == "normalization") {
        must_be(b, "rel_bias", "hstu implements the \"rel_bias\" normalisation only");
      } else if (f == "linear_config") {
        must_be(b, "uvqk", "hstu implements the \"uvqk\" projection only");
      } else if (f == "linear_activation") {
        must_be(b, "silu", "hstu applies SiLU to u, v, q, k only");
      } else if (f == "concat_ua") {
        if (expect(b, Kind::kBool) && b.value.b)
          reject(b, "hstu does not concatenate u and the attention output");
      } else {
        reject(b, "no hstu counterpart is known for this key of Meta's hstu_encoder");
      }
    } else if (cls == "sasrec_encoder") {
      reject(b, cat("configures the SASRec encoder, which hstu does not implement; the nearest "
                    "preset (same data and protocol, HSTU encoder): ",
                    meta_preset(dataset)));
    } else if (cls == "create_data_loader" && (f == "prefetch_factor" || f == "num_workers")) {
      if (expect(b, Kind::kInt))
        note(b, "no effect on results: hstu reads the memory-mapped sequence file in-process");
    } else {
      reject(b, cat("no hstu counterpart is known for this key of Meta's ", cls));
    }
  }
  std::vector<std::string> missing;
  for (const std::string& k : meta_required())
    if (!seen.count(k)) missing.push_back(k);
  for (const char* k : {"hstu_encoder.num_blocks", "hstu_encoder.num_heads", "hstu_encoder.dqk",
                        "hstu_encoder.linear_dropout_rate"})
    if (!seen.count(k) && !seen.count("sasrec_encoder.num_blocks")) missing.push_back(k);
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    problems.push_back(cat(name, ": a generative-recommenders research file must set ", list,
                           " (hstu does not assume Meta's defaults for them); see ",
                           meta_preset(dataset)));
  }
  if (dqk > 0 && dv > 0 && dqk != dv)
    problems.push_back(
        cat(name, ": hstu_encoder.dqk = ", dqk, " and dv = ", dv,
            " differ; hstu's layer has one per-head width (NetworkArgs.kv_channels)"));
  if (max_len > 0) {
    // Meta's N = max_sequence_length + gr_output_length + 1: the attention divisor and the
    // length of the position table.
    out.push_back(make("NetworkArgs.scaling_seqlen", int_value(max_len + 11), len_loc));
    out.push_back(make("NetworkArgs.num_position_buckets", int_value(max_len + 11), len_loc));
  }
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += "\n  " + p;
    HSTU_THROW(name, ": a generative-recommenders research file that hstu cannot run as written (",
               problems.size(), problems.size() == 1 ? " problem" : " problems", "):", all);
  }
  return out;
}

// ---- Meta's dlrm_v3 files --------------------------------------------------------------------

[[noreturn]] void reject_dlrm_v3(const std::vector<gin::Binding>& in, const std::string& name) {
  std::string dataset;
  for (const gin::Binding& b : in)
    if (class_of(b) == "make_model" && b.field == "dataset" && b.value.kind == Kind::kString)
      dataset = b.value.s;
  const std::string preset = dataset.rfind("kuairand", 0) == 0 ? "configs/kuairand-1k-ranking.gin"
                                                               : "configs/movielens-ranking.gin";
  HSTU_THROW(
      name, ": a generative-recommenders dlrm_v3 file", dataset.empty() ? "" : " (" + dataset + ")",
      ", which hstu cannot run: what it needs and hstu lacks is (1) the model itself, which "
      "make_model builds in Python from the dataset name (DLRMv3: its own feature set, embedding "
      "tables and HSTU ranking stack; no gin key describes it), (2) make_train_test_dataloaders' "
      "split by train_split_percentage and its dataset readers (new_path_prefix), and (3) "
      "separate dense and sparse optimiser settings (dense_/sparse_optimizer_factory_and_class, "
      "betas per group). The nearest hstu preset, a ranking run on the same data: ",
      preset, " (hstu train ", preset, " --set DatasetArgs.dataset_path=...)");
}

// ---- recsys-examples files -------------------------------------------------------------------

// recsys-examples' defaults where hstu's differ and change results (reference §3, §4.1, §5).
// Injected before the file's own bindings, so the file (and any later file or --set) wins.
std::vector<std::pair<std::string, gin::Value>> recsys_defaults(bool retrieval) {
  std::vector<std::pair<std::string, gin::Value>> d = {
      {"DatasetArgs.shuffle", bool_value(false)},
      {"DatasetArgs.ranking_split", string_value("user_70_30")},
      {"DatasetArgs.truncate", string_value("oldest")},
      {"TrainerArgs.eval_interval", int_value(100)},
      {"TrainerArgs.ckpt_save_interval", int_value(-1)},
      // Megatron's dense optimiser: decoupled weight decay 0.01 on matrices (not gin-settable).
      {"OptimizerArgs.weight_decay", float_value(0.01)},
  };
  if (retrieval) {
    d.push_back({"RetrievalArgs.negative_sampler", string_value("in_batch")});
    d.push_back({"RetrievalArgs.num_negatives", int_value(-1)});
  }
  return d;
}

// Why a recsys-examples RankingArgs.eval_metrics value cannot be honoured ("" when it can).
std::string ranking_metrics_problem(const gin::Value& v) {
  if (v.kind != Kind::kList && v.kind != Kind::kTuple) return "";  // the schema names it
  for (const gin::Value& e : v.items) {
    if (e.kind != Kind::kString) continue;
    const std::string& m = e.s;
    if (m.rfind("NDCG", 0) == 0 || m.rfind("HR", 0) == 0 || m == "MRR")
      return cat("\"", m,
                 "\" is a retrieval metric (a rank of the next item in the catalogue); a ranking "
                 "task scores given candidates with per-task classification metrics, and "
                 "recsys-examples' ranking metric module computes only those (it accepts the "
                 "name but has no ranking meaning for it): use AUC, ACC, RECALL, PRECISION, "
                 "F1Score or AVERAGE PRECISION");
  }
  return "";  // the schema checks the classification names
}

std::vector<gin::Binding> translate_recsys(std::vector<gin::Binding> in, const std::string& name,
                                           std::vector<std::string>* notes) {
  bool retrieval = false, ranking = false;
  for (const gin::Binding& b : in) {
    retrieval = retrieval || class_of(b) == "RetrievalArgs";
    ranking = ranking || class_of(b) == "RankingArgs";
  }
  retrieval = retrieval && !ranking;  // both: bind_config reports the conflict
  const gin::Location base_loc{name + " (recsys-examples default)", 0, 0};
  std::vector<gin::Binding> out;
  for (auto& [key, value] : recsys_defaults(retrieval)) out.push_back(make(key, value, base_loc));

  std::vector<std::string> problems;
  bool benchmark_seen = false;
  // Read before the loop below moves the bindings out (its references need them all).
  std::optional<BenchmarkDatasetArgs> bench;
  try {
    bench = parse_benchmark_args(in);
  } catch (const Error& e) {
    problems.emplace_back(e.what());
    benchmark_seen = true;
  }
  const gin::Binding* batch = nullptr;
  const gin::Binding* tp = nullptr;
  bool tables_noted = false;
  const bool dataset_bound = std::any_of(
      in.begin(), in.end(), [](const gin::Binding& b) { return class_of(b) == "DatasetArgs"; });
  for (gin::Binding& b : in) {
    const std::string cls = class_of(b);
    if (cls == "BenchmarkDatasetArgs" || cls == "FeatureArgs") {
      if (benchmark_seen) continue;  // one description, read whole above
      benchmark_seen = true;
      if (!bench) {
        problems.push_back(cat(b.loc.str(), ": ", b.key(),
                               ": FeatureArgs without BenchmarkDatasetArgs.feature_args"));
        continue;
      }
      if (dataset_bound) {  // recsys-examples uses BenchmarkDatasetArgs only without DatasetArgs
        if (notes)
          notes->push_back(cat(b.loc.str(), ": ", b.key(),
                               ": BenchmarkDatasetArgs is not used: the file binds DatasetArgs "
                               "(recsys-examples reads the dataset then)"));
        continue;
      }
      // The generated data trains as dataset "benchmark", read again from this file by the
      // ranking task (data/benchmark_dataset.h): the file is its dataset_path.
      std::error_code ec;
      const std::filesystem::path abs = std::filesystem::absolute(name, ec);
      int64_t item_len = 1;
      for (const BenchmarkFeature& f : bench->features)
        for (const std::string& n : f.feature_names)
          if (n == bench->item_feature_name) item_len = f.max_sequence_length;
      const int64_t c = bench->max_num_candidates;
      out.push_back(make("DatasetArgs.dataset_name", string_value("benchmark"), b.loc));
      out.push_back(
          make("DatasetArgs.dataset_path", string_value(ec ? name : abs.string()), b.loc));
      out.push_back(make("DatasetArgs.max_num_candidates", int_value(c), b.loc));
      // Events per sample = max_sequence_length (history + candidates, as recsys-examples'
      // feature_to_max_seqlen; the attention scale is 1 / (contextual + 2 x that)).
      out.push_back(make("DatasetArgs.max_history_seqlen",
                         int_value(std::max<int64_t>(item_len - c, 1)), b.loc));
      std::string keys;  // every key of the description, each honoured
      for (const gin::Binding& k : in) {
        const std::string kc = class_of(k);
        if ((kc == "BenchmarkDatasetArgs" || kc == "FeatureArgs") &&
            keys.find(k.key() + ",") == std::string::npos)
          keys += k.key() + ", ";
      }
      if (notes)
        notes->push_back(cat(b.loc.str(), ": ", keys.substr(0, keys.size() - 2),
                             ": recsys-examples' random benchmark data, generated as they define "
                             "it (",
                             bench->num_generated_batches,
                             " training batches cycled, separate eval batches), trains as "
                             "DatasetArgs.dataset_name = \"benchmark\"",
                             c == 0 ? "; max_num_candidates = 0: every item is scored" : ""));
      continue;
    }
    const bool table_or_dist = cls == "EmbeddingArgs" || cls == "DynamicEmbeddingArgs" ||
                               cls == "BaseEmbeddingArgs" || cls == "RandomDistribution";
    if (bench && !dataset_bound && table_or_dist) {
      // Read into the benchmark data above: the features' tables (rows, static or dynamic) and
      // distributions. Placement keys (sharding_type, GPU capacity ratio, eviction) only say
      // where rows live: hstu holds every table whole in memory.
      if (notes && !tables_noted && cls != "RandomDistribution") {
        tables_noted = true;
        notes->push_back(cat(b.loc.str(), ": ", b.key(),
                             ": the embedding tables define the benchmark data's id ranges "
                             "(honoured); their placement keys (sharding_type, "
                             "item_vocab_gpu_capacity_ratio, evict_strategy) have no effect on "
                             "results: hstu holds each table whole, a dynamic table with a row "
                             "per distinct generated id"));
      }
      continue;
    }
    if (cls == "RankingArgs" && b.field == "eval_metrics") {
      // recsys-examples' ranking metrics are per-task classification metrics (torchmetrics);
      // hstu's eval table shows AUC, ACC (as Accuracy) and LogLoss of every task, and the
      // RECALL, PRECISION, F1Score and AVERAGE PRECISION the file selects.
      std::string why = ranking_metrics_problem(b.value);
      if (!why.empty()) {
        problems.push_back(
            cat(b.loc.str(), ": ", b.key(), " = ", gin::to_string(b.value), ": ", why));
        continue;
      }
    }
    if (cls == "TrainerArgs" && b.field == "train_batch_size") batch = &b;
    if (cls == "TensorModelParallelArgs" && b.field == "tensor_model_parallel_size") {
      if (b.value.kind != Kind::kInt || b.value.i < 1) {
        problems.push_back(cat(b.loc.str(), ": ", b.key(), " expects an int >= 1"));
        continue;
      }
      tp = &b;
      if (b.value.i > 1) continue;  // consumed below: the TP group's batch
      // = 1: passed on, reported by name as a no-op.
    }
    if (cls == "OptimizerArgs" && b.field == "optimizer_str" && b.value.kind == Kind::kString) {
      // Dense: Megatron's "adam" is decoupled (AdamW-style); sparse: the same optimiser.
      const std::string opt = b.value.s;
      if (opt == "adam" || opt == "sgd") {
        out.push_back(make("OptimizerArgs.optimizer_str",
                           string_value(opt == "adam" ? "adamw" : "sgd"), b.loc));
        out.push_back(make("OptimizerArgs.sparse_optimizer_str", string_value(opt), b.loc));
        continue;
      }
    }
    // Onto DynamicTableArgs (issue 18); in a benchmark file they describe its tables instead.
    if (cls == "DynamicEmbeddingArgs" && !bench && !benchmark_seen) {
      try {
        for (gin::Binding& t : translate_dynamic_embedding(b, notes)) out.push_back(std::move(t));
      } catch (const Error& e) {
        problems.emplace_back(e.what());
      }
      continue;
    }
    out.push_back(std::move(b));
  }
  if (tp && tp->value.i > 1) {
    if (!batch) {
      problems.push_back(cat(tp->loc.str(), ": ", tp->key(),
                             " needs TrainerArgs.train_batch_size in the same file (the batch of "
                             "each tensor-parallel rank)"));
    } else {
      // The TP group all-gathers its ranks' batches and runs the model on the union: one model
      // step sees train_batch_size * tp sequences. hstu computes the same step whole.
      out.push_back(
          make("TrainerArgs.train_batch_size", int_value(batch->value.i * tp->value.i), tp->loc));
      if (notes)
        notes->push_back(cat(tp->loc.str(), ": ", tp->key(), " = ", tp->value.i,
                             ": difference: no tensor parallelism; the model step that the ",
                             tp->value.i, " ranks share (their batches gathered, ",
                             batch->value.i * tp->value.i,
                             " sequences) runs whole on one device: same math, "
                             "TrainerArgs.train_batch_size = ",
                             batch->value.i * tp->value.i));
    }
  }
  if (retrieval && notes)
    notes->push_back(
        cat(name,
            ": difference: retrieval evaluation is hstu's leave-one-out (each user's last item "
            "ranked against the catalogue, HR@K = rank <= K); recsys-examples ranks every "
            "position of its 30% eval users with HR@K = rank < K"));
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += "\n  " + p;
    HSTU_THROW(name, ": a recsys-examples file that hstu cannot run as written (", problems.size(),
               problems.size() == 1 ? " problem" : " problems", "):", all);
  }
  return out;
}

}  // namespace

PeerDialect detect_dialect(const std::vector<gin::Binding>& bindings) {
  bool all_recsys = true;
  std::set<std::string> keys;
  for (const gin::Binding& b : bindings) {
    const std::string cls = class_of(b);
    if (meta_dlrm_classes().count(cls)) return PeerDialect::kMetaDlrmV3;
    if (meta_research_classes().count(cls)) return PeerDialect::kMetaResearch;
    all_recsys = all_recsys && is_recsys_key(b);
    keys.insert(cls + "." + b.field);
  }
  for (const std::string& k : recsys_required()) all_recsys = all_recsys && keys.count(k);
  return all_recsys ? PeerDialect::kRecsysExamples : PeerDialect::kHstu;
}

const char* dialect_name(PeerDialect dialect) {
  switch (dialect) {
    case PeerDialect::kHstu:
      return "hstu";
    case PeerDialect::kRecsysExamples:
      return "recsys-examples";
    case PeerDialect::kMetaResearch:
      return "generative-recommenders (research)";
    case PeerDialect::kMetaDlrmV3:
      return "generative-recommenders (dlrm_v3)";
  }
  return "";
}

std::vector<gin::Binding> translate_peer_file(std::vector<gin::Binding> bindings,
                                              const std::string& name,
                                              std::vector<std::string>* notes) {
  switch (detect_dialect(bindings)) {
    case PeerDialect::kMetaDlrmV3:
      reject_dlrm_v3(bindings, name);
    case PeerDialect::kMetaResearch:
      return translate_meta(bindings, name, notes);
    case PeerDialect::kRecsysExamples:
      return translate_recsys(std::move(bindings), name, notes);
    case PeerDialect::kHstu:
      break;
  }
  return bindings;
}

}  // namespace hstu
