// test_dynamic_bf16.cpp — the dynamic item table with DynamicTableArgs.value_dtype = "bfloat16"
// (embedding values bf16, optimiser state f32): the row bytes `hstu plan` counts equal what the
// table allocates, and a short retrieval run trains to finite losses close to the float32 run's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/dynamic_rig.h"
#include "config/dynamic_table.h"
#include "config/load.h"
#include "data/batcher.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "embed/table_math.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "train/dynamic_item_table.h"
#include "train/runtime.h"
#include "train/step.h"

namespace hstu {
namespace {

Config config(const std::string& dtype, const std::string& optimizer, int64_t hidden,
              double init_std = 0.02) {
  const std::string gin = R"(
DatasetArgs.dataset_name = "synthetic"
DatasetArgs.max_history_seqlen = 24
SyntheticArgs.num_users = 120
SyntheticArgs.num_items = 90
SyntheticArgs.min_seqlen = 5
SyntheticArgs.max_seqlen = 24
NetworkArgs.num_layers = 2
NetworkArgs.num_attention_heads = 2
NetworkArgs.kv_channels = 8
NetworkArgs.hidden_dropout = 0.0
TrainerArgs.train_batch_size = 8
TrainerArgs.eval_batch_size = 8
TrainerArgs.num_threads = 1
RetrievalArgs.num_negatives = 6
DynamicTableArgs.tables = ["item"]
DynamicTableArgs.capacity_ratio = 2.0
)";
  return load_config_text(gin, "<dynamic bf16>",
                          {"DynamicTableArgs.value_dtype=\"" + dtype + "\"",
                           "OptimizerArgs.sparse_optimizer_str=\"" + optimizer + "\"",
                           "NetworkArgs.hidden_size=" + std::to_string(hidden),
                           "DynamicTableArgs.init_std=" + std::to_string(init_std)},
                          nullptr);
}

// `hstu plan`'s slot bytes (memory_plan: the row, plus 24 B of key, score and last-use step) hold
// exactly the row the table allocates per slot, for dims with and without bf16 padding.
TEST(DynamicBf16, PlanRowBytesEqualTheTableAllocation) {
  for (const char* opt : {"adam", "sgd", "row_wise_adagrad"})
    for (const int64_t dim : {12, 16, 20})
      for (const char* dtype : {"bfloat16", "float32"}) {
        const Config cfg = config(dtype, opt, dim);
        const SequenceDataset ds = open_dataset(cfg);
        const ModelMemory mem = retrieval_memory(cfg, ds.num_items, Device::kCPU, DType::kF32);
        const PlannedTable* item = nullptr;
        for (const PlannedTable& t : mem.tables)
          if (t.name == "item") item = &t;
        ASSERT_NE(item, nullptr);
        ASSERT_GE(item->dynamic_bytes, 0);
        auto table = make_dynamic_item_table(cfg, ds, Device::kCPU, 64);
        const embed::DynamicTable& t = table->table();
        EXPECT_EQ(t.bf16(), std::string(dtype) == "bfloat16");
        EXPECT_EQ(item->dynamic.row_bytes - 24, t.row_words() * 4)
            << opt << " dim " << dim << " " << dtype;
        const DynamicTableConfig c = dynamic_table_config(cfg, "item", ds.num_items - 1);
        EXPECT_EQ(dynamic_row_bytes(c.dim, c.optimizer, c.value_dtype), t.row_words() * 4);
        EXPECT_EQ(embed::dynamic_table_row_bytes(t.spec()), t.row_words() * 4);
      }
}

std::vector<double> losses_of(const Config& cfg, int steps) {
  test::DynamicRig rig(cfg, static_cast<uint64_t>(cfg.trainer.seed));
  const std::vector<double> out = rig.train(steps, 5e-3);
  EXPECT_EQ(rig.items->counters().evictions, 0);
  return out;
}

double mean(const std::vector<double>& v, size_t from) {
  double s = 0;
  for (size_t i = from; i < v.size(); ++i) s += v[i];
  return s / static_cast<double>(v.size() - from);
}

// The same run (seed, batches, negatives; no dropout) with bf16 and f32 item rows.
// Step 0 (before any update): bf16 rounding moves each item value by at most 2^-9 of itself
// (round to nearest, 8 significand bits); the loss is smooth in those values, so it moves to
// first order by 2^-9 times its sensitivity to a relative change of all of them, which we bound
// by 2 x the loss: |dL0| <= 2 x 2^-9 x L0.
// Later steps: training at this scale is chaotic — f32 runs whose initial item values are all
// scaled by (1 + j 2^-9) (DynamicTableArgs.init_std), perturbations of bf16's size, end at late
// mean losses several percent apart — so the bf16 run is compared with that ensemble: its mean
// loss over steps [10, 40) must lie in the ensemble's 3-sigma prediction interval,
// |m_bf16 - mean(m_j)| <= 3 sd(m_j) sqrt(1 + 1 / J), J = 8 runs (j = 0..7, j = 0 the f32 run).
// The bf16 run trains (its late mean is below its first loss) and is not the f32 run.
TEST(DynamicBf16, ShortRunTrainsCloseToFloat32) {
  for (const char* opt : {"adam", "row_wise_adagrad"}) {
    constexpr int kSteps = 40, kRuns = 8;
    constexpr size_t kFrom = 10;  // the window [kFrom, kSteps)
    const std::vector<double> f = losses_of(config("float32", opt, 16), kSteps);
    const std::vector<double> b = losses_of(config("bfloat16", opt, 16), kSteps);
    ASSERT_EQ(f.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(b.size(), f.size());
    bool differ = false;
    for (size_t s = 0; s < f.size(); ++s) {
      ASSERT_TRUE(std::isfinite(b[s])) << opt << " step " << s;
      differ |= b[s] != f[s];
    }
    EXPECT_TRUE(differ) << opt << ": bf16 losses equal f32 exactly";
    EXPECT_LE(std::abs(b[0] - f[0]), std::ldexp(1.0, -9) * 2.0 * f[0])
        << opt << " step 0: f32 " << f[0] << " bf16 " << b[0];
    std::vector<double> m = {mean(f, kFrom)};
    for (int j = 1; j < kRuns; ++j)
      m.push_back(
          mean(losses_of(config("float32", opt, 16, 0.02 * (1 + j * std::ldexp(1.0, -9))), kSteps),
               kFrom));
    const double mu = mean(m, 0);
    double var = 0;
    for (const double x : m) var += (x - mu) * (x - mu);
    const double sd = std::sqrt(var / (kRuns - 1));
    const double bound = 3.0 * sd * std::sqrt(1.0 + 1.0 / kRuns);
    const double mb = mean(b, kFrom);
    EXPECT_LE(std::abs(mb - mu), bound) << opt << ": mean loss of steps " << kFrom << "..: bf16 "
                                        << mb << ", f32 ensemble " << mu << " +- " << sd;
    EXPECT_LT(mb, b[0]) << opt << ": the bf16 run did not train";
    std::printf(
        "%s: step 0 f32 %.6f bf16 %.6f; mean loss of steps %zu-%d: bf16 %.4f, f32 %.4f, f32 "
        "ensemble %.4f +- %.4f (bound %.4f)\n",
        opt, f[0], b[0], kFrom, kSteps - 1, mb, m[0], mu, sd, bound);
  }
}

}  // namespace
}  // namespace hstu
