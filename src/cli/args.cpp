// args.cpp — command-line parsing for the subcommands.
#include "cli/args.h"

#include <algorithm>

#include "core/error.h"

namespace hstu::cli {

Args parse_args(int argc, char** argv, int first, const std::vector<std::string>& flags) {
  Args a;
  for (int i = first; i < argc; ++i) a.raw.emplace_back(argv[i]);
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0 || s == "--") {
      a.positional.push_back(s);
      continue;
    }
    std::string key = s.substr(2), value;
    const auto eq = key.find('=');
    const bool is_flag = std::find(flags.begin(), flags.end(), key) != flags.end();
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (!is_flag) {
      HSTU_CHECK(i + 1 < argc, "option --", key, " needs a value");
      value = argv[++i];
    } else {
      value = "1";
    }
    if (key == "set")
      a.sets.push_back(value);
    else
      a.options[key] = value;
  }
  return a;
}

void check_known(const Args& a, const std::vector<std::string>& known, const std::string& cmd) {
  for (const auto& [k, v] : a.options)
    HSTU_CHECK(std::find(known.begin(), known.end(), k) != known.end(), "hstu ", cmd,
               ": unknown option --", k, " (see hstu ", cmd, " --help)");
}

}  // namespace hstu::cli
