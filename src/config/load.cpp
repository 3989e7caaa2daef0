// load.cpp — config loading and `--set` overrides on top of the gin parser and the schema.
//
// The one judgement call is how to read an override's value: gin grammar first, and only for
// string (list) fields does text that is not a gin string fall back to being the string itself.
#include "config/load.h"

#include <cctype>
#include <iterator>
#include <regex>

#include "config/peer_gin.h"
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

// "Class.field" of a binding (the configurable without its module path).
std::string key_of(const gin::Binding& b) {
  return b.selector.substr(b.selector.rfind('.') + 1) + "." + b.field;
}

// A validation problem with the location of the binding it names ("file:line: ..."), when the
// config bound that key (the last binding of it, which is the one that took effect).
std::string locate(const std::string& problem, const std::vector<gin::Binding>& bindings) {
  for (auto it = bindings.rbegin(); it != bindings.rend(); ++it) {
    const std::string key = key_of(*it);
    const size_t at = problem.find(key);
    if (at == std::string::npos) continue;
    const size_t end = at + key.size();
    if (end < problem.size() &&
        (std::isalnum(static_cast<unsigned char>(problem[end])) || problem[end] == '_'))
      continue;  // a longer name that starts with this key
    return it->loc.str() + ": " + problem;
  }
  return problem;
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
    // One problem per line after the first; each gets the location of the key it names.
    std::string message = e.what(), out;
    size_t start = 0;
    for (int line = 0; start <= message.size(); ++line) {
      const size_t nl = std::min(message.find('\n', start), message.size());
      std::string part = message.substr(start, nl - start);
      if (line > 0) {
        const size_t text = part.find_first_not_of(' ');
        part = part.substr(0, text) + locate(part.substr(text), bindings);
      } else if (message.find('\n') == std::string::npos) {
        part = locate(part, bindings);
      }
      out += (line ? "\n" : "") + part;
      start = nl + 1;
    }
    // A single located problem already names its file; otherwise the files head the list.
    const bool located = out.find('\n') == std::string::npos && out != e.what();
    if (located) HSTU_THROW(out);
    HSTU_THROW(name, ": ", out);
  }
  return config;
}

// Every file's bindings, each file read for the system it was written for (peer_gin.h).
std::vector<gin::Binding> read_files(const std::vector<std::string>& paths,
                                     std::vector<std::string>* warnings) {
  HSTU_CHECK(!paths.empty(), "no config file given");
  std::vector<gin::Binding> all;
  for (const std::string& path : paths) {
    std::vector<gin::Binding> own = translate_peer_file(gin::parse_file(path), path, warnings);
    all.insert(all.end(), std::make_move_iterator(own.begin()), std::make_move_iterator(own.end()));
  }
  return all;
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
  return load_config(std::vector<std::string>{path}, overrides, warnings);
}

Config load_config(const std::vector<std::string>& paths, const std::vector<std::string>& overrides,
                   std::vector<std::string>* warnings) {
  std::string name;
  for (const std::string& p : paths) name += (name.empty() ? "" : " + ") + p;
  return load_bindings(read_files(paths, warnings), name, overrides, warnings);
}

Config load_config_text(const std::string& text, const std::string& display_name,
                        const std::vector<std::string>& overrides,
                        std::vector<std::string>* warnings) {
  return load_bindings(
      translate_peer_file(gin::parse_text(text, display_name), display_name, warnings),
      display_name, overrides, warnings);
}

}  // namespace hstu
