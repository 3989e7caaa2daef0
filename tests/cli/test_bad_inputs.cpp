// test_bad_inputs.cpp — the bad-input suite: a table of damaged, hostile or unusual inputs given
// to the hstu binary (HSTU_BIN) as a user would, each with the files the test writes first, the
// command line, the exit code expected and a piece of the message that must appear (naming the
// file, line, field or flag). Cases are configs, command lines, raw data, caches, checkpoints and
// the file system. `{d}` in a file name, a command line or a message stands for the case's own
// folder. A case whose expected exit is 0 is a verified correct result (the message then is what
// shows it was handled, e.g. a rebuild warning).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/data_test_util.h"
#include "common/process_test_util.h"
#include "common/tiny_gin.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;

// A retrieval run of two steps on a tiny synthetic dataset (a fraction of a second).
const std::string kTiny = test::tiny_retrieval_gin();

const std::string kRatingsHeader = "userId,movieId,rating,timestamp\n";
const std::string kMovies = "movieId,title,genres\n1,A (1995),Comedy\n2,B (1995),Drama\n";
const std::string kGoodRatings = kRatingsHeader + "1,1,4.0,100\n1,2,3.5,200\n2,1,5.0,300\n";

struct Case {
  std::string name;
  std::map<std::string, std::string> files;  // relative path -> content
  std::string args;                          // after `hstu`
  int exit_code;
  std::string message;  // must appear in the output
  std::function<void(const std::string& dir)> prepare = nullptr;
};

std::string subst(const std::string& s, const std::string& dir) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 3, "{d}") == 0) {
      out += dir;
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Splits a command line at spaces (no quoting; the cases need none).
std::vector<std::string> split_args(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// `train` of a config file holding `gin` (plus the tiny run unless `alone`).
Case config_case(const std::string& name, const std::string& gin, const std::string& message,
                 bool alone = false) {
  return {name,
          {{"c.gin", (alone ? "" : kTiny) + gin}},
          "train {d}/c.gin --quiet --run-dir {d}/run",
          1,
          message};
}

// `preprocess` of an ml-latest-small folder.
Case csv_case(const std::string& name, const std::string& ratings, const std::string& message,
              const std::string& movies = kMovies) {
  return {name,
          {{"raw/ratings.csv", ratings}, {"raw/movies.csv", movies}},
          "preprocess --dataset ml-latest-small --path {d}/raw --out {d}/out",
          1,
          message};
}

Case ml1m_case(const std::string& name, const std::string& ratings, const std::string& message,
               const std::string& users = "1::F::1::10::48067\n2::M::56::16::70072\n",
               const std::string& movies = "1::A (1995)::Comedy\n2::B (1995)::Drama\n") {
  return {name,
          {{"raw/ratings.dat", ratings}, {"raw/users.dat", users}, {"raw/movies.dat", movies}},
          "preprocess --dataset ml-1m --path {d}/raw --out {d}/out",
          1,
          message};
}

// Trains the tiny run into {d}/run (2 steps, a save at step 2).
void train_tiny(const std::string& dir) {
  std::ofstream(dir + "/tiny.gin") << kTiny;
  const test::ProcResult r = test::run_process(
      {test::hstu_bin(), "train", dir + "/tiny.gin", "--quiet", "--run-dir", dir + "/run"},
      dir + "/tiny.out");
  ASSERT_EQ(r.exit_code, 0) << r.out;
}
const char* kSave = "{d}/run/checkpoints/step-000000002";

std::vector<Case> cases() {
  std::vector<Case> c;
  // ---- configs: syntax ----
  c.push_back(config_case("missing value", "NetworkArgs.num_layers =\n", "c.gin:19"));
  c.push_back(config_case("missing =", "NetworkArgs.num_layers 3\n", "c.gin:19"));
  c.push_back(config_case("no key", "= 3\n", "c.gin:19"));
  c.push_back(config_case("unterminated string", "TrainerArgs.run_dir = \"abc\n", "c.gin:19"));
  c.push_back(config_case("unclosed list", "RankingArgs.prediction_head_arch = [8, 2\n", "c.gin"));
  c.push_back(config_case("stray bracket", "NetworkArgs.num_layers = 2]\n", "c.gin:19"));
  c.push_back(config_case("binary garbage", std::string("\x01\x02\xff\xfe\x00zz", 7), "c.gin"));
  c.push_back(config_case("deep nesting", "x = " + std::string(100000, '[') + "\n", "c.gin"));
  {
    std::string gin = "m0 = [1, 1]\n";
    for (int i = 1; i <= 40; ++i) {
      char line[64];
      std::snprintf(line, sizeof line, "m%d = [%%m%d, %%m%d]\n", i, i - 1, i - 1);
      gin += line;
    }
    c.push_back(config_case("macro doubling 40 times, unused", gin, "done: 2 steps"));
    c.back().exit_code = 0;  // gin expands macros where they are used
    c.push_back(config_case("macro doubling 40 times, used",
                            gin + "RankingArgs.prediction_head_arch = %m40\n", "c.gin"));
  }
  c.push_back(config_case("undefined macro", "NetworkArgs.num_layers = %nope\n", "nope"));
  // ---- configs: types ----
  c.push_back(config_case("string for int", "NetworkArgs.num_layers = \"two\"\n", "num_layers"));
  c.push_back(config_case("float for int", "NetworkArgs.num_layers = 2.5\n", "num_layers"));
  c.push_back(config_case("bool for int", "NetworkArgs.num_layers = True\n", "num_layers"));
  c.push_back(config_case("list for int", "NetworkArgs.num_layers = [1]\n", "num_layers"));
  c.push_back(
      config_case("string for float", "OptimizerArgs.learning_rate = \"fast\"\n", "learning_rate"));
  c.push_back(config_case("int for bool", "NetworkArgs.relative_attention_bias = 3\n",
                          "relative_attention_bias"));
  c.push_back(config_case("int for string", "TrainerArgs.device = 3\n", "device"));
  c.push_back(config_case("string list element", "RankingArgs.prediction_head_arch = [8, \"x\"]\n",
                          "prediction_head_arch"));
  // ---- configs: ranges ----
  c.push_back(config_case("negative layers", "NetworkArgs.num_layers = -1\n", "num_layers"));
  c.push_back(config_case("zero hidden size", "NetworkArgs.hidden_size = 0\n", "hidden_size"));
  c.push_back(config_case("int64 overflow", "NetworkArgs.num_layers = 99999999999999999999\n",
                          "c.gin:19:26: number '99999999999999999999' is out of range"));
  c.push_back(
      config_case("dropout above 1", "NetworkArgs.hidden_dropout = 1.5\n", "hidden_dropout"));
  c.push_back(config_case("negative learning rate", "OptimizerArgs.learning_rate = -1.0\n",
                          "learning_rate"));
  c.push_back(
      config_case("threads above 4096", "TrainerArgs.num_threads = 100000\n", "num_threads"));
  c.push_back(config_case("negative threads", "TrainerArgs.num_threads = -2\n", "num_threads"));
  c.push_back(config_case("zero batch", "TrainerArgs.train_batch_size = 0\n", "train_batch_size"));
  c.push_back(
      config_case("zero heads", "NetworkArgs.num_attention_heads = 0\n", "num_attention_heads"));
  c.push_back(config_case("zero kv channels", "NetworkArgs.kv_channels = 0\n", "kv_channels"));
  c.push_back(config_case("zero ckpt_keep", "TrainerArgs.ckpt_keep = 0\n", "ckpt_keep"));
  c.push_back(
      config_case("zero seqlen", "DatasetArgs.max_history_seqlen = 0\n", "max_history_seqlen"));
  c.push_back(
      config_case("negative negatives", "RetrievalArgs.num_negatives = -8\n", "num_negatives"));
  c.push_back(config_case("unknown device", "TrainerArgs.device = \"tpu\"\n", "device"));
  c.push_back(
      config_case("unknown dataset", "DatasetArgs.dataset_name = \"nope\"\n", "dataset_name"));
  c.push_back(config_case("zero users", "SyntheticArgs.num_users = 0\n", "num_users"));
  c.push_back(config_case("min above max seqlen", "SyntheticArgs.min_seqlen = 30\n", "seqlen"));
  // ---- configs: keys and files ----
  c.push_back(config_case("unknown key", "NetworkArgs.num_layerz = 3\n", "num_layerz"));
  c.push_back(config_case("unknown class", "NetworkArgz.num_layers = 3\n", "NetworkArgz"));
  // A binding without a class is a gin macro definition: valid, and unused (verified result).
  {
    Case k = config_case("key without class is a macro", "num_layers = 3\n", "done: 2 steps");
    k.exit_code = 0;
    c.push_back(k);
  }
  c.push_back(config_case("include missing", "include \"{d}/nope.gin\"\n", "{d}/nope.gin"));
  c.push_back(config_case("include a folder", "include \"{d}\"\n", "{d}"));
  c.push_back(config_case("include itself", "include \"{d}/c.gin\"\n", "c.gin"));
  c.push_back({"config is a folder", {}, "train {d} --quiet", 1, "{d}"});
  c.push_back({"config missing", {}, "train {d}/none.gin --quiet", 1, "{d}/none.gin"});
  c.push_back({"config empty", {{"c.gin", ""}}, "info", 0, "hstu"});  // info ignores configs
  // ---- command line ----
  const std::string t = "train {d}/c.gin --quiet --run-dir {d}/run ";
  auto cli = [&](const std::string& name, const std::string& args, const std::string& message,
                 int code = 2) {
    c.push_back({name, {{"c.gin", kTiny}}, args, code, message});
  };
  cli("value to a switch", t + "--quiet=maybe", "--quiet");
  cli("negative bench steps", "bench train {d}/c.gin --steps -5", "--steps");
  cli("non-numeric bench steps", "bench train {d}/c.gin --steps abc", "--steps");
  cli("threads 2^31", t + "--threads 2147483648", "--threads");
  cli("threads above 4096", t + "--threads 5000", "--threads");
  cli("negative threads", t + "--threads -1", "--threads");
  cli("non-numeric threads", t + "--threads many", "--threads");
  cli("empty threads", t + "--threads=", "--threads");
  cli("unknown flag", t + "--stpes 3", "--stpes");
  cli("another command's flag", t + "--steps 3", "--steps");
  cli("--set without =", t + "--set NetworkArgs.num_layers", "NetworkArgs.num_layers", 1);
  cli("--set unknown key", t + "--set NetworkArgs.nope=1", "nope", 1);
  cli("--set bad value", t + "--set NetworkArgs.num_layers=x", "num_layers", 1);
  cli("--set missing value", t + "--set", "--set");
  cli("--device gpu", t + "--device gpu", "--device");
  cli("--resume missing value", t + "--resume", "--resume");
  cli("--resume nowhere", t + "--resume {d}/nowhere", "{d}/nowhere", 1);
  cli("--resume a file", t + "--resume {d}/c.gin", "{d}/c.gin", 1);
  cli("eval without run", "eval", "run_dir");
  cli("eval of nothing", "eval {d}/nothing", "{d}/nothing", 1);
  cli("unknown command", "trian", "'trian'");
  cli("bench unknown", "bench nope", "'nope'");
  cli("help unknown", "help nope", "'nope'");
  cli("preprocess unknown dataset", "preprocess --dataset nope --path {d}", "--dataset");
  cli("info positional", "info extra", "extra");
  cli("bench layer zero reps", "bench layer --reps 0", "--reps");
  cli("bench attention bad dtype", "bench attention --dtype fp8", "--dtype");
  // --quiet=0 is not quiet: a verified result (the effective config is listed).
  cli("--quiet=0 is not quiet", "train {d}/c.gin --quiet=0 --run-dir {d}/run", "effective config",
      0);
  // ---- raw data: ml-latest-small ----
  c.push_back(
      csv_case("csv truncated line", kRatingsHeader + "1,1,4.0,100\n1,2\n", "ratings.csv:3"));
  c.push_back(csv_case("csv semicolons", kRatingsHeader + "1;1;4.0;100\n", "ratings.csv:2"));
  c.push_back(csv_case("csv tabs", kRatingsHeader + "1\t1\t4.0\t100\n", "ratings.csv:2"));
  c.push_back(csv_case("csv non-numeric user", kRatingsHeader + "a,1,4.0,100\n", "ratings.csv:2"));
  c.push_back(
      csv_case("csv non-numeric rating", kRatingsHeader + "1,1,good,100\n", "ratings.csv:2"));
  c.push_back(csv_case("csv huge item id", kRatingsHeader + "1,99999999999999999999,4.0,100\n",
                       "ratings.csv:2"));
  c.push_back(
      csv_case("csv rating out of range", kRatingsHeader + "1,1,7.5,100\n", "ratings.csv:2"));
  c.push_back(csv_case("csv negative rating", kRatingsHeader + "1,1,-1.0,100\n", "ratings.csv:2"));
  c.push_back(csv_case("csv extra field", kRatingsHeader + "1,1,4.0,100,9\n", "ratings.csv:2"));
  c.push_back(csv_case("csv empty file", "", "ratings.csv"));
  c.push_back(csv_case("csv header only", kRatingsHeader, "ratings.csv"));
  c.push_back(csv_case("csv wrong header", "user,item,r,t\n1,1,4.0,100\n", "ratings.csv"));
  c.push_back(csv_case("csv binary garbage",
                       std::string("\x7f"
                                   "ELF\x02\x01\x00\x00\xff\xfe",
                                   10),
                       "ratings.csv"));
  c.push_back(csv_case("csv NUL in a field", kRatingsHeader + std::string("1,1\0,4.0,100\n", 13),
                       "ratings.csv:2"));
  c.push_back(
      csv_case("csv bad movies", kGoodRatings, "movies.csv", "movieId,title,genres\nx,A,B\n"));
  c.push_back(csv_case("csv unclosed quote", kGoodRatings, "movies.csv",
                       "movieId,title,genres\n1,\"A (1995),Comedy\n"));
  c.push_back({"csv missing movies",
               {{"raw/ratings.csv", kGoodRatings}},
               "preprocess --dataset ml-latest-small --path {d}/raw --out {d}/out",
               1,
               "movies.csv"});
  c.push_back({"csv raw folder missing",
               {},
               "preprocess --dataset ml-latest-small --path {d}/nope",
               1,
               "{d}/nope"});
  c.push_back({"csv ratings is a folder",
               {{"raw/ratings.csv/x", ""}, {"raw/movies.csv", kMovies}},
               "preprocess --dataset ml-latest-small --path {d}/raw --out {d}/out",
               1,
               "ratings.csv"});
  // ---- raw data: ml-1m ----
  c.push_back(ml1m_case("ml1m truncated", "1::1::5::100\n1::2\n", "ratings.dat:2"));
  c.push_back(ml1m_case("ml1m single colons", "1:1:5:100\n", "ratings.dat:1"));
  c.push_back(ml1m_case("ml1m non-numeric", "1::x::5::100\n", "ratings.dat:1"));
  c.push_back(ml1m_case("ml1m rating 9", "1::1::9::100\n", "ratings.dat:1"));
  c.push_back(
      ml1m_case("ml1m huge timestamp", "1::1::5::999999999999999999999\n", "ratings.dat:1"));
  c.push_back(ml1m_case("ml1m empty ratings", "", "ratings.dat"));
  c.push_back(ml1m_case("ml1m bad users", "1::1::5::100\n", "users.dat:1", "1::X\n"));
  c.push_back(ml1m_case("ml1m bad movies", "1::1::5::100\n", "movies.dat:1", "1::F::1::10::1\n",
                        "x::A::B\n"));
  // ---- raw data: ml-100k, Amazon ----
  auto k100 = [&](const std::string& name, const std::string& data, const std::string& msg) {
    c.push_back({name,
                 {{"raw/u.data", data}},
                 "preprocess --dataset ml-100k --path {d}/raw --out {d}/out",
                 1,
                 msg});
  };
  k100("ml100k commas", "1,1,5,100\n", "u.data:1");
  k100("ml100k short line", "1\t1\t5\n", "u.data:1");
  k100("ml100k non-numeric", "1\tx\t5\t100\n", "u.data:1");
  k100("ml100k empty", "", "u.data");
  auto amzn = [&](const std::string& name, const std::string& data, const std::string& msg) {
    c.push_back({name,
                 {{"books.csv", data}},
                 "preprocess --dataset amzn-books --path {d}/books.csv --out {d}/out",
                 1,
                 msg});
  };
  amzn("amazon short line", "u1,i1,5.0\n", "books.csv:1");
  amzn("amazon non-numeric rating", "u1,i1,five,100\n", "books.csv:1");
  amzn("amazon empty", "", "books.csv");
  c.push_back({"amazon path is a folder",
               {{"books/x", ""}},
               "preprocess --dataset amzn-books --path {d}/books --out {d}/out",
               1,
               "{d}/books"});
  // ---- caches ----
  auto cache_case = [&](const std::string& name, std::function<void(const std::string&)> damage,
                        const std::string& msg) {
    Case k{name,
           {{"raw/ratings.csv", kGoodRatings}, {"raw/movies.csv", kMovies}},
           "preprocess --dataset ml-latest-small --path {d}/raw --out {d}/cache/ml-latest-small",
           0,
           msg};
    k.prepare = [damage](const std::string& dir) {
      const test::ProcResult r =
          test::run_process({test::hstu_bin(), "preprocess", "--dataset", "ml-latest-small",
                             "--path", dir + "/raw", "--out", dir + "/cache/ml-latest-small"},
                            dir + "/prep.out");
      ASSERT_EQ(r.exit_code, 0) << r.out;
      damage(dir + "/cache/ml-latest-small");
    };
    c.push_back(k);
  };
  // preprocess always rebuilds; these show a rebuilt cache is complete again.
  cache_case(
      "cache rebuild after a damaged sequences.bin",
      [](const std::string& d) { fs::resize_file(d + "/sequences.bin", 10); },
      "preprocessed ml-latest-small");
  // ---- checkpoints ----
  auto ckpt = [&](const std::string& name, std::function<void(const std::string&)> damage,
                  const std::string& msg, const std::string& args = "") {
    Case k{
        name, {}, args.empty() ? "eval {d}/run --checkpoint " + std::string(kSave) : args, 1, msg};
    k.prepare = [damage](const std::string& dir) {
      train_tiny(dir);
      damage(subst(kSave, dir));
    };
    c.push_back(k);
  };
  ckpt(
      "truncated model",
      [](const std::string& s) { fs::resize_file(s + "/model.safetensors", 100); },
      "model.safetensors");
  ckpt(
      "truncated optimizer",
      [](const std::string& s) { fs::resize_file(s + "/optimizer.safetensors", 9); },
      "optimizer.safetensors", "train {d}/tiny.gin --quiet --run-dir {d}/run --resume {d}/run");
  ckpt(
      "missing model", [](const std::string& s) { fs::remove(s + "/model.safetensors"); },
      "model.safetensors");
  ckpt(
      "missing trainer_state", [](const std::string& s) { fs::remove(s + "/trainer_state.json"); },
      "trainer_state.json");
  ckpt(
      "manifest mismatch",
      [](const std::string& s) {
        std::fstream f(s + "/trainer_state.json", std::ios::in | std::ios::out);
        f.seekp(0);
        f.put(' ');
      },
      "trainer_state.json");
  ckpt(
      "damaged manifest", [](const std::string& s) { std::ofstream(s + "/manifest.json") << "{"; },
      "manifest.json");
  ckpt(
      "manifest of another format",
      [](const std::string& s) { std::ofstream(s + "/manifest.json") << "{\"format\": \"x\"}"; },
      "manifest.json");
  ckpt(
      "wrong dtype (pre-manifest layout)",
      [](const std::string& s) {
        fs::remove(s + "/manifest.json");
        std::fstream f(s + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
        std::string head(4096, '\0');
        f.read(head.data(), 4096);
        const size_t at = head.find("\"F32\"");
        f.clear();
        f.seekp(static_cast<std::streamoff>(at));
        f.write("\"F16\"", 5);
      },
      "model.safetensors", "eval {d}/run --checkpoint {d}/run/checkpoints/step-000000002");
  ckpt(
      "garbage safetensors (pre-manifest)",
      [](const std::string& s) {
        fs::remove(s + "/manifest.json");
        std::ofstream(s + "/model.safetensors") << "\xff\xff\xff\xff\xff\xff\xff\x7fgarbage";
      },
      "model.safetensors", "eval {d}/run --checkpoint {d}/run/checkpoints/step-000000002");
  ckpt(
      "latest names nothing, no saves", [](const std::string& s) { fs::remove_all(s); },
      "no checkpoint", "eval {d}/run");
  ckpt(
      "resume from a different model", [](const std::string&) {},
      "model.safetensors: tensor \"position_embedding\" is F32[32,16], expected f32[32,32]",
      "train {d}/tiny.gin --quiet --run-dir {d}/run --resume {d}/run --set "
      "NetworkArgs.hidden_size=32");
  ckpt(
      "resume with another seed and batch", [](const std::string&) {},
      "TrainerArgs.seed: checkpoint 1234, now 5",
      "train {d}/tiny.gin --quiet --run-dir {d}/run --resume {d}/run --set TrainerArgs.seed=5 "
      "--set TrainerArgs.train_batch_size=16 --set TrainerArgs.max_train_iters=4");
  ckpt(
      "resume with another batch names the global batch", [](const std::string&) {},
      "global batch (TrainerArgs.train_batch_size x world size): checkpoint 32 x 1 = 32, now 16",
      "train {d}/tiny.gin --quiet --run-dir {d}/run --resume {d}/run "
      "--set TrainerArgs.train_batch_size=16 --set TrainerArgs.max_train_iters=4");
  ckpt(
      "damaged trainer_state field (pre-manifest)",
      [](const std::string& s) {
        fs::remove(s + "/manifest.json");
        std::ifstream in(s + "/trainer_state.json");
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const size_t at = text.find("\"batch_index\": ");
        text.replace(at, std::string("\"batch_index\": ").size(),
                     "\"batch_index\": \"x\", \"was\": ");
        std::ofstream(s + "/trainer_state.json") << text;
      },
      "field \"batch_index\" must be an integer",
      "train {d}/tiny.gin --quiet --run-dir {d}/run --resume {d}/run/checkpoints/step-000000002 "
      "--set TrainerArgs.max_train_iters=4");
  ckpt(
      "eval of a checkpoint with NaN weights (pre-manifest)",
      [](const std::string& s) {
        fs::remove(s + "/manifest.json");
        const auto size = fs::file_size(s + "/model.safetensors");
        std::fstream f(s + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(size - 4));
        f.write("\xff\xff\xff\xff", 4);  // the last tensor's last f32: a NaN
      },
      "holds non-finite values", "eval {d}/run --checkpoint {d}/run/checkpoints/step-000000002");
  // ---- numerical health and memory ----
  c.push_back(config_case("absurd learning rate", "OptimizerArgs.learning_rate = 1e30\n",
                          "the training loss is"));
  c.push_back(config_case("absurd learning rate names the parameter group",
                          "OptimizerArgs.learning_rate = 1e30\n", "First parameter group"));
  c.push_back(config_case("oversized memory plan",
                          "TrainerArgs.train_batch_size = 400000\n"
                          "DatasetArgs.max_history_seqlen = 4000\n",
                          "TrainerArgs.train_batch_size = 400000"));
  // ---- file system ----
  c.push_back({"run dir is a file",
               {{"c.gin", kTiny}, {"runfile", "x"}},
               "train {d}/c.gin --quiet --run-dir {d}/runfile",
               1,
               "{d}/runfile"});
  c.push_back({"run dir under a file",
               {{"c.gin", kTiny}, {"runfile", "x"}},
               "train {d}/c.gin --quiet --run-dir {d}/runfile/sub",
               1,
               "{d}/runfile"});
  c.push_back({"cache dir is a file",
               {{"c.gin", kTiny + "DatasetArgs.dataset_name = \"ml-latest-small\"\n"
                                  "DatasetArgs.dataset_path = \"{d}/raw\"\n"
                                  "DatasetArgs.cache_dir = \"{d}/cachefile\"\n"},
                {"raw/ratings.csv", kGoodRatings},
                {"raw/movies.csv", kMovies},
                {"cachefile", "x"}},
               "train {d}/c.gin --quiet --run-dir {d}/run",
               1,
               "{d}/cachefile"});
  c.push_back({"preprocess out is a file",
               {{"raw/ratings.csv", kGoodRatings}, {"raw/movies.csv", kMovies}, {"outfile", "x"}},
               "preprocess --dataset ml-latest-small --path {d}/raw --out {d}/outfile",
               1,
               "{d}/outfile"});
  c.push_back({"checkpoint is a file", {{"c.gin", kTiny}}, "eval {d}/c.gin", 1, "{d}/c.gin"});
  return c;
}

TEST(BadInputs, EachIsAClearErrorOrACorrectResult) {
  if (test::hstu_bin().empty() || !fs::exists(test::hstu_bin())) GTEST_SKIP() << "no HSTU_BIN";
  const std::vector<Case> all = cases();
  int n = 0;
  for (const Case& k : all) {
    SCOPED_TRACE(k.name);
    test::TempDir dir;
    for (const auto& [name, content] : k.files) {
      const fs::path p = dir.file(subst(name, dir.path()));
      fs::create_directories(p.parent_path());
      std::ofstream(p, std::ios::binary) << subst(content, dir.path());
    }
    if (k.prepare) k.prepare(dir.path());
    std::vector<std::string> args = split_args(subst(k.args, dir.path()));
    args.insert(args.begin(), test::hstu_bin());
    const test::ProcResult r = test::run_process(args, dir.file("out.log"));
    const std::string want = subst(k.message, dir.path());
    EXPECT_EQ(r.signal, 0) << k.name << ": killed by signal " << r.signal << "\n" << r.out;
    EXPECT_EQ(r.exit_code, k.exit_code) << k.name << ": hstu " << k.args << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << k.name << ": expected '" << want << "' in:\n"
                                                   << r.out;
    EXPECT_LT(r.out.size(), 20000u) << k.name << ": a wall of text";
    ++n;
  }
  std::printf("[bad-inputs] %d cases\n", n);
  EXPECT_GE(n, 100);
}

}  // namespace
}  // namespace hstu
