// peer_gin.h — reading the peers' gin files with the meaning they have in their own system.
//
// A config file is read for the system it was written for, decided from the names it binds:
// - Meta generative-recommenders research files (train_fn.*, hstu_encoder.*,
//   create_data_loader.*, ...) are translated binding by binding into hstu's keys, on top of the
//   protocol of Meta's research trainer (the values every translated preset in configs/ sets);
//   keys with no hstu counterpart are errors naming the key and why, keys that have no effect on
//   the results here are reported as named differences;
// - Meta's dlrm_v3 files (make_model.*, train_eval_loop.*, ...) are refused with what is missing
//   and the nearest preset;
// - recsys-examples files (every key is one of recsys-examples' gin keys, and every key it
//   requires is bound: a file recsys-examples itself runs; partial files are hstu files) get
//   recsys-examples' defaults for the keys they leave unset where hstu's default differs and
//   changes results (split by user 70/30, oldest events kept, no shuffling, in-batch negatives, no
//   checkpoint, Megatron's decoupled weight decay 0.01), and its tensor-parallel size is honoured
//   as the batch it implies; keys whose data hstu does not generate (BenchmarkDatasetArgs,
//   FeatureArgs) are errors naming the key;
// - anything else is an hstu file, bound as written.
// The result is plain hstu bindings (each keeps the file:line it came from; injected defaults are
// located at "<file> (<system> default)"), so bind_config and validate treat all files alike.
// docs/CONFIG.md ("Peer files") records every mapping.
#pragma once

#include <string>
#include <vector>

#include "config/gin.h"

namespace hstu {

// The system a file's bindings were written for.
enum class PeerDialect { kHstu, kRecsysExamples, kMetaResearch, kMetaDlrmV3 };

PeerDialect detect_dialect(const std::vector<gin::Binding>& bindings);
const char* dialect_name(PeerDialect dialect);

// The file's bindings as hstu bindings (see above). `name` labels the file in messages. Named
// differences and ignored compatibility keys are appended to `notes` (when not null). Throws
// hstu::Error listing every key that cannot be honoured, each with its file:line.
std::vector<gin::Binding> translate_peer_file(std::vector<gin::Binding> bindings,
                                              const std::string& name,
                                              std::vector<std::string>* notes);

}  // namespace hstu
