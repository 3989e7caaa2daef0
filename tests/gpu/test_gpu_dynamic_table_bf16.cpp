// test_gpu_dynamic_table_bf16.cpp — the CUDA dynamic table with bf16 embedding values
// (value_dtype "bf16", optimiser state f32) against the CPU bf16 table and against itself:
//   - the same operation sequences on both backends give the same keys, refs, scores and
//     counters exactly, and values within a few bf16 ulps (the fp32 paths differ: CPU double,
//     CUDA float arithmetic, and libm vs CUDA log/cos in the initial values, so a result near a
//     rounding boundary may round to the neighbouring bf16);
//   - on CUDA, where the fp32 path is bitwise (the table's own f32 update), every bf16 row is
//     exactly round_bf16 of the f32 table's update of the same bf16-rounded row, state bitwise;
//   - the CUDA host tier holds the same bf16 rows as the device table, bit for bit;
//   - the fused backward equals reduce_grad + apply bit for bit (it takes that path for bf16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "common/embed_test_util.h"
#include "common/gpu_harness.h"
#include "embed/dynamic_table.h"
#include "embed/table_math.h"

namespace hstu {
namespace {

using embed::DynamicTable;
using embed::DynamicTableSpec;
using embed::round_bf16;

using test::gpu::DevVec;

// One step on the CUDA table with test::embed_cpu_step's inputs (apply, or with `backward` the
// fused backward over the lookups with dout row i = grad of its key).
test::EmbedStep cuda_step(DynamicTable& t, Ctx& ctx, const std::vector<int64_t>& keys, int64_t step,
                          const SparseOptimizerSpec& opt, bool backward = false) {
  const int64_t n = static_cast<int64_t>(keys.size()), d = t.spec().dim;
  DevVec<int64_t> dk(keys), du(n), refs(n);
  DevVec<int32_t> inv(n), cnt(n);
  const int64_t u = t.dedupe(ctx, dk.t(), du.t(), inv.t(), cnt.t());
  t.begin_step(step);
  t.find_or_insert(ctx, du.t(u), cnt.t(u), refs.t(u));
  DevVec<float> rows(u * d);
  t.gather(ctx, du.t(u), refs.t(u), Tensor(rows.p, DType::kF32, Device::kCUDA, {u, d}), true);
  test::EmbedStep s;
  s.unique = du.host(u);
  s.inverse = inv.host();
  s.counts = cnt.host(u);
  s.refs = refs.host(u);
  s.rows = rows.host();
  DevVec<uint8_t> touched(std::vector<uint8_t>(static_cast<size_t>(u), 1));
  if (!backward) {
    std::vector<float> g(static_cast<size_t>(u * d));
    for (int64_t i = 0; i < u; ++i)
      for (int64_t c = 0; c < d; ++c) g[i * d + c] = test::embed_grad(s.unique[i], c);
    DevVec<float> dg(g);
    t.apply(ctx, opt, refs.t(u), Tensor(dg.p, DType::kF32, Device::kCUDA, {u, d}), touched.t());
  } else {
    std::vector<float> dout(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < d; ++c) dout[i * d + c] = test::embed_grad(keys[i], c);
    DevVec<float> ddo(dout), scratch(u * d);
    t.backward(ctx, opt, refs.t(u), Tensor(ddo.p, DType::kF32, Device::kCUDA, {n, d}), 1.0f,
               Tensor(scratch.p, DType::kF32, Device::kCUDA, {u, d}), touched.t());
  }
  test::gpu::sync();
  return s;
}

DynamicTableSpec bf16_spec(const std::string& eviction, const std::string& opt, int64_t dim) {
  DynamicTableSpec s;
  s.name = "items";
  s.dim = dim;
  s.capacity_rows = 256;
  s.max_capacity_rows = 512;
  s.bucket_size = 16;
  s.eviction = eviction;
  s.optimizer = opt;
  s.lr = 0.01f;
  s.value_dtype = "bf16";
  return s;
}

// Within `ulps` bf16 ulps of the larger magnitude (plus a floor near zero).
bool near_bf16(float a, float b, int ulps) {
  const float m = std::max(std::abs(a), std::abs(b));
  return std::abs(a - b) <= 1e-6f + static_cast<float>(ulps) * std::ldexp(m, -7);
}

void compare_backends(const DynamicTableSpec& spec, int steps) {
  HSTU_REQUIRE_GPU();
  Ctx cctx = cpu_ctx(), gctx = test::gpu::cuda_ctx();
  DynamicTable cpu_t(spec, Device::kCPU), gpu_t(spec, Device::kCUDA);
  std::mt19937_64 rng(77);
  for (int s = 0; s < steps; ++s) {
    const std::vector<int64_t> keys = test::power_law_keys(rng, 200 + s * 13, 3000.0);
    const SparseOptimizerSpec opt = cpu_t.optimizer_spec(s + 1, spec.lr);
    const test::EmbedStep a = test::embed_cpu_step(cpu_t, cctx, keys, s, opt, test::embed_grad);
    const test::EmbedStep b = cuda_step(gpu_t, gctx, keys, s, opt);
    ASSERT_EQ(a.unique, b.unique) << "step " << s;
    for (size_t i = 0; i < a.refs.size(); ++i)
      ASSERT_EQ(a.refs[i] >= 0, b.refs[i] >= 0) << "key " << a.unique[i] << " step " << s;
    for (size_t i = 0; i < a.rows.size(); ++i) {
      ASSERT_EQ(round_bf16(b.rows[i]), b.rows[i]) << "gathered values are bf16";
      ASSERT_TRUE(near_bf16(a.rows[i], b.rows[i], 4)) << a.rows[i] << " vs " << b.rows[i];
    }
    ASSERT_EQ(cpu_t.counters().size, gpu_t.counters().size);
    ASSERT_EQ(cpu_t.counters().evictions, gpu_t.counters().evictions);
  }
  const embed::TableRows ra = cpu_t.export_rows(cctx), rb = gpu_t.export_rows(gctx);
  ASSERT_EQ(ra.keys, rb.keys);
  ASSERT_EQ(ra.scores, rb.scores);
  const int64_t w = cpu_t.row_width(), d = spec.dim;
  for (size_t i = 0; i < ra.values.size(); ++i) {
    const bool value = static_cast<int64_t>(i) % w < d;
    if (value)
      ASSERT_TRUE(near_bf16(ra.values[i], rb.values[i], 4)) << i;
    else  // f32 state: as the f32 tables' comparison
      ASSERT_NEAR(ra.values[i], rb.values[i], 1e-5 + 1e-2 * std::abs(ra.values[i])) << i;
  }
}

TEST(GpuDynamicTableBf16, LruAdamMatchesCpu) {
  compare_backends(bf16_spec("lru", "adam", 36), 10);  // 36: padded to 40 values
}
TEST(GpuDynamicTableBf16, LfuSgdMatchesCpu) {
  compare_backends(bf16_spec("lfu", "sgd", 128), 10);
}
TEST(GpuDynamicTableBf16, RowWiseAdagradMatchesCpu) {
  DynamicTableSpec s = bf16_spec("none", "row_wise_adagrad", 40);
  s.max_capacity_rows = 4096;  // no eviction: room for every key (it still grows from 256)
  compare_backends(s, 8);
}

// On CUDA: the bf16 table's update = round_bf16 of the f32 table's update of the same rows.
TEST(GpuDynamicTableBf16, UpdateIsTheRoundedF32Update) {
  HSTU_REQUIRE_GPU();
  Ctx ctx = test::gpu::cuda_ctx();
  for (const char* opt : {"sgd", "adam", "row_wise_adagrad"})
    for (const int64_t dim : {int64_t{36}, int64_t{128}}) {
      DynamicTableSpec sb = bf16_spec("lru", opt, dim);
      sb.max_capacity_rows = 4096;  // room for every key: f imports all of b's rows
      DynamicTableSpec sf = sb;
      sf.value_dtype = "f32";
      DynamicTable b(sb, Device::kCUDA), f(sf, Device::kCUDA);
      std::mt19937_64 rng(5);
      for (int64_t step = 1; step <= 4; ++step) {
        const std::vector<int64_t> keys = test::power_law_keys(rng, 120, 400.0);
        const SparseOptimizerSpec spec = b.optimizer_spec(step, 0.02f);
        cuda_step(b, ctx, keys, step, spec);  // trains b's rows away from their initial values
      }
      // One more step, compared: f holds exactly b's rows, both take the same update.
      const embed::TableRows before = b.export_rows(ctx);
      f.import_rows(ctx, before.keys, before.values, b.row_width());
      const std::vector<int64_t> keys(before.keys.begin(), before.keys.end());
      const SparseOptimizerSpec spec = b.optimizer_spec(5, 0.02f);
      cuda_step(b, ctx, keys, 5, spec);
      cuda_step(f, ctx, keys, 5, spec);
      const embed::TableRows rb = b.export_rows(ctx), rf = f.export_rows(ctx);
      std::map<int64_t, size_t> at;
      for (size_t i = 0; i < rf.keys.size(); ++i) at[rf.keys[i]] = i;
      const int64_t w = b.row_width();
      for (size_t i = 0; i < rb.keys.size(); ++i) {
        const float* vb = &rb.values[i * w];
        const float* vf = &rf.values[at.at(rb.keys[i]) * w];
        for (int64_t c = 0; c < dim; ++c) {
          const float want = round_bf16(vf[c]);
          ASSERT_EQ(std::memcmp(&vb[c], &want, 4), 0) << opt << " dim " << dim << " col " << c;
        }
        ASSERT_EQ(std::memcmp(vb + dim, vf + dim, static_cast<size_t>(w - dim) * 4), 0)
            << opt << " state";
      }
    }
}

TEST(GpuDynamicTableBf16, HostTierAndBackwardAreBitwise) {
  HSTU_REQUIRE_GPU();
  Ctx ctx = test::gpu::cuda_ctx();
  DynamicTableSpec s = bf16_spec("lru", "adam", 36);
  s.max_capacity_rows = 1024;
  DynamicTable flat(s, Device::kCUDA), fused(s, Device::kCUDA);
  s.gpu_cache_rows = 64;
  DynamicTable tier(s, Device::kCUDA);
  std::mt19937_64 rng(3);
  for (int step = 0; step < 12; ++step) {
    std::vector<int64_t> keys = test::power_law_keys(rng, 150, 2000.0);
    std::sort(keys.begin(), keys.end());  // distinct lookups: backward's sums equal apply's grads
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    const SparseOptimizerSpec opt = flat.optimizer_spec(step + 1, s.lr);
    const test::EmbedStep a = cuda_step(flat, ctx, keys, step, opt);
    const test::EmbedStep b = cuda_step(tier, ctx, keys, step, opt);
    const test::EmbedStep c = cuda_step(fused, ctx, keys, step, opt, /*backward=*/true);
    ASSERT_EQ(a.rows, b.rows) << "step " << step;
    ASSERT_EQ(a.rows, c.rows) << "step " << step;
  }
  EXPECT_GT(tier.counters().cache_evictions, 0);
  const embed::TableRows ra = flat.export_rows(ctx), rb = tier.export_rows(ctx),
                         rc = fused.export_rows(ctx);
  EXPECT_EQ(test::rows_by_key(ra, flat.row_width()), test::rows_by_key(rb, flat.row_width()));
  EXPECT_EQ(ra.keys, rc.keys);
  EXPECT_EQ(ra.values, rc.values);
}

}  // namespace
}  // namespace hstu
