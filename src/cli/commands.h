// commands.h — hstu's subcommands (one file each in src/cli/). Each returns the process exit
// code; errors propagate as hstu::Error to main(), which prints them.
#pragma once

#include "cli/args.h"
#include "config/config.h"

namespace hstu::cli {

int cmd_train(const Args& a);
int cmd_eval(const Args& a);
int cmd_preprocess(const Args& a);
int cmd_info(const Args& a);
int cmd_bench(const Args& a);

// The run's config: the file named by the first positional argument (or the embedded default),
// then every --set, then --device/--run-dir shorthands; validated. Prints ignored-key warnings.
Config resolve_config(const Args& a, std::string* gin_text);

}  // namespace hstu::cli
