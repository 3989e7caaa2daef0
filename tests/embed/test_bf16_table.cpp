// test_bf16_table.cpp — dynamic tables with bf16 embedding values (value_dtype "bf16", optimiser
// state f32): the shared rounding helper, initial rows, gathers, the fused optimisers (each
// step's bf16 row equals round_bf16 of the f32 table's update of the same bf16-rounded row, with
// bitwise equal state), the host tier, checkpoints (bit-exact round trips through bf16 and f32
// tables, BF16 values on disk) and the row bytes allocated.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>

#include "common/embed_test_util.h"
#include "common/test_util.h"
#include "core/error.h"
#include "embed/table_checkpoint.h"
#include "embed/table_math.h"
#include "io/safetensors.h"

namespace hstu {
namespace {

using embed::DynamicTable;
using embed::DynamicTableSpec;
using embed::round_bf16;
using test::vec_tensor;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16Round, NearestEvenAndSpecialValues) {
  EXPECT_EQ(embed::bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(embed::bf16_bits(from_bits(0x3f808000u)), 0x3f80);  // tie, even below
  EXPECT_EQ(embed::bf16_bits(from_bits(0x3f818000u)), 0x3f82);  // tie, even above
  EXPECT_EQ(embed::bf16_bits(from_bits(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(embed::bf16_bits(from_bits(0x3f807fffu)), 0x3f80);  // below the tie
  EXPECT_EQ(embed::bf16_bits(-2.5f), 0xc020);
  EXPECT_EQ(embed::bf16_bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(embed::bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_bf16(from_bits(0x7f800001u))));  // a NaN that would round to inf
  // Every bf16 value is a fixed point, and widening is exact.
  for (uint32_t b = 0; b < 0x10000u; b += 7) {
    const float f = embed::bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(embed::bf16_bits(f), b);
  }
  EXPECT_EQ(embed::embedding_words(12, true), 8);
  EXPECT_EQ(embed::embedding_words(16, true), 8);
  EXPECT_EQ(embed::embedding_words(17, true), 12);
  EXPECT_EQ(embed::embedding_words(12, false), 12);
}

DynamicTableSpec spec_of(const std::string& optimizer, int64_t dim, const std::string& dtype) {
  DynamicTableSpec s;
  s.name = "bf16_items";
  s.dim = dim;
  s.capacity_rows = s.max_capacity_rows = 512;
  s.optimizer = optimizer;
  s.lr = 0.05f;
  s.value_dtype = dtype;
  return s;
}

TEST(Bf16Table, RowBytesAndLayout) {
  for (const char* opt : {"sgd", "adam", "row_wise_adagrad"})
    for (const int64_t dim : {1, 8, 12, 128}) {
      const DynamicTableSpec s = spec_of(opt, dim, "bf16");
      DynamicTable t(s, Device::kCPU);
      const int64_t state = embed::optimizer_state_width(opt, dim, s.name);
      EXPECT_TRUE(t.bf16());
      EXPECT_EQ(t.row_width(), dim + state);
      EXPECT_EQ(t.row_words(), (dim + 7) / 8 * 4 + state) << opt << " " << dim;
      EXPECT_EQ(embed::dynamic_table_row_bytes(s), t.row_words() * 4);
      EXPECT_EQ((t.row_words() - state) * 4 % 16, 0);  // the f32 state starts 16-byte aligned
      DynamicTable f(spec_of(opt, dim, "f32"), Device::kCPU);
      EXPECT_EQ(f.row_words(), dim + state);
    }
  DynamicTableSpec bad = spec_of("sgd", 8, "f16");
  try {
    DynamicTable t(bad, Device::kCPU);
    FAIL() << "value_dtype f16 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("value_dtype"), std::string::npos) << e.what();
  }
}

TEST(Bf16Table, InitialRowsAndGatherAreTheRoundedInitialValues) {
  constexpr int64_t kDim = 12;
  Ctx ctx = cpu_ctx();
  DynamicTable t(spec_of("adam", kDim, "bf16"), Device::kCPU);
  std::vector<int64_t> keys = {-9, 3, 77, 1000000007};
  std::vector<int32_t> counts(keys.size(), 1);
  std::vector<int64_t> refs(keys.size());
  t.begin_step(1);
  t.find_or_insert(ctx, vec_tensor(keys), vec_tensor(counts), vec_tensor(refs));
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<float> out(n * kDim), missing(n * kDim);
  t.gather(ctx, vec_tensor(keys), vec_tensor(refs),
           Tensor(out.data(), DType::kF32, Device::kCPU, {n, kDim}), true);
  std::vector<int64_t> none(keys.size(), -1);  // not in the table: the initial value
  t.gather(ctx, vec_tensor(keys), vec_tensor(none),
           Tensor(missing.data(), DType::kF32, Device::kCPU, {n, kDim}), true);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < kDim; ++c) {
      const float want = round_bf16(
          embed::key_init_value(t.table_seed(), keys[i], c, static_cast<float>(t.spec().init_std)));
      ASSERT_EQ(bits(out[i * kDim + c]), bits(want)) << i << " " << c;
      ASSERT_EQ(bits(missing[i * kDim + c]), bits(want));
      ASSERT_NE(want, 0.0f);
    }
  const embed::TableRows r = t.export_rows(ctx);
  for (size_t i = 0; i < r.keys.size(); ++i)
    for (int64_t c = kDim; c < t.row_width(); ++c) ASSERT_EQ(r.values[i * t.row_width() + c], 0.0f);
}

float grad_of(int64_t step, int64_t key, int64_t c) {
  return 0.37f * std::sin(static_cast<float>(step * 131 + key * 17 + c * 3));
}

// The bf16 table against an f32 table that starts each step from the bf16 table's rows (the
// bf16-rounded values, exactly widened, and the same f32 state): after the same update the bf16
// values are round_bf16 of the f32 table's, the state bitwise equal.
void check_against_f32(const std::string& optimizer, int64_t dim) {
  Ctx ctx = cpu_ctx();
  DynamicTable b(spec_of(optimizer, dim, "bf16"), Device::kCPU);
  DynamicTable f(spec_of(optimizer, dim, "f32"), Device::kCPU);
  std::mt19937_64 rng(5);
  for (int64_t step = 1; step <= 5; ++step) {
    std::vector<int64_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back(static_cast<int64_t>(rng() % 60) - 20);
    // Make f hold exactly b's rows (the first step inserts them in b first).
    const auto g = [step](int64_t k, int64_t c) { return grad_of(step, k, c); };
    if (step > 1) {
      const embed::TableRows rb = b.export_rows(ctx);
      f.import_rows(ctx, rb.keys, rb.values, b.row_width());
    }
    // Keys new this step: b initialises them rounded; give f the same rounded rows first.
    {
      std::vector<int64_t> fresh;
      const embed::TableRows rb = b.export_rows(ctx);
      std::map<int64_t, int> have;
      for (const int64_t k : rb.keys) have[k] = 1;
      for (const int64_t k : ids)
        if (!have.count(k)) {
          have[k] = 1;
          fresh.push_back(k);
        }
      std::vector<float> init(fresh.size() * dim);
      for (size_t i = 0; i < fresh.size(); ++i)
        for (int64_t c = 0; c < dim; ++c)
          init[i * dim + c] = round_bf16(embed::key_init_value(
              b.table_seed(), fresh[i], c, static_cast<float>(b.spec().init_std)));
      f.import_rows(ctx, fresh, init, dim);
    }
    const SparseOptimizerSpec spec = b.optimizer_spec(step, 0.05f);
    test::embed_cpu_step(b, ctx, ids, step, spec, g);
    test::embed_cpu_step(f, ctx, ids, step, spec, g);
    const embed::TableRows rb = b.export_rows(ctx), rf = f.export_rows(ctx);
    std::map<int64_t, size_t> at;
    for (size_t i = 0; i < rf.keys.size(); ++i) at[rf.keys[i]] = i;
    ASSERT_EQ(rb.keys.size(), rf.keys.size());
    const int64_t w = b.row_width();
    int changed = 0;
    for (size_t i = 0; i < rb.keys.size(); ++i) {
      ASSERT_TRUE(at.count(rb.keys[i]));
      const float* vb = &rb.values[i * w];
      const float* vf = &rf.values[at[rb.keys[i]] * w];
      for (int64_t c = 0; c < dim; ++c) {
        ASSERT_EQ(bits(vb[c]), bits(round_bf16(vf[c])))
            << optimizer << " step " << step << " key " << rb.keys[i] << " col " << c;
        changed += vb[c] != vf[c];  // f32 kept bits bf16 dropped
      }
      for (int64_t c = dim; c < w; ++c)
        ASSERT_EQ(bits(vb[c]), bits(vf[c])) << optimizer << " state col " << c;
    }
    EXPECT_GT(changed, 0) << "the rounding was never exercised";
  }
}

TEST(Bf16Table, SgdIsTheRoundedF32Update) {
  check_against_f32("sgd", 12);
}
TEST(Bf16Table, AdamIsTheRoundedF32Update) {
  check_against_f32("adam", 12);
  check_against_f32("adam", 16);
}
TEST(Bf16Table, RowWiseAdagradIsTheRoundedF32Update) {
  check_against_f32("row_wise_adagrad", 12);
}

// backward (reduce_grad + fused update in one call) equals reduce_grad then apply on bf16 rows.
TEST(Bf16Table, BackwardEqualsReduceGradThenApply) {
  constexpr int64_t kDim = 12;
  Ctx ctx = cpu_ctx();
  DynamicTable a(spec_of("adam", kDim, "bf16"), Device::kCPU);
  DynamicTable b(spec_of("adam", kDim, "bf16"), Device::kCPU);
  std::vector<int64_t> keys = {4, 9, 4, -3, 9, 9, 12};
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<float> dout(n * kDim);
  for (int64_t i = 0; i < n * kDim; ++i) dout[i] = 0.1f * std::cos(static_cast<float>(i));
  for (DynamicTable* t : {&a, &b}) {
    std::vector<int64_t> uniq(n), refs(n);
    std::vector<int32_t> inv(n), counts(n);
    const int64_t u =
        t->dedupe(ctx, vec_tensor(keys), vec_tensor(uniq), vec_tensor(inv), vec_tensor(counts));
    t->begin_step(1);
    t->find_or_insert(ctx, vec_tensor(uniq).rows(0, u), vec_tensor(counts).rows(0, u),
                      vec_tensor(refs).rows(0, u));
    std::vector<float> grad(u * kDim, 0.0f);
    std::vector<uint8_t> touched(u, 0);
    Tensor tg(grad.data(), DType::kF32, Device::kCPU, {u, kDim});
    Tensor td(dout.data(), DType::kF32, Device::kCPU, {n, kDim});
    const SparseOptimizerSpec spec = t->optimizer_spec(1, 0.05f);
    if (t == &a) {
      t->backward(ctx, spec, vec_tensor(refs).rows(0, u), td, 1.0f, tg, vec_tensor(touched));
    } else {
      t->reduce_grad(ctx, td, 1.0f, tg, vec_tensor(touched));
      t->apply(ctx, spec, vec_tensor(refs).rows(0, u), tg, vec_tensor(touched));
    }
  }
  const embed::TableRows ra = a.export_rows(ctx), rb = b.export_rows(ctx);
  EXPECT_EQ(ra.keys, rb.keys);
  ASSERT_EQ(ra.values.size(), rb.values.size());
  EXPECT_EQ(std::memcmp(ra.values.data(), rb.values.data(), ra.values.size() * 4), 0);
}

// The host tier holds the same bf16 rows as the table without one.
TEST(Bf16Table, HostTierEqualsFlatTable) {
  constexpr int64_t kDim = 12;
  Ctx ctx = cpu_ctx();
  DynamicTableSpec s = spec_of("adam", kDim, "bf16");
  DynamicTable flat(s, Device::kCPU);
  s.gpu_cache_rows = 32;
  DynamicTable tier(s, Device::kCPU);
  std::mt19937_64 rng(9);
  for (int64_t step = 1; step <= 6; ++step) {
    std::vector<int64_t> ids;
    for (int i = 0; i < 30; ++i) ids.push_back(static_cast<int64_t>(rng() % 200));
    const auto g = [step](int64_t k, int64_t c) { return grad_of(step, k, c); };
    const SparseOptimizerSpec spec = flat.optimizer_spec(step, 0.05f);
    const test::EmbedStep x = test::embed_cpu_step(flat, ctx, ids, step, spec, g);
    const test::EmbedStep y = test::embed_cpu_step(tier, ctx, ids, step, spec, g);
    ASSERT_EQ(x.rows, y.rows) << "step " << step;
  }
  const embed::TableRows ra = flat.export_rows(ctx), rb = tier.export_rows(ctx);
  EXPECT_EQ(test::rows_by_key(ra, flat.row_width()), test::rows_by_key(rb, flat.row_width()));
}

std::map<int64_t, std::pair<std::vector<uint32_t>, uint64_t>> rows_by_key(DynamicTable& t,
                                                                          Ctx& ctx) {
  const embed::TableRows r = t.export_rows(ctx);
  std::map<int64_t, std::pair<std::vector<uint32_t>, uint64_t>> m;
  const int64_t w = t.row_width();
  for (size_t i = 0; i < r.keys.size(); ++i) {
    std::vector<uint32_t> b(static_cast<size_t>(w));
    std::memcpy(b.data(), &r.values[i * w], static_cast<size_t>(w) * 4);
    m[r.keys[i]] = {b, r.scores[i]};
  }
  return m;
}

void train_a_little(DynamicTable& t, Ctx& ctx) {
  std::mt19937_64 rng(3);
  for (int64_t step = 1; step <= 4; ++step) {
    std::vector<int64_t> ids;
    for (int i = 0; i < 50; ++i) ids.push_back(static_cast<int64_t>(rng() % 300) - 100);
    const auto g = [step](int64_t k, int64_t c) { return grad_of(step, k, c); };
    test::embed_cpu_step(t, ctx, ids, step, t.optimizer_spec(step, 0.05f), g);
  }
}

TEST(Bf16Table, CheckpointRoundTripIsBitExact) {
  for (const char* opt : {"adam", "sgd", "row_wise_adagrad"}) {
    test::TempDir dir;
    Ctx ctx = cpu_ctx();
    DynamicTable t(spec_of(opt, 12, "bf16"), Device::kCPU);
    train_a_little(t, ctx);
    const std::string path = embed::save_dynamic_table(ctx, t, dir.path());
    {
      SafetensorsFile f(path);
      EXPECT_EQ(f.get("values").dtype, DType::kBF16);
      EXPECT_EQ(f.get("values").shape, (std::vector<int64_t>{t.size(), 12}));
      EXPECT_EQ(f.metadata().at("value_dtype"), "bf16");
      if (std::string(opt) == "sgd") {
        EXPECT_THROW(f.get("state"), Error);
      } else {
        EXPECT_EQ(f.get("state").dtype, DType::kF32);
      }
    }
    DynamicTable back(spec_of(opt, 12, "bf16"), Device::kCPU);
    EXPECT_EQ(embed::load_dynamic_table(ctx, back, dir.path()), t.size());
    EXPECT_EQ(rows_by_key(back, ctx), rows_by_key(t, ctx)) << opt;
    EXPECT_EQ(back.step(), t.step());
  }
}

// bf16 file -> f32 table (exact widening) -> f32 file -> bf16 table: the same bits throughout.
TEST(Bf16Table, CheckpointLoadsAcrossValueDtypes) {
  test::TempDir dir, dir2;
  Ctx ctx = cpu_ctx();
  DynamicTable t(spec_of("adam", 12, "bf16"), Device::kCPU);
  train_a_little(t, ctx);
  embed::save_dynamic_table(ctx, t, dir.path());
  DynamicTable wide(spec_of("adam", 12, "f32"), Device::kCPU);
  embed::load_dynamic_table(ctx, wide, dir.path());
  EXPECT_EQ(rows_by_key(wide, ctx), rows_by_key(t, ctx));
  const std::string p2 = embed::save_dynamic_table(ctx, wide, dir2.path());
  EXPECT_EQ(SafetensorsFile(p2).get("values").dtype, DType::kF32);
  DynamicTable narrow(spec_of("adam", 12, "bf16"), Device::kCPU);
  embed::load_dynamic_table(ctx, narrow, dir2.path());
  EXPECT_EQ(rows_by_key(narrow, ctx), rows_by_key(t, ctx));
  // An f32 table's own values load into a bf16 table rounded to nearest even.
  test::TempDir dir3;
  DynamicTable f(spec_of("sgd", 12, "f32"), Device::kCPU);
  train_a_little(f, ctx);
  embed::save_dynamic_table(ctx, f, dir3.path());
  DynamicTable r(spec_of("sgd", 12, "bf16"), Device::kCPU);
  embed::load_dynamic_table(ctx, r, dir3.path());
  const auto mf = rows_by_key(f, ctx), mr = rows_by_key(r, ctx);
  ASSERT_EQ(mf.size(), mr.size());
  for (const auto& [k, v] : mf)
    for (size_t c = 0; c < v.first.size(); ++c)
      ASSERT_EQ(mr.at(k).first[c], bits(round_bf16(from_bits(v.first[c]))));
}

}  // namespace
}  // namespace hstu
