// load.cpp — config loading and `--set` overrides on top of the gin parser and the schema.
//
// The one judgement call is how to read an override's value: gin grammar first, and only for
// string (list) fields does text that is not a gin string fall back to being the string itself.
#include "config/load.h"

#include <regex>

#include "config/schema.h"
#include "core/error.h"

namespace hstu {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

const FieldSpec* find_spec(const std::string& selector, const std::string& field) {
  const std::string cls = selector.substr(selector.rfind('.') + 1);
  for (const FieldSpec& f : config_fields()) {
    if (f.cls == cls && f.name == field) return &f;
  }
  return nullptr;
}

// The value of an override: gin grammar, with bare words for strings and string lists.
gin::Value override_value(const std::string& raw, const FieldSpec* spec, const std::string& label) {
  using Kind = gin::Value::Kind;
  const bool is_string = spec && spec->type == FieldType::kString;
  const bool is_list = spec && spec->type == FieldType::kStringList;
  if (!is_string && !is_list) return gin::parse_value(raw, label);
  gin::Value v;
  bool parsed = false;
  try {
    v = gin::parse_value(raw, label);
    parsed = is_string ? (v.kind == Kind::kString || v.kind == Kind::kNone)
                       : (v.kind == Kind::kList || v.kind == Kind::kTuple);
  } catch (const Error&) {
    parsed = false;
  }
  if (parsed) return v;
  gin::Value bare;
  bare.kind = Kind::kString;
  bare.loc = gin::Location{label, 0, 1};
  if (is_string) {
    bare.s = raw;
    return bare;
  }
  gin::Value list;
  list.kind = Kind::kList;
  list.loc = bare.loc;
  for (size_t b = 0; b <= raw.size();) {
    const size_t e = std::min(raw.find(',', b), raw.size());
    bare.s = trim(raw.substr(b, e - b));
    if (!bare.s.empty()) list.items.push_back(bare);
    b = e + 1;
  }
  return list;
}

Config load_bindings(std::vector<gin::Binding> bindings, const std::string& name,
                     const std::vector<std::string>& overrides,
                     std::vector<std::string>* warnings) {
  for (const std::string& o : overrides) bindings.push_back(parse_override(o));
  Config config;
  bind_config(config, bindings, TaskRule::kFromBindings, warnings);
  try {
    validate(config);
  } catch (const Error& e) {
    HSTU_THROW(name, ": ", e.what());
  }
  return config;
}

}  // namespace

gin::Binding parse_override(const std::string& assignment) {
  const std::string label = "--set " + assignment;
  const size_t eq = assignment.find('=');
  const std::string key = trim(assignment.substr(0, eq));
  static const std::regex kKey(
      R"(^(([A-Za-z_]\w*/)*)([A-Za-z_]\w*(\.[A-Za-z_]\w*)*)\.([A-Za-z_]\w*)$)");
  std::smatch m;
  if (eq == std::string::npos || !std::regex_match(key, m, kKey)) {
    HSTU_THROW(label, ": expected Class.field=value (e.g. --set NetworkArgs.num_layers=4)");
  }
  gin::Binding b;
  b.scope = m[1].str().empty() ? "" : m[1].str().substr(0, m[1].length() - 1);
  b.selector = m[3];
  b.field = m[5];
  b.loc = gin::Location{label, 0, 0};
  b.value = override_value(trim(assignment.substr(eq + 1)), find_spec(b.selector, b.field), label);
  return b;
}

void apply_override(Config& config, const std::string& assignment,
                    std::vector<std::string>* warnings) {
  bind_config(config, {parse_override(assignment)}, TaskRule::kKeep, warnings);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   std::vector<std::string>* warnings) {
  return load_bindings(gin::parse_file(path), path, overrides, warnings);
}

Config load_config_text(const std::string& text, const std::string& display_name,
                        const std::vector<std::string>& overrides,
                        std::vector<std::string>* warnings) {
  return load_bindings(gin::parse_text(text, display_name), display_name, overrides, warnings);
}

}  // namespace hstu
