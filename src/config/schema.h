// schema.h — the one table that describes every configuration field, and what is built on it:
// binding parsed gin into a Config, validation, writing a Config back as gin, docs/CONFIG.md.
//
// Every field is one row (gin class, name, type, range or allowed strings, one-line doc, and an
// accessor into Config), so binding, validation, the gin writer and the reference documentation
// cannot drift apart: adding a field to config.h means adding one row to schema_fields.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "config/config.h"
#include "config/gin.h"

namespace hstu {

// A pointer to one field of a Config; the alternative says the field's type.
using FieldRef = std::variant<int64_t*, double*, bool*, std::string*, std::vector<std::string>*,
                              std::vector<int64_t>*, RandomDistribution*>;

// Field types, in the order of FieldRef's alternatives.
enum class FieldType { kInt, kFloat, kBool, kString, kStringList, kIntList, kDistribution };

// Allowed numbers (of an int or float field, or of every element of an int list).
struct Range {
  double lo = -1e308, hi = 1e308;  // bounds; the defaults mean "unbounded"
  bool lo_open = false, hi_open = false;
  std::optional<double> also;  // one sentinel allowed outside [lo, hi], e.g. -1 = "automatic"
  std::optional<double> none;  // what gin's `None` stands for (recsys-examples' "unset")

  bool contains(double v) const;
  std::string describe() const;  // ">= 1", "[0, 1)", "-1 or > 0", "any"
};

struct FieldSpec {
  std::string cls;   // gin class, e.g. "NetworkArgs"
  std::string name;  // gin field, e.g. "num_layers" (= the C++ member name)
  FieldType type;
  FieldRef (*get)(Config&);  // nullptr: accepted for compatibility with recsys-examples, ignored
  Range range;               // int / float / int-list
  std::vector<std::string> allowed;  // string / string-list; "" = any; "HR@K": K a positive int
  std::string doc;                   // one line; for ignored fields, why they are ignored
};

struct ClassSpec {
  std::string name;
  std::string doc;
};

// hstu's gin classes, in the order to_gin and docs/CONFIG.md list them.
const std::vector<ClassSpec>& config_classes();
// Every field of every class of config_classes(), plus the ignored compatibility fields.
const std::vector<FieldSpec>& config_fields();
// recsys-examples classes that are parsed and ignored as a whole: {name, reason}.
const std::vector<ClassSpec>& ignored_classes();

// Whether bindings of RankingArgs / RetrievalArgs may set Config::task.
enum class TaskRule {
  kFromBindings,  // any RankingArgs binding -> "ranking", RetrievalArgs -> "retrieval", both: error
  kKeep,          // the task is fixed; binding the other task's class is an error
};

// Applies `bindings` to `config` in order. Unknown classes/fields, wrong types and values out
// of range throw hstu::Error naming the binding's location; bindings that hstu accepts only for
// compatibility append "loc: Class.field is accepted ... and ignored (reason)" to `warnings`
// (when not null). `@scope/RandomDistribution()` values collect the RandomDistribution.* and
// scope/RandomDistribution.* bindings of the same list (scoped ones win, as in gin). Does not
// run validate().
void bind_config(Config& config, const std::vector<gin::Binding>& bindings, TaskRule rule,
                 std::vector<std::string>* warnings);

// Checks every field against its range / allowed values and the cross-field rules:
// - synthetic: min_seqlen <= max_seqlen, clusters_per_user <= num_clusters <= num_items,
//   seqlen_dist.high (unless -1) > seqlen_dist.low;
// - profile: profile_step_end > profile_step_start when profile is on;
// - select_best_on = validation needs split = validation;
// - retrieval: max_num_candidates = 0, item_embedding_dim -1 or hidden_size, every HR@K /
//   NDCG@K has K <= eval_rank_cap;
// - ranking: prediction_head_arch non-empty; with num_tasks > 1 its last entry is num_tasks
//   (one logit per binary task); with num_tasks = 1 it is the number of classes (1 = binary).
// Throws hstu::Error naming the offending Class.field(s).
void validate(const Config& config);

// The whole config in gin syntax, every field, grouped by class, doc as a trailing comment.
// parse + bind_config of the result reproduces `config` exactly.
std::string to_gin(const Config& config);

// The reference tables of docs/CONFIG.md (everything after its hand-written introduction).
std::string config_reference_markdown();

}  // namespace hstu
