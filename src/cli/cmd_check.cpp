// cmd_check.cpp — `hstu check FILE...`: reads config files as `hstu train` would (each for the
// system it was written for, applied in order, then --set), validates them and prints the
// effective config in gin syntax, without training. Exit status 0 when the config is valid, 2
// when it is not (every problem listed, each with its file:line).
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/gin.h"
#include "config/peer_gin.h"
#include "config/schema.h"
#include "core/error.h"

namespace hstu::cli {
namespace {

struct CheckArgs {
  ConfigArgs config;
  bool quiet = false;  // no effective config on stdout
};

int run_check(const CheckArgs& a) {
  std::string dialects;
  try {
    for (const std::string& f : a.config.files)
      dialects += "# " + f + ": a " + dialect_name(detect_dialect(gin::parse_file(f))) + " file\n";
    std::vector<std::string> notes;
    std::string gin_text;
    const Config cfg = resolve_config(a.config, NoFile::kSchemaDefaults, &gin_text, &notes);
    if (!a.quiet) std::cout << dialects << gin_text;
    for (const std::string& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
    std::fprintf(stderr, "hstu check: %s: valid %s config (%zu notes)\n",
                 files_label(a.config).c_str(), cfg.task.c_str(), notes.size());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "hstu check: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace

void add_check(CLI::App& hstu, Commands& commands) {
  CLI::App* app = hstu.add_subcommand(
      "check",
      "validate config files (hstu's, recsys-examples' or generative-recommenders') and print "
      "the effective config as gin, without training; exit 0 valid, 2 invalid");
  auto a = std::make_shared<CheckArgs>();
  add_config_file(*app, a->config, "required");
  app->get_option("config")->required();
  add_set(*app, a->config);
  add_field_flag(*app, a->config, "--task", "TrainerArgs.task", "");
  app->add_flag("--quiet", a->quiet, "print only the verdict and the notes (stderr)");
  commands.push_back({app, [a] { return run_check(*a); }});
}

}  // namespace hstu::cli
