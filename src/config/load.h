// load.h — reading a configuration: a gin file (or text held in memory) plus `--set` overrides,
// bound and validated into a Config.
//
// An override is just one more gin binding, located at "--set ...": load_config binds it
// together with the file's bindings, so overrides obey exactly the rules of the file (types,
// ranges, and `--set RankingArgs...` on a retrieval file is the same error as binding both).
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "config/gin.h"

namespace hstu {

// Parses "Class.field=value" (also "scope/RandomDistribution.field=value"). The value uses the
// gin grammar; for string fields a bare word is taken as the string (`dataset_name=ml-1m`),
// and for string-list fields a bare comma-separated list (`eval_metrics=HR@10,NDCG@10`).
// Errors name "--set <assignment>".
gin::Binding parse_override(const std::string& assignment);

// Applies one override to a finished Config (its task cannot change: setting the other task's
// class is an error). Does not run validate(), so several overrides may be applied in turn.
void apply_override(Config& config, const std::string& assignment,
                    std::vector<std::string>* warnings = nullptr);

// Parses `path` (with its includes), applies `overrides` after it, binds onto the defaults of
// config.h and validates. Compatibility warnings are appended to `warnings` when not null.
Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   std::vector<std::string>* warnings);

// Several files applied in order, as gin applies them (a later binding of a key wins; the task
// is decided over all of them), then `overrides`. Each file is read for the system it was
// written for (peer_gin.h: Meta's generative-recommenders files are translated, recsys-examples
// files get that system's defaults); errors list every problem, each with its file:line.
Config load_config(const std::vector<std::string>& paths, const std::vector<std::string>& overrides,
                   std::vector<std::string>* warnings);

// The same for gin text held in memory (e.g. the embedded default); `display_name` names it in
// errors and anchors its includes.
Config load_config_text(const std::string& text, const std::string& display_name,
                        const std::vector<std::string>& overrides,
                        std::vector<std::string>* warnings);

}  // namespace hstu
