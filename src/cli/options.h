// options.h — what hstu's subcommands share on top of CLI11: the Command record main() runs; the
// config a command reads (a gin file given as the positional argument, --config or
// --gin-config-file, then --set overrides, then flags that stand for one config field such as
// --device); integer validators; and the usage-error report (exit status 2).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "config/config.h"

namespace hstu::cli {

// A subcommand: added to the parser before parsing, run when the command line chose it.
struct Command {
  CLI::App* app;
  std::function<int()> run;  // returns the exit status; errors throw hstu::Error
};
using Commands = std::vector<Command>;

// The config a command reads, as parsed.
struct ConfigArgs {
  std::vector<std::string> files;   // the positional configs, --config or --gin-config-file,
                                    // applied in order (a later binding of a key wins)
  std::vector<std::string> sets;    // every --set, in order
  std::vector<std::string> fields;  // the field flags' "Class.field=value", applied last
};

// Adds the optional config files: the positional `config`s, or --config / --gin-config-file
// (recsys-examples' launch flag), repeatable; several files are applied in order, as gin applies
// them. `absent` says what the command reads without one.
void add_config_file(CLI::App& app, ConfigArgs& args, const std::string& absent);
// Adds the repeatable --set Class.field=value.
void add_set(CLI::App& app, ConfigArgs& args);
// Adds `flag VALUE`, VALUE checked as `--set key=VALUE` checks it (type, range, allowed strings of
// the schema; a usage error naming the flag). The help shows the key's allowed values (else
// `type_name`) and its documentation.
CLI::Option* add_config_value(CLI::App& app, const std::string& flag, const std::string& key,
                              const std::string& type_name);
// The same, short for `--set key=VALUE` applied after every --set.
CLI::Option* add_field_flag(CLI::App& app, ConfigArgs& args, const std::string& flag,
                            const std::string& key, const std::string& type_name);
// Adds --device and --threads, which every command that runs a model takes.
void add_runtime_flags(CLI::App& app, ConfigArgs& args);

// Accepts integers in [lo, hi].
CLI::Validator int_in(int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max());
// Accepts `count` comma-separated positive integers; `layout` names them ("B,L,H,d").
CLI::Validator positive_ints(int count, const std::string& layout);

// What a command reads when no config file is given.
enum class NoFile {
  kEmbeddedDefault,  // configs/default.gin, embedded at build time
  kSchemaDefaults,   // the defaults of config.h
};
// Every override of `args` in the order they apply: the --set ones, then the field flags.
std::vector<std::string> overrides(const ConfigArgs& args);
// The config files (or `fallback`), then overrides(args); validated. Prints ignored-key warnings
// and named differences (to stderr, or into `notes` when not null); `gin_text` (when not null)
// receives the effective config in gin syntax.
Config resolve_config(const ConfigArgs& args, NoFile fallback, std::string* gin_text,
                      std::vector<std::string>* notes = nullptr);
// The config files of `args` joined for messages ("a.gin + b.gin"), or "" when none.
std::string files_label(const ConfigArgs& args);

// The arguments `app` was given, rebuilt from its parsed options (flags given as false left out),
// for the benchmarks that read an argument list.
std::vector<std::string> given_args(const CLI::App& app);

// The command `app` stands for, e.g. "hstu bench train".
std::string command_path(const CLI::App& app);
// Prints "<command>: error: <message>" and where its usage is; returns 2.
int usage_error(const CLI::App& app, const std::string& message);

}  // namespace hstu::cli
