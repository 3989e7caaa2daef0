// test_item_window.cpp — the dynamic table's per-step window: a dense EmbeddingTable trained with
// embedding_fwd / embedding_bwd / sparse_optimizer_step and a DynamicItemWindow over a dynamic
// table started from the same rows give the same outputs and rows bit for bit (nothing evicted);
// window index 0 is padding id 0; eval fetches insert nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <span>

#include "common/embed_test_util.h"
#include "embed/item_window.h"
#include "model/params.h"
#include "ops/embedding.h"

namespace hstu {
namespace {

void train_equal(const std::string& optimizer) {
  constexpr int64_t kRows = 60, kDim = 16;
  Ctx ctx = cpu_ctx();
  EmbeddingTable dense;
  dense.allocate("item_embedding", kRows, kDim, Device::kCPU, optimizer);
  init_tensor(dense.weight, Init::trunc_normal(0.02), 42, "item_embedding");
  embed::DynamicTableSpec s;
  s.name = "item_embedding";
  s.dim = kDim;
  s.capacity_rows = s.max_capacity_rows = 1024;
  s.optimizer = optimizer;
  embed::DynamicTable table(s, Device::kCPU);
  std::vector<int64_t> ids(kRows);
  std::vector<float> w(dense.weight.as<float>(), dense.weight.as<float>() + kRows * kDim);
  for (int64_t r = 0; r < kRows; ++r) ids[r] = r;
  table.import_rows(ctx, ids, w, kDim);
  embed::DynamicItemWindow win(table, 128);
  std::mt19937 rng(3);
  for (int64_t step = 1; step <= 5; ++step) {
    // Two spans (inputs with padding zeros, targets), repeats included.
    std::vector<int64_t> in(40), tg(25);
    for (auto& x : in) x = rng() % 4 == 0 ? 0 : static_cast<int64_t>(rng() % kRows);
    for (auto& x : tg) x = static_cast<int64_t>(1 + rng() % (kRows - 1));
    std::vector<int32_t> win_in(in.size()), win_tg(tg.size());
    const std::span<const int64_t> raw[] = {in, tg};
    const std::span<int32_t> outs[] = {win_in, win_tg};
    const int64_t u = win.fetch(ctx, step, raw, outs);
    ASSERT_EQ(win.unique_keys()[0], 0);
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(win.unique_keys()[win_in[i]], in[i]);
      if (in[i] == 0) {
        ASSERT_EQ(win_in[i], 0);
      }
    }
    // The same tokens through both tables.
    std::vector<int32_t> dense_ids(in.begin(), in.end()), widx = win_in;
    dense_ids.insert(dense_ids.end(), tg.begin(), tg.end());
    widx.insert(widx.end(), win_tg.begin(), win_tg.end());
    const int64_t t = static_cast<int64_t>(dense_ids.size());
    std::vector<float> o1(t * kDim), o2(t * kDim), dout(t * kDim);
    for (auto& x : dout) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    Tensor id1(dense_ids.data(), DType::kI32, Device::kCPU, {t});
    Tensor id2(widx.data(), DType::kI32, Device::kCPU, {t});
    Tensor tout1(o1.data(), DType::kF32, Device::kCPU, {t, kDim});
    Tensor tout2(o2.data(), DType::kF32, Device::kCPU, {t, kDim});
    Tensor tdout(dout.data(), DType::kF32, Device::kCPU, {t, kDim});
    embedding_fwd(ctx, dense.weight, id1, 1.0f, Tensor(), Tensor(), tout1);
    embedding_fwd(ctx, win.window().weight.rows(0, u), id2, 1.0f, Tensor(), Tensor(), tout2);
    ASSERT_EQ(o1, o2) << "step " << step;
    embedding_bwd(ctx, tdout, id1, 1.0f, dense.grad, dense.touched, Tensor(), Tensor());
    embedding_bwd(ctx, tdout, id2, 1.0f, win.window().grad.rows(0, u),
                  win.window().touched.rows(0, u), Tensor(), Tensor());
    const SparseOptimizerSpec spec = table.optimizer_spec(step, 0.05f);
    collect_touched_rows(ctx, dense.touched, dense.row_list, dense.row_count);
    sparse_optimizer_step(ctx, spec, dense.weight, dense.grad, dense.row_list, dense.row_count,
                          dense.m, dense.v);
    win.apply(ctx, spec);
  }
  const embed::TableRows rows = table.export_rows(ctx);
  ASSERT_EQ(static_cast<int64_t>(rows.keys.size()), kRows);
  for (size_t i = 0; i < rows.keys.size(); ++i)
    ASSERT_EQ(std::memcmp(&rows.values[i * table.row_width()],
                          dense.weight.as<float>() + rows.keys[i] * kDim, kDim * 4),
              0)
        << optimizer << " key " << rows.keys[i];
}

TEST(DynamicItemWindow, TrainsBitwiseLikeTheDenseTableSgd) {
  train_equal("sgd");
}
TEST(DynamicItemWindow, TrainsBitwiseLikeTheDenseTableAdam) {
  train_equal("adam");
}
TEST(DynamicItemWindow, TrainsBitwiseLikeTheDenseTableRowWiseAdagrad) {
  train_equal("row_wise_adagrad");
}

TEST(DynamicItemWindow, ReadOnlyFetchInsertsNothing) {
  Ctx ctx = cpu_ctx();
  embed::DynamicTableSpec s;
  s.name = "items";
  s.dim = 4;
  s.capacity_rows = s.max_capacity_rows = 256;
  s.optimizer = "sgd";
  embed::DynamicTable table(s, Device::kCPU);
  table.import_rows(ctx, {5}, {1, 2, 3, 4}, 4);
  embed::DynamicItemWindow win(table, 16);
  std::vector<int64_t> ids = {5, -9, 5, 123456789012345};
  std::vector<int32_t> out(ids.size());
  const std::span<const int64_t> raw[] = {ids};
  const std::span<int32_t> outs[] = {out};
  EXPECT_EQ(win.fetch_read_only(ctx, raw, outs), 4);  // 0, -9, 5, big
  EXPECT_EQ(table.size(), 1);
  const float* w = win.window().weight.as<float>();
  EXPECT_EQ(out, (std::vector<int32_t>{2, 1, 2, 3}));
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(w[2 * 4 + c], static_cast<float>(c + 1));
    EXPECT_EQ(w[1 * 4 + c], 0.0f);  // missing: zeros in eval
  }
  std::vector<int64_t> too_many(20);
  for (int i = 0; i < 20; ++i) too_many[i] = i + 1;
  std::vector<int32_t> o2(20);
  const std::span<const int64_t> raw2[] = {too_many};
  const std::span<int32_t> outs2[] = {o2};
  EXPECT_THROW(win.fetch(ctx, 1, raw2, outs2), Error);
}

}  // namespace
}  // namespace hstu
