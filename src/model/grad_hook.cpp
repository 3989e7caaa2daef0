// grad_hook.cpp — the backward stage of each dense parameter, from its name.
#include "model/grad_hook.h"

#include <charconv>

#include "core/error.h"

namespace hstu {

int grad_stage(const std::string& name, int64_t num_layers) {
  const int input = static_cast<int>(num_layers) + 1;
  if (name == "position_embedding") return input;
  static const std::string kLayers = "layers.";
  if (name.compare(0, kLayers.size(), kLayers) != 0) return 0;  // head, final LayerNorm
  int64_t l = -1;
  const char* begin = name.data() + kLayers.size();
  const auto [end, ec] = std::from_chars(begin, name.data() + name.size(), l);
  HSTU_CHECK(ec == std::errc() && end != begin && *end == '.' && l >= 0 && l < num_layers,
             "grad_stage: parameter '", name, "' names no layer of ", num_layers);
  return static_cast<int>(num_layers - l);
}

}  // namespace hstu
