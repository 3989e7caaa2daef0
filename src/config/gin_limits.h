// gin_limits.h — the bounds the gin parser enforces on hostile input, and the two steps that
// enforce them outside the parser proper: reading a config file (a regular file of bounded size)
// and substituting macros (bounded nesting and expansion size). Internal to src/config.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/gin.h"

namespace hstu::gin {

// The deepest nesting of lists, tuples and dicts a value may have (parsed or after macros).
inline constexpr int kMaxNestingDepth = 64;
// The most values that macro substitution may create in one parse (the doubling-macro guard).
inline constexpr int64_t kMaxExpandedValues = 1 << 18;
// The largest config file read (a config is a few KiB; this only stops /dev/zero-like inputs).
inline constexpr int64_t kMaxConfigFileBytes = 16 << 20;

// "file:line:col", or "file (column N)" for single-line labels.
std::string where(const Location& loc);

// Reads `path`, which must be an existing regular file of at most kMaxConfigFileBytes; `what`
// ("config file", "included file") names it in errors. Throws hstu::Error naming the path.
std::string read_config_file(const std::string& path, const std::string& what);

// Replaces every %MACRO inside each value by its (recursively substituted) definition. Throws,
// naming the macro and where it is used, on an undefined or self-referencing macro, a result
// nested deeper than kMaxNestingDepth, or more than kMaxExpandedValues values created in all.
class MacroExpander {
 public:
  explicit MacroExpander(const std::map<std::string, Value>& macros) : macros_(macros) {}
  void substitute(Value& v) { substitute(v, 0); }

 private:
  void substitute(Value& v, int depth);
  void expand(Value& v, int depth);

  const std::map<std::string, Value>& macros_;
  std::vector<std::string> expanding_;  // the macros being expanded, outermost first
  std::vector<Location> uses_;          // where each of them is used
  int64_t created_ = 0;                 // values created by expansion so far
};

}  // namespace hstu::gin
