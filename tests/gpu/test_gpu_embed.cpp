// test_gpu_embed.cpp — the CUDA dynamic table against the CPU reference on the same operation
// sequences (dedupe, find_or_insert with growth / LRU / LFU eviction / admission, gather, the
// fused optimisers, erase, export), the CUDA host tier against the CUDA table without one, and
// the CUDA fused optimisers bit for bit against the CUDA sparse_optimizer_step.
//
// Keys, refs' presence, scores, sizes and counters must match exactly (the insert kernel places
// a bucket's keys in the CPU's order). Values are compared with a tolerance: the CPU optimisers
// compute in double and the CUDA ones in float (as ops' sparse_optimizer_step on each backend),
// and the initial values use double log/cos, whose last bits may differ between libm and CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/dedupe_check.h"
#include "common/embed_test_util.h"
#include "common/gpu_harness.h"
#include "embed/dynamic_table.h"
#include "embed/table_math.h"
#include "embed/table_ops.h"
#include "ops/embedding.h"

namespace hstu {
namespace {

using embed::DynamicTable;
using embed::DynamicTableSpec;

using test::gpu::DevVec;

// One step on the CUDA table with the same inputs as test::embed_cpu_step.
test::EmbedStep cuda_step(DynamicTable& t, Ctx& ctx, const std::vector<int64_t>& keys, int64_t step,
                          const SparseOptimizerSpec& opt, float (*grad)(int64_t, int64_t)) {
  const int64_t n = static_cast<int64_t>(keys.size()), d = t.spec().dim;
  DevVec<int64_t> dk(keys), du(n), refs(n);
  DevVec<int32_t> inv(n), cnt(n);
  const int64_t u = t.dedupe(ctx, dk.t(), du.t(), inv.t(), cnt.t());
  t.begin_step(step);
  t.find_or_insert(ctx, du.t(u), cnt.t(u), refs.t(u));
  DevVec<float> rows(u * d);
  Tensor out(rows.p, DType::kF32, Device::kCUDA, {u, d});
  t.gather(ctx, du.t(u), refs.t(u), out, true);
  test::EmbedStep s;
  s.unique = du.host(u);
  s.inverse = inv.host();
  s.counts = cnt.host(u);
  s.refs = refs.host(u);
  s.rows = rows.host();
  std::vector<float> g(static_cast<size_t>(u * d));
  for (int64_t i = 0; i < u; ++i)
    for (int64_t c = 0; c < d; ++c) g[i * d + c] = grad(s.unique[i], c);
  DevVec<float> dg(g);
  DevVec<uint8_t> touched(std::vector<uint8_t>(static_cast<size_t>(u), 1));
  t.apply(ctx, opt, refs.t(u), Tensor(dg.p, DType::kF32, Device::kCUDA, {u, d}), touched.t());
  test::gpu::sync();
  return s;
}

void compare_backends(DynamicTableSpec spec, int steps) {
  HSTU_REQUIRE_GPU();
  Ctx cctx = cpu_ctx(), gctx = test::gpu::cuda_ctx();
  DynamicTable cpu_t(spec, Device::kCPU), gpu_t(spec, Device::kCUDA);
  std::mt19937_64 rng(77);
  for (int s = 0; s < steps; ++s) {
    const std::vector<int64_t> keys = test::power_law_keys(rng, 200 + s * 13, 3000.0);
    const SparseOptimizerSpec opt = cpu_t.optimizer_spec(s + 1, spec.lr);
    const test::EmbedStep a = test::embed_cpu_step(cpu_t, cctx, keys, s, opt, test::embed_grad);
    const test::EmbedStep b = cuda_step(gpu_t, gctx, keys, s, opt, test::embed_grad);
    ASSERT_EQ(a.unique, b.unique) << "step " << s;
    ASSERT_EQ(a.counts, b.counts);
    ASSERT_EQ(std::vector<int32_t>(a.inverse.begin(), a.inverse.begin() + keys.size()),
              std::vector<int32_t>(b.inverse.begin(), b.inverse.begin() + keys.size()));
    for (size_t i = 0; i < a.refs.size(); ++i)
      ASSERT_EQ(a.refs[i] >= 0, b.refs[i] >= 0) << "key " << a.unique[i] << " step " << s;
    for (size_t i = 0; i < a.rows.size(); ++i)
      ASSERT_NEAR(a.rows[i], b.rows[i], 1e-5 + 1e-4 * std::abs(a.rows[i])) << "step " << s;
    const embed::DynamicTableCounters ca = cpu_t.counters(), cb = gpu_t.counters();
    ASSERT_EQ(ca.size, cb.size);
    ASSERT_EQ(ca.inserts, cb.inserts);
    ASSERT_EQ(ca.evictions, cb.evictions);
    ASSERT_EQ(ca.rejections, cb.rejections);
    ASSERT_EQ(ca.capacity, cb.capacity);
  }
  const embed::TableRows ra = cpu_t.export_rows(cctx), rb = gpu_t.export_rows(gctx);
  ASSERT_EQ(ra.keys, rb.keys);  // slot order: the same slots on both backends
  ASSERT_EQ(ra.scores, rb.scores);
  for (size_t i = 0; i < ra.values.size(); ++i)
    ASSERT_NEAR(ra.values[i], rb.values[i], 1e-5 + 1e-4 * std::abs(ra.values[i]));
}

DynamicTableSpec spec_of(const std::string& eviction, const std::string& opt, int64_t cap,
                         int64_t max_cap) {
  DynamicTableSpec s;
  s.name = "items";
  s.dim = 40;  // not a multiple of 32: partial warps
  s.capacity_rows = cap;
  s.max_capacity_rows = max_cap;
  s.bucket_size = 16;
  s.eviction = eviction;
  s.optimizer = opt;
  s.lr = 0.01f;
  return s;
}

TEST(GpuDynamicTable, LruSgdMatchesCpu) {
  compare_backends(spec_of("lru", "sgd", 256, 512), 12);
}
TEST(GpuDynamicTable, LfuAdamMatchesCpu) {
  compare_backends(spec_of("lfu", "adam", 256, 256), 12);
}
TEST(GpuDynamicTable, GrowthRowWiseAdagradMatchesCpu) {
  compare_backends(spec_of("none", "row_wise_adagrad", 64, 1 << 16), 10);
}
TEST(GpuDynamicTable, AdmissionMatchesCpu) {
  DynamicTableSpec s = spec_of("lru", "adam", 512, 512);
  s.admit_threshold = 3;
  compare_backends(s, 12);
}

TEST(GpuDynamicTable, HostTierEqualsDeviceTable) {
  HSTU_REQUIRE_GPU();
  Ctx ctx = test::gpu::cuda_ctx();
  DynamicTableSpec s = spec_of("lru", "adam", 512, 1024);
  DynamicTable flat(s, Device::kCUDA);
  s.gpu_cache_rows = 64;
  DynamicTable tier(s, Device::kCUDA);
  std::mt19937_64 rng(3);
  for (int step = 0; step < 15; ++step) {
    const std::vector<int64_t> keys = test::power_law_keys(rng, 150, 2000.0);
    const SparseOptimizerSpec opt = flat.optimizer_spec(step + 1, s.lr);
    const test::EmbedStep a = cuda_step(flat, ctx, keys, step, opt, test::embed_grad);
    const test::EmbedStep b = cuda_step(tier, ctx, keys, step, opt, test::embed_grad);
    ASSERT_EQ(a.rows, b.rows) << "step " << step;  // same backend: bit for bit
  }
  EXPECT_GT(tier.counters().cache_evictions, 0);
  const embed::TableRows ra = flat.export_rows(ctx), rb = tier.export_rows(ctx);
  EXPECT_EQ(test::rows_by_key(ra, flat.row_width()), test::rows_by_key(rb, flat.row_width()));
}

// The CUDA fused optimisers equal the CUDA dense-table sparse optimiser bit for bit.
TEST(GpuDynamicTable, FusedOptimizersBitwiseEqualCudaSparseOptimizerStep) {
  HSTU_REQUIRE_GPU();
  Ctx ctx = test::gpu::cuda_ctx();
  for (const std::string opt_name : {"sgd", "adam", "row_wise_adagrad"}) {
    for (const int64_t kDim : {int64_t{40}, int64_t{128}}) {  // 128: the 16-byte kernels
      constexpr int64_t kRows = 50;
      DynamicTableSpec s = spec_of("lru", opt_name, 256, 256);
      s.dim = kDim;
      DynamicTable t(s, Device::kCUDA);
      std::vector<float> w(kRows * kDim);
      std::mt19937 rng(9);
      for (auto& x : w) x = std::uniform_real_distribution<float>(-0.05f, 0.05f)(rng);
      std::vector<int64_t> ids(kRows);
      for (int64_t r = 0; r < kRows; ++r) ids[r] = r * 3 + 1;
      t.import_rows(ctx, ids, w, kDim);
      DevVec<float> dw(w), dg(std::vector<float>(kRows * kDim, 0.0f)),
          dm(std::vector<float>(kRows * kDim, 0.0f)), dv(std::vector<float>(kRows * kDim, 0.0f));
      for (int64_t step = 1; step <= 3; ++step) {
        std::vector<int32_t> rows;
        for (int32_t r = 0; r < kRows; ++r)
          if (rng() % 3) rows.push_back(r);
        const int64_t u = static_cast<int64_t>(rows.size());
        std::vector<float> g(static_cast<size_t>(u * kDim));
        for (auto& x : g) x = std::uniform_real_distribution<float>(-1, 1)(rng);
        std::vector<float> full(kRows * kDim, 0.0f);
        for (int64_t i = 0; i < u; ++i) std::copy_n(&g[i * kDim], kDim, &full[rows[i] * kDim]);
        HSTU_CUDA_CHECK(cudaMemcpy(dg.p, full.data(), full.size() * 4, cudaMemcpyHostToDevice));
        const SparseOptimizerSpec spec = t.optimizer_spec(step, 0.01f * static_cast<float>(step));
        DevVec<int32_t> drows(rows), dcount(std::vector<int32_t>{static_cast<int32_t>(u)});
        Tensor tm, tv;
        if (opt_name == "adam") {
          tm = Tensor(dm.p, DType::kF32, Device::kCUDA, {kRows, kDim});
          tv = Tensor(dv.p, DType::kF32, Device::kCUDA, {kRows, kDim});
        } else if (opt_name == "row_wise_adagrad") {
          tm = Tensor(dm.p, DType::kF32, Device::kCUDA, {kRows});
        }
        sparse_optimizer_step(ctx, spec, Tensor(dw.p, DType::kF32, Device::kCUDA, {kRows, kDim}),
                              Tensor(dg.p, DType::kF32, Device::kCUDA, {kRows, kDim}), drows.t(),
                              dcount.t(), tm, tv);
        std::vector<int64_t> keys(static_cast<size_t>(u));
        for (int64_t i = 0; i < u; ++i) keys[i] = ids[rows[i]];
        DevVec<int64_t> dk(keys), refs(u);
        DevVec<int32_t> cnt(std::vector<int32_t>(static_cast<size_t>(u), 1));
        t.begin_step(step);
        t.find_or_insert(ctx, dk.t(), cnt.t(), refs.t());
        DevVec<float> gg(g);
        DevVec<uint8_t> touched(std::vector<uint8_t>(static_cast<size_t>(u), 1));
        t.apply(ctx, spec, refs.t(), Tensor(gg.p, DType::kF32, Device::kCUDA, {u, kDim}),
                touched.t());
      }
      const std::vector<float> hw = dw.host(), hm = dm.host(), hv = dv.host();
      const embed::TableRows out = t.export_rows(ctx);
      const int64_t rw = t.row_width();
      for (size_t i = 0; i < out.keys.size(); ++i) {
        const int64_t r = (out.keys[i] - 1) / 3;
        ASSERT_EQ(std::memcmp(&out.values[i * rw], &hw[r * kDim], kDim * 4), 0) << opt_name;
        if (opt_name == "adam") {
          ASSERT_EQ(std::memcmp(&out.values[i * rw + kDim], &hm[r * kDim], kDim * 4), 0);
          ASSERT_EQ(std::memcmp(&out.values[i * rw + 2 * kDim], &hv[r * kDim], kDim * 4), 0);
        } else if (opt_name == "row_wise_adagrad") {
          ASSERT_EQ(std::memcmp(&out.values[i * rw + kDim], &hm[r], 4), 0);
        }
      }
    }
  }
}

// reduce_grad on CUDA (chunks of 32 sorted lookups per warp, hot keys spanning many chunks)
// against the CPU's per-key sums in position order; touched exactly.
TEST(GpuDynamicTable, ReduceGradMatchesCpu) {
  HSTU_REQUIRE_GPU();
  Ctx cctx = cpu_ctx(), gctx = test::gpu::cuda_ctx();
  for (const int64_t dim : {int64_t{40}, int64_t{128}, int64_t{130}}) {
    DynamicTableSpec s = spec_of("lru", "sgd", 4096, 4096);
    s.dim = dim;
    DynamicTable ct(s, Device::kCPU), gt(s, Device::kCUDA);
    std::mt19937_64 rng(21);
    std::vector<int64_t> keys = test::power_law_keys(rng, 6000, 400.0);  // hot keys: ~1000 lookups
    const int64_t n = static_cast<int64_t>(keys.size());
    std::vector<float> dout(static_cast<size_t>(n * dim));
    for (auto& x : dout) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<int64_t> cu(n);
    std::vector<int32_t> ci(n), cc(n);
    const int64_t u = ct.dedupe(cctx, test::vec_tensor(keys), test::vec_tensor(cu),
                                test::vec_tensor(ci), test::vec_tensor(cc));
    std::vector<float> cg(static_cast<size_t>(u * dim), 0.0f);
    std::vector<uint8_t> ctouch(static_cast<size_t>(u), 0);
    ct.reduce_grad(cctx, Tensor(dout.data(), DType::kF32, Device::kCPU, {n, dim}), 0.5f,
                   Tensor(cg.data(), DType::kF32, Device::kCPU, {u, dim}),
                   test::vec_tensor(ctouch));
    DevVec<int64_t> dk(keys), du(n);
    DevVec<int32_t> di(n), dc(n);
    ASSERT_EQ(gt.dedupe(gctx, dk.t(), du.t(), di.t(), dc.t()), u);
    DevVec<float> dd(dout), dg(std::vector<float>(static_cast<size_t>(u * dim), 0.0f));
    DevVec<uint8_t> dt(std::vector<uint8_t>(static_cast<size_t>(u), 0));
    gt.reduce_grad(gctx, Tensor(dd.p, DType::kF32, Device::kCUDA, {n, dim}), 0.5f,
                   Tensor(dg.p, DType::kF32, Device::kCUDA, {u, dim}), dt.t());
    const std::vector<float> gg = dg.host();
    ASSERT_EQ(dt.host(), ctouch);
    std::vector<double> abs_sum(static_cast<size_t>(u * dim), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c)
        abs_sum[ci[i] * dim + c] += 0.5 * std::abs(static_cast<double>(dout[i * dim + c]));
    int64_t hot = 0;
    for (int64_t k = 0; k < u; ++k) hot = std::max<int64_t>(hot, cc[k]);
    ASSERT_GT(hot, 64) << "the test needs keys spanning several chunks";
    for (size_t e = 0; e < cg.size(); ++e)
      ASSERT_NEAR(cg[e], gg[e], 1e-6 + 1e-5 * abs_sum[e]) << "dim " << dim << " element " << e;
  }
}

// dedupe_tables on CUDA (all tables' lookups sorted together) equals each table's CPU dedupe
// exactly, and its saved order drives reduce_grad as the table's own dedupe does.
TEST(GpuDynamicTable, DedupeTablesMatchesCpu) {
  HSTU_REQUIRE_GPU();
  Ctx cctx = cpu_ctx(), gctx = test::gpu::cuda_ctx();
  constexpr int kTables = 5;
  constexpr int64_t kDim = 128;
  std::mt19937_64 rng(8);
  std::vector<std::unique_ptr<DynamicTable>> ct, gt;
  std::vector<std::vector<int64_t>> keys(kTables);
  std::vector<std::unique_ptr<DevVec<int64_t>>> dk, du;
  std::vector<std::unique_ptr<DevVec<int32_t>>> di, dc;
  std::vector<DynamicTable::DedupeCall> calls;
  for (int t = 0; t < kTables; ++t) {
    DynamicTableSpec s = spec_of("lru", "sgd", 4096, 4096);
    s.name = "t" + std::to_string(t);
    s.dim = kDim;
    ct.push_back(std::make_unique<DynamicTable>(s, Device::kCPU));
    gt.push_back(std::make_unique<DynamicTable>(s, Device::kCUDA));
    // Table 1 shares table 0's keys; table 3 is empty; others their own.
    keys[t] = t == 3 ? std::vector<int64_t>{} : test::power_law_keys(rng, 3000 + 700 * t, 500.0);
    if (t == 1) keys[1] = keys[0];
    const int64_t n = static_cast<int64_t>(keys[t].size());
    dk.push_back(std::make_unique<DevVec<int64_t>>(keys[t]));
    du.push_back(std::make_unique<DevVec<int64_t>>(n));
    di.push_back(std::make_unique<DevVec<int32_t>>(n));
    dc.push_back(std::make_unique<DevVec<int32_t>>(n));
    calls.push_back({gt[t].get(), dk[t]->t(), du[t]->t(), di[t]->t(), dc[t]->t(), -1});
  }
  DynamicTable::dedupe_tables(gctx, calls);
  for (int t = 0; t < kTables; ++t) {
    const int64_t n = static_cast<int64_t>(keys[t].size());
    std::vector<int64_t> cu(n);
    std::vector<int32_t> ci(n), cc(n);
    const int64_t u = ct[t]->dedupe(cctx, test::vec_tensor(keys[t]), test::vec_tensor(cu),
                                    test::vec_tensor(ci), test::vec_tensor(cc));
    ASSERT_EQ(calls[t].u, u) << "table " << t;
    if (n == 0) continue;
    ASSERT_EQ(du[t]->host(u), std::vector<int64_t>(cu.begin(), cu.begin() + u)) << t;
    ASSERT_EQ(di[t]->host(), ci) << t;
    ASSERT_EQ(dc[t]->host(u), std::vector<int32_t>(cc.begin(), cc.begin() + u)) << t;
    // The order reduce_grad reads: the summed gradient equals the CPU's.
    std::vector<float> dout(static_cast<size_t>(n * kDim));
    for (auto& x : dout) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<float> cg(static_cast<size_t>(u * kDim), 0.0f);
    std::vector<uint8_t> ctouch(static_cast<size_t>(u), 0);
    ct[t]->reduce_grad(cctx, Tensor(dout.data(), DType::kF32, Device::kCPU, {n, kDim}), 1.0f,
                       Tensor(cg.data(), DType::kF32, Device::kCPU, {u, kDim}),
                       test::vec_tensor(ctouch));
    DevVec<float> dd(dout), dg(std::vector<float>(static_cast<size_t>(u * kDim), 0.0f));
    DevVec<uint8_t> dt(std::vector<uint8_t>(static_cast<size_t>(u), 0));
    gt[t]->reduce_grad(gctx, Tensor(dd.p, DType::kF32, Device::kCUDA, {n, kDim}), 1.0f,
                       Tensor(dg.p, DType::kF32, Device::kCUDA, {u, kDim}), dt.t());
    ASSERT_EQ(dt.host(), ctouch);
    const std::vector<float> gg = dg.host();
    for (size_t e = 0; e < cg.size(); ++e)
      ASSERT_NEAR(cg[e], gg[e], 1e-3) << "table " << t << " element " << e;
  }
}

// The order both dedupes save for the backward (positions by (key, position), segment ends, the
// key of each sorted entry) on CUDA equals the CPU's exactly, for one table and for several
// tables deduplicated together (dedupe_many).
TEST(GpuDynamicTable, DedupeOrderMatchesCpu) {
  HSTU_REQUIRE_GPU();
  std::mt19937_64 rng(12);
  constexpr int kJobs = 4;
  std::vector<std::vector<int64_t>> keys(kJobs);
  for (int j = 0; j < 3; ++j) keys[j] = test::power_law_keys(rng, 2000 + 900 * j, 300.0);
  // The reserved key among a job's lookups comes first (so callers throw for it).
  keys[3] = std::vector<int64_t>{5, embed::kEmptyKey, 5, -3, embed::kEmptyKey, INT64_MAX, -3, 5};
  const test::DedupeCheck c = test::expect_dedupe_matches_cpu(keys, "order");
  test::expect_single_dedupe_matches_cpu(keys[2]);  // one table's dedupe
  EXPECT_EQ(c.first[3], embed::kEmptyKey);
}

// lookup (rows straight to the lookups' output) and the fused backward (per-key sums applied by
// the optimiser, hot keys through grad) on CUDA against the CPU, step after step, SGD and Adam
// at dim 128 and 40 (the 16-byte kernels) and 42 (the scalar path), row-wise Adagrad at 128, with
// keys spanning many chunks and grad / touched poisoned on entry; outputs and final rows.
TEST(GpuDynamicTable, LookupAndFusedBackwardMatchCpu) {
  HSTU_REQUIRE_GPU();
  Ctx cctx = cpu_ctx(), gctx = test::gpu::cuda_ctx();
  for (const char* opt : {"sgd", "adam", "row_wise_adagrad", "sgd@40", "sgd@42", "adam@42"}) {
    const std::string name(opt);
    const size_t at = name.find('@');
    DynamicTableSpec s = spec_of("lru", name.substr(0, at), 8192, 8192);
    // 40: the 16-byte kernels with idle lanes; 42 (not a multiple of 4): the scalar path.
    s.dim = at == std::string::npos ? 128 : std::stoll(name.substr(at + 1));
    DynamicTable ct(s, Device::kCPU), gt(s, Device::kCUDA);
    std::mt19937_64 rng(31);
    for (int step = 0; step < 3; ++step) {
      std::vector<int64_t> keys = test::power_law_keys(rng, 5000, 400.0);
      const int64_t n = static_cast<int64_t>(keys.size()), d = s.dim;
      std::vector<float> dout(static_cast<size_t>(n * d));
      for (auto& x : dout) x = std::uniform_real_distribution<float>(-1, 1)(rng);
      const SparseOptimizerSpec spec = ct.optimizer_spec(step + 1, s.lr);
      // CPU
      std::vector<int64_t> cu(n), crefs(n);
      std::vector<int32_t> ci(n), cc(n);
      const int64_t u = ct.dedupe(cctx, test::vec_tensor(keys), test::vec_tensor(cu),
                                  test::vec_tensor(ci), test::vec_tensor(cc));
      ct.begin_step(step);
      std::vector<int64_t> cuk(cu.begin(), cu.begin() + u);
      std::vector<int32_t> cck(cc.begin(), cc.begin() + u);
      crefs.resize(static_cast<size_t>(u));
      ct.find_or_insert(cctx, test::vec_tensor(cuk), test::vec_tensor(cck),
                        test::vec_tensor(crefs));
      // backward's grad and touched are scratch (any contents on entry): poisoned on both.
      std::vector<float> cout(static_cast<size_t>(n * d)),
          cg(static_cast<size_t>(u * d), std::nanf(""));
      std::vector<uint8_t> ctouch(static_cast<size_t>(u), 1);
      ct.lookup(cctx, test::vec_tensor(cuk), test::vec_tensor(crefs), test::vec_tensor(ci),
                Tensor(cout.data(), DType::kF32, Device::kCPU, {n, d}), true);
      ct.backward(cctx, spec, test::vec_tensor(crefs),
                  Tensor(dout.data(), DType::kF32, Device::kCPU, {n, d}), 1.0f,
                  Tensor(cg.data(), DType::kF32, Device::kCPU, {u, d}), test::vec_tensor(ctouch));
      // CUDA
      DevVec<int64_t> dk(keys), du(n), drefs(n);
      DevVec<int32_t> di(n), dc(n);
      ASSERT_EQ(gt.dedupe(gctx, dk.t(), du.t(), di.t(), dc.t()), u);
      gt.begin_step(step);
      gt.find_or_insert(gctx, du.t(u), dc.t(u), drefs.t(u));
      DevVec<float> dout_d(dout), out_d(n * d), g_d(std::vector<float>(u * d, std::nanf("")));
      DevVec<uint8_t> t_d(std::vector<uint8_t>(static_cast<size_t>(u), 1));
      gt.lookup(gctx, du.t(u), drefs.t(u), di.t(),
                Tensor(out_d.p, DType::kF32, Device::kCUDA, {n, d}), true);
      gt.backward(gctx, spec, drefs.t(u), Tensor(dout_d.p, DType::kF32, Device::kCUDA, {n, d}),
                  1.0f, Tensor(g_d.p, DType::kF32, Device::kCUDA, {u, d}), t_d.t());
      const std::vector<float> gout = out_d.host();
      for (size_t e = 0; e < cout.size(); ++e)
        ASSERT_NEAR(cout[e], gout[e], 1e-5 + 1e-4 * std::abs(cout[e])) << opt << " step " << step;
      // The CPU leaves grad and touched zero (the GPU leaves them unspecified).
      ASSERT_EQ(ctouch, std::vector<uint8_t>(static_cast<size_t>(u), 0));
    }
    const embed::TableRows ra = ct.export_rows(cctx), rb = gt.export_rows(gctx);
    ASSERT_EQ(ra.keys, rb.keys);
    for (size_t i = 0; i < ra.values.size(); ++i)
      ASSERT_NEAR(ra.values[i], rb.values[i], 1e-5 + 1e-4 * std::abs(ra.values[i])) << opt;
  }
}

}  // namespace
}  // namespace hstu
