// benchmark_args.cpp — BenchmarkDatasetArgs from gin bindings (see benchmark_args.h).
#include "config/benchmark_args.h"

#include <set>

#include "core/error.h"

namespace hstu {
namespace {

using detail::cat;
using Kind = gin::Value::Kind;

std::string class_of(const gin::Binding& b) {
  const size_t dot = b.selector.rfind('.');
  return dot == std::string::npos ? b.selector : b.selector.substr(dot + 1);
}

// The bindings of `cls` that an instance @scope/cls() sees: unscoped first, then scoped (which
// win, as in gin), as field -> binding.
std::map<std::string, const gin::Binding*> instance(const std::vector<gin::Binding>& all,
                                                    const std::string& cls,
                                                    const std::string& scope) {
  std::map<std::string, const gin::Binding*> fields;
  for (const bool scoped : {false, true}) {
    if (scoped && scope.empty()) break;
    for (const gin::Binding& b : all)
      if (class_of(b) == cls && b.scope == (scoped ? scope : "")) fields[b.field] = &b;
  }
  return fields;
}

[[noreturn]] void bad(const gin::Binding& b, const std::string& why) {
  HSTU_THROW(b.loc.str(), ": ", b.key(), " = ", gin::to_string(b.value), ": ", why);
}

int64_t as_int(const gin::Binding& b) {
  if (b.value.kind != Kind::kInt) bad(b, "expects an int");
  return b.value.i;
}
double as_number(const gin::Binding& b, const gin::Value& v) {
  if (v.kind == Kind::kInt) return static_cast<double>(v.i);
  if (v.kind != Kind::kFloat) bad(b, "expects a number");
  return v.f;
}
std::string as_string(const gin::Binding& b, const gin::Value& v) {
  if (v.kind != Kind::kString) bad(b, "expects a string");
  return v.s;
}
std::vector<std::string> as_strings(const gin::Binding& b) {
  if (b.value.kind != Kind::kList && b.value.kind != Kind::kTuple) bad(b, "expects a list");
  std::vector<std::string> out;
  for (const gin::Value& v : b.value.items) out.push_back(as_string(b, v));
  return out;
}
// `v` must be @[scope/]cls(); returns its scope.
std::string reference_scope(const gin::Binding& b, const gin::Value& v,
                            const std::set<std::string>& classes) {
  if (v.kind != Kind::kReference || !classes.count(v.s) || !v.call)
    bad(b, cat("expects @[scope/]", *classes.begin(), "()"));
  return v.scope;
}

RandomDistribution distribution(const std::vector<gin::Binding>& all, const gin::Binding& at,
                                const gin::Value& ref) {
  const std::string scope = reference_scope(at, ref, {"RandomDistribution"});
  RandomDistribution d;
  bool typed = false;
  for (const auto& [field, b] : instance(all, "RandomDistribution", scope)) {
    if (field == "dist_type") {
      d.dist_type = as_string(*b, b->value);
      typed = true;
    } else if (field == "low" || field == "high" || field == "mean" || field == "std" ||
               field == "alpha") {
      if (b->value.kind == Kind::kNone) continue;  // recsys-examples' "unset"
      const double x = as_number(*b, b->value);
      (field == "low"    ? d.low
       : field == "high" ? d.high
       : field == "mean" ? d.mean
       : field == "std"  ? d.std
                         : d.alpha) = x;
    } else {
      bad(*b, "unknown field of RandomDistribution (dist_type, low, high, mean, std, alpha)");
    }
  }
  if (!typed) bad(at, cat("@", scope, "/RandomDistribution() has no dist_type"));
  if (d.dist_type != "uniform" && d.dist_type != "normal" && d.dist_type != "zipf" &&
      d.dist_type != "lognormal")
    bad(at, cat("dist_type \"", d.dist_type, "\" is not uniform, normal, zipf or lognormal"));
  return d;
}

BenchmarkFeature feature(const std::vector<gin::Binding>& all, const gin::Binding& at,
                         const gin::Value& ref) {
  const std::string scope = reference_scope(at, ref, {"FeatureArgs"});
  BenchmarkFeature f;
  for (const auto& [field, b] : instance(all, "FeatureArgs", scope)) {
    if (field == "feature_names") {
      f.feature_names = as_strings(*b);
    } else if (field == "max_sequence_length") {
      f.max_sequence_length = as_int(*b);
    } else if (field == "is_jagged") {
      if (b->value.kind != Kind::kBool) bad(*b, "expects True or False");
      f.is_jagged = b->value.b;
    } else if (field == "seqlen_dist") {
      if (b->value.kind != Kind::kNone) f.seqlen_dist = distribution(all, *b, b->value);
    } else if (field == "value_dists") {
      if (b->value.kind == Kind::kNone) continue;
      if (b->value.kind != Kind::kDict) bad(*b, "expects a dict of feature name -> distribution");
      for (size_t k = 0; k < b->value.items.size(); ++k)
        f.value_dists[as_string(*b, b->value.keys[k])] = distribution(all, *b, b->value.items[k]);
    } else {
      bad(*b,
          "unknown field of FeatureArgs (feature_names, max_sequence_length, is_jagged, "
          "seqlen_dist, value_dists)");
    }
  }
  if (f.feature_names.empty()) bad(at, cat("@", scope, "/FeatureArgs() has no feature_names"));
  if (f.max_sequence_length < 1)
    bad(at, cat("@", scope, "/FeatureArgs() needs max_sequence_length >= 1"));
  return f;
}

BenchmarkTable table(const std::vector<gin::Binding>& all, const gin::Binding& at,
                     const gin::Value& ref) {
  const std::set<std::string> classes = {"DynamicEmbeddingArgs", "EmbeddingArgs"};
  const std::string scope = reference_scope(at, ref, classes);
  BenchmarkTable t;
  t.dynamic = ref.s == "DynamicEmbeddingArgs";
  for (const auto& [field, b] : instance(all, ref.s, scope)) {
    if (field == "feature_names")
      t.feature_names = as_strings(*b);
    else if (field == "table_name")
      t.table_name = as_string(*b, b->value);
    else if (field == "item_vocab_size_or_capacity")
      t.vocab_size = as_int(*b);
    // The other fields (sharding, GPU capacity, eviction) place the table; they do not change
    // the data.
  }
  if (t.feature_names.empty() || t.vocab_size < 1)
    bad(at, cat("@", scope, "/", ref.s, "() needs feature_names and item_vocab_size_or_capacity"));
  return t;
}

}  // namespace

std::optional<BenchmarkDatasetArgs> parse_benchmark_args(const std::vector<gin::Binding>& all) {
  std::optional<BenchmarkDatasetArgs> out;
  for (const gin::Binding& b : all) {
    if (class_of(b) != "BenchmarkDatasetArgs") continue;
    if (!out) out.emplace();
    BenchmarkDatasetArgs& a = *out;
    const std::string& f = b.field;
    if (f == "feature_args" || f == "embedding_args") {
      if (b.value.kind != Kind::kList && b.value.kind != Kind::kTuple) bad(b, "expects a list");
      if (f == "feature_args") a.features.clear();
      if (f == "embedding_args") a.tables.clear();
      for (const gin::Value& v : b.value.items) {
        if (f == "feature_args")
          a.features.push_back(feature(all, b, v));
        else
          a.tables.push_back(table(all, b, v));
      }
    } else if (f == "item_feature_name") {
      a.item_feature_name = as_string(b, b.value);
    } else if (f == "action_feature_name") {
      a.action_feature_name = b.value.kind == Kind::kNone ? "" : as_string(b, b.value);
    } else if (f == "contextual_feature_names") {
      a.contextual_feature_names = as_strings(b);
    } else if (f == "max_num_candidates") {
      a.max_num_candidates = as_int(b);
    } else if (f == "num_generated_batches") {
      a.num_generated_batches = as_int(b);
    } else {
      bad(b, "unknown field of BenchmarkDatasetArgs");
    }
  }
  if (!out) return out;
  // Every named feature has a FeatureArgs (its length) and a table (its id range).
  std::vector<std::string> named = out->contextual_feature_names;
  named.push_back(out->item_feature_name);
  if (!out->action_feature_name.empty()) named.push_back(out->action_feature_name);
  for (const std::string& name : named) {
    bool has_feature = false, has_table = false;
    for (const BenchmarkFeature& feat : out->features)
      for (const std::string& n : feat.feature_names) has_feature = has_feature || n == name;
    for (const BenchmarkTable& t : out->tables)
      for (const std::string& n : t.feature_names) has_table = has_table || n == name;
    HSTU_CHECK(!name.empty() && has_feature && has_table, "BenchmarkDatasetArgs: feature '", name,
               "' needs a FeatureArgs in feature_args and a table in embedding_args");
  }
  HSTU_CHECK(out->max_num_candidates >= 0 && out->num_generated_batches >= 1,
             "BenchmarkDatasetArgs: max_num_candidates must be >= 0 and num_generated_batches "
             ">= 1");
  return out;
}

}  // namespace hstu
