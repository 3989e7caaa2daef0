// schema.cpp — binding parsed gin into a Config and validating it, driven by the field table
// (schema_fields.cpp); also Range and the helpers schema_output.cpp shares (schema_detail.h).
//
// A distribution is built by binding its RandomDistribution rows into a scratch Config and
// copying Config::synthetic.seqlen_dist out.
#include "config/schema.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "config/peer_dynamic_emb.h"
#include "config/schema_detail.h"
#include "core/error.h"

namespace hstu {

// ---- shared with schema_output.cpp -----------------------------------------------------------

namespace schema_detail {

std::string join(const std::vector<std::string>& items, const char* sep) {
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

gin::Value value_of(const FieldRef& ref, const std::string& scope) {
  using Kind = gin::Value::Kind;
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

}  // namespace schema_detail

namespace {

using detail::cat;
using schema_detail::format_number;
using schema_detail::join;
using schema_detail::kDistributionClass;
using schema_detail::value_of;
using Kind = gin::Value::Kind;

// ---- small helpers ---------------------------------------------------------------------------

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

// Whether `k` is the K of "HR@K": a positive int of at most 9 digits.
bool is_metric_k(const std::string& k) {
  return !k.empty() && k[0] != '0' && k.find_first_not_of("0123456789") == std::string::npos &&
         k.size() < 10;
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
  // Every problem is collected (one line each, file:line first) and reported together.
  // Each problem keeps the index of its binding, so the list follows the files' order.
  std::vector<std::pair<size_t, std::string>> located;
  size_t at = bindings.size();  // the binding being processed (size(): none)
  auto attempt = [&](auto&& body) {
    try {
      body();
    } catch (const Error& e) {
      located.emplace_back(at, e.what());
    }
  };
  // Pass 1: names, scopes, task; ignored and distribution rows are checked and set aside.
  std::vector<std::pair<const gin::Binding*, const FieldSpec*>> stored;
  std::vector<const gin::Binding*> distribution_rows;
  const gin::Binding* task_binding[3] = {nullptr, nullptr, nullptr};  // ranking, retrieval, task
  for (const gin::Binding& b : bindings) {
    at = static_cast<size_t>(&b - bindings.data());
    attempt([&] {
      const std::string cls = class_of(b);
      if (cls == "BenchmarkDatasetArgs" || cls == "FeatureArgs") {
        HSTU_THROW(b.loc.str(), ": ", b.key(),
                   ": recsys-examples' random benchmark data (BenchmarkDatasetArgs, FeatureArgs) "
                   "is read from a recsys-examples file (only their keys), which trains on it "
                   "as written; an hstu file names that file instead: DatasetArgs.dataset_name = "
                   "\"benchmark\" and DatasetArgs.dataset_path = the file (hstu's own synthetic "
                   "ranking data: SyntheticArgs, configs/synthetic-ranking.gin)");
      }
      if (cls == "DynamicEmbeddingArgs") {
        const std::string hstu_key = dynamic_embedding_counterpart(b.field);
        HSTU_THROW(b.loc.str(), ": ", b.key(),
                   ": recsys-examples' DynamicEmbeddingArgs is translated only in a "
                   "recsys-examples file (one that binds nothing but its keys); in an hstu file "
                   "use DynamicTableArgs",
                   hstu_key.empty() ? "" : cat(" (this key: ", hstu_key, ")"),
                   ", docs/CONFIG.md \"Peer files\"");
      }
      if (cls == "TensorModelParallelArgs" && b.field == "tensor_model_parallel_size" &&
          !(b.value.kind == Kind::kInt && b.value.i == 1)) {
        HSTU_THROW(b.loc.str(), ": ", b.key(), " = ", gin::to_string(b.value),
                   ": hstu has no tensor parallelism; in a recsys-examples file it stands for "
                   "the batch of the TP group (train_batch_size x size), which hstu honours "
                   "there; in an hstu file set TrainerArgs.train_batch_size to that batch and "
                   "remove this key");
      }
      if (const ClassSpec* ic = find_in(ignored_classes(), cls)) {
        warn(b, ic->doc);
        return;
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
        return;
      }
      if (cls == "RankingArgs" && !task_binding[0]) task_binding[0] = &b;
      if (cls == "RetrievalArgs" && !task_binding[1]) task_binding[1] = &b;
      if (cls == "TrainerArgs" && b.field == "task") {
        Scratch scratch;
        assign(*f, b, scratch.ref(f->type));  // checks the value before it decides anything
        task_binding[2] = &b;                 // the last one wins, as for any field
        return;
      }
      stored.emplace_back(&b, f);
    });
  }

  // The task: TrainerArgs.task when bound, else the class bound (RankingArgs / RetrievalArgs).
  const gin::Binding* ranking = task_binding[0];
  const gin::Binding* retrieval = task_binding[1];
  const gin::Binding* explicit_task = task_binding[2];
  at = bindings.size();
  attempt([&] {
    if (explicit_task) {
      const std::string task = explicit_task->value.s;
      const gin::Binding* other = task == "ranking" ? retrieval : ranking;
      if (other) {
        HSTU_THROW(other->loc.str(), ": ", other->key(), " does not apply to a ", task, " config (",
                   explicit_task->loc.str(), ": TrainerArgs.task = \"", task,
                   "\"); remove it or change the task");
      }
      if (rule == TaskRule::kKeep && config.task != task) {
        HSTU_THROW(explicit_task->loc.str(), ": TrainerArgs.task cannot change the task of this ",
                   config.task, " config");
      }
      config.task = task;
      return;
    }
    if (ranking && retrieval) {
      HSTU_THROW(ranking->loc.str(), ": ", ranking->key(), " makes this a ranking config, but ",
                 retrieval->loc.str(), ": ", retrieval->key(),
                 " makes it a retrieval config; bind only one of RankingArgs and RetrievalArgs "
                 "(or set TrainerArgs.task)");
    }
    for (const gin::Binding* b : {ranking, retrieval}) {
      if (!b) continue;
      const std::string task = b == ranking ? "ranking" : "retrieval";
      if (rule == TaskRule::kKeep && config.task != task) {
        HSTU_THROW(b->loc.str(), ": ", b->key(), " does not apply to this ", config.task,
                   " config (", class_of(*b), " configures ", task, " runs)");
      }
      config.task = task;
    }
  });

  // Pass 2: store, in order.
  std::vector<bool> used(distribution_rows.size(), false);
  for (const auto& [b, f] : stored) {
    at = static_cast<size_t>(b - bindings.data());
    attempt([&, b = b, f = f] {
      if (f->type != FieldType::kDistribution) {
        assign(*f, *b, f->get(config));
        return;
      }
      const gin::Value& v = b->value;
      if (v.kind != Kind::kReference || v.s != kDistributionClass) {
        HSTU_THROW(b->loc.str(), ": ", b->key(), " expects ", expected_phrase(f->type), ", got ",
                   gin::kind_name(v.kind), " ", gin::to_string(v));
      }
      *std::get<RandomDistribution*>(f->get(config)) =
          evaluate_distribution(v.scope, distribution_rows, used);
    });
  }
  for (size_t k = 0; k < distribution_rows.size(); ++k) {
    if (used[k]) continue;
    const gin::Binding& b = *distribution_rows[k];
    warn(b, cat("no field refers to it; bind e.g. SyntheticArgs.seqlen_dist = @",
                b.scope.empty() ? "" : b.scope + "/", kDistributionClass, "()"));
  }

  std::stable_sort(located.begin(), located.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> problems;
  for (auto& [index, text] : located) problems.push_back(std::move(text));

  // A file that binds neither task class nor TrainerArgs.task but asks for candidates is ambiguous.
  if (rule == TaskRule::kFromBindings && !explicit_task && !ranking && !retrieval &&
      problems.empty() && config.dataset.max_num_candidates > 0) {
    std::string where;
    for (const gin::Binding& b : bindings)
      if (class_of(b) == "DatasetArgs" && b.field == "max_num_candidates")
        where = b.loc.str() + ": ";
    problems.push_back(
        cat(where, "the task is ambiguous: DatasetArgs.max_num_candidates = ",
            config.dataset.max_num_candidates,
            " asks for ranking candidates but nothing binds RankingArgs; set TrainerArgs.task = "
            "\"ranking\" (or bind RankingArgs), or \"retrieval\" with max_num_candidates = 0"));
  }
  if (problems.size() == 1) throw Error(problems[0], __FILE__, __LINE__);
  if (!problems.empty()) {
    HSTU_THROW(problems.size(), " problems in the config:\n  ", join(problems, "\n  "));
  }
}

// ---- validation ------------------------------------------------------------------------------

void validate(const Config& config) {
  Config c = config;                  // the accessors take a mutable Config
  std::vector<std::string> problems;  // every rule that fails, reported together
  for (const FieldSpec& f : config_fields()) {
    if (!f.get) continue;
    const FieldRef ref = f.get(c);
    const std::string bad = violation(f, ref);
    if (bad.empty()) continue;
    const std::string name =
        f.cls == kDistributionClass ? "SyntheticArgs.seqlen_dist." + f.name : f.cls + "." + f.name;
    problems.push_back(cat(name, " = ", gin::to_string(value_of(ref, "")), " ", bad));
  }
  auto fail_unless = [&](bool ok, const std::string& msg) {
    if (!ok) problems.push_back(msg);
  };
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

  const DynamicTableArgs& dyn = c.dynamic;
  const bool dynamic_items =
      std::find(dyn.tables.begin(), dyn.tables.end(), "item") != dyn.tables.end();
  fail_unless(!c.dataset.raw_ids || dynamic_items,
              "DatasetArgs.raw_ids = True needs DynamicTableArgs.tables = [\"item\"]: raw 64-bit "
              "item keys have no row in a dense table");
  fail_unless(dyn.tables.empty() || c.optimizer.sparse_optimizer_str != "dense_adam",
              "OptimizerArgs.sparse_optimizer_str = \"dense_adam\" updates every row every step, "
              "which a dynamic table (DynamicTableArgs.tables) does not do; use adam, "
              "row_wise_adagrad or sgd");
  fail_unless(dyn.capacity_rows == -1 || dyn.max_capacity_rows == 0 ||
                  dyn.max_capacity_rows >= dyn.capacity_rows,
              cat("DynamicTableArgs.max_capacity_rows (", dyn.max_capacity_rows,
                  ") must be 0 (no growth) or at least capacity_rows (", dyn.capacity_rows, ")"));
  fail_unless(dyn.host_tier || dyn.hbm_bytes != -1 || dyn.hbm_rows != -1 || dyn.hbm_ratio == 1,
              cat("DynamicTableArgs.hbm_ratio = ", format_number(dyn.hbm_ratio),
                  " keeps part of the table out of HBM, which needs DynamicTableArgs.host_tier = "
                  "True"));

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
      if (at == std::string::npos || !is_metric_k(m.substr(at + 1))) continue;
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
  if (problems.size() == 1) HSTU_THROW("invalid config: ", problems[0]);
  if (!problems.empty()) {
    HSTU_THROW("invalid config (", problems.size(), " problems):\n  ", join(problems, "\n  "));
  }
}

}  // namespace hstu
