// main.cpp — the hstu binary: dispatches subcommands and is the only place where errors become
// exit codes (1 = user error with a message, 2 = usage).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

namespace {

const char* kUsage =
    "hstu — HSTU generative recommender training (C++20/CUDA)\n"
    "\n"
    "usage: hstu <command> [config.gin] [options]\n"
    "\n"
    "commands:\n"
    "  train       train a model (no config: the embedded synthetic default)\n"
    "  eval        evaluate a checkpoint on the test split\n"
    "  preprocess  convert raw MovieLens / Amazon files to hstu's binary sequence file\n"
    "  bench       benchmarks: `hstu bench train [config]`, `attention`, `layer`\n"
    "  info        build, devices and kernels\n"
    "\n"
    "common options:\n"
    "  --set Class.field=value   override a config value (repeatable)\n"
    "  --device cpu|cuda         compute device (default: cuda when available)\n"
    "  --run-dir DIR             where config, metrics.jsonl and checkpoints go\n"
    "  --resume DIR              continue a run from its checkpoint folder (train)\n"
    "  --quiet                   no progress bar\n"
    "\n"
    "docs: README.md, docs/CONFIG.md (every config key), docs/ARCHITECTURE.md\n";

}  // namespace

int main(int argc, char** argv) {
  // NOTE: libgomp reads OMP_WAIT_POLICY when it loads, before main(). hstu's CPU ops run many
  // short parallel regions, where spinning workers cost more than they save (measured: 1.5x the
  // wall time of passive waiting on 2 cores, same results). Unless the user chose a policy,
  // re-execute once with passive waiting; if that fails, carry on with the default.
  if (!std::getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "passive", 1) == 0)
    execv("/proc/self/exe", argv);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    using namespace hstu::cli;
    const std::vector<std::string> flags = {"quiet", "help", "no-baseline", "phases"};
    // `hstu bench attention|layer` have their own flag grammar: pass its arguments through
    // unparsed.
    const bool passthrough = cmd == "bench" && argc > 2 &&
                             (!std::strcmp(argv[2], "attention") || !std::strcmp(argv[2], "layer"));
    Args a = passthrough ? Args{} : parse_args(argc, argv, 2, flags);
    if (passthrough) {
      a.positional = {argv[2]};
      for (int i = 2; i < argc; ++i) a.raw.emplace_back(argv[i]);
    }
    if (a.has("help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (cmd == "train") return cmd_train(a);
    if (cmd == "eval") return cmd_eval(a);
    if (cmd == "preprocess") return cmd_preprocess(a);
    if (cmd == "info") return cmd_info(a);
    if (cmd == "bench") return cmd_bench(a);
    std::fprintf(stderr, "hstu: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const hstu::Error& e) {
    std::fprintf(stderr, "\nhstu %s: error: %s\n", cmd.c_str(), e.what());
    if (std::getenv("HSTU_DEBUG")) std::fprintf(stderr, "  (raised at %s)\n", e.where().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nhstu %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
