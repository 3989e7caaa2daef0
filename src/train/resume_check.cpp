// resume_check.cpp — comparing a checkpoint's config, seed, data and world size with a resumed
// run's (resume_check.h).
#include "train/resume_check.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <string_view>

#include "config/load.h"
#include "config/schema.h"
#include "core/error.h"
#include "io/crc32c.h"

namespace hstu {
namespace {

// "Class.field" -> value of every binding line of to_gin's output.
std::map<std::string, std::string> bindings(const std::string& gin) {
  std::map<std::string, std::string> out;
  std::istringstream in(gin);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    std::string value = line.substr(eq + 3);
    const size_t doc = value.find("  # ");  // to_gin pads the value, then "  # <doc>"
    if (doc != std::string::npos) value.resize(doc);
    while (!value.empty() && value.back() == ' ') value.pop_back();
    out[line.substr(0, eq)] = value;
  }
  return out;
}

template <typename T>
uint32_t extend(uint32_t crc, std::span<const T> s) {
  return crc32c_extend(
      crc, std::string_view(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(T)));
}

}  // namespace

const std::vector<std::string>& free_resume_keys() {
  static const std::vector<std::string> keys = {
      // where things go
      "TrainerArgs.run_dir", "TrainerArgs.ckpt_save_dir", "TrainerArgs.ckpt_load_dir",
      "DatasetArgs.dataset_path", "DatasetArgs.cache_dir",
      // how often and how long
      "TrainerArgs.ckpt_save_interval", "TrainerArgs.ckpt_keep", "TrainerArgs.log_interval",
      "TrainerArgs.eval_interval", "TrainerArgs.eval_every_n_epochs", "TrainerArgs.max_eval_iters",
      "TrainerArgs.eval_batch_size", "TrainerArgs.num_epochs", "TrainerArgs.max_train_iters",
      "TrainerArgs.select_best_on",
      // how it is run, not what it computes
      "TrainerArgs.profile", "TrainerArgs.profile_step_start", "TrainerArgs.profile_step_end",
      "TrainerArgs.num_threads", "TrainerArgs.nonfinite", "TrainerArgs.cuda_graph",
      "TrainerArgs.grad_bucket_mb", "TrainerArgs.enable_balanced_shuffler",
      "TrainerArgs.model_parallel_tables", "TrainerArgs.shard_owner",
      // compared as the global batch (train_batch_size x world size) instead
      "TrainerArgs.train_batch_size"};
  return keys;
}

std::vector<ConfigDifference> resume_differences(const TrainerState& saved, const Config& cfg,
                                                 int world_size,
                                                 const std::string& data_fingerprint,
                                                 const std::string& where) {
  std::vector<ConfigDifference> diffs;
  const auto& free = free_resume_keys();
  if (!saved.config.empty()) {
    Config old;
    try {
      old = load_config_text(saved.config, where + " (its \"config\")", {}, nullptr);
    } catch (const Error& e) {
      diffs.push_back({"config", std::string("unreadable: ") + e.what(), "this run's"});
      old = cfg;  // nothing else to compare it with
    }
    const auto a = bindings(to_gin(old)), b = bindings(to_gin(cfg));
    for (const auto& [key, value] : b) {
      if (std::find(free.begin(), free.end(), key) != free.end()) continue;
      const auto it = a.find(key);
      const std::string was = it == a.end() ? "(not set)" : it->second;
      if (was != value) diffs.push_back({key, was, value});
    }
    const int64_t old_global = old.trainer.train_batch_size * saved.world_size;
    const int64_t new_global = cfg.trainer.train_batch_size * world_size;
    if (old_global != new_global)
      diffs.push_back({"global batch (TrainerArgs.train_batch_size x world size)",
                       std::to_string(old.trainer.train_batch_size) + " x " +
                           std::to_string(saved.world_size) + " = " + std::to_string(old_global),
                       std::to_string(cfg.trainer.train_batch_size) + " x " +
                           std::to_string(world_size) + " = " + std::to_string(new_global)});
  }
  // The seed is also stored on its own (checkpoints older than the stored config have it).
  if (saved.seed >= 0 && saved.seed != cfg.trainer.seed &&
      std::none_of(diffs.begin(), diffs.end(),
                   [](const ConfigDifference& d) { return d.key == "TrainerArgs.seed"; }))
    diffs.push_back(
        {"TrainerArgs.seed", std::to_string(saved.seed), std::to_string(cfg.trainer.seed)});
  if (!saved.data_fingerprint.empty() && saved.data_fingerprint != data_fingerprint)
    diffs.push_back({"data fingerprint (the training data's content)", saved.data_fingerprint,
                     data_fingerprint});
  return diffs;
}

void check_resume_differences(const std::vector<ConfigDifference>& diffs, bool allow,
                              const std::string& where, std::ostream* out) {
  if (diffs.empty()) return;
  std::ostringstream list;
  for (const ConfigDifference& d : diffs)
    list << "\n  " << d.key << ": checkpoint " << d.saved << ", now " << d.now;
  if (!allow)
    HSTU_THROW("--resume ", where, ": this run differs from the checkpoint's in ", diffs.size(),
               " setting(s) that change the training trajectory:", list.str(),
               "\npass --allow-config-change to resume anyway (free to change: run_dir, "
               "checkpoint folders and intervals, log/eval intervals, num_epochs, "
               "max_train_iters; docs/CHECKPOINTS.md)");
  if (out)
    *out << "warning: resuming " << where << " with " << diffs.size()
         << " changed setting(s) (--allow-config-change):" << list.str() << "\n";
}

std::string dataset_fingerprint(const SequenceDataset& ds) {
  uint32_t crc = 0;
  crc = extend(crc, ds.user_offsets);
  crc = extend(crc, ds.items);
  crc = extend(crc, ds.actions);
  crc = extend(crc, ds.timestamps);
  crc = extend(crc, ds.contextual_values);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%lld users, %lld events, %lld items, crc32c %08x",
                static_cast<long long>(ds.num_users()), static_cast<long long>(ds.num_events()),
                static_cast<long long>(ds.num_items), crc);
  return buf;
}

}  // namespace hstu
