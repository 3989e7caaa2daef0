// cmd_preprocess.cpp — `hstu preprocess`: raw dataset files -> sequences.bin + id maps.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "data/preprocess.h"

namespace hstu::cli {
namespace {

struct PreprocessArgs {
  ConfigArgs config;
  std::string out;  // "" = the dataset cache folder of the config
  bool skip_malformed = false;
};

int run_preprocess(const PreprocessArgs& a) {
  const Config cfg = resolve_config(a.config, NoFile::kSchemaDefaults, nullptr);
  HSTU_CHECK(
      cfg.dataset.dataset_name != "synthetic",
      "hstu preprocess needs a raw dataset: --dataset NAME --path <folder or file> [--out DIR] "
      "(the names: hstu preprocess --help)");
  const std::string out = a.out.empty() ? dataset_cache_dir(cfg) : a.out;
  DatasetReport rep;
  const SequenceDataset ds = preprocess_raw(cfg.dataset, out, a.skip_malformed, &rep);
  std::printf("preprocessed %s: %lld users, %lld items (+padding), %lld events -> %s\n",
              ds.name.c_str(), static_cast<long long>(ds.num_users()),
              static_cast<long long>(ds.num_items - 1), static_cast<long long>(ds.num_events()),
              out.c_str());
  if (rep.num_malformed > 0)
    std::printf("skipped %lld malformed rows (e.g. %s)\n",
                static_cast<long long>(rep.num_malformed),
                rep.malformed_examples.empty() ? "" : rep.malformed_examples[0].c_str());
  if (rep.num_filtered > 0)
    std::printf("filtered %lld rows (dataset filter)\n", static_cast<long long>(rep.num_filtered));
  return 0;
}

}  // namespace

void add_preprocess(CLI::App& hstu, Commands& commands) {
  CLI::App* app = hstu.add_subcommand(
      "preprocess", "convert raw MovieLens / Amazon / KuaiRand files to hstu's sequence file");
  auto a = std::make_shared<PreprocessArgs>();
  add_config_file(*app, a->config, "default: config.h's defaults; its DatasetArgs are read");
  add_set(*app, a->config);
  add_field_flag(*app, a->config, "--dataset", "DatasetArgs.dataset_name", "");
  add_field_flag(*app, a->config, "--path", "DatasetArgs.dataset_path", "PATH");
  app->add_option("--out", a->out,
                  "output folder (default: DatasetArgs.cache_dir, else TrainerArgs.run_dir, "
                  "+ /<dataset>)")
      ->type_name("DIR");
  app->add_flag("--skip-malformed", a->skip_malformed,
                "skip and count rows that do not parse (default: they are errors)");
  commands.push_back({app, [a] { return run_preprocess(*a); }});
}

}  // namespace hstu::cli
