// cmd_bench.cpp — `hstu bench <train|attention|layer|balance|embedding>`. The attention and layer
// benchmarks read an argument list (src/bench/): their options are declared and checked here, for
// --help and usage errors, and handed on as given.
#include <exception>
#include <filesystem>
#include <memory>
#include <string>

#include "bench/bench_attention.h"
#include "bench/bench_balance.h"
#include "bench/bench_embedding.h"
#include "bench/bench_layer.h"
#include "bench/bench_train.h"
#include "cli/commands.h"

namespace hstu::cli {
namespace {

struct BenchTrainArgs {
  ConfigArgs config;
  int64_t warmup = 3, steps = 20;
  bool phases = false;
};

// --shape, repeatable: `count` positive integers laid out as `layout`.
void add_shape_option(CLI::App& app, int count, const std::string& layout) {
  app.add_option("--shape", "a shape instead of the default sweep (repeatable)")
      ->type_name(layout)
      ->check(positive_ints(count, layout))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
}

void add_bench_train(CLI::App& bench, Commands& commands) {
  CLI::App* app =
      bench.add_subcommand("train", "tokens/s, step time, TFLOPS and memory of a training step");
  auto a = std::make_shared<BenchTrainArgs>();
  add_config_file(*app, a->config, "default: the embedded configs/default.gin");
  add_set(*app, a->config);
  add_runtime_flags(*app, a->config);
  app->add_option("--steps", a->steps, "timed steps")
      ->type_name("N")
      ->check(int_in(1))
      ->capture_default_str();
  app->add_option("--warmup", a->warmup, "untimed steps first")
      ->type_name("N")
      ->check(int_in(0))
      ->capture_default_str();
  app->add_flag("--phases", a->phases, "also the time per step phase (forward, backward, ...)");
  commands.push_back({app, [a] {
                        run_train_bench(
                            resolve_config(a->config, NoFile::kEmbeddedDefault, nullptr), a->warmup,
                            a->steps, a->phases);
                        return 0;
                      }});
}

void add_bench_attention(CLI::App& bench, Commands& commands) {
  CLI::App* app = bench.add_subcommand(
      "attention", "the CUDA HSTU attention kernels over a sweep of shapes (needs a GPU)");
  add_shape_option(*app, 4, "B,L,H,d");
  CLI::Option* jagged = app->add_flag("--jagged")->description("jagged lengths only");
  app->add_flag("--full")->description("full-length sequences only")->excludes(jagged);
  app->add_option("--lengths",
                  "jagged lengths per sample: half = uniform in L/2..L (default), uniform = "
                  "uniform in 1..L, zipf = P(l) ~ l^-1.2 on 1..L")
      ->type_name("half|uniform|zipf")
      ->check(CLI::IsMember({"half", "uniform", "zipf"}).description(""));
  app->add_flag("--sweep")->description(
      "instead of the default shapes: B 32, 4 heads, L 128..16384 (powers of 2) x d 32/64/128/256");
  app->add_option("--dtype", "attention input type (default bf16)")
      ->type_name("bf16|fp16")
      ->check(CLI::IsMember({"bf16", "fp16"}).description(""));
  app->add_flag("--non-causal")->description("no causal mask");
  app->add_flag("--rab")->description("with relative attention bias");
  app->add_option("--warmup", "untimed runs first (default 3)")->type_name("N")->check(int_in(0));
  app->add_option("--reps", "timed runs, median reported (default 20)")
      ->type_name("N")
      ->check(int_in(1));
  app->add_flag("--no-validate")->description("skip the check against the CPU reference");
  app->add_flag("--fwd-only")->description("forward only");
  app->add_flag("--own-plan")
      ->description(
          "each call builds its own launch plan (a lone call), instead of taking the step's, built "
          "once and timed apart (a model step's way)");
  app->add_option("--kernel",
                  "attention kernels (forward and backward): the dispatch's choice, sm80 or sm90 "
                  "forced, or both (A/B)")
      ->type_name("auto|sm80|sm90|both")
      ->check(CLI::IsMember({"auto", "sm80", "sm90", "both"}).description(""));
  commands.push_back({app, [app] { return run_attention_bench(given_args(*app)); }});
}

void add_bench_layer(CLI::App& bench, Commands& commands) {
  CLI::App* app = bench.add_subcommand("layer", "one HSTU layer forward + backward");
  add_shape_option(*app, 5, "B,L,D,H,d");
  add_config_value(*app, "--device", "TrainerArgs.device", "");
  app->add_option("--reps", "timed runs, median reported (default 10)")
      ->type_name("N")
      ->check(int_in(1));
  app->add_flag("--recompute")->description("recompute the input LayerNorm and SiLU in backward");
  app->add_flag("--phases")->description("also the layer's time per phase (its kernels)");
  app->add_flag("--unfused")
      ->description(
          "the separate element-wise passes around the attention (HstuLayerConfig.fused = false)");
  commands.push_back({app, [app] { return run_layer_bench(given_args(*app)); }});
}

void add_bench_embedding(CLI::App& bench, Commands& commands) {
  CLI::App* app = bench.add_subcommand(
      "embedding",
      "dynamic embedding tables on recsys-examples' DynamicEmb workload (10 x 128, 1.05 M "
      "lookups, alpha 1.05; SGD / Adam; all in HBM and with the host tier)");
  add_config_value(*app, "--device", "TrainerArgs.device", "");
  app->add_option("--tables", "tables (default 10)")->type_name("N")->check(int_in(1, 4096));
  app->add_option("--dim", "embedding dimension (default 128)")
      ->type_name("D")
      ->check(int_in(1, 65536));
  app->add_option("--lookups", "lookups per iteration, all tables (default 1048570)")
      ->type_name("N")
      ->check(int_in(1));
  app->add_option("--rows", "ids per table (default 1.68 M on CUDA, 200 k on the CPU)")
      ->type_name("R")
      ->check(int_in(1));
  app->add_option("--alpha", "power-law exponent of the keys (default 1.05)")->type_name("A");
  app->add_option("--optimizer", "sgd, adam or both (default both)")
      ->type_name("NAME")
      ->check(CLI::IsMember({"sgd", "adam", "both"}).description(""));
  app->add_option("--cache-ratio",
                  "host tier cache rows / table rows, 0 = all in HBM (repeatable; default 0, 1.0 "
                  "and 0.5)")
      ->type_name("R")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
  app->add_option("--warmup", "untimed iterations first (default 3)")
      ->type_name("N")
      ->check(int_in(0));
  app->add_option("--iters", "timed iterations, median reported (default 10)")
      ->type_name("N")
      ->check(int_in(1));
  app->add_flag("--small")->description("CPU-sized workload: 104,857 lookups, 200 k rows");
  app->add_flag("--deterministic")->description("sorted (bit-reproducible) gradient scatter");
  app->add_flag("--scatter")
      ->description(
          "backward through embedding_bwd's atomic scatter (not the table's reduce_grad)");
  app->add_flag("--fused-bwd")
      ->description(
          "backward: the table's backward (per-key sums applied, grad as scratch; the default)");
  app->add_flag("--unfused-bwd")
      ->description("backward: the table's reduce_grad, then apply (which zeroes grad)");
  app->add_flag("--per-table-dedupe")
      ->description("one dedupe per table (not all tables' lookups in one pass)");
  app->add_flag("--lookup")
      ->description("forward: the table's lookup (rows straight to the output; the default)");
  app->add_flag("--window")
      ->description("forward: gather of the unique rows into a window, then embedding_fwd");
  app->add_option("--streams",
                  "CUDA streams the tables' steps are spread over (default 8 on "
                  "CUDA, 1 on the CPU)")
      ->type_name("S")
      ->check(int_in(1, 64));
  commands.push_back({app, [app] { return run_embedding_bench(given_args(*app)); }});
}

// configs/bench-large.gin of the working directory, else of the source tree hstu was built from.
std::string default_balance_config() {
  const std::string local = "configs/bench-large.gin";
  if (std::filesystem::exists(local)) return local;
  return std::string(HSTU_SOURCE_DIR) + "/" + local;
}

struct BenchBalanceArgs {
  ConfigArgs config;
  BalanceBenchArgs bench;
  int64_t seed = 1234;
};

void add_bench_balance(CLI::App& bench, Commands& commands) {
  CLI::App* app = bench.add_subcommand(
      "balance",
      "balanced batching: per-rank work of the plain split and the Karmarkar-Karp partition on "
      "simulated ranks (no GPU)");
  auto a = std::make_shared<BenchBalanceArgs>();
  add_config_file(*app, a->config, "default: configs/bench-large.gin (of the source tree)");
  add_set(*app, a->config);
  app->add_option("--world-sizes", a->bench.world_sizes, "simulated data-parallel world sizes")
      ->type_name("W,W,...")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 16).description(""))
      ->capture_default_str();
  app->add_option("--batch-per-rank", a->bench.batch_per_rank, "samples per rank and step")
      ->type_name("B")
      ->check(int_in(1, int64_t{1} << 24))
      ->capture_default_str();
  app->add_option("--max-len", a->bench.max_len, "cap of the sequence lengths")
      ->type_name("L")
      ->check(int_in(1, int64_t{1} << 30))
      ->capture_default_str();
  app->add_option("--zipf-alpha", a->bench.zipf_alpha, "Zipf exponent of the lengths (> 1)")
      ->type_name("A")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            try {
              size_t used = 0;
              const double x = std::stod(v, &used);
              if (used == v.size() && x > 1 && x < 100) return "";
            } catch (const std::exception&) {
            }
            return "expected a number in (1, 100), got '" + v + "'";
          },
          ""))
      ->capture_default_str();
  app->add_option("--steps", a->bench.steps, "global batches drawn per world size")
      ->type_name("N")
      ->check(int_in(1, 1000000))
      ->capture_default_str();
  app->add_option("--seed", a->seed, "seed of the drawn lengths")
      ->type_name("N")
      ->check(int_in(0))
      ->capture_default_str();
  commands.push_back({app, [a] {
                        ConfigArgs config = a->config;
                        if (config.files.empty()) config.files = {default_balance_config()};
                        BalanceBenchArgs bench = a->bench;
                        bench.seed = static_cast<uint64_t>(a->seed);
                        run_balance_bench(resolve_config(config, NoFile::kSchemaDefaults, nullptr),
                                          bench);
                        return 0;
                      }});
}

}  // namespace

void add_bench(CLI::App& hstu, Commands& commands) {
  CLI::App* bench = hstu.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  add_bench_train(*bench, commands);
  add_bench_attention(*bench, commands);
  add_bench_layer(*bench, commands);
  add_bench_balance(*bench, commands);
  add_bench_embedding(*bench, commands);
}

}  // namespace hstu::cli
