// cmd_train.cpp — `hstu train`: resolve the config, train, print the result next to the
// popularity baseline.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "config/schema.h"
#include "dist/launch_env.h"
#include "train/trainer.h"

namespace hstu::cli {
namespace {

// The bindings of `cfg` that differ from the defaults, one "Class.field = value" per line (both
// configs print every field in the same order, so the lines pair up).
std::string non_default_bindings(const Config& cfg) {
  std::istringstream mine(to_gin(cfg)), base(to_gin(Config{}));
  std::string a, b, out;
  while (std::getline(mine, a) && std::getline(base, b)) {
    if (a == b || a.empty() || a[0] == '#') continue;
    const auto hash = a.find("  #");
    out += "  " +
           a.substr(0, hash == std::string::npos ? a.size() : a.find_last_not_of(' ', hash) + 1) +
           "\n";
  }
  return out;
}

struct TrainArgs {
  ConfigArgs config;
  std::string resume;
  bool allow_config_change = false;
  bool quiet = false;
};

int run_train(const TrainArgs& a) {
  TrainOptions opts;
  const Config cfg = resolve_config(a.config, NoFile::kEmbeddedDefault, &opts.config_text);
  opts.resume_dir = a.resume;
  opts.allow_config_change = a.allow_config_change;
  opts.quiet = a.quiet;
  // A data-parallel job's other ranks train silently: rank 0 speaks for the job.
  if (dist::read_world_env().rank != 0) {
    opts.quiet = true;
    train(cfg, opts);
    return 0;
  }
  std::cout << "hstu train: "
            << (a.config.files.empty() ? "embedded default config" : files_label(a.config))
            << " -> " << cfg.trainer.run_dir << "\n";
  if (!opts.quiet)
    std::cout << "effective config (values that differ from the defaults; all of it goes to "
              << cfg.trainer.run_dir << "/config.gin):\n"
              << non_default_bindings(cfg);
  const TrainSummary s = train(cfg, opts);

  if (cfg.task == "ranking") {  // the headline: mean AUC over the tasks, beside the baseline's
    std::printf("\ndone: %lld steps in %.1fs (%.0f tokens/s), final loss %.4f\n",
                static_cast<long long>(s.steps), s.train_seconds, s.tokens_per_second, s.last_loss);
    std::printf("eval (step %lld):  MeanAUC %.4f\nlogistic baseline:  MeanAUC %.4f\n",
                static_cast<long long>(s.evals.empty() ? 0 : s.evals.back().step),
                metric(s.final_test, "MeanAUC"), metric(s.baseline, "MeanAUC"));
    std::printf("run directory: %s (config.gin, metrics.jsonl%s)\n", cfg.trainer.run_dir.c_str(),
                cfg.trainer.ckpt_save_interval == -1 ? "" : ", checkpoints/");
    return 0;
  }
  const double hr = metric(s.selected_test, "HR@10"), ndcg = metric(s.selected_test, "NDCG@10");
  const double phr = metric(s.baseline, "HR@10"), pndcg = metric(s.baseline, "NDCG@10");
  std::printf("\ndone: %lld steps in %.1fs (%.0f tokens/s), final loss %.4f\n",
              static_cast<long long>(s.steps), s.train_seconds, s.tokens_per_second, s.last_loss);
  std::printf("test (epoch %lld):  HR@10 %.4f  NDCG@10 %.4f\n",
              static_cast<long long>(s.selected_epoch), hr, ndcg);
  std::printf("popularity:     HR@10 %.4f  NDCG@10 %.4f   (model / popularity: %.1fx HR@10)\n", phr,
              pndcg, phr > 0 ? hr / phr : INFINITY);
  if (s.evals.size() >= 10) {
    double h = 0, n = 0;
    for (size_t i = s.evals.size() - 10; i < s.evals.size(); ++i) {
      h += metric(s.evals[i].test, "HR@10") / 10;
      n += metric(s.evals[i].test, "NDCG@10") / 10;
    }
    std::printf("mean of the last 10 evaluations: HR@10 %.4f  NDCG@10 %.4f\n", h, n);
  }
  std::printf("run directory: %s (config.gin, metrics.jsonl%s)\n", cfg.trainer.run_dir.c_str(),
              cfg.trainer.ckpt_save_interval == -1 ? "" : ", checkpoints/");
  return 0;
}

}  // namespace

void add_train(CLI::App& hstu, Commands& commands) {
  CLI::App* app = hstu.add_subcommand("train", "train a model");
  auto a = std::make_shared<TrainArgs>();
  add_config_file(*app, a->config, "default: the embedded configs/default.gin, synthetic data");
  add_set(*app, a->config);
  add_runtime_flags(*app, a->config);
  add_field_flag(*app, a->config, "--task", "TrainerArgs.task", "");
  add_field_flag(*app, a->config, "--run-dir", "TrainerArgs.run_dir", "DIR");
  app->add_option("--resume", a->resume,
                  "continue a run from its run, checkpoints or step folder (bit-identical to not "
                  "stopping)")
      ->type_name("DIR");
  app->add_flag("--allow-config-change", a->allow_config_change,
                "with --resume: continue although settings that change the training trajectory "
                "(model, seed, global batch, data, optimiser) differ from the checkpoint's; each "
                "difference is printed (docs/CHECKPOINTS.md)");
  app->add_flag("--quiet", a->quiet, "no progress bar and no effective-config listing");
  commands.push_back({app, [a] { return run_train(*a); }});
}

}  // namespace hstu::cli
