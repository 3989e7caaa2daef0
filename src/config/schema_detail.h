// schema_detail.h — helpers shared by the schema's source files (private to src/config/):
// schema.cpp (binding, validation; defines them) and schema_output.cpp (to_gin, docs/CONFIG.md).
// The tables themselves are schema.h's config_classes() / config_fields() (schema_fields.cpp).
#pragma once

#include <string>
#include <vector>

#include "config/gin.h"
#include "config/schema.h"

namespace hstu::schema_detail {

// The class of the distribution rows, which address Config::synthetic.seqlen_dist; a
// distribution-valued field refers to them as @scope/RandomDistribution().
inline constexpr const char* kDistributionClass = "RandomDistribution";

// `items` separated by `sep`.
std::string join(const std::vector<std::string>& items, const char* sep = ", ");

// An integral value as an int ("3"), any other as its shortest round-trip decimal ("0.001").
std::string format_number(double v);

// A field's value as a gin value; distributions as @scope/RandomDistribution().
gin::Value value_of(const FieldRef& ref, const std::string& scope);

}  // namespace hstu::schema_detail
