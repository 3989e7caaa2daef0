// resume_check.h — what a resume may change (docs/CHECKPOINTS.md "Resuming with another
// config"): the checkpoint's effective config, seed, data fingerprint and world size against the
// run's, key by key.
//
// A key that alters the trajectory (model shape, seed, batch, data, optimiser, ...) must be the
// same, or `--allow-config-change` is needed; then each difference is printed. The "free" keys
// (free_resume_keys) say where outputs go and how often things happen, and may always change.
// The batch is compared as the global batch, TrainerArgs.train_batch_size x world size: a run
// may resume on another number of ranks with the same global batch.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "train/train_loop.h"

namespace hstu {

// The config keys a resume may change without --allow-config-change.
const std::vector<std::string>& free_resume_keys();

struct ConfigDifference {
  std::string key;    // e.g. "TrainerArgs.seed", "data fingerprint"
  std::string saved;  // the checkpoint's value
  std::string now;    // this run's
};

// The differences that alter the trajectory between checkpoint state `saved` (its config
// parsed with this hstu, so fields it did not know take their defaults) and the run's config
// `cfg` on `world_size` ranks over data of fingerprint `data_fingerprint`. Checkpoints that do not
// store a value (older ones) are not compared on it.
std::vector<ConfigDifference> resume_differences(const TrainerState& saved, const Config& cfg,
                                                 int world_size,
                                                 const std::string& data_fingerprint,
                                                 const std::string& where);

// Throws, listing every difference, unless `diffs` is empty or `allow` (--allow-config-change);
// with `allow` each difference is printed to `out` (null: nowhere).
void check_resume_differences(const std::vector<ConfigDifference>& diffs, bool allow,
                              const std::string& where, std::ostream* out);

// A fingerprint of a dataset's content (CRC-32C of its arrays and their sizes): two runs train on
// the same data when their fingerprints agree.
std::string dataset_fingerprint(const SequenceDataset& ds);

}  // namespace hstu
