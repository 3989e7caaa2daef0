// commands.h — hstu's subcommands, one file each in src/cli/. Each adds its CLI11 subcommand
// (options, checks, per-command --help) to the parser and the Command that runs it. A command
// returns the process exit status; errors propagate as hstu::Error to main(), which prints them.
#pragma once

#include "cli/options.h"

namespace hstu::cli {

void add_train(CLI::App& hstu, Commands& commands);
void add_eval(CLI::App& hstu, Commands& commands);
void add_preprocess(CLI::App& hstu, Commands& commands);
void add_bench(CLI::App& hstu, Commands& commands);  // bench train | attention | layer
void add_info(CLI::App& hstu, Commands& commands);
void add_launch(CLI::App& hstu, Commands& commands);  // N local ranks of a command
void add_plan(CLI::App& hstu, Commands& commands);    // per-rank memory plan of W ranks
void add_check(CLI::App& hstu, Commands& commands);   // validate config files, print the effect

}  // namespace hstu::cli
