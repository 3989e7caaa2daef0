// cmd_preprocess.cpp — `hstu preprocess`: raw dataset files -> sequences.bin + id maps.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "data/preprocess.h"

namespace hstu::cli {

int cmd_preprocess(const Args& a) {
  check_known(a, {"dataset", "path", "out", "skip-malformed", "max-history"}, "preprocess");
  Config cfg;
  if (!a.positional.empty()) cfg = resolve_config(a, nullptr);
  if (a.has("dataset")) cfg.dataset.dataset_name = a.get("dataset");
  if (a.has("path")) cfg.dataset.dataset_path = a.get("path");
  HSTU_CHECK(
      cfg.dataset.dataset_name != "synthetic",
      "hstu preprocess needs a raw dataset: --dataset ml-1m|ml-20m|ml-latest|ml-latest-small|"
      "ml-100k|amzn-books --path <folder or file> [--out DIR]");
  const std::string out = a.get("out", dataset_cache_dir(cfg));
  DatasetReport rep;
  const SequenceDataset ds =
      preprocess_raw(cfg.dataset, out, a.get("skip-malformed", "0") == "1", &rep);
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

}  // namespace hstu::cli
