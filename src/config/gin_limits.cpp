// gin_limits.cpp — reading config files and substituting macros, within the bounds of
// gin_limits.h, so that hostile configs end in an error naming the input, not a crash or a hang.
#include "config/gin_limits.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/error.h"

namespace hstu::gin {
namespace fs = std::filesystem;

std::string where(const Location& loc) {
  if (loc.line == 0) return detail::cat(loc.file, " (column ", loc.col, ")");
  return detail::cat(loc.file, ":", loc.line, ":", loc.col);
}

std::string read_config_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) HSTU_THROW(what, " '", path, "' does not exist");
  if (fs::is_directory(status)) HSTU_THROW(what, " '", path, "' is a directory");
  if (!fs::is_regular_file(status)) HSTU_THROW(what, " '", path, "' is not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) HSTU_THROW("cannot read ", what, " '", path, "': ", ec.message());
  if (size > static_cast<uintmax_t>(kMaxConfigFileBytes)) {
    HSTU_THROW(what, " '", path, "' is ", size, " bytes, more than the limit of ",
               kMaxConfigFileBytes);
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  if (in) os << in.rdbuf();
  if (!in || in.bad()) HSTU_THROW("cannot read ", what, " '", path, "'");
  return os.str();
}

void MacroExpander::substitute(Value& v, int depth) {
  if (v.kind == Value::Kind::kMacro) return expand(v, depth);
  if (!expanding_.empty() && ++created_ > kMaxExpandedValues) {
    HSTU_THROW(where(uses_.front()), ": macro %", expanding_.front(), " expands to more than ",
               kMaxExpandedValues, " values (a macro that repeats itself?)");
  }
  if (v.items.empty()) return;
  if (depth >= kMaxNestingDepth) {
    HSTU_THROW(where(expanding_.empty() ? v.loc : uses_.front()), ": ",
               expanding_.empty() ? "the value" : "macro %" + expanding_.front(),
               " is nested more than ", kMaxNestingDepth, " levels deep");
  }
  for (Value& item : v.items) substitute(item, depth + 1);
  for (Value& key : v.keys) substitute(key, depth + 1);
}

void MacroExpander::expand(Value& v, int depth) {
  const std::string name = v.scope.empty() ? v.s : v.scope + "/" + v.s;
  const auto it = macros_.find(name);
  if (it == macros_.end()) HSTU_THROW(where(v.loc), ": undefined macro %", name);
  for (const std::string& open : expanding_) {
    if (open == name) HSTU_THROW(where(v.loc), ": macro %", name, " is defined in terms of itself");
  }
  const Location use = v.loc;
  expanding_.push_back(name);
  uses_.push_back(use);
  v = it->second;
  substitute(v, depth);
  expanding_.pop_back();
  uses_.pop_back();
  v.loc = use;
}

}  // namespace hstu::gin
