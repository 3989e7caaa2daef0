// cmd_bench.cpp — `hstu bench <train|attention|layer>`.
#include <cstdio>
#include <string>

#include "bench/bench_attention.h"
#include "bench/bench_layer.h"
#include "bench/bench_train.h"
#include "cli/commands.h"
#include "core/error.h"

namespace hstu::cli {

int cmd_bench(const Args& a) {
  HSTU_CHECK(
      !a.positional.empty(),
      "usage: hstu bench train [config.gin] [--steps N] [--warmup N] [--phases] | hstu bench "
      "attention [--shape B,L,H,d]... [--full|--jagged] [--rab] [--dtype bf16|fp16] "
      "[--non-causal] [--fwd-only] [--no-validate] | hstu bench layer");
  const std::string what = a.positional[0];
  if (what == "train") {
    check_known(a, {"steps", "warmup", "device", "phases"}, "bench train");
    Args rest = a;
    rest.positional.erase(rest.positional.begin());
    const Config cfg = resolve_config(rest, nullptr);
    run_train_bench(cfg, std::stoll(a.get("warmup", "3")), std::stoll(a.get("steps", "20")),
                    a.has("phases"));
    return 0;
  }
  if (what == "attention")  // its own flags (--shape B,L,H,d ...), passed through unparsed
    return run_attention_bench(std::vector<std::string>(a.raw.begin() + 1, a.raw.end()));
  if (what == "layer")
    return run_layer_bench(std::vector<std::string>(a.raw.begin() + 1, a.raw.end()));
  HSTU_THROW("unknown benchmark '", what, "' (available: train, attention, layer)");
}

}  // namespace hstu::cli
