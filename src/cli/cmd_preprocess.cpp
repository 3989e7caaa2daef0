// cmd_preprocess.cpp — `hstu preprocess`: raw dataset files -> sequences.bin + id maps.
//
// Takes recsys-examples' preprocessor flag spellings too (--dataset_name, --dataset_path,
// --training); its other flags are refused with the reason, never accepted and ignored.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "data/preprocess.h"

namespace hstu::cli {
namespace {

// The raw files each dataset's reader expects under --path.
const char* kDatasets = R"(
Datasets (--dataset NAME --path P; every name the readers know):
  ml-1m            P = folder with ratings.dat (users.dat, movies.dat)
  ml-20m           P = folder with ratings.csv (movies.csv)
  ml-latest        P = folder with ratings.csv (movies.csv)
  ml-latest-small  P = folder with ratings.csv (movies.csv)
  ml-100k          P = folder with u.data (u.item)
  amzn-books       P = the ratings file, e.g. ratings_Books.csv (user,item,rating,timestamp)
  kuairand-pure    P = folder with log_standard_*_pure.csv, user_features_pure.csv (or in data/)
  kuairand-1k      P = folder with log_standard_*_1k.csv, user_features_1k.csv (or in data/)
  kuairand-27k     P = folder with log_standard_*_27k_part*.csv, user_features_27k.csv
recsys-examples' spellings: --dataset_name, --dataset_path, --training (what hstu always
writes); --inference, --batch_ts_interval and --dataset_name all are refused with the reason.)";

struct PreprocessArgs {
  ConfigArgs config;
  std::string out;  // "" = the dataset cache folder of the config
  bool skip_malformed = false;
  bool training = false;  // recsys-examples' --training: what hstu always writes
  bool inference = false;
  std::string batch_ts_interval, max_history;  // refused when given
  CLI::App* app = nullptr;
};

int run_preprocess(const PreprocessArgs& a) {
  if (a.inference)
    return usage_error(*a.app,
                       "--inference: hstu writes training data only (recsys-examples' inference "
                       "exports processed_seqs_inference.csv and processed_batches.csv, which "
                       "nothing in hstu reads)");
  if (!a.batch_ts_interval.empty())
    return usage_error(*a.app,
                       "--batch_ts_interval: it cuts recsys-examples' inference batches; hstu "
                       "writes training data only");
  if (!a.max_history.empty())
    return usage_error(*a.app,
                       "--max-history: preprocessing keeps every event; the history kept per "
                       "sample is a training setting (DatasetArgs.max_history_seqlen in the "
                       "config, or --set DatasetArgs.max_history_seqlen=N to hstu train)");
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
  // Training finds the output as <cache_dir>/<dataset_name>; say how to point a run at it.
  const std::string default_out = dataset_cache_dir(cfg);
  std::string where = "--set DatasetArgs.cache_dir=" +
                      (cfg.dataset.cache_dir.empty() ? cfg.trainer.run_dir : cfg.dataset.cache_dir);
  // <dataset_name>, or <dataset_name>-raw under DatasetArgs.raw_ids (dataset_cache_dir).
  const std::string folder = cfg.dataset.dataset_name + (cfg.dataset.raw_ids ? "-raw" : "");
  const std::string suffix = "/" + folder;
  if (!a.out.empty() && a.out != default_out) {
    const bool named = a.out.size() > suffix.size() && a.out.ends_with(suffix);
    where =
        named ? "--set DatasetArgs.cache_dir=" + a.out.substr(0, a.out.size() - suffix.size()) : "";
    if (!named)
      std::printf(
          "note: training reads <DatasetArgs.cache_dir>/%s; this output folder is not "
          "named so, move it to such a folder to train on it\n",
          folder.c_str());
  }
  std::printf("output: %s (sequences.bin, %suser_ids.csv, source.json)\n", out.c_str(),
              cfg.dataset.raw_ids ? "" : "item_ids.csv, ");
  if (!where.empty())
    std::printf(
        "train on it: hstu train CONFIG --set DatasetArgs.dataset_name=%s --set "
        "DatasetArgs.dataset_path=%s %s%s\n",
        cfg.dataset.dataset_name.c_str(), cfg.dataset.dataset_path.c_str(), where.c_str(),
        cfg.dataset.raw_ids ? " --set DatasetArgs.raw_ids=True" : "");
  return 0;
}

}  // namespace

void add_preprocess(CLI::App& hstu, Commands& commands) {
  CLI::App* app = hstu.add_subcommand(
      "preprocess", "convert raw MovieLens / Amazon / KuaiRand files to hstu's sequence file");
  auto a = std::make_shared<PreprocessArgs>();
  a->app = app;
  app->footer(std::string(kDatasets) + "\n\n" + hstu.get_footer());
  add_config_file(*app, a->config, "default: config.h's defaults; its DatasetArgs are read");
  add_set(*app, a->config);
  add_field_flag(*app, a->config, "--dataset,--dataset_name", "DatasetArgs.dataset_name", "");
  add_field_flag(*app, a->config, "--path,--dataset_path", "DatasetArgs.dataset_path", "PATH");
  app->add_option("--out", a->out,
                  "output folder (default: DatasetArgs.cache_dir, else TrainerArgs.run_dir, "
                  "+ /<dataset>)")
      ->type_name("DIR");
  app->add_flag("--skip-malformed", a->skip_malformed,
                "skip and count rows that do not parse (default: they are errors)");
  app->add_flag("--training", a->training,
                "recsys-examples' flag: write training data (what hstu always does)");
  app->add_flag("--inference", a->inference, "refused: hstu writes training data only");
  app->add_option("--batch_ts_interval", a->batch_ts_interval,
                  "refused: recsys-examples' inference batching");
  app->add_option("--max-history,--max_history_seqlen", a->max_history,
                  "refused: the history length is a training setting "
                  "(DatasetArgs.max_history_seqlen)");
  commands.push_back({app, [a] { return run_preprocess(*a); }});
}

}  // namespace hstu::cli
