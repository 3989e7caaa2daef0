// args.h — the small command-line parser shared by hstu's subcommands: positional arguments,
// `--flag`, `--key value` / `--key=value`, and repeated `--set Class.field=value`.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace hstu::cli {

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;  // --key value (last wins)
  std::vector<std::string> sets;               // every --set, in order
  std::vector<std::string> raw;                // every argument, unparsed (for pass-through)
  bool has(const std::string& k) const { return options.count(k) != 0; }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = options.find(k);
    return it == options.end() ? def : it->second;
  }
};

// Parses argv[first..]. `flags` lists the options that take no value. Unknown options are
// kept and rejected by the subcommand (check_known).
Args parse_args(int argc, char** argv, int first, const std::vector<std::string>& flags);
// Throws an error naming the first option not in `known`.
void check_known(const Args& a, const std::vector<std::string>& known, const std::string& cmd);

}  // namespace hstu::cli
