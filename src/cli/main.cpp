// main.cpp — the hstu binary: builds the command line (CLI11; one subcommand per src/cli/cmd_*.cpp)
// and is the only place where errors become exit codes: 0 success, 1 an error while running
// (hstu::Error: bad config, data or device), 2 a usage error (naming the flag or value).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "dist/launch_env.h"

namespace hstu::cli {
namespace {

// "[rank r] " in a job of several ranks (torchrun, SLURM or mpirun variables), so every rank's
// errors reach the terminal attributed; "" otherwise (or when the variables are unreadable).
std::string rank_prefix() {
  try {
    const dist::WorldEnv env = dist::read_world_env();
    return env.world_size > 1 ? "[rank " + std::to_string(env.rank) + "] " : "";
  } catch (const std::exception&) {
    return "";
  }
}

const char* kFooter = R"(Environment:
  OMP_WAIT_POLICY  how idle OpenMP workers wait; when unset, hstu restarts itself with
                   `passive` (spinning costs more than it saves in hstu's short parallel regions)
  OMP_NUM_THREADS  CPU threads when TrainerArgs.num_threads (--threads) is 0
  HSTU_DEBUG       when set, an error also names the source line of hstu that raised it

Exit status: 0 success, 1 error while running (config, data, device), 2 usage error.
Docs: README.md, docs/CONFIG.md (every config key), docs/ARCHITECTURE.md)";

// `hstu help [command...]`: the usage of hstu or of one of its commands.
void add_help(CLI::App& hstu, Commands& commands) {
  CLI::App* app = hstu.add_subcommand("help", "the usage of hstu or of a command");
  auto topic = std::make_shared<std::vector<std::string>>();
  app->add_option("command", *topic, "a command, e.g. `train` or `bench train`");
  commands.push_back({app, [&hstu, app, topic] {
                        CLI::App* target = &hstu;
                        for (const std::string& name : *topic) {
                          const auto subs = target->get_subcommands(
                              [&name](const CLI::App* s) { return s->get_name() == name; });
                          if (subs.empty())
                            return usage_error(
                                *app, "no command '" + name + "' in " + command_path(*target));
                          target = subs.front();
                        }
                        // The formatter, not target->help(), which would show `hstu help`'s.
                        std::cout << target->get_formatter()->make_help(
                            target, command_path(*target), CLI::AppFormatMode::Normal);
                        return 0;
                      }});
}

// The most specific command the parser reached, e.g. `bench` in `hstu bench foo`.
CLI::App& reached(CLI::App& hstu) {
  CLI::App* at = &hstu;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().front();
  return *at;
}

// The report of a failed parse; --help comes here too (printed, exit status 0).
int parse_failure(CLI::App& hstu, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return hstu.exit(e);
  CLI::App& at = reached(hstu);
  const auto subs = at.get_subcommands([](const CLI::App*) { return true; });
  if (subs.empty()) return usage_error(at, e.what());
  // A command that needs a subcommand: name the missing or unknown one and the choices.
  std::string names;
  for (const CLI::App* s : subs) names += (names.empty() ? "" : ", ") + s->get_name();
  const std::vector<std::string> rest = at.remaining();
  return usage_error(at, (rest.empty() ? "missing command" : "unknown command '" + rest[0] + "'") +
                             " (one of: " + names + ")");
}

int run(int argc, char** argv) {
  CLI::App hstu("hstu — HSTU generative recommender training (C++20/CUDA)", "hstu");
  hstu.footer(kFooter);
  hstu.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  hstu.require_subcommand(1);
  Commands commands;
  add_train(hstu, commands);
  add_eval(hstu, commands);
  add_preprocess(hstu, commands);
  add_bench(hstu, commands);
  add_info(hstu, commands);
  add_launch(hstu, commands);
  add_plan(hstu, commands);
  add_check(hstu, commands);
  add_help(hstu, commands);
  try {
    hstu.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_failure(hstu, e);
  }
  const CLI::App& chosen = reached(hstu);
  const std::string name = command_path(chosen);
  try {
    for (const Command& c : commands)
      if (c.app == &chosen) return c.run();
    HSTU_THROW("no command runs for '", name, "'");
  } catch (const Error& e) {
    std::fprintf(stderr, "\n%s%s: error: %s\n", rank_prefix().c_str(), name.c_str(), e.what());
    if (std::getenv("HSTU_DEBUG")) std::fprintf(stderr, "  (raised at %s)\n", e.where().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\n%s%s: error: %s\n", rank_prefix().c_str(), name.c_str(), e.what());
    return 1;
  }
}

}  // namespace
}  // namespace hstu::cli

int main(int argc, char** argv) {
  // NOTE: libgomp reads OMP_WAIT_POLICY when it loads, before main(). hstu's CPU ops run many
  // short parallel regions, where spinning workers cost more than they save (measured: 1.5x the
  // wall time of passive waiting on 2 cores, same results). Unless the user chose a policy,
  // re-execute once with passive waiting; if that fails, carry on with the default.
  if (!std::getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "passive", 1) == 0)
    execv("/proc/self/exe", argv);
  return hstu::cli::run(argc, argv);
}
