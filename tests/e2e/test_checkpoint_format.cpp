// test_checkpoint_format.cpp — the checkpoint file format (train/checkpoint.h, docs/CHECKPOINTS.md)
// on a tiny synthetic retrieval run:
//   - format version 2: every linear weight (and its Adam moments) is stored as nn.Linear's
//     [out, in], the transpose of hstu's [in, out]; everything else as it is; both files carry
//     format, format_version, layout, task, step and config metadata;
//   - a version-1 checkpoint (written here the way hstu wrote them: [in, out] weights, flat dense
//     moments, no format_version) loads into the same bits, and `hstu eval` gives the same
//     metrics on it as on the version-2 one;
//   - newer or malformed versions are refused, naming the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/io_test_util.h"
#include "common/test_util.h"
#include "config/load.h"
#include "config/schema.h"
#include "data/preprocess.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace hstu {
namespace {

// Two layers with hd = 2 x 12 != D = 16, so every linear weight is non-square.
Config tiny_config(const std::string& run_dir) {
  const std::string gin = R"(
DatasetArgs.dataset_name = "synthetic"
DatasetArgs.max_history_seqlen = 20
SyntheticArgs.num_users = 64
SyntheticArgs.num_items = 50
SyntheticArgs.num_clusters = 4
SyntheticArgs.clusters_per_user = 1
SyntheticArgs.min_seqlen = 5
SyntheticArgs.max_seqlen = 20
NetworkArgs.num_layers = 2
NetworkArgs.hidden_size = 16
NetworkArgs.num_attention_heads = 2
NetworkArgs.kv_channels = 12
NetworkArgs.num_position_buckets = 32
NetworkArgs.output_bias = True
NetworkArgs.relative_attention_bias = True
TrainerArgs.train_batch_size = 32
TrainerArgs.eval_batch_size = 64
TrainerArgs.max_train_iters = 3
TrainerArgs.device = "cpu"
TrainerArgs.num_threads = 1
RetrievalArgs.num_negatives = 8
)";
  return load_config_text(gin, "<checkpoint format>", {"TrainerArgs.run_dir=" + run_dir}, nullptr);
}

// A planned CPU model of `cfg` (initialised with seed 0, as `hstu eval` plans it).
std::unique_ptr<HstuModel> planned_model(const Config& cfg) {
  ModelShape shape;
  shape.num_items = open_dataset(cfg).num_items;
  shape.max_batch = cfg.trainer.eval_batch_size;
  shape.max_tokens = shape.max_batch * cfg.dataset.max_history_seqlen;
  shape.num_negatives = 1;
  auto m = std::make_unique<HstuModel>(cfg, shape, Device::kCPU, DType::kF32);
  m->plan(0);
  return m;
}

std::string bytes_of(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data), t.nbytes());
}

// Expects tensor `name` of f to hold t: as it is, or transposed when `linear`.
void expect_stored(const SafetensorsFile& f, const std::string& name, const Tensor& t,
                   bool linear) {
  ASSERT_TRUE(f.contains(name)) << name;
  const SafetensorsFile::Entry& e = f.get(name);
  const std::vector<int64_t> want = linear ? std::vector<int64_t>{t.dim(1), t.dim(0)}
                                           : std::vector<int64_t>(t.shape, t.shape + t.ndim);
  ASSERT_EQ(e.shape, want) << name;
  if (!linear) {
    EXPECT_TRUE(std::memcmp(e.bytes.data(), t.data, t.nbytes()) == 0) << name;
    return;
  }
  const float* w = t.as<float>();
  const int64_t in = t.dim(0), out = t.dim(1);
  int64_t differ = 0;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      float stored;
      std::memcpy(&stored, e.bytes.data() + (o * in + i) * sizeof(float), sizeof(float));
      differ += std::memcmp(&stored, &w[i * out + o], sizeof(float)) != 0;
    }
  EXPECT_EQ(differ, 0) << name << " is not the transpose of the parameter";
}

// Writes `m`'s state into `dir` the way hstu wrote checkpoints before format version 2.
void write_version1(HstuModel& m, const std::string& from, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const DenseParams& d = m.dense();
  std::vector<std::pair<std::string, Tensor>> model, optimizer;
  for (size_t i = 0; i < d.table().size(); ++i)
    model.emplace_back(d.table()[i].name, d.param(static_cast<int>(i)));
  model.emplace_back("item_embedding", m.items().weight);
  optimizer = {{"dense.adam_m", d.flat_m()},
               {"dense.adam_v", d.flat_v()},
               {"item_embedding.state_m", m.items().m},
               {"item_embedding.state_v", m.items().v}};
  save_safetensors(checkpoint_model_path(dir), model, {{"format", "hstu"}});
  save_safetensors(checkpoint_optimizer_path(dir), optimizer, {{"format", "hstu"}});
  std::filesystem::copy_file(checkpoint_state_path(from), checkpoint_state_path(dir));
}

// Copies checkpoint `from` into `dir`, with `file`'s format_version metadata replaced.
void copy_with_version(const std::string& from, const std::string& dir, const std::string& file,
                       const std::string& version) {
  std::filesystem::copy(from, dir);
  std::filesystem::remove(dir + "/manifest.json");  // the pre-manifest layout: no checksums
  const SafetensorsFile f(from + "/" + file);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : f.names()) {
    const SafetensorsFile::Entry& e = f.get(n);
    Tensor t(const_cast<uint8_t*>(e.bytes.data()), e.dtype, Device::kCPU, {e.numel()});
    t.ndim = static_cast<int>(e.shape.size());
    std::copy(e.shape.begin(), e.shape.end(), t.shape);
    t.row_stride = t.row_elems();
    tensors.emplace_back(n, t);
  }
  std::map<std::string, std::string> md = f.metadata();
  md["format_version"] = version;
  save_safetensors(dir + "/" + file, tensors, md);
}

class CheckpointFormat : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = tiny_config(dir_.file("run"));
    TrainOptions opts;
    opts.quiet = true;
    opts.config_text = to_gin(cfg_);  // config.gin, for `hstu eval`
    train(cfg_, opts);
    model_ = planned_model(cfg_);
    load_checkpoint(*model_, ckpt(), true);
  }
  std::string ckpt() const { return find_checkpoint(cfg_.trainer.run_dir); }

  test::TempDir dir_;
  Config cfg_;
  std::unique_ptr<HstuModel> model_;
};

TEST_F(CheckpointFormat, StoresLinearWeightsAsNnLinearWithMetadata) {
  const DenseParams& d = model_->dense();
  const SafetensorsFile f(checkpoint_model_path(ckpt()));
  const SafetensorsFile opt(checkpoint_optimizer_path(ckpt()));
  std::vector<std::string> linear;
  for (size_t i = 0; i < d.table().size(); ++i) {
    const ParamInfo& p = d.table()[i];
    if (p.linear) linear.push_back(p.name);
    expect_stored(f, p.name, d.param(static_cast<int>(i)), p.linear);
    expect_stored(opt, p.name + ".state_m", d.state_m(static_cast<int>(i)), p.linear);
    expect_stored(opt, p.name + ".state_v", d.state_v(static_cast<int>(i)), p.linear);
  }
  EXPECT_EQ(linear, (std::vector<std::string>{"layers.0.uvqk.weight", "layers.0.output.weight",
                                              "layers.1.uvqk.weight", "layers.1.output.weight"}));
  EXPECT_EQ(f.get("layers.0.uvqk.weight").shape, (std::vector<int64_t>{96, 16}));
  EXPECT_EQ(f.get("layers.0.output.weight").shape, (std::vector<int64_t>{16, 24}));
  expect_stored(f, "item_embedding", model_->items().weight, false);
  for (const SafetensorsFile* file : {&f, &opt}) {
    const auto& md = file->metadata();
    EXPECT_EQ(md.at("format"), "hstu");
    EXPECT_EQ(md.at("format_version"), std::to_string(kCheckpointFormatVersion));
    EXPECT_EQ(md.at("layout"), "pytorch");
    EXPECT_EQ(md.at("task"), "retrieval");
    EXPECT_EQ(md.at("step"), "3");
    EXPECT_EQ(md.at("config"), to_gin(cfg_));
  }
}

TEST_F(CheckpointFormat, LoadsVersion1IntoTheSameBitsAndEvaluatesAlike) {
  const std::string v1 = dir_.file("v1");
  write_version1(*model_, ckpt(), v1);
  const auto m1 = planned_model(cfg_);
  load_checkpoint(*m1, v1, true);
  const DenseParams &a = model_->dense(), &b = m1->dense();
  EXPECT_EQ(bytes_of(a.flat_params()), bytes_of(b.flat_params()));
  EXPECT_EQ(bytes_of(a.flat_m()), bytes_of(b.flat_m()));
  EXPECT_EQ(bytes_of(a.flat_v()), bytes_of(b.flat_v()));
  for (const auto& t : {&EmbeddingTable::weight, &EmbeddingTable::m, &EmbeddingTable::v})
    EXPECT_EQ(bytes_of(model_->items().*t), bytes_of(m1->items().*t));

  const char* bin = std::getenv("HSTU_BIN");
  if (!bin || !std::filesystem::exists(bin)) GTEST_SKIP() << "HSTU_BIN not built";
  std::map<std::string, Json> metrics;
  for (const auto& [name, dir] : {std::pair{"v2", ckpt()}, std::pair{"v1", v1}}) {
    const std::string out = dir_.file(std::string(name) + ".json");
    const test::CommandResult r =
        test::run_command(std::string(bin) + " eval " + cfg_.trainer.run_dir + " --checkpoint " +
                          dir + " --json " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    metrics[name] = json::parse_file(out);
  }
  EXPECT_EQ(metrics["v1"], metrics["v2"]);
  EXPECT_TRUE(metrics["v2"].contains("test")) << json::dump(metrics["v2"]);
}

TEST_F(CheckpointFormat, RefusesNewerAndMalformedVersionsNamingTheFile) {
  const auto m = planned_model(cfg_);
  const std::string newer = dir_.file("newer");
  copy_with_version(ckpt(), newer, "model.safetensors", "3");
  EXPECT_NE(test::error_of([&] {
              load_checkpoint(*m, newer, false);
            }).find(checkpoint_model_path(newer) + ": checkpoint format_version 3 is newer"),
            std::string::npos);
  const std::string newer_opt = dir_.file("newer_opt");
  copy_with_version(ckpt(), newer_opt, "optimizer.safetensors", "3");
  load_checkpoint(*m, newer_opt, false);  // the weights alone load
  EXPECT_NE(test::error_of([&] {
              load_checkpoint(*m, newer_opt, true);
            }).find(checkpoint_optimizer_path(newer_opt) + ": checkpoint format_version 3"),
            std::string::npos);
  const std::string bad = dir_.file("bad");
  copy_with_version(ckpt(), bad, "model.safetensors", "2x");
  EXPECT_NE(test::error_of([&] {
              load_checkpoint(*m, bad, false);
            }).find(checkpoint_model_path(bad) + ": format_version '2x' is not a positive integer"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu
