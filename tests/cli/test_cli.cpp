// test_cli.cpp — the hstu binary's command line, run as a user runs it (HSTU_BIN):
//   - usage errors exit 2 with a message naming the offending flag or value;
//   - errors while running (a missing config file, a bad key or value) exit 1 naming the file
//     and line;
//   - every command's --help (and `hstu help <command>`) exits 0 and lists its flags and the
//     environment variables;
//   - --config FILE and --gin-config-file FILE read what the positional FILE reads, --quiet=0 means
//     not quiet, and the field flags (--run-dir) apply after --set;
//   - the benchmarks get the options given (bench layer's are handed on as an argument list);
//   - preprocess --skip-malformed is a flag: it no longer takes the next argument as its value;
//   - `hstu info` describes the build truthfully;
//   - train names its step folder, which eval and --resume take; HSTU_FAULT_AT_WRITE fails a write;
//   - plan splits the item table over W ranks (shards summing to the table, per-rank totals
//     falling with W) and its one-rank plan is the memory plan `hstu train` prints.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/data_test_util.h"
#include "common/tiny_gin.h"

namespace hstu {
namespace {

using test::TempDir;

struct Outcome {
  int status = -1;  // the exit status
  std::string out;  // stdout and stderr together
};

// Runs `hstu <args>` through the shell.
Outcome hstu(const std::string& args) {
  Outcome r;
  FILE* p = popen((std::string(std::getenv("HSTU_BIN")) + " " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// A retrieval run of two steps on a tiny synthetic dataset (a fraction of a second).
const std::string kTinyGin = test::tiny_retrieval_gin();

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("HSTU_BIN");
    if (!bin || !std::filesystem::exists(bin)) GTEST_SKIP() << "HSTU_BIN not built";
  }
  TempDir dir_;
};

TEST_F(Cli, UsageErrorsExitTwoNamingTheFlagOrValue) {
  const std::string gin = dir_.write("tiny.gin", kTinyGin);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "missing command"},
      {"bogus", "'bogus'"},
      {"bench", "missing command"},
      {"bench foo", "'foo'"},
      {"train --steps 3", "--steps"},  // a flag of another command
      {"train --stpes 3", "--stpes"},
      {"bench train --steps -5", "--steps"},
      {"bench train --steps=abc", "--steps"},
      {"bench train --warmup -1", "--warmup"},
      {"train --threads 2147483648", "--threads"},
      {"train --threads -1", "--threads"},
      {"train --device gpu", "--device"},
      {"train --quiet=maybe", "--quiet"},
      {"train --set", "--set"},
      {"train --resume", "--resume"},
      {"eval", "run_dir"},
      {"preprocess --dataset nope", "--dataset"},
      {"preprocess --max-history 5 --dataset ml-1m --path x", "--max-history"},
      {"preprocess --inference --dataset_name ml-1m --path x", "--inference"},
      {"check", "config"},
      {"bench attention --dtype fp8", "--dtype"},
      {"bench attention --shape 1,2,3", "--shape"},
      {"bench attention --jagged --full", "--full"},
      {"bench layer --reps 0", "--reps"},
      {"bench layer --shape 1,2,3,4,x", "--shape"},
      {"bench balance --world-sizes 2,0", "--world-sizes"},
      {"bench balance --zipf-alpha 1", "--zipf-alpha"},
      {"bench balance --batch-per-rank 0", "--batch-per-rank"},
      {"bench embedding --optimizer adagrad", "--optimizer"},
      {"bench embedding --tables 0", "--tables"},
      {"plan --world-size 0", "--world-size"},
      {"plan --world-size 2,x", "--world-size"},
      {"plan --device gpu", "--device"},
      {"info --verbose", "--verbose"},
      {"help nope", "'nope'"},
  };
  for (const auto& [args, named] : cases) {
    const Outcome r = hstu(args);
    EXPECT_EQ(r.status, 2) << "hstu " << args << ":\n" << r.out;
    EXPECT_NE(r.out.find(named), std::string::npos) << "hstu " << args << ":\n" << r.out;
    EXPECT_NE(r.out.find("--help"), std::string::npos) << "hstu " << args << ":\n" << r.out;
  }
}

TEST_F(Cli, ErrorsWhileRunningExitOneNamingFileAndLine) {
  Outcome r = hstu("train /nonexistent/x.gin");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/x.gin"), std::string::npos) << r.out;
  const std::string bad = dir_.write("bad.gin", "# comment\nNetworkArgs.num_layerz = 3\n");
  r = hstu("train " + bad);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("bad.gin:2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("num_layers"), std::string::npos) << "expected a suggestion: " << r.out;
  r = hstu("train --set NetworkArgs.hidden_dropout=1.5");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("hidden_dropout"), std::string::npos) << r.out;
}

TEST_F(Cli, EveryCommandHasItsHelp) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"", {"train", "eval", "preprocess", "bench", "info", "plan", "help"}},
      {"train",
       {"config", "--config", "--gin-config-file", "--set", "--device", "--threads", "--run-dir",
        "--resume", "--quiet"}},
      {"eval", {"run_dir", "--checkpoint", "--json", "--set", "--device", "--threads"}},
      {"preprocess",
       {"config", "--config", "--gin-config-file", "--set", "--dataset", "--path", "--out",
        "--skip-malformed"}},
      {"bench", {"train", "attention", "layer", "balance", "embedding"}},
      {"bench train",
       {"config", "--config", "--gin-config-file", "--set", "--device", "--threads", "--steps",
        "--warmup", "--phases"}},
      {"bench attention",
       {"--shape", "--jagged", "--full", "--dtype", "--non-causal", "--rab", "--warmup", "--reps",
        "--no-validate", "--fwd-only", "--kernel"}},
      {"bench layer", {"--shape", "--device", "--reps", "--recompute", "--phases", "--unfused"}},
      {"bench balance",
       {"config", "--config", "--set", "--world-sizes", "--batch-per-rank", "--max-len",
        "--zipf-alpha", "--steps", "--seed"}},
      {"bench embedding",
       {"--device", "--tables", "--dim", "--lookups", "--rows", "--alpha", "--optimizer",
        "--cache-ratio", "--warmup", "--iters", "--small", "--deterministic", "--scatter",
        "--fused-bwd", "--unfused-bwd", "--per-table-dedupe", "--lookup", "--window", "--streams"}},
      {"info", {"--help"}},
      {"plan", {"config", "--config", "--gin-config-file", "--set", "--device", "--world-size"}},
      {"help", {"command"}},
  };
  for (const auto& [command, flags] : commands) {
    const Outcome r = hstu(command + " --help");
    EXPECT_EQ(r.status, 0) << "hstu " << command << " --help:\n" << r.out;
    const std::string usage = "hstu" + (command.empty() ? "" : " " + command) + " [OPTIONS]";
    EXPECT_NE(r.out.find(usage), std::string::npos) << r.out;
    for (const std::string& flag : flags)  // "  --set ", "  --config,--gin-config-file FILE"
      EXPECT_TRUE(std::regex_search(r.out, std::regex("[ ,]" + flag + "[ ,]")))
          << "hstu " << command << " --help does not list " << flag << ":\n"
          << r.out;
    for (const char* env : {"OMP_WAIT_POLICY", "OMP_NUM_THREADS", "HSTU_DEBUG"})
      EXPECT_NE(r.out.find(env), std::string::npos) << env << " undocumented:\n" << r.out;
    const Outcome h = hstu("help " + command);
    EXPECT_EQ(h.status, 0) << h.out;
    EXPECT_EQ(h.out, r.out) << "hstu help " << command;
  }
}

// The same config file given three ways trains with the same effective config; --quiet=0 is
// not quiet (the effective config is listed), --quiet is.
TEST_F(Cli, ConfigFileOptionsMatchThePositional) {
  const std::string gin = dir_.write("tiny.gin", kTinyGin), run_dir = dir_.file("run");
  std::vector<std::string> configs;
  for (const std::string& how : {gin + " --quiet=0", "--config " + gin + " --quiet",
                                 "--gin-config-file=" + gin + " --quiet"}) {
    const Outcome r = hstu("train " + how + " --run-dir " + run_dir);
    ASSERT_EQ(r.status, 0) << "hstu train " << how << ":\n" << r.out;
    EXPECT_NE(r.out.find("hstu train: " + gin + " -> " + run_dir), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("effective config") != std::string::npos, configs.empty()) << r.out;
    configs.push_back(read_file(run_dir + "/config.gin"));
  }
  EXPECT_NE(configs[0].find("NetworkArgs.hidden_size = 16"), std::string::npos) << configs[0];
  EXPECT_EQ(configs[1], configs[0]);
  EXPECT_EQ(configs[2], configs[0]);
}

// --device / --run-dir / --threads stand for their fields and apply after every --set.
TEST_F(Cli, FieldFlagsApplyAfterSet) {
  const std::string gin = dir_.write("tiny.gin", kTinyGin);
  const Outcome r =
      hstu("train " + gin + " --quiet --run-dir " + dir_.file("flag") + " --threads 1" +
           " --set TrainerArgs.run_dir=" + dir_.file("set") + " --set TrainerArgs.num_threads=2");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string config = read_file(dir_.file("flag") + "/config.gin");
  EXPECT_NE(config.find("TrainerArgs.num_threads = 1 "), std::string::npos) << config;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("set")));
}

// Checkpoints through the command line: the `checkpoint:` line names the step folder, eval and
// --resume take it, and HSTU_FAULT_AT_WRITE=1 fails the process's first file write.
TEST_F(Cli, CheckpointStepFoldersAndInjectedFaults) {
  const std::string gin = dir_.write("tiny.gin", kTinyGin);
  const std::string run = dir_.file("run");
  ::setenv("HSTU_FAULT_AT_WRITE", "1", 1);
  Outcome r = hstu("train " + gin + " --quiet --run-dir " + run);
  ::unsetenv("HSTU_FAULT_AT_WRITE");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("injected fault"), std::string::npos) << r.out;
  r = hstu("train " + gin + " --run-dir " + run);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string step = run + "/checkpoints/step-000000002";
  EXPECT_NE(r.out.find("checkpoint: " + step + "\n"), std::string::npos) << r.out;
  r = hstu("eval " + run + " --checkpoint " + step);
  EXPECT_EQ(r.status, 0) << r.out;
  r = hstu("train " + gin + " --quiet --run-dir " + run + " --resume " + step +
           " --set TrainerArgs.max_train_iters=3");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(std::filesystem::exists(run + "/checkpoints/step-000000003/manifest.json"));
}

// The benchmarks get what the command line gave: bench train its config and step counts, bench
// layer (which reads an argument list) every --shape and the flags given as true, bench balance
// its config and options.
TEST_F(Cli, BenchOptionsReachTheBenchmarks) {
  const std::string gin = dir_.write("tiny.gin", kTinyGin);
  Outcome r = hstu("bench train --config " + gin + " --steps 1 --warmup 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("bench train (cpu): 1 steps"), std::string::npos) << r.out;
  const std::string layer = "bench layer --device cpu --reps 1 --shape 2,16,16,1,16 ";
  r = hstu(layer + "--shape 2,32,16,1,16 --recompute");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("recompute LN+SiLU"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n2    16     16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n2    32     16"), std::string::npos) << r.out;
  r = hstu(layer + "--recompute=false");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("recompute"), std::string::npos) << r.out;
  r = hstu(layer + "--phases --unfused");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("unfused element-wise passes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("phases of the layer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bwd.silu"), std::string::npos) << r.out;
  // bench balance: the config's layer shape (default: configs/bench-large.gin) and every option.
  r = hstu(
      "bench balance --world-sizes 2,3 --batch-per-rank 4 --max-len 64 --zipf-alpha 1.5 "
      "--steps 3 --seed 7");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("8 layers, D 1024, 4 heads x 256 (retrieval); 4 samples per rank, lengths "
                       "Zipf(1.50) capped at 64, 1 token per event; 3 steps, seed 7"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\n2    "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n3    "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\n4    "), std::string::npos) << r.out;
  r = hstu("bench balance --config " + gin + " --world-sizes 2 --steps 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("D 16"), std::string::npos) << r.out;
  // bench embedding: a tiny CPU run of every tier and optimiser given.
  r = hstu(
      "bench embedding --device cpu --tables 2 --dim 8 --lookups 400 --rows 300 --alpha 1.2 "
      "--optimizer adam --cache-ratio 0 --cache-ratio 0.5 --warmup 0 --iters 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 tables x dim 8, 400 lookups per iteration (200 per table), power law "
                       "alpha 1.20 over 300 ids"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nadam  all-in-HBM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nadam  host r=0.50"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\nsgd "), std::string::npos) << r.out;
}

// A MovieLens ratings file with one malformed row (line 4).
void write_ratings(const TempDir& dir) {
  std::filesystem::create_directories(dir.file("raw"));
  dir.write("raw/ratings.csv",
            "userId,movieId,rating,timestamp\n1,10,4.0,100\n1,11,3.0,101\n1,oops,3.0,102\n"
            "2,10,5.0,103\n2,12,1.0,104\n");
  dir.write("raw/movies.csv", "movieId,title,genres\n10,a,x\n11,b,y\n12,c,z\n");
}

TEST_F(Cli, PreprocessSkipMalformedIsAFlag) {
  write_ratings(dir_);
  const std::string gin = dir_.write("data.gin",
                                     "DatasetArgs.dataset_name = \"ml-latest-small\"\n"
                                     "DatasetArgs.dataset_path = \"" +
                                         dir_.file("raw") + "\"\n");
  // The config file right after the flag was taken as the flag's value.
  Outcome r = hstu("preprocess --skip-malformed " + gin + " --out " + dir_.file("a"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 users, 3 items (+padding), 4 events"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("skipped 1 malformed rows"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir_.file("a") + "/sequences.bin"));
  // --dataset/--path and --set without a config file.
  r = hstu("preprocess --skip-malformed --dataset ml-latest-small --path " + dir_.file("raw") +
           " --out " + dir_.file("b"));
  EXPECT_EQ(r.status, 0) << r.out;
  r = hstu("preprocess --set DatasetArgs.dataset_name=ml-latest-small --set " +
           std::string("DatasetArgs.dataset_path=") + dir_.file("raw") + " --skip-malformed " +
           "--out " + dir_.file("c"));
  EXPECT_EQ(r.status, 0) << r.out;
  // Without the flag (or with it false) the malformed row is an error naming it.
  for (const char* flag : {"", "--skip-malformed=0 "}) {
    r = hstu(std::string("preprocess ") + flag + gin + " --out " + dir_.file("d"));
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("ratings.csv:4"), std::string::npos) << r.out;
  }
}

// recsys-examples' spellings; where the output went and how to train on it; every dataset named.
TEST_F(Cli, PreprocessTakesThePeersFlagsAndSaysHowToTrain) {
  write_ratings(dir_);
  Outcome r = hstu(
      "preprocess --skip-malformed --training --dataset_name ml-latest-small "
      "--dataset_path " +
      dir_.file("raw") + " --out " + dir_.file("cache/ml-latest-small"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("output: " + dir_.file("cache/ml-latest-small")), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("train on it: hstu train CONFIG --set DatasetArgs.dataset_name="
                       "ml-latest-small --set DatasetArgs.dataset_path=" +
                       dir_.file("raw") + " --set DatasetArgs.cache_dir=" + dir_.file("cache")),
            std::string::npos)
      << r.out;
  r = hstu("preprocess --help");
  for (const char* name : {"ml-1m", "ml-20m", "ml-latest-small", "ml-100k", "amzn-books",
                           "kuairand-pure", "kuairand-1k", "kuairand-27k"})
    EXPECT_NE(r.out.find(std::string("  ") + name + " "), std::string::npos) << name;
}

// Raw-id data (issue 18): preprocessing writes keys into <dataset>-raw without an item map and
// says how to train on it; a run on it with a dynamic item table trains, shows the table's
// counters, saves the table and evaluates from its checkpoint.
TEST_F(Cli, PreprocessRawIdsAndTrainADynamicItemTable) {
  write_ratings(dir_);
  const std::string raw_keys =
      " --set DatasetArgs.raw_ids=True --set 'DynamicTableArgs.tables=[\"item\"]'";
  Outcome r =
      hstu("preprocess --skip-malformed --dataset ml-latest-small --path " + dir_.file("raw") +
           " --out " + dir_.file("cache/ml-latest-small-raw") + raw_keys);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("output: " + dir_.file("cache/ml-latest-small-raw") +
                       " (sequences.bin, user_ids.csv, source.json)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--set DatasetArgs.cache_dir=" + dir_.file("cache") +
                       " --set DatasetArgs.raw_ids=True"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir_.file("cache/ml-latest-small-raw/sequences.bin")));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("cache/ml-latest-small-raw/item_ids.csv")));
  // raw_ids alone is a validation error naming the key it needs.
  r = hstu("preprocess --dataset ml-latest-small --path " + dir_.file("raw") +
           " --set DatasetArgs.raw_ids=True");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("DatasetArgs.raw_ids = True needs DynamicTableArgs.tables"),
            std::string::npos)
      << r.out;
  // Training reads well-formed raw data (its own cache): 6 users, 5 movies.
  std::filesystem::create_directories(dir_.file("clean"));
  std::string rows = "userId,movieId,rating,timestamp\n";
  for (int u = 1; u <= 6; ++u)
    for (int i = 0; i < 5; ++i)
      rows += std::to_string(u) + "," + std::to_string(10 + (u + i) % 5) + ",4.0," +
              std::to_string(100 * u + i) + "\n";
  dir_.write("clean/ratings.csv", rows);
  dir_.write("clean/movies.csv", "movieId,title,genres\n10,a,x\n11,b,y\n12,c,z\n13,d,x\n14,e,y\n");
  const std::string data = " --set DatasetArgs.dataset_name=\"ml-latest-small\" --set " +
                           std::string("DatasetArgs.dataset_path=\"") + dir_.file("clean") +
                           "\" --set DatasetArgs.cache_dir=\"" + dir_.file("cache2") + "\"";
  r = hstu("train --run-dir " + dir_.file("run") + raw_keys + data +
           " --set TrainerArgs.max_train_iters=3 --set TrainerArgs.eval_interval=3"
           " --set TrainerArgs.ckpt_save_interval=0"
           " --set TrainerArgs.train_batch_size=4 --set TrainerArgs.eval_batch_size=4");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("item table (dynamic): "), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(
      dir_.file("run/checkpoints/step-000000003/item_embedding.dynamic.safetensors")))
      << r.out;
  r = hstu("eval " + dir_.file("run"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("HR@10"), std::string::npos) << r.out;
}

// Several config files apply in order; `hstu check` validates without training (0 / 2).
TEST_F(Cli, ConfigFilesApplyInOrderAndCheckValidates) {
  const std::string a =
      dir_.write("a.gin", "NetworkArgs.num_layers = 3\nNetworkArgs.hidden_size = 32\n");
  const std::string b = dir_.write("b.gin", "NetworkArgs.num_layers = 5\n");
  Outcome r = hstu("check " + a + " " + b);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("NetworkArgs.num_layers = 5 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NetworkArgs.hidden_size = 32 "), std::string::npos) << r.out;
  r = hstu("check " + b + " " + a);
  EXPECT_NE(r.out.find("NetworkArgs.num_layers = 3 "), std::string::npos) << r.out;
  const std::string bad = dir_.write("bad.gin", "NetworkArgs.num_layerz = 3\nFoo.x = 1\n");
  r = hstu("check " + a + " " + bad);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("2 problems"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(bad + ":1: unknown field 'num_layerz'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(bad + ":2: unknown class 'Foo'"), std::string::npos) << r.out;
}

// `hstu info` names the build's BLAS and, in CUDA builds, the compiled architectures (whatever
// the machine has: no GPU is needed to describe the build); a CPU-only build says that it was
// configured so, not that nvcc was missing.
TEST_F(Cli, InfoDescribesTheBuild) {
  const Outcome r = hstu("info");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("CPU BLAS"), std::string::npos) << r.out;
#if defined(HSTU_WITH_CUDA)
  EXPECT_NE(r.out.find("code for     sm_"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuBLASLt"), std::string::npos) << r.out;
#else
  EXPECT_NE(r.out.find("CUDA         not compiled in (" HSTU_CPU_ONLY_REASON ")"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("nvcc"), std::string::npos) << r.out;
#endif
}

}  // namespace
}  // namespace hstu

namespace hstu {
namespace {

// kTinyGin with a catalogue of 20,000 items: one step's window (32 x 20 x (2 + 8) + 1 = 6401
// ids) is a third of the table.
std::string plan_gin() {
  return std::string(kTinyGin) + "SyntheticArgs.num_items = 20000\n";
}

// The plan of each world size in `hstu plan` output: "world size W ..." starts one.
std::map<int, std::string> plans_by_world(const std::string& out) {
  std::map<int, std::string> plans;
  const std::regex head("world size (\\d+) ");
  auto it = std::sregex_iterator(out.begin(), out.end(), head);
  std::vector<std::pair<int, size_t>> starts;
  for (; it != std::sregex_iterator(); ++it)
    starts.push_back({std::stoi((*it)[1]), static_cast<size_t>(it->position())});
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t end = i + 1 < starts.size() ? starts[i + 1].second : out.size();
    plans[starts[i].first] = out.substr(starts[i].second, end - starts[i].second);
  }
  return plans;
}

// The numbers of the lines of `text` that match `re` (group 1: rank, group 2: value).
std::map<int, double> per_rank_values(const std::string& text, const std::regex& re) {
  std::map<int, double> v;
  std::istringstream in(text);
  std::smatch m;
  for (std::string l; std::getline(in, l);)
    if (std::regex_search(l, m, re)) v[std::stoi(m[1])] = std::stod(m[2]);
  return v;
}

std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);)
    if (l.rfind(prefix, 0) == 0) out.push_back(l);
  return out;
}

TEST_F(Cli, PlanSplitsTheItemTableOverTheRanks) {
  const std::string gin = dir_.write("plan.gin", plan_gin());
  for (const char* owner : {"modulo", "hash"}) {
    const Outcome r =
        hstu("plan " + gin + " --world-size 1,2,4,8 --set TrainerArgs.shard_owner=" + owner);
    ASSERT_EQ(r.status, 0) << r.out;
    const auto plans = plans_by_world(r.out);
    ASSERT_EQ(plans.size(), 4u) << r.out;
    const std::regex shard_re("^    rank (\\d+): (\\d+) rows, ");
    const std::regex total_re("^(?:  total {13}| {20})rank (\\d+): ([0-9.]+) MiB");
    double last_total = 1e30, last_shard = 1e30;
    for (const int w : {1, 2, 4, 8}) {
      const std::string& p = plans.at(w);
      const auto totals = per_rank_values(p, total_re);
      ASSERT_EQ(totals.size(), static_cast<size_t>(w)) << p;
      double most = 0;
      for (const auto& [rank, mib] : totals) most = std::max(most, mib);
      EXPECT_LT(most, last_total) << owner << " W=" << w << ":\n" << p;
      last_total = most;
      if (w == 1) {
        EXPECT_EQ(lines_starting(p, "  item embedding    [20001, 16] + grad").size(), 1u) << p;
        continue;
      }
      EXPECT_NE(p.find("sharded row-wise over " + std::to_string(w) + " ranks"), std::string::npos)
          << p;
      const auto rows = per_rank_values(p, shard_re);
      ASSERT_EQ(rows.size(), static_cast<size_t>(w)) << p;
      double sum = 0, largest = 0;
      for (const auto& [rank, n] : rows) {
        sum += n;
        largest = std::max(largest, n);
      }
      EXPECT_EQ(sum, 20001) << owner << " W=" << w << ":\n" << p;
      EXPECT_LT(largest, last_shard) << p;
      last_shard = largest;
      EXPECT_NE(p.find("window: 6401 rows"), std::string::npos) << p;
      EXPECT_NE(p.find("item all-to-all"), std::string::npos) << p;
      EXPECT_NE(p.find("dense all-reduce  ring 2(W-1)/W"), std::string::npos) << p;
    }
  }
}

// `hstu plan --world-size 1` prints the memory plan `hstu train` prints for the same config
// (retrieval and ranking).
TEST_F(Cli, PlanOfOneRankIsTheTrainersPlan) {
  const std::vector<std::pair<std::string, std::string>> configs = {{"retrieval.gin", plan_gin()},
                                                                    {"ranking.gin", R"(
DatasetArgs.dataset_name = "synthetic"
DatasetArgs.max_history_seqlen = 20
DatasetArgs.max_num_candidates = 4
SyntheticArgs.num_users = 64
SyntheticArgs.num_items = 50
SyntheticArgs.num_clusters = 4
SyntheticArgs.clusters_per_user = 1
SyntheticArgs.min_seqlen = 8
SyntheticArgs.max_seqlen = 20
SyntheticArgs.num_contextual_features = 2
SyntheticArgs.contextual_cardinality = 5
SyntheticArgs.num_tasks = 2
NetworkArgs.num_layers = 1
NetworkArgs.hidden_size = 16
NetworkArgs.num_attention_heads = 1
NetworkArgs.kv_channels = 16
NetworkArgs.num_position_buckets = 64
RankingArgs.prediction_head_arch = [8, 2]
RankingArgs.num_tasks = 2
TrainerArgs.train_batch_size = 16
TrainerArgs.eval_batch_size = 16
TrainerArgs.max_train_iters = 2
TrainerArgs.device = "cpu"
)"}};
  for (const auto& [name, text] : configs) {
    const std::string gin = dir_.write(name, text);
    const Outcome t = hstu("train " + gin + " --run-dir " + dir_.file(name + ".run"));
    ASSERT_EQ(t.status, 0) << t.out;
    const Outcome p = hstu("plan " + gin);
    ASSERT_EQ(p.status, 0) << p.out;
    for (const char* prefix :
         {"memory plan (", "  dense parameters", "  activations",
          name == "retrieval.gin" ? "  item embedding" : "  embedding tables"}) {
      const auto trained = lines_starting(t.out, prefix);
      ASSERT_EQ(trained.size(), 1u) << prefix << "\n" << t.out;
      EXPECT_EQ(lines_starting(p.out, prefix), trained) << name << ": " << prefix << "\n" << p.out;
    }
  }
}

}  // namespace
}  // namespace hstu
